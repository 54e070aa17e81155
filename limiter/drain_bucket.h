// Internal to limiter/: token_bucket, leaky_bucket and gcra, which are one mechanism seen three ways.
//
// The state is a level of used units that drains continuously at `limit` units per `window`:
//   token_bucket  capacity = burst (default limit); tokens available = capacity - level;
//   leaky_bucket  capacity = burst (default limit); level = water in the bucket; with max_delay a
//                 request that overflows is admitted once enough has leaked (the shaper's delay);
//   gcra          capacity = burst + 1; TAT = now + level * T with T = window / limit, and the
//                 seed's test "arrival >= TAT - delay_tolerance" is exactly level + cost <= burst + 1.
// Fractions of a unit are exact: the level is kept as whole units plus a remainder in 1/window
// units (level = whole + frac / window), and draining `elapsed` ns removes elapsed * limit / window
// units, i.e. elapsed * limit in those 1/window units. No rounding ever accumulates.
//
// State: word[0] = whole units, word[1] = frac (0 <= frac < window), word[2] = newest instant seen.
// Whole units are independent of the parameters, so after a parameter change the usage is preserved
// and clamped to the new maximum level (a frac >= the new window rounds up to a whole unit).
#ifndef RINGLIMIT_LIMITER_DRAIN_BUCKET_H_
#define RINGLIMIT_LIMITER_DRAIN_BUCKET_H_

#include <algorithm>
#include <cstdint>

#include "limiter/arith.h"
#include "limiter/judge.h"
#include "limiter/limiter.h"
#include "limiter/window_counters.h"

namespace ringlimit::limiter::internal {

class DrainView {
 public:
  DrainView(const LimitSpec& spec, const State& state, TimeNs now, const Capacities& caps)
      : algorithm_(spec.algorithm), window_(static_cast<uint64_t>(spec.window)), rate_(spec.limit) {
    // The fullest a bucket can get: the mode's largest capacity plus what the shaper may queue.
    max_level_ = static_cast<u128>(caps.max) * window_ + static_cast<u128>(caps.max_delay) * rate_;
    if (state.algorithm != spec.algorithm) {
      now_ = now;
      level_ = 0;
      return;
    }
    const TimeNs last = state.word[2];
    now_ = std::max(now, last);
    uint64_t whole = AsCount(state.word[0]);
    uint64_t frac = AsCount(state.word[1]);
    if (frac >= window_) {  // written under a shorter window: round up, never down
      frac = 0;
      whole = whole == UINT64_MAX ? whole : whole + 1;
    }
    const u128 level = std::min(static_cast<u128>(whole) * window_ + frac, max_level_);
    const u128 drained = static_cast<u128>(static_cast<i128>(now_) - last) * rate_;
    level_ = level > drained ? level - drained : 0;
  }

  DurationNs TimeToFit(uint64_t cost, uint64_t cap) const {
    if (cost > cap) {
      return kNever;
    }
    const u128 need = level_ + static_cast<u128>(cost) * window_;
    const u128 room = static_cast<u128>(cap) * window_;
    if (need <= room) {
      return 0;
    }
    return SatDuration(static_cast<i128>(CeilDiv(need - room, rate_)));
  }
  void Charge(uint64_t units) {
    if (units == 0) {
      return;
    }
    level_ = std::min(level_ + static_cast<u128>(units) * window_, max_level_);
  }
  uint64_t Remaining(uint64_t cap) const {
    const u128 room = static_cast<u128>(cap) * window_;
    return level_ >= room ? 0 : SatU64(Div(room - level_, window_));
  }
  TimeNs Now() const { return now_; }  // now' = max(now, newest instant in the state)
  DurationNs ResetAfter() const { return SatDuration(static_cast<i128>(CeilDiv(level_, rate_))); }
  void Store(State& state) const {
    DropTail(state);
    const u128 whole = Div(level_, window_);
    state.algorithm = algorithm_;
    state.word[0] = static_cast<int64_t>(whole);
    state.word[1] = static_cast<int64_t>(level_ - whole * window_);
    state.word[2] = now_;
  }

 private:
  Algorithm algorithm_;
  uint64_t window_;  // level unit: 1/window of a unit
  uint64_t rate_;    // drained per ns, in level units (= limit)
  u128 max_level_;
  TimeNs now_;
  u128 level_;  // units * window
};

}  // namespace ringlimit::limiter::internal

#endif  // RINGLIMIT_LIMITER_DRAIN_BUCKET_H_
