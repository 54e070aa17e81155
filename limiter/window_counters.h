// Internal to limiter/: the two O(1) window-counter algorithms, fixed_window and
// sliding_window_approx. See judge.h for the view interface and docs/limiter.md for the layouts.
#ifndef RINGLIMIT_LIMITER_WINDOW_COUNTERS_H_
#define RINGLIMIT_LIMITER_WINDOW_COUNTERS_H_

#include <algorithm>
#include <cstdint>

#include "limiter/arith.h"
#include "limiter/judge.h"
#include "limiter/limiter.h"

namespace ringlimit::limiter::internal {

// Drops a tail left behind by sliding_log / sliding_window (freeing, never allocating).
inline void DropTail(State& state) {
  if (!state.tail.empty()) {
    std::vector<int64_t>().swap(state.tail);
  }
}

// fixed_window. State: word[0] = newest instant seen, word[1] = units counted in the window that
// contains word[0]; windows are [k*window, (k+1)*window) on the epoch. A count belongs to the
// window of the newest instant seen, so after a window-length change the usage is re-bucketed
// under the new length (conservatively: into the window of the newest instant).
class FixedWindowView {
 public:
  FixedWindowView(const LimitSpec& spec, const State& state, TimeNs now, const Capacities& caps)
      : window_(spec.window), store_cap_(caps.max * kCountDeniedFactor) {
    const bool mine = state.algorithm == Algorithm::kFixedWindow;
    const TimeNs last = mine ? state.word[0] : now;
    now_ = std::max(now, last);
    index_ = FloorDiv(now_, window_);
    count_ = (mine && FloorDiv(last, window_) == index_) ? std::min(AsCount(state.word[1]), store_cap_) : 0;
  }

  DurationNs TimeToFit(uint64_t cost, uint64_t cap) const {
    if (cost > cap) {
      return kNever;
    }
    if (count_ <= cap - cost) {
      return 0;
    }
    return UntilWindowEnd();
  }
  void Charge(uint64_t units) { count_ += std::min(units, store_cap_ - count_); }
  uint64_t Remaining(uint64_t cap) const { return count_ >= cap ? 0 : cap - count_; }
  TimeNs Now() const { return now_; }  // now' = max(now, newest instant in the state)
  DurationNs ResetAfter() const { return count_ == 0 ? 0 : UntilWindowEnd(); }
  void Store(State& state) const {
    DropTail(state);
    state.algorithm = Algorithm::kFixedWindow;
    state.word[0] = now_;
    state.word[1] = static_cast<int64_t>(count_);
    state.word[2] = 0;
  }

  uint64_t count() const { return count_; }

 private:
  DurationNs UntilWindowEnd() const {
    return SatDuration((static_cast<i128>(index_) + 1) * window_ - static_cast<i128>(now_));
  }

  DurationNs window_;
  uint64_t store_cap_;
  TimeNs now_;
  int64_t index_;
  uint64_t count_;
};

// anchored_window. State: word[0] = newest instant seen, word[1] = units counted in the current window,
// word[2] = the instant that window started. A window starts at the first request that charges at or
// after the end of the previous one and lasts `window`; a count belongs to the window it was charged in, so
// after a window-length change it is kept only while the window under the new length still runs.
class AnchoredWindowView {
 public:
  AnchoredWindowView(const LimitSpec& spec, const State& state, TimeNs now, const Capacities& caps)
      : window_(spec.window), store_cap_(caps.max * kCountDeniedFactor) {
    const bool mine = state.algorithm == Algorithm::kAnchoredWindow;
    now_ = std::max(now, mine ? state.word[0] : now);
    // A window runs once something was counted in it (a request that charges nothing starts none).
    const bool running = mine && state.word[1] > 0 && state.word[2] <= now_ &&
                         static_cast<i128>(now_) - state.word[2] < window_;
    start_ = running ? state.word[2] : now_;
    count_ = running ? std::min(AsCount(state.word[1]), store_cap_) : 0;
  }

  DurationNs TimeToFit(uint64_t cost, uint64_t cap) const {
    if (cost > cap) {
      return kNever;
    }
    if (count_ <= cap - cost) {
      return 0;
    }
    return UntilWindowEnd();  // a request then starts the next window
  }
  void Charge(uint64_t units) { count_ += std::min(units, store_cap_ - count_); }
  uint64_t Remaining(uint64_t cap) const { return count_ >= cap ? 0 : cap - count_; }
  TimeNs Now() const { return now_; }
  DurationNs ResetAfter() const { return count_ == 0 ? 0 : UntilWindowEnd(); }
  void Store(State& state) const {
    DropTail(state);
    state.algorithm = Algorithm::kAnchoredWindow;
    state.word[0] = now_;
    state.word[1] = static_cast<int64_t>(count_);
    state.word[2] = start_;
  }

  uint64_t count() const { return count_; }
  TimeNs start() const { return start_; }

 private:
  DurationNs UntilWindowEnd() const {
    return SatDuration(static_cast<i128>(start_) + window_ - static_cast<i128>(now_));
  }

  DurationNs window_;
  uint64_t store_cap_;
  TimeNs now_;
  TimeNs start_;
  uint64_t count_;
};

// sliding_window_approx. State: word[0] = newest instant seen, word[1] = units counted in the
// fixed window containing it ("current"), word[2] = units of the window before ("previous").
// Usage at now' = floor(previous * (window - elapsed) / window) + current, elapsed = time since the
// current window began. The weighted previous count is rounded down (seed 001's worked example
// needs that; see docs/limiter.md), so the error against an exact log is below one unit plus the
// uniform-rate assumption.
class ApproxView {
 public:
  ApproxView(const LimitSpec& spec, const State& state, TimeNs now, const Capacities& caps)
      : window_(spec.window), store_cap_(caps.max * kCountDeniedFactor) {
    const bool mine = state.algorithm == Algorithm::kSlidingWindowApprox;
    const TimeNs last = mine ? state.word[0] : now;
    now_ = std::max(now, last);
    index_ = FloorDiv(now_, window_);
    const int64_t last_index = FloorDiv(last, window_);
    cur_ = prev_ = 0;
    if (mine && last_index == index_) {
      cur_ = std::min(AsCount(state.word[1]), store_cap_);
      prev_ = std::min(AsCount(state.word[2]), store_cap_);
    } else if (mine && last_index == index_ - 1) {
      prev_ = std::min(AsCount(state.word[1]), store_cap_);
    }
    elapsed_ = static_cast<uint64_t>(static_cast<i128>(now_) - static_cast<i128>(index_) * window_);
    weighted_prev_ =
        prev_ == 0 ? 0 : static_cast<uint64_t>(Div(static_cast<u128>(prev_) * (window_ - elapsed_), window_));
  }

  DurationNs TimeToFit(uint64_t cost, uint64_t cap) const {
    if (cost > cap) {
      return kNever;
    }
    if (weighted_prev_ + cur_ <= cap - cost) {
      return 0;
    }
    const auto w = static_cast<uint64_t>(window_);
    const uint64_t to_window_end = w - elapsed_;
    if (cur_ <= cap - cost) {
      // Wait inside this window until floor(prev * (w - e) / w) <= cap - cur - cost.
      return static_cast<DurationNs>(WeightFallsAt(prev_, cap - cur_ - cost) - elapsed_);
    }
    // Next window: the current count becomes the previous one.
    return SatDuration(static_cast<i128>(to_window_end) + WeightFallsAt(cur_, cap - cost));
  }
  void Charge(uint64_t units) { cur_ += std::min(units, store_cap_ - cur_); }
  uint64_t Remaining(uint64_t cap) const {
    const uint64_t used = weighted_prev_ + cur_;
    return used >= cap ? 0 : cap - used;
  }
  TimeNs Now() const { return now_; }  // now' = max(now, newest instant in the state)
  DurationNs ResetAfter() const {
    const i128 start = static_cast<i128>(index_) * window_;
    if (cur_ > 0) {
      return SatDuration(start + 2 * static_cast<i128>(window_) - now_);
    }
    if (prev_ > 0) {
      return SatDuration(start + window_ - now_);
    }
    return 0;
  }
  void Store(State& state) const {
    DropTail(state);
    state.algorithm = Algorithm::kSlidingWindowApprox;
    state.word[0] = now_;
    state.word[1] = static_cast<int64_t>(cur_);
    state.word[2] = static_cast<int64_t>(prev_);
  }

 private:
  // Smallest elapsed time e in [0, w] with floor(count * (w - e) / w) <= allowed.
  uint64_t WeightFallsAt(uint64_t count, uint64_t allowed) const {
    const auto w = static_cast<uint64_t>(window_);
    if (count <= allowed) {
      return 0;
    }
    // floor(count*(w-e)/w) <= allowed  <=>  count*(w-e) < (allowed+1)*w  <=>  w-e <= m
    const u128 m = Div((static_cast<u128>(allowed) + 1) * w - 1, count);
    return m >= w ? 0 : w - static_cast<uint64_t>(m);
  }

  DurationNs window_;
  uint64_t store_cap_;
  TimeNs now_;
  int64_t index_;
  uint64_t elapsed_;
  uint64_t cur_;
  uint64_t prev_;
  uint64_t weighted_prev_;
};

}  // namespace ringlimit::limiter::internal

#endif  // RINGLIMIT_LIMITER_WINDOW_COUNTERS_H_
