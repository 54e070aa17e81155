// GET /v1/keys/{key} and DELETE /v1/keys/{key}[?name=].
#include "node/api/keys_handlers.h"

#include "node/api/api_test_util.h"

namespace ringlimit::node {
namespace {

namespace http = boost::beast::http;
namespace json = boost::json;

class KeysTest : public ApiTest {
 protected:
  void Charge(std::string_view key, std::string_view name, int times) {
    const std::string body = std::string(R"({"checks":[{"key":")") + std::string(key) + R"(","name":")" +
                             std::string(name) +
                             R"(","algorithm":"fixed_window","limit":10,"window_ms":60000}]})";
    for (int i = 0; i < times; ++i) ASSERT_EQ(Post("/v1/check", body).result_int(), 200u);
  }
};

TEST_F(KeysTest, GetListsEveryStateWithCurrentFigures) {
  Charge("user:1", "b", 3);
  Charge("user:1", "a", 1);
  Charge("user:2", "a", 5);
  HttpResponse r = Get("/v1/keys/user%3A1");
  ASSERT_EQ(r.result_int(), 200u) << r.body();
  json::value v = Json(r);
  EXPECT_EQ(v.at("key").as_string(), "user:1");
  const json::array& states = v.at("states").as_array();
  ASSERT_EQ(states.size(), 2u);
  EXPECT_EQ(states[0].at("name").as_string(), "a");
  EXPECT_EQ(states[0].at("remaining").to_number<uint64_t>(), 9u);
  EXPECT_EQ(states[1].at("name").as_string(), "b");
  EXPECT_EQ(states[1].at("remaining").to_number<uint64_t>(), 7u);
  EXPECT_EQ(states[1].at("algorithm").as_string(), "fixed_window");
  EXPECT_EQ(states[1].at("limit").to_number<uint64_t>(), 10u);
  EXPECT_EQ(states[1].at("window_ms").to_number<int64_t>(), 60000);
  EXPECT_EQ(states[1].at("reset_ms").to_number<int64_t>(), 60000);
  EXPECT_GT(states[1].at("version").to_number<uint64_t>(), 0u);

  Advance(15 * limiter::kSecond);
  EXPECT_EQ(Json(Get("/v1/keys/user:1")).at("states").at(1).at("reset_ms").to_number<int64_t>(), 45000);
}

// A key's grants on record in this copy (--grants on): units lent and not settled, and how many grants.
TEST_F(KeysTest, GetShowsTheGrantsOut) {
  Charge("hot", "a", 2);
  EXPECT_EQ(Json(Get("/v1/keys/hot")).at("states").at(0).at("grant_units_out").to_number<uint64_t>(), 0u);
  limiter::LimitSpec spec;
  spec.algorithm = limiter::Algorithm::kFixedWindow;
  spec.limit = 10;
  spec.window = 60 * limiter::kSecond;
  const storage::Slot slot{"a", &spec};
  store_.Update("hot", std::span<const storage::Slot>(&slot, 1), now_,
                [&](std::span<limiter::MergeState* const> states) {
                  ASSERT_TRUE(limiter::LendMerged(spec, *states[0], 7, 3, now_).ok());
                  ASSERT_TRUE(limiter::LendMerged(spec, *states[0], 8, 2, now_).ok());
                });
  const json::value state = Json(Get("/v1/keys/hot")).at("states").at(0);
  EXPECT_EQ(state.at("grant_units_out").to_number<uint64_t>(), 5u);
  EXPECT_EQ(state.at("grants_unsettled").to_number<uint64_t>(), 2u);
  EXPECT_EQ(state.at("remaining").to_number<uint64_t>(), 3u) << "lent units count as spent";
}

TEST_F(KeysTest, UnknownKeyHasNoStates) {
  json::value v = Json(Get("/v1/keys/nobody"));
  EXPECT_EQ(v.at("key").as_string(), "nobody");
  EXPECT_TRUE(v.at("states").as_array().empty());
}

TEST_F(KeysTest, DeleteResetsOneOrAllStates) {
  Charge("u", "a", 10);
  Charge("u", "b", 10);
  HttpResponse r = Send(http::verb::delete_, "/v1/keys/u?name=a");
  ASSERT_EQ(r.result_int(), 200u) << r.body();
  EXPECT_EQ(Json(r).at("removed").to_number<uint64_t>(), 1u);
  const json::array states = Json(Get("/v1/keys/u")).at("states").as_array();
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].at("name").as_string(), "b");
  Charge("u", "a", 10);  // a was reset: 10 more fit

  EXPECT_EQ(Json(Send(http::verb::delete_, "/v1/keys/u")).at("removed").to_number<uint64_t>(), 2u);
  EXPECT_TRUE(Json(Get("/v1/keys/u")).at("states").as_array().empty());
}

TEST_F(KeysTest, DeleteNeedsTheAdminTokenWhenConfigured) {
  ApiOptions options;
  options.admin_token = "s3cret";
  Rebuild(options);
  Charge("u", "a", 1);
  ExpectError(Send(http::verb::delete_, "/v1/keys/u"), 401, "unauthorized");
  ExpectError(Send(http::verb::delete_, "/v1/keys/u", "", {{"Authorization", "Bearer wrong"}}), 401,
              "unauthorized");
  ExpectError(Send(http::verb::delete_, "/v1/keys/u", "", {{"Authorization", "s3cret"}}), 401,
              "unauthorized");
  EXPECT_EQ(Json(Get("/v1/keys/u")).at("states").as_array().size(), 1u);  // reads stay open
  HttpResponse r = Send(http::verb::delete_, "/v1/keys/u", "", {{"Authorization", "Bearer s3cret"}});
  EXPECT_EQ(r.result_int(), 200u) << r.body();
  EXPECT_TRUE(Json(Get("/v1/keys/u")).at("states").as_array().empty());
}

TEST_F(KeysTest, RejectsBadKeysAndMethods) {
  ExpectError(Get("/v1/keys/"), 400, "invalid_field");
  ExpectError(Get("/v1/keys/%zz"), 400, "invalid_field");
  ExpectError(Get("/v1/keys/%FF"), 400, "invalid_field");
  ExpectError(Get("/v1/keys/" + std::string(1025, 'k')), 400, "invalid_field");
  HttpResponse r = Send(http::verb::post, "/v1/keys/u", "{}");
  ExpectError(r, 405, "method_not_allowed");
  EXPECT_EQ(r[http::field::allow], "GET, HEAD, DELETE");
  ExpectError(Send(http::verb::delete_, "/v1/keys/u?name="), 400, "invalid_field");
}

}  // namespace
}  // namespace ringlimit::node
