#include "node/api/forwarded.h"

#include "node/api/api_context.h"
#include "node/api/check_engine.h"

namespace ringlimit::node {

void SpecToProto(const limiter::LimitSpec& spec, state::LimitSpec* out) {
  out->set_algorithm(static_cast<state::Algorithm>(spec.algorithm));
  out->set_limit(spec.limit);
  out->set_window_ns(spec.window);
  out->set_burst(spec.burst);
  out->set_buckets(spec.buckets);
  out->set_max_delay_ns(spec.max_delay);
  out->set_mode(static_cast<state::Mode>(spec.mode));
  out->set_soft_pct(spec.soft_pct);
  out->set_dynamic_limit(spec.dynamic_limit);
  out->set_count_denied(spec.count_denied);
}

std::optional<limiter::LimitSpec> SpecFromProto(const state::LimitSpec& in) {
  if (in.algorithm() < state::ALGORITHM_FIXED_WINDOW || in.algorithm() > state::ALGORITHM_GCRA ||
      in.mode() < state::MODE_HARD || in.mode() > state::MODE_DYNAMIC) {
    return std::nullopt;
  }
  limiter::LimitSpec spec;
  spec.algorithm = static_cast<limiter::Algorithm>(in.algorithm());
  spec.limit = in.limit();
  spec.window = in.window_ns();
  spec.burst = in.burst();
  spec.buckets = in.buckets();
  spec.max_delay = in.max_delay_ns();
  spec.mode = static_cast<limiter::Mode>(in.mode());
  spec.soft_pct = in.soft_pct();
  spec.dynamic_limit = in.dynamic_limit();
  spec.count_denied = in.count_denied();
  if (limiter::Validate(spec).has_value()) return std::nullopt;
  return spec;
}

void DecisionToProto(const limiter::Decision& d, peer::LimitDecision* out) {
  out->set_allowed(d.allowed);
  out->set_would_deny(d.would_deny);
  out->set_beyond_limit(d.beyond_limit);
  out->set_limit(d.limit);
  out->set_remaining(d.remaining);
  out->set_reset_after_ns(d.reset_after);
  out->set_retry_after_ns(d.retry_after);
  out->set_delay_ns(d.delay);
}

limiter::Decision DecisionFromProto(const peer::LimitDecision& in) {
  limiter::Decision d;
  d.allowed = in.allowed();
  d.would_deny = in.would_deny();
  d.beyond_limit = in.beyond_limit();
  d.limit = in.limit();
  d.remaining = in.remaining();
  d.reset_after = in.reset_after_ns();
  d.retry_after = in.retry_after_ns();
  d.delay = in.delay_ns();
  return d;
}

namespace {

// Why `check` cannot be decided, or nullopt.
std::optional<std::string> Invalid(const ApiContext& context, const peer::ForwardedCheck& check) {
  if (check.key().empty() || check.key().size() > context.options.max_key_bytes) return "bad key length";
  if (check.limits_size() == 0) return "no limits";
  if (static_cast<size_t>(check.limits_size()) > context.options.max_checks) return "too many limits";
  for (const peer::NamedLimit& limit : check.limits()) {
    if (limit.name().empty() || limit.name().size() > context.options.max_name_bytes) return "bad limit name";
    const uint64_t cost = limit.has_cost() ? limit.cost() : check.cost();
    if (cost > limiter::kMaxCost) return "cost too large";
  }
  return std::nullopt;
}

}  // namespace

peer::ForwardCheckResponse DecideForwarded(const ApiContext& context,
                                           const peer::ForwardCheckRequest& request,
                                           std::string_view self_id) {
  peer::ForwardCheckResponse response;
  response.set_from(self_id.data(), self_id.size());
  const int n = request.checks_size();
  // One batch per check: a check is one key, charged all-or-nothing, and an invalid one must not
  // stop the others.
  for (int i = 0; i < n; ++i) {
    const peer::ForwardedCheck& check = request.checks(i);
    peer::ForwardedResult* result = response.add_results();
    result->set_check_id(check.check_id());
    result->set_owner(self_id.data(), self_id.size());
    std::optional<std::string> invalid = Invalid(context, check);
    CheckBatch batch(context);
    for (int j = 0; j < check.limits_size() && !invalid; ++j) {
      const peer::NamedLimit& limit = check.limits(j);
      std::optional<limiter::LimitSpec> spec = SpecFromProto(limit.spec());
      if (!spec) {
        invalid = "limit " + limit.name() + ": invalid spec";
        break;
      }
      batch.AddResolved(check.key(), limit.name(), *spec, limit.has_cost() ? limit.cost() : check.cost(),
                        limit.has_headroom() ? limit.headroom() : check.headroom(), limit.reset(),
                        static_cast<size_t>(j));
    }
    if (!invalid) {
      if (auto error = batch.Run(context.clock(), /*group_by_key=*/true)) invalid = error->message;
    }
    if (invalid) {
      result->set_status(peer::CHECK_INVALID);
      result->set_error(*invalid);
      continue;
    }
    result->set_status(peer::CHECK_OK);
    result->set_allowed(batch.all_allowed());
    for (const limiter::Decision& d : batch.decisions()) DecisionToProto(d, result->add_decisions());
  }
  return response;
}

}  // namespace ringlimit::node
