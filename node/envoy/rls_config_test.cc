#include "node/envoy/rls_config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace ringlimit::node::rls {
namespace {

using Entries = std::vector<std::pair<std::string_view, std::string_view>>;

constexpr std::string_view kConfig = R"(
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: path
    value: /login
    rate_limit: {unit: second, requests_per_unit: 2, name: login}
    shadow_mode: true
  - key: path
    rate_limit: {unit: HOUR, requests_per_unit: 100, algorithm: token_bucket}
  - key: client
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: day, requests_per_unit: 0}
      - key: plan
        descriptors:
          - key: path
            rate_limit: {unit: second, requests_per_unit: 5}
  - key: internal
    unlimited: true
---
domain: other
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
)";

std::shared_ptr<const RlsConfig> MustParse(std::string_view yaml) {
  auto parsed = RlsConfig::Parse(yaml);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return parsed.ok() ? parsed.value() : std::make_shared<const RlsConfig>();
}

std::string ParseError(std::string_view yaml) {
  auto parsed = RlsConfig::Parse(yaml);
  EXPECT_FALSE(parsed.ok());
  return parsed.ok() ? "" : parsed.status().message();
}

TEST(RlsConfigTest, ParsesDomainsAndLimits) {
  auto config = MustParse(kConfig);
  EXPECT_EQ(config->domains(), 2u);
  EXPECT_TRUE(config->HasDomain("edge"));
  EXPECT_TRUE(config->HasDomain("other"));
  EXPECT_FALSE(config->HasDomain("nope"));
  RlsMatch m = config->Match("edge", Entries{{"remote_address", "10.0.0.1"}});
  ASSERT_NE(m.rule, nullptr);
  ASSERT_TRUE(m.rule->limit);
  EXPECT_EQ(m.rule->limit->requests_per_unit, 10u);
  EXPECT_EQ(m.rule->limit->unit, Unit::kMinute);
  EXPECT_EQ(m.rule->limit->spec.algorithm, limiter::Algorithm::kFixedWindow);
  EXPECT_EQ(m.rule->limit->spec.limit, 10u);
  EXPECT_EQ(m.rule->limit->spec.window, 60 * limiter::kSecond);
  EXPECT_FALSE(m.rule->shadow_mode);
}

TEST(RlsConfigTest, ValueRuleWinsOverKeyOnlyRule) {
  auto config = MustParse(kConfig);
  RlsMatch login = config->Match("edge", Entries{{"path", "/login"}});
  ASSERT_NE(login.rule, nullptr);
  EXPECT_EQ(login.rule->limit->requests_per_unit, 2u);
  EXPECT_EQ(login.rule->limit->name, "login");
  EXPECT_TRUE(login.rule->shadow_mode);
  RlsMatch other = config->Match("edge", Entries{{"path", "/other"}});
  ASSERT_NE(other.rule, nullptr);
  EXPECT_EQ(other.rule->limit->requests_per_unit, 100u);
  EXPECT_EQ(other.rule->limit->unit, Unit::kHour);
  EXPECT_EQ(other.rule->limit->spec.algorithm, limiter::Algorithm::kTokenBucket);
}

TEST(RlsConfigTest, NestedDescriptorsApplyOnlyToTheLastEntry) {
  auto config = MustParse(kConfig);
  // client has no rate_limit itself: a descriptor ending there matches nothing.
  EXPECT_EQ(config->Match("edge", Entries{{"client", "a"}}).rule, nullptr);
  RlsMatch free = config->Match("edge", Entries{{"client", "a"}, {"plan", "free"}});
  ASSERT_NE(free.rule, nullptr);
  EXPECT_EQ(free.rule->limit->requests_per_unit, 0u);
  RlsMatch deep = config->Match("edge", Entries{{"client", "a"}, {"plan", "pro"}, {"path", "/x"}});
  ASSERT_NE(deep.rule, nullptr);
  EXPECT_EQ(deep.rule->limit->requests_per_unit, 5u);
  // plan=free has no children: the walk stops there.
  EXPECT_EQ(config->Match("edge", Entries{{"client", "a"}, {"plan", "free"}, {"path", "/x"}}).rule, nullptr);
  // Entries beyond the tree match nothing; so does an unknown first key.
  EXPECT_EQ(config->Match("edge", Entries{{"remote_address", "1"}, {"path", "/x"}}).rule, nullptr);
  EXPECT_EQ(config->Match("edge", Entries{{"nope", "1"}}).rule, nullptr);
  EXPECT_EQ(config->Match("edge", Entries{}).rule, nullptr);
}

TEST(RlsConfigTest, UnlimitedAndUnknownDomain) {
  auto config = MustParse(kConfig);
  RlsMatch internal = config->Match("edge", Entries{{"internal", "yes"}});
  ASSERT_NE(internal.rule, nullptr);
  EXPECT_TRUE(internal.rule->unlimited);
  EXPECT_EQ(config->Match("nope", Entries{{"remote_address", "1"}}).rule, nullptr);
  // Domains do not share rules.
  EXPECT_EQ(config->Match("other", Entries{{"remote_address", "1"}}).rule, nullptr);
  EXPECT_NE(config->Match("other", Entries{{"k", "1"}}).rule, nullptr);
}

TEST(RlsConfigTest, UnitsAsEnvoysRatelimitCountsThem) {
  EXPECT_EQ(UnitDuration(*ParseUnit("Week")), 7 * 86400 * limiter::kSecond);
  EXPECT_EQ(UnitDuration(*ParseUnit("month")), 30 * 86400 * limiter::kSecond);
  EXPECT_EQ(UnitDuration(*ParseUnit("YEAR")), 365 * 86400 * limiter::kSecond);
  EXPECT_EQ(static_cast<int>(*ParseUnit("week")), 7);  // RateLimitResponse.RateLimit.Unit.WEEK
  EXPECT_FALSE(ParseUnit("weeks"));
}

TEST(RlsConfigTest, RejectsBadFilesWithThePlace) {
  EXPECT_NE(ParseError("domain: [").find("not valid YAML"), std::string::npos);
  EXPECT_NE(ParseError("descriptors: []").find("needs a non-empty domain"), std::string::npos);
  EXPECT_NE(
      ParseError(
          "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
          .find("descriptors[0].rate_limit.unit: unknown unit 'fortnight'"),
      std::string::npos);
  EXPECT_NE(ParseError("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n")
                .find("needs unit and requests_per_unit"),
            std::string::npos);
  EXPECT_NE(
      ParseError(
          "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n")
          .find("requests_per_unit"),
      std::string::npos);
  EXPECT_NE(
      ParseError("domain: d\ndescriptors:\n  - value: a\n").find("descriptors[0]: needs a non-empty key"),
      std::string::npos);
  EXPECT_NE(ParseError("domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n").find("true or false"),
            std::string::npos);
  EXPECT_NE(
      ParseError("domain: d\ndescriptors:\n  - key: a\n    colour: red\n").find("colour: unknown field"),
      std::string::npos);
  EXPECT_NE(ParseError("domain: d\ndescriptors:\n  - key: a\n  - key: a\n").find("duplicate"),
            std::string::npos);
  EXPECT_NE(
      ParseError("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, "
                 "algorithm: magic}\n")
          .find("unknown algorithm 'magic'"),
      std::string::npos);
  EXPECT_NE(ParseError("domain: d\n---\ndomain: d\n").find("defined twice"), std::string::npos);
  EXPECT_NE(ParseError("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n"
                       "        rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
                .find("descriptors[0].descriptors[0].rate_limit.unit"),
            std::string::npos);
}

// The whole message, as operators see it in the log on a bad reload, and its kind.
TEST(RlsConfigTest, ErrorsAreInvalidArgumentNamingDomainAndPlace) {
  auto nested = RlsConfig::Parse(
      "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: "
      "[{name: ''}]}\n");
  ASSERT_FALSE(nested.ok());
  EXPECT_TRUE(nested.status().IsInvalidArgument());
  EXPECT_EQ(nested.status().message(),
            "domain d: descriptors[0].rate_limit.replaces[0]: should not have an empty replaces entry");
  auto domain = RlsConfig::Parse("domain: [a]\n");
  ASSERT_FALSE(domain.ok());
  EXPECT_TRUE(domain.status().IsInvalidArgument());
  EXPECT_EQ(domain.status().message(), "document 1: domain: must be a scalar");
  auto stuck = RlsConfig::Parse(",");
  ASSERT_FALSE(stuck.ok());
  EXPECT_TRUE(stuck.status().IsInvalidArgument());
  EXPECT_EQ(stuck.status().message().rfind("not valid YAML: line 1, column 1: ", 0), 0u)
      << stuck.status().message();
}

TEST(RlsConfigTest, WildcardsMatchAsInEnvoysRatelimit) {
  EXPECT_TRUE(WildcardMatch("value*", "value"));
  EXPECT_TRUE(WildcardMatch("value*", "value123"));
  EXPECT_FALSE(WildcardMatch("value*", "valu"));
  EXPECT_TRUE(WildcardMatch("/api/*/action", "/api/123/action"));
  EXPECT_FALSE(WildcardMatch("/api/*/action", "/api/123/other"));
  EXPECT_TRUE(WildcardMatch("*", ""));
  EXPECT_TRUE(WildcardMatch("a*b*c", "abc"));
  EXPECT_TRUE(WildcardMatch("a*b*c", "a-b-b-c"));
  EXPECT_FALSE(WildcardMatch("a*b*c", "acb"));
  EXPECT_FALSE(WildcardMatch("ab*ba", "aba"));  // the ends may not overlap
  EXPECT_TRUE(WildcardMatch("plain", "plain"));
  EXPECT_FALSE(WildcardMatch("plain", "plains"));

  auto config = MustParse(R"(
domain: w
descriptors:
  - key: path
    value: /v1/*
    rate_limit: {unit: second, requests_per_unit: 1, name: first}
  - key: path
    value: /v1/users*
    rate_limit: {unit: second, requests_per_unit: 2, name: second}
  - key: path
    value: /v1/users
    rate_limit: {unit: second, requests_per_unit: 3, name: exact}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 4, name: any}
  - key: tenant
    value: "t-*"
    share_threshold: true
    descriptors:
      - key: plan
        rate_limit: {unit: second, requests_per_unit: 5}
)");
  auto name = [&](std::string_view value) {
    RlsMatch m = config->Match("w", Entries{{"path", value}});
    return m.rule != nullptr ? m.rule->limit->name : "";
  };
  EXPECT_EQ(name("/v1/users"), "exact");    // the exact value first
  EXPECT_EQ(name("/v1/users/7"), "first");  // then the first matching pattern in file order
  EXPECT_EQ(name("/v2/x"), "any");          // then the key alone
  // share_threshold: the counter's entries carry the pattern, the others the request's values.
  Entries counter;
  RlsMatch nested = config->Match("w", Entries{{"tenant", "t-9"}, {"plan", "gold"}}, &counter);
  ASSERT_NE(nested.rule, nullptr);
  EXPECT_EQ(counter, (Entries{{"tenant", "t-*"}, {"plan", "gold"}}));
  (void)config->Match("w", Entries{{"path", "/v1/a"}}, &counter);
  EXPECT_EQ(counter, (Entries{{"path", "/v1/a"}}));
}

TEST(RlsConfigTest, EnvoysRatelimitFieldsParse) {
  auto config = MustParse(R"(
domain: e
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
      name: ldap
  - key: user
    quota_mode: true
    detailed_metric: true
    value_to_metric: true
    metadata: {team: edge}
    rate_limit:
      name: users
      replaces: [{name: ldap}, {name: other}]
      unit: minute
      requests_per_unit: 7
)");
  RlsMatch ldap = config->Match("e", Entries{{"ldap", "x"}});
  ASSERT_NE(ldap.rule, nullptr);
  EXPECT_TRUE(ldap.rule->unlimited);
  RlsMatch user = config->Match("e", Entries{{"user", "x"}});
  ASSERT_NE(user.rule, nullptr);
  EXPECT_TRUE(user.rule->quota_mode);
  EXPECT_EQ(user.rule->limit->replaces, (std::vector<std::string>{"ldap", "other"}));
  EXPECT_EQ(user.rule->limit->requests_per_unit, 7u);

  EXPECT_NE(ParseError("domain: e\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1, "
                       "replaces: [{name: ''}]}}]")
                .find("should not have an empty replaces entry"),
            std::string::npos);
  EXPECT_NE(ParseError("domain: e\ndescriptors: [{key: k, rate_limit: {name: a, unit: second, "
                       "requests_per_unit: 1, replaces: [{name: a}]}}]")
                .find("should not contain the name of the same descriptor"),
            std::string::npos);
  EXPECT_NE(ParseError("domain: e\ndescriptors: [{key: k, rate_limit: {unlimited: true, unit: second}}]")
                .find("when unlimited"),
            std::string::npos);
  EXPECT_NE(ParseError("domain: e\ndescriptors: [{key: k, value: v, share_threshold: true}]")
                .find("only for a wildcard value"),
            std::string::npos);
}

TEST(RlsConfigTest, TextYamlCppWouldNeverFinishIsRefused) {
  // yaml-cpp 0.7's LoadAll loops forever on these (found by fuzz/rls_fuzz.cc): refused instead.
  for (std::string_view text :
       {",", ", a", "---\n,", "%YAML 1.2\n,", "\"x\"\n,\n", "domain: e\n%x:\n, - key: k"}) {
    auto parsed = RlsConfig::Parse(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.status().message().find("not valid YAML"), std::string::npos)
        << parsed.status().message();
  }
  // Several documents, empty ones included, still parse.
  auto config = MustParse("---\n---\ndomain: a\ndescriptors: []\n---\ndomain: b\n...\n");
  EXPECT_EQ(config->domains(), 2u);
}

TEST(RlsConfigTest, HolderKeepsTheOldConfigOnABadReload) {
  const std::string path = testing::TempDir() + "/rls_config_test.yaml";
  {
    std::ofstream out(path, std::ios::trunc);
    out << "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 3}\n";
  }
  RlsConfigHolder holder(path);
  EXPECT_FALSE(holder.Current()->HasDomain("a"));  // empty until the first Reload
  ASSERT_TRUE(holder.Reload().ok());
  EXPECT_TRUE(holder.Current()->HasDomain("a"));
  {
    std::ofstream out(path, std::ios::trunc);
    out << "domain: b\ndescriptors: {not: a list}\n";
  }
  Status bad = holder.Reload();
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find(path), std::string::npos);
  EXPECT_TRUE(holder.Current()->HasDomain("a"));
  std::filesystem::remove(path);
  EXPECT_TRUE(holder.Reload().IsIOError());
  EXPECT_TRUE(holder.Current()->HasDomain("a"));
  RlsConfigHolder none;
  EXPECT_TRUE(none.Reload().ok());
}

// The series a matched rule is counted under: envoyproxy/ratelimit's stat key, with the request's values
// where detailed_metric or value_to_metric ask for them.
TEST(RlsConfigTest, MetricNamesFollowTheRulesAndTheirMetricOptions) {
  auto config = MustParse(R"(domain: e
descriptors:
  - key: path
    value: /login
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: client
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: tenant
    value_to_metric: true
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 7}
)");
  std::string name;
  auto match = [&](Entries entries) {
    name = "unset";
    return config->Match("e", entries, nullptr, &name).rule != nullptr;
  };
  ASSERT_TRUE(match({{"path", "/login"}}));
  EXPECT_EQ(name, "e.path_/login");
  ASSERT_TRUE(match({{"client", "c1"}, {"path", "/x"}}));
  EXPECT_EQ(name, "e.client.path");  // values the rules do not name are rolled up
  ASSERT_TRUE(match({{"tenant", "acme"}, {"path", "/x"}}));
  EXPECT_EQ(name, "e.tenant_acme.path");  // value_to_metric on the first level only
  ASSERT_TRUE(match({{"user", "u42"}}));
  EXPECT_EQ(name, "e.user_u42");  // detailed_metric
  EXPECT_FALSE(match({{"nobody", "x"}}));
}

}  // namespace
}  // namespace ringlimit::node::rls
