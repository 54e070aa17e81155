#include "node/forward/forward_wire.h"

#include <algorithm>

#include "node/peer/block_arena.h"
#include "storage/proto_append.h"
#include "storage/proto_read.h"

namespace ringlimit::cluster {

namespace pa = storage::proto_append;
namespace pr = storage::proto_read;

void AppendForwardRequestHead(std::string_view from, std::string_view owner, uint64_t ring_fingerprint,
                              std::string& out) {
  if (!from.empty()) pa::Bytes(out, 1, from);
  if (!owner.empty()) pa::Bytes(out, 2, owner);
  if (ring_fingerprint != 0) {
    pa::Tag(out, 3, pa::kVarint);
    pa::Varint(out, ring_fingerprint);
  }
}

void AppendDeadlineStamp(int64_t sent_wall_ns, std::chrono::milliseconds wait, std::string& out) {
  if (sent_wall_ns != 0) pa::Fixed64(out, 5, static_cast<uint64_t>(sent_wall_ns));  // sfixed64
  const auto wait_ms = static_cast<uint32_t>(std::clamp<int64_t>(wait.count(), 0, UINT32_MAX));
  if (wait_ms != 0) {
    pa::Tag(out, 6, pa::kVarint);
    pa::Varint(out, wait_ms);
  }
}

void AppendTried(std::string_view tried, std::string& out) { pa::Bytes(out, 8, tried); }

namespace {

bool Decided(const peer::ForwardedResult& result) {
  return result.status() == peer::CHECK_OK || result.status() == peer::CHECK_UNACKED;
}

// The bytes of the response's `results` entries, when the reader understands the whole response:
// ForwardCheckResponse { from = 1 (string); ring_fingerprint = 2 (uint64); results = 3 (repeated
// message) }, unknown fields skipped as Protobuf keeps them. false: left to Protobuf's parser.
bool ReadResults(std::string_view payload, std::string_view& first, int& count) {
  if (!pr::Reader::Fits(payload)) return false;
  pr::Reader r(payload);
  count = 0;
  while (r.Next()) {
    switch (r.field()) {
      case 1: {
        std::string_view from;
        if (!r.Bytes(from) || !pr::PlainAscii(from)) return false;
        break;
      }
      case 2: {
        uint64_t fingerprint = 0;
        if (!r.Varint(fingerprint)) return false;
        break;
      }
      case 3: {
        std::string_view bytes;
        if (!r.Bytes(bytes)) return false;
        if (count++ == 0) first = bytes;
        break;
      }
      default:
        if (!r.Skip()) return false;
    }
  }
  return r.done();
}

}  // namespace

std::optional<peer::ForwardedResult> DecidedResultOf(std::string_view payload) {
  std::string_view bytes;
  int count = 0;
  if (!ReadResults(payload, bytes, count)) return DecidedResultByProtobuf(payload);
  if (count != 1) return std::nullopt;
  peer::ForwardedResult result;
  // The entry's bytes parse alone exactly as they parse inside the response (a length-delimited field of
  // a message type is parsed as that message).
  if (!result.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) || !Decided(result)) {
    return std::nullopt;
  }
  return result;
}

std::optional<peer::ForwardedResult> DecidedResultByProtobuf(std::string_view payload) {
  // Parsed onto a stack arena: only the result copied out allocates.
  peer::BlockArena<1024> arena;
  peer::ForwardCheckResponse& response = *arena.Create<peer::ForwardCheckResponse>();
  if (!response.ParseFromArray(payload.data(), static_cast<int>(payload.size())) ||
      response.results_size() != 1 || !Decided(response.results(0))) {
    return std::nullopt;
  }
  return peer::ForwardedResult(response.results(0));  // a copy off the arena
}

}  // namespace ringlimit::cluster
