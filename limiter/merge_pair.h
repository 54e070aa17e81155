// The group forms: a merged state with two contributors packed in 64 bytes (the pair form) or three in 96
// (the trio form) (docs/limiter.md "Packed states"), the next steps after PackState's one-contributor form
// (merge.h "The packed form").
//
// Contract
//  - Pure and reentrant, as merge.h. Lossless: PackGroup accepts exactly the states UnpackGroup restores
//    field for field (merge_pair_test checks the round trip on random two- and three-contributor states of
//    every algorithm); anything else stays in the full form, so which form holds a state never changes a
//    decision, a merge or a copy.
//  - Accepted (N = 2 or 3 contributors): token_bucket, leaky_bucket and gcra whose base has absorbed every
//    contributor as Rebase writes it (each contributor's base entry equal to its record, or a tombstone: a
//    base entry whose record Collect dropped), the base's instant = the state's newest; fixed_window,
//    sliding_window_approx and sliding_window with N records of cells in {k - 1, k} (k the cell of the
//    newest instant; sliding_window: while no older sub-bucket of theirs is live, as PackState),
//    anchored_window with N records whose cells start at most N windows (copies that started their
//    windows apart); an empty base level and no base entries for the windows. Never sliding_log, grants,
//    or a bucket record newer than its base entry (a copy merged in after the last rebase: the full
//    form).
//  - Narrowed widths (a state beyond them stays in the full form): the newest instant within 2^31 ns of the
//    physical time of the base stamp (buckets) or of the newest record's version (windows); bucket records:
//    version within 2^40 HLC ticks (~4.6 hours) below the base stamp, epoch within 2^40 ticks below the
//    version, `consumed` below 2^31, `last` within 2^31 ns of its version's physical time; window records:
//    version within 2^47 ticks of the base stamp, counts below 2^32; trio form, anchored_window: the
//    windows' starts within 2^32 ns (~4.3 s) of the earliest.
#ifndef RINGLIMIT_LIMITER_MERGE_PAIR_H_
#define RINGLIMIT_LIMITER_MERGE_PAIR_H_

#include <array>
#include <cstdint>

#include "limiter/merge.h"

namespace ringlimit::limiter {

// 32 x N bytes: word[0..3] are the first part (the storage tier keeps it in the key's entry), then a part of
// 32 bytes per further contributor (in cells of 32 bytes). The high 32 bits of word[3] and, in a trio, of
// word[7] are never used (PackGroup leaves them 0, UnpackGroup ignores them): the storage tier keeps the
// index of the next cell there.
template <size_t N>
struct PackedGroup {
  static_assert(N == 2 || N == 3, "the group forms hold two or three contributors");
  uint64_t word[4 * N] = {};
  bool operator==(const PackedGroup&) const = default;
};
using PackedPair = PackedGroup<2>;  // 64 bytes
using PackedTrio = PackedGroup<3>;  // 96 bytes

// The N contributors of a state PackGroup<N> may accept, ascending (records' ids, and for the buckets the
// base entries' too): false unless there are exactly N.
template <size_t N>
[[nodiscard]] bool GroupCandidates(const LimitSpec& spec, const MergeState& state,
                                   std::array<ContributorId, N>& ids);

// Packs `state` (written under `spec`) with tags[i] standing for ids[i] of GroupCandidates. Returns false,
// leaving `out` unspecified, when the state has no such form. REQUIRES: Validate(spec) is nullopt.
template <size_t N>
[[nodiscard]] bool PackGroup(const LimitSpec& spec, const MergeState& state,
                             const std::array<uint16_t, N>& tags, PackedGroup<N>& out);

// The tags PackGroup was given (16 bits each from the low end of word[0]).
template <size_t N>
[[nodiscard]] std::array<uint16_t, N> GroupTags(const PackedGroup<N>& packed) {
  std::array<uint16_t, N> tags{};
  for (size_t i = 0; i < N; ++i) tags[i] = static_cast<uint16_t>(packed.word[0] >> (16 * i));
  return tags;
}

// Restores into `out` the state PackGroup packed under `spec`, ids[i] being the id of tag i. Reuses `out`'s
// vectors' storage. REQUIRES: `packed` was filled by PackGroup<N> under this `spec` (word[3]'s high half
// aside).
template <size_t N>
void UnpackGroup(const LimitSpec& spec, const PackedGroup<N>& packed, const std::array<ContributorId, N>& ids,
                 MergeState& out);

// The pair form's names, as merge_pair_test and the fuzz target use them.
[[nodiscard]] inline bool PairCandidates(const LimitSpec& spec, const MergeState& state,
                                         std::array<ContributorId, 2>& ids) {
  return GroupCandidates<2>(spec, state, ids);
}
[[nodiscard]] inline bool PackPair(const LimitSpec& spec, const MergeState& state,
                                   std::array<uint16_t, 2> tags, PackedPair& out) {
  return PackGroup<2>(spec, state, tags, out);
}
[[nodiscard]] inline std::array<uint16_t, 2> PairTags(const PackedPair& packed) { return GroupTags(packed); }
inline void UnpackPair(const LimitSpec& spec, const PackedPair& packed, std::array<ContributorId, 2> ids,
                       MergeState& out) {
  UnpackGroup<2>(spec, packed, ids, out);
}

}  // namespace ringlimit::limiter

#endif  // RINGLIMIT_LIMITER_MERGE_PAIR_H_
