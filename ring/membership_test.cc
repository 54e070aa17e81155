// The rules of one Membership state machine, driven message by message. Whole-cluster behaviour (joins,
// crashes, partitions, leaves over a simulated network) is in membership_sim_test.cc.
#include "ring/membership.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ringlimit::ring {
namespace {

using std::chrono::milliseconds;

MemberInfo Info(const std::string& id, uint64_t incarnation = 1, MemberState state = MemberState::kAlive) {
  return MemberInfo{id, "http/" + id, "peer/" + id, kDefaultVnodes, incarnation, state};
}

class MembershipRulesTest : public ::testing::Test {
 protected:
  MembershipRulesTest() : m_(options_, Info("self", 5)) { EXPECT_TRUE(m_.Start(now_, {}).ring_changed); }

  // Gossip from a third party (an Ack nobody waits for: only its updates matter).
  MembershipOutput Gossip(std::vector<MemberInfo> updates) {
    Message msg;
    msg.type = MessageType::kAck;
    msg.seq = 999'999;
    msg.from = "other";
    msg.from_address = "peer/other";
    msg.updates = std::move(updates);
    return m_.Receive(now_, msg);
  }

  MemberState StateOf(const std::string& id) { return m_.Find(id).value().state; }

  MembershipOutput Advance(milliseconds d) {
    now_ += d;
    return m_.Tick(now_);
  }

  static Message Make(MessageType type, uint64_t seq, const std::string& from) {
    Message msg;
    msg.type = type;
    msg.seq = seq;
    msg.from = from;
    msg.from_address = "peer/" + from;
    return msg;
  }

  // `out` without the gossip fan-out's messages (Acks with seq 0, MembershipOptions::gossip_nodes), for
  // the tests of probing.
  static MembershipOutput WithoutFanOut(MembershipOutput out) {
    std::erase_if(out.messages, [](const Outgoing& o) {
      return o.message.type == MessageType::kAck && o.message.seq == 0;
    });
    return out;
  }

  static bool Carries(const Outgoing& o, const std::string& id, MemberState state) {
    return std::any_of(o.message.updates.begin(), o.message.updates.end(),
                       [&](const MemberInfo& u) { return u.id == id && u.state == state; });
  }

  MembershipOptions options_;
  MonoTime now_{milliseconds(10'000)};
  Membership m_;
};

TEST(MemberStateTest, NamesRoundTrip) {
  for (MemberState s : {MemberState::kJoining, MemberState::kAlive, MemberState::kLeaving,
                        MemberState::kSuspect, MemberState::kDead, MemberState::kLeft}) {
    EXPECT_EQ(ParseMemberState(MemberStateName(s)), s);
  }
  EXPECT_EQ(ParseMemberState("Alive"), std::nullopt);
  EXPECT_EQ(ParseMemberState(""), std::nullopt);
  EXPECT_TRUE(IsInRing(MemberState::kSuspect));
  EXPECT_TRUE(IsInRing(MemberState::kLeaving));
  EXPECT_FALSE(IsInRing(MemberState::kJoining));
  EXPECT_FALSE(IsInRing(MemberState::kDead));
}

TEST(MemberStateTest, Precedence) {
  using S = MemberState;
  // Higher incarnation always wins.
  EXPECT_TRUE(Supersedes(Info("a", 2, S::kAlive), Info("a", 1, S::kDead)));
  EXPECT_TRUE(Supersedes(Info("a", 2, S::kAlive), Info("a", 1, S::kLeft)));
  EXPECT_FALSE(Supersedes(Info("a", 1, S::kDead), Info("a", 2, S::kAlive)));
  // Same incarnation: joining < alive < leaving < suspect < dead < left.
  EXPECT_TRUE(Supersedes(Info("a", 3, S::kSuspect), Info("a", 3, S::kAlive)));
  EXPECT_TRUE(Supersedes(Info("a", 3, S::kDead), Info("a", 3, S::kAlive)));
  EXPECT_TRUE(Supersedes(Info("a", 3, S::kDead), Info("a", 3, S::kSuspect)));
  EXPECT_TRUE(Supersedes(Info("a", 3, S::kSuspect), Info("a", 3, S::kLeaving)));
  EXPECT_TRUE(Supersedes(Info("a", 3, S::kLeft), Info("a", 3, S::kDead)));
  EXPECT_FALSE(Supersedes(Info("a", 3, S::kAlive), Info("a", 3, S::kSuspect)));
  EXPECT_FALSE(Supersedes(Info("a", 3, S::kAlive), Info("a", 3, S::kAlive)));
  EXPECT_FALSE(Supersedes(Info("a", 3, S::kDead), Info("a", 3, S::kLeft)));
}

TEST(MemberStateTest, ReachCountsSuspectsAndTheDeadAsNotReached) {
  using S = MemberState;
  // 5 known (joining and left ones are not), 2 reached: a minority.
  const std::vector<MemberInfo> cut = {
      Info("a", 1, S::kAlive),   Info("b", 1, S::kLeaving), Info("c", 1, S::kSuspect), Info("d", 1, S::kDead),
      Info("e", 1, S::kSuspect), Info("f", 1, S::kJoining), Info("g", 1, S::kLeft)};
  const Reach reach = ReachOf(cut);
  EXPECT_EQ(reach.known, 5u);
  EXPECT_EQ(reach.reached, 2u);
  EXPECT_TRUE(reach.minority());
  // 3 of 5: a majority. Half exactly (2 of 4) is not.
  EXPECT_FALSE(ReachOf(std::vector<MemberInfo>{Info("a", 1, S::kAlive), Info("b", 1, S::kAlive),
                                               Info("c", 1, S::kAlive), Info("d", 1, S::kDead),
                                               Info("e", 1, S::kSuspect)})
                   .minority());
  EXPECT_TRUE(ReachOf(std::vector<MemberInfo>{Info("a", 1, S::kAlive), Info("b", 1, S::kAlive),
                                              Info("c", 1, S::kDead), Info("d", 1, S::kSuspect)})
                  .minority());
  EXPECT_FALSE(ReachOf({}).minority());
}

TEST(MembershipOptionsTest, AntiEntropyIntervalGrowsWithTheClusterAboveItsScale) {
  MembershipOptions o;  // 5 s, scale after 32 members
  EXPECT_EQ(SyncIntervalFor(o, 1), milliseconds(5'000));
  EXPECT_EQ(SyncIntervalFor(o, 32), milliseconds(5'000));
  EXPECT_EQ(SyncIntervalFor(o, 100), milliseconds(15'625));
  EXPECT_EQ(SyncIntervalFor(o, 1'000), milliseconds(156'250));
  o.sync_interval = milliseconds(0);
  EXPECT_EQ(SyncIntervalFor(o, 1'000), milliseconds(0));
  o = MembershipOptions{};
  o.sync_scale_after = 0;
  EXPECT_TRUE(Validate(o).IsInvalidArgument());
}

TEST(MembershipOptionsTest, Validation) {
  EXPECT_TRUE(Validate(MembershipOptions{}).ok());
  MembershipOptions o;
  o.probe_timeout = o.probe_interval;
  EXPECT_TRUE(Validate(o).IsInvalidArgument());
  o = MembershipOptions{};
  o.suspicion_timeout = milliseconds(0);
  EXPECT_TRUE(Validate(o).IsInvalidArgument());
  o = MembershipOptions{};
  o.retransmit_mult = 0;
  EXPECT_TRUE(Validate(o).IsInvalidArgument());
}

TEST_F(MembershipRulesTest, StartsAloneAlive) {
  EXPECT_TRUE(m_.joined());
  EXPECT_EQ(m_.self().state, MemberState::kAlive);
  EXPECT_EQ(m_.RingMembers(), (std::vector<RingMember>{{"self", kDefaultVnodes, "peer/self"}}));
}

TEST_F(MembershipRulesTest, NewMemberJoinsTheRing) {
  MembershipOutput out = Gossip({Info("a", 1)});
  EXPECT_TRUE(out.ring_changed);
  ASSERT_EQ(out.events.size(), 1u);
  EXPECT_EQ(out.events[0].kind, MemberEventKind::kJoined);
  EXPECT_EQ(m_.RingMembers(), (std::vector<RingMember>{{"a", kDefaultVnodes, "peer/a"},
                                                       {"self", kDefaultVnodes, "peer/self"}}));
  // Knowing it again changes nothing.
  out = Gossip({Info("a", 1)});
  EXPECT_FALSE(out.ring_changed);
  EXPECT_TRUE(out.events.empty());
  EXPECT_EQ(m_.stats().stale_updates, 1u);
}

// A member announcing more vnodes than max_vnodes (a fake member asking for most of the ring) is refused;
// one at the bound joins.
TEST_F(MembershipRulesTest, TooManyVnodesAreRefused) {
  MemberInfo greedy = Info("greedy", 1);
  greedy.vnodes = kMaxVnodes;
  MembershipOutput out = Gossip({greedy});
  EXPECT_FALSE(out.ring_changed);
  EXPECT_EQ(m_.stats().vnodes_refused, 1u);
  EXPECT_EQ(m_.RingMembers().size(), 1u);
  MemberInfo heavy = Info("heavy", 1);
  heavy.vnodes = MembershipOptions{}.max_vnodes;
  out = Gossip({heavy});
  EXPECT_TRUE(out.ring_changed);
  EXPECT_EQ(m_.RingMembers().size(), 2u);
  MembershipOptions bad;
  bad.max_vnodes = kMaxVnodes + 1;
  EXPECT_TRUE(Validate(bad).IsInvalidArgument());
}

TEST_F(MembershipRulesTest, IncarnationPrecedence) {
  Gossip({Info("a", 4)});
  Gossip({Info("a", 4, MemberState::kSuspect)});
  EXPECT_EQ(StateOf("a"), MemberState::kSuspect);
  Gossip({Info("a", 4, MemberState::kAlive)});  // not a refutation: same incarnation
  EXPECT_EQ(StateOf("a"), MemberState::kSuspect);
  Gossip({Info("a", 5, MemberState::kAlive)});  // refutation
  EXPECT_EQ(StateOf("a"), MemberState::kAlive);
  MembershipOutput out =
      Gossip({Info("a", 5, MemberState::kDead)});  // dead beats alive at the same incarnation
  EXPECT_EQ(StateOf("a"), MemberState::kDead);
  EXPECT_TRUE(out.ring_changed);
  ASSERT_EQ(out.events.size(), 1u);
  EXPECT_EQ(out.events[0].kind, MemberEventKind::kDead);
  Gossip({Info("a", 4, MemberState::kAlive)});  // old news
  EXPECT_EQ(StateOf("a"), MemberState::kDead);
  out = Gossip({Info("a", 6, MemberState::kAlive)});  // a new life
  EXPECT_EQ(StateOf("a"), MemberState::kAlive);
  EXPECT_EQ(out.events.at(0).kind, MemberEventKind::kAlive);
}

TEST_F(MembershipRulesTest, LeftIsFinal) {
  Gossip({Info("a", 3, MemberState::kLeft)});  // unknown and gone: not even recorded
  EXPECT_EQ(m_.Find("a"), std::nullopt);
  Gossip({Info("a", 3)});
  Gossip({Info("a", 3, MemberState::kLeft)});
  EXPECT_EQ(StateOf("a"), MemberState::kLeft);
  for (MemberState s :
       {MemberState::kAlive, MemberState::kSuspect, MemberState::kDead, MemberState::kLeaving}) {
    Gossip({Info("a", 3, s)});
    EXPECT_EQ(StateOf("a"), MemberState::kLeft) << MemberStateName(s);
  }
  // Never probed, so never suspected.
  for (int i = 0; i < 50; ++i) {
    MembershipOutput out = Advance(milliseconds(100));
    for (const Outgoing& o : out.messages) EXPECT_NE(o.to_id, "a");
  }
  EXPECT_EQ(StateOf("a"), MemberState::kLeft);
  // Only a later life of the member itself brings it back.
  Gossip({Info("a", 4, MemberState::kJoining)});
  EXPECT_EQ(StateOf("a"), MemberState::kJoining);
}

TEST_F(MembershipRulesTest, UnknownDeadMembersAreNotRecorded) {
  Gossip({Info("ghost", 9, MemberState::kDead)});
  EXPECT_EQ(m_.Find("ghost"), std::nullopt);
}

TEST_F(MembershipRulesTest, InvalidUpdatesAreDroppedAndCounted) {
  MemberInfo no_id = Info("");
  MemberInfo long_id = Info(std::string(kMaxMemberIdLength + 1, 'x'));
  MemberInfo no_vnodes = Info("a");
  no_vnodes.vnodes = 0;
  MemberInfo bad_state = Info("b");
  bad_state.state = static_cast<MemberState>(42);
  MemberInfo long_address = Info("c");
  long_address.peer_address.assign(10'000, 'p');
  MembershipOutput out = Gossip({no_id, long_id, no_vnodes, bad_state, long_address, Info("d")});
  EXPECT_EQ(m_.stats().invalid_updates, 5u);
  EXPECT_EQ(m_.Members().size(), 2u);  // self and d
}

TEST_F(MembershipRulesTest, RefutesRumoursAboutItself) {
  Gossip({Info("a", 1)});
  Gossip({Info("self", 5, MemberState::kSuspect)});
  EXPECT_EQ(m_.self().incarnation, 6u);
  EXPECT_EQ(m_.self().state, MemberState::kAlive);
  Gossip({Info("self", 9, MemberState::kDead)});
  EXPECT_EQ(m_.self().incarnation, 10u);
  EXPECT_EQ(m_.stats().refutations, 2u);
  Gossip({Info("self", 3, MemberState::kDead)});  // older than us: ignored
  EXPECT_EQ(m_.self().incarnation, 10u);
  // The refutation rides on the next message.
  MembershipOutput out = Advance(milliseconds(1));
  ASSERT_FALSE(out.messages.empty());
  const auto& updates = out.messages[0].message.updates;
  EXPECT_TRUE(std::any_of(updates.begin(), updates.end(), [](const MemberInfo& u) {
    return u.id == "self" && u.incarnation == 10 && u.state == MemberState::kAlive;
  }));
}

// A member that declared this node dead dropped it from its ring, even when this node had refuted an older
// suspicion first (the usual order after a pause: the suspicion was sent earlier): the rumour is reported
// once, stale or not; a rumour of an earlier life (below the incarnation at start) is not.
TEST_F(MembershipRulesTest, ADeathRumourIsReportedOnceEvenWhenItComesAfterARefutation) {
  Gossip({Info("a", 1)});
  EXPECT_FALSE(Gossip({Info("self", 4, MemberState::kDead)}).declared_dead);  // an earlier life
  EXPECT_FALSE(Gossip({Info("self", 5, MemberState::kSuspect)}).declared_dead);
  EXPECT_EQ(m_.self().incarnation, 6u);
  EXPECT_TRUE(Gossip({Info("self", 5, MemberState::kDead)}).declared_dead);
  EXPECT_EQ(m_.self().incarnation, 6u) << "stale: nothing to refute";
  EXPECT_FALSE(Gossip({Info("self", 5, MemberState::kDead)}).declared_dead) << "reported once";
  EXPECT_TRUE(Gossip({Info("self", 6, MemberState::kDead)}).declared_dead);
  EXPECT_EQ(m_.self().incarnation, 7u);
}

TEST_F(MembershipRulesTest, AcksEchoThePingsWallClock) {
  Gossip({Info("a", 1)});
  Message ping = Make(MessageType::kPing, 42, "a");
  ping.wall_ns = 1'795'000'000'000'000'000;
  MembershipOutput out = m_.Receive(now_, ping);
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_EQ(out.messages[0].message.echo_wall_ns, ping.wall_ns);
  EXPECT_EQ(out.messages[0].message.wall_ns, 0);  // stamped by the network layer when sent
}

TEST_F(MembershipRulesTest, AnswersPingsAndFullStateRequests) {
  Gossip({Info("a", 1), Info("b", 2)});
  Message ping = Make(MessageType::kPing, 42, "a");
  MembershipOutput out = m_.Receive(now_, ping);
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_EQ(out.messages[0].to_address, "peer/a");
  EXPECT_EQ(out.messages[0].message.type, MessageType::kAck);
  EXPECT_EQ(out.messages[0].message.seq, 42u);
  EXPECT_FALSE(out.messages[0].message.full_state);

  ping.full_state = true;
  ping.updates = {Info("c", 1)};
  out = m_.Receive(now_, ping);
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_TRUE(out.messages[0].message.full_state);
  std::set<std::string> ids;
  for (const MemberInfo& u : out.messages[0].message.updates) ids.insert(u.id);
  EXPECT_EQ(ids, (std::set<std::string>{"a", "b", "c", "self"}));
}

TEST_F(MembershipRulesTest, ProbesRoundRobinOverAShuffledList) {
  Gossip({Info("a"), Info("b"), Info("c"), Info("d")});
  std::vector<std::string> targets;
  for (int period = 0; period < 40; ++period) {
    MembershipOutput out = Advance(options_.probe_interval);
    for (const Outgoing& o : out.messages) {
      if (o.message.type != MessageType::kPing || o.message.full_state) continue;
      targets.push_back(o.to_id);
      (void)m_.Receive(now_, Make(MessageType::kAck, o.message.seq, o.to_id));  // every target answers
    }
  }
  ASSERT_EQ(targets.size(), 40u);
  for (size_t round = 0; round + 4 <= targets.size(); round += 4) {
    std::set<std::string> seen(targets.begin() + round, targets.begin() + round + 4);
    EXPECT_EQ(seen.size(), 4u) << "round " << round / 4 << " probed someone twice";
  }
  EXPECT_EQ(m_.stats().probes_failed, 0u);
  for (const char* id : {"a", "b", "c", "d"}) EXPECT_EQ(StateOf(id), MemberState::kAlive);
}

TEST_F(MembershipRulesTest, IndirectProbeThenSuspicionThenDeath) {
  Gossip({Info("a"), Info("b"), Info("c"), Info("d"), Info("e")});
  MembershipOutput out = WithoutFanOut(Advance(options_.probe_interval));
  ASSERT_EQ(out.messages.size(), 1u);
  const std::string target = out.messages[0].to_id;
  const uint64_t seq = out.messages[0].message.seq;
  EXPECT_TRUE(Advance(options_.probe_timeout / 2).messages.empty());
  out = Advance(options_.probe_timeout / 2);  // direct timeout: k helpers
  ASSERT_EQ(out.messages.size(), options_.indirect_probes);
  std::set<std::string> helpers;
  for (const Outgoing& o : out.messages) {
    EXPECT_EQ(o.message.type, MessageType::kPingReq);
    EXPECT_EQ(o.message.target, target);
    EXPECT_EQ(o.message.target_address, "peer/" + target);
    EXPECT_EQ(o.message.seq, seq);
    EXPECT_NE(o.to_id, target);
    helpers.insert(o.to_id);
  }
  EXPECT_EQ(helpers.size(), options_.indirect_probes);
  // Nobody answers: at the end of the period the target is suspect...
  out = Advance(options_.probe_interval - options_.probe_timeout);
  EXPECT_EQ(StateOf(target), MemberState::kSuspect);
  EXPECT_TRUE(std::any_of(out.events.begin(), out.events.end(), [&](const MemberEvent& e) {
    return e.kind == MemberEventKind::kSuspect && e.member.id == target;
  }));
  EXPECT_FALSE(out.ring_changed);  // suspects keep their arcs
  // ...and it is told so when probed, so it can refute.
  // Then dead once the suspicion timeout has passed without a refutation. Other probes go unanswered too
  // but we only follow the first target.
  MonoTime suspected_at = now_;
  while (now_ - suspected_at < options_.suspicion_timeout - milliseconds(10)) {
    Advance(milliseconds(10));
    if (StateOf(target) != MemberState::kSuspect) break;
  }
  EXPECT_EQ(StateOf(target), MemberState::kSuspect);
  out = Advance(milliseconds(20));
  EXPECT_EQ(StateOf(target), MemberState::kDead);
  EXPECT_TRUE(out.ring_changed);
}

TEST_F(MembershipRulesTest, ARelayedAckPreventsSuspicion) {
  Gossip({Info("a"), Info("b"), Info("c")});
  MembershipOutput out = Advance(options_.probe_interval);
  const std::string target = out.messages.at(0).to_id;
  const uint64_t seq = out.messages.at(0).message.seq;
  out = Advance(options_.probe_timeout);
  ASSERT_EQ(out.messages.size(), 2u);  // only two other members can help
  Message relayed = Make(MessageType::kAck, seq, out.messages[0].to_id);
  relayed.target = target;
  (void)m_.Receive(now_, relayed);
  Advance(options_.probe_interval);
  EXPECT_EQ(StateOf(target), MemberState::kAlive);
  EXPECT_EQ(m_.stats().probes_failed, 0u);
}

TEST_F(MembershipRulesTest, HelpsOthersProbeIndirectly) {
  Gossip({Info("requester"), Info("target")});
  Message req = Make(MessageType::kPingReq, 77, "requester");
  req.target = "target";
  req.target_address = "peer/target";
  MembershipOutput out = m_.Receive(now_, req);
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_EQ(out.messages[0].to_address, "peer/target");
  EXPECT_EQ(out.messages[0].message.type, MessageType::kPing);
  Message ack = Make(MessageType::kAck, out.messages[0].message.seq, "target");
  out = m_.Receive(now_, ack);
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_EQ(out.messages[0].to_address, "peer/requester");
  EXPECT_EQ(out.messages[0].message.type, MessageType::kAck);
  EXPECT_EQ(out.messages[0].message.seq, 77u);
  EXPECT_EQ(out.messages[0].message.target, "target");
  // A second Ack for the same relay is not forwarded twice.
  EXPECT_TRUE(m_.Receive(now_, ack).messages.empty());
}

TEST_F(MembershipRulesTest, UpdatesAreRetransmittedABoundedNumberOfTimes) {
  Gossip({Info("a"), Info("b"), Info("c")});  // N = 4: limit = 3 * ceil(log2(5)) = 9
  const uint32_t limit = options_.retransmit_mult * 3;
  int carried = 0;
  for (int i = 0; i < 200; ++i) {
    MembershipOutput out = Advance(milliseconds(50));
    for (const Outgoing& o : out.messages) {
      if (o.message.full_state) continue;
      if (Carries(o, "a", MemberState::kAlive)) ++carried;
      if (o.message.type == MessageType::kPing) {
        (void)m_.Receive(now_, Make(MessageType::kAck, o.message.seq, o.to_id));
      }
    }
  }
  EXPECT_EQ(carried, static_cast<int>(limit));
  EXPECT_FALSE(m_.HasPendingGossip());
}

TEST_F(MembershipRulesTest, SuspectsAreToldTheyAreSuspected) {
  Gossip({Info("a", 2, MemberState::kSuspect)});
  MembershipOutput out = WithoutFanOut(Advance(milliseconds(1)));
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_EQ(out.messages[0].to_id, "a");
  EXPECT_EQ(out.messages[0].message.updates.at(0).id, "a");
  EXPECT_EQ(out.messages[0].message.updates.at(0).state, MemberState::kSuspect);
}

TEST_F(MembershipRulesTest, UpdatesAreFannedOutOncePerPeriodWhileTheyWait) {
  Gossip({Info("a"), Info("b"), Info("c"), Info("d"), Info("e")});
  MembershipOutput out = Advance(options_.probe_interval);
  std::set<std::string> fanned_to;
  for (const Outgoing& o : out.messages) {
    if (o.message.type != MessageType::kAck) continue;
    EXPECT_EQ(o.message.seq, 0u);  // matches no probe: only its updates count
    EXPECT_FALSE(o.message.updates.empty());
    fanned_to.insert(o.to_id);
  }
  EXPECT_EQ(fanned_to.size(), options_.gossip_nodes);
  // Not again within the period.
  out = Advance(options_.probe_timeout / 2);
  EXPECT_EQ(out.messages.size(), WithoutFanOut(out).messages.size());
  // Once every update has been sent its share of times, nothing is fanned out.
  for (int i = 0; i < 200 && m_.HasPendingGossip(); ++i) {
    for (const Outgoing& o : Advance(options_.probe_interval).messages) {
      if (o.message.type == MessageType::kPing) {
        (void)m_.Receive(now_, Make(MessageType::kAck, o.message.seq, o.to_id));
      }
    }
  }
  ASSERT_FALSE(m_.HasPendingGossip());
  for (const Outgoing& o : Advance(options_.probe_interval).messages)
    EXPECT_NE(o.message.type, MessageType::kAck);
}

TEST_F(MembershipRulesTest, RingChangedIsExactlyWhetherTheRingMembersDiffer) {
  EXPECT_TRUE(Gossip({Info("a")}).ring_changed);
  EXPECT_FALSE(Gossip({Info("b", 1, MemberState::kJoining)}).ring_changed);  // not in the ring
  EXPECT_FALSE(Gossip({Info("a", 1, MemberState::kSuspect)}).ring_changed);  // suspects keep their arcs
  // Out and back in within one message: the same ring members.
  const std::vector<RingMember> before = m_.RingMembers();
  EXPECT_FALSE(Gossip({Info("a", 1, MemberState::kDead), Info("a", 2)}).ring_changed);
  EXPECT_EQ(m_.RingMembers(), before);
  // Another weight is another ring.
  MemberInfo heavier = Info("a", 3);
  heavier.vnodes = 2 * kDefaultVnodes;
  EXPECT_TRUE(Gossip({heavier}).ring_changed);
  EXPECT_TRUE(Gossip({Info("b", 2)}).ring_changed);  // joining -> alive
  EXPECT_TRUE(Gossip({Info("a", 3, MemberState::kDead)}).ring_changed);
}

// reach() is ReachOf(Members()) without the copy, and table_version() moves whenever Members() may have
// changed: the cluster planner reads these on every message instead of copying the table.
TEST_F(MembershipRulesTest, ReachAndTableVersionFollowTheTable) {
  auto same_reach = [&] {
    const Reach counted = m_.reach();
    const Reach walked = ReachOf(m_.Members());
    return counted.known == walked.known && counted.reached == walked.reached;
  };
  EXPECT_TRUE(same_reach());
  uint64_t version = m_.table_version();
  auto moved = [&] { return std::exchange(version, m_.table_version()) != m_.table_version(); };
  Gossip({Info("a"), Info("b"), Info("c", 1, MemberState::kJoining), Info("d", 1, MemberState::kLeaving)});
  EXPECT_TRUE(moved());
  EXPECT_TRUE(same_reach());
  Gossip({Info("a")});  // nothing new
  EXPECT_FALSE(moved());
  Gossip({Info("a", 1, MemberState::kSuspect), Info("b", 1, MemberState::kDead)});
  EXPECT_TRUE(moved());
  EXPECT_TRUE(same_reach());
  Gossip({Info("a", 2)});  // refuted: only the incarnation changes
  EXPECT_TRUE(moved());
  Gossip({Info("self", 9, MemberState::kSuspect)});  // a rumour about self: refuted
  EXPECT_TRUE(moved());
  EXPECT_TRUE(same_reach());
  Gossip({Info("d", 1, MemberState::kLeft)});
  EXPECT_TRUE(moved());
  EXPECT_TRUE(same_reach());
  Advance(options_.tombstone_retention + milliseconds(1));  // b and d forgotten
  EXPECT_TRUE(moved());
  EXPECT_FALSE(m_.Find("b").has_value());
  EXPECT_TRUE(same_reach());
  EXPECT_TRUE(m_.Leave(now_).events.size() == 1);
  EXPECT_TRUE(moved());
  EXPECT_TRUE(same_reach());
  EXPECT_TRUE(m_.FinishLeave(now_).ring_changed);
  EXPECT_TRUE(moved());
  EXPECT_TRUE(same_reach());
}

// With most members down, indirect probes still go to alive helpers only, as many as there are (up to k).
TEST_F(MembershipRulesTest, IndirectHelpersAreAliveEvenWhenFewAre) {
  std::vector<MemberInfo> many;
  for (int i = 0; i < 40; ++i) many.push_back(Info("m" + std::to_string(i)));
  Gossip(many);
  std::vector<MemberInfo> dead;
  for (int i = 2; i < 40; ++i) dead.push_back(Info("m" + std::to_string(i), 1, MemberState::kDead));
  Gossip(dead);  // m0 and m1 alone alive
  for (int round = 0; round < 4; ++round) {
    MembershipOutput out = WithoutFanOut(Advance(options_.probe_interval));
    ASSERT_EQ(out.messages.size(), 1u);
    const std::string target = out.messages[0].to_id;
    const uint64_t seq = out.messages[0].message.seq;
    out = WithoutFanOut(Advance(options_.probe_timeout));
    std::set<std::string> helpers;
    for (const Outgoing& o : out.messages) {
      ASSERT_EQ(o.message.type, MessageType::kPingReq);
      helpers.insert(o.to_id);
    }
    std::set<std::string> expected = {"m0", "m1"};
    expected.erase(target);
    EXPECT_EQ(helpers, expected) << "probing " << target;
    // The target answers before the period ends: it stays alive.
    EXPECT_TRUE(m_.Receive(now_, Make(MessageType::kAck, seq, target)).events.empty());
    Advance(options_.probe_interval - options_.probe_timeout - milliseconds(1));
  }
}

TEST_F(MembershipRulesTest, LeaveThenFinish) {
  Gossip({Info("a"), Info("b")});
  MembershipOutput out = m_.Leave(now_);
  EXPECT_EQ(m_.self().state, MemberState::kLeaving);
  EXPECT_EQ(m_.self().incarnation, 6u);
  EXPECT_FALSE(out.ring_changed);  // a leaving node keeps its arcs until it has handed them off
  EXPECT_EQ(out.events.at(0).kind, MemberEventKind::kLeaving);
  out = m_.FinishLeave(now_);
  EXPECT_EQ(m_.self().state, MemberState::kLeft);
  EXPECT_TRUE(out.ring_changed);
  ASSERT_EQ(out.messages.size(), 2u);  // told directly
  for (const Outgoing& o : out.messages) EXPECT_TRUE(Carries(o, "self", MemberState::kLeft));
  // Gone: no more probes, no more answers.
  EXPECT_TRUE(Advance(milliseconds(1'000)).messages.empty());
  EXPECT_TRUE(m_.Receive(now_, Make(MessageType::kPing, 1, "a")).messages.empty());
}

// Identity: a record with a live member's id at another peer address is refused (a second node started
// with a taken id), whatever its incarnation; once the member is dead, a new life at a new address is
// taken in (a restart that moved).
TEST_F(MembershipRulesTest, AnIdHeldByALiveMemberElsewhereIsRefused) {
  Gossip({Info("a", 3)});
  MemberInfo impostor = Info("a", 100, MemberState::kJoining);
  impostor.peer_address = "peer/elsewhere";
  MembershipOutput out = Gossip({impostor});
  EXPECT_EQ(m_.Find("a")->peer_address, "peer/a");
  EXPECT_EQ(m_.Find("a")->incarnation, 3u);
  EXPECT_EQ(m_.stats().id_conflicts, 1u);
  ASSERT_EQ(out.id_conflicts.size(), 1u);
  EXPECT_EQ(out.id_conflicts[0].id, "a");
  EXPECT_EQ(out.id_conflicts[0].held_by, "peer/a");
  EXPECT_EQ(out.id_conflicts[0].refused, "peer/elsewhere");
  EXPECT_TRUE(out.events.empty());
  Gossip({Info("a", 3, MemberState::kSuspect)});
  impostor.state = MemberState::kAlive;
  Gossip({impostor});  // a suspect may still run: refused too
  EXPECT_EQ(m_.Find("a")->peer_address, "peer/a");
  EXPECT_EQ(m_.stats().id_conflicts, 2u);
  Gossip({Info("a", 3, MemberState::kDead)});
  out = Gossip({impostor});  // the old life is dead: a restart at a new address
  EXPECT_EQ(m_.Find("a")->peer_address, "peer/elsewhere");
  EXPECT_EQ(StateOf("a"), MemberState::kAlive);
  EXPECT_TRUE(out.id_conflicts.empty());
}

// A record of this node's own id at another address is another node, not a rumour to refute.
TEST_F(MembershipRulesTest, ItsOwnIdAtAnotherAddressIsNotRefuted) {
  MemberInfo twin = Info("self", 50, MemberState::kAlive);
  twin.peer_address = "peer/twin";
  MembershipOutput out = Gossip({twin});
  EXPECT_EQ(m_.self().incarnation, 5u);
  EXPECT_EQ(m_.stats().refutations, 0u);
  EXPECT_EQ(m_.stats().id_conflicts, 1u);
  ASSERT_EQ(out.id_conflicts.size(), 1u);
  EXPECT_EQ(out.id_conflicts[0].held_by, "peer/twin");
  EXPECT_EQ(out.id_conflicts[0].refused, "peer/self");
}

// A joining node whose id a seed's table shows held by a live member elsewhere does not become alive; it
// goes on retrying, and joins once that member is gone.
TEST(MembershipJoinTest, ANodeWhoseIdIsTakenStaysJoining) {
  Membership m(MembershipOptions{}, Info("a", 7));
  MonoTime now{milliseconds(1'000)};
  MembershipOutput out = m.Start(now, {"peer/s1"});
  ASSERT_EQ(out.messages.size(), 1u);
  MemberInfo holder = Info("a", 3);
  holder.peer_address = "peer/old";
  Message ack;
  ack.type = MessageType::kAck;
  ack.seq = out.messages[0].message.seq;
  ack.from = "s1";
  ack.full_state = true;
  ack.updates = {Info("s1", 3), holder};
  out = m.Receive(now + milliseconds(10), ack);
  EXPECT_FALSE(m.joined());
  EXPECT_EQ(m.stats().id_conflicts, 1u);
  ASSERT_EQ(out.id_conflicts.size(), 1u);
  EXPECT_EQ(out.id_conflicts[0].held_by, "peer/old");
  out = m.Tick(now + MembershipOptions{}.join_retry_interval);
  EXPECT_TRUE(std::any_of(out.messages.begin(), out.messages.end(), [](const Outgoing& o) {
    return o.to_address == "peer/s1" && o.message.full_state;
  })) << "the join is retried";

  holder.state = MemberState::kDead;
  ack.updates = {Info("s1", 3), holder, Info("a", 7, MemberState::kJoining)};
  out = m.Receive(now + MembershipOptions{}.join_retry_interval + milliseconds(10), ack);
  EXPECT_TRUE(m.joined());
  EXPECT_TRUE(out.id_conflicts.empty());
}

// Discovery (--join-dns): a node no seed answers within join_alone_after starts alone; discovered
// addresses get its join while it joins, and afterwards a sync offer when no known member has them.
TEST(MembershipJoinTest, DiscoveredAddressesAreJoinedAndOfferedAndAFirstNodeStartsAlone) {
  MembershipOptions options;
  options.join_alone_after = milliseconds(3'000);
  Membership m(options, Info("a", 1));
  m.SetDiscovered({"peer/b", "peer/a", "peer/b"});  // its own address and duplicates ignored
  MonoTime now{milliseconds(1'000)};
  MembershipOutput out = m.Start(now, {"peer/c"});
  ASSERT_EQ(out.messages.size(), 2u);  // the seed and the discovered address
  EXPECT_EQ(out.messages[0].to_address, "peer/c");
  EXPECT_EQ(out.messages[1].to_address, "peer/b");
  EXPECT_FALSE(m.joined());
  (void)m.Tick(now + milliseconds(2'000));
  EXPECT_FALSE(m.joined());
  out = m.Tick(now + milliseconds(3'000));
  EXPECT_TRUE(m.joined()) << "nobody answered: the first node of its cluster";
  EXPECT_EQ(m.self().state, MemberState::kAlive);
  // Alive and alone: every sync offers the table to a discovered address nobody known has.
  bool offered = false;
  for (int i = 1; i <= 3 && !offered; ++i) {
    out = m.Tick(now + milliseconds(3'000) + i * options.sync_interval);
    for (const Outgoing& o : out.messages) offered |= o.to_address == "peer/b" && o.message.full_state;
  }
  EXPECT_TRUE(offered);
}

TEST(MembershipJoinTest, JoiningSendsItsTableToTheSeedsAndBecomesAliveOnAnswer) {
  Membership m(MembershipOptions{}, Info("new", 1));
  MonoTime now{milliseconds(1'000)};
  MembershipOutput out = m.Start(now, {"peer/s1", "peer/new", "peer/s2", "peer/s1"});  // own address ignored
  EXPECT_FALSE(m.joined());
  EXPECT_FALSE(out.ring_changed);
  ASSERT_EQ(out.messages.size(), 2u);
  for (const Outgoing& o : out.messages) {
    EXPECT_TRUE(o.message.full_state);
    EXPECT_TRUE(o.to_id.empty());
    EXPECT_EQ(o.message.updates.at(0).state, MemberState::kJoining);
  }
  EXPECT_EQ(out.messages[0].to_address, "peer/s1");
  EXPECT_EQ(out.messages[1].to_address, "peer/s2");
  // Retried until a seed answers.
  EXPECT_TRUE(m.Tick(now + milliseconds(100)).messages.empty());
  EXPECT_EQ(m.Tick(now + MembershipOptions{}.join_retry_interval).messages.size(), 2u);

  Message ack;
  ack.type = MessageType::kAck;
  ack.seq = out.messages[0].message.seq;
  ack.from = "s1";
  ack.full_state = true;
  ack.updates = {Info("s1", 3), Info("s2", 1), Info("new", 1, MemberState::kJoining)};
  out = m.Receive(now + milliseconds(600), ack);
  EXPECT_TRUE(m.joined());
  EXPECT_EQ(m.self().state, MemberState::kAlive);
  EXPECT_TRUE(out.ring_changed);
  EXPECT_EQ(m.RingMembers().size(), 3u);
}

}  // namespace
}  // namespace ringlimit::ring
