// The cluster family: GET /v1/cluster (members and ring), GET /v1/ring?key=K (placement of a key),
// POST /v1/cluster/leave (graceful leave). They read the cluster through ClusterInfo
// (node/service/cluster_hooks.h); a node without a cluster answers 404.
//
// Thread safety: stateless functions over the thread-safe CheckService.
#ifndef RINGLIMIT_NODE_API_CLUSTER_HANDLERS_H_
#define RINGLIMIT_NODE_API_CLUSTER_HANDLERS_H_

#include <string_view>

#include "node/http/handler.h"

namespace ringlimit::node {

struct CheckService;

// 200 {"node_id":..,"ring_version":..,"members":[{"id","http_address","peer_address","state","vnodes",
// "incarnation","share"},...]}
[[nodiscard]] HttpResponse HandleClusterGet(const CheckService& context);
// 200 {"key":..,"token":"<decimal>","owner":..,"preference_list":[{"id","http_address","state"},...]};
// 400 without a key.
[[nodiscard]] HttpResponse HandleRingGet(const CheckService& context, std::string_view query);
// 200 {"arcs":[{"owner","from","to"},...]}: every member's owned ranges as fractions of the token space.
[[nodiscard]] HttpResponse HandleRingArcs(const CheckService& context);
// 200 {"node_id":..,"grants":"on"|"off","lent":[{"key","name","units_out","grants","holders":[..],
// "recalled"},...],"held":[{"key","name","owner","units_left","slices","expires_in_ms"},...]}: the hot keys
// this node lent slices of (it owns them) and holds slices of (quota grants), at most 100 of each.
[[nodiscard]] HttpResponse HandleGrants(const CheckService& context);
// 202 {"node_id":..,"state":"leaving"}; the node leaves the cluster and exits.
[[nodiscard]] HttpResponse HandleClusterLeave(const CheckService& context);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_CLUSTER_HANDLERS_H_
