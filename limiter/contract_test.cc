// The contract of limiter.h, run over all seven algorithms (one test body, every configuration).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "limiter/limiter.h"
#include "limiter/test_util.h"

namespace ringlimit::limiter {
namespace {

using testing::At;
using testing::Spec;

constexpr TimeNs kT0 = 1'700'000'000LL * kSecond;

void ExpectSameDecision(const Decision& a, const Decision& b) {
  EXPECT_EQ(a.allowed, b.allowed);
  EXPECT_EQ(a.would_deny, b.would_deny);
  EXPECT_EQ(a.beyond_limit, b.beyond_limit);
  EXPECT_EQ(a.limit, b.limit);
  EXPECT_EQ(a.remaining, b.remaining);
  EXPECT_EQ(a.reset_after, b.reset_after);
  EXPECT_EQ(a.retry_after, b.retry_after);
  EXPECT_EQ(a.delay, b.delay);
}

class Contract : public ::testing::TestWithParam<Algorithm> {
 protected:
  // `limit` units per `window`, able to admit `limit` units at once (gcra: burst = limit - 1).
  LimitSpec Make(uint64_t limit = 10, DurationNs window = kSecond) const {
    LimitSpec spec = Spec(GetParam(), limit, window);
    if (GetParam() == Algorithm::kGcra) {
      spec.burst = limit - 1;
    }
    if (GetParam() == Algorithm::kSlidingWindow) {
      spec.buckets = 10;
    }
    return spec;
  }
  static void Exhaust(const LimitSpec& spec, State& st, TimeNs now) {
    while (Check(spec, st, At(now)).allowed) {
    }
  }
  bool IsO1() const {
    return GetParam() != Algorithm::kSlidingLog && GetParam() != Algorithm::kSlidingWindow;
  }
};

TEST_P(Contract, CostZeroIsAReadOnlyPeek) {
  const LimitSpec spec = Make();
  State st;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Check(spec, st, At(kT0 + i * kMillisecond)).allowed);
  }
  for (bool exhausted : {false, true}) {
    if (exhausted) {
      Exhaust(spec, st, kT0 + 5 * kMillisecond);
    }
    const State before = st;
    const TimeNs now = kT0 + 6 * kMillisecond;
    Decision d = Check(spec, st, At(now, 0));
    EXPECT_TRUE(d.allowed);
    EXPECT_FALSE(d.would_deny);
    EXPECT_EQ(d.retry_after, 0);
    EXPECT_EQ(st, before);
    ExpectSameDecision(d, Peek(spec, st, At(now, 0)));
    EXPECT_EQ(d.remaining, exhausted ? 0u : 6u);
  }
}

TEST_P(Contract, CostAboveCapacityIsNeverAndChargesNothing) {
  for (bool count_denied : {false, true}) {
    LimitSpec spec = Make();
    spec.count_denied = count_denied;
    State st;
    ASSERT_TRUE(Check(spec, st, At(kT0)).allowed);
    const State before = st;
    for (uint64_t cost : {uint64_t{11}, kMaxCost, std::numeric_limits<uint64_t>::max()}) {
      Decision d = Check(spec, st, At(kT0 + kMillisecond, cost));
      EXPECT_FALSE(d.allowed);
      EXPECT_TRUE(d.would_deny);
      EXPECT_EQ(d.retry_after, kNever);
      EXPECT_EQ(st, before);
    }
    Decision d = Check(spec, st, At(kT0 + kMillisecond, 10));  // exactly the capacity: only waits
    EXPECT_FALSE(d.allowed);
    EXPECT_LT(d.retry_after, kNever);
  }
  // The ceiling of the mode counts: soft 50% admits 15 at once, not 16.
  LimitSpec soft = Make();
  soft.mode = Mode::kSoft;
  soft.soft_pct = 50;
  State st;
  EXPECT_EQ(Check(soft, st, At(kT0, 16)).retry_after, kNever);
  EXPECT_TRUE(Check(soft, st, At(kT0, 15)).allowed);
}

TEST_P(Contract, RemainingNeverExceedsLimitAndPeekMatchesCheck) {
  const LimitSpec spec = Make();
  std::mt19937_64 rng(7);
  State st;
  TimeNs t = kT0;
  for (int i = 0; i < 3000; ++i) {
    t += static_cast<DurationNs>(rng() % (80 * kMillisecond));
    const Request r = At(t, rng() % 4);
    const Decision peek = Peek(spec, st, r);
    const Decision d = Check(spec, st, r);
    ExpectSameDecision(peek, d);
    EXPECT_LE(d.remaining, spec.limit);
    if (d.allowed) {
      EXPECT_EQ(d.retry_after, 0);
    }
    if (!d.allowed) {
      EXPECT_GT(d.retry_after, 0);
    }
    if (IsO1()) {
      EXPECT_TRUE(st.tail.empty());
    }
  }
}

TEST_P(Contract, RetryAfterIsExact) {
  // A denied request of the same cost is admitted exactly retry_after later, and not 1 ns earlier.
  const LimitSpec spec = Make(10, kSecond);
  std::mt19937_64 rng(11);
  for (int round = 0; round < 200; ++round) {
    State st;
    TimeNs t = kT0 + static_cast<TimeNs>(rng() % kSecond);
    Decision d;
    uint64_t cost = 1;
    for (int i = 0; i < 40; ++i) {
      t += static_cast<DurationNs>(rng() % (30 * kMillisecond));
      cost = 1 + rng() % 3;
      d = Check(spec, st, At(t, cost));
      if (!d.allowed) {
        break;
      }
    }
    if (d.allowed) {
      continue;
    }
    ASSERT_LT(d.retry_after, kNever);
    EXPECT_TRUE(Peek(spec, st, At(t + d.retry_after, cost)).allowed) << round;
    if (d.retry_after > 1) {
      EXPECT_FALSE(Peek(spec, st, At(t + d.retry_after - 1, cost)).allowed) << round;
    }
  }
}

TEST_P(Contract, DeniedConsumesNothingUnlessCountDenied) {
  for (bool count_denied : {false, true}) {
    LimitSpec spec = Make();
    spec.count_denied = count_denied;
    State st;
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(Check(spec, st, At(kT0 + i * kMillisecond)).allowed);
    }
    const State before = st;
    const TimeNs now = kT0 + 20 * kMillisecond;
    const DurationNs wait = Peek(spec, st, At(now)).retry_after;
    Decision d = Check(spec, st, At(now));
    ASSERT_FALSE(d.allowed);
    EXPECT_EQ(d.remaining, 0u);
    if (!count_denied) {
      EXPECT_EQ(st, before);
    } else {
      // Charged: the caller has to wait at least as long as before the denied request.
      EXPECT_GE(Peek(spec, st, At(now)).retry_after, wait);
    }
  }
}

TEST_P(Contract, CheckAllIsAllOrNothing) {
  const LimitSpec mine = Make(10, kSecond);
  const LimitSpec tight = Spec(Algorithm::kFixedWindow, 3, kSecond);
  const LimitSpec loose = Make(100, 10 * kSecond);
  State a, b, c;
  const LimitSpec* specs[] = {&mine, &tight, &loose};
  State* states[] = {&a, &b, &c};
  Decision decisions[3];
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(CheckAll(specs, states, At(kT0), decisions));
  }
  EXPECT_EQ(decisions[0].remaining, 7u);
  EXPECT_EQ(decisions[2].remaining, 97u);
  const State a0 = a, b0 = b, c0 = c;
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(CheckAll(specs, states, At(kT0 + kMillisecond), decisions));
    EXPECT_TRUE(decisions[0].allowed);
    EXPECT_FALSE(decisions[1].allowed);
    EXPECT_EQ(decisions[0].remaining, 7u);  // figures of the uncharged state
    EXPECT_EQ(a, a0);
    EXPECT_EQ(b, b0);
    EXPECT_EQ(c, c0);
  }
  // A count_denied limit is charged for the denied request, the others still are not.
  LimitSpec counting = mine;
  counting.count_denied = true;
  const LimitSpec* specs2[] = {&counting, &tight, &loose};
  EXPECT_FALSE(CheckAll(specs2, states, At(kT0 + kMillisecond), decisions));
  EXPECT_EQ(decisions[0].remaining, 6u);
  EXPECT_EQ(c, c0);
}

TEST_P(Contract, TimeGoingBackwardsNeverMintsQuota) {
  const LimitSpec spec = Make();
  State st;
  Exhaust(spec, st, kT0);
  const State full = st;
  const TimeNs idle = IdleAt(spec, st);
  for (TimeNs back :
       {kT0 - 1, kT0 - kSecond, kT0 - 1000 * kSecond, TimeNs{0}, std::numeric_limits<TimeNs>::min()}) {
    Decision d = Check(spec, st, At(back));
    EXPECT_FALSE(d.allowed) << back;
    EXPECT_EQ(d.remaining, 0u);
    EXPECT_EQ(st, full);
  }
  EXPECT_EQ(IdleAt(spec, st), idle);
  // Interleaving past and present instants admits no more than the present alone would.
  std::mt19937_64 rng(5);
  State skewed, straight;
  TimeNs t = kT0 + 10 * kSecond;
  int admitted_skewed = 0, admitted_straight = 0;
  for (int i = 0; i < 2000; ++i) {
    t += static_cast<DurationNs>(rng() % (50 * kMillisecond));
    const TimeNs jitter = static_cast<TimeNs>(rng() % (3 * kSecond));
    admitted_skewed += Check(spec, skewed, At(i % 2 == 0 ? t : t - jitter)).allowed;
    admitted_straight += Check(spec, straight, At(t)).allowed;
  }
  EXPECT_LE(admitted_skewed, admitted_straight);
}

TEST_P(Contract, HugeLimitsWindowsCostsAndInstantsDoNotOverflow) {
  // UBSan (the -asan build) turns any signed overflow here into a failure.
  const bool log = GetParam() == Algorithm::kSlidingLog;
  for (DurationNs window : {kMinWindow, kSecond, kMaxWindow}) {
    for (uint64_t limit : {uint64_t{1}, uint64_t{1000}, log ? kMaxSlidingLogLimit : kMaxLimit}) {
      LimitSpec spec = Spec(GetParam(), limit, window);
      spec.buckets = static_cast<uint32_t>(std::min<int64_t>(kMaxBuckets, window / kMinWindow));
      if (GetParam() == Algorithm::kTokenBucket) {
        spec.burst = kMaxLimit;
      }
      if (GetParam() == Algorithm::kGcra) {
        spec.burst = kMaxLimit - 1;  // capacity burst + 1
      }
      if (GetParam() == Algorithm::kLeakyBucket) {
        spec.max_delay = window;
      }
      if (!log) {
        spec.mode = Mode::kSoft;
        spec.soft_pct = 1000;
      }
      ASSERT_EQ(Validate(spec), std::nullopt) << window << " " << limit;
      State st;
      for (TimeNs now : {std::numeric_limits<TimeNs>::min(), TimeNs{-1}, TimeNs{0}, kT0,
                         std::numeric_limits<TimeNs>::max() - 1, std::numeric_limits<TimeNs>::max()}) {
        for (uint64_t cost : {uint64_t{0}, uint64_t{1}, log ? uint64_t{50} : kMaxCost, ~uint64_t{0}}) {
          Decision d = Check(spec, st, At(now, cost));
          EXPECT_GE(d.reset_after, 0);
          EXPECT_GE(d.retry_after, 0);
          EXPECT_GE(d.delay, 0);
          EXPECT_LE(d.remaining, std::max<uint64_t>(limit, spec.burst + 1));
          (void)IdleAt(spec, st);
        }
      }
    }
  }
}

TEST_P(Contract, ParameterChangesPreserveUsageWithoutMinting) {
  State st;
  const LimitSpec ten = Make(10, kSecond);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Check(ten, st, At(kT0)).allowed);
  }
  // Raised: the 4 units used stay used.
  EXPECT_EQ(Peek(Make(20, kSecond), st, At(kT0, 0)).remaining, 16u);
  // Lowered below the usage: nothing left, and a wait rather than "never".
  Decision d = Peek(Make(3, kSecond), st, At(kT0));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.remaining, 0u);
  EXPECT_LT(d.retry_after, kNever);
  EXPECT_EQ(Peek(Make(4, kSecond), st, At(kT0, 0)).remaining, 0u);
  // Exhausted, then the window grows or shrinks: at the same instant still nothing is left.
  Exhaust(ten, st, kT0);
  EXPECT_EQ(Peek(Make(10, 10 * kSecond), st, At(kT0, 0)).remaining, 0u);
  EXPECT_EQ(Peek(Make(10, 100 * kMillisecond), st, At(kT0, 0)).remaining, 0u);
  // Charging under the new parameters then follows them: a 10x longer window is 10x slower.
  const LimitSpec slow = Make(10, 10 * kSecond);
  Decision later = Peek(slow, st, At(kT0));
  EXPECT_GE(later.retry_after, Peek(ten, st, At(kT0)).retry_after);
  EXPECT_FALSE(Check(slow, st, At(kT0 + kSecond / 2)).allowed);
  // Whatever happened before, remaining never exceeds the new capacity.
  for (uint64_t limit : {uint64_t{1}, uint64_t{5}, uint64_t{50}}) {
    EXPECT_LE(Peek(Make(limit, kSecond), st, At(kT0 + 100 * kSecond, 0)).remaining, limit);
  }
}

TEST_P(Contract, StateOfAnotherAlgorithmStartsFresh) {
  const LimitSpec spec = Make();
  for (Algorithm other : testing::AllAlgorithms()) {
    if (other == GetParam()) {
      continue;
    }
    LimitSpec o = Spec(other, 10, kSecond);
    if (other == Algorithm::kGcra) {
      o.burst = 9;
    }
    State st;
    Exhaust(o, st, kT0);
    EXPECT_EQ(IdleAt(spec, st), std::numeric_limits<TimeNs>::min());
    EXPECT_EQ(Peek(spec, st, At(kT0, 0)).remaining, 10u);
    EXPECT_TRUE(Check(spec, st, At(kT0, 10)).allowed);
    EXPECT_EQ(st.algorithm, GetParam());
    if (IsO1()) {
      EXPECT_TRUE(st.tail.empty());
    }
  }
}

TEST_P(Contract, IdleAtIsWhenTheStateIsBackToInitial) {
  const LimitSpec spec = Make();
  std::mt19937_64 rng(3);
  State st;
  TimeNs t = kT0;
  for (int i = 0; i < 300; ++i) {
    t += static_cast<DurationNs>(rng() % (40 * kMillisecond));
    (void)Check(spec, st, At(t, 1 + rng() % 2));
    const TimeNs idle = IdleAt(spec, st);
    ASSERT_GE(idle, t);
    const Decision at_idle = Peek(spec, st, At(idle, 0));
    EXPECT_EQ(at_idle.remaining, 10u);
    EXPECT_EQ(at_idle.reset_after, 0);
    const Decision now = Peek(spec, st, At(t, 0));
    EXPECT_EQ(now.reset_after, idle - t);
  }
}

TEST_P(Contract, SoftModeAdmitsUpToTheOvershootAndSaysSo) {
  LimitSpec spec = Make(10, kSecond);
  spec.mode = Mode::kSoft;
  spec.soft_pct = 20;
  State st;
  for (int i = 1; i <= 12; ++i) {
    Decision d = Check(spec, st, At(kT0));
    ASSERT_TRUE(d.allowed) << i;
    EXPECT_EQ(d.beyond_limit, i > 10);
    EXPECT_EQ(d.remaining, i >= 10 ? 0u : static_cast<uint64_t>(10 - i));
  }
  Decision d = Check(spec, st, At(kT0));
  EXPECT_FALSE(d.allowed);
  EXPECT_GT(d.retry_after, 0);
}

TEST_P(Contract, ShadowModeNeverDeniesAndTracksHardMode) {
  LimitSpec hard = Make();
  LimitSpec shadow = hard;
  shadow.mode = Mode::kShadow;
  std::mt19937_64 rng(9);
  State hs, ss;
  TimeNs t = kT0;
  int would_deny = 0;
  for (int i = 0; i < 2000; ++i) {
    t += static_cast<DurationNs>(rng() % (60 * kMillisecond));
    const Request r = At(t, 1 + rng() % 3);
    const Decision h = Check(hard, hs, r);
    const Decision s = Check(shadow, ss, r);
    EXPECT_TRUE(s.allowed);
    EXPECT_EQ(s.would_deny, !h.allowed);
    EXPECT_EQ(s.remaining, h.remaining);
    EXPECT_EQ(ss, hs);  // a dry run: the state evolves exactly as under hard mode
    would_deny += s.would_deny;
  }
  EXPECT_GT(would_deny, 100);
}

TEST_P(Contract, DynamicModeFollowsHeadroom) {
  LimitSpec spec = Make(10, kSecond);
  spec.mode = Mode::kDynamic;
  spec.dynamic_limit = 20;
  struct Case {
    double headroom;
    int admitted;
  };
  for (Case c : {Case{0., 10}, Case{0.5, 15}, Case{0.55, 15}, Case{1., 20}, Case{7., 20}, Case{-1., 10},
                 Case{std::nan(""), 10}}) {
    State st;
    Request r = At(kT0);
    r.headroom = c.headroom;
    int admitted = 0;
    while (Check(spec, st, r).allowed) {
      ++admitted;
    }
    EXPECT_EQ(admitted, c.admitted) << c.headroom;
  }
  // Denied for lack of headroom with a cost only the full ceiling admits: a finite retry_after.
  State st;
  Request big = At(kT0, 15);
  Decision d = Check(spec, st, big);
  EXPECT_FALSE(d.allowed);
  EXPECT_GT(d.retry_after, 0);
  EXPECT_LT(d.retry_after, kNever);
  big.headroom = 1.;
  d = Check(spec, st, big);
  EXPECT_TRUE(d.allowed);
  EXPECT_TRUE(d.beyond_limit);
}

TEST_P(Contract, StateBytes) {
  if (IsO1()) {
    EXPECT_LE(StateBytes(Make()), 24u);
  } else {
    EXPECT_GT(StateBytes(Make()), 24u);
  }
}

INSTANTIATE_TEST_SUITE_P(AllAlgorithms, Contract, ::testing::ValuesIn(testing::AllAlgorithms()),
                         testing::ParamName);

}  // namespace
}  // namespace ringlimit::limiter
