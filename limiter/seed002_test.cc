// Worked examples of seed 002 ("Rate Limiting Techniques"; /work/shared/seeds/002_*.txt).
#include <gtest/gtest.h>

#include <algorithm>

#include "limiter/limiter.h"
#include "limiter/test_util.h"

namespace ringlimit::limiter {
namespace {

using testing::At;
using testing::kMinute;
using testing::Spec;

constexpr TimeNs kTen = 1587463200LL * kSecond;  // 21/04/2020 10:00:00 UTC, the text's epoch key

TEST(Seed002Techniques, FixedWindowCounters) {
  // 3 requests/minute; requests 1-3 in window 1 (10:00), requests 4-8 in window 2 (10:01): "After
  // first 3 requests have been allowed, next 2 requests will be blocked". The figure's exact times
  // are not in the text; any times inside the windows give the same result.
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 3, kMinute);
  State st;
  const DurationNs at[] = {5, 23, 40, 62, 70, 80, 95, 110};  // seconds after 10:00:00
  const bool allowed[] = {true, true, true, true, true, true, false, false};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(Check(spec, st, At(kTen + at[i] * kSecond)).allowed, allowed[i]) << i;
  }
  EXPECT_EQ(st.word[1], 3);
}

TEST(Seed002Techniques, FixedWindowLenientAtBoundary) {
  // "if our rate limit per user is 100 requests/min. A user can send 100 requests at 10:00:59 and
  // another 100 requests at 10:01:01."
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 100, kMinute);
  State st;
  int admitted = 0;
  for (int i = 0; i < 100; ++i) {
    admitted += Check(spec, st, At(kTen + 59 * kSecond)).allowed;
  }
  for (int i = 0; i < 100; ++i) {
    admitted += Check(spec, st, At(kTen + 61 * kSecond)).allowed;
  }
  EXPECT_EQ(admitted, 200);
}

TEST(Seed002Techniques, SlidingWindowCountersOneSecondSubWindows) {
  // 60 one-second sub-windows for a minute: "If a request arrives between 10:01:34 and 10:01:35, we
  // take the sum of value for keys 10:00:35, 10:00:36 ... upto 10:01:34."
  LimitSpec spec = Spec(Algorithm::kSlidingWindow, 1, kMinute);
  spec.buckets = 60;
  State early, late;
  ASSERT_TRUE(Check(spec, early, At(kTen + 34 * kSecond + 900 * kMillisecond)).allowed);  // key 10:00:34
  ASSERT_TRUE(Check(spec, late, At(kTen + 35 * kSecond)).allowed);                        // key 10:00:35
  const TimeNs now = kTen + 94 * kSecond + 500 * kMillisecond;                            // 10:01:34.5
  EXPECT_TRUE(Peek(spec, early, At(now)).allowed);
  Decision d = Peek(spec, late, At(now));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 500 * kMillisecond);  // key 10:00:35 leaves at 10:01:35
}

TEST(Seed002Techniques, SlidingWindowLogCountsSameTimestamp) {
  // "Sorted set, being a set, doesn't allow duplicates. So if we get multiple requests at the same
  // timestamp, they will be counted as one." Our log keeps one entry per unit, duplicates included.
  LimitSpec spec = Spec(Algorithm::kSlidingLog, 3, kMinute);
  State st;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(Check(spec, st, At(kTen)).allowed);
  }
  EXPECT_FALSE(Check(spec, st, At(kTen)).allowed);
  EXPECT_EQ(st.tail.size(), 3u);
}

TEST(Seed002Techniques, TokenBucketWithoutReplenishmentProcess) {
  // rate = 100 tokens per minute, capacity = 500: tokens = min(capacity, tokens + rate * delta).
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 100, kMinute);
  spec.burst = 500;
  State st;
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(Check(spec, st, At(kTen)).allowed);
  }
  Decision d = Check(spec, st, At(kTen));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, 600 * kMillisecond);  // one token per 0.6 s
  EXPECT_EQ(d.reset_after, 5 * kMinute);         // full again after 500 / 100 minutes
  EXPECT_FALSE(Check(spec, st, At(kTen + 599 * kMillisecond)).allowed);
  EXPECT_TRUE(Check(spec, st, At(kTen + 600 * kMillisecond)).allowed);
  // Idle for an hour: capped at capacity, not 100 * 60.
  EXPECT_EQ(Peek(spec, st, At(kTen + 60 * kMinute, 0)).remaining, 500u);
}

TEST(Seed002Techniques, GcraWithoutBurst) {
  // 10000 requests/hour: "requests have to be spaced by 3600/10000 seconds or 360 ms. Any request
  // made within 360 ms of previous request will be rejected."
  LimitSpec spec = Spec(Algorithm::kGcra, 10000, 60 * kMinute);
  State st;
  ASSERT_TRUE(Check(spec, st, At(kTen)).allowed);
  Decision d = Check(spec, st, At(kTen + 359 * kMillisecond));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, kMillisecond);
  EXPECT_TRUE(Check(spec, st, At(kTen + 360 * kMillisecond)).allowed);
}

// The text's Java sample, used as the reference model: TAT = max(now, TAT); allow when
// arrival >= TAT - delay_tolerance, then TAT += emission_interval.
struct JavaGcra {
  DurationNs interval, tolerance;
  TimeNs tat = -1;
  bool Arrive(TimeNs now) {
    tat = tat == -1 ? now : std::max(now, tat);
    if (now < tat - tolerance) {
      return false;
    }
    tat += interval;
    return true;
  }
};

TEST(Seed002Techniques, GcraWithBurst) {
  // 100 requests/second with a burst of 5: emission_interval 10 ms, delay_tolerance 50 ms; the first
  // request arrives at 10:00:00.500 and sets TAT = 10:00:00.510. "We have allowed 5 additional
  // requests than usual 1 in the first window", then one per interval; idle intervals (.520-.540)
  // accumulate burst again.
  LimitSpec spec = Spec(Algorithm::kGcra, 100, kSecond);
  spec.burst = 5;
  JavaGcra ref{10 * kMillisecond, 50 * kMillisecond};
  State st;
  const int ms[] = {500, 500, 500, 500, 500, 500, 500, 505, 510, 512, 520, 545, 545, 545, 546, 560, 600, 600};
  int admitted_at_500 = 0;
  for (int m : ms) {
    SCOPED_TRACE(m);
    const TimeNs now = kTen + m * kMillisecond;
    const TimeNs tat_before = ref.tat;
    const bool want = ref.Arrive(now);
    Decision d = Check(spec, st, At(now));
    EXPECT_EQ(d.allowed, want);
    if (m == 500) {
      admitted_at_500 += d.allowed;
    }
    if (want) {
      // Our state is the level; TAT = newest instant + level * T (level / limit ns per 1/window unit).
      const __int128 level = static_cast<__int128>(st.word[0]) * spec.window + st.word[1];
      EXPECT_EQ(st.word[2] + static_cast<TimeNs>(level / spec.limit), ref.tat);
    } else {
      EXPECT_EQ(d.retry_after, tat_before - 50 * kMillisecond - now);  // until allowed_at
    }
  }
  EXPECT_EQ(admitted_at_500, 6);
}

TEST(Seed002Techniques, LeakyBucketFifoQueue) {
  // "The bucket can be implemented as a FIFO queue ... a separate thread can deque requests at a
  // constant rate ... If the queue is full, further requests are dropped." The distributed form:
  // leaky_bucket as a shaper, 2 per second, room for 1 at once and up to 2 s of queueing.
  LimitSpec spec = Spec(Algorithm::kLeakyBucket, 2, kSecond);
  spec.burst = 1;
  spec.max_delay = 2 * kSecond;
  State st;
  for (int i = 0; i < 5; ++i) {
    Decision d = Check(spec, st, At(kTen));
    ASSERT_TRUE(d.allowed) << i;
    EXPECT_EQ(d.delay, i * (500 * kMillisecond)) << i;  // leaves the queue every 500 ms
  }
  Decision d = Check(spec, st, At(kTen));
  EXPECT_FALSE(d.allowed);  // queue full
  EXPECT_EQ(d.retry_after, 500 * kMillisecond);
}

TEST(Seed002Techniques, CostIsNRequestsAtTheSameTime) {
  // "we can think of a request with cost N to be same as N requests arriving at the same time."
  for (Algorithm a : testing::AllAlgorithms()) {
    SCOPED_TRACE(AlgorithmName(a));
    LimitSpec spec = Spec(a, 10, kSecond);
    spec.burst = a == Algorithm::kGcra ? 9 : 0;
    State one, many;
    for (int round = 0; round < 6; ++round) {
      const TimeNs now = kTen + round * (300 * kMillisecond);
      Decision big = Check(spec, one, At(now, 3));
      Decision last;
      int admitted = 0;
      if (big.allowed) {
        for (int i = 0; i < 3; ++i) {
          admitted += (last = Check(spec, many, At(now))).allowed;
        }
        EXPECT_EQ(admitted, 3);
        EXPECT_EQ(last.remaining, big.remaining);
      } else {
        EXPECT_FALSE(Peek(spec, many, At(now, 3)).allowed);
      }
    }
  }
}

}  // namespace
}  // namespace ringlimit::limiter
