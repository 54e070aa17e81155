// Constants and helpers of the peer wire protocol shared by PeerServer, PeerClient and the forwarder.
//
// Thread safety: constants and pure functions.
#ifndef RINGLIMIT_NODE_PEER_PROTOCOL_H_
#define RINGLIMIT_NODE_PEER_PROTOCOL_H_

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/message_lite.h>

#include <cassert>
#include <cstddef>
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

// Appends `message` to `out` as protobuf encodes one occurrence of message field `field` (tag, length,
// bytes): appended to an encoded message, it sets that field (or adds to it, when repeated) without the
// message being built and encoded again. REQUIRES: 1 <= field < 16.
// (Inline: the forwarder uses it without linking the transport.)
inline void AppendMessageField(int field, const google::protobuf::MessageLite& message, std::string& out) {
  namespace io = google::protobuf::io;
  assert(field >= 1 && field < 16);
  const auto tag = static_cast<uint8_t>((field << 3) | 2);  // wire type 2: length-delimited
  const size_t size = message.ByteSizeLong();
  const size_t start = out.size();
  out.resize(start + 1 + io::CodedOutputStream::VarintSize32(static_cast<uint32_t>(size)) + size);
  auto* p = reinterpret_cast<uint8_t*>(out.data() + start);
  *p++ = tag;
  p = io::CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(size), p);
  message.SerializeWithCachedSizesToArray(p);
}

// Splits "host:port", "1.2.3.4:port" or "[v6addr]:port". nullopt when there is no host or the port is
// not a number in 1..65535.
[[nodiscard]] std::optional<HostPort> ParseHostPort(std::string_view address);

}  // namespace ringlimit::peer

#endif  // RINGLIMIT_NODE_PEER_PROTOCOL_H_
