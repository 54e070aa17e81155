// ApiContext: what every endpoint family of ApiHandler shares (internal to node/api).
//
// Thread safety: the references point at thread-safe components; `options` and `clock` are constant
// after construction.
#ifndef RINGLIMIT_NODE_API_API_CONTEXT_H_
#define RINGLIMIT_NODE_API_API_CONTEXT_H_

#include <atomic>
#include <functional>

#include "limiter/hlc.h"
#include "limiter/merge.h"
#include "node/api/api_handler.h"
#include "node/api/cluster_hooks.h"
#include "node/api/headroom.h"

namespace ringlimit::node {

// A random contributor id: never 0 or storage::kLegacyContributor.
limiter::ContributorId DrawContributorId();

struct ApiContext {
  ApiContext(storage::StateStore& store_in, Clock clock_in, Policies& policies_in, Metrics& metrics_in,
             ApiOptions options_in)
      : store(store_in),
        clock(std::move(clock_in)),
        policies(policies_in),
        metrics(metrics_in),
        options(std::move(options_in)) {}

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
  // Set once before serving (ApiHandler::SetCluster); null without a cluster: every key is local.
  CheckRouter* router = nullptr;
  ClusterInfo* cluster = nullptr;
  // Set once before serving (ApiHandler::SetNodeMetrics): appends the metrics of the node's parts beyond
  // the API (open connections, the write-back tier). Empty: none.
  std::function<void(std::string*)> node_metrics;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_API_CONTEXT_H_
