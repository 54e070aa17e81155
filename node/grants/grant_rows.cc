#include "node/grants/grant_rows.h"

#include <algorithm>
#include <span>

#include "limiter/grant_ledger.h"

namespace ringlimit::cluster {

KeyBudget BudgetOf(const limiter::LimitSpec& spec, const limiter::MergeState& state, limiter::TimeNs now) {
  KeyBudget b;
  b.lends =
      DriverLends(spec) && (state.algorithm == limiter::Algorithm{} || state.algorithm == spec.algorithm);
  b.generation = GrantGeneration(spec, state);
  if (!b.lends) return b;
  b.capacity = limiter::LendableCapacity(spec);
  const limiter::Decision peek =
      limiter::PeekMerged(spec, state, limiter::Request{.cost = 0, .now = now, .headroom = 0.});
  b.effective = b.capacity - std::min(b.capacity, peek.remaining);
  b.term_cap = std::chrono::nanoseconds(limiter::GrantTermCap(spec, limiter::Materialize(spec, state), now));
  b.out = limiter::GrantsOut(spec, state, now);
  b.generation = GrantGeneration(spec, state);
  return b;
}

uint64_t GrantGeneration(const limiter::LimitSpec& spec, const limiter::MergeState& state) {
  // The buckets' base is rebased by every check (limiter::CheckMerged): its stamp tells no reset there.
  const bool drains = spec.algorithm == limiter::Algorithm::kTokenBucket ||
                      spec.algorithm == limiter::Algorithm::kLeakyBucket ||
                      spec.algorithm == limiter::Algorithm::kGcra;
  const uint64_t reset = drains ? 0 : state.base.stamp;
  // (A multiplicative mix: a reset's stamp alone would change only the low bits of a plain xor.)
  const uint64_t g = limiter::Fingerprint(spec) ^ (reset * 0x9E3779B97F4A7C15ULL);
  return g != 0 ? g : 1;
}

GrantActions StoreGrantRows::Lend(const GrantKey& key, limiter::TimeNs now, const Decide& decide) {
  GrantActions out;
  const storage::Slot slot{key.name, &key.spec};
  store_.Update(key.key, std::span<const storage::Slot>(&slot, 1), now,
                [&](std::span<limiter::MergeState* const> states) {
                  limiter::MergeState& state = *states[0];
                  std::vector<GrantId> unsettled;
                  for (const limiter::GrantRecord& g : state.grants.records) {
                    if (!g.settled) unsettled.push_back(g.id);
                  }
                  out = decide(BudgetOf(key.spec, state, now), unsettled);
                  std::vector<cluster::Lend> kept;
                  for (const cluster::Lend& l : out.lends) {
                    if (limiter::LendMerged(key.spec, state, l.grant, l.units, now).ok()) {
                      kept.push_back(l);
                    } else {
                      out.refusals.push_back(Refuse{l.to, l.key, l.request});
                    }
                  }
                  out.lends = std::move(kept);
                  if (!out.lends.empty()) limiter::CollectGrants(state.grants, now - kCollectAfter);
                });
  return out;
}

uint64_t StoreGrantRows::Settle(const GrantKey& key, GrantId grant, std::optional<uint64_t> used,
                                limiter::TimeNs now) {
  uint64_t charged = 0;
  const storage::Slot slot{key.name, &key.spec};
  store_.Update(key.key, std::span<const storage::Slot>(&slot, 1), now,
                [&](std::span<limiter::MergeState* const> states) {
                  charged = limiter::SettleMerged(key.spec, *states[0], grant, used, contributor_,
                                                  hlc_.Now(now), now);
                });
  return charged;
}

std::optional<KeyBudget> StoreGrantRows::Read(const GrantKey& key, limiter::TimeNs now) {
  for (const storage::StoredState& stored : store_.Get(key.key)) {
    if (stored.name == key.name) return BudgetOf(stored.spec, stored.state, now);
  }
  return std::nullopt;
}

std::vector<GrantRows::UnsettledRow> StoreGrantRows::Unsettled(ring::Token first, ring::Token last) {
  std::vector<UnsettledRow> out;
  for (storage::EntityState& row : store_.ScanTokenRange(first, last)) {
    std::vector<GrantId> grants;
    for (const limiter::GrantRecord& g : row.state.state.grants.records) {
      if (!g.settled) grants.push_back(g.id);
    }
    if (grants.empty()) continue;
    out.push_back(UnsettledRow{GrantKey{std::move(row.entity), std::move(row.state.name), row.state.spec},
                               std::move(grants)});
  }
  return out;
}

}  // namespace ringlimit::cluster
