#include "replication/replication_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ring/token.h"

// ReplicationPlanner under ack_majority, event by event on a fake clock: a sync decision is answered once
// a majority of the key's holders has it without holding admissions the decider lacks, on its ring and on
// every ring the key is still read from (a take-over read).
namespace ringlimit::replication {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<const ring::RingView> Ring(const std::vector<std::string>& ids, uint64_t version = 1) {
  std::vector<ring::RingMember> members;
  for (const std::string& id : ids) members.push_back({id, 16});
  return ring::RingView::Create(version, std::move(members)).value();
}

std::vector<std::string> Holders(const ring::RingView& ring, const std::string& key) {
  std::vector<std::string> ids;
  for (const ring::RingMember* m : ring.PreferenceList(ring::RingToken(key), 3)) ids.push_back(m->id);
  return ids;
}

// A key whose holders on `ring` (R = 3) satisfy `want`.
template <typename Want>
std::string KeyWhere(const ring::RingView& ring, Want want) {
  for (int i = 0;; ++i) {
    std::string key = "k" + std::to_string(i);
    if (want(Holders(ring, key))) return key;
  }
}

bool Has(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

class MajorityTest : public ::testing::Test {
 protected:
  MajorityTest() : planner_(Options()) {}

  static PlannerOptions Options() {
    PlannerOptions o;
    o.replicas = 3;
    o.sync_timeout = 250ms;
    o.ack_majority = true;
    return o;
  }

  ClusterView View(const std::string& self) {
    self_ = self;
    ClusterView view{self_, ring_.get(),
                     [this](std::string_view id) { return !gone_.contains(std::string(id)); }, nullptr};
    if (reading_ != nullptr) {
      view.reading = [this](ring::Token, std::vector<ReadRing>& out) {
        out.push_back(ReadRing{reading_.get(), held_});
      };
    }
    return view;
  }

  // Decides `key` at `self` as waiter 1; returns the batch sent to each member.
  std::map<std::string, uint64_t> Decide(const std::string& self, const std::string& key) {
    actions_ = planner_.Decided(now_, View(self), std::vector<SyncWait>{{1, {key}}});
    std::map<std::string, uint64_t> batches;
    for (const ShipBatch& b : actions_.ship) {
      EXPECT_TRUE(b.awaited) << b.target;
      batches[b.target] = b.id;
    }
    return batches;
  }

  ReplicationActions Reply(uint64_t batch, bool ok, std::vector<std::string> stale = {}) {
    return actions_ = planner_.BatchReply(now_, View(self_), batch, ok, stale);
  }

  static bool Done(const ReplicationActions& a) { return a.waiters_done == std::vector<uint64_t>{1}; }
  static bool Unacked(const ReplicationActions& a) { return a.waiters_unacked == std::vector<uint64_t>{1}; }
  static bool Nothing(const ReplicationActions& a) {
    return a.waiters_done.empty() && a.waiters_unacked.empty();
  }

  ReplicationPlanner planner_;
  std::shared_ptr<const ring::RingView> ring_ = Ring({"a", "b", "c"});
  std::shared_ptr<const ring::RingView> reading_;
  bool held_ = false;
  std::set<std::string> gone_;
  std::string self_;
  MonoTime now_{1s};
  ReplicationActions actions_;
};

TEST_F(MajorityTest, AHolderDecidingIsAnsweredOnTheFirstCleanAcknowledgement) {
  const std::string key = "user:1";
  auto batches = Decide("a", key);
  ASSERT_EQ(batches.size(), 2u);  // both other holders get it
  EXPECT_TRUE(Nothing(actions_));
  EXPECT_TRUE(Done(Reply(batches.at("b"), true)));  // a and b: 2 of 3
  EXPECT_TRUE(Nothing(Reply(batches.at("c"), true)));
}

TEST_F(MajorityTest, AHolderHoldingAdmissionsTheDeciderLacksRefusesIt) {
  auto batches = Decide("a", "user:1");
  EXPECT_TRUE(Unacked(Reply(batches.at("c"), true, {"user:1"})));
  EXPECT_TRUE(Nothing(Reply(batches.at("b"), true)));  // too late: the waiter is answered
}

TEST_F(MajorityTest, OneFailedHolderIsNotWaitedForTwoAre) {
  auto batches = Decide("a", "user:1");
  EXPECT_TRUE(Nothing(Reply(batches.at("b"), false)));  // c can still make the majority
  EXPECT_TRUE(Done(Reply(batches.at("c"), true)));
  auto again = Decide("a", "user:1");
  EXPECT_TRUE(Nothing(Reply(again.at("b"), false)));
  EXPECT_TRUE(Unacked(Reply(again.at("c"), false)));  // no majority left
}

TEST_F(MajorityTest, NoReachableMajorityIsUnackedAtOnce) {
  gone_ = {"b", "c"};
  auto batches = Decide("a", "user:1");
  EXPECT_TRUE(batches.empty());
  EXPECT_TRUE(Unacked(actions_));
  // One holder out of reach costs nothing.
  gone_ = {"c"};
  batches = Decide("a", "user:1");
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_TRUE(Done(Reply(batches.at("b"), true)));
}

TEST_F(MajorityTest, ADeciderHoldingNoCopyNeedsTwoHolders) {
  auto batches = Decide("d", "user:1");
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_TRUE(Nothing(Reply(batches.at("a"), true)));
  EXPECT_TRUE(Done(Reply(batches.at("b"), true)));
}

TEST_F(MajorityTest, UnansweredIsUnackedAtTheSyncTimeout) {
  auto batches = Decide("a", "user:1");
  ASSERT_TRUE(actions_.wake_at.has_value());
  EXPECT_EQ(*actions_.wake_at, now_ + 250ms);
  EXPECT_TRUE(Unacked(planner_.Timer(now_ + 250ms, View("a"))));
}

// A key whose holders changed (d was one, and is gone): the decision also needs a majority of the holders
// of the ring before the change, where the admissions answered so far were acknowledged.
TEST_F(MajorityTest, AKeyStillReadFromAnEarlierRingNeedsAMajorityThereToo) {
  reading_ = Ring({"a", "b", "c", "d"}, 2);
  gone_ = {"d"};
  // Held by b, c, d before: a (a holder now) was not one, so both b and c must answer.
  const std::string key = KeyWhere(*reading_, [](const auto& h) { return !Has(h, "a"); });
  auto batches = Decide("a", key);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_TRUE(Nothing(Reply(batches.at("b"), true)));  // a majority of a, b, c; one of b, c, d only
  EXPECT_TRUE(Done(Reply(batches.at("c"), true)));
  // Where a was a holder before as well, one more is enough on both rings.
  const std::string shared = KeyWhere(*reading_, [](const auto& h) { return Has(h, "a") && Has(h, "d"); });
  batches = Decide("a", shared);
  const std::vector<std::string> before = Holders(*reading_, shared);
  const std::string other = Has(before, "b") ? "b" : "c";
  EXPECT_TRUE(Done(Reply(batches.at(other), true)));
}

TEST_F(MajorityTest, AnEarlierRingWithoutAReachableMajorityRefusesAtOnce) {
  reading_ = Ring({"a", "b", "c", "d", "e"}, 2);
  gone_ = {"d", "e"};
  // Held by two members now out of reach and one other: the admissions they acknowledged cannot be read.
  const std::string key = KeyWhere(*reading_, [](const auto& h) { return Has(h, "d") && Has(h, "e"); });
  static_cast<void>(Decide("a", key));
  EXPECT_TRUE(Unacked(actions_));
}

// A read that is complete and only held (for members still deciding on the earlier ring) asks that ring's
// majority while one is reachable, and no longer refuses when none is (its holders died since).
TEST_F(MajorityTest, AHeldReadCountsOnlyWhileItsMajorityIsReachable) {
  reading_ = Ring({"a", "b", "c", "d", "e"}, 2);
  held_ = true;
  // Held by b and two of c, d, e before, not by a: b alone is no majority there.
  const std::string key = KeyWhere(*reading_, [](const auto& h) { return !Has(h, "a") && Has(h, "b"); });
  auto batches = Decide("a", key);
  EXPECT_TRUE(Nothing(Reply(batches.at("b"), true)));
  gone_ = {"d", "e"};
  const std::string lost = KeyWhere(*reading_, [](const auto& h) { return Has(h, "d") && Has(h, "e"); });
  batches = Decide("a", lost);
  EXPECT_TRUE(Nothing(actions_));  // not refused: the current ring alone counts
  EXPECT_TRUE(Done(Reply(batches.at("b"), true)));
}

TEST_F(MajorityTest, AHolderOfTheEarlierRingOnlyIsSentTheKey) {
  reading_ = Ring({"a", "b", "c", "d"}, 2);
  const std::string key = KeyWhere(*reading_, [](const auto& h) { return Has(h, "d"); });
  auto batches = Decide("a", key);
  EXPECT_TRUE(batches.contains("d"));
  EXPECT_TRUE(batches.contains("b"));
  EXPECT_TRUE(batches.contains("c"));
}

}  // namespace
}  // namespace ringlimit::replication
