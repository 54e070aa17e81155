// sliding_window: counters per sub-bucket, the last `buckets` of them decide (see log_views.h).
#include <algorithm>

#include "limiter/arith.h"
#include "limiter/log_views.h"

namespace ringlimit::limiter::internal {
namespace {

size_t Slot(int64_t bucket, int64_t n) {
  int64_t r = bucket % n;
  if (r < 0) {
    r += n;
  }
  return static_cast<size_t>(r) + 1;  // tail[0] holds the bucket width
}

}  // namespace

SlidingWindowView::SlidingWindowView(const LimitSpec& spec, const State& state, TimeNs now,
                                     const Capacities& caps)
    : state_(state),
      n_(spec.buckets),
      w_(spec.window / spec.buckets + (spec.window % spec.buckets != 0 ? 1 : 0)),
      store_cap_(caps.max * kCountDeniedFactor),
      now_(now) {
  const bool same_algorithm = state.algorithm == Algorithm::kSlidingWindow;
  mine_ = same_algorithm && state.tail.size() == static_cast<size_t>(n_) + 1 && state.tail[0] == w_;
  carried_ = same_algorithm && !mine_;
  if (same_algorithm) {
    now_ = std::max(now_, state.word[0]);
  }
  k_now_ = FloorDiv(now_, w_);
  if (!same_algorithm) {
    return;
  }
  k_last_ = FloorDiv(state.word[0], w_);
  const i128 age = static_cast<i128>(k_now_) - k_last_;  // in buckets, >= 0
  if (age >= n_) {
    return;  // everything stored has left the window
  }
  if (carried_) {
    carried_total_ = std::min(AsCount(state.word[1]), store_cap_);
    live_ = carried_total_;
    return;
  }
  // Buckets k_last - n + 1 .. k_now - n have left the window since the state was written.
  uint64_t expired = 0;
  for (int64_t k = k_last_ - n_ + 1; k <= k_now_ - n_; ++k) {
    expired += AsCount(state.tail[Slot(k, n_)]);
  }
  const uint64_t total = AsCount(state.word[1]);
  live_ = std::min(total >= expired ? total - expired : 0, store_cap_);
}

uint64_t SlidingWindowView::Counter(int64_t bucket) const {
  if (bucket > k_last_ || bucket <= k_last_ - n_ || bucket <= k_now_ - n_) {
    return 0;
  }
  if (carried_) {
    return bucket == k_last_ ? carried_total_ : 0;
  }
  if (!mine_) {
    return 0;
  }
  return AsCount(state_.tail[Slot(bucket, n_)]);
}

DurationNs SlidingWindowView::UntilExpiry(int64_t bucket) const {
  return SatDuration((static_cast<i128>(bucket) + n_) * w_ - now_);
}

DurationNs SlidingWindowView::TimeToFit(uint64_t cost, uint64_t cap) const {
  if (cost > cap) {
    return kNever;
  }
  if (live_ <= cap - cost) {
    return 0;
  }
  const uint64_t need = live_ + cost - cap;  // units that must leave the window first
  uint64_t freed = 0;
  for (int64_t k = k_now_ - n_ + 1; k <= k_now_; ++k) {
    freed += Counter(k);
    if (freed >= need) {
      return UntilExpiry(k);
    }
  }
  return UntilExpiry(k_now_);  // unreachable unless the counters disagree with the total
}

void SlidingWindowView::Charge(uint64_t units) { charged_ += std::min(units, store_cap_ - live_ - charged_); }

uint64_t SlidingWindowView::Remaining(uint64_t cap) const {
  const uint64_t used = live_ + charged_;
  return used >= cap ? 0 : cap - used;
}

DurationNs SlidingWindowView::ResetAfter() const {
  if (charged_ > 0) {
    return UntilExpiry(k_now_);
  }
  if (live_ == 0) {
    return 0;
  }
  for (int64_t k = std::min(k_now_, k_last_); k > k_now_ - n_; --k) {
    if (Counter(k) > 0) {
      return UntilExpiry(k);
    }
  }
  return 0;
}

void SlidingWindowView::Store(State& state) const {
  auto& tail = state.tail;
  uint64_t total = 0;
  if (mine_) {
    total = AsCount(state.word[1]);
    const int64_t age = k_now_ - k_last_;
    if (age >= n_) {
      std::fill(tail.begin() + 1, tail.end(), 0);
      total = 0;
    } else {
      for (int64_t k = k_last_ + 1; k <= k_now_; ++k) {  // reuse the slots of expired buckets
        int64_t& slot = tail[Slot(k, n_)];
        total -= std::min(total, AsCount(slot));
        slot = 0;
      }
    }
  } else {
    tail.assign(static_cast<size_t>(n_) + 1, 0);
    tail[0] = w_;
    if (carried_ && live_ > 0) {
      tail[Slot(k_last_, n_)] = static_cast<int64_t>(carried_total_);
      total = carried_total_;
    }
  }
  tail[Slot(k_now_, n_)] += static_cast<int64_t>(charged_);
  total += charged_;
  state.algorithm = Algorithm::kSlidingWindow;
  state.word[0] = now_;
  state.word[1] = static_cast<int64_t>(total);
  state.word[2] = 0;
}

}  // namespace ringlimit::limiter::internal
