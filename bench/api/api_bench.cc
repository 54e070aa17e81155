// ApiHandler throughput on one thread, without sockets: what the transport can at best add on top of.
// Prints ns per request; for POST, decisions/s (items_per_second).
#include <benchmark/benchmark.h>

#include <string>

#include "node/api/api_handler.h"
#include "node/metrics/metrics.h"
#include "node/service/policies.h"
#include "storage/memory_store.h"

namespace ringlimit::node {
namespace {

struct Fixture {
  Fixture() : service(store, SystemClock(), policies, metrics, ApiOptions{}), handler(service) {
    if (!policies
             .LoadJson(R"({"policies":{"api":{"limits":[
        {"algorithm":"token_bucket","limit":1000000000,"window_ms":1000}]}}})")
             .ok()) {
      std::abort();
    }
  }
  storage::MemoryStore store;
  Policies policies;
  Metrics metrics;
  CheckService service;
  ApiHandler handler;
};

void BM_GetCheckHotKey(benchmark::State& state) {
  Fixture f;
  HttpRequest request{boost::beast::http::verb::get, "/v1/check?key=user:42&policy=api", 11};
  for (auto _ : state) benchmark::DoNotOptimize(f.handler.HandleNow(request));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GetCheckHotKey);

void BM_GetCheckManyKeys(benchmark::State& state) {
  Fixture f;
  std::vector<HttpRequest> requests;
  for (int i = 0; i < 100'000; ++i) {
    requests.emplace_back(boost::beast::http::verb::get,
                          "/v1/check?key=user:" + std::to_string(i) + "&policy=api", 11);
  }
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f.handler.HandleNow(requests[i]));
    if (++i == requests.size()) i = 0;
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_GetCheckManyKeys);

void BM_PostCheck100(benchmark::State& state) {
  Fixture f;
  const bool inline_limits = state.range(0) != 0;
  std::string body = R"({"checks":[)";
  for (int i = 0; i < 100; ++i) {
    if (i) body += ',';
    body += R"({"key":"user:)" + std::to_string(i) + "\",";
    body += inline_limits ? R"("name":"rps","algorithm":"token_bucket","limit":1000000000,"window_ms":1000})"
                          : R"("policy":"api"})";
  }
  body += "]}";
  HttpRequest request{boost::beast::http::verb::post, "/v1/check", 11};
  request.set(boost::beast::http::field::content_type, "application/json");
  request.body() = body;
  request.prepare_payload();
  for (auto _ : state) {
    HttpResponse response = f.handler.HandleNow(request);
    if (response.result_int() != 200) state.SkipWithError("not 200");
    benchmark::DoNotOptimize(response);
  }
  state.SetItemsProcessed(state.iterations() * 100);  // decisions
}
BENCHMARK(BM_PostCheck100)->Arg(0)->Arg(1);

}  // namespace
}  // namespace ringlimit::node

BENCHMARK_MAIN();
