// Helpers of merge.cc that merge_pack.cc shares (internal to limiter/).
#ifndef RINGLIMIT_LIMITER_MERGE_INTERNAL_H_
#define RINGLIMIT_LIMITER_MERGE_INTERNAL_H_

#include "limiter/arith.h"
#include "limiter/merge.h"

namespace ringlimit::limiter::internal {

// The cell width of the window algorithms under `spec` (sliding_window: ceil(window / buckets)).
DurationNs CellWidth(const LimitSpec& spec);

// The expiry of what a base absorbs of record `c` (Included::expires, GC of base entries).
TimeNs ExpiresOf(const LimitSpec& spec, const Contribution& c);

// MergedIdleAt of a bucket state whose records its base has absorbed whole (the packed form): the base
// `level` (units x window) at instant `at`, the state's newest.
TimeNs BucketIdleAt(const LimitSpec& spec, unsigned __int128 level, TimeNs at);

// Shared by the packed forms (merge_pack.cc, merge_pair.cc).
inline bool IsBucket(Algorithm a) {
  return a == Algorithm::kTokenBucket || a == Algorithm::kLeakyBucket || a == Algorithm::kGcra;
}

// The physical time of an HLC stamp in ns (wide: the stamp's 48 bits of ms overflow 64 bits of ns).
inline i128 PhysicalNs(Hlc version) { return static_cast<i128>(HlcWallMs(version)) * 1'000'000; }

// `at` relative to the physical time of `version`, when it fits 32 bits (signed; `out` holds its bits).
inline bool InstantDelta(TimeNs at, Hlc version, uint64_t& out) {
  const i128 delta = static_cast<i128>(at) - PhysicalNs(version);
  if (delta < INT32_MIN || delta > INT32_MAX) return false;
  out = static_cast<uint32_t>(static_cast<int32_t>(delta));
  return true;
}

inline TimeNs InstantFrom(uint64_t delta, Hlc version) {
  return static_cast<TimeNs>(PhysicalNs(version) + static_cast<int32_t>(static_cast<uint32_t>(delta)));
}

// `later - earlier` when later >= earlier and the gap fits `bits` (< 64).
inline bool GapWithin(uint64_t later, uint64_t earlier, int bits, uint64_t& out) {
  if (earlier > later || later - earlier > (uint64_t{1} << bits) - 1) return false;
  out = later - earlier;
  return true;
}

}  // namespace ringlimit::limiter::internal

#endif  // RINGLIMIT_LIMITER_MERGE_INTERNAL_H_
