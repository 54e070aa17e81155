// ReplicationLink: replication/'s ClusterLink over this node's Cluster -- the ring and member states
// from the membership, requests over the peer transport -- and the peer handlers of replication
// (METHOD_STATE_UPDATE, METHOD_HANDOFF_DONE).
//
// Thread safety: safe for concurrent use. Lifetime: the Cluster must outlive the link.
#ifndef RINGLIMIT_NODE_CLUSTER_REPLICATION_LINK_H_
#define RINGLIMIT_NODE_CLUSTER_REPLICATION_LINK_H_

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
  [[nodiscard]] bool Reachable(std::string_view id) const override;
  void Send(std::string_view id, peer::Method method, std::string payload, std::chrono::milliseconds timeout,
            Reply reply) override;

 private:
  Cluster& cluster_;
};

// Registers the receivers of replication and handoff on the cluster's peer server. REQUIRES: before
// Cluster::Start; both must outlive the cluster's peer server.
void RegisterReplicationHandlers(Cluster& cluster, replication::Replicator& replicator,
                                 replication::HandoffManager& handoff);

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_CLUSTER_REPLICATION_LINK_H_
