#include "client/cli/parse.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "client/cli/key_chooser.h"

namespace ringlimit::cli {
namespace {

using std::chrono::milliseconds;

TEST(ParseTest, Durations) {
  EXPECT_EQ(ParseDuration("60s"), milliseconds(60'000));
  EXPECT_EQ(ParseDuration("250ms"), milliseconds(250));
  EXPECT_EQ(ParseDuration("1.5s"), milliseconds(1500));
  EXPECT_EQ(ParseDuration("5m"), milliseconds(300'000));
  EXPECT_EQ(ParseDuration("1h"), milliseconds(3'600'000));
  EXPECT_EQ(ParseDuration("1d"), milliseconds(86'400'000));
  EXPECT_EQ(ParseDuration("42"), milliseconds(42));
  for (const char* bad : {"", "s", "-1s", "10x", "1.2.3s", "400d", "ms10"}) {
    EXPECT_FALSE(ParseDuration(bad)) << bad;
  }
}

TEST(ParseTest, ListsAndEnums) {
  EXPECT_EQ(ParseUintList("1,2,5"), (std::vector<uint64_t>{1, 2, 5}));
  EXPECT_FALSE(ParseUintList("1,x"));
  EXPECT_FALSE(ParseUintList(""));
  EXPECT_EQ(SplitList("gcra,,token_bucket"), (std::vector<std::string>{"gcra", "token_bucket"}));
  EXPECT_EQ(ParseKeyDistribution("zipf"), KeyDistribution::kZipf);
  EXPECT_FALSE(ParseKeyDistribution("Zipf"));
  EXPECT_EQ(ParseBenchMethod("get"), BenchMethod::kGet);
  EXPECT_FALSE(ParseBenchMethod("put"));
}

TEST(KeyChooserTest, UniformCoversAllKeys) {
  KeyChooser chooser(10, KeyDistribution::kUniform, 1.0);
  std::mt19937_64 rng(7);
  std::map<uint64_t, int> seen;
  for (int i = 0; i < 10000; ++i) ++seen[chooser.Next(rng)];
  ASSERT_EQ(seen.size(), 10u);
  for (const auto& [k, n] : seen) EXPECT_NEAR(n, 1000, 150) << k;
}

TEST(KeyChooserTest, ZipfFollowsOneOverRank) {
  // s = 1 over 100 keys: P(0) = 1/H(100) = 0.1928, P(1) = P(0)/2.
  KeyChooser chooser(100, KeyDistribution::kZipf, 1.0);
  std::mt19937_64 rng(7);
  std::vector<int> counts(100);
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const uint64_t k = chooser.Next(rng);
    ASSERT_LT(k, 100u);
    ++counts[k];
  }
  EXPECT_NEAR(counts[0] / double(n), 0.1928, 0.005);
  EXPECT_NEAR(counts[1] / double(n), 0.0964, 0.004);
  EXPECT_NEAR(counts[9] / double(n), 0.01928, 0.002);
}

}  // namespace
}  // namespace ringlimit::cli
