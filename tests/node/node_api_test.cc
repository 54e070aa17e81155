// Every endpoint and every response header of the HTTP API, over the wire against a real ringlimitd.
#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/node/node_test_util.h"

namespace ringlimit::testing {
namespace {

namespace json = boost::json;

constexpr char kPolicies[] = R"({"policies": {
  "api": {"limits": [{"algorithm": "fixed_window", "limit": 3, "window_ms": 60000}],
          "tiers": {"gold": {"limits": [{"limit": 5}]}}},
  "dual": {"limits": [{"name": "per_hour", "algorithm": "fixed_window", "limit": 500, "window_ms": 3600000},
                      {"name": "per_minute", "algorithm": "fixed_window", "limit": 2, "window_ms": 60000}]}
}})";

constexpr char kToken[] = "s3cret";

class NodeApiTest : public NodeTest {
 protected:
  std::vector<std::string> Args() override {
    policies_ = std::filesystem::temp_directory_path() /
                ("ringlimit-api-policies-" + std::to_string(::getpid()) + ".json");
    EXPECT_TRUE(WriteFile(policies_, kPolicies));
    return {"--threads", "2", "--policies", policies_.string(), "--admin-token", kToken};
  }
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove(policies_, ignored);
  }

  std::filesystem::path policies_;
};

TEST_F(NodeApiTest, HealthAndReadiness) {
  auto health = Must(client_->Get("/healthz"));
  EXPECT_EQ(health.result_int(), 200);
  EXPECT_EQ(Header(health, "Content-Type"), "application/json");
  EXPECT_EQ(JsonBody(health).at("status"), "ok");
  auto ready = Must(client_->Get("/readyz"));
  EXPECT_EQ(ready.result_int(), 200);
  EXPECT_EQ(JsonBody(ready).at("status"), "ready");
}

TEST_F(NodeApiTest, PostCheckInlineLimitAdmitsUpToTheLimit) {
  const std::string body =
      R"({"checks":[{"key":"user:42","name":"per_minute","algorithm":"token_bucket","limit":2,"window_ms":60000,"burst":2,"cost":1}]})";
  for (int i = 0; i < 2; ++i) {
    auto response = Must(client_->Post("/v1/check", body));
    ASSERT_EQ(response.result_int(), 200) << response.body();
    const auto json = JsonBody(response);
    EXPECT_EQ(json.at("allowed"), true);
    const auto& result = json.at("results").at(0);
    EXPECT_EQ(result.at("key"), "user:42");
    EXPECT_EQ(result.at("name"), "per_minute");
    EXPECT_EQ(result.at("allowed"), true);
    EXPECT_EQ(result.at("limit"), 2);
    EXPECT_EQ(result.at("remaining"), 1 - i);
    EXPECT_EQ(result.at("mode"), "hard");
  }
  auto denied = Must(client_->Post("/v1/check", body));
  ASSERT_EQ(denied.result_int(), 200);  // the batch endpoint reports decisions in the body
  const auto json = JsonBody(denied);
  EXPECT_EQ(json.at("allowed"), false);
  EXPECT_GT(json.at("results").at(0).at("retry_after_ms").to_number<int64_t>(), 0);
}

TEST_F(NodeApiTest, PostCheckChargesChecksOnOneKeyAllOrNothing) {
  // Two limits on one key; the second is exhausted after one request, so the first must not be
  // charged by the denied second request.
  const std::string body = R"({"checks":[
    {"key":"k","name":"big","algorithm":"fixed_window","limit":10,"window_ms":60000},
    {"key":"k","name":"small","algorithm":"fixed_window","limit":1,"window_ms":60000}]})";
  EXPECT_EQ(JsonBody(Must(client_->Post("/v1/check", body))).at("allowed"), true);
  const auto denied = JsonBody(Must(client_->Post("/v1/check", body)));
  EXPECT_EQ(denied.at("allowed"), false);
  EXPECT_EQ(denied.at("results").at(0).at("remaining"), 9);  // not charged a second time
}

TEST_F(NodeApiTest, PostCheckWithNamedPolicyAndTier) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(JsonBody(Must(client_->Post("/v1/check", R"({"checks":[{"key":"c1","policy":"api"}]})")))
                  .at("allowed"),
              true);
  }
  EXPECT_EQ(
      JsonBody(Must(client_->Post("/v1/check", R"({"checks":[{"key":"c1","policy":"api"}]})"))).at("allowed"),
      false);
  // A gold customer gets 5.
  for (int i = 0; i < 5; ++i) {
    auto json = JsonBody(
        Must(client_->Post("/v1/check", R"({"checks":[{"key":"c2","policy":"api","tier":"gold"}]})")));
    EXPECT_EQ(json.at("allowed"), true) << i;
  }
  EXPECT_EQ(
      JsonBody(Must(client_->Post("/v1/check", R"({"checks":[{"key":"c2","policy":"api","tier":"gold"}]})")))
          .at("allowed"),
      false);
}

TEST_F(NodeApiTest, GetCheckAllowedCarriesEveryRateLimitHeader) {
  auto response = Must(client_->Get("/v1/check?key=u1&policy=api&cost=1"));
  ASSERT_EQ(response.result_int(), 200) << response.body();
  EXPECT_EQ(Header(response, "RateLimit-Policy"), "\"api\";q=3;w=60");
  EXPECT_EQ(Header(response, "RateLimit").substr(0, 11), "\"api\";r=2;t");
  EXPECT_EQ(Header(response, "X-RateLimit-Limit"), "3");
  EXPECT_EQ(Header(response, "X-RateLimit-Remaining"), "2");
  EXPECT_FALSE(Header(response, "X-RateLimit-Reset").empty());
  EXPECT_EQ(Header(response, "Retry-After"), "");
  EXPECT_EQ(JsonBody(response).at("allowed"), true);
}

TEST_F(NodeApiTest, GetCheckDeniedIs429WithRetryAfterOr403OnRequest) {
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Must(client_->Get("/v1/check?key=u2&policy=api")).result_int(), 200);
  auto denied = Must(client_->Get("/v1/check?key=u2&policy=api"));
  EXPECT_EQ(denied.result_int(), 429);
  EXPECT_EQ(Header(denied, "X-RateLimit-Remaining"), "0");
  EXPECT_FALSE(Header(denied, "Retry-After").empty());
  EXPECT_GE(std::stoi(Header(denied, "Retry-After")), 1);
  EXPECT_EQ(JsonBody(denied).at("allowed"), false);
  auto forbidden = Must(client_->Get("/v1/check?key=u2&policy=api&deny_status=403"));
  EXPECT_EQ(forbidden.result_int(), 403);
  EXPECT_FALSE(Header(forbidden, "Retry-After").empty());
}

TEST_F(NodeApiTest, GetCheckInlineParametersAndSeveralLimits) {
  auto inline_check =
      Must(client_->Get("/v1/check?key=u3&name=burst&algorithm=gcra&limit=10&window_ms=1000&burst=4"));
  EXPECT_EQ(inline_check.result_int(), 200) << inline_check.body();
  EXPECT_EQ(Header(inline_check, "RateLimit-Policy"), "\"burst\";q=10;w=1");

  auto dual = Must(client_->Get("/v1/check?key=u3&policy=dual"));
  EXPECT_EQ(dual.result_int(), 200);
  EXPECT_EQ(Header(dual, "RateLimit-Policy"), "\"dual/per_hour\";q=500;w=3600, \"dual/per_minute\";q=2;w=60");
  // The binding limit (fewest left) drives X-RateLimit-*.
  EXPECT_EQ(Header(dual, "X-RateLimit-Limit"), "2");
  EXPECT_EQ(Header(dual, "X-RateLimit-Remaining"), "1");
}

TEST_F(NodeApiTest, GetCheckTakesTheKeyFromTheKeyHeader) {
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(Must(client_->Get("/v1/check?policy=api", {{"X-RateLimit-Key", "from-header"}})).result_int(),
              200);
  }
  EXPECT_EQ(Must(client_->Get("/v1/check?policy=api", {{"X-RateLimit-Key", "from-header"}})).result_int(),
            429);
  // The same key given in the query shares the state.
  EXPECT_EQ(Must(client_->Get("/v1/check?key=from-header&policy=api")).result_int(), 429);
}

TEST_F(NodeApiTest, KeysGetAndDeleteWithAdminToken) {
  ASSERT_EQ(Must(client_->Get("/v1/check?key=entity&policy=dual")).result_int(), 200);
  auto got = Must(client_->Get("/v1/keys/entity"));
  ASSERT_EQ(got.result_int(), 200) << got.body();
  const auto json = JsonBody(got);
  EXPECT_EQ(json.at("key"), "entity");
  ASSERT_EQ(json.at("states").as_array().size(), 2u);
  EXPECT_EQ(json.at("states").at(0).at("name"), "dual/per_hour");
  EXPECT_EQ(json.at("states").at(1).at("remaining"), 1);

  auto unauthorized = Must(client_->Delete("/v1/keys/entity"));
  EXPECT_EQ(unauthorized.result_int(), 401);
  EXPECT_EQ(ErrorCode(unauthorized), "unauthorized");
  EXPECT_EQ(Must(client_->Delete("/v1/keys/entity", {{"Authorization", "Bearer wrong"}})).result_int(), 401);

  const Headers auth = {{"Authorization", std::string("Bearer ") + kToken}};
  auto one = Must(client_->Delete("/v1/keys/entity?name=dual/per_minute", auth));
  ASSERT_EQ(one.result_int(), 200) << one.body();
  EXPECT_EQ(JsonBody(one).at("removed"), 1);
  EXPECT_EQ(JsonBody(Must(client_->Get("/v1/keys/entity"))).at("states").as_array().size(), 1u);
  auto all = Must(client_->Delete("/v1/keys/entity", auth));
  EXPECT_EQ(JsonBody(all).at("removed"), 1);
  EXPECT_EQ(JsonBody(Must(client_->Get("/v1/keys/entity"))).at("states").as_array().size(), 0u);
}

// A policy's counters can be read, replaced or reset only through the policy: an inline check or a
// Gubernator item that names one of its states is refused, and the counter is untouched.
TEST_F(NodeApiTest, InlineChecksAndGubernatorItemsCannotTouchAPolicysState) {
  ASSERT_EQ(Must(client_->Get("/v1/check?key=guarded&policy=dual")).result_int(), 200);
  ASSERT_EQ(Must(client_->Get("/v1/check?key=guarded&policy=dual")).result_int(), 200);
  ASSERT_EQ(Must(client_->Get("/v1/check?key=guarded&policy=dual")).result_int(), 429);  // per_minute: 2
  for (const char* name : {"dual/per_minute", "dual", "dual/anything"}) {
    auto inline_check = Must(client_->Post(
        "/v1/check", std::string(R"({"checks":[{"key":"guarded","name":")") + name +
                         R"(","algorithm":"fixed_window","limit":100,"window_ms":60000,"cost":0}]})"));
    EXPECT_EQ(inline_check.result_int(), 400) << name << ": " << inline_check.body();
    EXPECT_NE(inline_check.body().find("policy"), std::string::npos) << inline_check.body();
  }
  auto reset = Must(client_->Post("/v1/GetRateLimits",
                                  R"({"requests":[{"name":"dual/per_minute","unique_key":"guarded","hits":1,)"
                                  R"("limit":100,"duration":60000,"behavior":"RESET_REMAINING"}]})"));
  ASSERT_EQ(reset.result_int(), 200) << reset.body();
  EXPECT_NE(JsonBody(reset).at("responses").at(0).at("error").as_string().find("policy"), json::string::npos)
      << reset.body();
  EXPECT_EQ(Must(client_->Get("/v1/check?key=guarded&policy=dual")).result_int(), 429);  // still exhausted
  // A name that only starts like a policy's is the caller's own.
  EXPECT_EQ(
      Must(client_->Post("/v1/check",
                         R"({"checks":[{"key":"guarded","name":"dualx","limit":1,"window_ms":60000}]})"))
          .result_int(),
      200);
}

TEST_F(NodeApiTest, GubernatorGetRateLimits) {
  const std::string body = R"({"requests":[{"name":"requests_per_sec","unique_key":"account:12345","hits":1,
    "limit":2,"duration":60000,"algorithm":"TOKEN_BUCKET","behavior":"BATCHING"}]})";
  auto first = Must(client_->Post("/v1/GetRateLimits", body));
  ASSERT_EQ(first.result_int(), 200) << first.body();
  const auto first_json = JsonBody(first);
  const auto& r = first_json.at("responses").at(0);
  EXPECT_EQ(r.at("status"), "UNDER_LIMIT");
  EXPECT_EQ(json::serialize(r.at("limit")), "\"2\"");
  EXPECT_EQ(json::serialize(r.at("remaining")), "\"1\"");
  EXPECT_TRUE(r.as_object().contains("reset_time"));
  EXPECT_TRUE(r.as_object().contains("error"));
  ASSERT_TRUE(Must(client_->Post("/v1/GetRateLimits", body)).result_int() == 200);
  EXPECT_EQ(JsonBody(Must(client_->Post("/v1/GetRateLimits", body))).at("responses").at(0).at("status"),
            "OVER_LIMIT");
}

TEST_F(NodeApiTest, HeadroomRequiresTheTokenAndIsAcknowledged) {
  const std::string body = R"({"policy":"api","headroom":0.4})";
  auto unauthorized = Must(client_->Put("/v1/headroom", body));
  EXPECT_EQ(unauthorized.result_int(), 401);
  auto ok = Must(client_->Put("/v1/headroom", body, {{"Authorization", std::string("Bearer ") + kToken}}));
  ASSERT_EQ(ok.result_int(), 200) << ok.body();
  EXPECT_EQ(JsonBody(ok).at("policy"), "api");
  EXPECT_EQ(JsonBody(ok).at("expires_in_ms").to_number<int64_t>(), 30000);
}

TEST_F(NodeApiTest, MetricsInPrometheusFormat) {
  ASSERT_EQ(Must(client_->Get("/v1/check?key=m&policy=api")).result_int(), 200);
  ASSERT_EQ(Must(client_->Get("/nope")).result_int(), 404);
  auto metrics = Must(client_->Get("/metrics"));
  ASSERT_EQ(metrics.result_int(), 200);
  EXPECT_NE(Header(metrics, "Content-Type").find("text/plain"), std::string::npos);
  const std::string& text = metrics.body();
  EXPECT_NE(text.find("ringlimit_http_requests_total{"), std::string::npos) << text;
  EXPECT_NE(text.find("status=\"404\""), std::string::npos);
  EXPECT_NE(text.find("_bucket{le="), std::string::npos);  // the latency histogram (fed by the transport)
  EXPECT_NE(text.find("policy=\"api\""), std::string::npos);
  // What an operator expects of any exporter: build info, process metrics, open connections; every
  // family declared once.
  for (const char* family : {"ringlimit_build_info{version=", "process_cpu_seconds_total ",
                             "process_resident_memory_bytes ", "process_open_fds ", "process_max_fds ",
                             "process_start_time_seconds ", "ringlimit_http_connections 1\n"}) {
    EXPECT_NE(text.find(family), std::string::npos) << family;
  }
  std::set<std::string> declared;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("# TYPE ")) continue;
    const std::string name = line.substr(7, line.find(' ', 7) - 7);
    EXPECT_TRUE(declared.insert(name).second) << name << " declared twice";
  }
}

// GET /v1/auth, for proxies' auth_request: only 200 or the deny status (a proxy turns anything else into a
// 500), the RateLimit headers on both, a bad request refused with its reason in X-RateLimit-Error, a
// missing key per --auth-missing-key.
TEST_F(NodeApiTest, AuthAnswersOnlyAllowedOrDenied) {
  const std::string target = "/v1/auth?policy=api";
  auto first = Must(client_->Get(target, {{"X-RateLimit-Key", "auth-user"}}));
  EXPECT_EQ(first.result_int(), 200);
  EXPECT_NE(Header(first, "RateLimit-Policy"), "");
  for (int i = 0; i < 5; ++i) (void)Must(client_->Get(target, {{"X-RateLimit-Key", "auth-user"}}));
  auto denied = Must(client_->Get(target, {{"X-RateLimit-Key", "auth-user"}}));
  EXPECT_EQ(denied.result_int(), 403);
  EXPECT_NE(Header(denied, "Retry-After"), "");
  EXPECT_EQ(Header(denied, "X-RateLimit-Remaining"), "0");
  auto bad = Must(client_->Get("/v1/auth?policy=no-such-policy", {{"X-RateLimit-Key", "auth-user"}}));
  EXPECT_EQ(bad.result_int(), 403);
  EXPECT_NE(Header(bad, "X-RateLimit-Error").find("no-such-policy"), std::string::npos);
  auto no_key = Must(client_->Get(target));
  EXPECT_EQ(no_key.result_int(), 403);
  EXPECT_NE(Header(no_key, "X-RateLimit-Error").find("no key"), std::string::npos);
  EXPECT_EQ(Must(client_->Post(target, "{}")).result_int(), 405);

  NodeProcessOptions lenient;
  lenient.args = {"--auth-deny-status", "401", "--auth-missing-key", "allow"};
  auto node = NodeProcess::Start(std::move(lenient));
  ASSERT_TRUE(node) << node.error();
  HttpClient client((*node)->http_port());
  auto allowed = client.Get("/v1/auth?algorithm=fixed_window&limit=1&window_ms=60000");
  ASSERT_TRUE(allowed);
  EXPECT_EQ(allowed->result_int(), 200);
  for (int i = 0; i < 2; ++i) {
    auto response = client.Get("/v1/auth?key=k&algorithm=fixed_window&limit=1&window_ms=60000");
    ASSERT_TRUE(response);
    EXPECT_EQ(response->result_int(), i == 0 ? 200 : 401);
  }
}

TEST_F(NodeApiTest, KeepAliveAndPipeliningOverTheRealApi) {
  std::string pipeline;
  for (int i = 0; i < 4; ++i) pipeline += "GET /v1/check?key=pipe&policy=api HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(client_->SendRaw(pipeline));
  const int expected[] = {200, 200, 200, 429};
  for (int status : expected) {
    auto response = Must(client_->ReadResponse());
    EXPECT_EQ(response.result_int(), status);
    EXPECT_TRUE(response.keep_alive());
  }
}

// The admin token from a file or the environment (not on argv, where ps shows it).
TEST(NodeSecretsTest, AdminTokenFromAFileOrTheEnvironment) {
  auto deletes_with = [](NodeProcess& node, const std::string& token) {
    HttpClient client(node.http_port());
    auto response = client.Delete("/v1/keys/nobody", {{"Authorization", "Bearer " + token}});
    return response ? response->result_int() : 0u;
  };
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("admin_token_" + std::to_string(getpid()));
  {
    std::ofstream out(file);
    out << "from-a-file\n";
  }
  NodeProcessOptions from_file;
  from_file.args = {"--admin-token-file", file.string()};
  auto a = NodeProcess::Start(std::move(from_file));
  ASSERT_TRUE(a) << a.error();
  EXPECT_EQ(deletes_with(**a, "from-a-file"), 200u);  // the newline is not part of it
  EXPECT_EQ(deletes_with(**a, "other"), 401u);

  NodeProcessOptions from_env;
  from_env.env = {"RINGLIMIT_ADMIN_TOKEN=from-the-env"};
  auto b = NodeProcess::Start(std::move(from_env));
  ASSERT_TRUE(b) << b.error();
  EXPECT_EQ(deletes_with(**b, "from-the-env"), 200u);
  EXPECT_EQ(deletes_with(**b, "other"), 401u);

  NodeProcessOptions both;
  both.args = {"--admin-token-file", file.string(), "--admin-token", "x"};
  auto c = NodeProcess::Start(std::move(both));
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().find("not both"), std::string::npos) << c.error();
  NodeProcessOptions missing;
  missing.args = {"--admin-token-file", file.string() + ".missing"};
  auto d = NodeProcess::Start(std::move(missing));
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().find("cannot read"), std::string::npos) << d.error();
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace ringlimit::testing
