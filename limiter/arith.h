// Internal to limiter/: overflow-safe integer helpers shared by the algorithms.
//
// Every algorithm computes with 128-bit intermediates (unsigned __int128 / __int128): a count of
// units (< 2^45 after Validate) times a duration in nanoseconds (< 2^55) is < 2^100, and any
// difference of two int64 instants fits in 65 bits. Results are converted back to 64 bits only
// through the saturating helpers below, so huge limits and windows never overflow.
#ifndef RINGLIMIT_LIMITER_ARITH_H_
#define RINGLIMIT_LIMITER_ARITH_H_

#include <algorithm>
#include <cstdint>
#include <limits>

#include "limiter/limiter.h"

namespace ringlimit::limiter::internal {

using u128 = unsigned __int128;
using i128 = __int128;

inline constexpr TimeNs kMinTime = std::numeric_limits<TimeNs>::min();
inline constexpr TimeNs kMaxTime = std::numeric_limits<TimeNs>::max();

// Floor division for a possibly negative instant. REQUIRES: b > 0.
inline int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && a < 0) {
    --q;
  }
  return q;
}

// A finite duration, clamped to [0, kNever - 1] so that it is never mistaken for kNever.
inline DurationNs SatDuration(i128 d) {
  if (d <= 0) {
    return 0;
  }
  if (d >= static_cast<i128>(kNever)) {
    return kNever - 1;
  }
  return static_cast<DurationNs>(d);
}

// An instant clamped to the int64 range.
inline TimeNs SatTime(i128 t) {
  if (t < static_cast<i128>(kMinTime)) {
    return kMinTime;
  }
  if (t > static_cast<i128>(kMaxTime)) {
    return kMaxTime;
  }
  return static_cast<TimeNs>(t);
}

// a / b, using the (much faster) 64-bit division when a fits in 64 bits. REQUIRES: b > 0.
inline u128 Div(u128 a, uint64_t b) {
  if ((a >> 64) == 0) {
    return static_cast<uint64_t>(a) / b;
  }
  return a / b;
}

inline u128 CeilDiv(u128 a, uint64_t b) {
  if ((a >> 64) == 0) {
    const auto a64 = static_cast<uint64_t>(a);
    return a64 / b + (a64 % b != 0 ? 1 : 0);
  }
  return a / b + (a % b != 0 ? 1 : 0);
}

inline uint64_t SatU64(u128 v) {
  return (v >> 64) != 0 ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(v);
}

// A stored word read as a count: negative (corrupt) words read as "full" through the caller's clamp.
inline uint64_t AsCount(int64_t word) { return static_cast<uint64_t>(word); }

}  // namespace ringlimit::limiter::internal

#endif  // RINGLIMIT_LIMITER_ARITH_H_
