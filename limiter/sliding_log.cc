// sliding_log: an exact log of one timestamp per admitted unit (see log_views.h).
#include <algorithm>

#include "limiter/arith.h"
#include "limiter/log_views.h"

namespace ringlimit::limiter::internal {

SlidingLogView::SlidingLogView(const LimitSpec& spec, const State& state, TimeNs now, const Capacities& caps)
    : state_(state),
      mine_(state.algorithm == Algorithm::kSlidingLog),
      window_(spec.window),
      store_cap_(caps.max * kCountDeniedFactor),
      now_(now) {
  if (!mine_) {
    return;
  }
  now_ = std::max(now_, state.word[2]);
  if (!state.tail.empty()) {
    now_ = std::max(now_, state.tail.back());
  }
  // Units stamped before `oldest` have left the window.
  const TimeNs oldest = SatTime(static_cast<i128>(now_) - window_ + 1);
  first_ = static_cast<size_t>(std::lower_bound(state.tail.begin(), state.tail.end(), oldest) -
                               state.tail.begin());
  live_ = state.tail.size() - first_;
  if (live_ > store_cap_) {  // more than the limit can hold (a parameter change): keep the newest
    first_ += live_ - store_cap_;
    live_ = store_cap_;
  }
}

DurationNs SlidingLogView::TimeToFit(uint64_t cost, uint64_t cap) const {
  if (cost > cap) {
    return kNever;
  }
  if (live_ <= cap - cost) {
    return 0;
  }
  // The (live + cost - cap)-th oldest unit must leave the window; live + cost - cap <= live.
  const TimeNs stamp = state_.tail[first_ + (live_ + cost - cap) - 1];
  return SatDuration(static_cast<i128>(stamp) + window_ - now_);
}

void SlidingLogView::Charge(uint64_t units) { charged_ += std::min(units, store_cap_ - live_ - charged_); }

uint64_t SlidingLogView::Remaining(uint64_t cap) const {
  const uint64_t used = live_ + charged_;
  return used >= cap ? 0 : cap - used;
}

DurationNs SlidingLogView::ResetAfter() const {
  if (charged_ > 0) {
    return window_;
  }
  if (live_ == 0) {
    return 0;
  }
  return SatDuration(static_cast<i128>(state_.tail.back()) + window_ - now_);
}

void SlidingLogView::Store(State& state) const {
  if (!mine_) {
    state.tail.clear();
  } else {
    state.tail.erase(state.tail.begin(), state.tail.begin() + static_cast<std::ptrdiff_t>(first_));
  }
  state.tail.insert(state.tail.end(), charged_, now_);
  state.algorithm = Algorithm::kSlidingLog;
  state.word[0] = state.word[1] = 0;
  state.word[2] = now_;
}

}  // namespace ringlimit::limiter::internal
