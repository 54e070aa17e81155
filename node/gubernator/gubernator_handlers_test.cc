// POST /v1/GetRateLimits, GET /v1/HealthCheck, GET /v1/LiveCheck: Gubernator's JSON gateway shapes.
#include "node/gubernator/gubernator_handlers.h"

#include "node/api/api_test_util.h"

namespace ringlimit::node {
namespace {

namespace json = boost::json;

class GubernatorTest : public ApiTest {
 protected:
  GubernatorTest() {
    routes_ = GatewayRoutes;
    Rebuild(ApiOptions{});
  }

  json::value Call(const std::string& body) {
    HttpResponse r = Post("/v1/GetRateLimits", body);
    EXPECT_EQ(r.result_int(), 200u) << r.body();
    return Json(r);
  }
};

constexpr char kRequest[] =
    R"({"requests":[{"name":"requests_per_sec","unique_key":"account:1234","hits":1,"limit":2,"duration":1000,)"
    R"("algorithm":"TOKEN_BUCKET","behavior":"BATCHING"}]})";

TEST_F(GubernatorTest, UnderThenOverLimitInGubernatorsShape) {
  for (int i = 0; i < 2; ++i) {
    json::value v = Call(kRequest);
    const json::object& resp = v.at("responses").at(0).as_object();
    EXPECT_EQ(resp.at("status").as_string(), "UNDER_LIMIT");
    EXPECT_EQ(resp.at("limit").as_string(), "2");  // int64 as strings, as Protobuf's JSON mapping
    EXPECT_EQ(resp.at("remaining").as_string(), std::to_string(1 - i));
    EXPECT_EQ(resp.at("error").as_string(), "");
    EXPECT_TRUE(resp.at("metadata").as_object().empty());
    const int64_t reset_time = std::stoll(std::string(resp.at("reset_time").as_string()));
    EXPECT_GT(reset_time, kStart / limiter::kMillisecond);
    EXPECT_LE(reset_time, kStart / limiter::kMillisecond + 1000);
  }
  json::value v = Call(kRequest);
  EXPECT_EQ(v.at("responses").at(0).at("status").as_string(), "OVER_LIMIT");
  EXPECT_EQ(v.at("responses").at(0).at("remaining").as_string(), "0");
}

TEST_F(GubernatorTest, TokenBucketResetsAtAFixedTimeAndRefillsAllAtOnce) {
  // As Gubernator's: the bucket ends `duration` after its first hit (reset_time stays put on every hit),
  // nothing comes back before, everything at once after; the next hit starts a new bucket.
  const int64_t t0 = kStart / limiter::kMillisecond;
  auto hit = [&]() { return Call(kRequest).at("responses").at(0).as_object(); };  // limit 2 per 1000 ms
  json::object a = hit();
  EXPECT_EQ(a.at("remaining").as_string(), "1");
  EXPECT_EQ(a.at("reset_time").as_string(), std::to_string(t0 + 1000));
  Advance(400 * limiter::kMillisecond);
  json::object b = hit();
  EXPECT_EQ(b.at("remaining").as_string(), "0");
  EXPECT_EQ(b.at("reset_time").as_string(), std::to_string(t0 + 1000));  // not moved by the hit
  Advance(500 * limiter::kMillisecond);                                  // 900 ms: no refill yet
  json::object c = hit();
  EXPECT_EQ(c.at("status").as_string(), "OVER_LIMIT");
  EXPECT_EQ(c.at("reset_time").as_string(), std::to_string(t0 + 1000));
  Advance(250 * limiter::kMillisecond);  // 1150 ms: all back, a new bucket from this hit
  json::object d = hit();
  EXPECT_EQ(d.at("status").as_string(), "UNDER_LIMIT");
  EXPECT_EQ(d.at("remaining").as_string(), "1");
  EXPECT_EQ(d.at("reset_time").as_string(), std::to_string(t0 + 1150 + 1000));
}

TEST_F(GubernatorTest, AcceptsNumericEnumsStringIntegersAndCamelCase) {
  const std::string body =
      R"({"requests":[{"name":"n","uniqueKey":"k","hits":"3","limit":"5","duration":"60000","algorithm":1,)"
      R"("behavior":9,"burst":"5","created_at":"123","metadata":{"a":"b"}}]})";
  json::value v = Call(body);
  EXPECT_EQ(v.at("responses").at(0).at("status").as_string(), "UNDER_LIMIT");
  // behavior 9 includes RESET_REMAINING: as Gubernator, the state starts over and the hits are ignored.
  EXPECT_EQ(v.at("responses").at(0).at("remaining").as_string(), "5");
  EXPECT_EQ(v.at("responses").at(0).at("reset_time").as_string(), "0");
}

TEST_F(GubernatorTest, ResetRemainingForgetsWhatWasCountedAndIgnoresTheHits) {
  const std::string hit =
      R"({"requests":[{"name":"n","unique_key":"r","hits":4,"limit":5,"duration":60000}]})";
  EXPECT_EQ(Call(hit).at("responses").at(0).at("remaining").as_string(), "1");
  const std::string reset =
      R"({"requests":[{"name":"n","unique_key":"r","hits":3,"limit":5,"duration":60000,"behavior":"RESET_REMAINING"}]})";
  json::value v = Call(reset);
  EXPECT_EQ(v.at("responses").at(0).at("status").as_string(), "UNDER_LIMIT");
  EXPECT_EQ(v.at("responses").at(0).at("remaining").as_string(), "5");
  EXPECT_EQ(Call(hit).at("responses").at(0).at("remaining").as_string(), "1");
}

TEST_F(GubernatorTest, DrainOverLimitEmptiesTheBucketOnAnOverLimitHit) {
  auto call = [&](int hits, bool drain) {
    const std::string body = R"({"requests":[{"name":"n","unique_key":"d","hits":)" + std::to_string(hits) +
                             R"(,"limit":10,"duration":3600000)" +
                             (drain ? R"(,"behavior":"DRAIN_OVER_LIMIT"})" : "}") + "]}";
    return Call(body).at("responses").at(0);
  };
  EXPECT_EQ(call(6, false).at("remaining").as_string(), "4");
  json::value plain = call(5, false);  // over without the flag: nothing taken
  EXPECT_EQ(plain.at("status").as_string(), "OVER_LIMIT");
  EXPECT_EQ(plain.at("remaining").as_string(), "4");
  json::value drained = call(5, true);  // over with it: what was left is gone
  EXPECT_EQ(drained.at("status").as_string(), "OVER_LIMIT");
  EXPECT_EQ(drained.at("remaining").as_string(), "0");
  EXPECT_EQ(call(1, false).at("status").as_string(), "OVER_LIMIT");
}

TEST_F(GubernatorTest, HealthCheckAndLiveCheck) {
  HttpResponse health = Get("/v1/HealthCheck");
  EXPECT_EQ(health.result_int(), 200u);
  json::value v = Json(health);
  EXPECT_EQ(v.at("status").as_string(), "healthy") << health.body();
  EXPECT_EQ(v.at("peer_count").as_int64(), 1);
  EXPECT_EQ(v.at("message").as_string(), "");
  HttpResponse live = Get("/v1/LiveCheck");
  EXPECT_EQ(live.result_int(), 200u);
  EXPECT_TRUE(Json(live).as_object().empty());
  ExpectError(Post("/v1/HealthCheck", "{}"), 405, "method_not_allowed");
}

TEST_F(GubernatorTest, RequestsAreIndependentAndErrorsArePerItem) {
  const std::string body =
      R"({"requests":[{"name":"n","unique_key":"","hits":1,"limit":5,"duration":1000},)"
      R"({"name":"n","unique_key":"k","hits":1,"limit":5,"duration":1000},)"
      R"({"name":"m","unique_key":"k","hits":9,"limit":5,"duration":1000},)"
      R"({"name":"g","unique_key":"k","hits":1,"limit":5,"duration":1000,"behavior":"DURATION_IS_GREGORIAN"},)"
      R"({"name":"z","unique_key":"k","hits":1,"limit":0,"duration":1000}]})";
  json::value v = Call(body);
  const json::array& responses = v.at("responses").as_array();
  ASSERT_EQ(responses.size(), 5u);
  EXPECT_NE(responses[0].at("error").as_string().find("unique_key"), json::string::npos);
  EXPECT_EQ(responses[1].at("status").as_string(), "UNDER_LIMIT");
  EXPECT_EQ(responses[2].at("status").as_string(), "OVER_LIMIT");  // not all-or-nothing with [1]
  EXPECT_NE(responses[3].at("error").as_string().find("GREGORIAN"), json::string::npos);
  EXPECT_EQ(responses[4].at("status").as_string(), "OVER_LIMIT");
  EXPECT_EQ(Call(body).at("responses").at(1).at("remaining").as_string(), "3");
}

TEST_F(GubernatorTest, LeakyBucket) {
  const std::string body =
      R"({"requests":[{"name":"n","unique_key":"k","hits":1,"limit":2,"duration":1000,"algorithm":"LEAKY_BUCKET"}]})";
  EXPECT_EQ(Call(body).at("responses").at(0).at("status").as_string(), "UNDER_LIMIT");
  EXPECT_EQ(Call(body).at("responses").at(0).at("status").as_string(), "UNDER_LIMIT");
  EXPECT_EQ(Call(body).at("responses").at(0).at("status").as_string(), "OVER_LIMIT");
  Advance(500 * limiter::kMillisecond);  // one unit leaks out every 500 ms
  EXPECT_EQ(Call(body).at("responses").at(0).at("status").as_string(), "UNDER_LIMIT");
}

// DURATION_IS_GREGORIAN: `duration` is a calendar unit (0 minutes, 1 hours, 2 days, 3 weeks, 4 months,
// 5 years). kStart is 2023-11-14 22:00:00 UTC.
std::string Gregorian(const char* algorithm, int duration, int limit, int hits = 1) {
  return std::string(R"({"requests":[{"name":"cal","unique_key":"k)") + std::to_string(duration) +
         R"(","hits":)" + std::to_string(hits) + R"(,"limit":)" + std::to_string(limit) + R"(,"duration":)" +
         std::to_string(duration) + R"(,"algorithm":")" + algorithm +
         R"(","behavior":"DURATION_IS_GREGORIAN"}]})";
}

TEST_F(GubernatorTest, GregorianTokenBucketCountsInItsCalendarPeriodAndResetsAtItsEnd) {
  const int64_t start_ms = kStart / limiter::kMillisecond;
  Advance(10'250 * limiter::kMillisecond);  // 22:00:10.250
  auto resp = [&](const std::string& body) { return Call(body).at("responses").at(0).as_object(); };
  json::object a = resp(Gregorian("TOKEN_BUCKET", 0, 2));
  EXPECT_EQ(a.at("status").as_string(), "UNDER_LIMIT");
  EXPECT_EQ(a.at("remaining").as_string(), "1");
  // The minute's last millisecond, as Gubernator reports it.
  EXPECT_EQ(a.at("reset_time").as_string(), std::to_string(start_ms + 60'000 - 1));
  EXPECT_EQ(resp(Gregorian("TOKEN_BUCKET", 0, 2)).at("remaining").as_string(), "0");
  json::object over = resp(Gregorian("TOKEN_BUCKET", 0, 2));
  EXPECT_EQ(over.at("status").as_string(), "OVER_LIMIT");
  EXPECT_EQ(over.at("reset_time").as_string(), std::to_string(start_ms + 60'000 - 1));
  Advance(49'750 * limiter::kMillisecond);  // 22:01:00.000: the next minute, all of it back at once
  json::object next = resp(Gregorian("TOKEN_BUCKET", 0, 2));
  EXPECT_EQ(next.at("status").as_string(), "UNDER_LIMIT");
  EXPECT_EQ(next.at("remaining").as_string(), "1");
  EXPECT_EQ(next.at("reset_time").as_string(), std::to_string(start_ms + 120'000 - 1));
  // Hours and days end at 23:00 and at midnight.
  EXPECT_EQ(resp(Gregorian("TOKEN_BUCKET", 1, 5)).at("reset_time").as_string(),
            std::to_string(start_ms + 3'600'000 - 1));
  EXPECT_EQ(resp(Gregorian("TOKEN_BUCKET", 2, 5)).at("reset_time").as_string(),
            std::to_string(start_ms + 2 * 3'600'000 - 1));
}

TEST_F(GubernatorTest, GregorianLeakyBucketLeaksTheLimitOverTheWholePeriod) {
  // November 2023 has 30 days: 30 per month leak one a day.
  auto status = [&](int hits) {
    return std::string(
        Call(Gregorian("LEAKY_BUCKET", 4, 30, hits)).at("responses").at(0).at("status").as_string());
  };
  EXPECT_EQ(status(30), "UNDER_LIMIT");
  EXPECT_EQ(status(1), "OVER_LIMIT");
  Advance(86'400 * limiter::kSecond);
  EXPECT_EQ(status(1), "UNDER_LIMIT");
  EXPECT_EQ(status(1), "OVER_LIMIT");
}

TEST_F(GubernatorTest, GregorianUnitsGubernatorRefuses) {
  auto error = [&](const std::string& body) {
    return std::string(Call(body).at("responses").at(0).at("error").as_string());
  };
  EXPECT_EQ(error(Gregorian("TOKEN_BUCKET", 3, 5)),
            "`Duration = GregorianWeeks` not yet supported; consider making a PR!`");
  EXPECT_EQ(error(Gregorian("LEAKY_BUCKET", 7, 5)),
            "behavior DURATION_IS_GREGORIAN is set; but `Duration` is not a valid gregorian interval");
  EXPECT_EQ(error(Gregorian("TOKEN_BUCKET", 4, 5)), "");  // a token bucket over a month
  EXPECT_EQ(error(Gregorian("LEAKY_BUCKET", 5, 5)), "");  // a leaky bucket over a year
}

TEST_F(GubernatorTest, GregorianTokenBucketOverMonthsAndYearsFollowsTheCalendar) {
  // kStart is 2023-11-14 22:00 UTC: November ends at 2023-12-01 00:00, the year at 2024-01-01 00:00.
  const int64_t december_ms = 1'701'388'800'000;
  const int64_t year_2024_ms = 1'704'067'200'000;
  auto resp = [&](int64_t unit) {
    return Call(Gregorian("TOKEN_BUCKET", unit, 2)).at("responses").at(0).as_object();
  };
  json::object a = resp(4);
  EXPECT_EQ(a.at("error").as_string(), "");
  EXPECT_EQ(a.at("status").as_string(), "UNDER_LIMIT");
  EXPECT_EQ(a.at("remaining").as_string(), "1");
  EXPECT_EQ(a.at("reset_time").as_string(), std::to_string(december_ms - 1));
  EXPECT_EQ(resp(4).at("remaining").as_string(), "0");
  EXPECT_EQ(resp(4).at("status").as_string(), "OVER_LIMIT");
  json::object year = resp(5);  // the year's counter, apart from the month's
  EXPECT_EQ(year.at("remaining").as_string(), "1");
  EXPECT_EQ(year.at("reset_time").as_string(), std::to_string(year_2024_ms - 1));
  EXPECT_EQ(resp(5).at("remaining").as_string(), "0");
  // A millisecond before December: still November's counter.
  Advance((december_ms - 1) * limiter::kMillisecond - now_);
  EXPECT_EQ(resp(4).at("status").as_string(), "OVER_LIMIT");
  // December: everything back at once, though November's first hit was only 16 days ago; the year's
  // counter goes on.
  Advance(limiter::kMillisecond);
  json::object december = resp(4);
  EXPECT_EQ(december.at("status").as_string(), "UNDER_LIMIT");
  EXPECT_EQ(december.at("remaining").as_string(), "1");
  EXPECT_EQ(december.at("reset_time").as_string(), std::to_string(year_2024_ms - 1));  // Dec has 31 days
  EXPECT_EQ(resp(5).at("status").as_string(), "OVER_LIMIT");
  Advance((year_2024_ms - december_ms) * limiter::kMillisecond);
  EXPECT_EQ(resp(5).at("status").as_string(), "UNDER_LIMIT");
}

// Errors of the whole request in grpc-gateway's form: {"code": <gRPC code>, "message": ..., "details": []}.
void ExpectGatewayError(const HttpResponse& response, unsigned status, int64_t code) {
  EXPECT_EQ(response.result_int(), status) << response.body();
  boost::system::error_code ec;
  json::value v = json::parse(response.body(), ec);
  ASSERT_FALSE(ec) << response.body();
  EXPECT_EQ(v.at("code").as_int64(), code) << response.body();
  EXPECT_FALSE(v.at("message").as_string().empty()) << response.body();
  EXPECT_TRUE(v.at("details").as_array().empty()) << response.body();
}

TEST_F(GubernatorTest, RejectsMalformedRequestsInTheGatewaysErrorForm) {
  ExpectGatewayError(Post("/v1/GetRateLimits", "{"), 400, 3);  // INVALID_ARGUMENT
  ExpectGatewayError(Post("/v1/GetRateLimits", R"({"requests":{}})"), 400, 3);
  ExpectGatewayError(Post("/v1/GetRateLimits", R"({"requests":[{"algorithm":"SLIDING"}]})"), 400, 3);
  ExpectGatewayError(Post("/v1/GetRateLimits", R"({"requests":[{"hits":"lots"}]})"), 400, 3);
  std::string many = R"({"requests":[)";
  for (int i = 0; i < 1001; ++i) many += std::string(i ? "," : "") + R"({"name":"n","unique_key":"k"})";
  ExpectGatewayError(Post("/v1/GetRateLimits", many + "]}"), 400, 11);  // OUT_OF_RANGE, as Gubernator
  EXPECT_EQ(Json(Post("/v1/GetRateLimits", "{}")).at("responses").as_array().size(), 0u);
}

TEST_F(GubernatorTest, ReadsTheBodyAsJsonWhateverItsContentType) {
  // curl -d sends application/x-www-form-urlencoded; Gubernator's gateway reads the body as JSON anyway.
  for (std::string_view type : {"application/x-www-form-urlencoded", "text/plain", ""}) {
    HttpResponse r = Send(boost::beast::http::verb::post, "/v1/GetRateLimits", kRequest, {}, type);
    EXPECT_EQ(r.result_int(), 200u) << type << ": " << r.body();
    EXPECT_EQ(Json(r).at("responses").at(0).at("error").as_string(), "") << type;
  }
  // A body that is not JSON is still the gateway's INVALID_ARGUMENT, not 415.
  ExpectGatewayError(Send(boost::beast::http::verb::post, "/v1/GetRateLimits", "a=1&b=2", {},
                          "application/x-www-form-urlencoded"),
                     400, 3);
  // POST /v1/check is ringlimit's own API: it keeps asking for JSON.
  ExpectError(Send(boost::beast::http::verb::post, "/v1/check", R"({"checks":[]})", {},
                   "application/x-www-form-urlencoded"),
              415, "unsupported_media_type");
}

}  // namespace
}  // namespace ringlimit::node
