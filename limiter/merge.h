// Mergeable limiter state: copies of one (entity, limit) state written by different deciders merge
// without losing an admission (a state-based CRDT). docs/limiter.md "Merging copies" has the design
// and each algorithm's bound; this header is the contract.
//
// Contract
//  - Same as limiter.h: pure, no I/O, no clock (time and HLC stamps are passed in), no globals;
//    time may go backwards (the newest instant seen is kept, as in State). "Over limit" is a Decision.
//  - Thread safety: all functions are reentrant. A MergeState must not be used by two threads at once.
//  - Contributors. Every charge is recorded on behalf of a ContributorId the caller supplies: one per
//    deciding node *incarnation* (e.g. node id << 32 | restart counter), so a node that restarted
//    with an empty memory never reuses an id whose older records live elsewhere. A contributor's own
//    record is written only by that contributor, and each write carries its HLC stamp (the record's
//    version): the record with the higher version wins a merge.
//    REQUIRES: a contributor's stamps strictly increase (HybridClock::Now does that); the state a
//    contributor charges must hold its own newest record (its node's copy, merged into).
//  - Merge(a, b) is commutative, associative and idempotent for copies of one algorithm (copies of
//    two algorithms: the one with the newer base wins whole, as a reset). It keeps every unit any copy
//    recorded: per contributor the newest record, per cell the larger count, logs by union.
//  - Deciding (CheckMerged, PeekMerged) materialises the plain State that the merged copies amount to
//    and runs the plain algorithm on it (dispatch.h / judge.h): one decider after another -- each
//    having merged the previous one's state -- decides exactly as one node with State and Check would.
//    Concurrent deciders may together admit more than the limit; after their copies merge the sum
//    stands (up to the plain algorithm's own clamp: 2x the ceiling for the window algorithms, the
//    debt of a bucket is kept, see the doc) and the key is refused until refill or the window allows.
//  - Memory stays bounded by Collect (GC): what can no longer affect any decision is dropped, as a
//    function of the state's own newest instant (never of the caller's clock), so it commutes with
//    merge up to a final Collect. At most kMaxContributors records; ParseMergeState enforces it.
#ifndef RINGLIMIT_LIMITER_MERGE_H_
#define RINGLIMIT_LIMITER_MERGE_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "limiter/grant_ledger.h"
#include "limiter/hlc.h"
#include "limiter/limiter.h"

namespace ringlimit::limiter {

using ContributorId = uint64_t;

// Most contributor records (and base entries) one state may hold.
inline constexpr size_t kMaxContributors = 256;

// Units counted in one cell of a window algorithm: window `index` of fixed_window and
// sliding_window_approx, sub-bucket `index` of sliding_window (index = floor(instant / width)).
struct Cell {
  int64_t index = 0;
  uint64_t count = 0;
  bool operator==(const Cell&) const = default;
};

// One contributor's record. Which fields are used depends on the algorithm; the others stay empty.
struct Contribution {
  ContributorId id = 0;
  Hlc version = 0;  // HLC stamp of the contributor's newest write: the higher version wins a merge

  // fixed_window, sliding_window_approx, sliding_window.
  DurationNs width = 0;     // the cell width the cells were counted under
  std::vector<Cell> cells;  // ascending index, count > 0

  // sliding_log: one stamp per admitted unit, ascending (two units at one instant stay two).
  std::vector<TimeNs> stamps;

  // token_bucket, leaky_bucket, gcra.
  Hlc epoch = 0;          // when this contributor's cumulative count started
  uint64_t consumed = 0;  // units charged since `epoch` (monotone; saturates)
  TimeNs last = 0;        // instant of its newest charge

  bool operator==(const Contribution&) const = default;
};

// What a base already accounts for, per contributor: records with version <= `version` (window
// algorithms, sliding_log: excluded whole), or the first `consumed` units of epoch `epoch` (buckets).
struct Included {
  ContributorId id = 0;
  Hlc version = 0;
  Hlc epoch = 0;
  uint64_t consumed = 0;
  TimeNs expires = 0;  // after the state's newest instant passes this the entry cannot matter (GC)
  bool operator==(const Included&) const = default;
};

// The base the records are counted on. Buckets: the level rebased by the last decider. All
// algorithms: a reset. The base with the higher stamp wins a merge.
struct MergeBase {
  Hlc stamp = 0;                   // 0: the initial base (nothing consumed)
  int64_t level_whole = 0;         // buckets: level at `at` in units ...
  int64_t level_frac = 0;          // ... plus level_frac / window (as State::word[0..1])
  TimeNs at = 0;                   // buckets: the instant of the level
  std::vector<Included> included;  // ascending id
  bool operator==(const MergeBase&) const = default;
};

struct MergeState {
  Algorithm algorithm{};                               // 0: empty (the identity of Merge)
  TimeNs newest = std::numeric_limits<TimeNs>::min();  // newest instant charged in any copy
  MergeBase base;
  std::vector<Contribution> contributions;  // ascending id, at most one per id
  // Quota grants the key's owner lent out of this state (grant_ledger.h, docs/limiter.md "Quota grants"):
  // carried and merged with the state on every path (MergeInto joins the ledgers, whatever the algorithms),
  // so replicas and the next owner hold them. While a grant is unsettled its units count against every
  // decision made from this state (CheckMerged, CheckAllMerged, PeekMerged): see GrantsOut.
  GrantLedger grants;
  bool operator==(const MergeState&) const = default;
};

// Makes `state` equal to MergeState{} but keeps its vectors' storage (a state reused for another key
// charges without allocating).
void Clear(MergeState& state);

// The bytes `state` owns on the heap (its vectors' capacities), not counting the object itself: what
// the storage tier adds per state to account memory in bytes.
[[nodiscard]] size_t HeapBytes(const MergeState& state);

// The join of two copies. Commutative, associative, idempotent (for copies of one algorithm).
[[nodiscard]] MergeState Merge(const MergeState& a, const MergeState& b);
// Merges `from` into `into`; returns whether `into` changed.
bool MergeInto(MergeState& into, const MergeState& from);

// Whether `held` knows a newer record of some contributor other than `except` than `update` does (its own
// record, or what its base accounts for), or is a copy of another algorithm: whether a decision that
// shipped `update` may have been made without admissions `held` has. Records of `except` (the decider that
// shipped `update`: its later decisions, which may reach a holder before `update` does) are left out; a
// base's reset is not an admission and does not count. With except = 0 no contributor is left out.
[[nodiscard]] bool HoldsOthersNewer(const MergeState& held, const MergeState& update, ContributorId except);

// Check (limiter.h) against the merged total, charging on behalf of `contributor`. `stamp` is the
// contributor's HLC now (the record's version; buckets also rebase with it). A state written under
// another algorithm restarts empty (as State does), with a base that wins over its older copies.
// REQUIRES: Validate(spec) is nullopt; stamp > 0.
Decision CheckMerged(const LimitSpec& spec, MergeState& state, ContributorId contributor, Hlc stamp,
                     const Request& request);

// Several limits of one entity charged all-or-nothing on merged states, as CheckAll (limiter.h) on
// plain ones: if any limit refuses, none is charged (except count_denied limits, which charge the
// refused request). Returns true when every limit admitted. REQUIRES: as CheckAll; stamp > 0.
bool CheckAllMerged(std::span<const LimitSpec* const> specs, std::span<MergeState* const> states,
                    ContributorId contributor, Hlc stamp, const Request& request,
                    std::span<Decision> decisions);

// What CheckMerged would decide, changing nothing.
[[nodiscard]] Decision PeekMerged(const LimitSpec& spec, const MergeState& state, const Request& request);

// An admin reset (DELETE) stamped `stamp`: everything recorded so far stops counting, also when
// this state is later merged with older copies. Units charged concurrently by a decider that had not
// seen the reset still count (conservative). REQUIRES: Validate(spec) is nullopt; stamp > 0.
void ResetMerged(const LimitSpec& spec, MergeState& state, Hlc stamp);

// The units the unsettled grants of `state` hold out of its capacity at `now` (Outstanding over the
// materialised state; 0 without grants, at the cost of one emptiness test). Every decision on a state with
// grants out is made as if they were charged: a request of cost c is admitted only if c + GrantsOut fits,
// and `remaining` is reduced by them. REQUIRES: Validate(spec) is nullopt.
[[nodiscard]] uint64_t GrantsOut(const LimitSpec& spec, const MergeState& state, TimeNs now);

// The owner lends `units` of `state` as grant `id` at `now` (AddGrant into state.grants): from then on they
// count against every decision (GrantsOut). An empty state (nothing charged to it yet) takes `spec`'s
// algorithm, so that a store keeps it. Errors as AddGrant, and InvalidArgument when the state was written by
// another algorithm than `spec`'s (a policy change: nothing is lent until it is charged anew).
[[nodiscard]] Status LendMerged(const LimitSpec& spec, MergeState& state, GrantId id, uint64_t units,
                                TimeNs now);

// Settles grant `id` of `state` (SettleGrant: with `used` from its holder's Release, without it reclaimed
// whole) and charges the units it returns into the merged state on behalf of `contributor`, in the same
// call, so no copy holds a settled record without its charge: buckets at `now` (draining from there);
// fixed_window and anchored_window into the current window only if the grant was made in it (else those
// units no longer count anywhere). Returns the units charged (0: already settled, unknown, or its window is
// over). REQUIRES: Validate(spec) is nullopt; stamp > 0.
uint64_t SettleMerged(const LimitSpec& spec, MergeState& state, GrantId id, std::optional<uint64_t> used,
                      ContributorId contributor, Hlc stamp, TimeNs now);

// The instant at which the merged state is back to its initial value if nothing more is charged
// (IdleAt of Materialize): the storage tier may drop it then. kMinTime-like minimum when initial. Never
// (INT64_MAX) while a grant is unsettled: its record must outlive its term.
[[nodiscard]] TimeNs MergedIdleAt(const LimitSpec& spec, const MergeState& state);

// A plain State (a row written before states were mergeable) as a merged state with the same
// decisions: buckets as a base level, windows and logs as the record of `contributor` stamped
// `stamp`. Empty when `plain` was written by another algorithm. REQUIRES: Validate(spec) is nullopt.
[[nodiscard]] MergeState FromPlain(const LimitSpec& spec, const State& plain, ContributorId contributor,
                                   Hlc stamp);

// A digest that changes whenever a charge, reset or merge changed what the state records (the
// algorithm, the base's stamp, the sum of the records' versions, their count): cheap change
// detection for the storage tier without copying the state.
[[nodiscard]] uint64_t ChangeDigest(const MergeState& state);

// Garbage collection: drops cells, stamps, records and base entries that can no longer affect a
// decision under `spec`, judged at the state's own newest instant. Deterministic.
void Collect(const LimitSpec& spec, MergeState& state);

// The plain State the merged copies amount to (what CheckMerged decides on), for tests and tools.
// A bucket in debt (merged level above its maximum) is shown full until the debt has drained.
[[nodiscard]] State Materialize(const LimitSpec& spec, const MergeState& state);

// --- The packed form (docs/limiter.md "Packed states") ---------------------------------------------
// The common merged state -- one contributor's record and nothing else to merge: a key decided by its
// owner, and the replicas' copies of it -- in 32 bytes, which the storage tier keeps inside a key's
// entry instead of a heap MergeState with its vectors. Lossless: PackState accepts exactly the states
// that UnpackState restores field for field (merge_test checks the round trip); anything else (a second
// contributor's record, a reset's base, a grant ledger that is not empty, figures over the narrowed widths
// below) stays in the full form.
// Packed: token_bucket, leaky_bucket and gcra rebased by their one contributor; fixed_window,
// anchored_window, sliding_window_approx and sliding_window with at most two live cells. Never
// sliding_log. Narrowed: the state's newest instant within 2^31 ns of its version's physical time (the
// decider's HLC at the decision: equal to the millisecond unless clocks run apart), counts below 2^32 (a
// bucket's record: 2^31), the record's version within 2^48 HLC ticks (49 days) of its bucket epoch or window
// base.
struct PackedState {
  uint64_t word[4] = {0, 0, 0, 0};  // word[0]: the record's version, never 0 in a packed state
  bool operator==(const PackedState&) const = default;
};

// Packs `state` (written under `spec`) with `tag` standing for its one contributor (the caller maps tags
// to ContributorIds; PackedTag returns it). Returns false, leaving `out` unspecified, when the state
// has no packed form. REQUIRES: Validate(spec) is nullopt.
[[nodiscard]] bool PackState(const LimitSpec& spec, const MergeState& state, uint16_t tag, PackedState& out);

// The one contributor of a state PackState may accept (0 when it has not exactly one record): what the
// caller maps to a tag before packing.
[[nodiscard]] inline ContributorId PackCandidate(const MergeState& state) {
  return state.contributions.size() == 1 ? state.contributions[0].id : 0;
}

[[nodiscard]] inline uint16_t PackedTag(const PackedState& packed) {
  return static_cast<uint16_t>(packed.word[1] >> 48);
}

// Restores into `out` the state PackState packed under `spec`, `contributor` being the id of its tag.
// Reuses `out`'s vectors' storage (no allocation once they have room for one record).
// REQUIRES: `packed` was filled by PackState under this `spec`.
void UnpackState(const LimitSpec& spec, const PackedState& packed, ContributorId contributor,
                 MergeState& out);

// MergedIdleAt of the state `packed` holds, without unpacking it (the storage tier's idle sweep looks at
// packed states on every check): sliding_window unpacks into `scratch`. REQUIRES: as UnpackState.
[[nodiscard]] TimeNs PackedIdleAt(const LimitSpec& spec, const PackedState& packed, ContributorId contributor,
                                  MergeState& scratch);

// PackedIdleAt(...) <= now, cheaply false for a bucket still draining at `now` or a window whose newest
// cell still runs (the sweep's usual case).
[[nodiscard]] bool PackedIdleBy(const LimitSpec& spec, const PackedState& packed, ContributorId contributor,
                                MergeState& scratch, TimeNs now);

// Bytes: little-endian, versioned. ParseMergeState rejects anything EncodeMergeState cannot have
// written (bad version, unknown algorithm, counts above the caps, unsorted or duplicate ids,
// trailing bytes) with kCorruption; it never allocates more than the input's size allows.
[[nodiscard]] std::string EncodeMergeState(const MergeState& state);
// The same bytes appended to `out` (an encoder writing into a buffer it reuses allocates nothing).
void AppendMergeState(const MergeState& state, std::string& out);
[[nodiscard]] Result<MergeState> ParseMergeState(std::string_view bytes);
// The same into `out`, whose vectors keep their storage (a replica's decoder reuses one state per slot of
// its batch, allocating nothing for a state that fits). On failure `out` holds an unspecified state.
[[nodiscard]] Status ParseMergeStateInto(std::string_view bytes, MergeState& out);

// Worst-case encoded size under `spec` with `contributors` records and base entries (after Collect;
// a bucket's base also keeps entries of dropped records, at most kMaxContributors).
[[nodiscard]] size_t MergeStateMaxBytes(const LimitSpec& spec, size_t contributors);

}  // namespace ringlimit::limiter

#endif  // RINGLIMIT_LIMITER_MERGE_H_
