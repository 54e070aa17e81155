// The decision core shared by POST/GET /v1/check and POST /v1/GetRateLimits: resolves checks into
// (entity, state name, spec, cost) and charges them through the StateStore.
//
// Thread safety: pure functions over thread-safe components; a CheckBatch is used by one thread, except
// that RunRouted's forwarding completions may run on other threads (they serialise on the batch's mutex).
#ifndef RINGLIMIT_NODE_SERVICE_CHECK_ENGINE_H_
#define RINGLIMIT_NODE_SERVICE_CHECK_ENGINE_H_

#include <atomic>
#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <forward_list>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "api.pb.h"
#include "limiter/limiter.h"
#include "node/metrics/metrics.h"
#include "node/service/api_error.h"
#include "node/service/check_fields.h"
#include "node/service/policies.h"
#include "peer.pb.h"
#include "storage/state_store.h"

namespace ringlimit::node {

struct CheckService;
class CheckRouter;

// The error for an inline limit (or Gubernator item) whose name is a state of policy `owner`
// (PolicySet::Owning).
[[nodiscard]] ApiError ReservedName(std::string_view name, const Policy& owner);

// Why `router`'s node refuses the checks entering it now (not joined yet: kNotReady; a minority under
// --failure-mode closed: kUnavailable), with `retry_hint` appended to the message; or nullopt when it
// takes them (deciding them, or passing them on to their holders).
[[nodiscard]] std::optional<ApiError> RefusalOf(const CheckRouter& router, std::string_view retry_hint);

// One limit to evaluate for one entity. The views point into the request or the PolicySet, which
// the batch keeps alive.
struct PendingCheck {
  std::string_view key;
  std::string_view state_name;
  const limiter::LimitSpec* spec = nullptr;
  uint64_t cost = 1;
  double headroom = 0.;            // dynamic mode: filled by Run from the Headroom signals
  bool headroom_given = false;     // `headroom` was resolved by the forwarding node: keep it
  std::string_view headroom_name;  // the name PUT /v1/headroom signals are looked up by
  // Metrics of its policy, inline limit name or RLS rule; null: not counted (forwarded to us).
  DecisionCounters* counters = nullptr;
  bool reset = false;  // start from the initial state (Gubernator RESET_REMAINING)
  size_t origin = 0;   // index of the request item it came from
};

// The checks of one request, with the storage their views need.
class CheckBatch {
 public:
  explicit CheckBatch(const CheckService& context);
  // Its checks point into it (specs, names): never copied or moved.
  CheckBatch(const CheckBatch&) = delete;
  CheckBatch& operator=(const CheckBatch&) = delete;

  // Adds the limits of one check (a named policy expands to several). `origin` is its index in the
  // request. Errors: invalid key/name/fields, unknown policy. The check's views must outlive the batch.
  [[nodiscard]] std::optional<ApiError> Add(const CheckFields& check, size_t origin);
  [[nodiscard]] std::optional<ApiError> Add(const api::Check& check, size_t origin);

  // Adds an already-resolved inline limit (Gubernator, RLS). `spec` is copied. Counted in `counters`, or
  // when null under its name (Metrics::ForName).
  void AddInline(std::string_view key, std::string_view name, const limiter::LimitSpec& spec, uint64_t cost,
                 bool reset, size_t origin, DecisionCounters* counters = nullptr);

  // Adds a limit resolved by another node (a forwarded check): spec, cost and headroom as given; not
  // counted in the per-policy metrics (the entry node counts it). `spec` is copied.
  void AddResolved(std::string_view key, std::string_view name, const limiter::LimitSpec& spec, uint64_t cost,
                   double headroom, bool reset, size_t origin);

  // Evaluates and charges everything. With `group_by_key`, the checks of one entity are charged
  // all-or-nothing in one atomic store update; otherwise each check is independent. Fills decisions()
  // (one per check, same order) and counts them in metrics. Error: the same limit named twice for the
  // same entity (only with group_by_key).
  [[nodiscard]] std::optional<ApiError> Run(limiter::TimeNs now, bool group_by_key);

  // Like Run(now, true), but the checks of keys another node owns are forwarded through `router` (all
  // limits of one key in one message) while local keys are decided here. On an error nothing is charged
  // or forwarded and `done` is not called; otherwise `done` is called exactly once, when every decision
  // is in (possibly before RunRouted returns, possibly on another thread). The batch must stay alive
  // until then. Fills owners() as well.
  [[nodiscard]] std::optional<ApiError> RunRouted(limiter::TimeNs now, CheckRouter& router,
                                                  std::function<void()> done);

  // RunRouted when it would be over before it returns: every key decided here (Classify) and the router
  // DecidesAtOnce, or one check of another node's key admitted from a slice (MayDecideAtEntry, then
  // DecideAtEntry). Returns true once every decision is in (owners() filled as RunRouted fills them);
  // false, with nothing charged, when it would not be (a key another node decides, a router that waits for
  // replicas) or on an error (RunRouted would return it).
  [[nodiscard]] bool RunHere(limiter::TimeNs now, CheckRouter& router);

  [[nodiscard]] std::span<const PendingCheck> checks() const { return checks_; }
  // The id of the node that decided each check (RunRouted only; empty otherwise).
  [[nodiscard]] std::span<const std::string_view> owners() const { return owners_; }
  [[nodiscard]] std::span<const limiter::Decision> decisions() const { return decisions_; }
  [[nodiscard]] bool all_allowed() const { return all_allowed_; }
  // RunRouted: set when a key could not be decided at all (no holder answered under --failure-mode
  // closed): the error to answer (503 unavailable); unavailable(i) says which checks it concerns.
  [[nodiscard]] const std::optional<ApiError>& unavailable() const { return unavailable_; }
  [[nodiscard]] bool unavailable(size_t check) const {
    return check < unavailable_checks_.size() && unavailable_checks_[check] != 0;
  }
  void Reserve(size_t n);

 private:
  // A batch lives for one request, most often of one check (GET /v1/check): its per-check vectors keep
  // one element inline and its node-based lists allocate nothing until used, so such a request costs no
  // allocation here.
  template <class T>
  using PerCheck = boost::container::small_vector<T, 1>;

  // Sorts checks by key into order_ and groups_; errors on a limit named twice for one key.
  std::optional<ApiError> Group();
  // Each group's key into `keys`, and into remote_ whether another node decides it (router.Classify), after
  // router.EnterDecisions: returns the pin to give ExitDecisions.
  uint32_t ClassifyGroups(CheckRouter& router, PerCheck<std::string_view>& keys);
  // A copy of `spec` that lives as long as the batch.
  const limiter::LimitSpec& StoreSpec(const limiter::LimitSpec& spec);
  void RunGroup(std::span<const size_t> group, limiter::TimeNs now);
  // Group g (its key decided elsewhere) when this node decides it after all, from a quota grant's slice
  // (CheckRouter::DecideAtEntry, offered groups of one check): its decision set (under mutex_), true.
  bool DecidedAtEntry(size_t g, CheckRouter& router);
  // Builds the message for the checks of groups_[g].
  peer::ForwardedCheck MakeForwarded(size_t g, limiter::TimeNs now) const;
  // A forwarded group's outcome (under mutex_): the owner's decisions, or a local decision (returns
  // true then).
  bool OnForwarded(size_t g, limiter::TimeNs now, std::optional<peer::ForwardedResult> result,
                   std::string_view self_id);
  // A view of owner `id` (not this node) that lives as long as the batch.
  std::string_view OwnerName(const std::string& id);
  void CountDecision(const PendingCheck& c, const limiter::Decision& d);
  void FinishOne();
  // Local group g's decision was not acknowledged by every holder (--failure-mode closed): unless it
  // admitted nothing, it is answered 503.
  void Unacked(size_t g);
  // Marks `group`'s checks unavailable (503 `why`): no decision is answered for them.
  void MarkUnavailable(std::span<const size_t> group, std::string_view why);
  std::optional<ApiError> ValidateKey(std::string_view key) const;
  DecisionCounters* CountersFor(std::string_view policy);
  DecisionCounters* NameCountersFor(std::string_view name);
  void AddCounted(std::string_view key, std::string_view name, const limiter::LimitSpec& spec, uint64_t cost,
                  bool reset, size_t origin, DecisionCounters* counters);

  const CheckService& context_;
  std::shared_ptr<const PolicySet> policies_;  // keeps the specs alive for the request
  PerCheck<PendingCheck> checks_;
  PerCheck<limiter::Decision> decisions_;
  // Inline limits' specs, at stable addresses: the first here (no allocation for a single check), the
  // others in the list (StoreSpec).
  std::optional<limiter::LimitSpec> first_spec_;
  std::forward_list<limiter::LimitSpec> inline_specs_;
  std::forward_list<std::string> names_;       // owned names (Gubernator)
  PerCheck<storage::Slot> slots_;              // scratch of RunGroup
  PerCheck<const limiter::LimitSpec*> specs_;  // scratch of RunGroup
  PerCheck<limiter::Decision> group_decisions_;
  PerCheck<size_t> order_;                      // check indexes sorted by key
  PerCheck<std::pair<size_t, size_t>> groups_;  // [begin, end) in order_, one per key
  PerCheck<std::string_view> owners_;           // per check (RunRouted)
  std::string first_owner_;  // the first owner that is not this node (inline: no allocation)
  std::forward_list<std::string> owner_names_;  // the others
  // RunRouted's router and the instant it decides at: what the forwards' completions need besides `this` and
  // the group, which std::function then keeps inline.
  CheckRouter* router_ = nullptr;
  limiter::TimeNs routed_now_ = 0;
  PerCheck<uint8_t> remote_;  // per group (RunRouted): 1 when another node decides it

  // RunRouted's asynchronous phase: decisions_, owners_, the scratch vectors and all_allowed_ are
  // written under mutex_; pending_ counts outstanding forwards (+1 while RunRouted itself runs).
  std::mutex mutex_;
  std::atomic<size_t> pending_{0};
  std::function<void()> done_;

  bool all_allowed_ = true;
  std::optional<ApiError> unavailable_;
  PerCheck<uint8_t> unavailable_checks_;  // per check (RunRouted), 1: not decided
  std::string_view last_policy_;          // metrics lookup caches: the last policy, the last inline name
  DecisionCounters* last_counters_ = nullptr;
  std::string_view last_name_;
  DecisionCounters* last_name_counters_ = nullptr;
};

// Batches run one after the other, for requests whose items are independent (Gubernator's items, Envoy's
// descriptors; not all-or-nothing like /v1/check): round r holds the r-th check of every key, so the checks
// of one key are charged in request order wherever its owner is.
class CheckRounds {
 public:
  using Done = std::function<void(std::optional<ApiError> error)>;

  explicit CheckRounds(const CheckService& context) : context_(context) {}

  // Round `r`, created (with those before it) on first use.
  CheckBatch& Round(size_t r);
  [[nodiscard]] const CheckBatch& operator[](size_t r) const { return *rounds_[r]; }
  [[nodiscard]] bool empty() const { return rounds_.empty(); }
  // The instant the rounds were decided at (set by Run).
  [[nodiscard]] limiter::TimeNs now() const { return now_; }

  // Runs every round at the context's clock -- through `router` unless null, after RefusalOf allows it --
  // and calls `done` exactly once: nullopt once every decision is in, or the error that stopped it. It may
  // run before Run returns or later on another thread. `owner` keeps this object, and what its checks
  // point into, alive until then.
  void Run(CheckRouter* router, std::shared_ptr<const void> owner, Done done);

 private:
  void RunFrom(size_t r, CheckRouter* router, std::shared_ptr<const void> owner, Done done);

  const CheckService& context_;
  std::vector<std::unique_ptr<CheckBatch>> rounds_;
  limiter::TimeNs now_ = 0;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_CHECK_ENGINE_H_
