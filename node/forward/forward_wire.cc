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

void AppendForwardResponse(std::string_view from, std::span<const node::ForwardedOutcome> outcomes,
                           std::string& out) {
  // An int64 or enum is written as its two's-complement 64 bits, as Protobuf writes it.
  auto as_u64 = [](int64_t v) { return static_cast<uint64_t>(v); };
  auto varint_size = [](uint64_t v) { return v == 0 ? size_t{0} : 1 + pa::VarintSize(v); };
  auto bytes_size = [](std::string_view b) {
    return b.empty() ? size_t{0} : 1 + pa::VarintSize(b.size()) + b.size();
  };
  auto decision_size = [&](const limiter::Decision& d) {
    return varint_size(d.allowed) + varint_size(d.would_deny) + varint_size(d.beyond_limit) +
           varint_size(d.limit) + varint_size(d.remaining) + varint_size(as_u64(d.reset_after)) +
           varint_size(as_u64(d.retry_after)) + varint_size(as_u64(d.delay));
  };
  auto field = [&out](uint32_t number, uint64_t v) {
    if (v == 0) return;
    pa::Tag(out, number, pa::kVarint);
    pa::Varint(out, v);
  };
  auto bytes = [&out](uint32_t number, std::string_view b) {
    if (!b.empty()) pa::Bytes(out, number, b);
  };
  bytes(peer::ForwardCheckResponse::kFromFieldNumber, from);
  for (const node::ForwardedOutcome& o : outcomes) {
    size_t size = varint_size(o.check_id) + varint_size(as_u64(o.status)) + bytes_size(o.owner) +
                  varint_size(o.allowed) + bytes_size(o.error);
    for (const limiter::Decision& d : o.decisions) {
      const size_t inner = decision_size(d);
      size += 1 + pa::VarintSize(inner) + inner;
    }
    pa::Tag(out, peer::ForwardCheckResponse::kResultsFieldNumber, pa::kLengthDelimited);
    pa::Varint(out, size);
    field(peer::ForwardedResult::kCheckIdFieldNumber, o.check_id);
    field(peer::ForwardedResult::kStatusFieldNumber, as_u64(o.status));
    bytes(peer::ForwardedResult::kOwnerFieldNumber, o.owner);
    field(peer::ForwardedResult::kAllowedFieldNumber, o.allowed);
    for (const limiter::Decision& d : o.decisions) {
      pa::Tag(out, peer::ForwardedResult::kDecisionsFieldNumber, pa::kLengthDelimited);
      pa::Varint(out, decision_size(d));
      field(peer::LimitDecision::kAllowedFieldNumber, d.allowed);
      field(peer::LimitDecision::kWouldDenyFieldNumber, d.would_deny);
      field(peer::LimitDecision::kBeyondLimitFieldNumber, d.beyond_limit);
      field(peer::LimitDecision::kLimitFieldNumber, d.limit);
      field(peer::LimitDecision::kRemainingFieldNumber, d.remaining);
      field(peer::LimitDecision::kResetAfterNsFieldNumber, as_u64(d.reset_after));
      field(peer::LimitDecision::kRetryAfterNsFieldNumber, as_u64(d.retry_after));
      field(peer::LimitDecision::kDelayNsFieldNumber, as_u64(d.delay));
    }
    bytes(peer::ForwardedResult::kErrorFieldNumber, o.error);
  }
}

}  // namespace ringlimit::cluster
