// Internal to limiter/: the part of a decision that is the same for every algorithm.
//
// Each algorithm is a "view" class: constructed from (spec, state, now, capacities), it normalises
// the stored state to the instant `now` (time never goes backwards: now' = max(now, newest instant
// recorded in the state)) without changing the State, and offers:
//   DurationNs TimeToFit(uint64_t cost, uint64_t cap) const
//       0 when `cost` more units fit under `cap` now, kNever when cost > cap, else the time until
//       they fit if nothing else is charged;
//   void Charge(uint64_t units)                 charge the view (clamped to what the state can hold);
//   uint64_t Remaining(uint64_t cap) const      units still admissible now under `cap`;
//   DurationNs ResetAfter() const               until the state is back to initial;
//   void Store(State&) const                    write the charged view back.
// Judge() turns TimeToFit() answers into a verdict under the limit's mode; Decide() charges and
// fills the Decision figures.
#ifndef RINGLIMIT_LIMITER_JUDGE_H_
#define RINGLIMIT_LIMITER_JUDGE_H_

#include <algorithm>
#include <cstdint>

#include "limiter/limiter.h"

namespace ringlimit::limiter::internal {

// Capacities of one limit in units of cost, for one request.
struct Capacities {
  uint64_t base = 0;         // the limit proper: limit, or the bucket size (burst; gcra burst + 1)
  uint64_t now = 0;          // what the mode admits for this request (soft / dynamic headroom)
  uint64_t max = 0;          // the most the mode can ever admit (dynamic with headroom 1)
  DurationNs max_delay = 0;  // shaping allowance (leaky_bucket only, else 0)
};

// Window algorithms keep counting denied units (count_denied) up to this multiple of `max`, so a
// hammering caller stays locked out while memory stays bounded.
inline constexpr uint64_t kCountDeniedFactor = 2;

// REQUIRES: Validate(spec) is nullopt.
Capacities ComputeCapacities(const LimitSpec& spec, double headroom);

// IdleAt (limiter.h) with the capacities at headroom 0 already computed.
TimeNs IdleAtWith(const LimitSpec& spec, const State& state, const Capacities& caps);

struct Verdict {
  bool allowed = false;       // Decision::allowed
  bool would_deny = false;    // Decision::would_deny
  bool beyond_limit = false;  // Decision::beyond_limit
  bool admits = false;        // the limit itself admits (charge when the whole request is admitted)
  bool impossible = false;    // cost > capacities.max: never admitted, never charged
  DurationNs delay = 0;
  DurationNs retry_after = 0;
};

template <class View>
Verdict Judge(const View& view, Mode mode, const Capacities& caps, uint64_t cost) {
  Verdict v;
  if (cost == 0) {  // a read-only peek: always allowed, charges nothing
    v.allowed = true;
    return v;
  }
  v.impossible = cost > caps.max;
  const DurationNs hard_wait = view.TimeToFit(cost, caps.base);
  const bool hard_ok = hard_wait <= caps.max_delay;
  if (mode == Mode::kShadow) {
    v.allowed = true;
    v.would_deny = !hard_ok;
    v.admits = hard_ok;
    v.delay = hard_ok ? hard_wait : 0;
    return v;
  }
  if (hard_ok) {
    v.allowed = v.admits = true;
    v.delay = hard_wait;
    return v;
  }
  if (caps.now > caps.base) {  // soft, or dynamic with headroom: a higher ceiling for this request
    const DurationNs wait = view.TimeToFit(cost, caps.now);
    if (wait <= caps.max_delay) {
      v.allowed = v.admits = v.beyond_limit = true;
      v.delay = wait;
      return v;
    }
  }
  v.would_deny = true;
  if (v.impossible) {
    v.retry_after = kNever;
  } else if (cost > caps.now) {
    // Dynamic mode, cost above the ceiling of the current headroom: report when it could pass
    // with full headroom (at least 1 ns: it is not admitted now).
    v.retry_after = std::max<DurationNs>(1, view.TimeToFit(cost, caps.max) - caps.max_delay);
  } else {
    v.retry_after = view.TimeToFit(cost, caps.now) - caps.max_delay;
  }
  return v;
}

// Units to charge given the verdict and whether the whole request (all limits) was admitted.
inline uint64_t ChargeUnits(const Verdict& v, bool request_admitted, bool count_denied, uint64_t cost) {
  if (cost == 0 || v.impossible) {
    return 0;
  }
  if (request_admitted && v.admits) {
    return cost;
  }
  return count_denied ? cost : 0;
}

// Charges `units` on the view and fills the Decision. Does not store.
template <class View>
Decision Decide(View& view, const Verdict& v, const Capacities& caps, uint64_t limit, uint64_t units) {
  view.Charge(units);
  Decision d;
  d.allowed = v.allowed;
  d.would_deny = v.would_deny;
  d.beyond_limit = v.beyond_limit && units > 0;
  d.limit = limit;
  d.remaining = view.Remaining(caps.base);
  d.reset_after = view.ResetAfter();
  d.retry_after = v.allowed ? 0 : v.retry_after;
  d.delay = (units > 0 && v.admits) ? v.delay : 0;
  return d;
}

}  // namespace ringlimit::limiter::internal

#endif  // RINGLIMIT_LIMITER_JUDGE_H_
