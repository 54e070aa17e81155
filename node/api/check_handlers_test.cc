// POST /v1/check and GET /v1/check: decisions, batching, all-or-nothing, headers and bad input.
#include "node/api/check_handlers.h"

#include <string>

#include "api.pb.h"
#include "node/api/api_test_util.h"
#include "node/http/wire.h"
#include "node/service/ratelimit_headers.h"

namespace ringlimit::node {
namespace {

namespace http = boost::beast::http;
namespace json = boost::json;

constexpr char kThreePerMinute[] =
    R"({"checks":[{"key":"user:42","name":"per_minute","algorithm":"fixed_window","limit":3,"window_ms":60000}]})";

class CheckTest : public ApiTest {};

TEST_F(CheckTest, PostAdmitsUpToTheLimitThenDenies) {
  for (uint64_t i = 0; i < 3; ++i) {
    HttpResponse r = Post("/v1/check", kThreePerMinute);
    ASSERT_EQ(r.result_int(), 200u) << r.body();
    json::value v = Json(r);
    EXPECT_TRUE(v.at("allowed").as_bool());
    const json::object& result = v.at("results").as_array().at(0).as_object();
    EXPECT_EQ(result.at("key").as_string(), "user:42");
    EXPECT_EQ(result.at("name").as_string(), "per_minute");
    EXPECT_TRUE(result.at("allowed").as_bool());
    EXPECT_EQ(result.at("limit").to_number<uint64_t>(), 3u);
    EXPECT_EQ(result.at("remaining").to_number<uint64_t>(), 2 - i);
    EXPECT_EQ(result.at("retry_after_ms").to_number<int64_t>(), 0);
    EXPECT_EQ(result.at("mode").as_string(), "hard");
  }
  HttpResponse r = Post("/v1/check", kThreePerMinute);
  ASSERT_EQ(r.result_int(), 200u);  // a denial is a decision, not an error
  json::value v = Json(r);
  EXPECT_FALSE(v.at("allowed").as_bool());
  const json::object& result = v.at("results").as_array().at(0).as_object();
  EXPECT_FALSE(result.at("allowed").as_bool());
  EXPECT_EQ(result.at("remaining").to_number<uint64_t>(), 0u);
  const int64_t retry = result.at("retry_after_ms").to_number<int64_t>();
  EXPECT_GT(retry, 0);
  EXPECT_LE(retry, 60000);

  Advance(60 * limiter::kSecond);
  EXPECT_TRUE(Json(Post("/v1/check", kThreePerMinute)).at("allowed").as_bool());
}

TEST_F(CheckTest, AnchoredWindowStartsAtTheFirstRequest) {
  // Windows from the first request, not from the epoch: reset_ms is a whole window after it and does
  // not move with later requests.
  const char* url = "/v1/check?key=anchored&algorithm=anchored_window&limit=2&window_ms=1000";
  Advance(123 * limiter::kMillisecond);
  json::value a = Json(Get(url));
  EXPECT_EQ(a.at("results").at(0).at("reset_ms").to_number<int64_t>(), 1000);
  Advance(600 * limiter::kMillisecond);
  json::value b = Json(Get(url));
  EXPECT_EQ(b.at("results").at(0).at("reset_ms").to_number<int64_t>(), 400);
  EXPECT_EQ(Get(url).result_int(), 429u);
  Advance(400 * limiter::kMillisecond);
  EXPECT_EQ(Json(Get(url)).at("results").at(0).at("remaining").to_number<uint64_t>(), 1u);
}

TEST_F(CheckTest, ResultCarriesEveryFieldOfTheProtoSchema) {
  json::value v = Json(Post("/v1/check", kThreePerMinute));
  const json::object& result = v.at("results").as_array().at(0).as_object();
  const auto* descriptor = api::CheckResult::descriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    EXPECT_TRUE(result.contains(descriptor->field(i)->name())) << descriptor->field(i)->name();
  }
  EXPECT_EQ(result.size(), static_cast<size_t>(descriptor->field_count()));
  const auto* response = api::CheckResponse::descriptor();
  for (int i = 0; i < response->field_count(); ++i)
    EXPECT_TRUE(v.as_object().contains(response->field(i)->name()));
}

TEST_F(CheckTest, ChecksOnOneKeyAreChargedAllOrNothing) {
  const std::string body =
      R"({"checks":[{"key":"k","name":"big","algorithm":"fixed_window","limit":5,"window_ms":60000},)"
      R"({"key":"k","name":"small","algorithm":"fixed_window","limit":1,"window_ms":60000}]})";
  json::value first = Json(Post("/v1/check", body));
  EXPECT_TRUE(first.at("allowed").as_bool());
  EXPECT_EQ(first.at("results").at(0).at("remaining").to_number<uint64_t>(), 4u);
  for (int i = 0; i < 3; ++i) {
    json::value denied = Json(Post("/v1/check", body));
    EXPECT_FALSE(denied.at("allowed").as_bool());
    EXPECT_FALSE(denied.at("results").at(0).at("allowed").as_bool());
    EXPECT_FALSE(denied.at("results").at(1).at("allowed").as_bool());
  }
  // "big" was not charged by the refused requests: 4 units are still there.
  json::value peek = Json(Post(
      "/v1/check",
      R"({"checks":[{"key":"k","name":"big","algorithm":"fixed_window","limit":5,"window_ms":60000,"cost":0}]})"));
  EXPECT_EQ(peek.at("results").at(0).at("remaining").to_number<uint64_t>(), 4u);
}

TEST_F(CheckTest, DifferentKeysAreIndependentAndResultsKeepRequestOrder) {
  const std::string body =
      R"({"checks":[{"key":"b","name":"n","algorithm":"fixed_window","limit":1,"window_ms":1000,"cost":2},)"
      R"({"key":"a","name":"n","algorithm":"fixed_window","limit":1,"window_ms":1000}]})";
  json::value v = Json(Post("/v1/check", body));
  EXPECT_FALSE(v.at("allowed").as_bool());
  EXPECT_EQ(v.at("results").at(0).at("key").as_string(), "b");
  EXPECT_FALSE(v.at("results").at(0).at("allowed").as_bool());
  EXPECT_EQ(v.at("results").at(0).at("retry_after_ms").to_number<int64_t>(), -1);  // cost 2 > limit 1: never
  EXPECT_EQ(v.at("results").at(1).at("key").as_string(), "a");
  EXPECT_TRUE(v.at("results").at(1).at("allowed").as_bool());
}

TEST_F(CheckTest, NamedPolicyWithTiersAndKeyOverrides) {
  ASSERT_TRUE(policies_
                  .LoadJson(R"({"policies":{"api":{
      "limits":[{"name":"per_hour","algorithm":"fixed_window","limit":500,"window_ms":3600000},
                {"name":"per_minute","algorithm":"token_bucket","limit":2,"window_ms":60000}],
      "tiers":{"gold":{"limits":[{"name":"per_minute","limit":4}]}},
      "keys":{"vip":{"limits":[{"name":"per_minute","limit":6}]}}}}})")
                  .ok());
  auto admitted = [&](std::string_view key, std::string_view tier) {
    int n = 0;
    const std::string body = std::string(R"({"checks":[{"key":")") + std::string(key) +
                             R"(","policy":"api","tier":")" + std::string(tier) + R"("}]})";
    for (int i = 0; i < 10; ++i) {
      HttpResponse r = Post("/v1/check", body);
      EXPECT_EQ(r.result_int(), 200u) << r.body();
      json::value v = Json(r);
      EXPECT_EQ(v.at("results").as_array().size(), 2u);
      EXPECT_EQ(v.at("results").at(0).at("name").as_string(), "api/per_hour");
      EXPECT_EQ(v.at("results").at(1).at("name").as_string(), "api/per_minute");
      n += v.at("allowed").as_bool();
    }
    return n;
  };
  EXPECT_EQ(admitted("free-user", ""), 2);
  EXPECT_EQ(admitted("gold-user", "gold"), 4);
  EXPECT_EQ(admitted("other-user", "no-such-tier"), 2);
  EXPECT_EQ(admitted("vip", "gold"), 6);  // a key override wins over the tier
  // per_hour was charged only for admitted requests (all-or-nothing with per_minute).
  json::value v = Json(Post("/v1/check", R"({"checks":[{"key":"free-user","policy":"api","cost":0}]})"));
  EXPECT_EQ(v.at("results").at(0).at("remaining").to_number<uint64_t>(), 498u);
}

TEST_F(CheckTest, PolicyReloadKeepsStates) {
  ASSERT_TRUE(
      policies_
          .LoadJson(
              R"({"policies":{"api":{"limits":[{"algorithm":"fixed_window","limit":3,"window_ms":60000}]}}})")
          .ok());
  const std::string body = R"({"checks":[{"key":"u","policy":"api"}]})";
  EXPECT_TRUE(Json(Post("/v1/check", body)).at("allowed").as_bool());
  EXPECT_TRUE(Json(Post("/v1/check", body)).at("allowed").as_bool());
  ASSERT_TRUE(
      policies_
          .LoadJson(
              R"({"policies":{"api":{"limits":[{"algorithm":"fixed_window","limit":3,"window_ms":60000}]},
          "other":{"limits":[{"limit":1,"window_ms":1000}]}}})")
          .ok());
  json::value v = Json(Post("/v1/check", body));
  EXPECT_TRUE(v.at("allowed").as_bool());
  EXPECT_EQ(v.at("results").at(0).at("name").as_string(), "api");
  EXPECT_EQ(v.at("results").at(0).at("remaining").to_number<uint64_t>(), 0u);
  EXPECT_FALSE(Json(Post("/v1/check", body)).at("allowed").as_bool());
}

TEST_F(CheckTest, ShadowModeAdmitsButReportsTheDenial) {
  const std::string body =
      R"({"checks":[{"key":"s","name":"n","algorithm":"fixed_window","limit":1,"window_ms":60000,"mode":"shadow"}]})";
  EXPECT_TRUE(Json(Post("/v1/check", body)).at("allowed").as_bool());
  json::value v = Json(Post("/v1/check", body));
  EXPECT_TRUE(v.at("allowed").as_bool());
  EXPECT_TRUE(v.at("results").at(0).at("would_deny").as_bool());
  EXPECT_EQ(v.at("results").at(0).at("mode").as_string(), "shadow");
  EXPECT_EQ(metrics_.ForName("n")->shadow_denied.load(), 1u);
}

TEST(RateLimitHeadersTest, ManyLimitsAndEscapedNamesOutgrowTheInlineText) {
  RateLimitHeaders headers;
  std::string policy, state;
  for (int i = 0; i < 12; ++i) {
    const std::string name = "limit-" + std::to_string(i);
    headers.Add(name, 100 + i, 60, i, 30);
    policy += (i ? ", " : "") + ("\"" + name + "\";q=" + std::to_string(100 + i) + ";w=60");
    state += (i ? ", " : "") + ("\"" + name + "\";r=" + std::to_string(i) + ";t=30");
  }
  EXPECT_EQ(headers.policy(), policy);
  EXPECT_EQ(headers.state(), state);
  RateLimitHeaders escaped;
  escaped.Add("a\"b\\c\n", 1, 0, 0, -5);  // quote and backslash escaped, a control character replaced
  EXPECT_EQ(escaped.policy(), R"("a\"b\\c?";q=1;w=1)");
  EXPECT_EQ(escaped.state(), R"("a\"b\\c?";r=0;t=0)");
}

TEST_F(CheckTest, GetAllowedCarriesRateLimitHeaders) {
  ASSERT_TRUE(
      policies_
          .LoadJson(
              R"({"policies":{"api":{"limits":[{"algorithm":"fixed_window","limit":100,"window_ms":60000}]}}})")
          .ok());
  HttpResponse r = Get("/v1/check?key=user%3A42&policy=api");
  ASSERT_EQ(r.result_int(), 200u) << r.body();
  EXPECT_EQ(r["RateLimit-Policy"], "\"api\";q=100;w=60");
  EXPECT_EQ(r["RateLimit"], "\"api\";r=99;t=60");
  EXPECT_EQ(r["X-RateLimit-Limit"], "100");
  EXPECT_EQ(r["X-RateLimit-Remaining"], "99");
  EXPECT_EQ(r["X-RateLimit-Reset"], "60");
  EXPECT_EQ(r.count(http::field::retry_after), 0u);
  EXPECT_EQ(Json(r).at("results").at(0).at("key").as_string(), "user:42");
}

TEST_F(CheckTest, GetDeniedIs429WithRetryAfterOr403OnRequest) {
  const std::string target = "/v1/check?key=ip:1&name=n&algorithm=fixed_window&limit=1&window_ms=1500";
  ASSERT_EQ(Get(target).result_int(), 200u) << Get(target).body();
  HttpResponse r = Get(target);
  EXPECT_EQ(r.result_int(), 429u);
  EXPECT_EQ(r[http::field::retry_after], "2");  // 1.5 s rounded up
  EXPECT_EQ(r["X-RateLimit-Remaining"], "0");
  EXPECT_EQ(r["RateLimit-Policy"], "\"n\";q=1;w=2");
  EXPECT_EQ(Get(target + "&deny_status=403").result_int(), 403u);
  ExpectError(Get(target + "&deny_status=200"), 400, "invalid_field");
}

TEST_F(CheckTest, GetTakesTheKeyFromTheConfiguredHeader) {
  const std::string target = "/v1/check?name=n&algorithm=fixed_window&limit=1&window_ms=60000";
  EXPECT_EQ(Get(target, {{"X-RateLimit-Key", "10.0.0.1"}}).result_int(), 200u);
  EXPECT_EQ(Get(target, {{"X-RateLimit-Key", "10.0.0.1"}}).result_int(), 429u);
  EXPECT_EQ(Get(target, {{"X-RateLimit-Key", "10.0.0.2"}}).result_int(), 200u);
  ExpectError(Get(target), 400, "invalid_field");  // no key at all

  ApiOptions options;
  options.key_header = "X-Client";
  Rebuild(options);
  EXPECT_EQ(Get(target, {{"X-Client", "c1"}}).result_int(), 200u);
  ExpectError(Get(target, {{"X-RateLimit-Key", "c2"}}), 400, "invalid_field");
}

TEST_F(CheckTest, GetWithSeveralPolicyLimitsListsThemAll) {
  ASSERT_TRUE(policies_
                  .LoadJson(R"({"policies":{"api":{"limits":[
      {"name":"h","algorithm":"fixed_window","limit":500,"window_ms":3600000},
      {"name":"m","algorithm":"fixed_window","limit":10,"window_ms":60000}]}}})")
                  .ok());
  HttpResponse r = Get("/v1/check?key=u&policy=api");
  EXPECT_EQ(r["RateLimit-Policy"], "\"api/h\";q=500;w=3600, \"api/m\";q=10;w=60");
  EXPECT_EQ(r["RateLimit"], "\"api/h\";r=499;t=3600, \"api/m\";r=9;t=60");
  EXPECT_EQ(r["X-RateLimit-Limit"], "10");  // the binding limit: fewest remaining
}

// ---- Bad input: one test per class.

TEST_F(CheckTest, RejectsMalformedJson) {
  ExpectError(Post("/v1/check", "{not json"), 400, "bad_json");
  ExpectError(Post("/v1/check", R"({"checks":[{"key":"a","limit":1)"), 400, "bad_json");  // truncated
  ExpectError(Post("/v1/check", ""), 400, "bad_json");
  ExpectError(Post("/v1/check", "[1,2]"), 400, "invalid_field");
  ExpectError(Post("/v1/check", R"({"checks":[]})"), 400, "invalid_field");
  ExpectError(Post("/v1/check", R"({"checks":[1]})"), 400, "invalid_field");
  ExpectError(Post("/v1/check", R"({"checks":[],"extra":1})"), 400, "invalid_field");
}

TEST_F(CheckTest, RejectsNonUtf8) {
  ExpectError(Post("/v1/check", "{\"checks\":[{\"key\":\"\xff\xfe\",\"limit\":1,\"window_ms\":1000}]}"), 400,
              "bad_json");
  ExpectError(Get("/v1/check?key=%FF%FE&limit=1&window_ms=1000"), 400, "invalid_field");
}

TEST_F(CheckTest, RejectsBadKeys) {
  ExpectError(Post("/v1/check", R"({"checks":[{"key":"","limit":1,"window_ms":1000}]})"), 400,
              "invalid_field");
  ExpectError(Post("/v1/check", R"({"checks":[{"limit":1,"window_ms":1000}]})"), 400, "invalid_field");
  ExpectError(Post("/v1/check", R"({"checks":[{"key":7,"limit":1,"window_ms":1000}]})"), 400,
              "invalid_field");
  const std::string long_key(1025, 'k');
  HttpResponse r =
      Post("/v1/check", R"({"checks":[{"key":")" + long_key + R"(","limit":1,"window_ms":1000}]})");
  ExpectError(r, 400, "invalid_field");
  EXPECT_NE(r.body().find("checks[0].key"), std::string::npos) << r.body();
  const std::string max_key(1024, 'k');
  EXPECT_EQ(Post("/v1/check", R"({"checks":[{"key":")" + max_key + R"(","limit":1,"window_ms":1000}]})")
                .result_int(),
            200u);
}

TEST_F(CheckTest, RejectsTooManyChecks) {
  std::string body = R"({"checks":[)";
  for (int i = 0; i < 1001; ++i) {
    if (i) body += ',';
    body += R"({"key":"k)" + std::to_string(i) + R"(","limit":1,"window_ms":1000})";
  }
  body += "]}";
  ExpectError(Post("/v1/check", body), 400, "too_many_checks");
  EXPECT_EQ(store_.Stats().keys, 0u);  // nothing was charged
}

TEST_F(CheckTest, RejectsInvalidFieldsNamingThem) {
  struct Case {
    const char* check;
    const char* field;
  };
  const Case cases[] = {
      {R"("algorithm":"bogus","limit":1,"window_ms":1000)", "algorithm"},
      {R"("limit":1,"window_ms":1000,"cost":-1)", "cost"},
      {R"("limit":1,"window_ms":1000,"cost":1e30)", "cost"},
      {R"("limit":1,"window_ms":1000,"cost":1.5)", "cost"},
      {R"("limit":-5,"window_ms":1000)", "limit"},
      {R"("limit":0,"window_ms":1000)", "limit"},
      {R"("limit":1000000000000000,"window_ms":1000)", "limit"},
      {R"("limit":1,"window_ms":0)", "window_ms"},
      {R"("limit":1,"window_ms":99999999999999)", "window_ms"},
      {R"("limit":1)", "window_ms"},
      {R"("window_ms":1000)", "limit"},
      {R"("limit":1,"window_ms":1000,"mode":"gentle")", "mode"},
      {R"("limit":1,"window_ms":1000,"limt":2)", "limt"},
      {R"("limit":"1","window_ms":1000)", "limit"},
      {R"("limit":1,"window_ms":1000,"count_denied":"yes")", "count_denied"},
      {R"("policy":"api","limit":1)", "policy"},
      {R"("limit":1,"window_ms":1000,"tier":"gold")", "tier"},
  };
  for (const Case& c : cases) {
    HttpResponse r = Post("/v1/check", std::string(R"({"checks":[{"key":"k",)") + c.check + "}]}");
    ExpectError(r, 400, "invalid_field");
    EXPECT_NE(r.body().find(c.field), std::string::npos) << c.check << " -> " << r.body();
  }
  ExpectError(Get("/v1/check?key=k&limit=abc&window_ms=1000"), 400, "invalid_field");
  ExpectError(Get("/v1/check?key=k&limit=1&window_ms=1000&cost=-1"), 400, "invalid_field");
  EXPECT_EQ(store_.Stats().keys, 0u);
}

TEST_F(CheckTest, RejectsTheSameLimitTwiceForOneKey) {
  const std::string check = R"({"key":"k","name":"n","limit":5,"window_ms":1000})";
  ExpectError(Post("/v1/check", R"({"checks":[)" + check + "," + check + "]}"), 400, "invalid_field");
}

TEST_F(CheckTest, UnknownPolicyIs404) {
  ExpectError(Post("/v1/check", R"({"checks":[{"key":"k","policy":"nope"}]})"), 404, "unknown_policy");
  ExpectError(Get("/v1/check?key=k&policy=nope"), 404, "unknown_policy");
}

TEST_F(CheckTest, WrongMediaTypeMethodAndPath) {
  ExpectError(Send(http::verb::post, "/v1/check", kThreePerMinute, {}, "application/x-www-form-urlencoded"),
              415, "unsupported_media_type");
  EXPECT_EQ(Send(http::verb::post, "/v1/check", kThreePerMinute, {}, "application/json; charset=utf-8")
                .result_int(),
            200u);
  HttpResponse r = Send(http::verb::put, "/v1/check", kThreePerMinute);
  ExpectError(r, 405, "method_not_allowed");
  EXPECT_EQ(r[http::field::allow], "GET, POST");
  ExpectError(Get("/v2/check"), 404, "not_found");
  ExpectError(Get("/"), 404, "not_found");
}

// The bytes a response goes out as (what node/server/session.cc writes for it).
std::string Wire(const HttpResponse& r) {
  std::string out;
  AppendHttpResponse(r, /*head=*/false, /*close=*/false, out);
  return out;
}

class InPlaceTest : public CheckTest {
 protected:
  // GET `target` offered to AnswerInPlace as the transport offers it: its bytes, or "" when declined.
  std::string InPlace(std::string_view target, const Headers& headers = {}) {
    std::string fields = "Host: ringlimit\r\n";
    for (const auto& [name, value] : headers) fields += name + ": " + value + "\r\n";
    std::string out = "kept|";
    const unsigned status = handler_->AnswerInPlace(
        RequestHead{.method = http::verb::get, .target = target, .fields = fields}, out);
    EXPECT_TRUE(out.starts_with("kept|"));  // appended to, never replaced
    out.erase(0, 5);
    EXPECT_EQ(status == 0, out.empty()) << out;
    if (status != 0) {
      EXPECT_TRUE(out.starts_with("HTTP/1.1 " + std::to_string(status) + " ")) << out;
    }
    return out;
  }
};

TEST_F(InPlaceTest, AGetAnsweredInPlaceIsTheBytesHandleAnswersWith) {
  ApiOptions options;
  options.key_header = "X-Client";
  Rebuild(options);
  // The same checks of two keys with names of one length: key "a..." in place, "b..." through Handle.
  const std::vector<std::pair<std::string, Headers>> requests = {
      {"/v1/check?key=#1&limit=3&window_ms=60000", {}},
      {"/v1/check?key=#1&limit=3&window_ms=60000&cost=2", {}},
      {"/v1/check?key=#1&limit=3&window_ms=60000", {}},  // denied: 429 with Retry-After
      {"/v1/check?key=#1&limit=3&window_ms=60000&deny_status=403", {}},
      {"/v1/check?key=%23%31%3Ax&name=n%20m&algorithm=gcra&limit=5&window_ms=1000&burst=2", {}},
      {"/v1/check?name=hdr&limit=1&window_ms=1000", {{"x-client", "#1:h"}}},
      {"/v1/check?key=#1&name=shadow&limit=1&window_ms=1000&mode=shadow", {}},
  };
  auto with = [](std::string s, std::string_view who) {
    for (size_t at = s.find("#1"); at != std::string::npos; at = s.find("#1", at)) s.replace(at, 2, who);
    for (size_t at = s.find("%23%31"); at != std::string::npos; at = s.find("%23%31", at))
      s.replace(at, 6, who);
    return s;
  };
  const uint64_t before = metrics_.TEST_Requests(Endpoint::kCheckGet, 200);
  for (const auto& [target, headers] : requests) {
    Headers a_headers, b_headers;
    for (const auto& [name, value] : headers) {
      a_headers.emplace_back(name, with(value, "a"));
      b_headers.emplace_back(name, with(value, "b"));
    }
    const std::string in_place = InPlace(with(target, "a"), a_headers);
    ASSERT_FALSE(in_place.empty()) << target;
    const std::string handled = Wire(Get(with(target, "b"), b_headers));
    // The keys differ, in the body only.
    std::string expected = handled;
    for (size_t at = expected.find("\"key\":\"b"); at != std::string::npos;
         at = expected.find("\"key\":\"b", at))
      expected.replace(at + 7, 1, "a");
    EXPECT_EQ(in_place, expected) << target;
  }
  // Counted as Handle counts: five answers of 200 each way.
  EXPECT_EQ(metrics_.TEST_Requests(Endpoint::kCheckGet, 200), before + 2 * 5);
}

TEST_F(InPlaceTest, AGetAuthAnsweredInPlaceIsTheBytesHandleAnswersWith) {
  ApiOptions options;
  options.key_header = "X-RateLimit-Key";
  Rebuild(options);
  // nginx's subrequest (examples/nginx/ringlimit.conf): the limit in the query, the key in a header.
  for (int i = 0; i < 3; ++i) {  // admitted, admitted, denied (403 with Retry-After)
    const std::string target = "/v1/auth?algorithm=token_bucket&limit=2&window_ms=60000";
    const std::string in_place = InPlace(target, {{"X-RateLimit-Key", "a"}});
    ASSERT_FALSE(in_place.empty()) << i;
    EXPECT_EQ(in_place, Wire(Get(target, {{"X-RateLimit-Key", "b"}}))) << i;
  }
  // No key, or a bad limit: Handle's (AuthWithoutKey, the reason in X-RateLimit-Error), nothing charged.
  EXPECT_EQ(InPlace("/v1/auth?algorithm=token_bucket&limit=2&window_ms=60000"), "");
  EXPECT_EQ(InPlace("/v1/auth?algorithm=nope&limit=2&window_ms=60000", {{"X-RateLimit-Key", "c"}}), "");
  EXPECT_EQ(metrics_.TEST_Requests(Endpoint::kAuth, 200), 4u);
  EXPECT_EQ(metrics_.TEST_Requests(Endpoint::kAuth, 403), 2u);
}

TEST_F(InPlaceTest, ErrorsAndOtherRequestsAreLeftToHandleWithNothingCharged) {
  EXPECT_EQ(InPlace("/v1/check?key=k&window_ms=1000"), "");                 // no limit: 400
  EXPECT_EQ(InPlace("/v1/check?key=k&limit=1&window_ms=1000&cost=x"), "");  // bad number
  EXPECT_EQ(InPlace("/v1/check?key=k&limit=1&window_ms=1000&deny_status=200"), "");
  EXPECT_EQ(InPlace("/v1/check?key=k&policy=nope"), "");
  EXPECT_EQ(InPlace("/v1/check?key=k%zz&limit=1&window_ms=1000"), "");
  EXPECT_EQ(InPlace("/v1/keys/k"), "");
  EXPECT_EQ(InPlace("/v1/checks?key=k&limit=1&window_ms=1000"), "");
  std::string out;
  EXPECT_EQ(handler_->AnswerInPlace(RequestHead{.method = http::verb::head,
                                                .target = "/v1/check?key=k&limit=1&window_ms=1000",
                                                .fields = ""},
                                    out),
            0u);
  EXPECT_EQ(out, "");
  // None of them charged k: its one unit is still there.
  HttpResponse r = Get("/v1/check?key=k&limit=1&window_ms=1000");
  EXPECT_EQ(r.result_int(), 200u) << r.body();
  EXPECT_EQ(r["X-RateLimit-Remaining"], "0");
}

}  // namespace
}  // namespace ringlimit::node
