#include "node/metrics/name_counters.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace ringlimit::node {
namespace {

// Every name's series (and the overflow's) as ForEach reports them.
std::map<std::string, uint64_t> Allowed(const NameCounters& table) {
  std::map<std::string, uint64_t> out;
  table.ForEach([&](std::string_view name, const DecisionCounters& c) {
    EXPECT_TRUE(out.emplace(std::string(name), c.allowed.load()).second) << "twice: " << name;
  });
  return out;
}

TEST(NameCountersTest, TheFirstNamesKeepTheirCountersAndLaterOnesCountAsOther) {
  NameCounters table(3);
  DecisionCounters* a = table.Find("a");
  EXPECT_EQ(table.Find("a"), a);  // the same entry every time
  EXPECT_NE(table.Find("b"), a);
  EXPECT_NE(table.Find("c"), a);
  DecisionCounters* d = table.Find("d");
  EXPECT_EQ(table.Find("e"), d);  // both past the cap: the overflow
  EXPECT_EQ(table.Find("other"), d);
  EXPECT_NE(table.Find("c"), d);  // a name admitted before the cap keeps its own, for good
  a->allowed += 2;
  d->allowed += 5;
  EXPECT_EQ(Allowed(table), (std::map<std::string, uint64_t>{{"a", 2}, {"b", 0}, {"c", 0}, {"other", 5}}));
  EXPECT_EQ(table.size(), 3u);
}

TEST(NameCountersTest, ACapOfZeroCountsEverythingAsOther) {
  NameCounters table(0);
  EXPECT_EQ(table.Find("a"), table.Find("b"));
  EXPECT_EQ(Allowed(table).size(), 1u);
}

// The cardinality bound of issue 37: 100 000 distinct names, 100 series (plus "other").
TEST(NameCountersTest, OneHundredThousandNamesKeepTheSeriesAtTheCap) {
  NameCounters table(100);
  for (int i = 0; i < 100'000; ++i) table.Find("name-" + std::to_string(i))->allowed++;
  const std::map<std::string, uint64_t> series = Allowed(table);
  EXPECT_EQ(series.size(), 101u);
  EXPECT_EQ(series.at("other"), 100'000u - 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(series.at("name-" + std::to_string(i)), 1u) << i;
}

// Threads adding names at once: no name twice, never more than the cap, every count kept.
TEST(NameCountersTest, ConcurrentFindsNeitherDuplicateNorExceedTheCap) {
  NameCounters table(64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&table] {
      for (int i = 0; i < 20'000; ++i) table.Find("n" + std::to_string(i % 200))->allowed++;
    });
  }
  for (auto& thread : threads) thread.join();
  const std::map<std::string, uint64_t> series = Allowed(table);
  EXPECT_LE(series.size(), 65u);
  EXPECT_EQ(table.size(), 64u);
  uint64_t total = 0;
  for (const auto& [name, n] : series) total += n;
  EXPECT_EQ(total, 4u * 20'000u);
}

}  // namespace
}  // namespace ringlimit::node
