// The Gubernator family: POST /v1/GetRateLimits, compatible with Gubernator's JSON gateway
// (pb.gubernator GetRateLimitsReq / GetRateLimitsResp; see proto/api.proto and docs/api.md), so its
// HTTP clients can switch unchanged.
//
// Thread safety: stateless functions over the thread-safe ApiContext.
#ifndef RINGLIMIT_NODE_API_GUBERNATOR_HANDLERS_H_
#define RINGLIMIT_NODE_API_GUBERNATOR_HANDLERS_H_

#include "node/api/handler.h"

namespace ringlimit::node {

struct ApiContext;

[[nodiscard]] HttpResponse HandleGetRateLimits(const ApiContext& context, const HttpRequest& request);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_GUBERNATOR_HANDLERS_H_
