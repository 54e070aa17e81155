// Fuzz target: the decoders of the peer messages a node receives (transport.Envelope.payload, by
// peer.Method): membership (ring/membership_wire.h, then a real ring::Membership receives it), forwarded
// checks (node::DecideForwarded, the owner's side) and their answers (node/service/forwarded.h:
// DecisionFromProto, and node/forward/forward_wire.h's in-place reader, the entry node's side), and the state
// batches of replication and handoff (storage::StateFromProto for each state, and the in-place reader of the
// receiver's hot path, replication::ReadStateUpdateBatch with storage::DecodeStateValue). The input is one
// byte choosing the method, then the payload.
//
// Invariants: no crash or sanitizer report; a membership message that decodes encodes and decodes back
// to itself; a forwarded batch that parses is answered with one result per check, in order, and a
// decided check has one decision per limit; a state that decodes re-encodes to the same state; the
// in-place reader accepts only batches Protobuf parses, and reads from them what Protobuf reads.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz/api_harness.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/proto_util.h"
#include "node/forward/forward_wire.h"
#include "node/service/forwarded.h"
#include "peer.pb.h"
#include "replication/update_wire.h"
#include "ring/membership.h"
#include "ring/membership_wire.h"
#include "state.pb.h"
#include "storage/state_codec.h"

namespace {

using ringlimit::fuzz::FuzzInput;
namespace peer = ringlimit::peer;
namespace ring = ringlimit::ring;

void DecodeMembership(uint32_t method, std::string_view payload) {
  const std::optional<ring::Message> message = ring::DecodeMembershipMessage(method, payload);
  if (!message) return;
  const ring::WireMessage wire = ring::EncodeMembershipMessage(*message);
  FUZZ_CHECK(wire.method == method, "a membership message re-encodes under another method");
  const std::optional<ring::Message> again = ring::DecodeMembershipMessage(wire.method, wire.payload);
  FUZZ_CHECK(again.has_value() && *again == *message, "a membership message does not round-trip");

  // What a live node does with it: n1, alone, then the message, then a tick past every timer.
  ring::MemberInfo self;
  self.id = "n1";
  self.http_address = "127.0.0.1:7001";
  self.peer_address = "127.0.0.1:7101";
  self.incarnation = 1;
  ring::Membership membership(ring::MembershipOptions{}, self);
  const ring::MonoTime start = std::chrono::seconds(100);
  (void)membership.Start(start, {});
  (void)membership.Receive(start + std::chrono::milliseconds(1), *message);
  (void)membership.Tick(start + std::chrono::seconds(2));
  (void)membership.Tick(start + std::chrono::seconds(120));
}

void ForwardCheck(std::string_view payload) {
  peer::ForwardCheckRequest request;
  const bool parses = request.ParseFromArray(payload.data(), static_cast<int>(payload.size()));
  ringlimit::fuzz::ApiHarness harness;
  const ringlimit::Result<std::string> answer =
      ringlimit::node::DecideForwarded(harness.service(), payload, "n1");
  FUZZ_CHECK(answer.ok() == parses, "DecideForwarded disagrees with the parser");
  FUZZ_CHECK(answer.ok() || answer.status().IsCorruption(), "an unparsable payload is not Corruption");
  if (!answer.ok()) return;
  peer::ForwardCheckResponse response;
  FUZZ_CHECK(response.ParseFromString(*answer), "DecideForwarded's answer does not parse");
  FUZZ_CHECK(response.results_size() == request.checks_size(), "not one result per forwarded check");
  for (int i = 0; i < request.checks_size(); ++i) {
    const peer::ForwardedResult& result = response.results(i);
    FUZZ_CHECK(result.check_id() == request.checks(i).check_id(), "results out of order");
    if (result.status() == peer::CHECK_OK) {
      FUZZ_CHECK(result.decisions_size() == request.checks(i).limits_size(), "not one decision per limit");
    }
  }
}

void ForwardAnswer(std::string_view payload) {
  // The entry node's in-place reading of the answer (node/forward/forward_wire.h) reads what Protobuf reads.
  const std::optional<peer::ForwardedResult> fast = ringlimit::cluster::DecidedResultOf(payload);
  const std::optional<peer::ForwardedResult> slow = ringlimit::cluster::DecidedResultByProtobuf(payload);
  FUZZ_CHECK(fast.has_value() == slow.has_value(), "the in-place answer reader disagrees with Protobuf");
  FUZZ_CHECK(!fast || fast->SerializeAsString() == slow->SerializeAsString(),
             "the in-place answer reader reads another result");
  peer::ForwardCheckResponse response;
  if (!response.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) return;
  for (const peer::ForwardedResult& result : response.results()) {
    for (const peer::LimitDecision& d : result.decisions()) (void)ringlimit::node::DecisionFromProto(d);
  }
}

bool SameState(const ringlimit::storage::StoredState* a,
               const std::optional<ringlimit::storage::StoredState>& b) {
  if ((a != nullptr) != b.has_value()) return false;
  return !a || (a->name == b->name && a->spec == b->spec && a->state == b->state && a->version == b->version);
}

void StateBatch(std::string_view payload) {
  // One view for every input: a slot decoded into again must answer what a fresh one does.
  static ringlimit::replication::BatchView view;
  const bool read = ringlimit::replication::ReadStateUpdateBatch(payload, view);
  peer::StateUpdateBatch batch;
  const bool parsed = batch.ParseFromArray(payload.data(), static_cast<int>(payload.size()));
  FUZZ_CHECK(!read || parsed, "the in-place reader accepts a batch Protobuf refuses");
  if (!parsed) return;
  if (read) {
    FUZZ_CHECK(view.want_newer == batch.want_newer() && view.contributor == batch.contributor(),
               "the in-place reader reads another header");
    FUZZ_CHECK(view.updates.size() == static_cast<size_t>(batch.updates_size()),
               "the in-place reader reads another number of updates");
  }
  for (int u = 0; u < batch.updates_size(); ++u) {
    const peer::StateUpdate& update = batch.updates(u);
    if (read) {
      const ringlimit::replication::StateUpdateView& v = view.updates[static_cast<size_t>(u)];
      FUZZ_CHECK(v.key == update.key() && v.erased == update.erased() &&
                     v.count == static_cast<uint32_t>(update.states_size()),
                 "the in-place reader reads another update");
    }
    for (int i = 0; i < update.states_size(); ++i) {
      const peer::NamedState& named = update.states(i);
      const std::optional<ringlimit::storage::StoredState> state =
          ringlimit::storage::StateFromProto(named.name(), named.state());
      if (read) {
        FUZZ_CHECK(
            SameState(view.State(view.updates[static_cast<size_t>(u)].first + static_cast<uint32_t>(i)),
                      state),
            "the in-place reader decodes another state");
      }
      if (!state) continue;
      ringlimit::state::StoredState message;
      ringlimit::storage::StateToProto(*state, named.state().expiry_ns(), &message);
      const std::optional<ringlimit::storage::StoredState> again =
          ringlimit::storage::StateFromProto(named.name(), message);
      FUZZ_CHECK(again.has_value() && again->spec == state->spec && again->state == state->state &&
                     again->version == state->version,
                 "a replicated state does not round-trip");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = ringlimit::fuzz::QuietProtobuf();
  (void)quiet;
  FuzzInput input(data, size);
  const uint8_t choice = input.Byte();
  const std::string_view payload = input.Rest();
  switch (choice % 6) {
    case 0:
      DecodeMembership(peer::METHOD_PING, payload);
      break;
    case 1:
      DecodeMembership(peer::METHOD_PING_REQ, payload);
      break;
    case 2:
      DecodeMembership(peer::METHOD_ACK, payload);
      break;
    case 3:
      ForwardCheck(payload);
      break;
    case 4:
      ForwardAnswer(payload);
      break;
    default:
      StateBatch(payload);
      break;
  }
  return 0;
}
