// What replication and handoff look like from outside: their Prometheus metrics and the handoffs in
// progress as GET /v1/cluster shows them.
#ifndef RINGLIMIT_NODE_CLUSTER_REPLICATION_STATUS_H_
#define RINGLIMIT_NODE_CLUSTER_REPLICATION_STATUS_H_

#include <string>
#include <vector>

#include "node/service/cluster_hooks.h"

namespace ringlimit::replication {
class HandoffManager;
class Replicator;
}  // namespace ringlimit::replication

namespace ringlimit::cluster {

class ReplicationLink;

// Appends the ringlimit_replication_* and ringlimit_handoff* families (docs/operations.md) to `out`.
// `link` (may be null) adds the relayed batches.
void AppendReplicationMetrics(const replication::Replicator& replicator,
                              const replication::HandoffManager& handoff, const ReplicationLink* link,
                              std::string* out);

// The handoffs in progress, for GET /v1/cluster.
[[nodiscard]] std::vector<node::ClusterHandoffView> DescribeHandoffs(
    const replication::HandoffManager& handoff);

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_CLUSTER_REPLICATION_STATUS_H_
