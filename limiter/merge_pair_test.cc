// The group forms (merge_pair.h): random two- and three-contributor states of every algorithm round-trip
// exactly, the packable ones are the common ones, and merging copies in any order gives the same state
// whichever form the copies were held in. Seeded random sequences (std::mt19937_64, fixed seeds).
#include "limiter/merge_pair.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <string>
#include <vector>

#include "limiter/merge_internal.h"
#include "limiter/test_util.h"

namespace ringlimit::limiter {
namespace {

using internal::IsBucket;
using testing::At;
using testing::Spec;

// Two contributors (node 1 and node 2, first incarnations) and the tags a shard gave them.
constexpr std::array<ContributorId, 2> kIds = {0x100000001ULL, 0x200000001ULL};
constexpr std::array<uint16_t, 2> kTags = {3, 9};
// Three contributors for the trio form.
constexpr std::array<ContributorId, 3> kTrioIds = {0x100000001ULL, 0x200000001ULL, 0x300000001ULL};
constexpr std::array<uint16_t, 3> kTrioTags = {3, 9, 65535};
constexpr TimeNs kT0 = 1'700'000'000LL * kSecond;
constexpr uint64_t kSeeds[] = {1, 2, 3, 42};

bool Pairable(Algorithm a) { return a != Algorithm::kSlidingLog; }

// Whether a decider's charged copy is expected to pack under `spec` in these workloads: sliding_window packs
// only while its records' live cells are k - 1 and k, which the hourly configuration's minute-wide cells
// give and the others' (125 ms cells, charges up to 150 ms apart) rarely do.
bool Packs(const LimitSpec& spec) {
  return Pairable(spec.algorithm) &&
         (spec.algorithm != Algorithm::kSlidingWindow || spec.window >= 3600 * kSecond);
}

std::vector<LimitSpec> Configs(Algorithm a) {
  LimitSpec base = Spec(a, 12, kSecond);
  base.buckets = 8;
  if (a == Algorithm::kGcra) base.burst = 4;
  LimitSpec soft = base;
  soft.mode = Mode::kSoft;
  soft.soft_pct = 50;
  LimitSpec denied = base;
  denied.count_denied = true;
  LimitSpec hourly = Spec(a, 1000, 3600 * kSecond);  // as key_bytes_bench: nothing expires
  hourly.buckets = 60;
  if (a == Algorithm::kGcra) hourly.burst = 999;  // (with a burst of 10 nearly every check is refused)
  return {base, soft, denied, hourly};
}

// Packs `m` when it has a group form of N (tags: kTags, kTrioTags); if so it must unpack to exactly `m`, also
// into a state that held something else, whatever the caller's bits (the high halves of word[3] and, trio,
// word[7]) hold, and no other form takes it. Returns whether it packed.
template <size_t N>
bool ExpectGroupRoundTrip(const LimitSpec& spec, const MergeState& m, MergeState& reused,
                          const std::string& where) {
  const std::array<uint16_t, N>& tags = [] {
    if constexpr (N == 2) {
      return kTags;
    } else {
      return kTrioTags;
    }
  }();
  std::array<ContributorId, N> ids{};
  if (!GroupCandidates(spec, m, ids)) return false;
  PackedGroup<N> packed;
  if (!PackGroup(spec, m, tags, packed)) return false;
  EXPECT_EQ(GroupTags(packed), tags) << where;
  for (size_t w = 3; w < 4 * N - 4; w += 4) {  // word 3, and a trio's word 7
    EXPECT_EQ(packed.word[w] >> 32, 0u) << where;
    packed.word[w] |= uint64_t{0xdeadbeef - w} << 32;  // the storage tier's cell indices
  }
  UnpackGroup(spec, packed, ids, reused);
  EXPECT_EQ(reused, m) << where;
  MergeState fresh;
  UnpackGroup(spec, packed, ids, fresh);
  EXPECT_EQ(fresh, m) << where;
  // Never two forms: each takes exactly the states with its number of contributors.
  PackedState single;
  EXPECT_FALSE(PackState(spec, m, 1, single)) << where;
  if constexpr (N == 3) {
    PackedPair pair;
    EXPECT_FALSE(PackPair(spec, m, kTags, pair)) << where;
  }
  return true;
}
bool ExpectPairRoundTrip(const LimitSpec& spec, const MergeState& m, MergeState& reused,
                         const std::string& where) {
  return ExpectGroupRoundTrip<2>(spec, m, reused, where);
}
bool ExpectTrioRoundTrip(const LimitSpec& spec, const MergeState& m, MergeState& reused,
                         const std::string& where) {
  return ExpectGroupRoundTrip<3>(spec, m, reused, where);
}

class PairAllAlgorithms : public ::testing::TestWithParam<Algorithm> {};

// Two deciders charge their own copies (gaps up to 150 ms, some going back in time) and now and then merge
// the other's copy; a replica merges both. Every two-contributor state reached round-trips. For the
// pairable algorithms a decider's copy that its charge just changed packs; of all states at least a quarter
// (a replica's bucket merged after a decider's last rebase holds a record newer than its base: the full
// form).
TEST_P(PairAllAlgorithms, RandomTwoContributorStatesRoundTrip) {
  for (const LimitSpec& spec : Configs(GetParam())) {
    for (uint64_t seed : kSeeds) {
      std::mt19937_64 rng(seed);
      std::array<MergeState, 2> copies;
      std::array<Hlc, 2> clocks{};
      MergeState replica, reused;
      int two = 0, packed = 0, own_two = 0,
          own_packed = 0;  // own: the decider's copy it just charged (changed)
      TimeNs t = kT0 + static_cast<TimeNs>(rng() % kSecond);
      for (int step = 0; step < 400; ++step) {
        const uint64_t r = rng() % 10;
        if (r == 0) {
          t -= static_cast<TimeNs>(rng() % (400 * kMillisecond));
        } else if (r > 2) {
          t += static_cast<TimeNs>(rng() % (150 * kMillisecond));
        }
        const size_t node = rng() % 2;
        if (rng() % 3 == 0) MergeInto(copies[node], copies[1 - node]);
        clocks[node] = HlcTick(std::max(clocks[node], clocks[1 - node]), t);
        const uint64_t before = ChangeDigest(copies[node]);
        (void)CheckMerged(spec, copies[node], kIds[node], clocks[node], At(t, 1 + rng() % 3));
        const bool charged = ChangeDigest(copies[node]) != before;
        Collect(spec, copies[node]);
        MergeInto(replica, copies[node]);
        Collect(spec, replica);
        const std::string where = std::string(AlgorithmName(spec.algorithm)) + " mode " +
                                  std::string(ModeName(spec.mode)) + " seed " + std::to_string(seed) +
                                  " step " + std::to_string(step);
        for (const MergeState* m : {&copies[0], &copies[1], &replica}) {
          std::array<ContributorId, 2> ids{};
          const bool candidate = PairCandidates(spec, *m, ids);
          two += candidate ? 1 : 0;
          const bool ok = ExpectPairRoundTrip(spec, *m, reused, where);
          packed += ok ? 1 : 0;
          if (m == &copies[node] && charged && m->contributions.size() == 2) {
            ++own_two;
            own_packed += ok ? 1 : 0;
          }
          if (candidate) {
            EXPECT_EQ(ids, kIds) << where;
          }
        }
        if (::testing::Test::HasFailure()) return;
      }
      const std::string where = std::string(AlgorithmName(spec.algorithm)) + " mode " +
                                std::string(ModeName(spec.mode)) + " limit " + std::to_string(spec.limit) +
                                " seed " + std::to_string(seed);
      if (!Pairable(spec.algorithm)) {
        EXPECT_EQ(packed, 0) << where;
      } else if (Packs(spec)) {
        // A decider's copy it just charged packs (anchored_window: not when the copies' windows overlap
        // three ways, which a concurrent workload like this one makes now and then).
        EXPECT_GT(own_two, 20) << where;
        EXPECT_GE(packed * 4, two) << where << ": " << packed << " of " << two;  // (replicas: see above)
        if (spec.algorithm == Algorithm::kAnchoredWindow) {
          EXPECT_GE(own_packed * 3, own_two) << where << ": " << own_packed << " of " << own_two;
        } else {
          EXPECT_GE(own_packed * 10, own_two * 9) << where << ": " << own_packed << " of " << own_two;
        }
      }
    }
  }
}

// Copies of concurrent deciders (two contributors), each held either as it is or through its pair form,
// merged in every order: the same state every time, and the same as merging the originals.
TEST_P(PairAllAlgorithms, MergeOrderAndFormDoNotChangeTheResult) {
  for (const LimitSpec& spec : Configs(GetParam())) {
    for (uint64_t seed : kSeeds) {
      std::mt19937_64 rng(seed * 31);
      std::array<MergeState, 4> copies;  // 0, 1: the deciders; 2, 3: replicas merging what they hear
      std::array<Hlc, 2> clocks{};
      TimeNs t = kT0;
      int packed_copies = 0;
      for (int step = 0; step < 200; ++step) {
        t += static_cast<TimeNs>(rng() % (60 * kMillisecond));
        const size_t node = rng() % 2;
        if (rng() % 4 == 0) MergeInto(copies[node], copies[1 - node]);  // a handoff: the next charge rebases
        clocks[node] = HlcTick(std::max(clocks[node], clocks[1 - node]), t);
        (void)CheckMerged(spec, copies[node], kIds[node], clocks[node], At(t, 1 + rng() % 2));
        Collect(spec, copies[node]);
        if (rng() % 4 == 0) MergeInto(copies[2 + rng() % 2], copies[rng() % 2]);
        if (step % 20 != 19) continue;
        // Every copy through its pair form when it has one.
        std::array<MergeState, 4> held = copies;
        for (MergeState& h : held) {
          std::array<ContributorId, 2> ids{};
          PackedPair packed;
          if (PairCandidates(spec, h, ids) && PackPair(spec, h, kTags, packed)) {
            UnpackPair(spec, packed, ids, h);
            ++packed_copies;
          }
        }
        std::array<size_t, 4> order = {0, 1, 2, 3};
        MergeState want;
        for (size_t i : order) MergeInto(want, copies[i]);
        for (int round = 0; round < 6; ++round) {
          std::shuffle(order.begin(), order.end(), rng);
          MergeState got;
          for (size_t i : order) MergeInto(got, held[i]);
          EXPECT_EQ(got, want) << AlgorithmName(spec.algorithm) << " seed " << seed << " step " << step;
          Collect(spec, got);
          MergeState collected = want;
          Collect(spec, collected);
          EXPECT_EQ(got, collected);
          MergeState reused;
          (void)ExpectPairRoundTrip(spec, got, reused, "merged");
        }
        if (::testing::Test::HasFailure()) return;
      }
      if (Packs(spec)) {
        EXPECT_GT(packed_copies, 0) << AlgorithmName(spec.algorithm);
      }
    }
  }
}

// Three deciders (an owner, the node that held the key before it and the one before that: a key whose
// ownership moved twice) charge their own copies and now and then merge another's; a replica merges all
// three. Every three-contributor state reached round-trips through the trio form, a decider's copy that its
// charge just changed packs as often as in the pair form, and merging copies held in the trio form in any
// order gives what merging the originals gives.
TEST_P(PairAllAlgorithms, RandomThreeContributorStatesRoundTripAndMerge) {
  // Counted over every configuration and seed (with a limit of 12 per second three windows' records are
  // rarely all live; the hourly configuration has many), for sliding_window only where it Packs.
  int three = 0, packed = 0, own_three = 0, own_packed = 0;
  for (const LimitSpec& spec : Configs(GetParam())) {
    for (uint64_t seed : kSeeds) {
      std::mt19937_64 rng(seed * 7);
      std::array<MergeState, 3> copies;
      std::array<Hlc, 3> clocks{};
      MergeState replica, reused;
      TimeNs t = kT0 + static_cast<TimeNs>(rng() % kSecond);
      const std::string where = std::string(AlgorithmName(spec.algorithm)) + " mode " +
                                std::string(ModeName(spec.mode)) + " limit " + std::to_string(spec.limit) +
                                " seed " + std::to_string(seed);
      for (int step = 0; step < 600; ++step) {
        const uint64_t r = rng() % 10;
        if (r == 0) {
          t -= static_cast<TimeNs>(rng() % (400 * kMillisecond));
        } else if (r > 2) {
          t += static_cast<TimeNs>(rng() % (100 * kMillisecond));
        }
        const size_t node = rng() % 3;
        const size_t other = (node + 1 + rng() % 2) % 3;
        if (rng() % 3 == 0) MergeInto(copies[node], copies[other]);
        clocks[node] = HlcTick(std::max(clocks[node], clocks[other]), t);
        const uint64_t before = ChangeDigest(copies[node]);
        (void)CheckMerged(spec, copies[node], kTrioIds[node], clocks[node], At(t, 1 + rng() % 3));
        const bool charged = ChangeDigest(copies[node]) != before;
        Collect(spec, copies[node]);
        MergeInto(replica, copies[node]);
        Collect(spec, replica);
        const std::string at = where + " step " + std::to_string(step);
        for (const MergeState* m : {&copies[0], &copies[1], &copies[2], &replica}) {
          std::array<ContributorId, 3> ids{};
          const bool candidate = GroupCandidates(spec, *m, ids);
          const bool ok = ExpectTrioRoundTrip(spec, *m, reused, at);
          if (!Pairable(spec.algorithm) || Packs(spec)) {  // (counted where the share is asserted)
            three += candidate ? 1 : 0;
            packed += ok ? 1 : 0;
            if (m == &copies[node] && charged && candidate) {
              ++own_three;
              own_packed += ok ? 1 : 0;
            }
          }
          if (candidate) {
            EXPECT_EQ(ids, kTrioIds) << at;
          }
        }
        if (step % 50 == 49) {
          // Every copy through its trio form when it has one, merged in random orders.
          std::array<MergeState, 4> originals = {copies[0], copies[1], copies[2], replica};
          std::array<MergeState, 4> held = originals;
          for (MergeState& h : held) {
            std::array<ContributorId, 3> ids{};
            PackedTrio trio;
            if (GroupCandidates(spec, h, ids) && PackGroup(spec, h, kTrioTags, trio)) {
              UnpackGroup(spec, trio, ids, h);
            }
          }
          std::array<size_t, 4> order = {0, 1, 2, 3};
          MergeState want;
          for (size_t i : order) MergeInto(want, originals[i]);
          for (int round = 0; round < 4; ++round) {
            std::shuffle(order.begin(), order.end(), rng);
            MergeState got;
            for (size_t i : order) MergeInto(got, held[i]);
            EXPECT_EQ(got, want) << at;
          }
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
  const std::string where(AlgorithmName(GetParam()));
  if (!Pairable(GetParam())) {
    EXPECT_EQ(packed, 0) << where;
    return;
  }
  // A decider's copy it just charged packs (anchored_window: not when the copies' windows overlap three
  // ways); of all states at least a fifth (replicas, and copies that just merged another's newer record,
  // hold buckets whose records are newer than their base: the full form until the next charge).
  EXPECT_GT(own_three, 50) << where;
  EXPECT_GE(packed * 5, three) << where << ": " << packed << " of " << three;
  if (GetParam() == Algorithm::kAnchoredWindow) {
    EXPECT_GE(own_packed * 4, own_three) << where << ": " << own_packed << " of " << own_three;
  } else {
    EXPECT_GE(own_packed * 10, own_three * 9) << where << ": " << own_packed << " of " << own_three;
  }
}

INSTANTIATE_TEST_SUITE_P(Pair, PairAllAlgorithms, ::testing::ValuesIn(testing::AllAlgorithms()),
                         testing::ParamName);

// The shapes the storage tier moves between, by hand: one contributor (PackState), a second one's charge
// (the pair form), a bucket whose other record is newer than its base (the full form), a drained other
// record kept as a tombstone (the pair form), a window whose other record expired (one contributor again).
TEST(PairForm, PromotionAndCompactionShapes) {
  for (Algorithm a : testing::AllAlgorithms()) {
    SCOPED_TRACE(std::string(AlgorithmName(a)));
    LimitSpec spec = Spec(a, 5, kSecond);
    spec.buckets = 4;
    if (a == Algorithm::kGcra) spec.burst = 4;
    HybridClock a_clock(0), b_clock(0);
    MergeState m, reused;
    PackedState single;
    (void)CheckMerged(spec, m, kIds[0], a_clock.Now(kT0), At(kT0, 1));
    Collect(spec, m);
    EXPECT_EQ(PackState(spec, m, 1, single), a != Algorithm::kSlidingLog);
    EXPECT_FALSE(ExpectPairRoundTrip(spec, m, reused, "one"));
    // The second contributor charges the same copy: two records.
    MergeState b_copy = m;
    ASSERT_TRUE(CheckMerged(spec, b_copy, kIds[1], b_clock.Now(kT0 + kMillisecond), At(kT0 + kMillisecond, 1))
                    .allowed);
    Collect(spec, b_copy);
    EXPECT_EQ(ExpectPairRoundTrip(spec, b_copy, reused, "two"), Pairable(a));
    if (IsBucket(a)) {
      // A charges its own copy again, then hears of B's: B's record is newer than A's base entry of it
      // (none), A's record newer than B's base: not absorbed as it is, the full form.
      (void)CheckMerged(spec, m, kIds[0], a_clock.Now(kT0 + 2 * kMillisecond), At(kT0 + 2 * kMillisecond, 1));
      MergeInto(m, b_copy);
      Collect(spec, m);
      EXPECT_FALSE(ExpectPairRoundTrip(spec, m, reused, "newer than base"));
      // The next charge rebases over both: the pair form again.
      (void)CheckMerged(spec, m, kIds[0], a_clock.Now(kT0 + 3 * kMillisecond), At(kT0 + 3 * kMillisecond, 1));
      Collect(spec, m);
      EXPECT_TRUE(ExpectPairRoundTrip(spec, m, reused, "rebased"));
    } else {
      // B's own copy, started apart (its base: its first charge, newer than A's record), merged into A's:
      // a record older than the base packs too.
      MergeState apart;
      (void)CheckMerged(spec, apart, kIds[1], b_clock.Now(kT0 + 2 * kMillisecond),
                        At(kT0 + 2 * kMillisecond, 1));
      MergeState joined = m;
      MergeInto(joined, apart);
      Collect(spec, joined);
      ASSERT_GT(joined.base.stamp, joined.contributions[0].version);
      EXPECT_EQ(ExpectPairRoundTrip(spec, joined, reused, "apart"), Pairable(a));
      m = b_copy;
    }
    // Three windows later A charges: B's record has drained or expired.
    (void)CheckMerged(spec, m, kIds[0], a_clock.Now(kT0 + 3 * kSecond), At(kT0 + 3 * kSecond, 1));
    Collect(spec, m);
    if (IsBucket(a)) {
      ASSERT_EQ(m.contributions.size(), 1u);
      ASSERT_EQ(m.base.included.size(), 2u);  // B's tombstone
      EXPECT_TRUE(ExpectPairRoundTrip(spec, m, reused, "tombstone"));
    } else {
      EXPECT_EQ(m.contributions.size(), 1u);
      EXPECT_EQ(PackState(spec, m, 1, single), a != Algorithm::kSlidingLog);
    }
  }
}

// Figures beyond the narrowed widths stay in the full form (and a state with grants).
TEST(PairForm, RefusesWhatItCannotHoldExactly) {
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 1000, 3600 * kSecond);
  HybridClock a_clock(0), b_clock(0);
  MergeState m, reused;
  (void)CheckMerged(spec, m, kIds[0], a_clock.Now(kT0), At(kT0, 1));
  (void)CheckMerged(spec, m, kIds[1], b_clock.Now(kT0 + kSecond), At(kT0 + kSecond, 1));
  ASSERT_TRUE(ExpectPairRoundTrip(spec, m, reused, "plain"));
  MergeState big = m;
  big.contributions[0].cells.back().count = uint64_t{1} << 32;
  EXPECT_FALSE(ExpectPairRoundTrip(spec, big, reused, "count"));
  MergeState far = m;
  far.newest += 3 * kSecond;  // beyond 2^31 ns of the newer version's time
  EXPECT_FALSE(ExpectPairRoundTrip(spec, far, reused, "newest"));
  MergeState granted = m;
  ASSERT_TRUE(LendMerged(spec, granted, 1, 5, kT0 + kSecond).ok());
  EXPECT_FALSE(ExpectPairRoundTrip(spec, granted, reused, "grants"));
  MergeState unsorted = m;
  std::swap(unsorted.contributions[0], unsorted.contributions[1]);
  EXPECT_FALSE(ExpectPairRoundTrip(spec, unsorted, reused, "unsorted"));

  LimitSpec bucket = Spec(Algorithm::kTokenBucket, 1000, 3600 * kSecond);
  MergeState b;
  (void)CheckMerged(bucket, b, kIds[0], a_clock.Now(kT0 + 2 * kSecond), At(kT0 + 2 * kSecond, 1));
  (void)CheckMerged(bucket, b, kIds[1], b_clock.Now(kT0 + 3 * kSecond), At(kT0 + 3 * kSecond, 1));
  ASSERT_TRUE(ExpectPairRoundTrip(bucket, b, reused, "bucket"));
  MergeState consumed = b;
  consumed.contributions[0].consumed = uint64_t{1} << 31;
  consumed.base.included[0].consumed = uint64_t{1} << 31;
  consumed.base.included[0].expires = internal::ExpiresOf(bucket, consumed.contributions[0]);
  EXPECT_FALSE(ExpectPairRoundTrip(bucket, consumed, reused, "consumed"));
  MergeState old = b;  // A's record 5 hours before the base: beyond 2^40 HLC ticks
  old.contributions[0].version -= MakeHlc(5 * 3600 * 1000, 0);
  old.contributions[0].epoch = old.contributions[0].version;
  old.base.included[0].version = old.contributions[0].version;
  old.base.included[0].epoch = old.contributions[0].epoch;
  EXPECT_FALSE(ExpectPairRoundTrip(bucket, old, reused, "version"));
}

}  // namespace
}  // namespace ringlimit::limiter
