// PUT /v1/headroom, GET /healthz, GET /readyz, GET /metrics.
#include "node/api/admin_handlers.h"

#include "node/api/api_test_util.h"

namespace ringlimit::node {
namespace {

namespace http = boost::beast::http;
namespace json = boost::json;

class AdminTest : public ApiTest {
 protected:
  HttpResponse PutHeadroom(const std::string& body, const Headers& headers = {}) {
    return Send(http::verb::put, "/v1/headroom", body, headers);
  }
  int Admitted(std::string_view key, int attempts) {
    int n = 0;
    for (int i = 0; i < attempts; ++i) {
      HttpResponse r = Post(
          "/v1/check", std::string(R"({"checks":[{"key":")") + std::string(key) + R"(","policy":"api"}]})");
      EXPECT_EQ(r.result_int(), 200u) << r.body();
      n += Json(r).at("allowed").as_bool();
    }
    return n;
  }
};

TEST_F(AdminTest, HeadroomRaisesDynamicLimitsUntilItExpires) {
  ASSERT_TRUE(policies_
                  .LoadJson(R"({"policies":{"api":{"mode":"dynamic","limits":[
      {"algorithm":"fixed_window","limit":10,"dynamic_limit":20,"window_ms":60000}]}}})")
                  .ok());
  EXPECT_EQ(Admitted("busy", 30), 10);  // no signal: headroom 0

  HttpResponse r = PutHeadroom(R"({"policy":"api","headroom":0.5,"ttl_ms":5000})");
  ASSERT_EQ(r.result_int(), 200u) << r.body();
  EXPECT_EQ(Json(r).at("expires_in_ms").to_number<int64_t>(), 5000);
  EXPECT_EQ(Admitted("half", 30), 15);  // 10 + floor(10 * 0.5)

  Advance(5 * limiter::kSecond);  // expired: back to headroom 0
  EXPECT_EQ(Admitted("later", 30), 10);

  ASSERT_EQ(PutHeadroom(R"({"policy":"api","headroom":1})").result_int(), 200u);  // default TTL: 30 s
  Advance(29 * limiter::kSecond);
  EXPECT_EQ(Admitted("idle", 30), 20);
}

TEST_F(AdminTest, HeadroomRejectsBadInput) {
  ExpectError(PutHeadroom(R"({"policy":"api","headroom":1.5})"), 400, "invalid_field");
  ExpectError(PutHeadroom(R"({"policy":"api","headroom":-0.1})"), 400, "invalid_field");
  ExpectError(PutHeadroom(R"({"policy":"api"})"), 400, "invalid_field");
  ExpectError(PutHeadroom(R"({"headroom":0.5})"), 400, "invalid_field");
  ExpectError(PutHeadroom(R"({"policy":"api","headroom":"lots"})"), 400, "invalid_field");
  ExpectError(PutHeadroom(R"({"policy":"api","headroom":0.5,"ttl_ms":0})"), 400, "invalid_field");
  ExpectError(PutHeadroom(R"({"policy":"api","headroom":0.5,"extra":1})"), 400, "invalid_field");
  ExpectError(PutHeadroom("{"), 400, "bad_json");
  ExpectError(Send(http::verb::put, "/v1/headroom", R"({"policy":"api","headroom":0.5})", {}, "text/plain"),
              415, "unsupported_media_type");
  HttpResponse r = Send(http::verb::post, "/v1/headroom", "{}");
  ExpectError(r, 405, "method_not_allowed");
  EXPECT_EQ(r[http::field::allow], "PUT");
}

TEST_F(AdminTest, HeadroomNeedsTheAdminTokenWhenConfigured) {
  ApiOptions options;
  options.admin_token = "t0k";
  Rebuild(options);
  const std::string body = R"({"policy":"api","headroom":0.5})";
  HttpResponse r = PutHeadroom(body);
  ExpectError(r, 401, "unauthorized");
  EXPECT_EQ(r[http::field::www_authenticate], "Bearer");
  EXPECT_EQ(PutHeadroom(body, {{"Authorization", "Bearer t0k"}}).result_int(), 200u);
}

TEST_F(AdminTest, HealthAndReadiness) {
  HttpResponse health = Get("/healthz");
  EXPECT_EQ(health.result_int(), 200u);
  EXPECT_EQ(Json(health).at("status").as_string(), "ok");
  EXPECT_EQ(Get("/readyz").result_int(), 200u);
  service_->SetReady(false);
  EXPECT_FALSE(service_->Ready());
  ExpectError(Get("/readyz"), 503, "not_ready");
  EXPECT_EQ(Get("/healthz").result_int(), 200u);  // alive while not ready
  ExpectError(Send(http::verb::post, "/healthz", "{}"), 405, "method_not_allowed");
}

TEST_F(AdminTest, MetricsCountRequestsDecisionsAndStore) {
  ASSERT_TRUE(
      policies_
          .LoadJson(
              R"({"policies":{"api":{"limits":[{"algorithm":"fixed_window","limit":1,"window_ms":60000}]}}})")
          .ok());
  EXPECT_EQ(Get("/v1/check?key=a&policy=api").result_int(), 200u);
  EXPECT_EQ(Get("/v1/check?key=a&policy=api").result_int(), 429u);
  EXPECT_EQ(Get("/nope").result_int(), 404u);
  metrics_.ObserveLatency(std::chrono::microseconds(30));
  metrics_.ObserveLatency(std::chrono::milliseconds(2));
  metrics_.CountTransportError(413);

  HttpResponse r = Get("/metrics");
  ASSERT_EQ(r.result_int(), 200u);
  EXPECT_EQ(r[http::field::content_type], "text/plain; version=0.0.4; charset=utf-8");
  const std::string& text = r.body();
  for (const char* line : {
           "ringlimit_http_requests_total{endpoint=\"check_get\",status=\"200\"} 1\n",
           "ringlimit_http_requests_total{endpoint=\"check_get\",status=\"429\"} 1\n",
           "ringlimit_http_requests_total{endpoint=\"other\",status=\"404\"} 1\n",
           "ringlimit_http_requests_total{endpoint=\"transport\",status=\"413\"} 1\n",
           "ringlimit_decisions_total{policy=\"api\",outcome=\"allowed\"} 1\n",
           "ringlimit_decisions_total{policy=\"api\",outcome=\"denied\"} 1\n",
           "ringlimit_decisions_total{policy=\"api\",outcome=\"shadow_denied\"} 0\n",
           "ringlimit_request_duration_seconds_bucket{le=\"5e-05\"} 1\n",
           "ringlimit_request_duration_seconds_bucket{le=\"+Inf\"} 2\n",
           "ringlimit_request_duration_seconds_count 2\n",
           "ringlimit_http_request_duration_seconds_count{endpoint=\"check_get\"} 2\n",
           "ringlimit_http_request_duration_seconds_count{endpoint=\"other\"} 1\n",
           "ringlimit_http_request_duration_seconds_bucket{endpoint=\"other\",le=\"+Inf\"} 1\n",
           "ringlimit_keys 1\n",
           "ringlimit_evictions_total 0\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n---\n" << text;
  }
}

}  // namespace
}  // namespace ringlimit::node
