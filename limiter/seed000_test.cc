// Worked examples of seed 000 ("Designing an API Rate Limiter"; /work/shared/seeds/000_*.txt).
#include <gtest/gtest.h>

#include <array>

#include "limiter/limiter.h"
#include "limiter/test_util.h"

namespace ringlimit::limiter {
namespace {

using testing::At;
using testing::kHour;
using testing::kMinute;
using testing::Spec;

TEST(Seed000ApiRateLimiter, SoftThrottlingTenPercent) {
  // "if the rate-limit = 100 messages/minute, and 10% exceed-limit, our rate limiter will allow up
  // to 110 messages per minute".
  for (Algorithm a : testing::AllAlgorithms()) {
    SCOPED_TRACE(AlgorithmName(a));
    LimitSpec spec = Spec(a, 100, kMinute);
    if (a == Algorithm::kGcra) {
      spec.burst = 99;  // capacity 100 at once, like the others
    }
    spec.mode = Mode::kSoft;
    spec.soft_pct = 10;
    State st;
    const TimeNs t = 1000 * kMinute;
    for (int i = 1; i <= 110; ++i) {
      Decision d = Check(spec, st, At(t));
      ASSERT_TRUE(d.allowed) << i;
      EXPECT_EQ(d.beyond_limit, i > 100) << i;
      EXPECT_EQ(d.limit, 100u);
    }
    Decision d = Check(spec, st, At(t));
    EXPECT_FALSE(d.allowed);
    EXPECT_TRUE(d.would_deny);
    EXPECT_GT(d.retry_after, 0);
  }
}

TEST(Seed000ApiRateLimiter, DynamicThrottlingUsesFreeResources) {
  // "The number of requests can exceed the limit if the system has some free resources available."
  // Ceiling = limit + floor((dynamic_limit - limit) * headroom).
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 100, kMinute);
  spec.mode = Mode::kDynamic;
  spec.dynamic_limit = 150;
  const TimeNs t = 1000 * kMinute;
  State st;
  Request busy = At(t);
  busy.headroom = 0.;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(Check(spec, st, busy).allowed);
  }
  EXPECT_FALSE(Check(spec, st, busy).allowed);  // no spare capacity: the limit holds
  Request half = At(t);
  half.headroom = 0.5;
  for (int i = 0; i < 25; ++i) {
    Decision d = Check(spec, st, half);
    ASSERT_TRUE(d.allowed);
    EXPECT_TRUE(d.beyond_limit);
  }
  EXPECT_FALSE(Check(spec, st, half).allowed);  // 125 = 100 + 50 * 0.5
  Request idle = At(t);
  idle.headroom = 1.;
  for (int i = 0; i < 25; ++i) {
    ASSERT_TRUE(Check(spec, st, idle).allowed);
  }
  Decision d = Check(spec, st, idle);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, kMinute);  // next window
}

TEST(Seed000ApiRateLimiter, FixedVersusRollingWindow) {
  // 2 messages per second. The diagrams are not in the text; we place m1..m5 at 0.3, 0.4, 1.1,
  // 1.2 and 1.5 s, which reproduces both statements: the fixed window "will only throttle m5",
  // the rolling window (sliding log) throttles "m3, m4" (m1 at 300 ms counts until 1.3 s).
  const TimeNs base = 1574866488LL * kSecond;
  const std::array<TimeNs, 5> at = {300, 400, 1100, 1200, 1500};
  const std::array<bool, 5> fixed = {true, true, true, true, false};
  const std::array<bool, 5> rolling = {true, true, false, false, true};
  State fw, log;
  for (size_t i = 0; i < at.size(); ++i) {
    SCOPED_TRACE(i);
    const TimeNs now = base + at[i] * kMillisecond;
    EXPECT_EQ(Check(Spec(Algorithm::kFixedWindow, 2, kSecond), fw, At(now)).allowed, fixed[i]);
    EXPECT_EQ(Check(Spec(Algorithm::kSlidingLog, 2, kSecond), log, At(now)).allowed, rolling[i]);
  }
}

TEST(Seed000ApiRateLimiter, FixedWindowTwiceTheRequestsAtMinuteBoundary) {
  // "if a user sends 3 requests at the last second of a minute, they can immediately send 3 more
  // requests at the very first second of the next minute, resulting in 6 requests in a span of two
  // seconds. The solution for this would be a sliding window algorithm."
  const TimeNs minute = 26247668LL * kMinute;
  for (Algorithm a : {Algorithm::kFixedWindow, Algorithm::kSlidingLog, Algorithm::kSlidingWindow}) {
    SCOPED_TRACE(AlgorithmName(a));
    State st;
    int admitted = 0;
    for (TimeNs t : {minute - kSecond, minute}) {
      for (int i = 0; i < 3; ++i) {
        admitted += Check(Spec(a, 3, kMinute), st, At(t)).allowed;
      }
    }
    EXPECT_EQ(admitted, a == Algorithm::kFixedWindow ? 6 : 3);
  }
}

TEST(Seed000ApiRateLimiter, SlidingWindowLogSortedSet) {
  // 'userID-1': {1574866488, 1574866493, 1574866499}, with a limit of 3 per minute (the text says
  // "3 requests/sec" but prunes "older than current_time - 1 minute"; we follow the minute).
  // Its step 2 rejects only when "count is greater than 3", which would admit a 4th request; by the
  // definition a 4th request within the minute is rejected.
  LimitSpec spec = Spec(Algorithm::kSlidingLog, 3, kMinute);
  State st;
  for (int64_t s : {1574866488LL, 1574866493LL, 1574866499LL}) {
    ASSERT_TRUE(Check(spec, st, At(s * kSecond)).allowed);
  }
  Decision d = Check(spec, st, At(1574866500LL * kSecond));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 48 * kSecond);  // when 1574866488 leaves the minute
  EXPECT_TRUE(Check(spec, st, At(1574866548LL * kSecond)).allowed);
  EXPECT_EQ(st.tail,
            (std::vector<int64_t>{1574866493LL * kSecond, 1574866499LL * kSecond, 1574866548LL * kSecond}));
}

TEST(Seed000ApiRateLimiter, SlidingWindowCountersThreePerMinute) {
  // "Rate limiting allowing 3 requests per minute for User1", counters normalised to a minute.
  // With minute buckets and a one-minute limit the sum of "the counters in the past minute" is the
  // current minute's counter alone: buckets = 1. The text's keys (1574860100, ...160, ...220) are
  // 60 s apart but 1574860100 is not a multiple of 60; we use the minute 1574860080 s as 7:00:00.
  // The text keeps the previous minute's key (it expires an hour later); it no longer counts.
  const TimeNs seven = 1574860080LL * kSecond;
  struct Row {
    DurationNs at;
    bool allowed;
    int64_t counter;  // the current minute's counter after the request
  };
  const Row rows[] = {{0, true, 1},
                      {kMinute + 5 * kSecond, true, 1},
                      {kMinute + 20 * kSecond, true, 2},
                      {kMinute + 20 * kSecond, true, 3},
                      {kMinute + 45 * kSecond, false, 3},
                      {2 * kMinute + 20 * kSecond, true, 1}};
  LimitSpec spec = Spec(Algorithm::kSlidingWindow, 3, kMinute);
  spec.buckets = 1;
  LimitSpec fine = spec;  // one-second buckets: the same decisions for this example
  fine.buckets = 60;
  State st, st_fine;
  for (const Row& r : rows) {
    SCOPED_TRACE(r.at);
    EXPECT_EQ(Check(spec, st, At(seven + r.at)).allowed, r.allowed);
    EXPECT_EQ(st.word[1], r.counter);
    EXPECT_EQ(Check(fine, st_fine, At(seven + r.at)).allowed, r.allowed);
  }
}

TEST(Seed000ApiRateLimiter, FiveHundredPerHourPlusTenPerMinute) {
  // "we rate-limit at 500 requests/hour, with an additional limit of 10 requests/minute",
  // hourly counters kept per minute; both limits charged all-or-nothing.
  LimitSpec hourly = Spec(Algorithm::kSlidingWindow, 500, kHour);
  hourly.buckets = 60;
  LimitSpec minutely = Spec(Algorithm::kSlidingWindow, 10, kMinute);
  State hs, ms;
  const LimitSpec* specs[] = {&hourly, &minutely};
  State* states[] = {&hs, &ms};
  Decision decisions[2];
  const TimeNs start = 1000 * kHour;
  for (int minute = 0; minute < 50; ++minute) {
    for (int i = 0; i < 11; ++i) {
      const bool ok = CheckAll(specs, states, At(start + minute * kMinute + i * kSecond), decisions);
      ASSERT_EQ(ok, i < 10) << minute << " " << i;
      if (i == 10 && minute < 49) {
        EXPECT_TRUE(decisions[0].allowed);  // the hour alone had room ...
        EXPECT_FALSE(decisions[1].allowed);
      }
    }
  }
  EXPECT_EQ(hs.word[1], 500);  // ... but the 11th request of each minute charged neither limit
  // 50:30: the minute limit has room, the hourly one does not; nothing is charged.
  EXPECT_FALSE(CheckAll(specs, states, At(start + 50 * kMinute + 30 * kSecond), decisions));
  EXPECT_FALSE(decisions[0].allowed);
  EXPECT_TRUE(decisions[1].allowed);
  EXPECT_EQ(decisions[1].remaining, 10u);
  EXPECT_EQ(decisions[0].retry_after, 9 * kMinute + 30 * kSecond);  // minute 0 leaves the hour
  // An hour after the first requests, minute 0's ten leave the window.
  EXPECT_TRUE(CheckAll(specs, states, At(start + 60 * kMinute), decisions));
  EXPECT_EQ(decisions[0].remaining, 9u);
}

TEST(Seed000ApiRateLimiter, MemoryPerUser) {
  // The text: fixed window 14 bytes of data per user, sliding log (500/hour) about 12 KB, sliding
  // window of minute counters about 1.6 KB. Ours (algorithm state only, no key or map overhead):
  EXPECT_EQ(StateBytes(Spec(Algorithm::kFixedWindow, 3, kMinute)), 16u);
  EXPECT_EQ(StateBytes(Spec(Algorithm::kSlidingLog, 500, kHour)), 8u + 500 * 8);
  LimitSpec counters = Spec(Algorithm::kSlidingWindow, 500, kHour);
  counters.buckets = 60;
  EXPECT_EQ(StateBytes(counters), 16u + 61 * 8);
}

}  // namespace
}  // namespace ringlimit::limiter
