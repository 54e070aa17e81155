#include "replication/routing_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "replication/decision_fence.h"
#include "replication/testing/manual_executor.h"
#include "ring/token.h"

namespace ringlimit::replication {
namespace {

using testing::ManualExecutor;

std::shared_ptr<const ring::RingView> Ring(std::vector<std::string> ids) {
  std::vector<ring::RingMember> members;
  for (const std::string& id : ids) members.push_back({id, 16});
  return ring::RingView::Build(1, std::move(members)).view;
}

TEST(RoutingTableTest, EmptyUntilARingIsPublished) {
  RoutingPublisher publisher;
  EXPECT_EQ(publisher.Current().version, 0u);
  EXPECT_EQ(publisher.Current().ring, nullptr);
  EXPECT_EQ(publisher.Current().Decider(42), "");
}

TEST(RoutingTableTest, OverridesWinOverTheRingAndHoldsAreSeen) {
  RoutingPublisher publisher;
  auto ring = Ring({"a", "b", "c"});
  publisher.SetRing(ring);
  const ring::Token token = ring::RingToken("user:1");
  const std::string owner = ring->Owner(token)->id;
  EXPECT_EQ(publisher.Current().Decider(token), owner);
  EXPECT_FALSE(publisher.Current().Override(token).has_value());

  auto overrides = std::make_shared<RouteOverrides>();
  overrides->entries.push_back({{token, token}, "z", true});
  publisher.SetOverrides(overrides);
  EXPECT_EQ(publisher.Current().Decider(token), "z");
  EXPECT_TRUE(publisher.Current().Holds(token));
  EXPECT_FALSE(publisher.Current().Holds(token + 1));
  EXPECT_EQ(publisher.Current().Decider(token + 1), ring->Owner(token + 1)->id);

  // After a leave every token goes to its owner on the ring without this node.
  auto left = std::make_shared<RouteOverrides>();
  left->left_ring = Ring({"x"});
  publisher.SetOverrides(left);
  EXPECT_EQ(publisher.Current().Decider(token + 1), "x");

  publisher.SetOverrides(std::make_shared<RouteOverrides>());  // none
  EXPECT_EQ(publisher.Current().overrides, nullptr);
  EXPECT_EQ(publisher.Current().Decider(token), owner);
}

TEST(RoutingTableTest, ALeavingNodeRelinquishesOnlyTheKeysItNoLongerDecides) {
  RoutingPublisher publisher;
  publisher.SetRing(Ring({"a", "b"}));
  const ring::Token token = ring::RingToken("user:1");
  EXPECT_FALSE(publisher.Current().Relinquished(token, "a"));  // no leave: never

  // "a" leaves: a range still being handed over is decided by "a", the rest by "b".
  auto leaving = std::make_shared<RouteOverrides>();
  leaving->entries.push_back({{token, token}, "a", false});
  leaving->left_ring = Ring({"b"});
  publisher.SetOverrides(leaving);
  EXPECT_FALSE(publisher.Current().Relinquished(token, "a"));
  EXPECT_TRUE(publisher.Current().Relinquished(token + 1, "a"));
  EXPECT_FALSE(publisher.Current().Relinquished(token + 1, "b"));  // "b" decides it
}

// The handoff publishes a ring with the overrides of its change: one new version, both parts in it.
TEST(RoutingTableTest, RingAndOverridesArePublishedAsOneTable) {
  RoutingPublisher publisher;
  auto ring = Ring({"a", "b"});
  const ring::Token token = ring::RingToken("user:1");
  auto overrides = std::make_shared<RouteOverrides>();
  overrides->entries.push_back({{token, token}, "z", false});
  publisher.SetRingAndOverrides(ring, overrides);
  EXPECT_EQ(publisher.version(), 1u);
  EXPECT_EQ(publisher.Current().ring, ring);
  EXPECT_EQ(publisher.Current().Decider(token), "z");
  publisher.SetRingAndOverrides(Ring({"c"}), std::make_shared<RouteOverrides>());  // none
  EXPECT_EQ(publisher.version(), 2u);
  EXPECT_EQ(publisher.Current().overrides, nullptr);
  EXPECT_EQ(publisher.Current().Decider(token), "c");
}

TEST(RoutingTableTest, MembersAreFoundById) {
  RoutingPublisher publisher;
  auto members = std::make_shared<std::vector<ring::MemberInfo>>();
  members->push_back({"a", "h/a", "p/a", 16, 1, ring::MemberState::kAlive});
  members->push_back({"b", "h/b", "p/b", 16, 1, ring::MemberState::kSuspect});
  publisher.SetMembers(members);
  ASSERT_NE(publisher.Current().Member("b"), nullptr);
  EXPECT_EQ(publisher.Current().Member("b")->peer_address, "p/b");
  EXPECT_EQ(publisher.Current().Member("c"), nullptr);
}

TEST(RoutingTableTest, EveryPartPublishesANewVersionAndInstancesNeverMix) {
  RoutingPublisher one;
  RoutingPublisher two;
  one.SetRing(Ring({"a"}));
  two.SetRing(Ring({"b"}));
  two.SetRing(Ring({"c"}));
  EXPECT_EQ(one.Current().version, 1u);
  EXPECT_EQ(two.Current().version, 2u);
  EXPECT_EQ(one.Current().Decider(7), "a");
  EXPECT_EQ(two.Current().Decider(7), "c");
}

TEST(RoutingTableTest, ReadersOnOtherThreadsSeeEveryPublishedRingEventually) {
  RoutingPublisher publisher;
  publisher.SetRing(Ring({"a"}));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> max_seen{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        const RoutingTable& table = publisher.Current();
        ASSERT_NE(table.ring, nullptr);
        uint64_t seen = max_seen.load();
        while (table.version > seen && !max_seen.compare_exchange_weak(seen, table.version)) {
        }
      }
    });
  }
  for (int i = 0; i < 2000; ++i) publisher.SetRing(Ring({i % 2 == 0 ? "a" : "b"}));
  const uint64_t last = publisher.version();
  for (int spins = 0; max_seen.load() < last && spins < 100'000'000; ++spins) {
  }
  stop.store(true);
  for (auto& r : readers) r.join();
  EXPECT_EQ(max_seen.load(), last);
}

TEST(DecisionFenceTest, WaitAnswersAtOnceWithoutDecisionsInFlight) {
  ManualExecutor executor;
  DecisionFence fence(executor);
  bool done = false;
  fence.Wait([&] { done = true; });
  EXPECT_TRUE(done);
}

TEST(DecisionFenceTest, WaitWaitsForTheDecisionsEnteredBeforeIt) {
  ManualExecutor executor;
  DecisionFence fence(executor);
  const uint32_t before1 = fence.Enter();
  const uint32_t before2 = fence.Enter();
  int done = 0;
  fence.Wait([&] { ++done; });
  const uint32_t after = fence.Enter();  // entered after the wait: not waited for
  executor.RunReady();
  EXPECT_EQ(done, 0);
  fence.Exit(before1);
  executor.RunReady();
  EXPECT_EQ(done, 0);
  fence.Exit(before2);  // the last one: posts the check
  executor.RunReady();
  EXPECT_EQ(done, 1);
  fence.Exit(after);
  EXPECT_EQ(fence.TEST_active(), 0);
}

TEST(DecisionFenceTest, SuccessiveWaitsEachWaitForTheirOwnDecisions) {
  ManualExecutor executor;
  DecisionFence fence(executor);
  const uint32_t first = fence.Enter();
  bool a = false;
  bool b = false;
  fence.Wait([&] { a = true; });
  const uint32_t second = fence.Enter();
  fence.Wait([&] { b = true; });
  fence.Exit(second);
  executor.RunReady();
  EXPECT_FALSE(a);
  EXPECT_TRUE(b);
  fence.Exit(first);
  executor.RunReady();
  EXPECT_TRUE(a);
}

TEST(DecisionFenceTest, ConcurrentDecisionsNeverLeaveAWaitHanging) {
  ManualExecutor executor;
  DecisionFence fence(executor);
  std::atomic<bool> stop{false};
  std::vector<std::thread> deciders;
  for (int t = 0; t < 2; ++t) {
    deciders.emplace_back([&] {
      while (!stop.load()) fence.Exit(fence.Enter());
    });
  }
  int done = 0;
  for (int i = 0; i < 2000; ++i) {
    fence.Wait([&] { ++done; });
    executor.RunReady();
  }
  stop.store(true);
  for (auto& d : deciders) d.join();
  for (int i = 0; i < 10 && done < 2000; ++i) executor.RunReady();
  EXPECT_EQ(done, 2000);
  EXPECT_EQ(fence.TEST_active(), 0);
}

}  // namespace
}  // namespace ringlimit::replication
