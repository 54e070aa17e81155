#include "node/service/forwarded.h"

#include "base/status.h"
#include "limiter/spec_wire.h"
#include "node/service/check_engine.h"
#include "node/service/check_service.h"

namespace ringlimit::node {

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

// Whether `check` can be decided: OK, or InvalidArgument saying why not.
Status Validate(const CheckService& context, const peer::ForwardedCheck& check) {
  if (check.key().empty() || check.key().size() > context.options.max_key_bytes) {
    return Status::InvalidArgument("bad key length");
  }
  if (check.limits_size() == 0) return Status::InvalidArgument("no limits");
  if (static_cast<size_t>(check.limits_size()) > context.options.max_checks) {
    return Status::InvalidArgument("too many limits");
  }
  for (const peer::NamedLimit& limit : check.limits()) {
    if (limit.name().empty() || limit.name().size() > context.options.max_name_bytes) {
      return Status::InvalidArgument("bad limit name");
    }
    const uint64_t cost = limit.has_cost() ? limit.cost() : check.cost();
    if (cost > limiter::kMaxCost) return Status::InvalidArgument("cost too large");
  }
  return Status::OK();
}

}  // namespace

peer::ForwardCheckResponse DecideForwarded(const CheckService& context,
                                           const peer::ForwardCheckRequest& request,
                                           std::string_view self_id) {
  peer::ForwardCheckResponse response;
  DecideForwarded(context, request, self_id, &response);
  return response;
}

Result<std::string> DecideForwarded(const CheckService& context, std::string_view payload,
                                    std::string_view self_id) {
  peer::ForwardCheckRequest request;
  if (!request.ParseFromArray(payload.data(), static_cast<int>(payload.size())))
    return Status::Corruption("forwarded checks", "the payload is no peer.ForwardCheckRequest");
  return DecideForwarded(context, request, self_id).SerializeAsString();
}

void DecideForwarded(const CheckService& context, const peer::ForwardCheckRequest& request,
                     std::string_view self_id, peer::ForwardCheckResponse* response_out) {
  thread_local std::vector<ForwardedOutcome> outcomes;
  DecideForwarded(context, request, self_id, outcomes);
  peer::ForwardCheckResponse& response = *response_out;
  response.set_from(self_id.data(), self_id.size());
  for (const ForwardedOutcome& o : outcomes) {
    peer::ForwardedResult* result = response.add_results();
    result->set_check_id(o.check_id);
    result->set_status(o.status);
    result->set_owner(o.owner);
    result->set_allowed(o.allowed);
    for (const limiter::Decision& d : o.decisions) DecisionToProto(d, result->add_decisions());
    result->set_error(o.error);
  }
}

void DecideForwarded(const CheckService& context, const peer::ForwardCheckRequest& request,
                     std::string_view self_id, std::vector<ForwardedOutcome>& outcomes) {
  const int n = request.checks_size();
  outcomes.resize(static_cast<size_t>(n));
  // One batch per check: a check is one key, charged all-or-nothing, and an invalid one must not
  // stop the others.
  for (int i = 0; i < n; ++i) {
    const peer::ForwardedCheck& check = request.checks(i);
    ForwardedOutcome& result = outcomes[static_cast<size_t>(i)];
    result.check_id = check.check_id();
    result.owner.assign(self_id);
    result.allowed = false;
    result.decisions.clear();
    result.error.clear();
    Status invalid = Validate(context, check);
    CheckBatch batch(context);
    for (int j = 0; j < check.limits_size() && invalid.ok(); ++j) {
      const peer::NamedLimit& limit = check.limits(j);
      Result<limiter::LimitSpec> spec = limiter::SpecFromProto(limit.spec());
      if (!spec.ok()) {
        invalid = Status::InvalidArgument("limit " + limit.name(), "invalid spec");
        break;
      }
      batch.AddResolved(check.key(), limit.name(), *spec, limit.has_cost() ? limit.cost() : check.cost(),
                        limit.has_headroom() ? limit.headroom() : check.headroom(), limit.reset(),
                        static_cast<size_t>(j));
    }
    if (invalid.ok()) {
      if (auto error = batch.Run(context.clock(), /*group_by_key=*/true)) {
        invalid = Status::InvalidArgument(error->message);
      }
    }
    if (!invalid.ok()) {
      result.status = peer::CHECK_INVALID;
      result.error = invalid.message();
      continue;
    }
    result.status = peer::CHECK_OK;
    result.allowed = batch.all_allowed();
    result.decisions.assign(batch.decisions().begin(), batch.decisions().end());
  }
}

}  // namespace ringlimit::node
