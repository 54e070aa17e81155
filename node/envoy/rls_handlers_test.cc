#include "node/envoy/rls_handlers.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "node/api/api_test_util.h"
#include "node/envoy/rls_config.h"

namespace ringlimit::node {
namespace {

namespace rlsv3 = envoy::service::ratelimit::v3;
using Entries = std::vector<std::pair<std::string_view, std::string_view>>;

constexpr std::string_view kConfig = R"(
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: shadow
    rate_limit: {unit: minute, requests_per_unit: 1}
    shadow_mode: true
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 3}
  - key: category
    value: read
    rate_limit: {unit: minute, requests_per_unit: 1, name: reads}
  - key: endpoint
    value: /special
    rate_limit: {unit: minute, requests_per_unit: 3, name: special, replaces: [{name: reads}]}
  - key: file
    value: /shared/*.pdf
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: file
    value: /own/*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: free
    rate_limit: {unlimited: true, replaces: [{name: reads}]}
)";

class RlsHandlersTest : public ApiTest {
 protected:
  RlsHandlersTest() {
    auto parsed = rls::RlsConfig::Parse(kConfig);
    EXPECT_TRUE(parsed.ok()) << parsed.status().message();
    config_ = parsed.value();
  }

  // One call, decided locally (no router); the error, if any, in *error.
  rlsv3::RateLimitResponse Call(std::string_view key, std::string_view value, uint32_t hits = 0,
                                std::optional<ApiError>* error = nullptr) {
    rlsv3::RateLimitRequest request;
    request.set_domain("d");
    request.set_hits_addend(hits);
    auto* entry = request.add_descriptors()->add_entries();
    entry->set_key(std::string(key));
    entry->set_value(std::string(value));
    rlsv3::RateLimitResponse response;
    int calls = 0;
    ShouldRateLimit(*service_, config_, request, &response, [&](std::optional<ApiError> e) {
      ++calls;
      if (error != nullptr) *error = std::move(e);
    });
    EXPECT_EQ(calls, 1) << "done must be called exactly once, here synchronously";
    return response;
  }

  // One call with one descriptor of one entry per element of `descriptors`.
  rlsv3::RateLimitResponse CallMany(const Entries& descriptors) {
    rlsv3::RateLimitRequest request;
    request.set_domain("d");
    for (const auto& [key, value] : descriptors) {
      auto* entry = request.add_descriptors()->add_entries();
      entry->set_key(std::string(key));
      entry->set_value(std::string(value));
    }
    rlsv3::RateLimitResponse response;
    ShouldRateLimit(*service_, config_, request, &response,
                    [](std::optional<ApiError> e) { EXPECT_FALSE(e); });
    return response;
  }

  std::shared_ptr<const rls::RlsConfig> config_;
};

TEST_F(RlsHandlersTest, AReplacingLimitSwitchesOffTheLimitItNamesAsInEnvoysRatelimit) {
  // The category limit (1 a minute) alone: the second read is over.
  EXPECT_EQ(CallMany({{"category", "read"}}).overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(CallMany({{"category", "read"}}).overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  // With the endpoint that replaces it, only the endpoint's limit (3 a minute) applies and the category's
  // descriptor is answered OK with no limit, nothing counted.
  for (int i = 0; i < 3; ++i) {
    rlsv3::RateLimitResponse r = CallMany({{"category", "read"}, {"endpoint", "/special"}});
    EXPECT_EQ(r.overall_code(), rlsv3::RateLimitResponse::OK) << i;
    EXPECT_EQ(r.statuses(0).code(), rlsv3::RateLimitResponse::OK);
    EXPECT_FALSE(r.statuses(0).has_current_limit());
    EXPECT_EQ(r.statuses(1).current_limit().name(), "special");
    EXPECT_EQ(r.statuses(1).limit_remaining(), static_cast<uint32_t>(2 - i));
  }
  EXPECT_EQ(CallMany({{"category", "read"}, {"endpoint", "/special"}}).overall_code(),
            rlsv3::RateLimitResponse::OVER_LIMIT);
  // An unlimited limit replaces too.
  rlsv3::RateLimitResponse free = CallMany({{"category", "read"}, {"free", "x"}});
  EXPECT_EQ(free.overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(free.statuses(1).limit_remaining(), std::numeric_limits<uint32_t>::max());
}

TEST_F(RlsHandlersTest, WildcardValuesCountPerValueOrSharedWithShareThreshold) {
  // /own/*: one counter per value.
  EXPECT_EQ(Call("file", "/own/a").overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(Call("file", "/own/b").overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(Call("file", "/own/a").overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  // /shared/*.pdf with share_threshold: every matching value in one counter of 2.
  EXPECT_EQ(Call("file", "/shared/x.pdf").overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(Call("file", "/shared/y/z.pdf").overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(Call("file", "/shared/w.pdf").overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  // Not matching any pattern, and no key-only rule: no limit.
  rlsv3::RateLimitResponse other = Call("file", "/shared/x.txt");
  EXPECT_EQ(other.overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_FALSE(other.statuses(0).has_current_limit());
}

TEST_F(RlsHandlersTest, QuotaModeIsOverOnlyWhenEveryQuotaDescriptorIs) {
  const Entries both{{"quota_a", "q"}, {"quota_b", "q"}};
  EXPECT_EQ(CallMany(both).overall_code(), rlsv3::RateLimitResponse::OK);
  // quota_a is over, quota_b still has one: OK overall, quota_a's status says OVER_LIMIT.
  rlsv3::RateLimitResponse r = CallMany(both);
  EXPECT_EQ(r.statuses(0).code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(r.statuses(1).code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(r.overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(CallMany(both).overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);  // both over
  // A descriptor not in quota mode that is over makes the request over.
  EXPECT_EQ(CallMany({{"user", "qq"}, {"user", "qq"}, {"user", "qq"}, {"quota_b", "fresh"}}).overall_code(),
            rlsv3::RateLimitResponse::OVER_LIMIT);
}

TEST_F(RlsHandlersTest, FixedWindowsAreAlignedOnTheEpochAndReset) {
  // Move to 10 s into a minute: the window ends in 50 s.
  const limiter::TimeNs minute = 60 * limiter::kSecond;
  Advance(minute - now_ % minute + 10 * limiter::kSecond);
  rlsv3::RateLimitResponse a = Call("user", "u1");
  EXPECT_EQ(a.overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(a.statuses(0).duration_until_reset().seconds(), 50);
  EXPECT_EQ(a.statuses(0).duration_until_reset().nanos(), 0);
  EXPECT_EQ(Call("user", "u1").statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(Call("user", "u1").overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  Advance(50 * limiter::kSecond);  // the next window
  rlsv3::RateLimitResponse b = Call("user", "u1");
  EXPECT_EQ(b.overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(b.statuses(0).limit_remaining(), 1u);
}

TEST_F(RlsHandlersTest, MonthsAreThirtyDaysAlignedOnTheEpochAsInEnvoysRatelimit) {
  // envoyproxy/ratelimit: a month is 30 days and its windows start at multiples of 30 days since the epoch.
  const limiter::TimeNs month = 30 * 86400 * limiter::kSecond;
  Advance(month - now_ % month + 86400 * limiter::kSecond);  // one day into a window
  rlsv3::RateLimitResponse a = Call("monthly", "m", 2);
  EXPECT_EQ(a.overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(a.statuses(0).current_limit().unit(), rlsv3::RateLimitResponse::RateLimit::MONTH);
  EXPECT_EQ(a.statuses(0).duration_until_reset().seconds(), 29 * 86400);
  EXPECT_EQ(Call("monthly", "m", 2).overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  Advance(29 * 86400 * limiter::kSecond);
  EXPECT_EQ(Call("monthly", "m").statuses(0).limit_remaining(), 2u);
}

TEST_F(RlsHandlersTest, ADescriptorsOwnHitsAddendAndAWeekOverride) {
  rlsv3::RateLimitRequest request;
  request.set_domain("d");
  request.set_hits_addend(5);  // for descriptors without their own
  auto add = [&](std::string value, std::optional<uint64_t> hits) {
    auto* descriptor = request.add_descriptors();
    auto* entry = descriptor->add_entries();
    entry->set_key("user");
    entry->set_value(std::move(value));
    auto* limit = descriptor->mutable_limit();
    limit->set_requests_per_unit(10);
    limit->set_unit(envoy::type::v3::WEEK);
    if (hits) descriptor->mutable_hits_addend()->set_value(*hits);
  };
  add("a", 1);             // its own: 1
  add("b", std::nullopt);  // the request's: 5
  add("c", 0);             // 0: only checks
  rlsv3::RateLimitResponse response;
  ShouldRateLimit(*service_, config_, request, &response, [](std::optional<ApiError> e) { EXPECT_FALSE(e); });
  ASSERT_EQ(response.statuses_size(), 3);
  EXPECT_EQ(response.statuses(0).limit_remaining(), 9u);
  EXPECT_EQ(response.statuses(1).limit_remaining(), 5u);
  EXPECT_EQ(response.statuses(2).limit_remaining(), 10u);
  EXPECT_EQ(response.statuses(0).current_limit().unit(), rlsv3::RateLimitResponse::RateLimit::WEEK);
  const limiter::DurationNs week = 7 * 86400 * limiter::kSecond;  // windows from the epoch
  EXPECT_EQ(response.statuses(0).duration_until_reset().seconds(), (week - now_ % week) / limiter::kSecond);
}

TEST_F(RlsHandlersTest, ShadowModeCountsWhatItWouldHaveDenied) {
  EXPECT_EQ(Call("shadow", "s").overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(Call("shadow", "s").overall_code(), rlsv3::RateLimitResponse::OK);
  HttpResponse r = Get("/metrics");
  EXPECT_NE(r.body().find("ringlimit_rls_decisions_total{rule=\"d.shadow\",outcome=\"shadow_denied\"} 1\n"),
            std::string::npos)
      << r.body();
}

TEST_F(RlsHandlersTest, TheConfiguredAlgorithmIsUsed) {
  // token_bucket, 2 per second: drained, then one token back after half a second.
  EXPECT_EQ(Call("bucket", "b", 2).overall_code(), rlsv3::RateLimitResponse::OK);
  EXPECT_EQ(Call("bucket", "b").overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  Advance(limiter::kSecond / 2);
  EXPECT_EQ(Call("bucket", "b").overall_code(), rlsv3::RateLimitResponse::OK);
}

TEST_F(RlsHandlersTest, ErrorsAreReportedThroughDone) {
  std::optional<ApiError> error;
  (void)Call("", "x", 0, &error);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->kind, ErrorKind::kInvalidField);
  (void)Call("user", std::string(2000, 'x'), 0, &error);
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->message.find("longer than 1024"), std::string::npos);
}

TEST(RlsKeyTest, DistinctDescriptorsNeverShareAKey) {
  EXPECT_EQ(RlsKey("d", Entries{{"a", "1"}, {"b", "2"}}), "rls:d|a=1|b=2");
  EXPECT_NE(RlsKey("d", Entries{{"a", "1|b=2"}}), RlsKey("d", Entries{{"a", "1"}, {"b", "2"}}));
  EXPECT_NE(RlsKey("d|a=1", Entries{}), RlsKey("d", Entries{{"a", "1"}}));
  EXPECT_NE(RlsKey("d", Entries{{"a=1", ""}}), RlsKey("d", Entries{{"a", "1="}}));
  EXPECT_NE(RlsKey("d", Entries{{"a\\", "|"}}), RlsKey("d", Entries{{"a", "\\|"}}));
}

TEST_F(RlsHandlersTest, RateLimitHeadersOnlyWhenAsked) {
  EXPECT_EQ(Call("user", "h0").response_headers_to_add_size(), 0);
  ApiOptions options;
  options.rls_response_headers = true;
  Rebuild(options);
  const limiter::TimeNs minute = 60 * limiter::kSecond;
  Advance(minute - now_ % minute + 15 * limiter::kSecond);  // 45 s left in the window
  rlsv3::RateLimitResponse r = Call("user", "h1");
  std::map<std::string, std::string> headers;
  for (const auto& h : r.response_headers_to_add()) headers[h.key()] = h.value();
  EXPECT_EQ(headers["RateLimit-Policy"], R"("user=h1";q=2;w=60)");
  EXPECT_EQ(headers["RateLimit"], R"("user=h1";r=1;t=45)");
  EXPECT_EQ(headers["X-RateLimit-Limit"], "2");
  EXPECT_EQ(headers["X-RateLimit-Remaining"], "1");
  EXPECT_EQ(headers["X-RateLimit-Reset"], "45");
  Call("user", "h1");
  rlsv3::RateLimitResponse over = Call("user", "h1");
  EXPECT_EQ(over.overall_code(), rlsv3::RateLimitResponse::OVER_LIMIT);
  for (const auto& h : over.response_headers_to_add()) {
    if (h.key() == "X-RateLimit-Remaining") {
      EXPECT_EQ(h.value(), "0");
    }
  }
}

}  // namespace
}  // namespace ringlimit::node
