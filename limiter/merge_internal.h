// Helpers of merge.cc that merge_pack.cc shares (internal to limiter/).
#ifndef RINGLIMIT_LIMITER_MERGE_INTERNAL_H_
#define RINGLIMIT_LIMITER_MERGE_INTERNAL_H_

#include "limiter/merge.h"

namespace ringlimit::limiter::internal {

// The cell width of the window algorithms under `spec` (sliding_window: ceil(window / buckets)).
DurationNs CellWidth(const LimitSpec& spec);

// The expiry of what a base absorbs of record `c` (Included::expires, GC of base entries).
TimeNs ExpiresOf(const LimitSpec& spec, const Contribution& c);

}  // namespace ringlimit::limiter::internal

#endif  // RINGLIMIT_LIMITER_MERGE_INTERNAL_H_
