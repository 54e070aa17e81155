#include "ring/membership_wire.h"

#include <gtest/gtest.h>

#include <string>

#include "peer.pb.h"

namespace ringlimit::ring {
namespace {

Message Sample(MessageType type) {
  Message m;
  m.type = type;
  m.seq = 123456789012345ULL;
  m.from = "n1";
  m.from_address = "127.0.0.1:7101";
  m.target = type == MessageType::kPing ? "" : "n3";
  m.target_address = type == MessageType::kPingReq ? "127.0.0.1:7103" : "";
  m.full_state = type != MessageType::kPingReq;
  m.wall_ns = 1'795'000'000'123'456'789;
  m.echo_wall_ns = type == MessageType::kAck ? 1'795'000'000'000'000'001 : 0;
  for (MemberState s : {MemberState::kJoining, MemberState::kAlive, MemberState::kLeaving,
                        MemberState::kSuspect, MemberState::kDead, MemberState::kLeft}) {
    m.updates.push_back(MemberInfo{"n" + std::string(MemberStateName(s)), "127.0.0.1:7001", "127.0.0.1:7101",
                                   64, static_cast<uint64_t>(s) * 1000 + 7, s});
  }
  return m;
}

TEST(MembershipWireTest, RoundTripsEveryMessageType) {
  for (MessageType type : {MessageType::kPing, MessageType::kPingReq, MessageType::kAck}) {
    const Message m = Sample(type);
    const WireMessage wire = EncodeMembershipMessage(m);
    EXPECT_TRUE(IsMembershipMethod(wire.method));
    std::optional<Message> back = DecodeMembershipMessage(wire.method, wire.payload);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, m);
  }
  EXPECT_EQ(EncodeMembershipMessage(Sample(MessageType::kPing)).method, peer::METHOD_PING);
  EXPECT_EQ(EncodeMembershipMessage(Sample(MessageType::kPingReq)).method, peer::METHOD_PING_REQ);
  EXPECT_EQ(EncodeMembershipMessage(Sample(MessageType::kAck)).method, peer::METHOD_ACK);
}

TEST(MembershipWireTest, RejectsGarbageAndOtherMethods) {
  EXPECT_FALSE(IsMembershipMethod(peer::METHOD_FORWARD_CHECK));
  EXPECT_FALSE(IsMembershipMethod(0));
  const WireMessage wire = EncodeMembershipMessage(Sample(MessageType::kPing));
  EXPECT_EQ(DecodeMembershipMessage(peer::METHOD_FORWARD_CHECK, wire.payload), std::nullopt);
  EXPECT_EQ(DecodeMembershipMessage(0, wire.payload), std::nullopt);
  EXPECT_EQ(DecodeMembershipMessage(peer::METHOD_PING, std::string("\xff\xff\xff\xff\xff", 5)), std::nullopt);
  // Truncations either fail to parse or parse into something Membership validates; they never crash.
  for (size_t n = 0; n < wire.payload.size(); ++n) {
    (void)DecodeMembershipMessage(peer::METHOD_PING, std::string_view(wire.payload).substr(0, n));
  }
}

TEST(MembershipWireTest, DropsUpdatesWithUnknownStates) {
  peer::Ack ack;
  ack.set_seq(5);
  peer::MemberUpdate* good = ack.add_updates();
  good->set_id("a");
  good->set_vnodes(8);
  good->set_state(peer::MEMBER_STATE_ALIVE);
  peer::MemberUpdate* unspecified = ack.add_updates();
  unspecified->set_id("b");
  unspecified->set_vnodes(8);
  peer::MemberUpdate* future = ack.add_updates();
  future->set_id("c");
  future->set_vnodes(8);
  future->set_state(static_cast<peer::MemberState>(42));  // from a newer version
  std::optional<Message> m = DecodeMembershipMessage(peer::METHOD_ACK, ack.SerializeAsString());
  ASSERT_TRUE(m.has_value());
  ASSERT_EQ(m->updates.size(), 1u);
  EXPECT_EQ(m->updates[0].id, "a");
  EXPECT_EQ(m->updates[0].state, MemberState::kAlive);
}

}  // namespace
}  // namespace ringlimit::ring
