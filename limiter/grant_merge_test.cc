// Quota grants inside the merged state (merge.h: MergeState::grants, GrantsOut, LendMerged, SettleMerged):
// the owner's decisions count the slices out, settling charges what they return, and the ledger travels
// with the state through merges and the codec.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

#include "limiter/grant_ledger.h"
#include "limiter/hlc.h"
#include "limiter/merge.h"
#include "limiter/test_util.h"

namespace ringlimit::limiter {
namespace {

using testing::Spec;

constexpr TimeNs kT0 = 1'700'000'000LL * kSecond;
constexpr DurationNs kDay = 86'400 * kSecond;
constexpr ContributorId kOwner = 11;

Request At(TimeNs now, uint64_t cost = 1) { return Request{.cost = cost, .now = now, .headroom = 0.}; }

// Admits single units at `now` until refused; returns how many.
uint64_t AdmitAll(const LimitSpec& spec, MergeState& state, TimeNs now, Hlc& stamp) {
  uint64_t n = 0;
  while (CheckMerged(spec, state, kOwner, ++stamp, At(now)).allowed) ++n;
  return n;
}

TEST(GrantMerge, OwnerDecisionsLeaveRoomForSlicesOutAndSettlingReturnsTheUnused) {
  for (Algorithm a : {Algorithm::kFixedWindow, Algorithm::kTokenBucket}) {
    SCOPED_TRACE(AlgorithmName(a));
    const LimitSpec spec = Spec(a, 100, kDay);
    MergeState state;
    Hlc stamp = 1;
    EXPECT_TRUE(CheckMerged(spec, state, kOwner, ++stamp, At(kT0, 10)).allowed);
    ASSERT_TRUE(LendMerged(spec, state, 1, 30, kT0).ok());
    ASSERT_TRUE(LendMerged(spec, state, 2, 20, kT0).ok());
    EXPECT_EQ(LendMerged(spec, state, 2, 5, kT0).code(), Status::Code::kAlreadyExists);
    EXPECT_EQ(GrantsOut(spec, state, kT0), 50u);
    const Decision peek = PeekMerged(spec, state, At(kT0, 0));
    EXPECT_EQ(peek.remaining, 40u);
    // 40 fit beside the slices, the 41st does not (and is told to retry, not never).
    EXPECT_EQ(AdmitAll(spec, state, kT0, stamp), 40u);
    const Decision refused = CheckMerged(spec, state, kOwner, ++stamp, At(kT0));
    EXPECT_FALSE(refused.allowed);
    EXPECT_GT(refused.retry_after, 0);
    EXPECT_LT(refused.retry_after, kNever);
    // Holder 1 used 12 of 30: 18 come back; holder 2 is reclaimed whole.
    EXPECT_EQ(SettleMerged(spec, state, 1, 12, kOwner, ++stamp, kT0 + 1), 12u);
    EXPECT_EQ(SettleMerged(spec, state, 1, 12, kOwner, ++stamp, kT0 + 1), 0u) << "settles once";
    EXPECT_EQ(SettleMerged(spec, state, 2, std::nullopt, kOwner, ++stamp, kT0 + 1), 20u);
    EXPECT_EQ(GrantsOut(spec, state, kT0 + 1), 0u);
    // Exactly the 18 returned units are admissible again: 10 + 40 + 12 + 20 + 18 = 100.
    EXPECT_EQ(AdmitAll(spec, state, kT0 + 1, stamp), 18u);
  }
}

TEST(GrantMerge, AFixedWindowSliceOfAnEndedWindowChargesNothing) {
  const LimitSpec spec = Spec(Algorithm::kFixedWindow, 100, kSecond);
  MergeState state;
  Hlc stamp = 1;
  ASSERT_TRUE(LendMerged(spec, state, 1, 60, kT0).ok());
  EXPECT_EQ(AdmitAll(spec, state, kT0, stamp), 40u);
  // The next window: the slice no longer counts, and settling it charges nothing there.
  EXPECT_EQ(GrantsOut(spec, state, kT0 + kSecond), 0u);
  EXPECT_EQ(SettleMerged(spec, state, 1, 60, kOwner, ++stamp, kT0 + kSecond), 0u);
  EXPECT_EQ(AdmitAll(spec, state, kT0 + kSecond, stamp), 100u);
}

TEST(GrantMerge, TheLedgerTravelsThroughMergesAndTheCodecAndKeepsTheRowAlive) {
  const LimitSpec spec = Spec(Algorithm::kTokenBucket, 100, kDay);
  MergeState owner;
  Hlc stamp = 1;
  EXPECT_TRUE(CheckMerged(spec, owner, kOwner, ++stamp, At(kT0, 5)).allowed);
  const MergeState before_lend = owner;
  const uint64_t digest = ChangeDigest(owner);
  ASSERT_TRUE(LendMerged(spec, owner, 7, 25, kT0).ok());
  EXPECT_NE(ChangeDigest(owner), digest) << "the store must see a lend as a change";
  EXPECT_EQ(MergedIdleAt(spec, owner), std::numeric_limits<TimeNs>::max());

  // A replica that had the state before the lend learns the grant by merging, in either order.
  MergeState replica = before_lend;
  EXPECT_TRUE(MergeInto(replica, owner));
  EXPECT_EQ(replica.grants, owner.grants);
  EXPECT_EQ(PeekMerged(spec, replica, At(kT0, 0)).remaining, 70u);
  EXPECT_EQ(Merge(before_lend, owner), Merge(owner, before_lend));

  // The codec: format 2 with the ledger, format 1 (unchanged bytes) without.
  const std::string bytes = EncodeMergeState(owner);
  EXPECT_EQ(bytes[0], 2);
  Result<MergeState> parsed = ParseMergeState(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed.value(), owner);
  EXPECT_EQ(EncodeMergeState(before_lend)[0], 1);
  EXPECT_FALSE(ParseMergeState(bytes + "x").ok());
  EXPECT_FALSE(ParseMergeState(bytes.substr(0, bytes.size() - 1)).ok());
  // A state with grants but no charge yet (the owner lent from nothing) round-trips too.
  MergeState fresh;
  ASSERT_TRUE(LendMerged(spec, fresh, 9, 3, kT0).ok());
  Result<MergeState> fresh_parsed = ParseMergeState(EncodeMergeState(fresh));
  ASSERT_TRUE(fresh_parsed.ok());
  EXPECT_EQ(fresh_parsed.value(), fresh);

  // Settled on one copy, still outstanding on another: the merge holds the settle and its charge.
  MergeState settled = owner;
  EXPECT_EQ(SettleMerged(spec, settled, 7, 4, kOwner, ++stamp, kT0 + 1), 4u);
  MergeState joined = Merge(owner, settled);
  EXPECT_EQ(GrantsOut(spec, joined, kT0 + 1), 0u);
  EXPECT_EQ(PeekMerged(spec, joined, At(kT0 + 1, 0)).remaining, 91u);
}

// The packed one-contributor form (PackState) has no room for a ledger: a state with grants, outstanding
// or settled, stays in the full form, so the store never drops a grant by packing it.
TEST(GrantMerge, AStateWithGrantsIsNeverPacked) {
  for (Algorithm a : {Algorithm::kTokenBucket, Algorithm::kFixedWindow, Algorithm::kAnchoredWindow}) {
    SCOPED_TRACE(AlgorithmName(a));
    const LimitSpec spec = Spec(a, 100, kDay);
    MergeState state;
    HybridClock clock(0);  // (packing needs versions near the instants they stamp)
    EXPECT_TRUE(CheckMerged(spec, state, kOwner, clock.Now(kT0), At(kT0, 5)).allowed);
    PackedState packed;
    ASSERT_TRUE(PackState(spec, state, 3, packed)) << "one contributor, no grants: packs";
    ASSERT_TRUE(LendMerged(spec, state, 1, 10, kT0).ok());
    EXPECT_FALSE(PackState(spec, state, 3, packed)) << "a grant out";
    EXPECT_EQ(SettleMerged(spec, state, 1, 2, kOwner, clock.Now(kT0), kT0 + 1), 2u);
    EXPECT_FALSE(PackState(spec, state, 3, packed)) << "a settled grant not yet collected";
    // Unpacking into a state that had a ledger leaves none behind.
    MergeState plain;
    EXPECT_TRUE(CheckMerged(spec, plain, kOwner, clock.Now(kT0), At(kT0, 5)).allowed);
    ASSERT_TRUE(PackState(spec, plain, 3, packed));
    MergeState scratch = state;
    UnpackState(spec, packed, kOwner, scratch);
    EXPECT_EQ(scratch, plain);
  }
}

}  // namespace
}  // namespace ringlimit::limiter
