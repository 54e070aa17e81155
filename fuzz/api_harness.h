// The node/api side of the fuzz targets: a real ApiHandler of one node without a cluster (a MemoryStore,
// the example policies, a fixed clock), built afresh for each input so that every input reproduces on
// its own, and the invariants every API response must hold whatever the request.
//
// Thread safety: ApiHarness is used by one thread (libFuzzer runs inputs one at a time).
#ifndef RINGLIMIT_FUZZ_API_HARNESS_H_
#define RINGLIMIT_FUZZ_API_HARNESS_H_

#include <boost/json.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "fuzz/fuzz_util.h"
#include "limiter/limiter.h"
#include "node/api/api_handler.h"
#include "node/gubernator/gubernator_handlers.h"
#include "node/metrics/metrics.h"
#include "node/service/check_service.h"
#include "node/service/policies.h"
#include "storage/memory_store.h"

namespace ringlimit::fuzz {

// The policies the handler knows (examples/policies.json plus one of every algorithm), so that inputs
// naming a policy reach the policy paths.
inline constexpr std::string_view kPolicies = R"({"policies": {
  "api": {"mode": "hard",
    "limits": [{"name": "per_hour", "algorithm": "sliding_window", "limit": 500, "window_ms": 3600000},
               {"name": "per_minute", "algorithm": "token_bucket", "limit": 10, "window_ms": 60000, "burst": 10}],
    "tiers": {"gold": {"limits": [{"name": "per_hour", "limit": 5000}, {"name": "per_minute", "limit": 100}]}},
    "keys": {"user:1": {"mode": "shadow", "limits": [{"name": "per_minute", "limit": 1000}]}}},
  "login": {"limits": [{"algorithm": "gcra", "limit": 5, "window_ms": 60000, "burst": 2, "count_denied": true}]},
  "log": {"limits": [{"algorithm": "sliding_log", "limit": 3, "window_ms": 1000}]},
  "shaper": {"limits": [{"algorithm": "leaky_bucket", "limit": 5, "window_ms": 1000, "max_delay_ms": 2000}]},
  "soft": {"limits": [{"algorithm": "fixed_window", "limit": 4, "window_ms": 1000, "mode": "soft", "soft_pct": 50}]},
  "approx": {"limits": [{"algorithm": "sliding_window_approx", "limit": 4, "window_ms": 1000}]}
}})";

class ApiHarness {
 public:
  // A handler over an empty store at a fixed instant, with `policies` (default: kPolicies).
  // `policies` must outlive the harness.
  explicit ApiHarness(node::Policies* policies = nullptr) : store_(StoreOptions()) {
    static node::Policies* shared = [] {
      auto* p = new node::Policies();  // immutable once loaded; shared by every input
      FUZZ_CHECK(p->LoadJson(kPolicies).ok(), "the harness's policies do not load");
      return p;
    }();
    node::ApiOptions options;
    options.max_checks = 64;  // the limit is a parameter; a smaller one keeps inputs fast
    service_ = std::make_unique<node::CheckService>(
        store_, [this] { return now_; }, policies != nullptr ? *policies : *shared, metrics_,
        std::move(options));
    service_->SetReady(true);
    handler_ = std::make_unique<node::ApiHandler>(*service_);
    for (node::HttpRoute& route : node::GatewayRoutes(*service_)) handler_->AddRoute(std::move(route));
  }
  ApiHarness(const ApiHarness&) = delete;
  ApiHarness& operator=(const ApiHarness&) = delete;

  [[nodiscard]] node::ApiHandler& handler() { return *handler_; }
  [[nodiscard]] node::CheckService& service() { return *service_; }

  // Sends `request` through ApiHandler::Handle (as the transport does) and checks the response.
  node::HttpResponse Send(node::HttpRequest&& request) {
    const std::string path(request.target().substr(0, request.target().find('?')));
    node::HttpResponse response;
    int calls = 0;
    handler_->Handle(std::move(request), [&](node::HttpResponse&& r) {
      response = std::move(r);
      ++calls;
    });
    FUZZ_CHECK(calls == 1, "respond must be called exactly once, before Handle returns (no cluster)");
    CheckResponse(path, response);
    now_ += 7 * limiter::kMillisecond;  // the next request of the same input comes a little later
    return response;
  }

  // Offers `request` (which has no body) to ApiHandler::AnswerInPlace, as the transport does before Send;
  // when it answers, checks its bytes -- one whole keep-alive HTTP/1.1 response with a Content-Length body,
  // the status it returned -- and the response as Send does. False: declined (nothing appended): Send it.
  bool AnswerInPlace(const node::HttpRequest& request) {
    std::string fields;
    for (const auto& field : request) {
      fields.append(field.name_string()).append(": ").append(field.value()).append("\r\n");
    }
    std::string out;
    const unsigned status = handler_->AnswerInPlace(
        node::RequestHead{.method = request.method(), .target = request.target(), .fields = fields}, out);
    if (status == 0) {
      FUZZ_CHECK(out.empty(), "a declined request appended nothing");
      return false;
    }
    boost::beast::http::response_parser<boost::beast::http::string_body> parser;
    parser.eager(true);
    boost::system::error_code ec;
    const size_t used = parser.put(boost::asio::buffer(out), ec);
    FUZZ_CHECK(!ec && parser.is_done() && used == out.size(), "one whole HTTP response");
    const auto& wire = parser.get();
    FUZZ_CHECK(wire.result_int() == status && wire.keep_alive() && wire.version() == 11,
               "status, keep-alive");
    node::HttpResponse response{wire.result(), 11};
    for (const auto& field : wire) response.insert(field.name_string(), field.value());
    response.body() = wire.body();
    CheckResponse(request.target().substr(0, request.target().find('?')), response);
    now_ += 7 * limiter::kMillisecond;
    return true;
  }

  // POSTs `body` as application/json to `path` (Send's checks included) and returns what answered, with the
  // body parsed when the answer is a 200 (null otherwise; a 200 whose body does not parse fails the input).
  std::pair<node::HttpResponse, boost::json::value> PostJson(std::string_view path, std::string_view body) {
    node::HttpRequest request{boost::beast::http::verb::post, path, 11};
    request.set(boost::beast::http::field::content_type, "application/json");
    request.body() = std::string(body);
    request.prepare_payload();
    node::HttpResponse response = Send(std::move(request));
    boost::json::value answer;
    if (response.result_int() == 200) answer = boost::json::parse(response.body());
    return {std::move(response), std::move(answer)};
  }

  // The invariants of any response to any request: never a 5xx (the node is ready and has no cluster,
  // so only a bug answers 500); a JSON Content-Type means a body that parses; every 4xx is JSON -- the
  // error body {"error":{"code","message"}}, Gubernator's gateway error {"code","message"}, or a
  // check's own answer ({"allowed":false,...}: 429, ?deny_status=4xx, /v1/auth's denial).
  static void CheckResponse(std::string_view path, const node::HttpResponse& response) {
    const unsigned status = response.result_int();
    FUZZ_CHECK(status >= 200 && status < 500, "a status other than 2xx-4xx");
    const bool json_type = response[boost::beast::http::field::content_type] == "application/json";
    FUZZ_CHECK(status < 400 || json_type, "a 4xx without Content-Type application/json");
    if (!json_type) return;
    boost::system::error_code ec;
    const boost::json::value body = boost::json::parse(response.body(), ec);
    FUZZ_CHECK(!ec, "a JSON response whose body does not parse");
    FUZZ_CHECK(body.is_object(), "a JSON response whose body is not an object");
    if (status < 400) return;
    const boost::json::object& o = body.get_object();
    if (const auto* error = o.if_contains("error")) {
      FUZZ_CHECK(error->is_object(), "\"error\" is not an object");
      const auto* code = error->get_object().if_contains("code");
      const auto* message = error->get_object().if_contains("message");
      FUZZ_CHECK(code != nullptr && code->is_string() && !code->get_string().empty(), "error without code");
      FUZZ_CHECK(message != nullptr && message->is_string(), "error without message");
      return;
    }
    if (path == "/v1/GetRateLimits") {
      FUZZ_CHECK(o.contains("code") && o.contains("message"), "a gateway 4xx without code and message");
      return;
    }
    FUZZ_CHECK(o.contains("allowed"), "a 4xx that is neither an error nor a decision");
  }

 private:
  static storage::MemoryStoreOptions StoreOptions() {
    storage::MemoryStoreOptions options;
    options.shards = 1;  // a store per input: one shard is enough and quick to build
    options.max_keys = 4096;
    return options;
  }

  limiter::TimeNs now_ = 1'699'999'200LL * limiter::kSecond;
  storage::MemoryStore store_;
  node::Metrics metrics_;
  std::unique_ptr<node::CheckService> service_;
  std::unique_ptr<node::ApiHandler> handler_;
};

}  // namespace ringlimit::fuzz

#endif  // RINGLIMIT_FUZZ_API_HARNESS_H_
