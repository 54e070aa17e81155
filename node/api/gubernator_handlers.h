// The Gubernator family: POST /v1/GetRateLimits, compatible with Gubernator's JSON gateway
// (pb.gubernator GetRateLimitsReq / GetRateLimitsResp; see proto/api.proto and docs/api.md), so its
// HTTP clients can switch unchanged.
//
// Thread safety: stateless functions over the thread-safe ApiContext.
#ifndef RINGLIMIT_NODE_API_GUBERNATOR_HANDLERS_H_
#define RINGLIMIT_NODE_API_GUBERNATOR_HANDLERS_H_

#include <functional>

#include "node/api/handler.h"

namespace ringlimit::node {

struct ApiContext;
class CheckRouter;

// Decides every item on this node.
[[nodiscard]] HttpResponse HandleGetRateLimits(const ApiContext& context, const HttpRequest& request);

// The same with the items of keys other nodes own forwarded through `router` to their owner (like
// HandleCheckRouted); each decided item reports its deciding node in metadata["owner"]. Items of one
// key are decided in request order. Calls `respond` exactly once: at once for a bad request or when
// every key is local, else when the last forwarded item is decided (on whichever thread that is).
void HandleGetRateLimitsRouted(const ApiContext& context, CheckRouter& router, const HttpRequest& request,
                               std::function<void(HttpResponse&&)> respond);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_GUBERNATOR_HANDLERS_H_
