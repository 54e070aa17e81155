// Test support for the adapters' tests: a CheckService over a real MemoryStore with a fake clock, the
// HTTP API (ApiHandler) over it with any other adapter's routes, and helpers that build Beast requests and
// parse JSON responses. Test-only.
#ifndef RINGLIMIT_NODE_API_API_TEST_UTIL_H_
#define RINGLIMIT_NODE_API_API_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "node/api/api_handler.h"
#include "node/http/route.h"
#include "node/metrics/metrics.h"
#include "node/service/check_service.h"
#include "node/service/policies.h"
#include "storage/memory_store.h"

namespace ringlimit::node {

class ApiTest : public ::testing::Test {
 protected:
  using Headers = std::vector<std::pair<std::string, std::string>>;

  ApiTest() { Rebuild(ApiOptions{}); }

  // Rebuilds the service and the handler with `options` (the store, policies, metrics and clock are kept),
  // with the routes `routes_` gives.
  void Rebuild(ApiOptions options) {
    handler_.reset();
    service_ = std::make_unique<CheckService>(
        store_, [this] { return now_; }, policies_, metrics_, std::move(options));
    service_->SetReady(true);
    handler_ = std::make_unique<ApiHandler>(*service_);
    if (routes_) {
      for (HttpRoute& route : routes_(*service_)) handler_->AddRoute(std::move(route));
    }
  }

  void Advance(limiter::DurationNs d) { now_ += d; }

  HttpResponse Send(boost::beast::http::verb method, std::string_view target, std::string body = "",
                    const Headers& headers = {}, std::string_view content_type = "application/json") {
    HttpRequest request{method, target, 11};
    for (const auto& [name, value] : headers) request.set(name, value);
    if (!body.empty() && !content_type.empty())
      request.set(boost::beast::http::field::content_type, content_type);
    request.body() = std::move(body);
    request.prepare_payload();
    HttpResponse response;
    int calls = 0;
    handler_->Handle(std::move(request), [&](HttpResponse&& r) {
      response = std::move(r);
      ++calls;
    });
    EXPECT_EQ(calls, 1) << "respond must be called exactly once";
    return response;
  }

  HttpResponse Get(std::string_view target, const Headers& headers = {}) {
    return Send(boost::beast::http::verb::get, target, "", headers);
  }
  HttpResponse Post(std::string_view target, std::string body, const Headers& headers = {}) {
    return Send(boost::beast::http::verb::post, target, std::move(body), headers);
  }

  // The body as JSON; fails the test when it is not.
  static boost::json::value Json(const HttpResponse& response) {
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(response.body(), ec);
    EXPECT_FALSE(ec) << "not JSON: " << response.body();
    return v;
  }

  // Asserts the response is the API's error body with `status` and `code`.
  static void ExpectError(const HttpResponse& response, unsigned status, std::string_view code) {
    EXPECT_EQ(response.result_int(), status) << response.body();
    EXPECT_EQ(response[boost::beast::http::field::content_type], "application/json");
    boost::json::value v = Json(response);
    ASSERT_TRUE(v.is_object()) << response.body();
    const auto* error = v.get_object().if_contains("error");
    ASSERT_NE(error, nullptr) << response.body();
    EXPECT_EQ(error->at("code").as_string(), code) << response.body();
    EXPECT_FALSE(error->at("message").as_string().empty());
  }

  static constexpr limiter::TimeNs kStart = 1'699'999'200LL * limiter::kSecond;
  limiter::TimeNs now_ = kStart;
  storage::MemoryStore store_;
  Policies policies_;
  Metrics metrics_;
  // Other adapters' routes on the HTTP port (set it, then Rebuild). Empty: none.
  std::function<std::vector<HttpRoute>(const CheckService&)> routes_;
  std::unique_ptr<CheckService> service_;
  std::unique_ptr<ApiHandler> handler_;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_API_TEST_UTIL_H_
