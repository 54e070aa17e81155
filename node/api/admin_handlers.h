// The admin family: PUT /v1/headroom (dynamic-mode signal), GET /healthz, GET /readyz, GET /metrics.
//
// Thread safety: stateless functions over the thread-safe CheckService.
#ifndef RINGLIMIT_NODE_API_ADMIN_HANDLERS_H_
#define RINGLIMIT_NODE_API_ADMIN_HANDLERS_H_

#include "node/http/handler.h"

namespace ringlimit::node {

struct CheckService;

// {"policy":"api","headroom":0.4[,"ttl_ms":30000]} -> 200 {"policy":..,"headroom":..,"expires_in_ms":..}
[[nodiscard]] HttpResponse HandleHeadroomPut(CheckService& context, const HttpRequest& request);
[[nodiscard]] HttpResponse HandleHealthz();
// GET /v1/stats: this node's totals for the console -- {"node_id","keys","decisions":{"allowed","denied"},
// "latency":{"bounds_ms":[...],"counts":[... one per bound, then +Inf]}} (counts per bucket, since start).
[[nodiscard]] HttpResponse HandleStats(const CheckService& context);
[[nodiscard]] HttpResponse HandleReadyz(const CheckService& context);
[[nodiscard]] HttpResponse HandleMetrics(const CheckService& context);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_ADMIN_HANDLERS_H_
