// Property tests over seeded random request streams (std::mt19937_64, fixed seeds): what each
// algorithm guarantees about the units it admits in any interval.
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <random>
#include <vector>

#include "limiter/limiter.h"
#include "limiter/test_util.h"

namespace ringlimit::limiter {
namespace {

using testing::At;
using testing::Spec;

struct Event {
  TimeNs t;
  uint64_t cost;
};

// A bursty stream: gaps up to `max_gap` with one request in four arriving together with the one
// before; costs 1..max_cost. Mean offered load is well above the limits used below.
std::vector<Event> RandomStream(uint64_t seed, int n, DurationNs max_gap, uint64_t max_cost) {
  std::mt19937_64 rng(seed);
  std::vector<Event> out;
  TimeNs t = 1'700'000'000LL * kSecond + static_cast<TimeNs>(rng() % kSecond);
  for (int i = 0; i < n; ++i) {
    if (rng() % 4 != 0) {
      t += static_cast<DurationNs>(rng() % static_cast<uint64_t>(max_gap));
    }
    out.push_back({t, 1 + rng() % max_cost});
  }
  return out;
}

std::vector<Event> Admitted(const LimitSpec& spec, const std::vector<Event>& stream) {
  State st;
  std::vector<Event> out;
  for (const Event& e : stream) {
    if (Check(spec, st, At(e.t, e.cost)).allowed) {
      out.push_back(e);
    }
  }
  return out;
}

// The most units admitted in any half-open interval (t - length, t] ending at an admission.
uint64_t MaxInAnyInterval(const std::vector<Event>& admitted, DurationNs length) {
  uint64_t best = 0, sum = 0;
  size_t lo = 0;
  for (size_t hi = 0; hi < admitted.size(); ++hi) {
    sum += admitted[hi].cost;
    while (admitted[lo].t <= admitted[hi].t - length) {
      sum -= admitted[lo++].cost;
    }
    best = std::max(best, sum);
  }
  return best;
}

// Whether every closed interval [t_i, t_j] holds at most capacity + limit * (t_j - t_i) / window.
bool WithinBurstPlusRate(const std::vector<Event>& admitted, uint64_t capacity, const LimitSpec& spec) {
  for (size_t i = 0; i < admitted.size(); ++i) {
    __int128 sum = 0;
    for (size_t j = i; j < admitted.size(); ++j) {
      sum += admitted[j].cost;
      const __int128 allowed = static_cast<__int128>(capacity) * spec.window +
                               static_cast<__int128>(spec.limit) * (admitted[j].t - admitted[i].t);
      if (sum * spec.window > allowed) {
        return false;
      }
    }
  }
  return true;
}

constexpr uint64_t kSeeds[] = {1, 2, 3, 42, 20260101};

TEST(Property, SlidingLogNeverExceedsLimitInAnyWindow) {
  for (uint64_t seed : kSeeds) {
    for (bool count_denied : {false, true}) {
      LimitSpec spec = Spec(Algorithm::kSlidingLog, 20, kSecond);
      spec.count_denied = count_denied;
      const auto admitted = Admitted(spec, RandomStream(seed, 4000, 60 * kMillisecond, 3));
      // Counting denied requests locks a caller that keeps hammering out (seed 003).
      ASSERT_GT(admitted.size(), count_denied ? 5u : 100u);
      EXPECT_LE(MaxInAnyInterval(admitted, spec.window), spec.limit) << seed;
    }
  }
}

TEST(Property, SlidingWindowNeverExceedsLimitInWindowLessOneBucket) {
  // Buckets k-N+1..k always sum to <= limit, and they cover any (t - (window - w), t].
  for (uint64_t seed : kSeeds) {
    LimitSpec spec = Spec(Algorithm::kSlidingWindow, 20, kSecond);
    spec.buckets = 10;
    const auto admitted = Admitted(spec, RandomStream(seed, 4000, 60 * kMillisecond, 3));
    ASSERT_GT(admitted.size(), 100u);
    EXPECT_LE(MaxInAnyInterval(admitted, spec.window - spec.window / spec.buckets), spec.limit) << seed;
    EXPECT_LT(MaxInAnyInterval(admitted, spec.window), 2 * spec.limit) << seed;
  }
}

TEST(Property, FixedWindowNeverExceedsLimitInAnAlignedWindow) {
  for (uint64_t seed : kSeeds) {
    LimitSpec spec = Spec(Algorithm::kFixedWindow, 20, kSecond);
    const auto admitted = Admitted(spec, RandomStream(seed, 4000, 60 * kMillisecond, 3));
    ASSERT_GT(admitted.size(), 100u);
    std::vector<uint64_t> per_window;
    const TimeNs first = admitted.front().t / spec.window;
    for (const Event& e : admitted) {
      const auto k = static_cast<size_t>(e.t / spec.window - first);
      if (per_window.size() <= k) {
        per_window.resize(k + 1);
      }
      per_window[k] += e.cost;
    }
    EXPECT_LE(*std::max_element(per_window.begin(), per_window.end()), spec.limit);
    EXPECT_LE(MaxInAnyInterval(admitted, spec.window), 2 * spec.limit);
  }
}

// For every seed: the admitted units never exceed capacity + rate * t in any interval t, and (when
// `tight`) a capacity one smaller would be exceeded, i.e. the bound is reached.
void ExpectBurstPlusRate(Algorithm algorithm, uint64_t burst, uint64_t capacity, bool tight) {
  for (uint64_t seed : kSeeds) {
    LimitSpec spec = Spec(algorithm, 20, kSecond);
    spec.burst = burst;
    const auto admitted = Admitted(spec, RandomStream(seed, 3000, 60 * kMillisecond, 3));
    ASSERT_GT(admitted.size(), 100u);
    EXPECT_TRUE(WithinBurstPlusRate(admitted, capacity, spec)) << seed;
    if (tight) {
      EXPECT_FALSE(WithinBurstPlusRate(admitted, capacity - 1, spec)) << seed;
    }
  }
}

TEST(Property, TokenBucketNeverExceedsBurstPlusRate) {
  ExpectBurstPlusRate(Algorithm::kTokenBucket, 30, 30, true);
}

TEST(Property, GcraNeverExceedsBurstPlusRate) {
  ExpectBurstPlusRate(Algorithm::kGcra, 5, 6, true);  // 1 + burst at once
}

TEST(Property, LeakyBucketMeterNeverExceedsBurstPlusRate) {
  ExpectBurstPlusRate(Algorithm::kLeakyBucket, 10, 10, true);
}

TEST(Property, LeakyBucketShaperReleasesAtTheRate) {
  // Shaped requests leave at now + delay; the departures never exceed burst + rate * t.
  for (uint64_t seed : kSeeds) {
    LimitSpec spec = Spec(Algorithm::kLeakyBucket, 20, kSecond);
    spec.burst = 4;
    spec.max_delay = 500 * kMillisecond;
    State st;
    std::vector<Event> departures;
    for (const Event& e : RandomStream(seed, 3000, 60 * kMillisecond, 3)) {
      Decision d = Check(spec, st, At(e.t, e.cost));
      if (!d.allowed) {
        continue;
      }
      EXPECT_LE(d.delay, spec.max_delay);
      departures.push_back({e.t + d.delay, e.cost});
    }
    std::stable_sort(departures.begin(), departures.end(),
                     [](const Event& a, const Event& b) { return a.t < b.t; });
    ASSERT_GT(departures.size(), 100u);
    EXPECT_TRUE(WithinBurstPlusRate(departures, 4, spec)) << seed;
  }
}

TEST(Property, SlidingWindowApproxIsBelowTwiceTheLimit) {
  for (uint64_t seed : kSeeds) {
    LimitSpec spec = Spec(Algorithm::kSlidingWindowApprox, 20, kSecond);
    const auto admitted = Admitted(spec, RandomStream(seed, 4000, 60 * kMillisecond, 3));
    ASSERT_GT(admitted.size(), 100u);
    EXPECT_LT(MaxInAnyInterval(admitted, spec.window), 2 * spec.limit) << seed;
  }
}

TEST(Property, FixedWindowAdmitsTwiceAtBoundarySlidingOnesDoNot) {
  // The seeds' known flaw: a full limit just before a window boundary and again just after it.
  const TimeNs boundary = 28'333'333LL * 60 * kSecond;
  for (Algorithm a : {Algorithm::kFixedWindow, Algorithm::kSlidingLog, Algorithm::kSlidingWindow,
                      Algorithm::kSlidingWindowApprox}) {
    SCOPED_TRACE(AlgorithmName(a));
    LimitSpec spec = Spec(a, 100, 60 * kSecond);
    State st;
    uint64_t admitted = 0;
    for (TimeNs t : {boundary - kMillisecond, boundary}) {
      for (int i = 0; i < 100; ++i) {
        admitted += Check(spec, st, At(t)).allowed;
      }
    }
    EXPECT_EQ(admitted, a == Algorithm::kFixedWindow ? 200u : 100u);
  }
}

TEST(Property, SlidingWindowApproxErrorAgainstExactLogIsBounded) {
  // Measure, for every request of a random stream, the approximation's usage figure against the
  // exact count of the units it admitted in the last window, and the most it ever admits in one.
  double worst_ratio = 0, total_abs_error = 0;
  int64_t samples = 0;
  for (uint64_t seed : kSeeds) {
    LimitSpec spec = Spec(Algorithm::kSlidingWindowApprox, 100, kSecond);
    State st;
    std::vector<Event> admitted;
    for (const Event& e : RandomStream(seed, 20000, 20 * kMillisecond, 2)) {
      const Decision peek = Peek(spec, st, At(e.t, 0));
      uint64_t exact = 0;
      for (auto it = admitted.rbegin(); it != admitted.rend() && it->t > e.t - spec.window; ++it) {
        exact += it->cost;
      }
      const double estimate = static_cast<double>(spec.limit - peek.remaining);
      if (peek.remaining > 0) {  // remaining saturates at 0: an estimate only below the limit
        total_abs_error += std::abs(estimate - static_cast<double>(exact));
        ++samples;
      }
      worst_ratio = std::max(worst_ratio, static_cast<double>(exact) / static_cast<double>(spec.limit));
      if (Check(spec, st, At(e.t, e.cost)).allowed) {
        admitted.push_back(e);
      }
    }
  }
  const double mean_abs_error = total_abs_error / static_cast<double>(samples);
  std::cout << "[ measured ] approx vs exact log: mean |error| = " << mean_abs_error
            << " units (limit 100), worst window = " << worst_ratio << " x limit\n";
  RecordProperty("mean_abs_error_units", std::to_string(mean_abs_error));
  RecordProperty("worst_window_ratio", std::to_string(worst_ratio));
  // Measured on this stream: mean |error| ~0.96 units, worst window 1.51 x limit.
  EXPECT_LT(mean_abs_error, 2.0);  // within 2% of the limit on average
  EXPECT_LT(worst_ratio, 1.75);    // and well below the adversarial bound of 2x
}

TEST(Property, SlidingWindowApproxAdversarialStaysBelowTwice) {
  // The approximation assumes the previous window was uniform. Adversary: the whole limit at the
  // end of one window, then as much as allowed late in the next: close to, but below, 2x.
  const DurationNs w = kSecond;
  const TimeNs start = 1'000 * w;
  LimitSpec spec = Spec(Algorithm::kSlidingWindowApprox, 100, w);
  State st;
  std::vector<Event> admitted;
  for (int i = 0; i < 100; ++i) {
    if (Check(spec, st, At(start - 1)).allowed) {
      admitted.push_back({start - 1, 1});
    }
  }
  for (int i = 0; i < 200; ++i) {
    const TimeNs t = start + w - 10 * kMillisecond;
    if (Check(spec, st, At(t)).allowed) {
      admitted.push_back({t, 1});
    }
  }
  const uint64_t worst = MaxInAnyInterval(admitted, w);
  std::cout << "[ measured ] approx adversarial window: " << worst << " units for limit 100\n";
  EXPECT_GT(worst, 150u);
  EXPECT_LT(worst, 200u);
}

// Every algorithm: over a long random stream, the total admitted never exceeds what the limit's
// capacity plus its rate allow, and stays close to it under overload (the limiter is not starving).
class AllAlgorithmsLongRun : public ::testing::TestWithParam<Algorithm> {};

TEST_P(AllAlgorithmsLongRun, AdmitsAtMostCapacityPlusRateAndNearlyAllOfIt) {
  for (uint64_t seed : kSeeds) {
    LimitSpec spec = Spec(GetParam(), 20, kSecond);
    if (GetParam() == Algorithm::kGcra) {
      spec.burst = 19;  // same capacity as the others
    }
    const auto stream = RandomStream(seed, 6000, 60 * kMillisecond, 3);
    const auto admitted = Admitted(spec, stream);
    uint64_t units = 0;
    for (const Event& e : admitted) {
      units += e.cost;
    }
    const double seconds = static_cast<double>(admitted.back().t - admitted.front().t) / kSecond;
    const double bound = 20.0 * (seconds + 2);  // rate * span + two windows of slack (fixed window)
    EXPECT_LE(static_cast<double>(units), bound) << seed;
    EXPECT_GE(static_cast<double>(units), 0.8 * 20.0 * seconds) << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(Property, AllAlgorithmsLongRun, ::testing::ValuesIn(testing::AllAlgorithms()),
                         testing::ParamName);

}  // namespace
}  // namespace ringlimit::limiter
