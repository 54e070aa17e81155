// Worked examples of seed 001 ("Rate Limiting", a field report; /work/shared/seeds/001_*.txt).
//
// All of its tables use "3 requests per 60 seconds" and the request times 12:00:05, 12:00:15,
// 12:01:01, 12:01:10, 12:01:40, 12:01:50, 12:02:20. The text labels 12:00 with 1515120000 and 12:01
// with 1515120100: those are not epoch seconds (12:01 is 60 s later, i.e. 1515120060); the keys are
// "HHMMSS" spliced onto a prefix. We use real nanoseconds: 12:00:00 = 1515120000 s, which is a
// multiple of 60 s, so minute windows align as in the text.
#include <gtest/gtest.h>

#include <map>

#include "limiter/limiter.h"
#include "limiter/test_util.h"

namespace ringlimit::limiter {
namespace {

using testing::At;
using testing::kMinute;
using testing::Spec;

constexpr TimeNs kNoon = 1515120000LL * kSecond;  // "12:00:00"

TimeNs T(int m, int s) { return kNoon + m * kMinute + s * kSecond; }

struct Step {
  int m, s;
  bool allowed;
};
const Step kSteps[] = {{0, 5, true},  {0, 15, true},  {1, 1, true}, {1, 10, true},
                       {1, 40, true}, {1, 50, false}, {2, 20, true}};

TEST(Seed001FieldReport, FixedWindowCounters) {
  // The text INCRements before comparing, so the rejected 12:01:50 request shows "3 -> 4":
  // that is count_denied. Counter values: word[1] of the state.
  for (bool count_denied : {true, false}) {
    SCOPED_TRACE(count_denied);
    LimitSpec spec = Spec(Algorithm::kFixedWindow, 3, kMinute);
    spec.count_denied = count_denied;
    State st;
    const int64_t counters[] = {1, 2, 1, 2, 3, count_denied ? 4 : 3, 1};
    const uint64_t remaining[] = {2, 1, 2, 1, 0, 0, 2};
    for (int i = 0; i < 7; ++i) {
      SCOPED_TRACE(i);
      Decision d = Check(spec, st, At(T(kSteps[i].m, kSteps[i].s)));
      EXPECT_EQ(d.allowed, kSteps[i].allowed);
      EXPECT_EQ(st.word[1], counters[i]);
      EXPECT_EQ(d.remaining, remaining[i]);  // X-Rate-Limit-Remaining
      EXPECT_EQ(d.limit, 3u);                // X-Rate-Limit-Limit
    }
  }
  // The rejected request can retry when the 12:01 window ends: 10 s later.
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 3, kMinute);
  State st;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(Check(spec, st, At(T(kSteps[i].m, kSteps[i].s))).allowed);
  }
  EXPECT_EQ(Check(spec, st, At(T(1, 50))).retry_after, 10 * kSecond);
}

TEST(Seed001FieldReport, FixedWindowSixRequestsInTwoSeconds) {
  // "if the user made 3 requests at 12:00:59 and a further 3 requests at 12:01:00, this would
  // allow the user to make 6 requests in a 2 second period."
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 3, kMinute);
  State st;
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(Check(spec, st, At(T(0, 59))).allowed);
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(Check(spec, st, At(T(1, 0))).allowed);
  }
}

TEST(Seed001FieldReport, SlidingLog) {
  // The text adds a rejected request to the set as well ("Failed requests may still be added"):
  // with count_denied the log matches every row of the table; without it the 12:01:50 stamp is
  // absent and the 12:02:20 request is still allowed.
  using Log = std::vector<int64_t>;
  const Log want_denied_counted[] = {
      {T(0, 5)},
      {T(0, 5), T(0, 15)},
      {T(0, 5), T(0, 15), T(1, 1)},
      {T(0, 15), T(1, 1), T(1, 10)},  // 12:00:05 is more than 60 s old
      {T(1, 1), T(1, 10), T(1, 40)},
      {T(1, 1), T(1, 10), T(1, 40), T(1, 50)},  // rejected: 3 requests in the last 60 s
      {T(1, 40), T(1, 50), T(2, 20)},
  };
  for (bool count_denied : {true, false}) {
    SCOPED_TRACE(count_denied);
    LimitSpec spec = Spec(Algorithm::kSlidingLog, 3, kMinute);
    spec.count_denied = count_denied;
    State st;
    for (int i = 0; i < 7; ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ(Check(spec, st, At(T(kSteps[i].m, kSteps[i].s))).allowed, kSteps[i].allowed);
      if (count_denied) {
        EXPECT_EQ(st.tail, want_denied_counted[i]);
      }
    }
    if (!count_denied) {
      EXPECT_EQ(st.tail, (Log{T(1, 40), T(2, 20)}));
    }
  }
}

// Bucket counters of a sliding_window state still inside the window: start offset (s) -> count.
std::map<int, int64_t> Buckets(const LimitSpec& spec, const State& st) {
  std::map<int, int64_t> out;
  const int64_t w = st.tail[0];
  const int64_t k_last = st.word[0] / w;
  for (int64_t k = k_last - spec.buckets + 1; k <= k_last; ++k) {
    const int64_t c = st.tail[1 + k % spec.buckets];
    if (c != 0) {
      out[static_cast<int>((k * w - kNoon) / kSecond)] = c;
    }
  }
  return out;
}

TEST(Seed001FieldReport, SlidingWindowFifteenSecondBuckets) {
  // "3 requests per 60 seconds in 15 second buckets". The table records the rejected 12:01:50
  // request in bucket 12:01:45, so it is count_denied; keys are bucket starts (seconds after 12:00).
  LimitSpec spec = Spec(Algorithm::kSlidingWindow, 3, kMinute);
  spec.buckets = 4;
  spec.count_denied = true;
  const std::map<int, int64_t> want[] = {
      {{0, 1}},
      {{0, 1}, {15, 1}},
      {{15, 1}, {60, 1}},  // bucket 12:00:00 expired
      {{15, 1}, {60, 2}},
      {{60, 2}, {90, 1}},  // bucket 12:00:15 expired
      {{60, 2}, {90, 1}, {105, 1}},
      {{90, 1}, {105, 1}, {135, 1}},  // bucket 12:01:00 expired
  };
  State st;
  for (int i = 0; i < 7; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(Check(spec, st, At(T(kSteps[i].m, kSteps[i].s))).allowed, kSteps[i].allowed);
    EXPECT_EQ(Buckets(spec, st), want[i]);
  }
  // Without count_denied the decisions are the same.
  spec.count_denied = false;
  State plain;
  for (const Step& s : kSteps) {
    EXPECT_EQ(Check(spec, plain, At(T(s.m, s.s))).allowed, s.allowed);
  }
}

TEST(Seed001FieldReport, SlidingTail) {
  // Weighted count = previous * (60 - elapsed) / 60 + current, including this request. The text
  // prints it truncated to one decimal (2.9, 3.6, 3.6, 4.3, 3.6) and still allows the 3.6 rows, so
  // its rule is not "weighted <= 3". Our definition: the weighted previous count is rounded down,
  // floor(previous * (60 - elapsed) / 60) + current + cost <= limit; that reproduces every row,
  // and the text's "any more requests before 12:02:31 would be rejected". The rejected request is
  // counted (current 3 -> 4), so the table is count_denied.
  LimitSpec spec = Spec(Algorithm::kSlidingWindowApprox, 3, kMinute);
  spec.count_denied = true;
  struct Row {
    int64_t current, previous;
    int tenths;  // weighted count * 10, truncated; -1 when the text shows none
  };
  const Row rows[] = {{1, 0, -1}, {2, 0, -1}, {1, 2, 29}, {2, 2, 36}, {3, 2, 36}, {4, 2, 43}, {1, 4, 36}};
  State st;
  for (int i = 0; i < 7; ++i) {
    SCOPED_TRACE(i);
    const TimeNs now = T(kSteps[i].m, kSteps[i].s);
    EXPECT_EQ(Check(spec, st, At(now)).allowed, kSteps[i].allowed);
    EXPECT_EQ(st.word[1], rows[i].current);
    EXPECT_EQ(st.word[2], rows[i].previous);
    if (rows[i].tenths >= 0) {
      const int64_t elapsed = (now - kNoon) % kMinute;
      const __int128 weighted_x10 = (static_cast<__int128>(st.word[2]) * (kMinute - elapsed) * 10 +
                                     static_cast<__int128>(st.word[1]) * kMinute * 10) /
                                    kMinute;
      EXPECT_EQ(static_cast<int>(weighted_x10), rows[i].tenths);
    }
  }
  EXPECT_FALSE(Peek(spec, st, At(T(2, 30))).allowed);
  EXPECT_TRUE(Peek(spec, st, At(T(2, 31))).allowed);
  // In nanoseconds the weight drops below 2 just after 12:02:30 (4 * 30 / 60 = 2 exactly).
  EXPECT_EQ(Peek(spec, st, At(T(2, 30))).retry_after, 1);
  EXPECT_TRUE(Peek(spec, st, At(T(2, 30) + 1)).allowed);
}

TEST(Seed001FieldReport, LeakyBucket) {
  // "a bucket size of 3 and a refresh rate of 1 per 20 seconds". The table decrements in whole
  // steps at odd instants ("ts" 1515120000 for a 12:00:05 request, "15151200220" at the end) and
  // shows token counts 1,2,1,2,1,2,1 that no continuous drain produces. By definition the level
  // drains continuously at 1 unit / 20 s: 1, 1.5, 1 (emptied, + this request), 1.55, 1.05, 1.55,
  // 1.05 -- every request is admitted, as in the text.
  LimitSpec spec = Spec(Algorithm::kLeakyBucket, 1, 20 * kSecond);
  spec.burst = 3;
  const int64_t level_milli[] = {1000, 1500, 1000, 1550, 1050, 1550, 1050};
  State st;
  for (int i = 0; i < 7; ++i) {
    SCOPED_TRACE(i);
    Decision d = Check(spec, st, At(T(kSteps[i].m, kSteps[i].s)));
    EXPECT_TRUE(d.allowed);
    EXPECT_EQ(testing::LevelMilli(st, spec.window), level_milli[i]);
    EXPECT_EQ(d.remaining, static_cast<uint64_t>((3000 - level_milli[i]) / 1000));
  }
}

TEST(Seed001FieldReport, TokensUsedForEachRequest) {
  // "GET /user would use 1 token ... POST /user would remove 2 tokens from the same bucket."
  for (Algorithm a : testing::AllAlgorithms()) {
    SCOPED_TRACE(AlgorithmName(a));
    LimitSpec spec = Spec(a, 5, kMinute);
    spec.burst = a == Algorithm::kGcra ? 4 : 0;  // capacity 5 for every algorithm
    State st;
    EXPECT_EQ(Check(spec, st, At(kNoon, 1)).remaining, 4u);  // GET
    EXPECT_EQ(Check(spec, st, At(kNoon, 2)).remaining, 2u);  // POST
    EXPECT_EQ(Check(spec, st, At(kNoon, 2)).remaining, 0u);  // POST
    Decision d = Check(spec, st, At(kNoon, 1));
    EXPECT_FALSE(d.allowed);
    EXPECT_EQ(d.remaining, 0u);
  }
}

}  // namespace
}  // namespace ringlimit::limiter
