// The Gubernator family, one semantics behind two doors: Gubernator's gRPC service pb.gubernator.V1
// (GetRateLimits, HealthCheck; node/server/grpc_server.cc carries the transport) and its JSON gateway
// (POST /v1/GetRateLimits, GET /v1/HealthCheck, GET /v1/LiveCheck), with the messages of
// proto/gubernator/gubernator.proto, so Gubernator's clients switch by changing an address.
//
// Thread safety: stateless functions over the thread-safe CheckService.
#ifndef RINGLIMIT_NODE_GUBERNATOR_GUBERNATOR_HANDLERS_H_
#define RINGLIMIT_NODE_GUBERNATOR_GUBERNATOR_HANDLERS_H_

#include <functional>
#include <optional>
#include <vector>

#include "node/http/handler.h"
#include "node/http/route.h"
#include "node/service/api_error.h"

namespace pb::gubernator {
class GetRateLimitsReq;
class GetRateLimitsResp;
class HealthCheckResp;
}  // namespace pb::gubernator

namespace ringlimit::node {

struct CheckService;
class CheckRouter;

// The gRPC status code (grpc::StatusCode's numbers) Gubernator answers for an error of this kind (too
// many requests: OUT_OF_RANGE, as Gubernator).
[[nodiscard]] int GubernatorGrpcCode(ErrorKind kind);

// The gateway's error response: {"code": <gRPC code>, "message": ..., "details": []} with the HTTP status
// grpc-gateway gives that code.
[[nodiscard]] HttpResponse GatewayErrorResponse(const ApiError& error);

using GubernatorDone = std::function<void(std::optional<ApiError> error)>;

// Decides every item of `request` into `response` (one RateLimitResp per item, in order). `router` null:
// every key is decided here; else items of keys other nodes own are forwarded to their owner, and each
// decided item carries its deciding node in metadata["owner"]. Items are independent; the items of one
// key are decided in request order. Item problems (empty unique_key, negative hits...) go into that
// item's `error`, as Gubernator's. `done` is called exactly once, with nullopt when `response` is
// complete or with the error of the whole request (too many items; the node cannot decide now); it may
// run before the call returns or later on another thread. `request` and `response` must stay alive
// until then; `done` must not block.
void DecideGetRateLimits(const CheckService& context, CheckRouter* router,
                         const pb::gubernator::GetRateLimitsReq& request,
                         pb::gubernator::GetRateLimitsResp* response, GubernatorDone done);

// Gubernator's GetRateLimits as the gRPC door calls it: DecideGetRateLimits routed through the service's
// router (once the node has joined a cluster); an unexpected exception answers kInternal.
void GetRateLimits(const CheckService& service, const pb::gubernator::GetRateLimitsReq& request,
                   pb::gubernator::GetRateLimitsResp* response, GubernatorDone done);

// HealthCheck: "healthy" once the node is ready (and has joined its cluster), else "unhealthy" and why;
// peer_count counts the members alive in the ring (1 without a cluster).
void FillHealthCheck(const CheckService& context, pb::gubernator::HealthCheckResp* response);

// POST /v1/GetRateLimits, every item decided on this node.
[[nodiscard]] HttpResponse HandleGetRateLimits(const CheckService& context, const HttpRequest& request);

// POST /v1/GetRateLimits routed through `router`. Calls `respond` exactly once: at once for a bad request
// or when every key is local, else when the last forwarded item is decided (on whichever thread).
void HandleGetRateLimitsRouted(const CheckService& context, CheckRouter& router, const HttpRequest& request,
                               std::function<void(HttpResponse&&)> respond);

// GET /v1/HealthCheck (the HealthCheckResp as JSON, always 200) and GET /v1/LiveCheck ({}, 200).
[[nodiscard]] HttpResponse HandleHealthCheck(const CheckService& context);
[[nodiscard]] HttpResponse HandleLiveCheck();

// The JSON gateway's three routes on the node's HTTP port (POST /v1/GetRateLimits, GET /v1/HealthCheck,
// GET /v1/LiveCheck), for the HTTP API's router (ApiHandler::AddRoute). `service` must outlive them.
[[nodiscard]] std::vector<HttpRoute> GatewayRoutes(const CheckService& service);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_GUBERNATOR_GUBERNATOR_HANDLERS_H_
