#include "node/forward/routing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ringlimit::cluster {
namespace {

using ring::MemberInfo;
using ring::MemberState;

MemberInfo Member(const std::string& id, MemberState state) {
  return MemberInfo{id, "http/" + id, "peer/" + id, 16, 1, state};
}

std::shared_ptr<const ring::RingView> Ring(const std::vector<std::string>& ids) {
  std::vector<ring::RingMember> members;
  for (const std::string& id : ids) members.push_back({id, 16});
  return ring::RingView::Build(1, std::move(members)).view;
}

// A token and its preference list on `ring`.
std::vector<std::string> Preference(const ring::RingView& ring, ring::Token token) {
  std::vector<std::string> ids;
  for (const ring::RingMember* m : ring.PreferenceList(token, 3)) ids.push_back(m->id);
  return ids;
}

TEST(RoutingTest, TargetsAreTheDeciderThenLiveOrSuspectSuccessors) {
  auto ring = Ring({"a", "b", "c", "d"});
  const ring::Token token = ring::RingToken("key-1");
  const std::vector<std::string> pref = Preference(*ring, token);
  ASSERT_EQ(pref.size(), 3u);
  std::vector<MemberInfo> members;
  for (const char* id : {"a", "b", "c", "d"}) members.push_back(Member(id, MemberState::kAlive));
  const std::string self = "zz";  // an entry node outside the preference list

  // Every holder (replicas 3) is tried, even with fewer max_attempts.
  auto targets = ForwardTargets(token, self, std::nullopt, ring.get(), members, 3, 2);
  ASSERT_EQ(targets.size(), 3u);
  EXPECT_EQ(targets[0], (ForwardTarget{pref[0], "peer/" + pref[0]}));
  EXPECT_EQ(targets[1].id, pref[1]);
  EXPECT_EQ(targets[2].id, pref[2]);
  // More attempts than holders: the next members of the ring after them.
  EXPECT_EQ(ForwardTargets(token, self, std::nullopt, ring.get(), members, 1, 2).size(), 2u);
  EXPECT_TRUE(HoldsKey(token, pref[0], std::nullopt, ring.get(), 1));
  EXPECT_FALSE(HoldsKey(token, pref[1], std::nullopt, ring.get(), 1));
  EXPECT_TRUE(HoldsKey(token, pref[1], std::nullopt, ring.get(), 2));
  EXPECT_TRUE(HoldsKey(token, self, self, ring.get(), 1));  // the override decides the moving range
  EXPECT_FALSE(HoldsKey(token, self, std::nullopt, nullptr, 3));

  // A dead owner is still tried first; a dead successor is skipped, a suspect one is not.
  for (MemberInfo& m : members) {
    if (m.id == pref[0] || m.id == pref[1]) m.state = MemberState::kDead;
    if (m.id == pref[2]) m.state = MemberState::kSuspect;
  }
  targets = ForwardTargets(token, self, std::nullopt, ring.get(), members, 3, 2);
  ASSERT_EQ(targets.size(), 2u);
  EXPECT_EQ(targets[0].id, pref[0]);
  EXPECT_EQ(targets[1].id, pref[2]);

  // An override comes first; an unknown member is never a target.
  targets = ForwardTargets(token, self, std::string("nobody"), ring.get(), members, 3, 2);
  ASSERT_EQ(targets.size(), 2u);      // pref[0] (dead but the owner) and pref[2]
  EXPECT_EQ(targets[0].id, pref[0]);  // the first one added is the decider, whatever its state
  targets = ForwardTargets(token, self, std::string(pref[1]), ring.get(), members, 3, 3);
  ASSERT_EQ(targets.size(), 2u);
  EXPECT_EQ(targets[0].id, pref[1]);
  EXPECT_EQ(targets[1].id, pref[2]);  // pref[0] is dead and no longer first

  // Self is never filtered: the check is decided here when its turn comes.
  targets = ForwardTargets(token, pref[0], std::nullopt, ring.get(), members, 3, 2);
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(targets[0].id, pref[0]);
  EXPECT_TRUE(ForwardTargets(token, self, std::nullopt, nullptr, members, 3, 2).empty());
}

TEST(RoutingTest, PassesOnOnceBelowTheHopLimitNeverBack) {
  EXPECT_TRUE(PassesOn(1, "b", "a", "c"));
  EXPECT_FALSE(PassesOn(kMaxHops, "b", "a", "c"));
  EXPECT_FALSE(PassesOn(1, "a", "a", "c"));  // this node decides
  EXPECT_FALSE(PassesOn(1, "c", "a", "c"));  // never back to the sender
  EXPECT_FALSE(PassesOn(1, "", "a", "c"));   // no ring
}

}  // namespace
}  // namespace ringlimit::cluster
