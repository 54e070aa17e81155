// Dispatch from the public API to the algorithm views (judge.h describes the view interface).
#include "limiter/limiter.h"

#include "limiter/arith.h"
#include "limiter/dispatch.h"
#include "limiter/judge.h"

namespace ringlimit::limiter {
namespace {

using internal::Capacities;
using internal::ComputeCapacities;
using internal::Verdict;
using internal::WithView;

// Judges one limit alone and, when `store` is given, charges it: admitted requests are charged,
// denied ones only with count_denied.
Decision Evaluate(const LimitSpec& spec, const State& state, const Request& request, State* store) {
  const Capacities caps = ComputeCapacities(spec, request.headroom);
  return WithView(spec, state, request.now, caps, [&](auto& view) {
    const Verdict v = internal::Judge(view, spec.mode, caps, request.cost);
    const uint64_t units = internal::ChargeUnits(v, v.allowed, spec.count_denied, request.cost);
    Decision d = internal::Decide(view, v, caps, spec.limit, units);
    if (store != nullptr && units > 0) {
      view.Store(*store);
    }
    return d;
  });
}

}  // namespace

Decision Check(const LimitSpec& spec, State& state, const Request& request) {
  return Evaluate(spec, state, request, &state);
}

Decision Peek(const LimitSpec& spec, const State& state, const Request& request) {
  return Evaluate(spec, state, request, nullptr);
}

bool CheckAll(std::span<const LimitSpec* const> specs, std::span<State* const> states, const Request& request,
              std::span<Decision> decisions) {
  // Pass 1: every limit's own verdict, nothing changed.
  bool admitted = true;
  for (size_t i = 0; i < specs.size(); ++i) {
    const Capacities caps = ComputeCapacities(*specs[i], request.headroom);
    admitted &= WithView(*specs[i], *states[i], request.now, caps, [&](auto& view) {
      return internal::Judge(view, specs[i]->mode, caps, request.cost).allowed;
    });
  }
  // Pass 2: charge all (admitted) or only the count_denied limits (denied), and fill the figures.
  for (size_t i = 0; i < specs.size(); ++i) {
    const LimitSpec& spec = *specs[i];
    State& state = *states[i];
    const Capacities caps = ComputeCapacities(spec, request.headroom);
    decisions[i] = WithView(spec, state, request.now, caps, [&](auto& view) {
      const Verdict v = internal::Judge(view, spec.mode, caps, request.cost);
      const uint64_t units = internal::ChargeUnits(v, admitted, spec.count_denied, request.cost);
      Decision d = internal::Decide(view, v, caps, spec.limit, units);
      if (units > 0) {
        view.Store(state);
      }
      return d;
    });
  }
  return admitted;
}

TimeNs IdleAt(const LimitSpec& spec, const State& state) {
  if (state.algorithm != spec.algorithm) {
    return internal::kMinTime;  // already initial for this spec
  }
  return internal::IdleAtWith(spec, state, ComputeCapacities(spec, 0.));
}

TimeNs internal::IdleAtWith(const LimitSpec& spec, const State& state, const Capacities& caps) {
  if (state.algorithm != spec.algorithm) {
    return internal::kMinTime;
  }
  // Judged at the state's own newest instant (the views never go back before it).
  return WithView(spec, state, internal::kMinTime, caps, [&](auto& view) {
    return internal::SatTime(static_cast<internal::i128>(view.Now()) + view.ResetAfter());
  });
}

}  // namespace ringlimit::limiter
