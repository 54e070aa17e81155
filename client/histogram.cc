#include "client/histogram.h"

#include <bit>

namespace ringlimit::client {
namespace {

constexpr int kBits = LatencyHistogram::kSubBucketBits;
constexpr uint64_t kHalf = uint64_t{1} << (kBits - 1);  // sub-buckets per power of two above 2^kBits
constexpr uint64_t kExact = uint64_t{1} << kBits;       // values below are their own bucket

}  // namespace

size_t LatencyHistogram::BucketOf(uint64_t value) {
  if (value < kExact) return static_cast<size_t>(value);
  // shift >= 1 such that value >> shift lies in [kHalf, kExact).
  const int shift = (63 - std::countl_zero(value)) - (kBits - 1);
  return static_cast<size_t>(static_cast<uint64_t>(shift) * kHalf + (value >> shift));
}

uint64_t LatencyHistogram::BucketLow(size_t bucket) {
  if (bucket < kExact) return bucket;
  const uint64_t shift = (bucket - kHalf) / kHalf;  // bucket = shift*kHalf + m, m in [kHalf, kExact)
  const uint64_t m = bucket - shift * kHalf;
  return m << shift;
}

uint64_t LatencyHistogram::BucketHigh(size_t bucket) {
  if (bucket < kExact) return bucket;
  const uint64_t shift = (bucket - kHalf) / kHalf;
  const uint64_t low = BucketLow(bucket);
  return low + ((uint64_t{1} << shift) - 1);
}

size_t LatencyHistogram::BucketCount() { return BucketOf(UINT64_MAX) + 1; }

LatencyHistogram::LatencyHistogram() : counts_(new std::atomic<uint64_t>[BucketCount()]) { Clear(); }

void LatencyHistogram::Clear() {
  for (size_t i = 0; i < BucketCount(); ++i) counts_[i].store(0, std::memory_order_relaxed);
  total_.store(0, std::memory_order_relaxed);
  min_.store(UINT64_MAX, std::memory_order_relaxed);
  max_.store(0, std::memory_order_relaxed);
}

void LatencyHistogram::Record(uint64_t value) {
  counts_[BucketOf(value)].fetch_add(1, std::memory_order_relaxed);
  total_.fetch_add(1, std::memory_order_relaxed);
  uint64_t seen = min_.load(std::memory_order_relaxed);
  while (value < seen && !min_.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
  seen = max_.load(std::memory_order_relaxed);
  while (value > seen && !max_.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (size_t i = 0; i < BucketCount(); ++i) {
    const uint64_t c = other.counts_[i].load(std::memory_order_relaxed);
    if (c != 0) counts_[i].fetch_add(c, std::memory_order_relaxed);
  }
  total_.fetch_add(other.count(), std::memory_order_relaxed);
  if (other.count() == 0) return;
  const uint64_t omin = other.min(), omax = other.max();
  uint64_t seen = min_.load(std::memory_order_relaxed);
  while (omin < seen && !min_.compare_exchange_weak(seen, omin, std::memory_order_relaxed)) {
  }
  seen = max_.load(std::memory_order_relaxed);
  while (omax > seen && !max_.compare_exchange_weak(seen, omax, std::memory_order_relaxed)) {
  }
}

uint64_t LatencyHistogram::count() const { return total_.load(std::memory_order_relaxed); }

uint64_t LatencyHistogram::min() const { return count() == 0 ? 0 : min_.load(std::memory_order_relaxed); }

uint64_t LatencyHistogram::max() const { return max_.load(std::memory_order_relaxed); }

double LatencyHistogram::mean() const {
  double sum = 0;
  uint64_t n = 0;
  for (size_t i = 0; i < BucketCount(); ++i) {
    const uint64_t c = counts_[i].load(std::memory_order_relaxed);
    if (c == 0) continue;
    sum +=
        static_cast<double>(c) * (static_cast<double>(BucketLow(i)) + static_cast<double>(BucketHigh(i))) / 2;
    n += c;
  }
  return n == 0 ? 0 : sum / static_cast<double>(n);
}

uint64_t LatencyHistogram::CountAtMost(uint64_t value) const {
  uint64_t n = 0;
  for (size_t i = 0; i < BucketCount() && BucketLow(i) <= value; ++i)
    n += counts_[i].load(std::memory_order_relaxed);
  return n;
}

uint64_t LatencyHistogram::Percentile(double p) const {
  uint64_t n = 0;
  for (size_t i = 0; i < BucketCount(); ++i) n += counts_[i].load(std::memory_order_relaxed);
  if (n == 0) return 0;
  if (p < 0) p = 0;
  if (p > 100) p = 100;
  uint64_t rank = static_cast<uint64_t>(p / 100.0 * static_cast<double>(n) + 0.999999);
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  for (size_t i = 0; i < BucketCount(); ++i) {
    seen += counts_[i].load(std::memory_order_relaxed);
    if (seen >= rank) {
      const uint64_t high = BucketHigh(i);
      const uint64_t mx = max();
      return high < mx ? high : mx;
    }
  }
  return max();
}

}  // namespace ringlimit::client
