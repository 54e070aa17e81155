// The per-check lookups of shared state, from 1 and 2 threads: the policy set (Published, read
// through the per-thread cache), the per-policy metrics counters and a headroom signal, against the
// mutex-guarded shared_ptr copy Policies::Current() used to be. ns per lookup (per thread).
#include <benchmark/benchmark.h>

#include <memory>
#include <mutex>

#include "node/metrics/metrics.h"
#include "node/service/headroom.h"
#include "node/service/policies.h"

namespace ringlimit::node {
namespace {

Policies& SharedPolicies() {
  static Policies* policies = [] {
    auto* p = new Policies();
    if (!p->LoadJson(R"({"policies":{"api":{"limits":[{"limit":10,"window_ms":1000}]}}})").ok()) std::abort();
    return p;
  }();
  return *policies;
}

void BM_PoliciesCurrent(benchmark::State& state) {
  Policies& policies = SharedPolicies();
  for (auto _ : state) benchmark::DoNotOptimize(policies.Current()->Find("api"));
}
BENCHMARK(BM_PoliciesCurrent)->Threads(1)->Threads(2);

// The baseline: what Policies::Current() did before (a pointer copy under a process-wide mutex).
struct MutexHolder {
  std::mutex mutex;
  std::shared_ptr<const PolicySet> set = SharedPolicies().Current();
  std::shared_ptr<const PolicySet> Current() {
    std::lock_guard lock(mutex);
    return set;
  }
};

void BM_MutexSharedPtrCopy(benchmark::State& state) {
  static MutexHolder holder;
  for (auto _ : state) benchmark::DoNotOptimize(holder.Current()->Find("api"));
}
BENCHMARK(BM_MutexSharedPtrCopy)->Threads(1)->Threads(2);

void BM_MetricsForPolicy(benchmark::State& state) {
  static Metrics metrics;
  for (auto _ : state) benchmark::DoNotOptimize(metrics.ForPolicy("api"));
}
BENCHMARK(BM_MetricsForPolicy)->Threads(1)->Threads(2);

void BM_HeadroomGet(benchmark::State& state) {
  static Headroom* headroom = [] {
    auto* h = new Headroom();
    if (!h->Set("api", 0.5, /*expires_at=*/1'000'000, /*now=*/0)) std::abort();
    return h;
  }();
  for (auto _ : state) benchmark::DoNotOptimize(headroom->Get("api", 1));
}
BENCHMARK(BM_HeadroomGet)->Threads(1)->Threads(2);

}  // namespace
}  // namespace ringlimit::node

BENCHMARK_MAIN();
