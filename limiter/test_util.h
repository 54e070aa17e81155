// Test-only helpers shared by the limiter tests.
#ifndef RINGLIMIT_LIMITER_TEST_UTIL_H_
#define RINGLIMIT_LIMITER_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "limiter/limiter.h"

namespace ringlimit::limiter::testing {

inline constexpr DurationNs kMinute = 60 * kSecond;
inline constexpr DurationNs kHour = 60 * kMinute;

// Clock time h:m:s(.ms) on a day that starts at `day` (ns since the epoch).
inline TimeNs Clock(TimeNs day, int h, int m, int s, int ms = 0) {
  return day + h * kHour + m * kMinute + s * kSecond + ms * kMillisecond;
}

inline LimitSpec Spec(Algorithm algorithm, uint64_t limit, DurationNs window) {
  LimitSpec spec;
  spec.algorithm = algorithm;
  spec.limit = limit;
  spec.window = window;
  return spec;
}

inline Request At(TimeNs now, uint64_t cost = 1) {
  Request r;
  r.now = now;
  r.cost = cost;
  return r;
}

inline const std::vector<Algorithm>& AllAlgorithms() {
  static const std::vector<Algorithm> all = {
      Algorithm::kFixedWindow,   Algorithm::kSlidingLog,
      Algorithm::kSlidingWindow, Algorithm::kSlidingWindowApprox,
      Algorithm::kTokenBucket,   Algorithm::kLeakyBucket,
      Algorithm::kGcra,
  };
  return all;
}

// Level of a token_bucket / leaky_bucket / gcra state in thousandths of a unit, as of the state's
// newest instant (word[0] whole units + word[1] / window).
inline int64_t LevelMilli(const State& state, DurationNs window) {
  return state.word[0] * 1000 + static_cast<int64_t>(static_cast<__int128>(state.word[1]) * 1000 / window);
}

}  // namespace ringlimit::limiter::testing

#endif  // RINGLIMIT_LIMITER_TEST_UTIL_H_
