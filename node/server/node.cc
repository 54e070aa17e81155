#include "node/server/node.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "node/api/api_handler.h"
#include "node/cluster/cluster_endpoints.h"
#include "node/cluster/replication_link.h"
#include "node/envoy/rls_config.h"
#include "node/grants/grant_rows.h"
#include "node/gubernator/gubernator_handlers.h"
#include "node/metrics/metrics.h"
#include "node/server/grpc_server.h"
#include "node/server/http_server.h"
#include "node/service/check_service.h"
#include "node/service/forwarded.h"
#include "node/service/policies.h"
#include "replication/asio_executor.h"
#include "storage/open.h"

namespace ringlimit::node {

namespace {

using SteadyClock = std::chrono::steady_clock;

// "<host name>-<http port>": unique across hosts (their names differ) and across the nodes of one host
// (their ports do), and stable across restarts. The host name is cut to fit the id's 64 bytes and every
// byte outside [A-Za-z0-9._-] becomes '-'.
std::string DefaultNodeId(uint16_t http_port) {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') std::snprintf(name, sizeof(name), "n");
  const std::string port = "-" + std::to_string(http_port);
  std::string id(name, std::min<size_t>(std::strlen(name), 64 - port.size()));
  for (char& c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '-';
  }
  return id + port;
}

unsigned ThreadCount(unsigned requested) {
  if (requested > 0) return requested;
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

// Declared in dependency order: members are destroyed bottom-up, so the server and its threads go
// before the handler, the handler before the service, and the service before what it refers to.
struct Node::Parts {
  // The HTTP server's options: options.http, single_thread when one thread runs the io_context.
  static ServerOptions HttpOptions(const NodeOptions& options) {
    ServerOptions http = options.http;
    http.single_thread = ThreadCount(options.threads) == 1;
    return http;
  }

  Parts(const NodeOptions& options, std::unique_ptr<storage::Store> store_in)
      : store(std::move(store_in)),
        policies(options.policies_path),
        rls_config(options.rls_config_path),
        metrics(options.max_metric_names),
        service(*store, SystemClock(), policies, metrics, options.api),
        handler(service),
        io(static_cast<int>(ThreadCount(options.threads))),
        server(io, HttpOptions(options), handler,
               [this](unsigned status, std::chrono::nanoseconds latency, bool from_transport) {
                 if (from_transport) {
                   metrics.CountTransportError(status);
                 } else {
                   metrics.ObserveLatency(latency);
                 }
               }) {
    // The protocol adapters that share the HTTP port: Gubernator's JSON gateway.
    for (HttpRoute& route : GatewayRoutes(service)) handler.AddRoute(std::move(route));
  }

  std::unique_ptr<storage::Store> store;
  Policies policies;
  rls::RlsConfigHolder rls_config;
  Metrics metrics;
  CheckService service;
  ApiHandler handler;
  boost::asio::io_context io;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
  HttpServer server;
  // The cluster, built once the HTTP port is known (the default node id names it).
  std::unique_ptr<cluster::Cluster> cluster;
  std::unique_ptr<cluster::ReplicationLink> link;
  // The strand replication and handoff run on (one for both: their events are ordered).
  std::unique_ptr<replication::AsioExecutor> executor;
  std::unique_ptr<replication::Replicator> replicator;
  std::unique_ptr<replication::HandoffManager> handoff;
  std::unique_ptr<cluster::ClusterForwardHost> forward_host;  // the forwarder's clocks and transport
  std::unique_ptr<cluster::Forwarder> forwarder;
  // Quota grants (--grants on): the owner's row operations, the driver and its tick (every kGrantTick).
  std::unique_ptr<cluster::StoreGrantRows> grant_rows;
  std::unique_ptr<cluster::GrantDriver> grants;
  std::unique_ptr<boost::asio::steady_timer> grant_timer;
  std::unique_ptr<cluster::ClusterEndpoints> endpoints;
  // Built last, stopped first among the servers; destroyed before the handler it calls into.
  std::unique_ptr<GrpcServer> grpc;
  std::vector<std::thread> threads;
};

Node::Node(NodeOptions options) : options_(std::move(options)) {}

Node::~Node() { Stop(); }

Status Node::Start() {
  if (started_) return Status::AlreadyExists("the node is already started");
  Result<std::unique_ptr<storage::Store>> opened = storage::OpenStateStore(options_.storage);
  if (!opened.ok()) return opened.status().WithContext("storage");
  parts_ = std::make_unique<Parts>(options_, std::move(opened).value());
  // Each step's failure names the step; the parts built so far are dropped (nothing runs yet).
  Status status = Reload(ConfigFile::kPolicies).WithContext("policies " + options_.policies_path);
  if (status.ok()) status = Reload(ConfigFile::kRlsConfig).WithContext("rls config");
  if (status.ok()) {
    status = parts_->server.Start().WithContext("cannot listen on " + options_.http.address + ":" +
                                                std::to_string(options_.http.port));
  }
  if (status.ok()) {
    node_id_ = options_.node_id.empty() ? DefaultNodeId(http_port()) : options_.node_id;
    status = StartCluster();
  }
  if (!status.ok()) {
    parts_.reset();
    return status;
  }
  parts_->service.SetNodeMetrics([server = &parts_->server, store = parts_->store.get(),
                                  limits = options_.storage](std::string* out) {
    AppendStorageMetrics(out, store->Durability());
    AppendFamilyHeader(out, "ringlimit_max_memory_bytes", "gauge",
                       "--max-memory: the most memory the states may take (0: unbounded); compare "
                       "ringlimit_state_bytes.");
    AppendSample(out, "ringlimit_max_memory_bytes", "", static_cast<int64_t>(limits.max_bytes));
    AppendFamilyHeader(out, "ringlimit_max_keys", "gauge",
                       "--max-keys: the most states held in memory (0: unbounded); compare ringlimit_keys.");
    AppendSample(out, "ringlimit_max_keys", "", static_cast<int64_t>(limits.max_keys));
    AppendFamilyHeader(out, "ringlimit_http_connections", "gauge", "Open HTTP connections.");
    AppendSample(out, "ringlimit_http_connections", "", static_cast<int64_t>(server->connections()));
    AppendFamilyHeader(out, "ringlimit_http_rejected_connections_total", "counter",
                       "Connections refused because --max-connections were open.");
    AppendSample(out, "ringlimit_http_rejected_connections_total", "",
                 static_cast<int64_t>(server->rejected_connections()));
    AppendFamilyHeader(out, "ringlimit_http_reclaimed_connections_total", "counter",
                       "Idle connections closed to make room for a new one at --max-connections.");
    AppendSample(out, "ringlimit_http_reclaimed_connections_total", "",
                 static_cast<int64_t>(server->reclaimed_connections()));
  });
  parts_->work.emplace(parts_->io.get_executor());
  const unsigned threads = ThreadCount(options_.threads);
  for (unsigned i = 0; i < threads; ++i) parts_->threads.emplace_back([this] { parts_->io.run(); });
  started_ = true;
  if (options_.grpc) {
    // After the threads: a failure is undone by the ordinary Stop.
    parts_->grpc =
        std::make_unique<GrpcServer>(*options_.grpc, parts_->service, parts_->rls_config, parts_->metrics);
    if (Status grpc = parts_->grpc->Start(); !grpc.ok()) {
      parts_->grpc.reset();
      Stop();
      parts_.reset();
      return grpc;
    }
  }
  parts_->service.SetReady(true);
  spdlog::info("node {} listening on {}://{}:{} ({} threads, max_keys {}, max_memory {} MiB, data_dir {})",
               node_id_, options_.http.tls_cert_file.empty() ? "http" : "https", options_.http.address,
               http_port(), threads, options_.storage.max_keys, options_.storage.max_bytes >> 20,
               options_.storage.data_dir.empty() ? "none (memory-only)" : options_.storage.data_dir);
  return Status::OK();
}

void Node::Stop() {
  if (!started_) return;
  started_ = false;
  parts_->service.SetReady(false);
  parts_->server.StopAccepting();
  parts_->server.Drain();
  if (parts_->grpc) parts_->grpc->Stop();  // waits for its calls in flight (their forwards still run)
  const auto deadline = SteadyClock::now() + options_.drain_timeout;
  while (parts_->server.connections() > 0 && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (const size_t left = parts_->server.connections(); left > 0) {
    spdlog::warn("stop: {} connections still open after {} ms; closing them", left,
                 options_.drain_timeout.count());
  }
  // Forwarded checks of the drained requests are answered by now. Ship the last changes to the replicas
  // while the transport still runs; then the cluster stops without a goodbye (a graceful leave is
  // POST /v1/cluster/leave).
  if (parts_->grant_timer) parts_->grant_timer->cancel();
  parts_->handoff->Stop();
  parts_->replicator->Stop();
  parts_->cluster->Stop();
  parts_->work.reset();
  parts_->io.stop();
  for (auto& thread : parts_->threads) thread.join();
  parts_->threads.clear();
  parts_->store->SetObserver(nullptr);
  parts_->store->Close();  // nothing calls into it any more: write what is dirty
  spdlog::info("node stopped");
}

Status Node::ReloadPolicies() {
  if (!parts_) return Status::Unavailable("the node is not started");
  return Reload(ConfigFile::kPolicies);
}

Status Node::ReloadRlsConfig() {
  if (!parts_) return Status::Unavailable("the node is not started");
  return Reload(ConfigFile::kRlsConfig);
}

Status Node::Reload(ConfigFile file) {
  const bool policies = file == ConfigFile::kPolicies;
  const std::string& path = policies ? options_.policies_path : options_.rls_config_path;
  Status status = policies ? parts_->policies.Reload() : parts_->rls_config.Reload();
  if (!path.empty()) {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    parts_->metrics.CountConfigReload(file, status.ok(),
                                      std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  }
  return status;
}

uint16_t Node::grpc_port() const { return parts_ && parts_->grpc ? parts_->grpc->port() : 0; }

uint16_t Node::http_port() const { return parts_ ? parts_->server.port() : 0; }

uint16_t Node::peer_port() const { return parts_ && parts_->cluster ? parts_->cluster->peer_port() : 0; }

namespace {
// How often the grant driver's timer runs: releases of expired and idle slices, the owner's reclaims and the
// pause fence happen within this of their instant.
constexpr std::chrono::milliseconds kGrantTick{50};
}  // namespace

void Node::StartGrants() {
  Parts& p = *parts_;
  p.grant_rows = std::make_unique<cluster::StoreGrantRows>(*p.store, p.service.contributor, p.service.hlc);
  cluster::Forwarder& forwarder = *p.forwarder;
  p.grants = std::make_unique<cluster::GrantDriver>(
      *p.forward_host, options_.grants, *p.grant_rows,
      [&forwarder](std::string_view key, std::function<void(bool)> done) {
        const std::string_view keys[1] = {key};
        forwarder.Decided(keys, std::move(done));
      });
  p.forwarder->SetGrants(p.grants.get());
  p.forward_host->RegisterGrantHandlers(*p.grants);
  p.grant_timer = std::make_unique<boost::asio::steady_timer>(p.io);
  ArmGrantTick();
}

void Node::ArmGrantTick() {
  Parts& p = *parts_;
  p.grant_timer->expires_after(kGrantTick);
  p.grant_timer->async_wait([this](const boost::system::error_code& ec) {
    if (ec == boost::asio::error::operation_aborted) return;
    parts_->grants->Tick();
    ArmGrantTick();
  });
}

Status Node::StartCluster() {
  Parts& p = *parts_;
  cluster::ClusterOptions options = options_.cluster;
  options.node_id = node_id_;
  options.single_thread = ThreadCount(options_.threads) == 1;
  std::string http_host = options_.advertise_http;
  if (http_host.empty()) {
    http_host = options_.http.address;
    if (http_host == "0.0.0.0" || http_host == "::") {
      // The host part of the advertised peer address ("10.0.0.5:7101", "[fd00::5]:7101", "10.0.0.5").
      const std::string peer = options.advertise_peer.empty() ? options.peer_host : options.advertise_peer;
      if (peer.starts_with('[')) {
        http_host = peer.substr(0, peer.find(']') + 1);
      } else if (std::count(peer.begin(), peer.end(), ':') == 1) {
        http_host = peer.substr(0, peer.find(':'));
      } else {
        http_host = peer;
      }
    }
  }
  options.http_address = cluster::AdvertisedAddress(http_host, http_port());
  options.takeover_after = (1 + options_.forward.timeout_retries) * options_.forward.timeout;
  const uint32_t replicas = options.replicas;
  p.cluster = std::make_unique<cluster::Cluster>(p.io, std::move(options));

  // Replication: the store reports every change to the replicator, which ships it to the key's
  // successors; the handoff manager follows the ring.
  replication::ReplicatorOptions replication = options_.replication;
  replication.replicas = replicas;
  // Closed: an admission is answered only once a majority of the key's holders has it, and a node taking a
  // key over reads a majority of its earlier holders (issue 35; docs/architecture.md "Majority
  // acknowledgement").
  const bool closed = options_.forward.failure_mode == cluster::FailureMode::kClosed;
  replication.ack_majority = closed;
  replication.contributor = p.service.contributor;
  if (Status status = replication::Validate(replication); !status.ok())
    return status.WithContext("replication");
  replication::HandoffOptions handoff = options_.handoff;
  handoff.replicas = replicas;
  handoff.majority_read = closed;
  if (Status status = replication::Validate(handoff); !status.ok()) return status.WithContext("handoff");
  if (Status status = cluster::Validate(options_.forward); !status.ok()) return status;
  p.link = std::make_unique<cluster::ReplicationLink>(*p.cluster);
  p.executor = std::make_unique<replication::AsioExecutor>(p.io);
  p.replicator = std::make_unique<replication::Replicator>(*p.store, *p.link, *p.executor, replication);
  p.handoff = std::make_unique<replication::HandoffManager>(*p.store, *p.link, *p.replicator, *p.executor,
                                                            handoff, &p.cluster->routing());
  p.store->SetObserver(p.replicator.get());
  p.replicator->Start();
  p.handoff->Start();
  cluster::RegisterReplicationHandlers(*p.cluster, *p.link, *p.replicator, *p.handoff);
  replication::HandoffManager& manager = *p.handoff;
  replication::Replicator& replicator = *p.replicator;
  // The handoff publishes each ring into the routing table itself, with the overrides of the change. A
  // node alone on its ring marks nothing for replication (see Replicator::SetPeers).
  p.cluster->SetRingListener([&manager, &replicator](std::shared_ptr<const ring::RingView> before,
                                                     std::shared_ptr<const ring::RingView> after) {
    if (after != nullptr) replicator.SetPeers(after->members().size() > 1);
    manager.OnRingChanged(std::move(before), std::move(after));
  });
  // A member that became unreachable without a ring change yet releases what waits for it.
  p.cluster->SetMembersListener([&manager] { manager.OnMembersChanged(); });
  // A graceful leave: the slices of hot keys this node holds go back to their owners (--grants on), then
  // its ranges are handed over.
  p.cluster->SetLeavePreparer([&manager, &p](std::function<void()> ready) {
    auto hand_over = [&manager, ready = std::move(ready)] {
      manager.Leave([ready](bool ok) {
        if (!ok) spdlog::warn("leave: not every range was handed over; leaving anyway");
        ready();
      });
    };
    if (p.grants != nullptr) {
      p.grants->Leave(std::move(hand_over));
    } else {
      hand_over();
    }
  });

  const CheckService& service = p.service;
  const std::string& self = node_id_;
  p.forward_host = std::make_unique<cluster::ClusterForwardHost>(*p.cluster);
  p.forwarder = std::make_unique<cluster::Forwarder>(
      *p.forward_host, options_.forward,
      [&service, &self](const peer::ForwardCheckRequest& request, std::vector<ForwardedOutcome>& outcomes) {
        DecideForwarded(service, request, self, outcomes);
      },
      p.replicator.get(), p.handoff.get());
  p.forward_host->RegisterHandler(*p.forwarder);
  if (options_.grants.enabled) StartGrants();
  std::function<void()> on_left = options_.on_left ? options_.on_left : [] {};
  p.endpoints = std::make_unique<cluster::ClusterEndpoints>(*p.cluster, *p.forwarder, *p.forward_host,
                                                            std::move(on_left));
  p.endpoints->SetReplication(p.replicator.get(), p.handoff.get(), p.link.get());
  p.endpoints->SetGrants(p.grants.get());
  // Before the threads run: no request is handled yet.
  p.service.SetCluster(p.forwarder.get(), p.endpoints.get());
  if (Status started = p.cluster->Start(); !started.ok()) {
    // Nothing has run yet (the io threads start after this), so the replicator and the handoff have
    // nothing to ship or wait for: dropped at once. Stopping them would wait for an executor that never
    // runs (seconds before a busy peer port is reported).
    p.handoff->Abandon();
    p.replicator->Abandon();
    return started;
  }
  return Status::OK();
}

}  // namespace ringlimit::node
