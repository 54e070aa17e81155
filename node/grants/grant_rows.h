// StoreGrantRows: GrantRows (grant_driver.h) on a storage::StateStore -- the owner's quota-grant operations
// on a key's row: a grant is recorded (limiter::LendMerged) in the same atomic update that read the budget
// it was sized from, a settle charges what the grant returns (limiter::SettleMerged) in one update. The
// store's observer (the Replicator) ships both like any change of the row.
//
// Thread safety: safe for concurrent use (the store serialises the updates of one entity).
// Lifetime: the store and the clock must outlive it.
#ifndef RINGLIMIT_NODE_GRANTS_GRANT_ROWS_H_
#define RINGLIMIT_NODE_GRANTS_GRANT_ROWS_H_

#include <optional>

#include "limiter/hlc.h"
#include "limiter/merge.h"
#include "node/grants/grant_driver.h"
#include "storage/store.h"

namespace ringlimit::cluster {

// What the owner lends from: the hard capacity C (token_bucket: burst, else limit; fixed_window: limit),
// E = C - what a peek says remains (the merged state's consumption plus the slices out, limiter::GrantsOut),
// the slices out, the term cap, whether the state can lend now (DriverLends, and not written by another
// algorithm) and the key's generation (GrantGeneration of `spec` and the state's reset stamp).
[[nodiscard]] KeyBudget BudgetOf(const limiter::LimitSpec& spec, const limiter::MergeState& state,
                                 limiter::TimeNs now);

// KeyBudget::generation: changes with the spec (limiter::Fingerprint) and, for the window algorithms, with
// every reset of the state (its base's stamp, limiter::ResetMerged; a bucket's base is rebased by every
// check, so its reset does not show); never 0.
[[nodiscard]] uint64_t GrantGeneration(const limiter::LimitSpec& spec, const limiter::MergeState& state);

class StoreGrantRows final : public GrantRows {
 public:
  // Settled records older than this are collected at the next lend of their key (limiter::CollectGrants):
  // far longer than any copy can take to come back through replication or a handoff.
  static constexpr limiter::DurationNs kCollectAfter = 600 * limiter::kSecond;

  // `contributor` and `hlc`: whom settled units are charged for, and the clock stamping them (the node's
  // own, as its checks use).
  StoreGrantRows(storage::Store& store, limiter::ContributorId contributor, limiter::HybridClock& hlc)
      : store_(store), contributor_(contributor), hlc_(hlc) {}

  StoreGrantRows(const StoreGrantRows&) = delete;
  StoreGrantRows& operator=(const StoreGrantRows&) = delete;

  [[nodiscard]] GrantActions Lend(const GrantKey& key, limiter::TimeNs now, const Decide& decide) override;
  uint64_t Settle(const GrantKey& key, GrantId grant, std::optional<uint64_t> used,
                  limiter::TimeNs now) override;
  [[nodiscard]] std::optional<KeyBudget> Read(const GrantKey& key, limiter::TimeNs now) override;
  [[nodiscard]] std::vector<UnsettledRow> Unsettled(ring::Token first, ring::Token last) override;

 private:
  storage::Store& store_;
  const limiter::ContributorId contributor_;
  limiter::HybridClock& hlc_;  // thread-safe
};

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_GRANTS_GRANT_ROWS_H_
