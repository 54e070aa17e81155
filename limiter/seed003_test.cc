// Worked examples of seed 003 ("Rate Limiting Algorithm | Algo"; /work/shared/seeds/003_*.txt).
#include <gtest/gtest.h>

#include "limiter/limiter.h"
#include "limiter/test_util.h"

namespace ringlimit::limiter {
namespace {

using testing::At;
using testing::Clock;
using testing::kHour;
using testing::kMinute;
using testing::Spec;

constexpr TimeNs kDay = 18000LL * 24 * kHour;  // midnight, 2019-04-14 UTC

TEST(Seed003AlgorithmNotes, LeakyBucketQueue) {
  // "When a request is registered, it is appended to the end of the queue. At a regular interval,
  // the first item on the queue is processed ... If the queue is full, then additional requests are
  // discarded." One per second, one at once, up to 3 s of queue: five requests at once leave at
  // 0, 1, 2, 3 s and the fifth is discarded.
  LimitSpec spec = Spec(Algorithm::kLeakyBucket, 1, kSecond);
  spec.burst = 1;
  spec.max_delay = 3 * kSecond;
  State st;
  const TimeNs t = Clock(kDay, 1, 0, 0);
  for (int i = 0; i < 4; ++i) {
    Decision d = Check(spec, st, At(t));
    ASSERT_TRUE(d.allowed);
    EXPECT_EQ(d.delay, i * kSecond);
    EXPECT_EQ(d.remaining, 0u);
  }
  Decision d = Check(spec, st, At(t));
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.retry_after, kSecond);
  // As a meter (no max_delay) the same bucket discards everything beyond the first.
  spec.max_delay = 0;
  State meter;
  EXPECT_TRUE(Check(spec, meter, At(t)).allowed);
  EXPECT_FALSE(Check(spec, meter, At(t)).allowed);
}

TEST(Seed003AlgorithmNotes, TokenBucketNoReadThenWriteRace) {
  // "Imagine if there was only one available token for a user and that user issued multiple
  // requests ... each process would think the user had a single token left." Check is one
  // read-modify-write of the State (the storage tier serialises it): the last token goes once.
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 1, kMinute);
  State st;
  const TimeNs t = Clock(kDay, 1, 0, 0);
  EXPECT_TRUE(Check(spec, st, At(t)).allowed);
  EXPECT_FALSE(Check(spec, st, At(t)).allowed);
}

TEST(Seed003AlgorithmNotes, FixedWindowTwiceAtBoundary) {
  // "if our rate limit were 5 requests per minute and a user made 5 requests at 11:00:59, they could
  // make 5 more requests at 11:01:00 ... we've now allowed 10 requests in less than one minute!"
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 5, kMinute);
  State st;
  int admitted = 0;
  for (int i = 0; i < 5; ++i) {
    admitted += Check(spec, st, At(Clock(kDay, 11, 0, 59))).allowed;
  }
  for (int i = 0; i < 5; ++i) {
    admitted += Check(spec, st, At(Clock(kDay, 11, 1, 0))).allowed;
  }
  EXPECT_EQ(admitted, 10);
}

TEST(Seed003AlgorithmNotes, FixedWindowHourBuckets) {
  // 10 requests per hour: {"1AM-2AM": 7, "2AM-3AM": 8} with the 7 in 1:30-2:00 and the 8 in
  // 2:00-2:30: "effectively we have 15 requests in the time range of 1:30AM-2:30AM". The sliding
  // log admits only 3 of the 8.
  for (Algorithm a : {Algorithm::kFixedWindow, Algorithm::kSlidingLog}) {
    SCOPED_TRACE(AlgorithmName(a));
    LimitSpec spec = Spec(a, 10, kHour);
    State st;
    int first = 0, second = 0;
    for (int i = 0; i < 7; ++i) {
      first += Check(spec, st, At(Clock(kDay, 1, 30 + 4 * i, 0))).allowed;
    }
    for (int i = 0; i < 8; ++i) {
      second += Check(spec, st, At(Clock(kDay, 2, 3 * i, 0))).allowed;
    }
    EXPECT_EQ(first, 7);
    EXPECT_EQ(second, a == Algorithm::kFixedWindow ? 8 : 3);
  }
}

TEST(Seed003AlgorithmNotes, FixedWindowPlusPerSecondLimit) {
  // "adding another rate limit with a smaller threshold and shorter enforcement window -- e.g. 2
  // requests per second in addition to 5 requests per minute", charged all-or-nothing.
  LimitSpec per_minute = Spec(Algorithm::kFixedWindow, 5, kMinute);
  LimitSpec per_second = Spec(Algorithm::kFixedWindow, 2, kSecond);
  State ms, ss;
  const LimitSpec* specs[] = {&per_minute, &per_second};
  State* states[] = {&ms, &ss};
  Decision d[2];
  int admitted = 0;
  for (int i = 0; i < 5; ++i) {
    admitted += CheckAll(specs, states, At(Clock(kDay, 11, 0, 59)), d);
  }
  EXPECT_EQ(admitted, 2);
  EXPECT_EQ(ms.word[1], 2);  // the three denied by the second limit were not charged per minute
  for (int i = 0; i < 5; ++i) {
    admitted += CheckAll(specs, states, At(Clock(kDay, 11, 1, 0)), d);
  }
  EXPECT_EQ(admitted, 4);
}

TEST(Seed003AlgorithmNotes, SlidingLogMemory) {
  // "A single rate limit of 500 requests per day per user ... 5,000,000 values" for 10,000 users,
  // 4 bytes each = 20 MB. Ours stores 8-byte nanosecond stamps: 8 + 500 * 8 bytes per user.
  LimitSpec spec = Spec(Algorithm::kSlidingLog, 500, 24 * kHour);
  EXPECT_EQ(StateBytes(spec) * 10000, (8u + 4000u) * 10000);
  State st;
  for (int i = 0; i < 600; ++i) {
    (void)Check(spec, st, At(Clock(kDay, 1, 0, i)));
  }
  EXPECT_EQ(st.tail.size(), 500u);  // never more than the limit (count_denied off)
}

TEST(Seed003AlgorithmNotes, SlidingLogCountingDeniedExtendsBan) {
  // "the rate limiter continues to count requests even after the user exceeds the rate limit ...
  // it would just extend a ban on a malicious user rather than letting their requests through as
  // soon as the window of time had passed." 5 per minute, a request every 10 s after the first 5.
  for (bool count_denied : {false, true}) {
    SCOPED_TRACE(count_denied);
    LimitSpec spec = Spec(Algorithm::kSlidingLog, 5, kMinute);
    spec.count_denied = count_denied;
    State st;
    const TimeNs t = Clock(kDay, 11, 0, 0);
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(Check(spec, st, At(t)).allowed);
    }
    int admitted_later = 0;
    for (int s = 10; s <= 180; s += 10) {
      admitted_later += Check(spec, st, At(t + s * kSecond)).allowed;
    }
    // Without counting: through again once the first 5 leave (60..100 s), denied at 110 s, then
    // 120..160 s and 180 s. Counting denied requests: every rejected stamp keeps the log full.
    EXPECT_EQ(admitted_later, count_denied ? 0 : 5 + 5 + 1);
  }
}

TEST(Seed003AlgorithmNotes, SlidingWindowCountersTwentyMinuteBuckets) {
  // "100 req/hr, say a bucket size of 20 mins ... {2AM-2:20AM: 10, 2:20AM-2:40AM: 20,
  // 2:40AM-3:00AM: 30}. If a request is received at 2:50AM ... sum upto 60 (<100), so a new request
  // is added to the bucket of 2:40AM-3:00AM giving ... 31".
  LimitSpec spec = Spec(Algorithm::kSlidingWindow, 100, kHour);
  spec.buckets = 3;
  State st;
  ASSERT_TRUE(Check(spec, st, At(Clock(kDay, 2, 5, 0), 10)).allowed);
  ASSERT_TRUE(Check(spec, st, At(Clock(kDay, 2, 25, 0), 20)).allowed);
  ASSERT_TRUE(Check(spec, st, At(Clock(kDay, 2, 45, 0), 30)).allowed);
  Decision d = Check(spec, st, At(Clock(kDay, 2, 50, 0)));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 39u);
  const int64_t k = Clock(kDay, 2, 0, 0) / (20 * kMinute);  // bucket index of 2:00
  EXPECT_EQ(st.tail[1 + k % 3], 10);
  EXPECT_EQ(st.tail[1 + (k + 1) % 3], 20);
  EXPECT_EQ(st.tail[1 + (k + 2) % 3], 31);
  EXPECT_EQ(st.word[1], 61);
}

TEST(Seed003AlgorithmNotes, SlidingWindowCountersMissTheFirstTenMinutes) {
  // "At 2:50, a time interval from 1:50 to 2:50 should be considered, but ... the first 10 mins
  // isn't considered and it may happen that in this missed 10 mins, there might've been a traffic
  // spike and the request count might be 100". The 20-minute buckets admit; the log does not.
  for (Algorithm a : {Algorithm::kSlidingWindow, Algorithm::kSlidingLog}) {
    SCOPED_TRACE(AlgorithmName(a));
    LimitSpec spec = Spec(a, 100, kHour);
    spec.buckets = 3;
    State st;
    ASSERT_TRUE(Check(spec, st, At(Clock(kDay, 1, 55, 0), 100)).allowed);
    EXPECT_EQ(Check(spec, st, At(Clock(kDay, 2, 50, 0))).allowed, a == Algorithm::kSlidingWindow);
  }
}

}  // namespace
}  // namespace ringlimit::limiter
