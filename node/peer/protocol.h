// Constants and helpers of the peer wire protocol shared by PeerServer and PeerClient (internal).
//
// Thread safety: constants and pure functions.
#ifndef RINGLIMIT_NODE_PEER_PROTOCOL_H_
#define RINGLIMIT_NODE_PEER_PROTOCOL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ringlimit::peer {

// The version exchanged in Hello/HelloReply; both sides must agree.
inline constexpr uint32_t kProtocolVersion = 1;

struct HostPort {
  std::string host;
  std::string port;
};

// Splits "host:port", "1.2.3.4:port" or "[v6addr]:port". nullopt when there is no host or the port is
// not a number in 1..65535.
[[nodiscard]] std::optional<HostPort> ParseHostPort(std::string_view address);

}  // namespace ringlimit::peer

#endif  // RINGLIMIT_NODE_PEER_PROTOCOL_H_
