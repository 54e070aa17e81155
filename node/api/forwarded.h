// Checks forwarded between nodes (proto/peer.proto ForwardCheckRequest/Response): the wire form of a
// Decision, and the owner's side of a forward. A LimitSpec's wire form is limiter/spec_wire.h.
//
// Thread safety: pure functions over the thread-safe ApiContext.
#ifndef RINGLIMIT_NODE_API_FORWARDED_H_
#define RINGLIMIT_NODE_API_FORWARDED_H_

#include <string_view>

#include "limiter/limiter.h"
#include "peer.pb.h"

namespace ringlimit::node {

struct ApiContext;

void DecisionToProto(const limiter::Decision& decision, peer::LimitDecision* out);
[[nodiscard]] limiter::Decision DecisionFromProto(const peer::LimitDecision& decision);

// The owner's answer to a forwarded batch: every check is decided here, from this node's own store,
// whatever this node thinks of the ring (never forwarded again: no loops). `self_id` goes into each
// result's owner. Checks with an invalid spec or key get CHECK_INVALID with a message.
[[nodiscard]] peer::ForwardCheckResponse DecideForwarded(const ApiContext& context,
                                                         const peer::ForwardCheckRequest& request,
                                                         std::string_view self_id);
// The same into `response` (empty; e.g. on the arena the request was parsed onto).
void DecideForwarded(const ApiContext& context, const peer::ForwardCheckRequest& request,
                     std::string_view self_id, peer::ForwardCheckResponse* response);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_FORWARDED_H_
