// The pair form: a merged state with two contributors packed in 64 bytes (docs/limiter.md "Packed
// states"), the next step after PackState's one-contributor form (merge.h "The packed form").
//
// Contract
//  - Pure and reentrant, as merge.h. Lossless: PackPair accepts exactly the states UnpackPair restores
//    field for field (merge_pair_test checks the round trip on random two-contributor states of every
//    algorithm); anything else stays in the full form, so which form holds a state never changes a
//    decision, a merge or a copy.
//  - Accepted: token_bucket, leaky_bucket and gcra whose base has absorbed both contributors as Rebase
//    writes it (each contributor's base entry equal to its record, or a tombstone: a base entry whose record
//    Collect dropped), the base's instant = the state's newest; fixed_window and sliding_window_approx with
//    two records of cells in {k - 1, k} (k the cell of the newest instant), anchored_window with two records
//    whose cells start at most two windows (copies that started their windows apart); an empty base level
//    and no base entries for the windows. Never sliding_window,
//    sliding_log, grants, or a bucket record newer than its base entry (a copy merged in after the last
//    rebase: the full form).
//  - Narrowed widths (a state beyond them stays in the full form): the newest instant within 2^31 ns of the
//    physical time of the base stamp (buckets) or of the newer record's version (windows); bucket records:
//    version within 2^40 HLC ticks (~4.6 hours) below the base stamp, epoch within 2^40 ticks below the
//    version, `consumed` below 2^31, `last` within 2^31 ns of its version's physical time; window records:
//    version within 2^47 ticks of the base stamp, counts below 2^32.
#ifndef RINGLIMIT_LIMITER_MERGE_PAIR_H_
#define RINGLIMIT_LIMITER_MERGE_PAIR_H_

#include <array>
#include <cstdint>

#include "limiter/merge.h"

namespace ringlimit::limiter {

// 64 bytes: word[0..3] are the first half (the storage tier keeps it in the key's entry), word[4..7] the
// second. The high 32 bits of word[3] are never used (PackPair leaves them 0, UnpackPair ignores them): the
// storage tier keeps the index of the second half there.
struct PackedPair {
  uint64_t word[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  bool operator==(const PackedPair&) const = default;
};

// The two contributors of a state PackPair may accept, ascending (records' ids, and for the buckets the
// base entries' too): false unless there are exactly two.
[[nodiscard]] bool PairCandidates(const LimitSpec& spec, const MergeState& state,
                                  std::array<ContributorId, 2>& ids);

// Packs `state` (written under `spec`) with tags[i] standing for ids[i] of PairCandidates. Returns false,
// leaving `out` unspecified, when the state has no pair form. REQUIRES: Validate(spec) is nullopt.
[[nodiscard]] bool PackPair(const LimitSpec& spec, const MergeState& state, std::array<uint16_t, 2> tags,
                            PackedPair& out);

// The tags PackPair was given (in the low 32 bits of word[0]).
[[nodiscard]] inline std::array<uint16_t, 2> PairTags(const PackedPair& packed) {
  return {static_cast<uint16_t>(packed.word[0]), static_cast<uint16_t>(packed.word[0] >> 16)};
}

// Restores into `out` the state PackPair packed under `spec`, ids[i] being the id of tag i. Reuses `out`'s
// vectors' storage. REQUIRES: `packed` was filled by PackPair under this `spec` (word[3]'s high half aside).
void UnpackPair(const LimitSpec& spec, const PackedPair& packed, std::array<ContributorId, 2> ids,
                MergeState& out);

}  // namespace ringlimit::limiter

#endif  // RINGLIMIT_LIMITER_MERGE_PAIR_H_
