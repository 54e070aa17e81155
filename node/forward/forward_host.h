// ForwardHost: everything the Forwarder (forwarder.h) needs from the node it runs in -- who it is, the
// routing table, the cluster's judgements of this node (pause fence, clock, quorum), one clock, one source
// of randomness and the peer transport. The Forwarder reads no clock, draws no random number and opens no
// socket of its own: a node gives it ClusterForwardHost (cluster_forward_host.h: the Cluster, the steady
// and system clocks, std::random_device, the PeerClient), the deterministic simulator (tests/sim/) its
// simulated clock, seeded generator and network. So the simulator runs the Forwarder a node runs, and its
// trace hash covers every time and id the Forwarder uses.
//
// Thread safety: implementations must be safe for concurrent use from any number of threads (the
// simulator's, which is single-threaded, need not be).
#ifndef RINGLIMIT_NODE_FORWARD_FORWARD_HOST_H_
#define RINGLIMIT_NODE_FORWARD_FORWARD_HOST_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "node/peer/peer_status.h"
#include "node/service/cluster_hooks.h"
#include "peer.pb.h"
#include "replication/routing_table.h"
#include "ring/clock_offset.h"

namespace ringlimit::cluster {

class ForwardHost {
 public:
  virtual ~ForwardHost() = default;

  // --- Constant ---
  // This node's member id.
  [[nodiscard]] virtual const std::string& self_id() const = 0;
  // The preference-list length (--replicas): the holders of a key.
  [[nodiscard]] virtual uint32_t replicas() const = 0;

  // --- The routing table and the cluster's judgements ---
  // The current routing table (RoutingPublisher::Current: valid until the calling thread's next call).
  [[nodiscard]] virtual const replication::RoutingTable& routing() const = 0;
  // The pause fence (Cluster::Paused).
  [[nodiscard]] virtual bool Paused() const = 0;
  // Unavailable with why this node's clock forbids it to decide, or OK (Cluster::ClockRefusal).
  [[nodiscard]] virtual Status ClockRefusal() const = 0;
  // Whether it does (ClockRefusal().has_value(), without building the message; Cluster::ClockSkewed).
  [[nodiscard]] virtual bool ClockSkewed() const = 0;
  // Unavailable with why this node is on the minority side, or OK (Cluster::MinorityRefusal).
  [[nodiscard]] virtual Status MinorityRefusal() const = 0;
  // The last estimate of `member`'s clock offset (member minus this node), or nullopt.
  [[nodiscard]] virtual std::optional<ring::OffsetEstimate> ClockOffsetOf(std::string_view member) const = 0;

  // --- Time and randomness ---
  // This node's wall clock, ns since the Unix epoch (deadline stamps are compared across nodes with it).
  [[nodiscard]] virtual int64_t WallNowNs() const = 0;
  // A monotonic clock, ns since an arbitrary instant (round trips, the dedup cache's ttl).
  [[nodiscard]] virtual std::chrono::nanoseconds SteadyNow() const = 0;
  // A random 64-bit value (the high half of this process's request ids).
  [[nodiscard]] virtual uint64_t Random() = 0;

  // --- The peer transport ---
  // Sends one request of `method` to the member at peer address `address` and calls `done` exactly once
  // with its answer or the failure (kTimeout after `timeout`; kUnavailable when it cannot be reached;
  // kConnectionLost; kRemoteError when its handler refused). `done` may run on another thread, or before
  // Call returns.
  using CallDone = std::function<void(peer::PeerResult result)>;
  virtual void Call(const std::string& address, peer::Method method, std::string payload,
                    std::chrono::milliseconds timeout, CallDone done) = 0;

  // --- Timers ---
  // Runs `fn` once, `delay` from now, on a thread of the node's event loop -- or never, once the node
  // stops (its cluster was stopped, its simulated life ended).
  virtual void After(std::chrono::nanoseconds delay, std::function<void()> fn) = 0;

  // --- Observations ---
  // A forwarded check (or relay) answered with a decision after `round_trip`.
  virtual void ObserveRoundTrip(std::chrono::nanoseconds round_trip) { (void)round_trip; }
};

// What may decide a client's check at the node it enters instead of forwarding it to its decider: quota
// grants' slices (node/grants/grant_driver.h implements it; Forwarder::SetGrants). Must be safe for
// concurrent use.
class EntryDecider {
 public:
  virtual ~EntryDecider() = default;
  // `check` enters this node and `decider` decides its key: when it is admitted here, the units this
  // node can still admit of the key; nullopt to forward it as usual.
  [[nodiscard]] virtual std::optional<uint64_t> DecideHere(const node::EntryCheck& check,
                                                           std::string_view decider) = 0;
  // Whether DecideHere would admit `check` now as far as this node can tell without counting it (it holds
  // slices of the key with units enough): a hint, DecideHere may still decline.
  [[nodiscard]] virtual bool MayDecideHere(const node::EntryCheck& check, std::string_view decider) {
    (void)check;
    (void)decider;
    return false;
  }
};

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_FORWARD_FORWARD_HOST_H_
