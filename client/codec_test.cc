#include "client/codec.h"

#include <gtest/gtest.h>

namespace ringlimit::client {
namespace {

TEST(CodecTest, EncodesOnlyTheFieldsGiven) {
  Check inline_check{
      .key = "user:42", .cost = 2, .name = "rps", .algorithm = "gcra", .limit = 10, .window_ms = 1000};
  Check policy_check{.key = "k", .policy = "api", .tier = "gold"};
  EXPECT_EQ(
      EncodeChecks({inline_check, policy_check}),
      R"({"checks":[{"key":"user:42","cost":2,"name":"rps","algorithm":"gcra","limit":10,"window_ms":1000},)"
      R"({"key":"k","cost":1,"policy":"api","tier":"gold"}]})");
}

TEST(CodecTest, CheckTargetPercentEncodes) {
  Check c{.key = "a b/&=:", .limit = 5, .window_ms = 60000};
  EXPECT_EQ(CheckTarget(c), "/v1/check?key=a%20b%2F%26%3D%3A&cost=1&limit=5&window_ms=60000");
}

TEST(CodecTest, DecodesCheckResponse) {
  auto r = DecodeCheckResponse(
      R"({"allowed":false,"results":[{"key":"k","name":"default","allowed":false,"limit":10,"remaining":0,)"
      R"("reset_ms":600,"retry_after_ms":-1,"delay_ms":0,"mode":"hard","would_deny":true,"owner":"n2","new":1}]})");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_FALSE(r->allowed);
  ASSERT_EQ(r->results.size(), 1u);
  EXPECT_EQ(r->results[0].retry_after_ms, -1);
  EXPECT_EQ(r->results[0].owner, "n2");
  EXPECT_TRUE(r->results[0].would_deny);
}

TEST(CodecTest, BadResponsesAreProtocolErrorsNamingTheField) {
  auto not_json = DecodeCheckResponse("<html>");
  ASSERT_FALSE(not_json);
  EXPECT_EQ(not_json.error().kind, Error::Kind::kProtocol);
  auto wrong_type = DecodeCheckResponse(R"({"allowed":true,"results":[{"key":"k","allowed":"yes"}]})");
  ASSERT_FALSE(wrong_type);
  EXPECT_NE(wrong_type.error().message.find("results[0].allowed"), std::string::npos)
      << wrong_type.error().message;
  EXPECT_FALSE(DecodeClusterInfo(R"({"members":[]})"));
}

TEST(CodecTest, ServerErrorsCarryCodeAndMessage) {
  Error e = ErrorFromResponse(400, R"({"error":{"code":"invalid_field","message":"checks[0].limit: bad"}})",
                              "127.0.0.1:1");
  EXPECT_EQ(e.kind, Error::Kind::kServer);
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.code, "invalid_field");
  EXPECT_EQ(e.message, "checks[0].limit: bad");
  EXPECT_EQ(e.ToString(), "invalid_field (HTTP 400 from 127.0.0.1:1): checks[0].limit: bad");
  Error plain = ErrorFromResponse(502, "Bad Gateway", "x:1");
  EXPECT_EQ(plain.code, "http_502");
  EXPECT_TRUE(plain.Retryable());
  EXPECT_FALSE(e.Retryable());
}

TEST(CodecTest, DecodesClusterInfo) {
  auto r = DecodeClusterInfo(
      R"({"node_id":"n1","ring_version":7,"members":[{"id":"n1","http_address":"127.0.0.1:7001",)"
      R"("peer_address":"127.0.0.1:7101","state":"alive","vnodes":128,"incarnation":17,"share":0.5}]})");
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_EQ(r->ring_version, 7u);
  ASSERT_EQ(r->members.size(), 1u);
  EXPECT_EQ(r->members[0].vnodes, 128u);
  EXPECT_DOUBLE_EQ(r->members[0].share, 0.5);
}

}  // namespace
}  // namespace ringlimit::client
