// Routing: the pure decisions of the Forwarder (forwarder.h) -- in which order a forwarded check tries the
// members, and whether a node receiving a forwarded check passes it on. Which node decides a key is
// replication::RoutingTable::Decider (replication/routing_table.h).
//
// No I/O, no clock, no locks: the Forwarder feeds these functions its ring, its handoff manager's route
// override and its member table; the deterministic simulator (tests/sim/) feeds them its own, so it
// routes exactly as a node does. The sequencing around them (holding a check while its range is
// switched, trying the targets one after the other, deciding locally when none answers) stays in the
// Forwarder.
//
// Thread safety: pure functions.
#ifndef RINGLIMIT_NODE_FORWARD_ROUTING_H_
#define RINGLIMIT_NODE_FORWARD_ROUTING_H_

#include <boost/container/small_vector.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ring/membership.h"
#include "ring/ring_view.h"
#include "ring/token.h"

namespace ringlimit::cluster {

// Hops a forwarded check may make: the entry node's forward, then one more pass-on.
inline constexpr uint32_t kMaxHops = 2;

// One member a forwarded check is tried on.
struct ForwardTarget {
  std::string id;
  std::string peer_address;  // from the member table (empty if this node itself is not in it)

  bool operator==(const ForwardTarget&) const = default;
};

// The members a forwarded check of `token` is tried on, in order, at most max(`max_attempts`, `replicas`)
// of them, so that every holder of the key gets its turn before anyone decides from a copy that is not one:
//  - the decider first -- `route_override` when set, else the owner on `ring` -- whatever its state (a
//    false suspicion must not split its keys), as long as its peer address is known;
//  - then the next members of the key's preference list (length max(replicas, max_attempts)) that are
//    alive or suspect (every node must pick the same successor of a dead owner) with a known peer address.
// `self` may be among them (never filtered): when its turn comes, the check is decided here. An empty
// result, or `self` first, means: decide here now. `members` is the member table sorted by id (self and
// tombstones may be included).
// Three inline: replicas and attempts are 3 by default, so a forward allocates no list.
using ForwardTargetList = boost::container::small_vector<ForwardTarget, 3>;
[[nodiscard]] ForwardTargetList ForwardTargets(ring::Token token, std::string_view self,
                                               const std::optional<std::string>& route_override,
                                               const ring::RingView* ring,
                                               std::span<const ring::MemberInfo> members, size_t replicas,
                                               uint32_t max_attempts);

// Whether `self` holds a copy of `token`'s key: it is among the first `replicas` members of the key's
// preference list on `ring`, or it is `route_override` (the range's decider while it moves).
[[nodiscard]] bool HoldsKey(ring::Token token, std::string_view self,
                            const std::optional<std::string>& route_override, const ring::RingView* ring,
                            size_t replicas);

// Whether a node receiving a forwarded check of one key, sent by `from` after `hops` hops, passes it on
// to `decider` (its routing table's RoutingTable::Decider) instead of deciding it: only below the hop limit,
// only to another node, and never back to the sender (a sender whose ring disagrees gets the answer from
// here).
[[nodiscard]] bool PassesOn(uint32_t hops, std::string_view decider, std::string_view self,
                            std::string_view from);

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_FORWARD_ROUTING_H_
