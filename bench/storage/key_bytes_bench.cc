// Bytes per key in the memory tier (issue 39), per algorithm, through the store path a node uses
// (MemoryStore::Update with limiter::CheckMerged on behalf of one contributor, stamped by a hybrid clock).
//
// Each algorithm runs in a child process of its own (a fresh heap): it inserts --keys keys of --key-bytes
// bytes, one check each, then checks every key once more as a second contributor (a second deciding
// node's copy merged in: the pair form, limiter/merge_pair.h, where it fits), then once more as a third
// (the trio form). For the three phases it prints bytes per key from the resident set (/proc/self/statm
// delta), from the store's own accounting (StoreStats::bytes, what ringlimit_state_bytes reports) and their
// ratio (the --max-memory bound is only as good as it); then where the bytes go (MemoryStore::Breakdown, and
// the allocator's in-use delta from mallinfo2). Then as many new keys again are checked by the first
// contributor (--units times each): what they add to the resident set and the accounting, and the ratio over
// all keys (the blocks the first keys' records grew out of, left free in the heap, are reused by them). A
// last phase checks every key as the first contributor two windows later, when the others' records have
// expired: what a key then holds (compacted back to one contributor for the windows; the buckets keep the
// others' base entries as tombstones until the key goes idle, limiter/merge.h), from the breakdown (freed
// cells stay in their slab for the next group-form key).
//
// --units=U: each contributor checks each key U times in its phase (sliding_log: U stamps per record;
// sliding_window: U live sub-bucket cells, U <= 15; the others: U units counted). For sliding_log and
// sliding_window, whose size grows with U, it also prints the closed form their heap state should cost
// (Formula below) next to the measured RSS and accounting.
//
// --check-path: instead, inserts --keys token_bucket keys and then runs --checks checks on them in
// RunChecks (not inlined), for `valgrind --tool=callgrind --toggle-collect='*RunChecks*'`: instructions
// per check = Ir / --checks.
//
// Usage: key_bytes_bench [--keys=1000000] [--key-bytes=16] [--algorithm=NAME] [--units=U]
//                        [--check-path --checks=N]
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "limiter/hlc.h"
#include "limiter/merge.h"
#include "storage/allocator.h"
#include "storage/memory_store.h"

namespace {

using namespace ringlimit;  // NOLINT: a benchmark main

constexpr limiter::ContributorId kFirst = (uint64_t{1} << 32) | 1;   // node 1, first incarnation
constexpr limiter::ContributorId kSecond = (uint64_t{2} << 32) | 1;  // node 2, first incarnation
constexpr limiter::ContributorId kThird = (uint64_t{3} << 32) | 1;   // node 3, first incarnation

struct Args {
  size_t keys = 1'000'000;
  size_t key_bytes = 16;
  std::optional<limiter::Algorithm> algorithm;  // default: every algorithm
  size_t units = 1;
  bool check_path = false;
  size_t checks = 1'000'000;
};

[[noreturn]] void Usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s [--keys=N] [--key-bytes=B] [--algorithm=NAME] [--units=U] [--check-path [--checks=N]]\n",
      argv0);
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](std::string_view flag) { return a.substr(flag.size()); };
    if (a.starts_with("--keys=")) {
      args.keys = std::stoull(value("--keys="));
    } else if (a.starts_with("--key-bytes=")) {
      args.key_bytes = std::stoull(value("--key-bytes="));
    } else if (a.starts_with("--algorithm=")) {
      args.algorithm = limiter::ParseAlgorithm(value("--algorithm="));
      if (!args.algorithm) Usage(argv[0]);
    } else if (a.starts_with("--units=")) {
      args.units = std::stoull(value("--units="));
    } else if (a == "--check-path") {
      args.check_path = true;
    } else if (a.starts_with("--checks=")) {
      args.checks = std::stoull(value("--checks="));
    } else {
      Usage(argv[0]);
    }
  }
  if (args.key_bytes < 8 || args.key_bytes > 64 || args.units < 1 || args.units > 15) Usage(argv[0]);
  return args;
}

// Nanoseconds since the Unix epoch, as the node's clock.
limiter::TimeNs WallNow() {
  using std::chrono::nanoseconds;
  return nanoseconds(std::chrono::system_clock::now().time_since_epoch()).count();
}

// 1000 per hour (sliding_window: 60 sub-buckets of a minute): nothing goes idle during the run.
limiter::LimitSpec Spec(limiter::Algorithm algorithm) {
  limiter::LimitSpec spec{
      .algorithm = algorithm, .limit = 1000, .window = 3600 * limiter::kSecond, .buckets = 60};
  if (algorithm == limiter::Algorithm::kGcra) spec.burst = 10;  // the others' checks pass
  return spec;
}

// Key i, exactly `bytes` long ("k" and zero-padded digits), written into `buf` (no allocation).
std::string_view Key(size_t i, size_t bytes, char* buf) {
  std::snprintf(buf, bytes + 1, "k%0*zu", static_cast<int>(bytes - 1), i);
  return std::string_view(buf, bytes);
}

// One check of `entity` as a node decides it: CheckMerged on behalf of `me`, stamped by `clock`.
void Check(storage::MemoryStore& store, std::string_view entity, const limiter::LimitSpec& spec,
           limiter::HybridClock& clock, limiter::ContributorId me, limiter::TimeNs now) {
  const storage::Slot slot{"per_hour", &spec};
  struct Work {
    const limiter::LimitSpec* spec;
    limiter::HybridClock* clock;
    limiter::ContributorId me;
    limiter::TimeNs now;
  } work{&spec, &clock, me, now};
  store.Update(entity, std::span<const storage::Slot>(&slot, 1), now,
               [w = &work](std::span<limiter::MergeState* const> s) {
                 (void)limiter::CheckMerged(*w->spec, *s[0], w->me, w->clock->Now(w->now),
                                            limiter::Request{.cost = 1, .now = w->now, .headroom = 0.});
               });
}

// What glibc's allocator takes for a block of `bytes` (an 8-byte header, 16-byte rounding, 32 at least).
double Block(size_t bytes) {
  return static_cast<double>(std::max<size_t>(32, (bytes + 8 + 15) & ~size_t{15}));
}

// The closed form of a key in the heap form with `contributors` records of `units` units each: the entry and
// its accounting word (84 B), its share of the hash set (~10 B at 1 M keys), the MergeState block, the
// records' block, and per record its stamps (sliding_log: 8 B a unit) or cells (sliding_window: 16 B a live
// sub-bucket) block; vectors grown one element at a time hold a power of two, but the records' holds one,
// then three (limiter/merge.cc MakeRoomForRecord), then a power of two. 0 for the algorithms whose states
// pack.
double Formula(limiter::Algorithm algorithm, size_t contributors, size_t units) {
  size_t per_unit = 0;
  if (algorithm == limiter::Algorithm::kSlidingLog) per_unit = sizeof(limiter::TimeNs);
  if (algorithm == limiter::Algorithm::kSlidingWindow) per_unit = sizeof(limiter::Cell);
  if (per_unit == 0) return 0;
  return 84 + 10 + Block(sizeof(limiter::MergeState)) +
         Block((contributors == 1   ? 1
                : contributors <= 3 ? 3
                                    : std::bit_ceil(contributors)) *
               sizeof(limiter::Contribution)) +
         static_cast<double>(contributors) * Block(std::bit_ceil(units) * per_unit);
}

size_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * static_cast<size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

// Heap in use, including blocks the allocator mapped on their own (the hash sets' arrays).
size_t HeapInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

// Inserts every key (phase 1), then checks each again as a second contributor (phase 2) and a third
// (phase 3), then as the first two windows later (phase 4); prints a row of phases 1-3 and the breakdowns.
// Runs in a child process.
void MeasureAlgorithm(const Args& args, limiter::Algorithm algorithm) {
  const limiter::LimitSpec spec = Spec(algorithm);
  storage::MemoryStore store;  // default options, as a node's memory tier
  limiter::HybridClock first(0), second(0), third(0);
  char buf[80];
  limiter::TimeNs now = WallNow();
  // One key first, so that the shards' fixed allocations and the interned name are not counted.
  Check(store, "warm-up", spec, first, kFirst, now);
  malloc_trim(0);
  const size_t rss0 = ResidentBytes(), heap0 = HeapInUse();
  const uint64_t acc0 = store.Stats().bytes;
  // Every key checked --units times by `me` (its clock), keys a microsecond apart from `start`; the units a
  // nanosecond apart (sliding_window: a sub-bucket apart, so that each is a live cell of its own).
  const limiter::TimeNs unit_gap = algorithm == limiter::Algorithm::kSlidingWindow
                                       ? spec.window / static_cast<limiter::TimeNs>(spec.buckets)
                                       : 1;
  auto phase = [&](limiter::HybridClock& clock, limiter::ContributorId me, limiter::TimeNs start,
                   size_t first_key = 0) {
    for (size_t i = 0; i < args.keys; ++i) {
      for (size_t u = 0; u < args.units; ++u) {
        Check(store, Key(first_key + i, args.key_bytes, buf), spec, clock, me,
              start + static_cast<limiter::TimeNs>(i) * 1000 + static_cast<limiter::TimeNs>(u) * unit_gap);
      }
    }
  };
  // Phases follow each other (and every unit of one phase precedes the next).
  const limiter::TimeNs span = static_cast<limiter::TimeNs>(args.keys) * 1000 +
                               static_cast<limiter::TimeNs>(args.units - 1) * unit_gap;
  phase(first, kFirst, now);
  const size_t rss1 = ResidentBytes(), heap1 = HeapInUse();
  const uint64_t acc1 = store.Stats().bytes;
  const storage::MemoryBreakdown one = store.Breakdown();
  phase(second, kSecond, now + span);
  const size_t rss2 = ResidentBytes(), heap2 = HeapInUse();
  const uint64_t acc2 = store.Stats().bytes;
  const storage::MemoryBreakdown two = store.Breakdown();
  phase(third, kThird, now + 2 * span);
  const size_t rss3 = ResidentBytes(), heap3 = HeapInUse();
  const uint64_t acc3 = store.Stats().bytes;
  const storage::MemoryBreakdown three = store.Breakdown();
  // As many new keys again, one contributor each: what the first keys' growth left free in the heap (the
  // record vectors' old blocks) is there for them to reuse.
  phase(first, kFirst, now + 3 * span, args.keys);
  const size_t rss_new = ResidentBytes();
  const uint64_t acc_new = store.Stats().bytes;
  phase(first, kFirst, now + 2 * spec.window + 4 * span);
  phase(first, kFirst, now + 2 * spec.window + 5 * span, args.keys);  // the new keys too (none goes idle)
  const size_t heap4 = HeapInUse();
  const storage::MemoryBreakdown later = store.Breakdown();

  const double n = static_cast<double>(args.keys);
  auto per = [&](double bytes) { return bytes / n; };
  const double rss_1 = per(static_cast<double>(rss1) - static_cast<double>(rss0));
  const double rss_2 = per(static_cast<double>(rss2) - static_cast<double>(rss0));
  const double acc_1 = per(static_cast<double>(acc1 - acc0));
  const double acc_2 = per(static_cast<double>(acc2 - acc0));
  const double rss_3 = per(static_cast<double>(rss3) - static_cast<double>(rss0));
  const double acc_3 = per(static_cast<double>(acc3 - acc0));
  const std::string name(limiter::AlgorithmName(algorithm));
  std::printf("%-22s %9.1f %9.1f %7.2f %11.1f %9.1f %7.2f %8.1f %11.1f %9.1f %7.2f %8.1f\n", name.c_str(),
              rss_1, acc_1, acc_1 / rss_1, rss_2, acc_2, acc_2 / rss_2, rss_2 - rss_1, rss_3, acc_3,
              acc_3 / rss_3, rss_3 - rss_2);
  const double rss_n = per(static_cast<double>(rss_new) - static_cast<double>(rss3));
  const double acc_n = per(static_cast<double>(acc_new - acc3));
  std::printf(
      "  then %zu new keys, one contributor each: RSS %.1f B/key, acct %.1f B/key; all %zu keys: acct/RSS "
      "%.2f\n",
      args.keys, rss_n, acc_n, 2 * args.keys,
      static_cast<double>(acc_new - acc0) / (static_cast<double>(rss_new) - static_cast<double>(rss0)));
  if (const double f1 = Formula(algorithm, 1, args.units); f1 > 0) {
    std::printf("  formula (heap form; 1, 2, 3 contributors of %zu units): %.1f %.1f %.1f B/key\n",
                args.units, f1, Formula(algorithm, 2, args.units), Formula(algorithm, 3, args.units));
  }
  auto items = [&](const char* phase, const storage::MemoryBreakdown& b, size_t heap) {
    const double k = static_cast<double>(b.states);
    const double requested =
        static_cast<double>(b.key_heap_bytes + b.state_object_bytes + b.state_vector_bytes);
    std::printf(
        "  %-9s per key: entry %.1f (pair form %.2f, trio form %.2f per key) | slab slack %.1f | index %.1f "
        "| key heap %.1f | MergeState objects %.1f (%.2f per key) | vectors %.1f "
        "| allocator headers+rounding %.1f (%.1f blocks)\n",
        phase, static_cast<double>(b.entry_bytes) / k, static_cast<double>(b.pair_states) / k,
        static_cast<double>(b.trio_states) / k, static_cast<double>(b.slab_bytes - b.entry_bytes) / k,
        static_cast<double>(b.index_bytes) / k, static_cast<double>(b.key_heap_bytes) / k,
        static_cast<double>(b.state_object_bytes) / k, static_cast<double>(b.state_objects) / k,
        static_cast<double>(b.state_vector_bytes) / k,
        (static_cast<double>(heap - heap0) - requested - static_cast<double>(b.slab_bytes + b.index_bytes)) /
            k,
        static_cast<double>(b.heap_blocks) / k);
  };
  items("1 contr.", one, heap1);
  items("2 contr.", two, heap2);
  items("3 contr.", three, heap3);
  items("2 windows", later, heap4);
  std::fflush(stdout);
}

__attribute__((noinline)) void RunChecks(storage::MemoryStore& store, const limiter::LimitSpec& spec,
                                         limiter::HybridClock& clock, size_t keys, size_t checks,
                                         size_t key_bytes, limiter::TimeNs now) {
  char buf[80];
  uint64_t x = 0x9e3779b97f4a7c15ULL;
  for (size_t i = 0; i < checks; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    Check(store, Key(x % keys, key_bytes, buf), spec, clock, kFirst,
          now + static_cast<limiter::TimeNs>(i) * 1000);
  }
}

int CheckPath(const Args& args) {
  const limiter::LimitSpec spec = Spec(args.algorithm.value_or(limiter::Algorithm::kTokenBucket));
  storage::MemoryStore store;
  limiter::HybridClock clock(0);
  char buf[80];
  const limiter::TimeNs now = WallNow();
  for (size_t i = 0; i < args.keys; ++i) Check(store, Key(i, args.key_bytes, buf), spec, clock, kFirst, now);
  const auto start = std::chrono::steady_clock::now();
  RunChecks(store, spec, clock, args.keys, args.checks, args.key_bytes, now + 1000);
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu checks of %s over %zu keys: %.0f ns/check\n", args.checks,
              std::string(limiter::AlgorithmName(spec.algorithm)).c_str(), args.keys,
              ns / static_cast<double>(args.checks));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = Parse(argc, argv);
  (void)storage::FixAllocatorThresholds();  // as ringlimitd does
  if (args.check_path) return CheckPath(args);
  std::vector<limiter::Algorithm> algorithms = {
      limiter::Algorithm::kTokenBucket,    limiter::Algorithm::kGcra,
      limiter::Algorithm::kFixedWindow,    limiter::Algorithm::kLeakyBucket,
      limiter::Algorithm::kAnchoredWindow, limiter::Algorithm::kSlidingWindowApprox,
      limiter::Algorithm::kSlidingWindow,  limiter::Algorithm::kSlidingLog};
  if (args.algorithm) algorithms = {*args.algorithm};
  std::printf(
      "%zu keys of %zu bytes, %zu unit(s) each by contributor 1, then by contributor 2, then by 3; "
      "then by 1 two windows later (\"2 windows\")\n",
      args.keys, args.key_bytes, args.units);
  std::printf("%-22s %9s %9s %7s %11s %9s %7s %8s %11s %9s %7s %8s\n", "algorithm", "RSS B/key", "acct B/key",
              "acct/RSS", "RSS B/key 2c", "acct 2c", "acct/RSS", "+2nd", "RSS B/key 3c", "acct 3c",
              "acct/RSS", "+3rd");
  std::fflush(stdout);
  int failed = 0;
  for (limiter::Algorithm algorithm : algorithms) {
    const pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
      MeasureAlgorithm(args, algorithm);
      std::_Exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::printf(
      "sliding_window: + 16 B per live sub-bucket cell per contributor; sliding_log: + 8 B per admitted unit "
      "in the window per contributor (allocator blocks of 16 B, 32 B at least: see the formula)\n");
  return failed == 0 ? 0 : 1;
}
