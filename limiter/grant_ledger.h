// Quota grants' returned-budget record: per grant (granted, used, returned, settled), a record whose fields
// only grow, so that copies of a key's grants merge in any order -- duplicated, reordered, old copies coming
// back -- without ever letting returned budget be spent twice. docs/limiter.md "Quota grants" has the
// protocol; this header is the contract of the record.
//
// Contract
//  - Pure, as limiter.h: no I/O, no clock (instants are passed in), no globals. Thread safety: all functions
//    are reentrant; a GrantLedger must not be used by two threads at once.
//  - A key's *effective consumption* at its owner is the merged state's own consumption plus
//    Outstanding(spec, ledger, now): every unsettled grant counts `granted - returned` (never less than
//    what its holder reported used). The owner lends or admits only while that total fits the capacity.
//  - Settling a grant (its holder's Release, or the owner's reclaim after term + margin) marks it settled
//    and returns the units the owner must charge into the merged state *in the same write* of the key's
//    row: from then on those units count there, and the record counts nothing. Settling twice charges
//    nothing the second time.
//  - Merge is commutative, associative and idempotent: per grant id every field by max (`settled` by OR),
//    the floor (below) by max. A copy that settled a grant and charged it can merge with a copy that still
//    has it outstanding in either order; both resolve to the settled record plus the charge.
//  - GC: CollectGrants drops settled records granted before a horizon and raises the ledger's floor; a
//    record granted before the floor is dropped by every later merge, so an old copy cannot bring a settled
//    grant back as outstanding (the floor never passes an unsettled record of the copy that raises it).
#ifndef RINGLIMIT_LIMITER_GRANT_LEDGER_H_
#define RINGLIMIT_LIMITER_GRANT_LEDGER_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "limiter/limiter.h"

namespace ringlimit::limiter {

// Unique per owner incarnation: `incarnation << 32 | sequence` (an owner that restarted, or the next owner,
// never reuses one). 0 is not a grant.
using GrantId = uint64_t;

struct GrantRecord {
  GrantId id = 0;
  uint64_t granted = 0;   // units lent; written once by the owner that granted
  uint64_t used = 0;      // units the holder reported admitted from the slice (only grows)
  uint64_t returned = 0;  // units given back (only grows)
  TimeNs at = 0;          // the owner's instant (limiter time) when it granted
  bool settled = false;   // the used units were charged into the merged state (false -> true, once)
  bool operator==(const GrantRecord&) const = default;
};

struct GrantLedger {
  // Records granted before this instant were settled and collected: merges drop them.
  TimeNs floor = std::numeric_limits<TimeNs>::min();
  std::vector<GrantRecord> records;  // ascending id, at most one per id
  bool operator==(const GrantLedger&) const = default;
};

// Whether keys under `spec` can be lent at all (docs/limiter.md "Which algorithms lend"): token_bucket,
// gcra, leaky_bucket without a shaper, fixed_window and anchored_window, in hard, soft or dynamic mode
// (slices come out of the hard capacity only); never in shadow mode.
[[nodiscard]] bool Lends(const LimitSpec& spec);

// The hard capacity slices come out of: the limit, the bucket size of token_bucket and leaky_bucket (burst,
// or the limit when 0), burst + 1 for gcra. REQUIRES: Validate(spec) is nullopt.
[[nodiscard]] uint64_t LendableCapacity(const LimitSpec& spec);

// How long a slice granted at `now` may be used at most, given `plain` (the key's materialised state): the
// window algorithms' slices end with the window they are counted in -- fixed_window: the rest of the
// epoch-aligned window of now' = max(now, newest instant in `plain`); anchored_window: the rest of the
// running window, 0 when none runs (the owner decides the charge that starts one). kNever for the
// buckets (no cap), 0 when !Lends(spec). REQUIRES: Validate(spec) is nullopt.
[[nodiscard]] DurationNs GrantTermCap(const LimitSpec& spec, const State& plain, TimeNs now);

// The units `record` counts against its key: max(granted - min(returned, granted), used).
[[nodiscard]] uint64_t Counted(const GrantRecord& record);

// What the unsettled grants add to the key's consumption at `now`, given `plain` (the key's materialised
// state): the sum of Counted over them (saturating), leaving out grants whose window is over -- their units
// no longer count anywhere: fixed_window, granted in an earlier window than now' = max(now, newest instant
// in `plain`); anchored_window, granted before the running window started, or any when none runs (grants
// are made only inside a running window). REQUIRES: Validate(spec) is nullopt.
[[nodiscard]] uint64_t Outstanding(const LimitSpec& spec, const GrantLedger& ledger, const State& plain,
                                   TimeNs now);

// The record of `id`, or nullptr.
[[nodiscard]] const GrantRecord* FindGrant(const GrantLedger& ledger, GrantId id);

// The owner lends `granted` units at `at`: adds the record. AlreadyExists when `id` is taken (an id is never
// reused), InvalidArgument for id 0, granted 0 or an instant before the floor.
[[nodiscard]] Status AddGrant(GrantLedger& ledger, GrantId id, uint64_t granted, TimeNs at);

// Settles grant `id`: with `used` the holder's Release (returned = granted - used), without it the owner's
// reclaim (the whole slice counted used). Returns the units to charge into the merged state in the same
// write: Counted of the settled record, or 0 when it was settled already (a duplicate Release, or one after
// the reclaim: nothing changes) or is unknown (collected, or below the floor).
[[nodiscard]] uint64_t SettleGrant(GrantLedger& ledger, GrantId id, std::optional<uint64_t> used);

// The join of two copies. Commutative, associative, idempotent.
[[nodiscard]] GrantLedger MergeLedgers(const GrantLedger& a, const GrantLedger& b);
// Merges `from` into `into`; returns whether `into` changed.
bool MergeInto(GrantLedger& into, const GrantLedger& from);

// Drops settled records granted before `horizon` and raises the floor to the smaller of `horizon` and the
// oldest unsettled record's instant. The caller picks a horizon older than any copy that may still be
// merged in without having seen the settles (e.g. the replication's catch-up bound); a record granted
// below it that this copy never saw is dropped by merges (as an unreplicated admission is lost).
void CollectGrants(GrantLedger& ledger, TimeNs horizon);

// Most records one ledger may hold (ParseGrantLedger enforces it): a key's slices out (at most two per
// holder) plus the settled ones awaiting CollectGrants.
inline constexpr size_t kMaxGrantRecords = 1024;

// Bytes (merge_codec.cc has the layout): little-endian, versioned, 41 bytes per record. ParseGrantLedger
// rejects anything EncodeGrantLedger cannot have written (bad version, more than kMaxGrantRecords, ids 0,
// unsorted or repeated, a `settled` byte other than 0 or 1, a record granted before the floor, a length
// that does not match the count) with kCorruption; it never allocates more than the input's size allows.
[[nodiscard]] std::string EncodeGrantLedger(const GrantLedger& ledger);
[[nodiscard]] Result<GrantLedger> ParseGrantLedger(std::string_view bytes);

}  // namespace ringlimit::limiter

#endif  // RINGLIMIT_LIMITER_GRANT_LEDGER_H_
