// Storage-tier benchmark (issue 4). Prints, in one run:
//  1. Update throughput with persistence on (RocksDB write-back, 100 ms flushes) vs memory-only, and the
//     ratio (target >= 0.9);
//  2. resident heap bytes per active state in the memory tier for token_bucket (target <= 100 B) and
//     sliding_window, measured as the mallinfo2() in-use delta over N distinct keys;
//  3. on-disk bytes per key after a flush and a full compaction;
//  4. the cost of a memory-tier range scan of 1/64 of the ring vs the whole ring, and the longest Update
//     while a whole-ring scan runs on another thread.
//
// Usage: storage_bench [--keys=1000000] [--seconds=6] [--threads=2]
// [--dir=/tmp/...] [--only=scan]
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "storage/durable_store.h"
#include "storage/memory_store.h"
#include "storage/open.h"
#include "storage/testing/charge.h"

using ringlimit::storage_testing::ChargeMerged;

namespace {

using namespace ringlimit;  // NOLINT: a benchmark main

struct Args {
  size_t keys = 1'000'000;           // distinct keys for the memory and disk figures
  size_t throughput_keys = 100'000;  // keys the throughput runs pick from (uniformly)
  double seconds = 3;                // per store, split in rounds alternating the two stores
  int threads = 2;
  std::string dir;
  bool only_scan = false;  // --only=scan: just section 4 (no RocksDB)
};

Args Parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string_view flag) { return a.substr(flag.size()); };
    if (a.starts_with("--keys="))
      args.keys = std::stoull(value("--keys="));
    else if (a.starts_with("--seconds="))
      args.seconds = std::stod(value("--seconds="));
    else if (a.starts_with("--threads="))
      args.threads = std::stoi(value("--threads="));
    else if (a.starts_with("--dir="))
      args.dir = value("--dir=");
    else if (a == "--only=scan")
      args.only_scan = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--keys=N] [--seconds=S] [--threads=T] [--dir=D] "
                   "[--only=scan]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return args;
}

limiter::TimeNs WallNow() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

limiter::LimitSpec Spec(limiter::Algorithm algorithm) {
  limiter::LimitSpec spec;
  spec.algorithm = algorithm;
  spec.limit = 1000;
  spec.window = 3600 * limiter::kSecond;  // nothing goes idle during the run
  return spec;
}

void Charge(storage::StateStore& store, std::string_view entity, const limiter::LimitSpec& spec,
            limiter::TimeNs now, uint64_t cost = 1) {
  storage::Slot slot{"per_hour", &spec};
  store.Update(entity, std::span<const storage::Slot>(&slot, 1), now,
               [&](std::span<limiter::MergeState* const> s) {
                 ChargeMerged(spec, *s[0], limiter::Request{cost, now, 0.});
               });
}

std::vector<std::string> Entities(size_t n) {
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) out.push_back("user:" + std::to_string(i));
  return out;
}

// Updates per second over `seconds`, `threads` threads picking keys from `entities` pseudo-randomly.
double Throughput(storage::StateStore& store, const std::vector<std::string>& entities, const Args& args,
                  double seconds) {
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kTokenBucket);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> total{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < args.threads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t x = 0x9e3779b97f4a7c15ULL * (t + 1), ops = 0;
      limiter::TimeNs now = WallNow();
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 256; ++i) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          Charge(store, entities[x % entities.size()], spec, now);
        }
        ops += 256;
        now = WallNow();
      }
      total.fetch_add(ops);
    });
  }
  auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  return static_cast<double>(total.load()) /
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

size_t HeapInUse() { return mallinfo2().uordblks; }

double BytesPerKey(limiter::Algorithm algorithm, const std::vector<std::string>& entities) {
  malloc_trim(0);
  size_t before = HeapInUse();
  double per_key;
  {
    storage::MemoryStoreOptions options;
    storage::MemoryStore store(options);
    const limiter::LimitSpec spec = Spec(algorithm);
    limiter::TimeNs now = WallNow();
    for (const auto& e : entities) Charge(store, e, spec, now);
    per_key = static_cast<double>(HeapInUse() - before) / static_cast<double>(store.Stats().keys);
  }
  return per_key;
}

uint64_t DirBytes(const std::string& dir, std::string_view extension) {
  uint64_t bytes = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.is_regular_file() && f.path().extension() == extension) bytes += f.file_size();
  }
  return bytes;
}

double MillisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// 4. A memory store of every entity (token_bucket) over `shards` shards (0 = the default count): a scan of
// the whole ring (best of 3), each of the 64 slices of 1/64 of the ring once (mean), and the longest
// Update on this thread while another thread scans the whole ring.
void ScanFigures(const std::vector<std::string>& entities, size_t shards) {
  storage::MemoryStoreOptions options;
  options.shards = shards;
  storage::MemoryStore store(options);
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kTokenBucket);
  const limiter::TimeNs now = WallNow();
  for (const auto& e : entities) Charge(store, e, spec, now);

  double whole_ms = 1e300;
  size_t whole_states = 0;
  for (int round = 0; round < 3; ++round) {
    auto start = std::chrono::steady_clock::now();
    whole_states = store.ScanTokenRange(0, std::numeric_limits<ring::Token>::max()).size();
    whole_ms = std::min(whole_ms, MillisecondsSince(start));
  }
  constexpr int kSlices = 64;
  constexpr ring::Token kWidth = ring::Token{1} << 58;  // 2^64 / kSlices
  size_t slice_states = 0;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kSlices; ++i) {
    ring::Token first = kWidth * static_cast<ring::Token>(i);
    slice_states += store.ScanTokenRange(first, first + (kWidth - 1)).size();
  }
  double slice_ms = MillisecondsSince(start) / kSlices;

  // Update latencies on this thread while `busy` holds, sorted.
  auto latencies = [&](const std::function<bool()>& busy) {
    std::vector<double> us;
    us.reserve(1 << 24);
    for (uint64_t x = 0x9e3779b97f4a7c15ULL; busy();) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      auto t = std::chrono::steady_clock::now();
      Charge(store, entities[x % entities.size()], spec, now);
      us.push_back(MillisecondsSince(t) * 1e3);
    }
    std::sort(us.begin(), us.end());
    return us;
  };
  auto quantile = [](const std::vector<double>& sorted, double q) {
    return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())))];
  };
  std::atomic<bool> scanning{true};
  double contended_ms = 0;
  std::thread scanner([&] {
    auto scan_start = std::chrono::steady_clock::now();
    (void)store.ScanTokenRange(0, std::numeric_limits<ring::Token>::max());
    contended_ms = MillisecondsSince(scan_start);
    scanning = false;
  });
  auto during = latencies([&] { return scanning.load(std::memory_order_relaxed); });
  scanner.join();
  // The same time without a scan: what the machine's scheduling alone does to the tail.
  auto quiet_start = std::chrono::steady_clock::now();
  auto quiet = latencies([&] { return MillisecondsSince(quiet_start) < contended_ms; });
  std::printf(
      "range scan, %zu states, %zu shards: whole ring %.1f ms (%zu states), 1/64 of the ring %.2f ms "
      "(mean of the 64 slices, %zu states in all, %.0f ms together), ratio 1/%.1f; Update latency during "
      "a whole-ring scan (%.0f ms): p99 %.1f us, p99.9 %.0f us, max %.0f us (%zu updates); without a scan: "
      "p99 %.1f "
      "us, "
      "p99.9 %.0f us, max %.0f us (%zu updates)\n",
      entities.size(), store.TEST_ShardCount(), whole_ms, whole_states, slice_ms, slice_states,
      slice_ms * kSlices, whole_ms / slice_ms, contended_ms, quantile(during, 0.99), quantile(during, 0.999),
      during.back(), during.size(), quantile(quiet, 0.99), quantile(quiet, 0.999), quiet.back(),
      quiet.size());
}

}  // namespace

int main(int argc, char** argv) {
  Args args = Parse(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  if (args.only_scan) {
    std::vector<std::string> entities = Entities(args.keys);
    for (size_t shards : {size_t{0}, size_t{64}}) ScanFigures(entities, shards);
    return 0;
  }
  std::string dir = args.dir;
  if (dir.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "ringlimit-bench-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) return 1;
    dir = pattern;
  }
  std::vector<std::string> entities = Entities(args.keys);

  // 2. Memory per key (first, on a quiet heap).
  double tb = BytesPerKey(limiter::Algorithm::kTokenBucket, entities);
  double sw = BytesPerKey(limiter::Algorithm::kSlidingWindow, entities);
  std::printf(
      "memory tier, %zu distinct keys: token_bucket %.1f B/key (target <= 100), "
      "sliding_window (%u buckets) %.1f B/key\n",
      args.keys, tb, Spec(limiter::Algorithm::kSlidingWindow).buckets, sw);

  // 1. Throughput, memory-only vs write-back, same keys, same run. The machine may be shared: the two
  // stores run in alternating rounds so that a change of background load hits both alike.
  std::vector<std::string> hot(entities.begin(),
                               entities.begin() + std::min(args.throughput_keys, entities.size()));
  storage::StorageOptions options;
  options.data_dir = dir + "/db";
  storage::MemoryStore memory;
  Result<std::unique_ptr<storage::Store>> opened = storage::OpenStateStore(options);
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().message().c_str());
    return 1;
  }
  const limiter::LimitSpec warm_spec = Spec(limiter::Algorithm::kTokenBucket);
  for (const auto& e : hot) {  // every key resident in both stores before measuring (no cold misses)
    Charge(memory, e, warm_spec, WallNow());
    Charge(**opened, e, warm_spec, WallNow());
  }
  (*opened)->Flush();
  const std::vector<std::string> one_key(hot.begin(), hot.begin() + 1);
  struct Scenario {
    const char* name;
    const std::vector<std::string>* keys;
  };
  for (Scenario scenario : {Scenario{"uniform over all keys", &hot}, Scenario{"one hot key", &one_key}}) {
    constexpr int kRounds = 6;
    double memory_ops = 0, durable_ops = 0;
    auto before = (*opened)->Durability();
    for (int round = 0; round < kRounds; ++round) {
      memory_ops += Throughput(memory, *scenario.keys, args, args.seconds / kRounds / 2) / kRounds;
      durable_ops += Throughput(**opened, *scenario.keys, args, args.seconds / kRounds / 2) / kRounds;
    }
    auto d = (*opened)->Durability();
    std::printf(
        "throughput, %s (%zu keys, %d threads): memory-only %.0f updates/s, write-back %.0f updates/s, "
        "ratio %.3f (target >= 0.9); %lu flushes wrote %lu states, %lu write errors\n",
        scenario.name, scenario.keys->size(), args.threads, memory_ops, durable_ops, durable_ops / memory_ops,
        static_cast<unsigned long>(d.flushes - before.flushes),
        static_cast<unsigned long>(d.flushed_states - before.flushed_states),
        static_cast<unsigned long>(d.write_errors));
  }
  opened->reset();

  // 3. On-disk bytes per key: every key once, flushed and fully compacted.
  std::filesystem::remove_all(options.data_dir);
  options.flush_interval_ms = 3'600'000;  // only the explicit Flush below writes: it is timed alone
  {
    opened = storage::OpenStateStore(options);
    if (!opened.ok()) return 1;
    auto* store = static_cast<storage::DurableStore*>(opened->get());
    const limiter::LimitSpec spec = Spec(limiter::Algorithm::kTokenBucket);
    limiter::TimeNs now = WallNow();
    // Half the hour's quota used: the rows do not expire (and get compacted away) during the run.
    for (const auto& e : entities) Charge(*store, e, spec, now, 500);
    auto start = std::chrono::steady_clock::now();
    double cpu_start = ThreadCpuSeconds();
    store->Flush();  // runs on this thread: its CPU time is the flush's cost (without RocksDB's background)
    double cpu = ThreadCpuSeconds() - cpu_start;
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("one flush of %zu dirty states: %.0f ms wall, %.2f us CPU/state\n", args.keys, ms,
                cpu * 1e6 / static_cast<double>(args.keys));
    store->TEST_CompactAll();
  }
  uint64_t sst = DirBytes(options.data_dir, ".sst");
  std::printf("on disk, %zu token_bucket keys after flush + compaction: %.1f B/key (SST, LZ4)\n", args.keys,
              static_cast<double>(sst) / static_cast<double>(args.keys));
  if (args.dir.empty()) std::filesystem::remove_all(dir);

  // 4. Range scans.
  for (size_t shards : {size_t{0}, size_t{64}}) ScanFigures(entities, shards);
  return 0;
}
