// Nanoseconds per decision for each limiter algorithm: one limit (Check) and three limits charged
// all-or-nothing (CheckAll). The offered load is twice the limit, so about half the requests are
// denied and both paths are measured. Baseline: a bare "count + cost <= limit" on one counter,
// measured in the same run, for the ratio.
#include <benchmark/benchmark.h>

#include <array>

#include "limiter/limiter.h"
#include "limiter/merge.h"

namespace ringlimit::limiter {
namespace {

constexpr std::array<Algorithm, 7> kAll = {
    Algorithm::kFixedWindow,   Algorithm::kSlidingLog,
    Algorithm::kSlidingWindow, Algorithm::kSlidingWindowApprox,
    Algorithm::kTokenBucket,   Algorithm::kLeakyBucket,
    Algorithm::kGcra,
};

LimitSpec Make(Algorithm a, uint64_t limit, DurationNs window) {
  LimitSpec spec;
  spec.algorithm = a;
  spec.limit = limit;
  spec.window = window;
  if (a == Algorithm::kGcra) {
    spec.burst = limit / 10;
  }
  return spec;
}

// 100 per second offered 200 per second (a request every 5 ms).
void BM_Check(benchmark::State& bench) {
  const auto algorithm = static_cast<Algorithm>(bench.range(0));
  const LimitSpec spec = Make(algorithm, 100, kSecond);
  State st;
  Request r;
  r.now = 1'700'000'000LL * kSecond;
  int64_t allowed = 0;
  for (auto _ : bench) {
    r.now += 5 * kMillisecond;
    Decision d = Check(spec, st, r);
    allowed += d.allowed;
    benchmark::DoNotOptimize(d);
  }
  bench.SetLabel(std::string(AlgorithmName(algorithm)));
  bench.counters["allowed_pct"] =
      100.0 * static_cast<double>(allowed) / static_cast<double>(bench.iterations());
}

// Three limits of one algorithm on one entity (100/s, 5000/min, 200000/h), all-or-nothing.
void BM_CheckAll3(benchmark::State& bench) {
  const auto algorithm = static_cast<Algorithm>(bench.range(0));
  const LimitSpec second = Make(algorithm, 100, kSecond);
  const LimitSpec minute = Make(algorithm, 5000, 60 * kSecond);
  LimitSpec hour = Make(algorithm, algorithm == Algorithm::kSlidingLog ? 10000 : 200000, 3600 * kSecond);
  std::array<State, 3> states;
  const std::array<const LimitSpec*, 3> specs = {&second, &minute, &hour};
  const std::array<State*, 3> state_ptrs = {&states[0], &states[1], &states[2]};
  std::array<Decision, 3> decisions;
  Request r;
  r.now = 1'700'000'000LL * kSecond;
  int64_t allowed = 0;
  for (auto _ : bench) {
    r.now += 5 * kMillisecond;
    allowed += CheckAll(specs, state_ptrs, r, decisions);
    benchmark::DoNotOptimize(decisions);
  }
  bench.SetLabel(std::string(AlgorithmName(algorithm)));
  bench.counters["allowed_pct"] =
      100.0 * static_cast<double>(allowed) / static_cast<double>(bench.iterations());
}

// BM_Check through the mergeable state (merge.h): one contributor deciding, as the lease holder
// does; compare with BM_Check of the same algorithm in the same run.
void BM_CheckMerged(benchmark::State& bench) {
  const auto algorithm = static_cast<Algorithm>(bench.range(0));
  const LimitSpec spec = Make(algorithm, 100, kSecond);
  MergeState st;
  Request r;
  r.now = 1'700'000'000LL * kSecond;
  Hlc stamp = 0;
  int64_t allowed = 0;
  for (auto _ : bench) {
    r.now += 5 * kMillisecond;
    stamp = HlcTick(stamp, r.now);
    Decision d = CheckMerged(spec, st, 7, stamp, r);
    allowed += d.allowed;
    benchmark::DoNotOptimize(d);
  }
  bench.SetLabel(std::string(AlgorithmName(algorithm)));
  bench.counters["allowed_pct"] =
      100.0 * static_cast<double>(allowed) / static_cast<double>(bench.iterations());
}

// Baseline: the cheapest possible limiter (one counter, no time) in the same harness.
void BM_BaselineCounter(benchmark::State& bench) {
  uint64_t count = 0;
  int64_t now = 0;
  for (auto _ : bench) {
    now += 5 * kMillisecond;
    if (now % kSecond == 0) {
      count = 0;
    }
    const bool allowed = count + 1 <= 100;
    count += allowed;
    benchmark::DoNotOptimize(allowed);
  }
}

void AllAlgorithms(benchmark::internal::Benchmark* b) {
  for (Algorithm a : kAll) {
    b->Arg(static_cast<int64_t>(a));
  }
}

BENCHMARK(BM_BaselineCounter);
BENCHMARK(BM_Check)->Apply(AllAlgorithms);
BENCHMARK(BM_CheckAll3)->Apply(AllAlgorithms);
BENCHMARK(BM_CheckMerged)->Apply(AllAlgorithms);

}  // namespace
}  // namespace ringlimit::limiter

BENCHMARK_MAIN();
