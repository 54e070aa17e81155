// The forwarded check's request and answer without Protobuf messages on the entry node's hot path.
//
// Writing (Forwarder::ForwardBefore and Call): the request's own fields, its deadline stamp and the holders
// tried, appended as Protobuf writes them (field-number order, proto3 zero values left out), so an encoded
// ForwardedCheck appended between the head and the stamp makes the bytes Protobuf would serialize for the
// whole ForwardCheckRequest (forward_wire_test compares them). A stamp appended again later sets the
// fields anew (the last value of a scalar field wins), which is how a retry restamps a request.
//
// Reading: the entry node's reading of a forward's answer (METHOD_FORWARD_CHECK's ForwardCheckResponse, which
// carries one ForwardedResult: Forwarder sends one check per request), without parsing the response
// message: the bytes of its one `results` entry are found in place (storage/proto_read.h) and only they
// are parsed, straight into the result handed on. Protobuf's route -- the response parsed onto an arena,
// then its result copied out -- cost the entry node ~1.4 k instructions more per forwarded check
// (cluster_bench --callgrind, forwarded phase). Nothing changes on the wire.
//
// Whatever the in-place reader does not fully understand (a malformed tag, a group, a `from` that is not
// plain ASCII) goes to Protobuf's own parser, whose verdict stands: fuzz/peer_message_fuzz.cc compares the
// two routes on every input.
//
// Thread safety: pure functions.
#ifndef RINGLIMIT_NODE_FORWARD_FORWARD_WIRE_H_
#define RINGLIMIT_NODE_FORWARD_FORWARD_WIRE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "node/service/forwarded.h"
#include "peer.pb.h"

namespace ringlimit::cluster {

// ForwardCheckResponse { from = 1; results = 3 } of `outcomes`, appended to `out`: the bytes Protobuf writes
// for that message (field-number order, proto3 zero values left out; forward_wire_test compares them). How
// the owner writes its answer (Forwarder: no ForwardCheckResponse message).
void AppendForwardResponse(std::string_view from, std::span<const node::ForwardedOutcome> outcomes,
                           std::string& out);

// ForwardCheckRequest { from = 1; owner = 2; ring_fingerprint = 3 }, appended to `out`.
void AppendForwardRequestHead(std::string_view from, std::string_view owner, uint64_t ring_fingerprint,
                              std::string& out);
// ForwardCheckRequest { sent_wall_ns = 5; wait_ms = 6 }: an attempt's deadline, appended to `out` (a wait
// beyond UINT32_MAX ms is written as UINT32_MAX).
void AppendDeadlineStamp(int64_t sent_wall_ns, std::chrono::milliseconds wait, std::string& out);
// One entry of ForwardCheckRequest { repeated tried = 8 }, appended to `out`.
void AppendTried(std::string_view tried, std::string& out);

// The one decided result of a ForwardCheckResponse's bytes: its only result when that is CHECK_OK or
// CHECK_UNACKED (charged, answered 503, not to be tried elsewhere); nullopt when the bytes do not parse,
// hold no result or several, or the one result is a refusal (CHECK_UNAVAILABLE, CHECK_INVALID, ...).
[[nodiscard]] std::optional<peer::ForwardedResult> DecidedResultOf(std::string_view payload);

// The same answer by Protobuf's route alone (the whole response parsed): the reference the fuzz target
// holds DecidedResultOf to.
[[nodiscard]] std::optional<peer::ForwardedResult> DecidedResultByProtobuf(std::string_view payload);

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_FORWARD_FORWARD_WIRE_H_
