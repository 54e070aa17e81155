// What idempotent forwarding costs the deciding node per forwarded check: one DedupCache::Begin (a new
// id) and one Finish with a typical encoded answer (~60 bytes), with the cache full (every insert evicts
// the oldest id), from 1 and 2 threads; and a retry's Begin that hits. The memory it holds is reported
// as bytes per remembered id (process RSS growth while filling a cache of 65,536 ids).
//
// BM_VsMutexMap runs the same first attempts, in alternating blocks, through the DedupCache and through
// MutexMapBaseline -- what a plain locked cache costs (16 shards of a mutex, an unordered_map and a FIFO),
// with ids hashed or not -- and reports the thread CPU time per check of each and the baselines' ratios to
// DedupCache (> 1: DedupCache is faster), measured in the same run.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <deque>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "node/forward/dedup_cache.h"

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

// The baseline: a remembered id and its answer under a shard mutex, the oldest evicted when the shard is
// full. No waiters and no ttl, so it does less than DedupCache. kMixed: ids are hashed (as DedupCache and
// the locked cache it replaced do), so consecutive ids land far apart; else std::hash (the identity), so
// one sender's consecutive ids share cache lines -- a locality DedupCache does not have.
template <bool kMixed>
class MutexMapBaseline {
 public:
  // True when `id` is new (then remembered, in progress).
  bool Begin(RequestId id) {
    Shard& shard = ShardOf(id);
    std::lock_guard lock(shard.mutex);
    if (!shard.answers.try_emplace(id).second) return false;
    shard.order.push_back(id);
    if (shard.order.size() > kPerShard) {
      shard.answers.erase(shard.order.front());
      shard.order.pop_front();
    }
    return true;
  }
  void Finish(RequestId id, const std::string& answer) {
    Shard& shard = ShardOf(id);
    std::lock_guard lock(shard.mutex);
    auto it = shard.answers.find(id);
    if (it != shard.answers.end()) it->second = answer;
  }

 private:
  struct Hash {
    size_t operator()(const RequestId& id) const {
      const uint64_t x = id.lo * 31 + id.hi;
      if (!kMixed) return std::hash<uint64_t>{}(x);
      const uint64_t y = x * 0x9e3779b97f4a7c15ULL;
      return y ^ (y >> 29);
    }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<RequestId, std::string, Hash> answers;  // guarded by mutex
    std::deque<RequestId> order;                               // guarded by mutex: oldest first
  };
  static constexpr size_t kShards = 16;
  static constexpr size_t kPerShard = 65'536 / kShards;
  Shard& ShardOf(RequestId id) { return shards_[Hash{}(id) % kShards]; }
  Shard shards_[kShards];
};

void BM_VsMutexMap(benchmark::State& state) {
  static std::unique_ptr<DedupCache> cache;
  static std::unique_ptr<MutexMapBaseline<false>> map;
  static std::unique_ptr<MutexMapBaseline<true>> mixed;
  static std::atomic<uint64_t> next{1};
  constexpr uint64_t kFill = 65'536, kBlock = 4'096;
  if (state.thread_index() == 0) {  // both full: every first attempt replaces the oldest id
    cache = std::make_unique<DedupCache>(DedupOptions{});
    map = std::make_unique<MutexMapBaseline<false>>();
    mixed = std::make_unique<MutexMapBaseline<true>>();
    for (uint64_t i = 0; i < kFill; ++i) {
      (void)cache->Begin({1, i + 1}, Now(i), nullptr);
      cache->Finish({1, i + 1}, kAnswer);
      map->Begin({1, i + 1});
      map->Finish({1, i + 1}, kAnswer);
      mixed->Begin({1, i + 1});
      mixed->Finish({1, i + 1}, kAnswer);
    }
    next = kFill + 1;
  }
  // This thread's CPU time: on a shared machine, time preempted would otherwise land in either block.
  auto cpu_ns = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
  };
  int64_t in_cache = 0, in_map = 0, in_mixed = 0;
  auto baseline_block = [&](auto& baseline, uint64_t first) {
    const int64_t t0 = cpu_ns();
    for (uint64_t i = first; i < first + kBlock; ++i) {
      benchmark::DoNotOptimize(baseline.Begin({1, i}));
      baseline.Finish({1, i}, kAnswer);
    }
    return cpu_ns() - t0;
  };
  uint64_t checks = 0;
  for (auto _ : state) {
    const uint64_t first = next.fetch_add(kBlock);
    const int64_t t0 = cpu_ns();
    for (uint64_t i = first; i < first + kBlock; ++i) {
      DedupCache::Lookup found = cache->Begin({1, i}, Now(i), nullptr);
      benchmark::DoNotOptimize(found);
      cache->Finish({1, i}, kAnswer);
    }
    in_cache += cpu_ns() - t0;
    in_map += baseline_block(*map, first);
    in_mixed += baseline_block(*mixed, first);
    checks += kBlock;
  }
  const double cache_ns = static_cast<double>(in_cache) / checks;
  const double map_ns = static_cast<double>(in_map) / checks;
  const double mixed_ns = static_cast<double>(in_mixed) / checks;
  auto average = [](double value) { return benchmark::Counter(value, benchmark::Counter::kAvgThreads); };
  state.counters["dedup_ns"] = average(cache_ns);
  state.counters["map_ns"] = average(map_ns);
  state.counters["map_mixed_ns"] = average(mixed_ns);
  state.counters["map/dedup"] = average(map_ns / cache_ns);
  state.counters["map_mixed/dedup"] = average(mixed_ns / cache_ns);
  if (state.thread_index() == 0) {  // the loop's end is a barrier: the other threads are done with them
    cache.reset();
    map.reset();
    mixed.reset();
  }
}
BENCHMARK(BM_VsMutexMap)->Threads(1)->Threads(2)->UseRealTime();

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
