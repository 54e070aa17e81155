// The decision core shared by POST/GET /v1/check and POST /v1/GetRateLimits: resolves checks into
// (entity, state name, spec, cost) and charges them through the StateStore.
//
// Thread safety: pure functions over thread-safe components; a CheckBatch is used by one thread.
#ifndef RINGLIMIT_NODE_API_CHECK_ENGINE_H_
#define RINGLIMIT_NODE_API_CHECK_ENGINE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "api.pb.h"
#include "limiter/limiter.h"
#include "node/api/api_error.h"
#include "node/api/metrics.h"
#include "node/api/policies.h"
#include "storage/state_store.h"

namespace ringlimit::node {

struct ApiContext;

// One limit to evaluate for one entity. The views point into the request or the PolicySet, which
// the batch keeps alive.
struct PendingCheck {
  std::string_view key;
  std::string_view state_name;
  const limiter::LimitSpec* spec = nullptr;
  uint64_t cost = 1;
  double headroom = 0.;                  // dynamic mode: filled by Run from the Headroom signals
  std::string_view headroom_name;        // the name PUT /v1/headroom signals are looked up by
  DecisionCounters* counters = nullptr;  // metrics of its policy
  bool reset = false;                    // start from the initial state (Gubernator RESET_REMAINING)
  size_t origin = 0;                     // index of the request item it came from
};

// The checks of one request, with the storage their views need.
class CheckBatch {
 public:
  explicit CheckBatch(const ApiContext& context);

  // Adds the limits of one api.Check (a named policy expands to several). `origin` is its index in
  // the request. Errors: invalid key/name/fields, unknown policy.
  [[nodiscard]] std::optional<ApiError> Add(const api::Check& check, size_t origin);

  // Adds an already-resolved inline limit (Gubernator). `spec` is copied.
  void AddInline(std::string_view key, std::string_view name, const limiter::LimitSpec& spec, uint64_t cost,
                 bool reset, size_t origin);

  // Evaluates and charges everything. With `group_by_key`, the checks of one entity are charged
  // all-or-nothing in one atomic store update; otherwise each check is independent. Fills decisions()
  // (one per check, same order) and counts them in metrics. Error: the same limit named twice for the
  // same entity (only with group_by_key).
  [[nodiscard]] std::optional<ApiError> Run(limiter::TimeNs now, bool group_by_key);

  [[nodiscard]] std::span<const PendingCheck> checks() const { return checks_; }
  [[nodiscard]] std::span<const limiter::Decision> decisions() const { return decisions_; }
  [[nodiscard]] bool all_allowed() const { return all_allowed_; }
  void Reserve(size_t n);

 private:
  void RunGroup(std::span<const size_t> group, limiter::TimeNs now);
  std::optional<ApiError> ValidateKey(std::string_view key) const;
  DecisionCounters* CountersFor(std::string_view policy);

  const ApiContext& context_;
  std::shared_ptr<const PolicySet> policies_;  // keeps the specs alive for the request
  std::vector<PendingCheck> checks_;
  std::vector<limiter::Decision> decisions_;
  std::deque<limiter::LimitSpec> inline_specs_;   // stable addresses
  std::deque<std::string> names_;                 // owned names (Gubernator)
  std::vector<storage::Slot> slots_;              // scratch of RunGroup
  std::vector<const limiter::LimitSpec*> specs_;  // scratch of RunGroup
  std::vector<limiter::Decision> group_decisions_;
  bool all_allowed_ = true;
  std::string_view last_policy_;  // metrics lookup cache
  DecisionCounters* last_counters_ = nullptr;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_CHECK_ENGINE_H_
