// CheckService: the node's check service -- what every protocol adapter (node/api's HTTP API, node/envoy,
// node/gubernator, the peer's forwarded checks in node/forward) decides checks through: the store, the
// policies, the metrics, the headroom signal, this node's contributor id and hybrid clock, and, once the
// node joins a cluster, the router that forwards checks of keys other nodes own. It knows no protocol: the
// adapters turn their requests into checks (check_engine.h: CheckBatch) and the answers back. Its
// operations are free functions over it (check_engine.h, forwarded.h); docs/architecture.md has the picture.
//
// Thread safety: the references point at thread-safe components; `options`, `clock`, `contributor` are
// constant after construction, `router`, `cluster` and `node_metrics` once set before serving (SetCluster,
// SetNodeMetrics); `ready` and `hlc` are atomic.
// Lifetime: store, policies and metrics (and the router and cluster given to SetCluster) must outlive it.
#ifndef RINGLIMIT_NODE_SERVICE_CHECK_SERVICE_H_
#define RINGLIMIT_NODE_SERVICE_CHECK_SERVICE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

#include "limiter/hlc.h"
#include "limiter/limiter.h"
#include "limiter/merge.h"
#include "node/service/cluster_hooks.h"
#include "node/service/headroom.h"

namespace ringlimit::storage {
class StateStore;
}

namespace ringlimit::node {

class Metrics;
class Policies;

// The current time as Unix-epoch nanoseconds. Injected so tests control time. Must be thread-safe.
using Clock = std::function<limiter::TimeNs()>;

// The system clock (std::chrono::system_clock) as a Clock.
[[nodiscard]] Clock SystemClock();

struct ApiOptions {
  // --- Affects behaviour ---

  // When non-empty, DELETE /v1/keys/..., PUT /v1/headroom (and the cluster endpoints to come) require
  // "Authorization: Bearer <admin_token>", else 401. Default: empty (no authentication).
  std::string admin_token;

  // Request header GET /v1/check reads the entity key from when the query has no `key`.
  // Default: "X-RateLimit-Key". Empty disables it.
  std::string key_header = "X-RateLimit-Key";

  // GET /v1/auth (for nginx auth_request and other forward-auth callers): the status of a denial or a bad
  // request, 403 or 401 (a proxy understands only 2xx, 401 and 403). Default: 403.
  unsigned auth_deny_status = 403;
  // GET /v1/auth without a key (no `key` in the query, no key header): true answers 200 (let it through),
  // false answers auth_deny_status. Default: false.
  bool auth_allow_without_key = false;

  // How long a PUT /v1/headroom signal lasts unless the request gives ttl_ms. Default: 30 s.
  std::chrono::milliseconds headroom_ttl{30'000};

  // Most checks in one POST /v1/check and requests in one POST /v1/GetRateLimits. Default: 1000.
  size_t max_checks = 1000;

  // Longest entity key, in bytes. Default: 1024. REQUIRES: >= 1.
  size_t max_key_bytes = 1024;

  // Longest inline limit name, in bytes. Default: 256.
  size_t max_name_bytes = 256;

  // Envoy's rate limit service: add the RateLimit-Policy / RateLimit headers (draft-10) and
  // X-RateLimit-Limit/-Remaining/-Reset to response_headers_to_add, for Envoy to pass on to the client
  // (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED). Default: false.
  bool rls_response_headers = false;
};

// A random contributor id: never 0 or storage::kLegacyContributor.
limiter::ContributorId DrawContributorId();

struct CheckService {
  CheckService(storage::StateStore& store_in, Clock clock_in, Policies& policies_in, Metrics& metrics_in,
               ApiOptions options_in)
      : store(store_in),
        clock(std::move(clock_in)),
        policies(policies_in),
        metrics(metrics_in),
        options(std::move(options_in)) {}
  CheckService(const CheckService&) = delete;
  CheckService& operator=(const CheckService&) = delete;

  // Joins the service to a cluster: checks of keys other nodes own are forwarded through `router`, the
  // cluster endpoints are served from `cluster`, and readiness also requires cluster->ready().
  // REQUIRES: called once, before serving. Either may be null.
  void SetCluster(CheckRouter* router_in, ClusterInfo* cluster_in) {
    router = router_in;
    cluster = cluster_in;
  }
  // What GET /metrics appends for the node's parts beyond the service (transport, storage). Call before
  // serving.
  void SetNodeMetrics(std::function<void(std::string*)> append) { node_metrics = std::move(append); }
  // Readiness (GET /readyz, gRPC health): set once the node has started, cleared when it drains.
  void SetReady(bool is_ready) { ready.store(is_ready, std::memory_order_release); }
  [[nodiscard]] bool Ready() const { return ready.load(std::memory_order_acquire); }

  storage::StateStore& store;
  const Clock clock;
  // Whom this node's charges are recorded for in a merged state (limiter/merge.h): drawn at random
  // per process, so every incarnation of a node has its own record; and the hybrid clock that stamps
  // them (stamps only need to increase per contributor; the wall clock keeps them near real time).
  const limiter::ContributorId contributor = DrawContributorId();
  mutable limiter::HybridClock hlc{0};  // thread-safe (one atomic word)
  Policies& policies;
  Metrics& metrics;
  const ApiOptions options;
  Headroom headroom;
  std::atomic<bool> ready{false};
  // Set once before serving (SetCluster); null without a cluster: every key is local.
  CheckRouter* router = nullptr;
  ClusterInfo* cluster = nullptr;
  // Set once before serving (SetNodeMetrics): appends the metrics of the node's parts beyond the service
  // (open connections, the write-back tier). Empty: none.
  std::function<void(std::string*)> node_metrics;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_CHECK_SERVICE_H_
