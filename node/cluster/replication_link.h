// ReplicationLink: replication/'s ClusterLink over this node's Cluster -- the ring and member states
// from the membership, requests over the peer transport -- and the peer handlers of replication
// (METHOD_STATE_UPDATE, its relay METHOD_STATE_UPDATE_RELAY, METHOD_HANDOFF_DONE).
//
// Thread safety: safe for concurrent use. Lifetime: the Cluster must outlive the link.
#ifndef RINGLIMIT_NODE_CLUSTER_REPLICATION_LINK_H_
#define RINGLIMIT_NODE_CLUSTER_REPLICATION_LINK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "replication/cluster_link.h"

namespace ringlimit::replication {
class HandoffManager;
class Replicator;
}  // namespace ringlimit::replication

namespace ringlimit::cluster {

class Cluster;

class ReplicationLink final : public replication::ClusterLink {
 public:
  explicit ReplicationLink(Cluster& cluster) : cluster_(cluster) {}

  [[nodiscard]] const std::string& self_id() const override;
  [[nodiscard]] std::shared_ptr<const ring::RingView> ring() const override;
  [[nodiscard]] std::shared_ptr<const replication::RouteOverrides> overrides() const override;
  [[nodiscard]] bool Reachable(std::string_view id) const override;
  // False while the cluster judges this node's clock off (Cluster::ClockSkewed).
  [[nodiscard]] bool Deciding() const override;
  void Send(std::string_view id, peer::Method method, std::string payload, std::chrono::milliseconds timeout,
            Reply reply) override;
  // Direct first; then through the first other alive member (METHOD_STATE_UPDATE_RELAY).
  void SendRelayed(std::string_view id, std::string payload, std::chrono::milliseconds direct,
                   std::chrono::milliseconds timeout, Reply reply) override;

  // Batches this node sent through a relay, and batches it passed on for others.
  [[nodiscard]] uint64_t relayed() const { return counters_->relayed.load(std::memory_order_relaxed); }
  [[nodiscard]] uint64_t relays_served() const {
    return counters_->relays_served.load(std::memory_order_relaxed);
  }

 private:
  friend void RegisterReplicationHandlers(Cluster&, ReplicationLink&, replication::Replicator&,
                                          replication::HandoffManager&);
  struct Counters {
    std::atomic<uint64_t> relayed{0};
    std::atomic<uint64_t> relays_served{0};
  };
  Cluster& cluster_;
  // Shared with completions that may run after the link is gone (the peer client's, at shutdown).
  std::shared_ptr<Counters> counters_ = std::make_shared<Counters>();
};

// Registers the receivers of replication and handoff on the cluster's peer server. REQUIRES: before
// Cluster::Start; both must outlive the cluster's peer server.
void RegisterReplicationHandlers(Cluster& cluster, ReplicationLink& link, replication::Replicator& replicator,
                                 replication::HandoffManager& handoff);

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_CLUSTER_REPLICATION_LINK_H_
