// ClusterForwardHost: the ForwardHost (forward_host.h) of a node -- its Cluster (routing table, pause
// fence, clock and quorum judgements), the steady and system clocks, std::random_device and the peer
// client -- plus the METHOD_FORWARD_CHECK handler on the Cluster's peer server and the histogram of
// forward round trips (/metrics).
//
//   ClusterForwardHost host(cluster);
//   Forwarder forwarder(host, options, decider, replicator, handoff);
//   host.RegisterHandler(forwarder);  // before Cluster::Start
//
// Thread safety: every method is safe for concurrent use.
// Lifetime: the Cluster must outlive the host; the host must outlive the Forwarder and every pending call.
#ifndef RINGLIMIT_NODE_CLUSTER_CLUSTER_FORWARD_HOST_H_
#define RINGLIMIT_NODE_CLUSTER_CLUSTER_FORWARD_HOST_H_

#include "node/forward/forward_host.h"
#include "node/metrics/metrics.h"

namespace ringlimit::cluster {

class Cluster;
class Forwarder;
class GrantDriver;

class ClusterForwardHost final : public ForwardHost {
 public:
  explicit ClusterForwardHost(Cluster& cluster) : cluster_(cluster) {}

  ClusterForwardHost(const ClusterForwardHost&) = delete;
  ClusterForwardHost& operator=(const ClusterForwardHost&) = delete;

  // Serves METHOD_FORWARD_CHECK on the cluster's peer server with `forwarder`. REQUIRES: before
  // Cluster::Start; `forwarder` outlives the server.
  void RegisterHandler(Forwarder& forwarder);
  // Serves the quota-grant methods (METHOD_GRANT_REQUEST, _RELEASE, _RECALL) with `grants`. REQUIRES: as
  // RegisterHandler.
  void RegisterGrantHandlers(GrantDriver& grants);

  [[nodiscard]] const std::string& self_id() const override;
  [[nodiscard]] uint32_t replicas() const override;
  [[nodiscard]] const replication::RoutingTable& routing() const override;
  [[nodiscard]] bool Paused() const override;
  [[nodiscard]] Status ClockRefusal() const override;
  [[nodiscard]] bool ClockSkewed() const override;
  [[nodiscard]] Status MinorityRefusal() const override;
  [[nodiscard]] std::optional<ring::OffsetEstimate> ClockOffsetOf(std::string_view member) const override;
  [[nodiscard]] int64_t WallNowNs() const override;
  [[nodiscard]] std::chrono::nanoseconds SteadyNow() const override;
  [[nodiscard]] uint64_t Random() override;
  void Call(const std::string& address, peer::Method method, std::string payload,
            std::chrono::milliseconds timeout, CallDone done) override;
  void After(std::chrono::nanoseconds delay, std::function<void()> fn) override;
  void ObserveRoundTrip(std::chrono::nanoseconds round_trip) override { round_trips_.Observe(round_trip); }

  // Round trips of forwarded checks answered with a decision: from sending to the answer.
  [[nodiscard]] const node::DurationHistogram& round_trips() const { return round_trips_; }

 private:
  Cluster& cluster_;
  node::DurationHistogram round_trips_;  // thread-safe
};

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_CLUSTER_CLUSTER_FORWARD_HOST_H_
