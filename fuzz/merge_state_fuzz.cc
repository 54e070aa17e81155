// Fuzz target: limiter::ParseMergeState, the decoder of the mergeable state inside every stored row
// (storage/state_codec.cc) and every replicated or handed-off state (peer.NamedState). The bytes come
// from disk and from peers.
//
// Invariants, for every input that parses:
//  - ParseMergeStateInto, into a state reused across inputs, answers what ParseMergeState answers;
//  - the encoding is canonical: EncodeMergeState(ParseMergeState(b)) == b (merge.h: the parser rejects
//    anything the encoder cannot have written);
//  - Merge is idempotent: Merge(s, s) == s;
//  - charging it, collecting it and reading it under a valid spec of its algorithm neither crashes nor
//    trips a sanitizer, and what results encodes and parses back to itself;
//  - whatever of these PackState accepts, UnpackState restores exactly, and the packed idle instant
//    (PackedIdleAt, PackedIdleBy) is the merged one; whatever PackGroup accepts (pair and trio),
//    UnpackGroup restores exactly (whatever the caller's 32 bits hold), and no state is accepted by two
//    forms.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "limiter/hlc.h"
#include "limiter/limiter.h"
#include "limiter/merge.h"
#include "limiter/merge_pair.h"

namespace {

using namespace ringlimit::limiter;
using ringlimit::Result;
using ringlimit::Status;

void CheckRoundTrip(const MergeState& state, const char* what) {
  const std::string bytes = EncodeMergeState(state);
  Result<MergeState> again = ParseMergeState(bytes);
  if (!again.ok()) std::fprintf(stderr, "ParseMergeState: %s\n", again.status().ToString().c_str());
  FUZZ_CHECK(again.ok(), what);
  FUZZ_CHECK(*again == state, what);
}

// The group form of N contributors (pair, trio): whatever PackGroup accepts unpacks to itself, and no
// other form accepts it.
template <size_t N>
void CheckGroup(const LimitSpec& spec, const MergeState& state, const std::array<uint16_t, N>& tags) {
  std::array<ContributorId, N> ids{};
  PackedGroup<N> group;
  if (!GroupCandidates(spec, state, ids) || !PackGroup(spec, state, tags, group)) return;
  FUZZ_CHECK(group.word[3] >> 32 == 0 && GroupTags(group) == tags,
             "a group uses the caller's bits or lost its tags");
  group.word[3] |= uint64_t{0xfeedface} << 32;
  if constexpr (N == 3) {
    FUZZ_CHECK(group.word[7] >> 32 == 0, "a trio uses the caller's bits");
    group.word[7] |= uint64_t{0xdeadbeef} << 32;
  }
  MergeState back;
  UnpackGroup(spec, group, ids, back);
  FUZZ_CHECK(back == state, "a group-packed state does not unpack to itself");
  PackedState packed;
  FUZZ_CHECK(!PackState(spec, state, 3, packed), "a state accepted by two packed forms");
  if constexpr (N == 3) {
    PackedPair pair;
    FUZZ_CHECK(!PackPair(spec, state, {5, 7}, pair), "a state accepted by the pair and trio forms");
  }
}

void CheckPair(const LimitSpec& spec, const MergeState& state) {
  CheckGroup<2>(spec, state, {5, 7});
  CheckGroup<3>(spec, state, {5, 7, 65535});
}

void CheckPacked(const LimitSpec& spec, const MergeState& state) {
  CheckPair(spec, state);
  PackedState packed;
  if (!PackState(spec, state, 3, packed)) return;
  FUZZ_CHECK(packed.word[0] != 0 && PackedTag(packed) == 3, "a packed state without its version or tag");
  MergeState back;
  UnpackState(spec, packed, state.contributions[0].id, back);
  FUZZ_CHECK(back == state, "a packed state does not unpack to itself");
  const TimeNs idle = MergedIdleAt(spec, state);
  FUZZ_CHECK(PackedIdleAt(spec, packed, state.contributions[0].id, back) == idle, "PackedIdleAt differs");
  for (const TimeNs now : {state.newest, idle}) {
    FUZZ_CHECK(PackedIdleBy(spec, packed, state.contributions[0].id, back, now) == (idle <= now),
               "PackedIdleBy differs");
  }
}

// A valid spec of `algorithm`, its numbers chosen by `choice`.
LimitSpec SpecFor(Algorithm algorithm, uint8_t choice) {
  LimitSpec spec;
  spec.algorithm = algorithm;
  spec.limit = (choice & 1) ? 1 : 10;
  spec.window = (choice & 2) ? kMillisecond * 100 : kSecond;
  spec.buckets = (choice & 4) ? 1 : 10;
  if (algorithm == Algorithm::kGcra || algorithm == Algorithm::kTokenBucket)
    spec.burst = (choice & 8) ? 0 : 5;
  if (algorithm == Algorithm::kLeakyBucket && (choice & 16)) spec.max_delay = kSecond;
  spec.count_denied = (choice & 32) != 0;
  if (choice & 64) {
    spec.mode = Mode::kSoft;
    spec.soft_pct = 50;
  }
  return spec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<MergeState> parsed = ParseMergeState(bytes);
  // Into one state reused for every input (what a replica's decoder does): the same answer.
  static MergeState reused;
  const Status into = ParseMergeStateInto(bytes, reused);
  FUZZ_CHECK(into.ok() == parsed.ok(),
             "ParseMergeStateInto accepts what ParseMergeState does not, or refuses");
  if (!parsed.ok()) return 0;
  FUZZ_CHECK(reused == *parsed, "ParseMergeStateInto reads another state into a reused one");
  const MergeState& state = *parsed;
  FUZZ_CHECK(EncodeMergeState(state) == bytes, "the encoding is not canonical");
  FUZZ_CHECK(Merge(state, state) == state, "Merge(s, s) != s");
  if (state.algorithm == Algorithm{}) return 0;

  // The choices come from the state's own bytes (no extra input format): the last byte picks the spec.
  const LimitSpec spec = SpecFor(state.algorithm, static_cast<uint8_t>(bytes.back()));
  FUZZ_CHECK(!Validate(spec).has_value(), "SpecFor made an invalid spec");
  Hlc stamp = 1;
  for (const Contribution& c : state.contributions) stamp = c.version >= stamp ? c.version + 1 : stamp;
  if (state.base.stamp >= stamp) stamp = state.base.stamp + 1;
  if (stamp == 0) stamp = 1;  // every version was UINT64_MAX
  (void)Materialize(spec, state);
  (void)MergedIdleAt(spec, state);
  CheckPacked(spec, state);

  for (const TimeNs now : {state.newest, TimeNs{1'700'000'000} * kSecond}) {
    MergeState charged = state;
    const Request request{.cost = 1, .now = now, .headroom = 0.5};
    (void)PeekMerged(spec, charged, request);
    (void)CheckMerged(spec, charged, /*contributor=*/42, stamp, request);
    CheckRoundTrip(charged, "a charged state does not round-trip");
    CheckPacked(spec, charged);
    Collect(spec, charged);
    CheckRoundTrip(charged, "a collected state does not round-trip");
    CheckPacked(spec, charged);
    MergeState reset = state;
    ResetMerged(spec, reset, stamp);
    CheckRoundTrip(reset, "a reset state does not round-trip");
    // As a node charges (its HLC follows `now`: the packed form's usual case): a key of its own, then
    // the parsed copy merged into it and a second charge.
    const Hlc first = HlcTick(0, now);
    if (first >= stamp) {
      MergeState own;
      (void)CheckMerged(spec, own, /*contributor=*/42, first, request);
      Collect(spec, own);
      CheckPacked(spec, own);
      MergeInto(own, state);
      (void)CheckMerged(spec, own, /*contributor=*/42, HlcTick(first, now), request);
      Collect(spec, own);
      CheckPacked(spec, own);
    }
  }
  return 0;
}
