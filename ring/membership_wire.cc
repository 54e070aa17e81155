#include "ring/membership_wire.h"

#include <google/protobuf/arena.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "peer.pb.h"

namespace ringlimit::ring {
namespace {

// The arena a message's protobuf form is built or parsed on, its first block on the stack: a probe with
// its piggybacked updates fits, so most messages cost no allocation for it (a whole table takes more
// blocks from the heap).
class StackArena {
 public:
  StackArena() : arena_(Options(first_block_)) {}
  StackArena(const StackArena&) = delete;
  StackArena& operator=(const StackArena&) = delete;

  template <typename Proto>
  Proto& Create() {
    return *google::protobuf::Arena::CreateMessage<Proto>(&arena_);
  }

 private:
  static constexpr size_t kFirstBlockBytes = 4096;
  static google::protobuf::ArenaOptions Options(std::array<char, kFirstBlockBytes>& block) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block.data();
    options.initial_block_size = block.size();
    return options;
  }

  alignas(std::max_align_t) std::array<char, kFirstBlockBytes> first_block_;
  google::protobuf::Arena arena_;  // after first_block_, which it uses
};

// peer.MemberState numbers are ring::MemberState + 1 (0 is "unspecified" on the wire).
peer::MemberState ToWire(MemberState state) {
  return static_cast<peer::MemberState>(static_cast<int>(state) + 1);
}

std::optional<MemberState> FromWire(peer::MemberState state) {
  const int value = static_cast<int>(state) - 1;
  if (value < static_cast<int>(MemberState::kJoining) || value > static_cast<int>(MemberState::kLeft)) {
    return std::nullopt;
  }
  return static_cast<MemberState>(value);
}

template <typename Proto>
void EncodeUpdates(const std::vector<MemberInfo>& updates, Proto& proto) {
  for (const MemberInfo& m : updates) {
    peer::MemberUpdate* u = proto.add_updates();
    u->set_id(m.id);
    u->set_http_address(m.http_address);
    u->set_peer_address(m.peer_address);
    u->set_vnodes(m.vnodes);
    u->set_incarnation(m.incarnation);
    u->set_state(ToWire(m.state));
  }
}

template <typename Proto>
void DecodeUpdates(const Proto& proto, std::vector<MemberInfo>& updates) {
  updates.reserve(proto.updates_size());
  for (const peer::MemberUpdate& u : proto.updates()) {
    std::optional<MemberState> state = FromWire(u.state());
    if (!state) continue;
    updates.push_back(
        MemberInfo{u.id(), u.http_address(), u.peer_address(), u.vnodes(), u.incarnation(), *state});
  }
}

// The fields every membership message has.
template <typename Proto>
void EncodeCommon(const Message& m, Proto& proto) {
  proto.set_seq(m.seq);
  proto.set_from(m.from);
  proto.set_from_address(m.from_address);
  proto.set_wall_ns(m.wall_ns);
  EncodeUpdates(m.updates, proto);
}

template <typename Proto>
void DecodeCommon(const Proto& proto, Message& m) {
  m.seq = proto.seq();
  m.from = proto.from();
  m.from_address = proto.from_address();
  m.wall_ns = proto.wall_ns();
  DecodeUpdates(proto, m.updates);
}

// Parses `payload` as a Proto and fills a Message of `type`; `extra(proto, message)` copies the fields
// particular to that message type.
template <typename Proto, typename Extra>
std::optional<Message> Decode(MessageType type, std::string_view payload, Extra extra) {
  StackArena arena;
  Proto& proto = arena.Create<Proto>();
  if (!proto.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) return std::nullopt;
  Message m;
  m.type = type;
  DecodeCommon(proto, m);
  extra(proto, m);
  return m;
}

template <typename Proto, typename Extra>
WireMessage Encode(peer::Method method, const Message& m, Extra extra) {
  StackArena arena;
  Proto& proto = arena.Create<Proto>();
  EncodeCommon(m, proto);
  extra(m, proto);
  return WireMessage{static_cast<uint32_t>(method), proto.SerializeAsString()};
}

}  // namespace

bool IsMembershipMethod(uint32_t method) {
  return method == peer::METHOD_PING || method == peer::METHOD_PING_REQ || method == peer::METHOD_ACK;
}

WireMessage EncodeMembershipMessage(const Message& message) {
  switch (message.type) {
    case MessageType::kPing:
      return Encode<peer::Ping>(peer::METHOD_PING, message,
                                [](const Message& m, peer::Ping& p) { p.set_full_state(m.full_state); });
    case MessageType::kPingReq:
      return Encode<peer::PingReq>(peer::METHOD_PING_REQ, message, [](const Message& m, peer::PingReq& p) {
        p.set_target(m.target);
        p.set_target_address(m.target_address);
      });
    case MessageType::kAck:
      return Encode<peer::Ack>(peer::METHOD_ACK, message, [](const Message& m, peer::Ack& p) {
        p.set_target(m.target);
        p.set_full_state(m.full_state);
        p.set_echo_wall_ns(m.echo_wall_ns);
      });
  }
  return WireMessage{};
}

std::optional<Message> DecodeMembershipMessage(uint32_t method, std::string_view payload) {
  if (payload.size() > static_cast<size_t>(INT32_MAX)) return std::nullopt;
  switch (method) {
    case peer::METHOD_PING:
      return Decode<peer::Ping>(MessageType::kPing, payload,
                                [](const peer::Ping& p, Message& m) { m.full_state = p.full_state(); });
    case peer::METHOD_PING_REQ:
      return Decode<peer::PingReq>(MessageType::kPingReq, payload, [](const peer::PingReq& p, Message& m) {
        m.target = p.target();
        m.target_address = p.target_address();
      });
    case peer::METHOD_ACK:
      return Decode<peer::Ack>(MessageType::kAck, payload, [](const peer::Ack& p, Message& m) {
        m.target = p.target();
        m.full_state = p.full_state();
        m.echo_wall_ns = p.echo_wall_ns();
      });
    default:
      return std::nullopt;
  }
}

}  // namespace ringlimit::ring
