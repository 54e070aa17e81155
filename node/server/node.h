// Node: one ringlimit node, wired and runnable in-process (ringlimitd's main is a thin shell around
// it; tests start Nodes directly). It owns, and builds in this order: the state store (memory-only
// or RocksDB write-back, see storage/open.h), the policies, the metrics, the API handler, the
// io_context with its threads, the HTTP server, and the cluster (node/cluster/: membership over the peer
// transport, the ring, forwarding of checks to their owner). Stop closes the store (writes dirty states).
// A node started without seeds is a cluster of one: every key is its own, nothing is forwarded.
//
// Lifecycle: construct -> Start -> (ReloadPolicies)* -> Stop -> destroy. Stop is graceful: the node
// reports not-ready, stops accepting, lets every connection finish the requests it already read,
// then stops its threads. The destructor calls Stop.
//
// Thread safety: Start and Stop must not race with each other; ReloadPolicies and the accessors
// may be called from any thread once Start has returned successfully.
#ifndef RINGLIMIT_NODE_SERVER_NODE_H_
#define RINGLIMIT_NODE_SERVER_NODE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "node/api/api_handler.h"
#include "node/cluster/cluster.h"
#include "node/cluster/cluster_forward_host.h"
#include "node/forward/forwarder.h"
#include "node/grants/grant_driver.h"
#include "node/metrics/metrics.h"
#include "node/server/grpc_server.h"
#include "node/server/http_server.h"
#include "replication/handoff.h"
#include "replication/replicator.h"
#include "storage/open.h"

namespace ringlimit::node {

struct NodeOptions {
  // --- Affects behaviour ---

  // The HTTP address announced to the others and shown in /v1/cluster (--advertise-http): "host" (with the
  // bound port) or "host:port". Default: empty -- the listen host, or when that is a wildcard (0.0.0.0,
  // ::) the host of the advertised peer address.
  std::string advertise_http;

  // This member's id in the cluster and in logs (1..64 bytes of [A-Za-z0-9._-]).
  // Default: empty ("<host name>-<http port>").
  std::string node_id;

  // The cluster: peer listen address (cluster.peer_host/peer_port; port 0 = ephemeral, see peer_port()),
  // seeds to join through, vnodes, replicas, cluster secret and SWIM timings. cluster.node_id and
  // cluster.http_address are filled by Start. Defaults: see cluster::ClusterOptions (127.0.0.1:0, alone).
  cluster::ClusterOptions cluster;

  // Forwarding of checks to their owner (timeout per attempt, attempts). Defaults: see ForwarderOptions.
  cluster::ForwarderOptions forward;

  // Quota grants of hot keys (--grants, --grant-threshold, --grant-term-ms): entry nodes decide a hot key
  // from slices of its budget its owner lent them. Default: off (see cluster::GrantDriverOptions).
  cluster::GrantDriverOptions grants;

  // Replication of every decided state to the key's successors: mode (--replication), interval
  // (--replication-interval-ms), timeouts. `replicas` is ignored: cluster.replicas (--replicas) is used.
  // Defaults: see replication::ReplicatorOptions (async, every 2 ms).
  replication::ReplicatorOptions replication;

  // Handoff of ranges on ring changes, re-replication, dropping states no longer owned or replicated.
  // `replicas` is ignored: cluster.replicas is used. Defaults: see replication::HandoffOptions.
  replication::HandoffOptions handoff;

  // Called once, on an io_context thread, when a graceful leave (POST /v1/cluster/leave) is complete:
  // the process should then Stop the node and exit. It must not call Stop itself (that would join the
  // calling thread). Default: nothing.
  std::function<void()> on_left;

  // The HTTP server: listen address and port (port 0 = ephemeral, see http_port()), connection cap,
  // timeouts, body and header limits. Defaults: see ServerOptions (127.0.0.1:7001, ...).
  ServerOptions http;

  // The gRPC server (Envoy's rate limit service): nullopt = no gRPC port. Default: off.
  std::optional<GrpcServerOptions> grpc;

  // envoyproxy/ratelimit's YAML configuration (node/envoy/rls_config.h), read at Start and by
  // ReloadRlsConfig. Default: empty (no domains: every ShouldRateLimit descriptor is answered OK).
  std::string rls_config_path;

  // Named policies file (JSON, format in docs/api.md), read at Start and by ReloadPolicies.
  // Default: empty (no named policies; inline limits only).
  std::string policies_path;

  // The storage tier: --data-dir (empty = memory-only), --flush-interval-ms, --max-keys (most states
  // in memory; least recently used are evicted beyond it). Defaults: see storage::StorageOptions,
  // except max_keys, which defaults to 2,000,000 here (about 200 MB) rather than unbounded.
  storage::StorageOptions storage = [] {
    storage::StorageOptions options;
    options.max_keys = 2'000'000;
    return options;
  }();

  // The API: admin token, key header, headroom TTL, request bounds. Defaults: see ApiOptions.
  ApiOptions api;

  // Inline limit names, and RLS descriptor rules, with decision series of their own in /metrics; later
  // ones count as "other" (--max-metric-names). Default: 100.
  size_t max_metric_names = Metrics::kDefaultMaxMetricNames;

  // How long Stop waits for connections to finish their requests before closing them. Default: 10000 ms.
  std::chrono::milliseconds drain_timeout{10'000};

  // --- Affects performance ---

  // Threads running the HTTP server (and the handlers, which answer inline). 0 = hardware threads.
  // Default: 0.
  unsigned threads = 0;
};

class Node {
 public:
  explicit Node(NodeOptions options);
  ~Node();

  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Loads the policies, binds the HTTP port, starts the threads and reports ready. On failure the node
  // is left stopped and the error names the step ("storage: ...", "policies PATH: ...", "rls config:
  // ...", "cannot listen on HOST:PORT: ...", "replication: ...", "handoff: ..."), with the step's kind:
  // AlreadyExists (started before), InvalidArgument (a bad file or option), IOError (a port, a file).
  [[nodiscard]] Status Start();

  // Graceful stop (see top). Idempotent.
  void Stop();

  // Rereads the policies file; on failure the current policies stay in force and the error is
  // returned. Stored states are kept either way.
  // Errors: Unavailable (not started), or Policies::Reload's.
  [[nodiscard]] Status ReloadPolicies();

  // Rereads the --rls-config file; on failure the current configuration stays in force and the error
  // is returned. Errors: Unavailable (not started), or RlsConfigHolder::Reload's.
  [[nodiscard]] Status ReloadRlsConfig();

  // The bound gRPC port (the ephemeral one if grpc->port was 0). 0 before Start or without gRPC.
  [[nodiscard]] uint16_t grpc_port() const;

  // The bound HTTP port (the ephemeral one if http_port was 0). 0 before Start.
  [[nodiscard]] uint16_t http_port() const;

  // The bound peer port (the ephemeral one if cluster.peer_port was 0). 0 before Start.
  [[nodiscard]] uint16_t peer_port() const;

  // This member's id (options().node_id, or its default once started).
  [[nodiscard]] const std::string& node_id() const { return node_id_; }

  [[nodiscard]] const NodeOptions& options() const { return options_; }

 private:
  struct Parts;

  // Builds and starts the cluster parts and joins them to the API handler. Errors: InvalidArgument
  // (replication, handoff or forwarding options), IOError (the cluster cannot start: peer port, TLS).
  [[nodiscard]] Status StartCluster();
  // Part of StartCluster with --grants on: the grant driver on the forwarder's host, its peer methods and
  // its periodic tick.
  void StartGrants();
  void ArmGrantTick();
  // Rereads `file` and counts the outcome in the metrics (when the node has such a file).
  [[nodiscard]] Status Reload(ConfigFile file);

  const NodeOptions options_;
  std::unique_ptr<Parts> parts_;
  std::string node_id_;
  bool started_ = false;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVER_NODE_H_
