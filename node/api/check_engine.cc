#include "node/api/check_engine.h"

#include <algorithm>
#include <numeric>

#include "node/api/api_context.h"
#include "node/api/api_json.h"
#include "node/api/json_writer.h"
#include "storage/state_store.h"

namespace ringlimit::node {

namespace {

ApiError InvalidField(std::string message) { return ApiError{ErrorKind::kInvalidField, std::move(message)}; }

}  // namespace

CheckBatch::CheckBatch(const ApiContext& context)
    : context_(context), policies_(context.policies.Current()) {}

void CheckBatch::Reserve(size_t n) { checks_.reserve(n); }

std::optional<ApiError> CheckBatch::ValidateKey(std::string_view key) const {
  if (key.empty()) return InvalidField("key: required (a non-empty entity key)");
  if (key.size() > context_.options.max_key_bytes) {
    return InvalidField("key: longer than " + std::to_string(context_.options.max_key_bytes) + " bytes");
  }
  if (!IsValidUtf8(key)) return InvalidField("key: not valid UTF-8");
  return std::nullopt;
}

DecisionCounters* CheckBatch::CountersFor(std::string_view policy) {
  if (last_counters_ == nullptr || policy != last_policy_) {
    last_counters_ = context_.metrics.ForPolicy(policy);
    last_policy_ = policy;
  }
  return last_counters_;
}

std::optional<ApiError> CheckBatch::Add(const api::Check& check, size_t origin) {
  const std::string_view key = check.key();
  if (auto error = ValidateKey(key)) return error;
  const uint64_t cost = check.has_cost() ? check.cost() : 1;
  if (cost > limiter::kMaxCost) return InvalidField("cost: larger than " + std::to_string(limiter::kMaxCost));

  if (!check.policy().empty()) {
    if (HasLimitFields(check)) {
      return InvalidField("policy: cannot be combined with inline limit parameters (algorithm, limit, ...)");
    }
    if (!check.name().empty())
      return InvalidField("name: not allowed with policy (the policy names its limits)");
    const Policy* policy = policies_->Find(check.policy());
    if (policy == nullptr) {
      std::string message = "policy: no policy named ";
      AppendJsonString(&message, check.policy());
      return ApiError{ErrorKind::kUnknownPolicy, std::move(message)};
    }
    DecisionCounters* counters = CountersFor(policy->name);
    for (const PolicyLimit& limit : policy->Resolve(key, check.tier())) {
      checks_.push_back(PendingCheck{.key = key,
                                     .state_name = limit.state_name,
                                     .spec = &limit.spec,
                                     .cost = cost,
                                     .headroom_name = policy->name,
                                     .counters = counters,
                                     .reset = false,
                                     .origin = origin});
    }
    return std::nullopt;
  }

  if (!check.tier().empty()) return InvalidField("tier: only meaningful with policy");
  if (!check.has_limit()) return InvalidField("limit: required (or name a policy)");
  std::string_view name = check.name();
  if (name.empty()) name = "default";
  if (name.size() > context_.options.max_name_bytes) {
    return InvalidField("name: longer than " + std::to_string(context_.options.max_name_bytes) + " bytes");
  }
  if (!IsValidUtf8(name)) return InvalidField("name: not valid UTF-8");
  limiter::LimitSpec spec;
  if (auto error = ApplyLimitFields(check, &spec)) return error;
  const limiter::LimitSpec& stored = inline_specs_.emplace_back(spec);
  checks_.push_back(PendingCheck{.key = key,
                                 .state_name = name,
                                 .spec = &stored,
                                 .cost = cost,
                                 .headroom_name = name,
                                 .counters = CountersFor(""),
                                 .reset = false,
                                 .origin = origin});
  return std::nullopt;
}

void CheckBatch::AddInline(std::string_view key, std::string_view name, const limiter::LimitSpec& spec,
                           uint64_t cost, bool reset, size_t origin) {
  const limiter::LimitSpec& stored = inline_specs_.emplace_back(spec);
  const std::string& owned_key = names_.emplace_back(key);
  const std::string& owned_name = names_.emplace_back(name);
  checks_.push_back(PendingCheck{.key = owned_key,
                                 .state_name = owned_name,
                                 .spec = &stored,
                                 .cost = cost,
                                 .headroom_name = owned_name,
                                 .counters = CountersFor(""),
                                 .reset = reset,
                                 .origin = origin});
}

std::optional<ApiError> CheckBatch::Run(limiter::TimeNs now, bool group_by_key) {
  decisions_.assign(checks_.size(), limiter::Decision{});
  all_allowed_ = true;
  if (!group_by_key || checks_.size() == 1) {
    for (size_t i = 0; i < checks_.size(); ++i) RunGroup(std::span<const size_t>(&i, 1), now);
    return std::nullopt;
  }
  std::vector<size_t> order(checks_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return checks_[a].key < checks_[b].key; });
  // Validate every group before charging anything, so an error leaves every state untouched.
  std::vector<std::pair<size_t, size_t>> groups;  // [begin, end) in order
  for (size_t begin = 0; begin < order.size();) {
    size_t end = begin + 1;
    while (end < order.size() && checks_[order[end]].key == checks_[order[begin]].key) ++end;
    for (size_t a = begin; a < end; ++a) {
      for (size_t b = a + 1; b < end; ++b) {
        if (checks_[order[a]].state_name == checks_[order[b]].state_name) {
          std::string message = "checks[" + std::to_string(checks_[order[b]].origin) + "]: limit ";
          AppendJsonString(&message, checks_[order[b]].state_name);
          message += " of this key is already checked by checks[" + std::to_string(checks_[order[a]].origin) +
                     "] (merge them into one check with the summed cost)";
          return InvalidField(std::move(message));
        }
      }
    }
    groups.emplace_back(begin, end);
    begin = end;
  }
  for (const auto& [begin, end] : groups)
    RunGroup(std::span<const size_t>(order.data() + begin, end - begin), now);
  return std::nullopt;
}

void CheckBatch::RunGroup(std::span<const size_t> group, limiter::TimeNs now) {
  const size_t n = group.size();
  slots_.clear();
  specs_.clear();
  group_decisions_.assign(n, limiter::Decision{});
  bool uniform = true;
  const PendingCheck& first = checks_[group[0]];
  double first_headroom = 0.;
  for (size_t j = 0; j < n; ++j) {
    PendingCheck& c = checks_[group[j]];
    if (c.spec->mode == limiter::Mode::kDynamic) c.headroom = context_.headroom.Get(c.headroom_name, now);
    if (j == 0) first_headroom = c.headroom;
    uniform = uniform && !c.reset && c.cost == first.cost && c.headroom == first_headroom;
    slots_.push_back(storage::Slot{c.state_name, c.spec});
    specs_.push_back(c.spec);
  }

  // One pointer captured, so std::function keeps the callable inline (no allocation).
  struct Work {
    CheckBatch* self;
    std::span<const size_t> group;
    bool uniform;
    limiter::TimeNs now;
  } work{this, group, uniform, now};
  context_.store.Update(first.key, slots_, now, [w = &work](std::span<limiter::State* const> states) {
    CheckBatch& b = *w->self;
    const size_t count = w->group.size();
    bool all = true;
    if (w->uniform) {
      const PendingCheck& c0 = b.checks_[w->group[0]];
      all = limiter::CheckAll(b.specs_, states,
                              limiter::Request{.cost = c0.cost, .now = w->now, .headroom = c0.headroom},
                              b.group_decisions_);
    } else {
      // Mixed costs (or a reset): peek every limit first, then charge all only if all admit.
      for (size_t j = 0; j < count; ++j) {
        const PendingCheck& c = b.checks_[w->group[j]];
        if (c.reset) *states[j] = limiter::State{};
        b.group_decisions_[j] = limiter::Peek(
            *c.spec, *states[j], limiter::Request{.cost = c.cost, .now = w->now, .headroom = c.headroom});
        all = all && b.group_decisions_[j].allowed;
      }
      for (size_t j = 0; j < count; ++j) {
        const PendingCheck& c = b.checks_[w->group[j]];
        if (all || (c.spec->count_denied && !b.group_decisions_[j].allowed)) {
          b.group_decisions_[j] = limiter::Check(
              *c.spec, *states[j], limiter::Request{.cost = c.cost, .now = w->now, .headroom = c.headroom});
        }
      }
    }
    // All-or-nothing: a limit that would have admitted is reported refused when a sibling refused,
    // since nothing was charged for it.
    if (!all) {
      for (auto& d : b.group_decisions_) d.allowed = false;
    }
  });

  for (size_t j = 0; j < n; ++j) {
    const limiter::Decision& d = group_decisions_[j];
    const PendingCheck& c = checks_[group[j]];
    decisions_[group[j]] = d;
    if (!d.allowed) {
      all_allowed_ = false;
      c.counters->denied.fetch_add(1, std::memory_order_relaxed);
    } else if (d.would_deny && c.spec->mode == limiter::Mode::kShadow) {
      c.counters->shadow_denied.fetch_add(1, std::memory_order_relaxed);
    } else {
      c.counters->allowed.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace ringlimit::node
