// Internal to limiter/: the two algorithms whose state grows with a parameter and lives in
// State::tail: sliding_log (one timestamp per unit) and sliding_window (one counter per bucket).
#ifndef RINGLIMIT_LIMITER_LOG_VIEWS_H_
#define RINGLIMIT_LIMITER_LOG_VIEWS_H_

#include <cstddef>
#include <cstdint>

#include "limiter/judge.h"
#include "limiter/limiter.h"

namespace ringlimit::limiter::internal {

// sliding_log. State: tail = timestamps in ascending order, one per counted unit; word[2] = newest
// instant seen. A unit stamped t counts at now' while now' - t < window. Under a new window the
// timestamps are simply re-judged; at most kCountDeniedFactor * max units are kept (oldest dropped).
class SlidingLogView {
 public:
  SlidingLogView(const LimitSpec& spec, const State& state, TimeNs now, const Capacities& caps);

  DurationNs TimeToFit(uint64_t cost, uint64_t cap) const;
  void Charge(uint64_t units);
  uint64_t Remaining(uint64_t cap) const;
  TimeNs Now() const { return now_; }  // now' = max(now, newest instant in the state)
  DurationNs ResetAfter() const;
  void Store(State& state) const;

 private:
  const State& state_;  // read in the constructor and by TimeToFit/ResetAfter/Store
  bool mine_;
  DurationNs window_;
  uint64_t store_cap_;
  TimeNs now_;
  size_t first_ = 0;  // index in tail of the oldest unit still inside the window
  uint64_t live_ = 0;
  uint64_t charged_ = 0;
};

// sliding_window. The window is split into `buckets` buckets of width w = ceil(window / buckets)
// aligned on the epoch; usage = sum of the bucket containing now' and the buckets - 1 before it.
// State: word[0] = newest instant seen, word[1] = sum of the stored counters, tail[0] = w,
// tail[1 + (k mod buckets)] = units counted in bucket k. When `buckets` or w changed, the stored
// total is carried into the bucket of the newest instant seen (usage preserved, never minted).
class SlidingWindowView {
 public:
  SlidingWindowView(const LimitSpec& spec, const State& state, TimeNs now, const Capacities& caps);

  DurationNs TimeToFit(uint64_t cost, uint64_t cap) const;
  void Charge(uint64_t units);
  uint64_t Remaining(uint64_t cap) const;
  TimeNs Now() const { return now_; }  // now' = max(now, newest instant in the state)
  DurationNs ResetAfter() const;
  void Store(State& state) const;

 private:
  uint64_t Counter(int64_t bucket) const;  // stored units of bucket index `bucket`, if still held
  DurationNs UntilExpiry(int64_t bucket) const;

  const State& state_;
  int64_t n_;     // buckets
  DurationNs w_;  // bucket width
  bool mine_;     // state written by sliding_window with the same layout
  bool carried_;  // state written by sliding_window with another layout: total carried over
  uint64_t carried_total_ = 0;
  uint64_t store_cap_;
  TimeNs now_;
  int64_t k_now_;
  int64_t k_last_ = 0;
  uint64_t live_ = 0;
  uint64_t charged_ = 0;
};

}  // namespace ringlimit::limiter::internal

#endif  // RINGLIMIT_LIMITER_LOG_VIEWS_H_
