// Test-only helpers shared by the limiter tests.
#ifndef RINGLIMIT_LIMITER_TEST_UTIL_H_
#define RINGLIMIT_LIMITER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <ostream>
#include <string>
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
      Algorithm::kGcra,          Algorithm::kAnchoredWindow,
  };
  return all;
}

// Level of a token_bucket / leaky_bucket / gcra state in thousandths of a unit, as of the state's
// newest instant (word[0] whole units + word[1] / window).
inline int64_t LevelMilli(const State& state, DurationNs window) {
  return state.word[0] * 1000 + static_cast<int64_t>(static_cast<__int128>(state.word[1]) * 1000 / window);
}

// "sliding_window_approx" -> "SlidingWindowApprox", for parameterised test names.
inline std::string CamelName(Algorithm a) {
  std::string out;
  bool upper = true;
  for (char c : AlgorithmName(a)) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}

inline std::string ParamName(const ::testing::TestParamInfo<Algorithm>& info) {
  return CamelName(info.param);
}

}  // namespace ringlimit::limiter::testing

namespace ringlimit::limiter {
// Lets GoogleTest print an Algorithm by name.
inline void PrintTo(Algorithm a, std::ostream* os) { *os << AlgorithmName(a); }
}  // namespace ringlimit::limiter

#endif  // RINGLIMIT_LIMITER_TEST_UTIL_H_
