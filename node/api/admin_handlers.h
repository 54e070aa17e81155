// The admin family: PUT /v1/headroom (dynamic-mode signal), GET /healthz, GET /readyz, GET /metrics.
//
// Thread safety: stateless functions over the thread-safe ApiContext.
#ifndef RINGLIMIT_NODE_API_ADMIN_HANDLERS_H_
#define RINGLIMIT_NODE_API_ADMIN_HANDLERS_H_

#include "node/api/handler.h"

namespace ringlimit::node {

struct ApiContext;

// {"policy":"api","headroom":0.4[,"ttl_ms":30000]} -> 200 {"policy":..,"headroom":..,"expires_in_ms":..}
[[nodiscard]] HttpResponse HandleHeadroomPut(ApiContext& context, const HttpRequest& request);
[[nodiscard]] HttpResponse HandleHealthz();
[[nodiscard]] HttpResponse HandleReadyz(const ApiContext& context);
[[nodiscard]] HttpResponse HandleMetrics(const ApiContext& context);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_ADMIN_HANDLERS_H_
