// ClusterEndpoints: the cluster as the API sees it (node::ClusterInfo, node/service/cluster_hooks.h):
// GET /v1/cluster, GET /v1/ring, POST /v1/cluster/leave, the cluster part of /readyz and /metrics.
//
// Thread safety: every method is safe for concurrent use (it reads the Cluster's snapshots).
// Lifetime: the Cluster and the Forwarder must outlive it.
#ifndef RINGLIMIT_NODE_CLUSTER_CLUSTER_ENDPOINTS_H_
#define RINGLIMIT_NODE_CLUSTER_CLUSTER_ENDPOINTS_H_

#include <functional>
#include <string>
#include <string_view>

#include "node/service/cluster_hooks.h"

namespace ringlimit::replication {
class HandoffManager;
class Replicator;
}  // namespace ringlimit::replication

namespace ringlimit::cluster {

class Cluster;
class ClusterForwardHost;
class Forwarder;
class GrantDriver;
class ReplicationLink;

class ClusterEndpoints final : public node::ClusterInfo {
 public:
  // `on_left` runs once the node has left (see Cluster::Leave): the node should then exit.
  // `host`: the forwarder's, for its round trips.
  ClusterEndpoints(Cluster& cluster, const Forwarder& forwarder, const ClusterForwardHost& host,
                   std::function<void()> on_left);

  ClusterEndpoints(const ClusterEndpoints&) = delete;
  ClusterEndpoints& operator=(const ClusterEndpoints&) = delete;

  [[nodiscard]] bool ready() const override;
  [[nodiscard]] node::ClusterFenceView Fence() const override;
  [[nodiscard]] node::ClusterView Describe() const override;
  [[nodiscard]] std::string HttpAddressOf(std::string_view id) const override;
  [[nodiscard]] node::KeyPlacementView Place(std::string_view key) const override;
  [[nodiscard]] std::vector<node::RingArcView> RingArcs() const override;
  [[nodiscard]] node::HotKeysView HotKeys(size_t max) const override;
  void Leave() override;
  void AppendMetrics(std::string* out) const override;

  // Adds replication's figures to /v1/cluster and /metrics. Call before serving; both must outlive this.
  void SetReplication(const replication::Replicator* replicator, const replication::HandoffManager* handoff,
                      const ReplicationLink* link) {
    replicator_ = replicator;
    handoff_ = handoff;
    link_ = link;
  }
  // Adds the quota grants' figures to /metrics (zeros while null: --grants off). Call before serving;
  // `grants` must outlive this.
  void SetGrants(const GrantDriver* grants) { grants_ = grants; }

 private:
  Cluster& cluster_;
  const Forwarder& forwarder_;
  const ClusterForwardHost& host_;
  const std::function<void()> on_left_;
  const replication::Replicator* replicator_ = nullptr;
  const replication::HandoffManager* handoff_ = nullptr;
  const ReplicationLink* link_ = nullptr;
  const GrantDriver* grants_ = nullptr;
};

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_CLUSTER_CLUSTER_ENDPOINTS_H_
