// Policies: file format, validation errors naming the field, reload keeping the old set on failure.
#include "node/service/policies.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace ringlimit::node {
namespace {

constexpr char kValid[] = R"({"policies":{
  "api":{"mode":"soft","limits":[
    {"name":"per_hour","algorithm":"sliding_window","limit":500,"window_ms":3600000,"buckets":60,"soft_pct":10},
    {"name":"per_minute","algorithm":"token_bucket","limit":10,"window_ms":60000,"burst":20,"mode":"hard"}],
   "tiers":{"gold":{"limits":[{"name":"per_minute","limit":100}]}},
   "keys":{"user:1":{"mode":"shadow","limits":[{"name":"per_hour","limit":5}]}}},
  "login":{"limits":[{"algorithm":"gcra","limit":5,"window_ms":60000,"burst":2,"count_denied":true}]},
  "upload":{"limits":[{"algorithm":"leaky_bucket","limit":10,"window_ms":1000,"max_delay_ms":500}]}}})";

TEST(PoliciesTest, ParsesLimitsModesAndOverrides) {
  Policies policies;
  ASSERT_TRUE(policies.LoadJson(kValid).ok());
  auto set = policies.Current();
  ASSERT_EQ(set->size(), 3u);
  const Policy* api = set->Find("api");
  ASSERT_NE(api, nullptr);
  ASSERT_EQ(api->limits.size(), 2u);
  EXPECT_EQ(api->limits[0].state_name, "api/per_hour");
  EXPECT_EQ(api->limits[0].spec.algorithm, limiter::Algorithm::kSlidingWindow);
  EXPECT_EQ(api->limits[0].spec.mode, limiter::Mode::kSoft);  // the policy's default mode
  EXPECT_EQ(api->limits[0].spec.soft_pct, 10u);
  EXPECT_EQ(api->limits[1].spec.mode, limiter::Mode::kHard);  // the limit's own mode wins
  EXPECT_EQ(api->limits[1].spec.burst, 20u);
  EXPECT_EQ(api->limits[1].spec.window, 60 * limiter::kSecond);

  const LimitList& gold = api->Resolve("someone", "gold");
  ASSERT_EQ(gold.size(), 2u);
  EXPECT_EQ(gold[0].spec.limit, 500u);
  EXPECT_EQ(gold[1].state_name, "api/per_minute");
  EXPECT_EQ(gold[1].spec.limit, 100u);
  EXPECT_EQ(gold[1].spec.burst, 20u);  // inherited from the default limit
  EXPECT_EQ(&api->Resolve("someone", "silver"), &api->limits);
  const LimitList& user1 = api->Resolve("user:1", "gold");
  EXPECT_EQ(user1[0].spec.limit, 5u);
  EXPECT_EQ(user1[0].spec.mode, limiter::Mode::kShadow);

  EXPECT_EQ(set->Find("login")->limits[0].state_name, "login");  // one unnamed limit: the policy's name
  EXPECT_TRUE(set->Find("login")->limits[0].spec.count_denied);
  EXPECT_EQ(set->Find("upload")->limits[0].spec.max_delay, 500 * limiter::kMillisecond);
  EXPECT_EQ(set->Find("nope"), nullptr);
}

TEST(PoliciesTest, ErrorsNameTheBadField) {
  struct Case {
    const char* json;
    const char* field;
  };
  const Case cases[] = {
      {"{", ""},
      {R"([])", ""},
      {R"({"policy":{}})", "policy"},
      {R"({"policies":[]})", "policies"},
      {R"({"policies":{"bad name":{"limits":[{"limit":1,"window_ms":1}]}}})", "policies.bad name"},
      {R"({"policies":{"api":{}}})", "policies.api.limits"},
      {R"({"policies":{"api":{"limits":[]}}})", "policies.api.limits"},
      {R"({"policies":{"api":{"limits":[{"limit":1,"window_ms":0}]}}})", "policies.api.limits[0]"},
      {R"({"policies":{"api":{"limits":[{"limit":1,"window_ms":1000,"algorithm":"nope"}]}}})",
       "policies.api.limits[0]"},
      {R"({"policies":{"api":{"limits":[{"limit":1,"window_ms":1000},{"limit":2,"window_ms":1000}]}}})",
       "policies.api.limits[0].name"},
      {R"({"policies":{"api":{"limits":[{"name":"a","limit":1,"window_ms":1000},{"name":"a","limit":2,"window_ms":1000}]}}})",
       "policies.api.limits[1].name"},
      {R"({"policies":{"api":{"limits":[{"limit":1,"window_ms":1000}],"tiers":{"gold":{"limits":[{"limit":0}]}}}}})",
       "policies.api.tiers.gold.limits[0]"},
      {R"({"policies":{"api":{"limits":[{"limit":1,"window_ms":1000}],"keys":{"u":{"limit":5}}}}})",
       "policies.api.keys.u.limit"},
      {R"({"policies":{"api":{"limits":[{"limit":1,"window_ms":1000}],"extra":1}}})", "policies.api.extra"},
      {R"({"policies":{"api":{"limits":[{"limit":1,"window_ms":1000,"key":"x"}]}}})",
       "policies.api.limits[0]"},
  };
  for (const Case& c : cases) {
    const Result<std::shared_ptr<const PolicySet>> set = PolicySet::Parse(c.json);
    ASSERT_FALSE(set.ok()) << c.json;
    const Status& error = set.status();
    EXPECT_TRUE(error.IsInvalidArgument()) << error.ToString();
    // The message starts with the offending field's path (none for the text as a whole).
    const std::string_view field = c.field;
    const std::string prefix = std::string(field) + ": ";
    if (!field.empty()) {
      EXPECT_EQ(error.message().rfind(prefix, 0), 0u) << c.json << " -> " << error.ToString();
    } else {
      EXPECT_NE(error.message().rfind("policies", 0), 0u) << c.json << " -> " << error.ToString();
    }
    EXPECT_GT(error.message().size(), prefix.size());
  }
}

TEST(PoliciesTest, ReloadFromFileKeepsTheOldSetOnFailure) {
  const std::string path = ::testing::TempDir() + "policies_test.json";
  {
    std::ofstream out(path);
    out << R"({"policies":{"api":{"limits":[{"limit":1,"window_ms":1000}]}}})";
  }
  Policies policies(path);
  ASSERT_TRUE(policies.Reload().ok());
  auto first = policies.Current();
  ASSERT_NE(first->Find("api"), nullptr);
  {
    std::ofstream out(path);
    out << R"({"policies":{"api":{"limits":[{"limit":-1,"window_ms":1000}]}}})";
  }
  const Status error = policies.Reload();
  ASSERT_TRUE(error.IsInvalidArgument()) << error.ToString();
  EXPECT_NE(error.message().find("limit"), std::string::npos) << error.ToString();
  EXPECT_EQ(policies.Current(), first);  // unchanged
  {
    std::ofstream out(path);
    out << R"({"policies":{"web":{"limits":[{"limit":2,"window_ms":1000}]}}})";
  }
  ASSERT_TRUE(policies.Reload().ok());
  EXPECT_EQ(policies.Current()->Find("api"), nullptr);
  EXPECT_NE(policies.Current()->Find("web"), nullptr);
  EXPECT_NE(first->Find("api"), nullptr);  // holders of the old set still see it
  std::remove(path.c_str());
  const Status missing = policies.Reload();  // missing file: error, set kept
  EXPECT_TRUE(missing.IsIOError()) << missing.ToString();
  EXPECT_EQ(missing.message(), path + ": cannot open the policy file");
  EXPECT_NE(policies.Current()->Find("web"), nullptr);
  EXPECT_TRUE(Policies().Reload().ok());  // no file configured: nothing to do
}

TEST(PoliciesTest, ConcurrentReadersDuringReloads) {
  Policies policies;
  ASSERT_TRUE(policies.LoadJson(R"({"policies":{"api":{"limits":[{"limit":1,"window_ms":1000}]}}})").ok());
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      auto set = policies.Current();
      const Policy* api = set->Find("api");
      ASSERT_NE(api, nullptr);
      EXPECT_GE(api->limits[0].spec.limit, 1u);
    }
  });
  for (int i = 1; i <= 200; ++i) {
    ASSERT_TRUE(policies
                    .LoadJson(R"({"policies":{"api":{"limits":[{"limit":)" + std::to_string(i) +
                              R"(,"window_ms":1000}]}}})")
                    .ok());
  }
  stop = true;
  reader.join();
  EXPECT_EQ(policies.Current()->Find("api")->limits[0].spec.limit, 200u);
}

TEST(PoliciesTest, AReloadIsSeenByTheNextReadOnEveryThread) {
  // A thread that has the old set cached must see the new one on its next read (SIGHUP semantics).
  Policies policies;
  ASSERT_TRUE(policies.LoadJson(R"({"policies":{"api":{"limits":[{"limit":1,"window_ms":1000}]}}})").ok());
  std::promise<void> cached;
  std::promise<void> reloaded;
  std::shared_future<void> reloaded_future = reloaded.get_future().share();
  uint64_t before = 0;
  uint64_t after = 0;
  std::thread reader([&] {
    before = policies.Current()->Find("api")->limits[0].spec.limit;
    cached.set_value();
    reloaded_future.wait();
    after = policies.Current()->Find("api")->limits[0].spec.limit;
  });
  cached.get_future().wait();
  ASSERT_TRUE(policies.LoadJson(R"({"policies":{"api":{"limits":[{"limit":2,"window_ms":1000}]}}})").ok());
  reloaded.set_value();
  reader.join();
  EXPECT_EQ(before, 1u);
  EXPECT_EQ(after, 2u);
}

TEST(PoliciesTest, SeveralInstancesInOneProcessKeepTheirOwnSets) {
  // Several nodes in one test process: each Policies reads its own set, whichever thread reads.
  std::vector<std::unique_ptr<Policies>> all;
  for (int i = 1; i <= 12; ++i) {
    all.push_back(std::make_unique<Policies>());
    ASSERT_TRUE(all.back()
                    ->LoadJson(R"({"policies":{"p)" + std::to_string(i) +
                               R"(":{"limits":[{"limit":1,"window_ms":1000}]}}})")
                    .ok());
  }
  for (int round = 0; round < 2; ++round) {
    for (size_t i = 0; i < all.size(); ++i) {
      auto set = all[i]->Current();
      ASSERT_EQ(set->size(), 1u);
      EXPECT_NE(set->Find("p" + std::to_string(i + 1)), nullptr) << i;
    }
  }
  all.erase(all.begin());  // a new instance may reuse a dead one's address; it still starts empty
  all.push_back(std::make_unique<Policies>());
  EXPECT_EQ(all.back()->Current()->size(), 0u);
}

}  // namespace
}  // namespace ringlimit::node
