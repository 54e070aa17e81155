// ClusterLink: what replication needs from the cluster -- who this node is, the ring, which members
// can be reached, and a way to send one request to a member and get its answer.
//
// replication/ does not depend on node/ (dependencies point inwards): node/cluster implements this
// interface over the peer transport (node/cluster/replication_link.h); the tests of replication/
// implement it in-process between real stores.
//
// Thread safety: implementations must be safe for concurrent use from any number of threads.
#ifndef RINGLIMIT_REPLICATION_CLUSTER_LINK_H_
#define RINGLIMIT_REPLICATION_CLUSTER_LINK_H_

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "peer.pb.h"
#include "replication/routing_table.h"
#include "ring/ring_view.h"

namespace ringlimit::replication {

class ClusterLink {
 public:
  virtual ~ClusterLink() = default;

  // This node's member id. Constant.
  [[nodiscard]] virtual const std::string& self_id() const = 0;

  // The current ring; null before this node holds one.
  [[nodiscard]] virtual std::shared_ptr<const ring::RingView> ring() const = 0;

  // The handoff's current route overrides (their `reading` ranges: the take-over reads under way), or
  // null. Default: null.
  [[nodiscard]] virtual std::shared_ptr<const RouteOverrides> overrides() const { return nullptr; }

  // Whether this node decides the keys it holds -- false while its clock is judged off from the cluster's:
  // the next holders decide them meanwhile, and their admissions reach this node's copy only as fast as
  // replication does. Such a node hands ranges off unsynced (HandoffDone::synced false): the new holder
  // pulls the others' copies too before it decides. Default: true.
  [[nodiscard]] virtual bool Deciding() const { return true; }

  // Whether member `id` may be sent to: alive, suspect or leaving (not joining, dead or left), with a
  // known peer address. This node itself is never reachable (nothing is sent to self).
  [[nodiscard]] virtual bool Reachable(std::string_view id) const = 0;

  // The answer to Send: the response payload, or nullopt when the call failed (refused, timed out,
  // connection lost, no handler, the member is unknown).
  using Reply = std::function<void(std::optional<std::string> payload)>;

  // Sends one request of peer method `method` (serialized `payload`) to member `id`. `reply` is called
  // exactly once, possibly on another thread, possibly before Send returns: callers must not hold a
  // lock that `reply` takes.
  virtual void Send(std::string_view id, peer::Method method, std::string payload,
                    std::chrono::milliseconds timeout, Reply reply) = 0;

  // Sends a serialized StateUpdateBatch to member `id` like Send, but when `id` has not answered within
  // `direct` (a cut link, perhaps cut only between these two nodes) sends it once more through another
  // member, which passes it on and answers with its acknowledgement, within what is left of `timeout`.
  // Default: Send.
  virtual void SendRelayed(std::string_view id, std::string payload, std::chrono::milliseconds direct,
                           std::chrono::milliseconds timeout, Reply reply) {
    (void)direct;
    Send(id, peer::METHOD_STATE_UPDATE, std::move(payload), timeout, std::move(reply));
  }
};

}  // namespace ringlimit::replication

#endif  // RINGLIMIT_REPLICATION_CLUSTER_LINK_H_
