// ApiHandler: the HTTP API of a ringlimit node (docs/api.md) as a RequestHandler -- routing, admin
// authentication and the endpoint families, with no sockets. Construct it with its dependencies;
// there is no global state.
//
// Thread safety: Handle, SetReady and ready may be called concurrently from any number of threads.
// Lifetime: store, policies and metrics (and the router and cluster given to SetCluster) must outlive
// the ApiHandler. Handle calls `respond` synchronously, before returning, unless a CheckRouter is set and
// a check names a key another node owns: then `respond` runs when the owner has answered, on the thread
// that received the answer.
#ifndef RINGLIMIT_NODE_API_API_HANDLER_H_
#define RINGLIMIT_NODE_API_API_HANDLER_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "limiter/limiter.h"
#include "limiter/merge.h"
#include "node/api/gubernator_handlers.h"
#include "node/api/handler.h"
#include "node/api/rls_handlers.h"
#include "peer.pb.h"

namespace ringlimit::storage {
class StateStore;
}

namespace ringlimit::node {

class CheckRouter;
class ClusterInfo;
class Metrics;
class Policies;
struct ApiContext;

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

class ApiHandler final : public RequestHandler {
 public:
  ApiHandler(storage::StateStore& store, Clock clock, Policies& policies, Metrics& metrics,
             ApiOptions options = {});
  ~ApiHandler() override;
  ApiHandler(const ApiHandler&) = delete;
  ApiHandler& operator=(const ApiHandler&) = delete;

  void Handle(HttpRequest&& request, Respond respond) override;

  // The same, returning the response (tests, benchmarks). Decides every check locally (no forwarding).
  [[nodiscard]] HttpResponse HandleNow(const HttpRequest& request);

  // GET /readyz answers 200 once the node has set ready (after start-up) and 503 after it clears it
  // (draining). Default: not ready.
  void SetReady(bool ready);
  [[nodiscard]] bool ready() const;

  // Envoy's ShouldRateLimit (node/api/rls_handlers.h): decides `request` against `config`, routed
  // through the cluster once SetCluster has run, and calls `done` exactly once (see
  // HandleShouldRateLimit for when and where). An unexpected exception answers kInternal.
  void ShouldRateLimit(const envoy::service::ratelimit::v3::RateLimitRequest& request,
                       std::shared_ptr<const rls::RlsConfig> config,
                       envoy::service::ratelimit::v3::RateLimitResponse* response, RlsDone done);

  // Gubernator's V1 GetRateLimits (node/api/gubernator_handlers.h), routed through the cluster once
  // SetCluster has run; `done` is called exactly once (see DecideGetRateLimits). An unexpected exception
  // answers kInternal.
  void GetRateLimits(const pb::gubernator::GetRateLimitsReq& request,
                     pb::gubernator::GetRateLimitsResp* response, GubernatorDone done);

  // Gubernator's V1 HealthCheck.
  void HealthCheck(pb::gubernator::HealthCheckResp* response) const;

  // Joins the handler to a cluster: checks of keys other nodes own are forwarded through `router`,
  // /v1/cluster, /v1/ring and /v1/cluster/leave are served from `cluster`, and /readyz also requires
  // cluster->ready(). REQUIRES: called once, before the first Handle. Either may be null.
  void SetCluster(CheckRouter* router, ClusterInfo* cluster);
  // What GET /metrics appends for the node's parts beyond the API (transport, storage). Call before
  // serving.
  void SetNodeMetrics(std::function<void(std::string*)> append);

  // The owner's side of a forwarded batch (peer.ForwardCheckRequest, serialized): decides every check
  // here and returns the serialized peer.ForwardCheckResponse. Errors: Corruption when `payload` does
  // not parse (nothing is decided).
  [[nodiscard]] Result<std::string> DecideForwarded(std::string_view payload, std::string_view self_id);
  // The same, already parsed.
  [[nodiscard]] peer::ForwardCheckResponse DecideForwarded(const peer::ForwardCheckRequest& request,
                                                           std::string_view self_id);
  // The contributor id this node's decisions are recorded under in merged states.
  [[nodiscard]] limiter::ContributorId contributor() const;
  // The hybrid clock that stamps them (thread-safe): quota grants' settles are stamped with it too.
  [[nodiscard]] limiter::HybridClock& hlc() const;
  // The same into `response` (empty).
  void DecideForwarded(const peer::ForwardCheckRequest& request, std::string_view self_id,
                       peer::ForwardCheckResponse* response);

 private:
  std::unique_ptr<ApiContext> context_;  // everything the endpoint families share
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_API_HANDLER_H_
