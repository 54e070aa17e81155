// The wire form of membership messages: ring::Message <-> proto/peer.proto (Ping, PingReq, Ack) plus the
// peer.Method number that goes into transport.Envelope.method.
//
// Decoding never trusts the bytes: an unparseable payload or an unknown method gives nullopt, and member
// updates with an unknown state are dropped (Membership::Receive validates the rest).
//
// Thread safety: pure functions.
#ifndef RINGLIMIT_RING_MEMBERSHIP_WIRE_H_
#define RINGLIMIT_RING_MEMBERSHIP_WIRE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ring/membership.h"

namespace ringlimit::ring {

struct WireMessage {
  uint32_t method = 0;  // a ringlimit::peer::Method (METHOD_PING, METHOD_PING_REQ or METHOD_ACK)
  std::string payload;  // the serialized peer.Ping / peer.PingReq / peer.Ack
};

[[nodiscard]] WireMessage EncodeMembershipMessage(const Message& message);

// nullopt when `method` is not a membership method or `payload` does not parse.
[[nodiscard]] std::optional<Message> DecodeMembershipMessage(uint32_t method, std::string_view payload);

// Whether `method` is one of the membership methods (so the node can route it to Membership).
[[nodiscard]] bool IsMembershipMethod(uint32_t method);

}  // namespace ringlimit::ring

#endif  // RINGLIMIT_RING_MEMBERSHIP_WIRE_H_
