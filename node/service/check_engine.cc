#include "node/service/check_engine.h"

#include <algorithm>
#include <numeric>

#include "limiter/spec_wire.h"
#include "node/service/api_json.h"
#include "node/service/check_service.h"
#include "node/service/cluster_hooks.h"
#include "node/service/forwarded.h"
#include "node/service/json_writer.h"
#include "storage/state_store.h"

namespace ringlimit::node {

namespace {

ApiError InvalidField(std::string message) { return ApiError{ErrorKind::kInvalidField, std::move(message)}; }

}  // namespace

CheckBatch::CheckBatch(const CheckService& context)
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

ApiError ReservedName(std::string_view name, const Policy& owner) {
  std::string message = "name: ";
  AppendJsonString(&message, name);
  message += " is a state of policy ";
  AppendJsonString(&message, owner.name);
  message += "; check it with \"policy\" (inline limits and Gubernator items cannot use a policy's names)";
  return ApiError{ErrorKind::kInvalidField, std::move(message)};
}

DecisionCounters* CheckBatch::CountersFor(std::string_view policy) {
  if (last_counters_ == nullptr || policy != last_policy_) {
    last_counters_ = context_.metrics.ForPolicy(policy);
    last_policy_ = policy;
  }
  return last_counters_;
}

DecisionCounters* CheckBatch::NameCountersFor(std::string_view name) {
  if (last_name_counters_ == nullptr || name != last_name_) {
    last_name_counters_ = context_.metrics.ForName(name);
    last_name_ = name;
  }
  return last_name_counters_;
}

std::optional<ApiError> CheckBatch::Add(const api::Check& check, size_t origin) {
  return Add(FieldsOf(check), origin);
}

std::optional<ApiError> CheckBatch::Add(const CheckFields& check, size_t origin) {
  const std::string_view key = check.key;
  if (auto error = ValidateKey(key)) return error;
  const uint64_t cost = check.cost.value_or(1);
  if (cost > limiter::kMaxCost) return InvalidField("cost: larger than " + std::to_string(limiter::kMaxCost));

  if (!check.policy.empty()) {
    if (check.HasLimitFields()) {
      return InvalidField("policy: cannot be combined with inline limit parameters (algorithm, limit, ...)");
    }
    if (!check.name.empty())
      return InvalidField("name: not allowed with policy (the policy names its limits)");
    const Policy* policy = policies_->Find(check.policy);
    if (policy == nullptr) {
      std::string message = "policy: no policy named ";
      AppendJsonString(&message, check.policy);
      return ApiError{ErrorKind::kUnknownPolicy, std::move(message)};
    }
    DecisionCounters* counters = CountersFor(policy->name);
    for (const PolicyLimit& limit : policy->Resolve(key, check.tier)) {
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

  if (!check.tier.empty()) return InvalidField("tier: only meaningful with policy");
  if (!check.limit) return InvalidField("limit: required (or name a policy)");
  std::string_view name = check.name;
  if (name.empty()) name = "default";
  if (name.size() > context_.options.max_name_bytes) {
    return InvalidField("name: longer than " + std::to_string(context_.options.max_name_bytes) + " bytes");
  }
  if (!IsValidUtf8(name)) return InvalidField("name: not valid UTF-8");
  if (const Policy* owner = policies_->Owning(name)) return ReservedName(name, *owner);
  limiter::LimitSpec spec;
  if (auto error = ApplyLimitFields(check, &spec)) return error;
  const limiter::LimitSpec& stored = StoreSpec(spec);
  checks_.push_back(PendingCheck{.key = key,
                                 .state_name = name,
                                 .spec = &stored,
                                 .cost = cost,
                                 .headroom_name = name,
                                 .counters = NameCountersFor(name),
                                 .reset = false,
                                 .origin = origin});
  return std::nullopt;
}

void CheckBatch::AddInline(std::string_view key, std::string_view name, const limiter::LimitSpec& spec,
                           uint64_t cost, bool reset, size_t origin, DecisionCounters* counters) {
  AddCounted(key, name, spec, cost, reset, origin, counters != nullptr ? counters : NameCountersFor(name));
}

void CheckBatch::AddCounted(std::string_view key, std::string_view name, const limiter::LimitSpec& spec,
                            uint64_t cost, bool reset, size_t origin, DecisionCounters* counters) {
  const limiter::LimitSpec& stored = StoreSpec(spec);
  const std::string& owned_key = names_.emplace_front(key);
  const std::string& owned_name = names_.emplace_front(name);
  checks_.push_back(PendingCheck{.key = owned_key,
                                 .state_name = owned_name,
                                 .spec = &stored,
                                 .cost = cost,
                                 .headroom_name = owned_name,
                                 .counters = counters,
                                 .reset = reset,
                                 .origin = origin});
}

void CheckBatch::AddResolved(std::string_view key, std::string_view name, const limiter::LimitSpec& spec,
                             uint64_t cost, double headroom, bool reset, size_t origin) {
  AddCounted(key, name, spec, cost, reset, origin, /*counters=*/nullptr);
  PendingCheck& c = checks_.back();
  c.headroom = headroom;
  c.headroom_given = true;
}

const limiter::LimitSpec& CheckBatch::StoreSpec(const limiter::LimitSpec& spec) {
  if (!first_spec_) return first_spec_.emplace(spec);
  return inline_specs_.emplace_front(spec);
}

std::optional<ApiError> CheckBatch::Group() {
  order_.resize(checks_.size());
  std::iota(order_.begin(), order_.end(), size_t{0});
  // (One check needs no sorting; std::stable_sort would still allocate its buffer.)
  if (order_.size() > 1) {
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t a, size_t b) { return checks_[a].key < checks_[b].key; });
  }
  // Validate every group before charging anything, so an error leaves every state untouched.
  groups_.clear();
  for (size_t begin = 0; begin < order_.size();) {
    size_t end = begin + 1;
    while (end < order_.size() && checks_[order_[end]].key == checks_[order_[begin]].key) ++end;
    for (size_t a = begin; a < end; ++a) {
      for (size_t b = a + 1; b < end; ++b) {
        if (checks_[order_[a]].state_name == checks_[order_[b]].state_name) {
          std::string message = "checks[" + std::to_string(checks_[order_[b]].origin) + "]: limit ";
          AppendJsonString(&message, checks_[order_[b]].state_name);
          message += " of this key is already checked by checks[" +
                     std::to_string(checks_[order_[a]].origin) +
                     "] (merge them into one check with the summed cost)";
          return InvalidField(std::move(message));
        }
      }
    }
    groups_.emplace_back(begin, end);
    begin = end;
  }
  return std::nullopt;
}

std::optional<ApiError> CheckBatch::Run(limiter::TimeNs now, bool group_by_key) {
  decisions_.assign(checks_.size(), limiter::Decision{});
  all_allowed_ = true;
  if (!group_by_key || checks_.size() == 1) {
    for (size_t i = 0; i < checks_.size(); ++i) RunGroup(std::span<const size_t>(&i, 1), now);
    return std::nullopt;
  }
  if (auto error = Group()) return error;
  for (const auto& [begin, end] : groups_)
    RunGroup(std::span<const size_t>(order_.data() + begin, end - begin), now);
  return std::nullopt;
}

uint32_t CheckBatch::ClassifyGroups(CheckRouter& router, PerCheck<std::string_view>& keys) {
  keys.reserve(groups_.size());
  for (const auto& group : groups_) keys.push_back(checks_[order_[group.first]].key);
  remote_.assign(groups_.size(), 0);
  const uint32_t pin = router.EnterDecisions();
  router.Classify(keys, remote_);
  return pin;
}

std::optional<ApiError> CheckBatch::RunRouted(limiter::TimeNs now, CheckRouter& router,
                                              std::function<void()> done) {
  decisions_.assign(checks_.size(), limiter::Decision{});
  owners_.assign(checks_.size(), std::string_view(router.self_id()));
  all_allowed_ = true;
  if (auto error = Group()) return error;
  PerCheck<std::string_view> keys;
  const uint32_t pin = ClassifyGroups(router, keys);

  done_ = std::move(done);
  router_ = &router;
  routed_now_ = now;
  pending_.store(1, std::memory_order_relaxed);
  PerCheck<peer::ForwardedCheck> forwards;
  PerCheck<size_t> forwarded_groups;
  bool any_local = false;
  {
    std::lock_guard lock(mutex_);
    for (size_t g = 0; g < groups_.size(); ++g) {
      if (remote_[g] != 0) {
        if (DecidedAtEntry(g, router)) continue;  // answered with the others, nothing to wait for
        forwards.push_back(MakeForwarded(g, now));
        forwarded_groups.push_back(g);
        continue;
      }
      any_local = true;
      RunGroup(
          std::span<const size_t>(order_.data() + groups_[g].first, groups_[g].second - groups_[g].first),
          now);
    }
  }
  router.ExitDecisions(pin);
  pending_.fetch_add(forwards.size() + (any_local ? 1 : 0), std::memory_order_relaxed);
  if (any_local) {
    PerCheck<std::string_view> local_keys;
    local_keys.reserve(groups_.size());
    for (size_t g = 0; g < groups_.size(); ++g)
      if (remote_[g] == 0) local_keys.push_back(keys[g]);
    // Only `this` captured: std::function keeps it inline (remote_ is not written again).
    router.Decided(local_keys, [this](bool acked) {
      if (!acked) {
        for (size_t g = 0; g < groups_.size(); ++g)
          if (remote_[g] == 0) Unacked(g);
      }
      FinishOne();
    });
  }
  for (size_t i = 0; i < forwards.size(); ++i) {
    const size_t g = forwarded_groups[i];
    // Only `this` and the group captured: std::function keeps them inline (no allocation per forward).
    router.Forward(std::move(forwards[i]), [this, g](std::optional<peer::ForwardedResult> result) {
      bool local = false;
      {
        std::lock_guard lock(mutex_);
        local = OnForwarded(g, routed_now_, std::move(result), router_->self_id());
      }
      if (local) {
        // Decided here after all: the answer waits for replication like any local one.
        pending_.fetch_add(1, std::memory_order_relaxed);
        const std::string_view key = checks_[order_[groups_[g].first]].key;
        router_->Decided(std::span<const std::string_view>(&key, 1), [this, g](bool acked) {
          if (!acked) Unacked(g);
          FinishOne();
        });
      }
      FinishOne();
    });
  }
  FinishOne();
  return std::nullopt;
}

bool CheckBatch::RunHere(limiter::TimeNs now, CheckRouter& router) {
  if (Group()) return false;
  PerCheck<std::string_view> keys;
  const uint32_t pin = ClassifyGroups(router, keys);
  decisions_.assign(checks_.size(), limiter::Decision{});
  owners_.assign(checks_.size(), std::string_view(router.self_id()));
  all_allowed_ = true;
  if (std::any_of(remote_.begin(), remote_.end(), [](uint8_t r) { return r != 0; })) {
    // Another node's key: decided here only from a slice (one key of one limit, as RunRouted offers it),
    // offered only when the router holds one for it -- an offer counts towards the key's rate, and a check
    // declined here is offered again on its way through RunRouted.
    bool here = false;
    if (groups_.size() == 1 && checks_.size() == 1) {
      const PendingCheck& c = checks_[0];
      here = router.MayDecideAtEntry(EntryCheck{c.key, c.state_name, c.spec, c.cost, c.reset}) &&
             DecidedAtEntry(0, router);
    }
    router.ExitDecisions(pin);
    return here;
  }
  if (!router.DecidesAtOnce()) {  // its answer waits for replicas: RunRouted's
    router.ExitDecisions(pin);
    return false;
  }
  for (const auto& [begin, end] : groups_)
    RunGroup(std::span<const size_t>(order_.data() + begin, end - begin), now);
  router.ExitDecisions(pin);
  // At once (DecidesAtOnce): acknowledged before Decided returns.
  router.Decided(keys, [this](bool acked) {
    if (acked) return;
    for (size_t g = 0; g < groups_.size(); ++g) Unacked(g);
  });
  return true;
}

void CheckBatch::Unacked(size_t g) {
  std::lock_guard lock(mutex_);
  const auto [begin, end] = groups_[g];
  const std::span<const size_t> group(order_.data() + begin, end - begin);
  // A denial stands (it admitted nothing); an admission the key's holders do not all have is not given.
  if (std::none_of(group.begin(), group.end(), [&](size_t i) { return decisions_[i].allowed; })) return;
  MarkUnavailable(group,
                  "a majority of its holders did not acknowledge the decision (--failure-mode closed)");
}

void CheckBatch::FinishOne() {
  if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    // The last completion: everything written under mutex_ is visible (acq_rel above).
    auto done = std::move(done_);
    done();
  }
}

bool CheckBatch::DecidedAtEntry(size_t g, CheckRouter& router) {
  const auto [begin, end] = groups_[g];
  if (end - begin != 1) return false;  // several limits of one key: all-or-nothing at its decider
  const size_t i = order_[begin];
  const PendingCheck& c = checks_[i];
  const std::optional<uint64_t> left =
      router.DecideAtEntry(EntryCheck{c.key, c.state_name, c.spec, c.cost, c.reset});
  if (!left) return false;
  // What the owner would answer of a slice's admission: admitted, the limit, what is left here.
  limiter::Decision d;
  d.allowed = true;
  d.limit = c.spec->limit;
  d.remaining = *left;
  decisions_[i] = d;
  owners_[i] = router.self_id();
  CountDecision(c, d);
  return true;
}

peer::ForwardedCheck CheckBatch::MakeForwarded(size_t g, limiter::TimeNs now) const {
  const auto [begin, end] = groups_[g];
  peer::ForwardedCheck out;
  const PendingCheck& first = checks_[order_[begin]];
  out.set_check_id(g);
  out.set_key(first.key.data(), first.key.size());
  out.set_cost(first.cost);
  out.set_hops(1);
  for (size_t j = begin; j < end; ++j) {
    const PendingCheck& c = checks_[order_[j]];
    peer::NamedLimit* limit = out.add_limits();
    limit->set_name(c.state_name.data(), c.state_name.size());
    limiter::SpecToProto(*c.spec, limit->mutable_spec());
    double headroom = c.headroom;
    if (!c.headroom_given && c.spec->mode == limiter::Mode::kDynamic)
      headroom = context_.headroom.Get(c.headroom_name, now);
    limit->set_cost(c.cost);
    limit->set_headroom(headroom);
    limit->set_reset(c.reset);
    if (j == begin) out.set_headroom(headroom);
  }
  return out;
}

void CheckBatch::MarkUnavailable(std::span<const size_t> group, std::string_view why) {
  if (!unavailable_) {
    std::string message = "key ";
    AppendJsonString(&message, checks_[group[0]].key);
    unavailable_ = ApiError{ErrorKind::kUnavailable, message + ": " + std::string(why)};
  }
  unavailable_checks_.resize(checks_.size(), 0);
  for (size_t i : group) {
    unavailable_checks_[i] = 1;
    decisions_[i] = limiter::Decision{};
  }
  all_allowed_ = false;
}

bool CheckBatch::OnForwarded(size_t g, limiter::TimeNs now, std::optional<peer::ForwardedResult> result,
                             std::string_view self_id) {
  const auto [begin, end] = groups_[g];
  const std::span<const size_t> group(order_.data() + begin, end - begin);
  if (result && (result->status() == peer::CHECK_UNAVAILABLE || result->status() == peer::CHECK_UNACKED)) {
    // The router refused it (no holder answered, --failure-mode closed): nothing was charged anywhere. Or
    // (unacked) the decider charged it but a majority of its holders did not acknowledge it: not answered as
    // an admission.
    MarkUnavailable(group, result->error());
    return false;
  }
  if (!result || result->status() != peer::CHECK_OK ||
      static_cast<size_t>(result->decisions_size()) != group.size()) {
    RunGroup(group, now);  // nobody else could decide: this node does (owners_ already say so)
    for (size_t i : group) owners_[i] = self_id;
    return true;
  }
  const std::string_view owner = OwnerName(result->owner());
  for (size_t j = 0; j < group.size(); ++j) {
    const limiter::Decision d = DecisionFromProto(result->decisions(static_cast<int>(j)));
    decisions_[group[j]] = d;
    owners_[group[j]] = owner;
    CountDecision(checks_[group[j]], d);
  }
  return false;
}

std::string_view CheckBatch::OwnerName(const std::string& id) {
  if (id == first_owner_) return first_owner_;
  if (first_owner_.empty()) {
    first_owner_ = id;
    return first_owner_;
  }
  return owner_names_.emplace_front(id);
}

void CheckBatch::CountDecision(const PendingCheck& c, const limiter::Decision& d) {
  if (!d.allowed) all_allowed_ = false;
  if (c.counters == nullptr) return;
  if (!d.allowed) {
    c.counters->denied.fetch_add(1, std::memory_order_relaxed);
  } else if (d.would_deny && c.spec->mode == limiter::Mode::kShadow) {
    c.counters->shadow_denied.fetch_add(1, std::memory_order_relaxed);
  } else {
    c.counters->allowed.fetch_add(1, std::memory_order_relaxed);
  }
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
    if (c.spec->mode == limiter::Mode::kDynamic && !c.headroom_given)
      c.headroom = context_.headroom.Get(c.headroom_name, now);
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
  context_.store.Update(first.key, slots_, now, [w = &work](std::span<limiter::MergeState* const> states) {
    CheckBatch& b = *w->self;
    const size_t count = w->group.size();
    const limiter::ContributorId me = b.context_.contributor;
    const limiter::Hlc stamp = b.context_.hlc.Now(w->now);
    bool all = true;
    if (w->uniform) {
      const PendingCheck& c0 = b.checks_[w->group[0]];
      all = limiter::CheckAllMerged(b.specs_, states, me, stamp,
                                    limiter::Request{.cost = c0.cost, .now = w->now, .headroom = c0.headroom},
                                    b.group_decisions_);
    } else {
      // Mixed costs (or a reset): peek every limit first, then charge all only if all admit.
      for (size_t j = 0; j < count; ++j) {
        const PendingCheck& c = b.checks_[w->group[j]];
        if (c.reset) limiter::ResetMerged(*c.spec, *states[j], stamp);
        b.group_decisions_[j] = limiter::PeekMerged(
            *c.spec, *states[j], limiter::Request{.cost = c.cost, .now = w->now, .headroom = c.headroom});
        all = all && b.group_decisions_[j].allowed;
      }
      for (size_t j = 0; j < count; ++j) {
        const PendingCheck& c = b.checks_[w->group[j]];
        if (all || (c.spec->count_denied && !b.group_decisions_[j].allowed)) {
          b.group_decisions_[j] =
              limiter::CheckMerged(*c.spec, *states[j], me, stamp,
                                   limiter::Request{.cost = c.cost, .now = w->now, .headroom = c.headroom});
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
    decisions_[group[j]] = group_decisions_[j];
    CountDecision(checks_[group[j]], group_decisions_[j]);
  }
}

std::optional<ApiError> RefusalOf(const CheckRouter& router, std::string_view retry_hint) {
  if (!router.Routing()) {
    return ApiError{ErrorKind::kNotReady,
                    "the node has not joined the cluster yet: retry, or " + std::string(retry_hint)};
  }
  if (std::optional<CheckRouter::Refusal> why = router.RefusesChecks()) {
    return ApiError{ErrorKind::kUnavailable, why->message + "; " + std::string(retry_hint)};
  }
  return std::nullopt;
}

CheckBatch& CheckRounds::Round(size_t r) {
  while (rounds_.size() <= r) rounds_.push_back(std::make_unique<CheckBatch>(context_));
  return *rounds_[r];
}

void CheckRounds::Run(CheckRouter* router, std::shared_ptr<const void> owner, Done done) {
  if (router != nullptr && !rounds_.empty()) {
    if (auto refusal = RefusalOf(*router, "send the request to another node"))
      return done(std::move(refusal));
  }
  now_ = context_.clock();
  RunFrom(0, router, std::move(owner), std::move(done));
}

void CheckRounds::RunFrom(size_t r, CheckRouter* router, std::shared_ptr<const void> owner, Done done) {
  if (r >= rounds_.size()) return done(std::nullopt);
  CheckBatch& batch = *rounds_[r];
  if (router == nullptr) {
    if (auto error = batch.Run(now_, /*group_by_key=*/true)) return done(std::move(error));
    return RunFrom(r + 1, router, std::move(owner), std::move(done));
  }
  auto error = batch.RunRouted(now_, *router, [this, r, router, owner, done]() mutable {
    RunFrom(r + 1, router, std::move(owner), std::move(done));
  });
  if (error) done(std::move(error));
}

}  // namespace ringlimit::node
