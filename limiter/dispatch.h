// Internal to limiter/: from an Algorithm to its view class (judge.h describes the view interface).
// Shared by the plain entry points (limiter.cc) and the mergeable state (merge.cc).
#ifndef RINGLIMIT_LIMITER_DISPATCH_H_
#define RINGLIMIT_LIMITER_DISPATCH_H_

#include "limiter/drain_bucket.h"
#include "limiter/judge.h"
#include "limiter/limiter.h"
#include "limiter/log_views.h"
#include "limiter/window_counters.h"

namespace ringlimit::limiter::internal {

// Calls fn(view) with the view of spec.algorithm over `state` at `now`.
template <class Fn>
auto WithView(const LimitSpec& spec, const State& state, TimeNs now, const Capacities& caps, Fn&& fn) {
  switch (spec.algorithm) {
    case Algorithm::kFixedWindow: {
      FixedWindowView v(spec, state, now, caps);
      return fn(v);
    }
    case Algorithm::kAnchoredWindow: {
      AnchoredWindowView v(spec, state, now, caps);
      return fn(v);
    }
    case Algorithm::kSlidingLog: {
      SlidingLogView v(spec, state, now, caps);
      return fn(v);
    }
    case Algorithm::kSlidingWindow: {
      SlidingWindowView v(spec, state, now, caps);
      return fn(v);
    }
    case Algorithm::kSlidingWindowApprox: {
      ApproxView v(spec, state, now, caps);
      return fn(v);
    }
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
    case Algorithm::kGcra:
      break;
  }
  // The drain buckets -- and, never reached because Validate rejects them, values with no enumerator.
  DrainView v(spec, state, now, caps);
  return fn(v);
}

}  // namespace ringlimit::limiter::internal

#endif  // RINGLIMIT_LIMITER_DISPATCH_H_
