// Envoy's rate limit service (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) on the
// decision path: each descriptor of a request becomes one check, routed to its key's owner like an HTTP
// check. No transport here (node/server/grpc_server.cc carries it).
#ifndef RINGLIMIT_NODE_ENVOY_RLS_HANDLERS_H_
#define RINGLIMIT_NODE_ENVOY_RLS_HANDLERS_H_

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "node/service/api_error.h"

namespace envoy::service::ratelimit::v3 {
class RateLimitRequest;
class RateLimitResponse;
}  // namespace envoy::service::ratelimit::v3

namespace ringlimit::node {

namespace rls {
class RlsConfig;
}

struct CheckService;
class CheckRouter;

// The rate limit key of one descriptor: "rls:" + domain, then "|key=value" per entry, with '\', '|' and
// '=' escaped by a '\' so that distinct descriptors never share a key.
[[nodiscard]] std::string RlsKey(std::string_view domain,
                                 std::span<const std::pair<std::string_view, std::string_view>> entries);

using RlsDone = std::function<void(std::optional<ApiError> error)>;

// Decides `request` against `config` and fills `response`. `router` null: every key is decided here.
// `done` is called exactly once: with nullopt when `response` is complete, or with an error
// (kInvalidField: a malformed request; kNotReady / kUnavailable: the node cannot decide
// now). It may run before HandleShouldRateLimit returns or later on another thread; `request`,
// `response` and `config` must stay alive until then and `done` must not block.
void HandleShouldRateLimit(const CheckService& context, CheckRouter* router,
                           std::shared_ptr<const rls::RlsConfig> config,
                           const envoy::service::ratelimit::v3::RateLimitRequest& request,
                           envoy::service::ratelimit::v3::RateLimitResponse* response, RlsDone done);

// Envoy's ShouldRateLimit as the gRPC door calls it: HandleShouldRateLimit routed through the service's
// router (once the node has joined a cluster); an unexpected exception answers kInternal.
void ShouldRateLimit(const CheckService& service, std::shared_ptr<const rls::RlsConfig> config,
                     const envoy::service::ratelimit::v3::RateLimitRequest& request,
                     envoy::service::ratelimit::v3::RateLimitResponse* response, RlsDone done);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_ENVOY_RLS_HANDLERS_H_
