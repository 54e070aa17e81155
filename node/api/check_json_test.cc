// ReadChecksStreaming: what it accepts decodes as CheckFromJson does; what it declines is left to the DOM.
#include "node/api/check_json.h"

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>

#include "node/service/api_json.h"

namespace ringlimit::node {
namespace {

namespace json = boost::json;

std::vector<api::Check*> Streamed(std::string_view body, google::protobuf::Arena* arena,
                                  size_t max_checks = 100) {
  std::vector<api::Check*> checks;
  EXPECT_TRUE(ReadChecksStreaming(body, max_checks, arena, &checks)) << body;
  return checks;
}

bool Declined(std::string_view body, size_t max_checks = 100) {
  google::protobuf::Arena arena;
  std::vector<api::Check*> checks;
  return !ReadChecksStreaming(body, max_checks, &arena, &checks);
}

// The DOM path's decoding of checks[i].
api::Check Dom(std::string_view body, size_t i) {
  json::value root = json::parse(body);
  api::Check check;
  EXPECT_FALSE(CheckFromJson(root.at("checks").at(i).as_object(), /*allow_target=*/true, &check).has_value());
  return check;
}

TEST(CheckJsonTest, DecodesEveryFieldAsTheDomPathDoes) {
  const std::string body =
      R"({"checks":[{"key":"k1","name":"n","algorithm":"leaky_bucket","limit":5,"window_ms":1000,"burst":5,)"
      R"("max_delay_ms":2000,"mode":"dynamic","dynamic_limit":9,"count_denied":true,"cost":1},)"
      R"({"key":"k2","policy":"api","tier":"gold","cost":3},)"
      R"({"key":"k3","algorithm":"sliding_window","limit":3,"window_ms":1000,"buckets":10,"soft_pct":20}]})";
  google::protobuf::Arena arena;
  const std::vector<api::Check*> checks = Streamed(body, &arena);
  ASSERT_EQ(checks.size(), 3u);
  for (size_t i = 0; i < checks.size(); ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*checks[i], Dom(body, i)))
        << i << ": " << checks[i]->ShortDebugString();
  }
  EXPECT_EQ(checks[0]->dynamic_limit(), 9u);
  EXPECT_TRUE(checks[0]->count_denied());
  EXPECT_EQ(checks[1]->tier(), "gold");
}

TEST(CheckJsonTest, UnescapesKeysAndStringsOfAnyLength) {
  // A string longer than the parser's stack buffer arrives in parts (on_string_part).
  const std::string long_key(9000, 'x');
  const std::string body = R"({"che\u0063ks":[{"k\u0065y":"a\"b\u00e9)" + long_key +
                           R"(","limit":3,"name":")" + long_key + R"("}]})";
  google::protobuf::Arena arena;
  const std::vector<api::Check*> checks = Streamed(body, &arena);
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0]->key(), "a\"b\xc3\xa9" + long_key);
  EXPECT_EQ(checks[0]->name(), long_key);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*checks[0], Dom(body, 0)));
}

TEST(CheckJsonTest, DeclinesEveryBodyTheDomPathAnswersWithAnError) {
  EXPECT_TRUE(Declined(""));
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":3}])"));         // truncated
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":3}]} x)"));      // extra data
  EXPECT_TRUE(Declined(R"([{"key":"k","limit":3}])"));                   // not an object
  EXPECT_TRUE(Declined(R"({})"));                                        // no checks
  EXPECT_TRUE(Declined(R"({"checks":[]})"));                             // empty
  EXPECT_TRUE(Declined(R"({"checks":{}})"));                             // not an array
  EXPECT_TRUE(Declined(R"({"checks":[1]})"));                            // a check that is not an object
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":3}],"x":1})"));  // another root field
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limt":3}]})"));         // unknown field
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":-3}]})"));       // field errors
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":1.5}]})"));
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":"3"}]})"));
  EXPECT_TRUE(Declined(R"({"checks":[{"key":3,"limit":3}]})"));
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":null}]})"));
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":[3]}]})"));
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","count_denied":1}]})"));
  EXPECT_TRUE(Declined("{\"checks\":[{\"key\":\"\xff\",\"limit\":3}]}"));  // invalid UTF-8
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":3},{"key":"k","limit":3}]})", /*max_checks=*/1));
  // Repeated keys: the DOM keeps the last value at the first one's place, which decides the error order.
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":"x","limit":3}]})"));
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"a"}],"checks":[{"key":"b"}]})"));
  // Numbers the DOM path takes but that are not plain integer literals go to it as well.
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":3,"window_ms":1000.0}]})"));
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":3,"cost":1e0}]})"));
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":3,"cost":-0}]})"));
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":3,"cost":1000000000001}]})"));  // above kMaxCost
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":3,"buckets":4294967296}]})"));
  EXPECT_TRUE(Declined(R"({"checks":[{"key":"k","limit":18446744073709551616}]})"));
  // What is not declined: the same bodies without the fault.
  EXPECT_FALSE(Declined(R"({"checks":[{"key":"k","limit":3}]})"));
  EXPECT_FALSE(Declined(R"({"checks":[{"key":"k","limit":3},{"key":"k","limit":3}]})", /*max_checks=*/2));
}

}  // namespace
}  // namespace ringlimit::node
