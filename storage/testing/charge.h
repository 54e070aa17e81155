// Test-only: how the node charges a stored state (node/service/check_engine.cc), for the tests of storage/,
// replication/ and the benchmarks: limiter::CheckMerged on behalf of one contributor, stamped by one
// hybrid clock.
//
// Thread safety: safe for concurrent use (the clock is one atomic word).
#ifndef RINGLIMIT_STORAGE_TESTING_CHARGE_H_
#define RINGLIMIT_STORAGE_TESTING_CHARGE_H_

#include "limiter/hlc.h"
#include "limiter/limiter.h"
#include "limiter/merge.h"
#include "storage/state_store.h"

namespace ringlimit::storage_testing {

inline constexpr limiter::ContributorId kTestContributor = 0x7e57;

// limiter::Check on a merged state, charged as kTestContributor (or `contributor`).
inline limiter::Decision ChargeMerged(const limiter::LimitSpec& spec, limiter::MergeState& state,
                                      const limiter::Request& request,
                                      limiter::ContributorId contributor = kTestContributor) {
  static limiter::HybridClock clock(0);
  return limiter::CheckMerged(spec, state, contributor, clock.Now(request.now), request);
}

// The plain State a stored state amounts to (what the tests written before merged states looked at).
inline limiter::State Plain(const storage::StoredState& s) { return limiter::Materialize(s.spec, s.state); }

}  // namespace ringlimit::storage_testing

#endif  // RINGLIMIT_STORAGE_TESTING_CHARGE_H_
