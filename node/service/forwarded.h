// Checks forwarded between nodes (proto/peer.proto ForwardCheckRequest/Response): the wire form of a
// Decision, and the owner's side of a forward. A LimitSpec's wire form is limiter/spec_wire.h.
//
// Thread safety: pure functions over the thread-safe CheckService.
#ifndef RINGLIMIT_NODE_SERVICE_FORWARDED_H_
#define RINGLIMIT_NODE_SERVICE_FORWARDED_H_

#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "limiter/limiter.h"
#include "peer.pb.h"

namespace ringlimit::node {

struct CheckService;

void DecisionToProto(const limiter::Decision& decision, peer::LimitDecision* out);
[[nodiscard]] limiter::Decision DecisionFromProto(const peer::LimitDecision& decision);

// One forwarded check's outcome, plain: what its peer.ForwardedResult says. A decider fills these; the
// answer's bytes are written from them (cluster::AppendForwardResponse, node/forward/forward_wire.h) without
// a ForwardCheckResponse message.
struct ForwardedOutcome {
  uint64_t check_id = 0;
  peer::CheckStatus status = peer::CHECK_OK;
  std::string owner;
  bool allowed = false;
  boost::container::small_vector<limiter::Decision, 2> decisions;  // one per limit, in the request's order
  std::string error;                                               // when status != CHECK_OK
};

// The owner's decisions of a forwarded batch into `outcomes` (cleared first; one per check, in order), as the
// functions below decide them. What the Forwarder's decider calls.
void DecideForwarded(const CheckService& context, const peer::ForwardCheckRequest& request,
                     std::string_view self_id, std::vector<ForwardedOutcome>& outcomes);

// The owner's answer to a forwarded batch: every check is decided here, from this node's own store,
// whatever this node thinks of the ring (never forwarded again: no loops). `self_id` goes into each
// result's owner. Checks with an invalid spec or key get CHECK_INVALID with a message.
[[nodiscard]] peer::ForwardCheckResponse DecideForwarded(const CheckService& context,
                                                         const peer::ForwardCheckRequest& request,
                                                         std::string_view self_id);
// The same from and to bytes (a serialized ForwardCheckRequest, the serialized ForwardCheckResponse).
// Errors: Corruption when `payload` does not parse (nothing is decided).
[[nodiscard]] Result<std::string> DecideForwarded(const CheckService& context, std::string_view payload,
                                                  std::string_view self_id);
// The same into `response` (empty; e.g. on the arena the request was parsed onto).
void DecideForwarded(const CheckService& context, const peer::ForwardCheckRequest& request,
                     std::string_view self_id, peer::ForwardCheckResponse* response);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_FORWARDED_H_
