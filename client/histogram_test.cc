#include "client/histogram.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>
#include <vector>

namespace ringlimit::client {
namespace {

TEST(LatencyHistogramTest, BucketsAreContiguousAndContainTheirValues) {
  size_t last = 0;
  const uint64_t values[] = {0,         1, 255, 256, 257, 511, 512, 1000, 123456789, (uint64_t{1} << 40) + 17,
                             UINT64_MAX};
  for (uint64_t v : values) {
    const size_t b = LatencyHistogram::BucketOf(v);
    EXPECT_LE(LatencyHistogram::BucketLow(b), v) << v;
    EXPECT_GE(LatencyHistogram::BucketHigh(b), v) << v;
    EXPECT_GE(b, last);
    last = b;
  }
  for (size_t b = 0; b + 1 < LatencyHistogram::BucketCount(); ++b) {
    ASSERT_EQ(LatencyHistogram::BucketHigh(b) + 1, LatencyHistogram::BucketLow(b + 1)) << b;
  }
  EXPECT_EQ(LatencyHistogram::BucketHigh(LatencyHistogram::BucketCount() - 1), UINT64_MAX);
}

TEST(LatencyHistogramTest, RelativeErrorIsBounded) {
  for (uint64_t v = 300; v < (1ull << 50); v = v * 3 + 7) {
    const size_t b = LatencyHistogram::BucketOf(v);
    const double width =
        static_cast<double>(LatencyHistogram::BucketHigh(b) - LatencyHistogram::BucketLow(b));
    EXPECT_LE(width / static_cast<double>(v), 1.0 / 128) << v;
  }
}

TEST(LatencyHistogramTest, EmptyHistogramAnswersZero) {
  LatencyHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.Percentile(99), 0u);
  EXPECT_EQ(h.min(), 0u);
  EXPECT_EQ(h.max(), 0u);
}

TEST(LatencyHistogramTest, PercentilesMatchSortedSamplesWithinOnePercent) {
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> dist(11.0, 1.0);  // ~60 us median in ns
  std::vector<uint64_t> values;
  LatencyHistogram h;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t v = static_cast<uint64_t>(dist(rng));
    values.push_back(v);
    h.Record(v);
  }
  std::sort(values.begin(), values.end());
  for (double p : {50.0, 90.0, 99.0, 99.9}) {
    const uint64_t exact = values[static_cast<size_t>(p / 100 * values.size()) - 1];
    const double got = static_cast<double>(h.Percentile(p));
    EXPECT_NEAR(got, static_cast<double>(exact), static_cast<double>(exact) * 0.01) << p;
  }
  EXPECT_EQ(h.Percentile(100), values.back());
  EXPECT_EQ(h.min(), values.front());
  EXPECT_EQ(h.count(), values.size());
}

TEST(LatencyHistogramTest, ConcurrentRecordsAndMergeCountEverything) {
  LatencyHistogram a, b;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&a, t] {
      for (uint64_t i = 0; i < 10000; ++i) a.Record(i * (t + 1));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(a.count(), 40000u);
  b.Record(5);
  b.Merge(a);
  EXPECT_EQ(b.count(), 40001u);
  EXPECT_EQ(b.max(), 9999u * 4);
  EXPECT_EQ(b.min(), 0u);
}

}  // namespace
}  // namespace ringlimit::client
