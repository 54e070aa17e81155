// Helpers of merge.cc that merge_pack.cc shares (internal to limiter/).
#ifndef RINGLIMIT_LIMITER_MERGE_INTERNAL_H_
#define RINGLIMIT_LIMITER_MERGE_INTERNAL_H_

#include "limiter/merge.h"

namespace ringlimit::limiter::internal {

// The cell width of the window algorithms under `spec` (sliding_window: ceil(window / buckets)).
DurationNs CellWidth(const LimitSpec& spec);

// The expiry of what a base absorbs of record `c` (Included::expires, GC of base entries).
TimeNs ExpiresOf(const LimitSpec& spec, const Contribution& c);

// MergedIdleAt of a bucket state whose records its base has absorbed whole (the packed form): the base
// `level` (units x window) at instant `at`, the state's newest.
TimeNs BucketIdleAt(const LimitSpec& spec, unsigned __int128 level, TimeNs at);

}  // namespace ringlimit::limiter::internal

#endif  // RINGLIMIT_LIMITER_MERGE_INTERNAL_H_
