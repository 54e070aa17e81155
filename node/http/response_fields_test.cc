#include "node/http/response_fields.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "node/http/handler.h"

namespace ringlimit::node {
namespace {

namespace http = boost::beast::http;

std::vector<std::string> Lines(const HttpResponse& r) {
  std::vector<std::string> out;
  for (const auto& f : r) out.push_back(std::string(f.name_string()) + ": " + std::string(f.value()));
  return out;
}

TEST(ResponseFieldsTest, FieldsKeepTheirOrderAndAreFoundByEnumOrNameInAnyCase) {
  HttpResponse r{http::status::ok, 11};
  r.set(http::field::content_type, "application/json");
  r.set("RateLimit-Policy", "\"a\";q=10;w=60");
  r.set("Retry-After", "5");  // a known field given by name
  EXPECT_EQ(Lines(r), (std::vector<std::string>{"Content-Type: application/json",
                                                "RateLimit-Policy: \"a\";q=10;w=60", "Retry-After: 5"}));
  EXPECT_EQ(r[http::field::retry_after], "5");
  EXPECT_EQ(r["content-type"], "application/json");
  EXPECT_EQ(r["ratelimit-policy"], "\"a\";q=10;w=60");
  EXPECT_EQ(r.count("RATELIMIT-POLICY"), 1u);
  EXPECT_EQ(r.find(http::field::content_type)->value(), "application/json");
  EXPECT_TRUE(r.find("X-Missing") == r.end());
  EXPECT_EQ(r["X-Missing"], "");
  EXPECT_THROW((void)r.at("X-Missing"), std::out_of_range);
}

TEST(ResponseFieldsTest, SetReplacesInPlaceAndEraseRemovesEveryField) {
  HttpResponse r{http::status::ok, 11};
  r.insert("X-A", "1");
  r.insert("X-B", "2");
  r.insert("x-a", "3");
  EXPECT_EQ(r.count("X-A"), 2u);
  r.set("X-A", "4");
  EXPECT_EQ(Lines(r), (std::vector<std::string>{"X-A: 4", "X-B: 2"}));
  EXPECT_EQ(r.erase("X-B"), 1u);
  EXPECT_EQ(Lines(r), (std::vector<std::string>{"X-A: 4"}));
}

TEST(ResponseFieldsTest, PayloadAndKeepAliveAsBeastSetsThem) {
  HttpResponse r{http::status::not_found, 11};
  r.body() = "hello";
  r.prepare_payload();
  EXPECT_EQ(r[http::field::content_length], "5");
  EXPECT_FALSE(r.chunked());
  EXPECT_TRUE(r.keep_alive());
  r.keep_alive(false);
  EXPECT_EQ(r[http::field::connection], "close");
  EXPECT_FALSE(r.keep_alive());
  r.keep_alive(true);
  EXPECT_EQ(r.count(http::field::connection), 0u);
  r.body() = "hello, world";
  r.prepare_payload();
  EXPECT_EQ(Lines(r), (std::vector<std::string>{"Content-Length: 12"}));
  EXPECT_EQ(r.result_int(), 404);
  EXPECT_EQ(r.reason(), "Not Found");  // Beast: the standard phrase when none was set
  HttpResponse copy = r;
  EXPECT_EQ(Lines(copy), Lines(r));
}

// The wire form the transport copies in one go: exactly the lines iteration gives, while it holds.
TEST(ResponseFieldsTest, WireFormIsTheFieldsInOrderUntilOneIsReplacedErasedOrFraming) {
  HttpResponse r{http::status::ok, 11};
  ASSERT_TRUE(r.wire().has_value());
  EXPECT_EQ(*r.wire(), "");
  r.set(http::field::content_type, "application/json");
  r.insert_extension("RateLimit", "\"api\";r=9;t=1");
  r.insert("X-Empty", "");
  ASSERT_TRUE(r.wire().has_value());
  EXPECT_EQ(*r.wire(), "Content-Type: application/json\r\nRateLimit: \"api\";r=9;t=1\r\nX-Empty: \r\n");
  EXPECT_EQ(r[http::field::content_type], "application/json");
  EXPECT_EQ(r["ratelimit"], "\"api\";r=9;t=1");
  HttpResponse copy = r;
  EXPECT_EQ(copy.wire(), r.wire());

  HttpResponse replaced = r;
  replaced.set("X-Empty", "now set");
  EXPECT_FALSE(replaced.wire().has_value());
  EXPECT_EQ(Lines(replaced), (std::vector<std::string>{"Content-Type: application/json",
                                                       "RateLimit: \"api\";r=9;t=1", "X-Empty: now set"}));
  HttpResponse erased = r;
  erased.erase("RateLimit");
  EXPECT_FALSE(erased.wire().has_value());
  HttpResponse framed = r;
  framed.prepare_payload();
  EXPECT_FALSE(framed.wire().has_value());
  framed.clear();
  EXPECT_EQ(framed.wire(), std::optional<std::string_view>(""));
}

}  // namespace
}  // namespace ringlimit::node
