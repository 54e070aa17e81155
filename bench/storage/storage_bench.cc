// Storage-tier benchmark (issue 4). Prints, in one run:
//  1. Update throughput with persistence on (RocksDB write-back, 100 ms flushes) vs memory-only, and the
//     ratio (target >= 0.9);
//  2. resident heap bytes per active state in the memory tier for token_bucket (target <= 100 B) and
//     sliding_window, measured as the mallinfo2() in-use delta over N distinct keys;
//  3. on-disk bytes per key after a flush and a full compaction.
//
// Usage: storage_bench [--keys=1000000] [--throughput-keys=100000] [--seconds=6] [--threads=2]
// [--dir=/tmp/...]
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "storage/durable_store.h"
#include "storage/memory_store.h"
#include "storage/open.h"

namespace {

using namespace ringlimit;  // NOLINT: a benchmark main

struct Args {
  size_t keys = 1'000'000;           // distinct keys for the memory and disk figures
  size_t throughput_keys = 100'000;  // keys the throughput runs pick from (uniformly)
  double seconds = 3;                // per store, split in rounds alternating the two stores
  int threads = 2;
  std::string dir;
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
    else {
      std::fprintf(stderr,
                   "usage: %s [--keys=N] [--throughput-keys=N] [--seconds=S] [--threads=T] [--dir=D]\n",
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
               [&](std::span<limiter::State* const> s) {
                 limiter::Check(spec, *s[0], limiter::Request{cost, now, 0.});
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

}  // namespace

int main(int argc, char** argv) {
  Args args = Parse(argc, argv);
  spdlog::set_level(spdlog::level::warn);
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
  return 0;
}
