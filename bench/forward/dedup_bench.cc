// What idempotent forwarding costs the deciding node per forwarded check: one DedupCache::Begin (a new
// id) and one Finish with a typical encoded answer (~60 bytes), with the cache full (every insert evicts
// the oldest id), from 1 and 2 threads; and a retry's Begin that hits. The memory it holds is reported
// as bytes per remembered id (process RSS growth while filling a cache of 65,536 ids).
#include <benchmark/benchmark.h>

#include <atomic>
#include <fstream>
#include <string>

#include "node/cluster/dedup_cache.h"

namespace ringlimit::cluster {
namespace {

const std::string kAnswer(60, 'x');

DedupCache::MonoTime Now(uint64_t i) { return DedupCache::MonoTime(static_cast<int64_t>(i) * 1000); }

DedupCache& Shared() {
  static DedupCache cache(DedupOptions{});
  return cache;
}

std::atomic<uint64_t> next_id{1};

void BM_FirstAttempt(benchmark::State& state) {
  DedupCache& cache = Shared();
  const uint64_t nonce = static_cast<uint64_t>(state.thread_index()) + 1;
  for (auto _ : state) {
    const uint64_t i = next_id.fetch_add(1, std::memory_order_relaxed);
    DedupCache::Lookup found = cache.Begin({nonce, i}, Now(i), nullptr);
    benchmark::DoNotOptimize(found);
    cache.Finish({nonce, i}, kAnswer);
  }
}
BENCHMARK(BM_FirstAttempt)->Threads(1)->Threads(2);

void BM_RetryHit(benchmark::State& state) {
  DedupCache cache(DedupOptions{});
  (void)cache.Begin({9, 1}, Now(0), nullptr);
  cache.Finish({9, 1}, kAnswer);
  for (auto _ : state) {
    DedupCache::Lookup found = cache.Begin({9, 1}, Now(1), nullptr);
    benchmark::DoNotOptimize(found);
  }
}
BENCHMARK(BM_RetryHit);

int64_t RssKb() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return 0;
}

void BM_BytesPerId(benchmark::State& state) {
  for (auto _ : state) {
    const int64_t before = RssKb();
    DedupCache cache(DedupOptions{});
    constexpr uint64_t kIds = 65'536;
    for (uint64_t i = 1; i <= kIds; ++i) {
      (void)cache.Begin({7, i}, Now(i), nullptr);
      cache.Finish({7, i}, kAnswer);
    }
    state.counters["bytes_per_id"] = static_cast<double>(RssKb() - before) * 1024. / kIds;
  }
}
BENCHMARK(BM_BytesPerId)->Iterations(1);

}  // namespace
}  // namespace ringlimit::cluster

BENCHMARK_MAIN();
