// update_wire_bench: what one replicated key costs its sender to write into a batch, the in-place writer
// (replication/update_wire.h) against the Protobuf route it replaced (FillStateUpdate + SerializeToString),
// both in the same run on the same 64 keys (one token-bucket state each, charged a few times, as live
// replication ships them). Each iteration writes the 64 keys, reading each one's states from the store;
// items/s = keys/s. For instruction counts (steady on a noisy host), run one benchmark under callgrind:
//   valgrind --tool=callgrind build/release/bench/replication/update_wire_bench
//     --benchmark_filter='^BM_WriteInPlace$' --benchmark_min_time=0.01   (one line)
// and divide the benchmark function's inclusive instructions by 64 x the iterations printed.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "peer.pb.h"
#include "replication/replicator.h"
#include "replication/update_wire.h"
#include "storage/memory_store.h"
#include "storage/testing/charge.h"

namespace {

using namespace ringlimit;

constexpr int kKeys = 64;

storage::MemoryStore& Store() {
  static storage::MemoryStore* store = [] {
    auto* s = new storage::MemoryStore();
    limiter::LimitSpec spec;
    spec.algorithm = limiter::Algorithm::kTokenBucket;
    spec.limit = 1000;
    spec.window = 60 * limiter::kSecond;
    for (int k = 0; k < kKeys; ++k) {
      storage::StoredState state;
      state.name = "api/per_minute";
      state.spec = spec;
      for (int n = 0; n < 3; ++n) {
        storage_testing::ChargeMerged(spec, state.state, {1, 1'700'000'000'000'000'000 + n * 1'000'000, 0.});
      }
      state.version = 7;
      (void)s->Absorb("user:" + std::to_string(k), state);
    }
    return s;
  }();
  return *store;
}

std::string Key(int k) { return "user:" + std::to_string(k); }

void BM_WriteProtobuf(benchmark::State& bench) {
  peer::StateUpdate scratch;
  std::string out;
  for (auto _ : bench) {
    for (int k = 0; k < kKeys; ++k) {
      replication::FillStateUpdate(Store(), Key(k), &scratch);
      out.clear();
      scratch.SerializeToString(&out);
      benchmark::DoNotOptimize(out.data());
    }
  }
  bench.SetItemsProcessed(bench.iterations() * kKeys);
}

void BM_WriteInPlace(benchmark::State& bench) {
  std::string out;
  for (auto _ : bench) {
    for (int k = 0; k < kKeys; ++k) {
      const std::string key = Key(k);
      out.clear();
      replication::AppendStateUpdate(key, false, Store().Get(key), out);
      benchmark::DoNotOptimize(out.data());
    }
  }
  bench.SetItemsProcessed(bench.iterations() * kKeys);
}

BENCHMARK(BM_WriteProtobuf);
BENCHMARK(BM_WriteInPlace);

}  // namespace

BENCHMARK_MAIN();
