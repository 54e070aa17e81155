// LatencyHistogram: a log-linear (HDR-style) histogram of non-negative integer values, e.g. latencies in
// nanoseconds, for the load generator's percentiles.
//
// Values below 2^kSubBucketBits are counted exactly; above, each power-of-two range is split into
// 2^(kSubBucketBits-1) equal sub-buckets, so a reported value is within 1 / 2^(kSubBucketBits-1)
// (0.8 % with 8 bits) of every value counted in its bucket. The whole 64-bit range fits in
// ~7 500 buckets (60 KiB); recording is one index computation and one relaxed atomic increment.
//
// Thread safety: Record, Merge and the readers may be called concurrently from any threads; readers see
// every Record that happened-before them (a concurrent Record may or may not be counted).
#ifndef RINGLIMIT_CLIENT_HISTOGRAM_H_
#define RINGLIMIT_CLIENT_HISTOGRAM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ringlimit::client {

class LatencyHistogram {
 public:
  static constexpr int kSubBucketBits = 8;

  LatencyHistogram();
  LatencyHistogram(const LatencyHistogram&) = delete;
  LatencyHistogram& operator=(const LatencyHistogram&) = delete;

  void Record(uint64_t value);
  // Adds every count of `other`.
  void Merge(const LatencyHistogram& other);
  void Clear();

  [[nodiscard]] uint64_t count() const;
  [[nodiscard]] uint64_t min() const;  // 0 when empty
  [[nodiscard]] uint64_t max() const;  // exact; 0 when empty
  [[nodiscard]] double mean() const;   // from bucket midpoints
  // The value at percentile `p` in [0, 100]: the upper bound of the bucket holding the ceil(p% * count)-th
  // smallest value, clamped to max(). 0 when empty.
  [[nodiscard]] uint64_t Percentile(double p) const;

  // How many recorded values are at most `value` (counted by bucket: exact at bucket bounds, else
  // within a bucket's width).
  [[nodiscard]] uint64_t CountAtMost(uint64_t value) const;

  // Bucket arithmetic, exposed for tests.
  [[nodiscard]] static size_t BucketOf(uint64_t value);
  [[nodiscard]] static uint64_t BucketLow(size_t bucket);
  [[nodiscard]] static uint64_t BucketHigh(size_t bucket);  // inclusive
  [[nodiscard]] static size_t BucketCount();

 private:
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> total_{0};
  std::atomic<uint64_t> min_{UINT64_MAX};
  std::atomic<uint64_t> max_{0};
};

}  // namespace ringlimit::client

#endif  // RINGLIMIT_CLIENT_HISTOGRAM_H_
