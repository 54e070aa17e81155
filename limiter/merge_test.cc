// Mergeable state (merge.h): exactness for sequential deciders, the lattice laws, no lost admission
// for concurrent deciders, time going backwards, GC and the encoding. Seeded random operation
// sequences (std::mt19937_64, fixed seeds), every algorithm and mode.
#include "limiter/merge.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "limiter/test_util.h"

namespace ringlimit::limiter {
namespace {

using testing::At;
using testing::Spec;

constexpr TimeNs kT0 = 1'700'000'000LL * kSecond;
constexpr uint64_t kSeeds[] = {1, 2, 3, 42};

// One spec configuration per mode (and the leaky shaper, count_denied).
std::vector<LimitSpec> Configs(Algorithm a) {
  std::vector<LimitSpec> out;
  LimitSpec base = Spec(a, 12, kSecond);
  base.buckets = 8;
  if (a == Algorithm::kGcra) {
    base.burst = 4;
  }
  out.push_back(base);  // hard
  LimitSpec soft = base;
  soft.mode = Mode::kSoft;
  soft.soft_pct = 50;
  out.push_back(soft);
  LimitSpec shadow = base;
  shadow.mode = Mode::kShadow;
  out.push_back(shadow);
  LimitSpec dynamic = base;
  dynamic.mode = Mode::kDynamic;
  dynamic.dynamic_limit = 20;
  out.push_back(dynamic);
  LimitSpec denied = base;
  denied.count_denied = true;
  out.push_back(denied);
  if (a == Algorithm::kLeakyBucket) {
    LimitSpec shaper = base;
    shaper.max_delay = 300 * kMillisecond;
    out.push_back(shaper);
  }
  return out;
}

struct Op {
  TimeNs t;
  uint64_t cost;
  double headroom;
  int node;
};

// Gaps up to 150 ms, one in four simultaneous, one in ten going back up to 400 ms.
std::vector<Op> RandomOps(uint64_t seed, int n, int nodes) {
  std::mt19937_64 rng(seed);
  std::vector<Op> out;
  TimeNs t = kT0 + static_cast<TimeNs>(rng() % kSecond);
  for (int i = 0; i < n; ++i) {
    const uint64_t r = rng() % 10;
    if (r == 0) {
      t -= static_cast<TimeNs>(rng() % (400 * kMillisecond));
    } else if (r > 2) {
      t += static_cast<TimeNs>(rng() % (150 * kMillisecond));
    }
    out.push_back({t, rng() % 5 == 0 ? 0 : 1 + rng() % 3, static_cast<double>(rng() % 5) / 4.0,
                   static_cast<int>(rng() % static_cast<uint64_t>(nodes))});
  }
  return out;
}

void ExpectSameDecision(const Decision& want, const Decision& got, const std::string& where) {
  EXPECT_EQ(want.allowed, got.allowed) << where;
  EXPECT_EQ(want.would_deny, got.would_deny) << where;
  EXPECT_EQ(want.beyond_limit, got.beyond_limit) << where;
  EXPECT_EQ(want.remaining, got.remaining) << where;
  EXPECT_EQ(want.reset_after, got.reset_after) << where;
  EXPECT_EQ(want.retry_after, got.retry_after) << where;
  EXPECT_EQ(want.delay, got.delay) << where;
}

// Whether Collect commutes with Merge exactly (window algorithms, sliding_log); for the buckets it
// commutes up to decisions (a drained record may outlive its base entry in one order).
bool FamilyIsExactGc(const LimitSpec& spec) {
  return spec.algorithm != Algorithm::kTokenBucket && spec.algorithm != Algorithm::kLeakyBucket &&
         spec.algorithm != Algorithm::kGcra;
}

class MergeAllAlgorithms : public ::testing::TestWithParam<Algorithm> {};

// (a) Deciders one after another, each having merged the previous one's copy first, decide exactly
// as one node with the plain State; Collect on the way changes nothing.
TEST_P(MergeAllAlgorithms, SequentialDecidersAreExact) {
  for (const LimitSpec& spec : Configs(GetParam())) {
    for (uint64_t seed : kSeeds) {
      constexpr int kNodes = 3;
      std::array<MergeState, kNodes> copies;
      std::array<Hlc, kNodes> clocks{};
      State plain;
      int previous = 0;
      int step = 0;
      for (const Op& op : RandomOps(seed, 600, kNodes)) {
        MergeInto(copies[op.node], copies[previous]);
        if (step % 17 == 0) {
          Collect(spec, copies[op.node]);
        }
        Request req = At(op.t, op.cost);
        req.headroom = op.headroom;
        clocks[op.node] = HlcTick(std::max(clocks[op.node], clocks[previous]), op.t);
        const Decision want = Check(spec, plain, req);
        const Decision got = CheckMerged(spec, copies[op.node], 100 + op.node, clocks[op.node], req);
        const std::string where = std::string(AlgorithmName(spec.algorithm)) + " mode " +
                                  std::string(ModeName(spec.mode)) + " seed " + std::to_string(seed) +
                                  " step " + std::to_string(step);
        ExpectSameDecision(want, got, where);
        // A peek a little later (cost 2) agrees as well.
        ExpectSameDecision(Peek(spec, plain, At(op.t + 50 * kMillisecond, 2)),
                           PeekMerged(spec, copies[op.node], At(op.t + 50 * kMillisecond, 2)),
                           where + " peek");
        if (::testing::Test::HasFailure()) {
          return;
        }
        previous = op.node;
        ++step;
      }
    }
  }
}

// Copies built by concurrent deciders with occasional gossip, for the lattice tests.
std::array<MergeState, 3> ConcurrentCopies(const LimitSpec& spec, uint64_t seed, int ops,
                                           std::vector<uint64_t>* admitted = nullptr) {
  std::mt19937_64 rng(seed * 7919);
  std::array<MergeState, 3> copies;
  std::array<Hlc, 3> clocks{};
  for (const Op& op : RandomOps(seed, ops, 3)) {
    if (rng() % 8 == 0) {
      const int from = static_cast<int>(rng() % 3);
      MergeInto(copies[op.node], copies[from]);
    }
    if (rng() % 97 == 0) {
      ResetMerged(spec, copies[op.node], clocks[op.node] = HlcTick(clocks[op.node], op.t));
    }
    clocks[op.node] = HlcTick(clocks[op.node], op.t);
    const Decision d = CheckMerged(spec, copies[op.node], 100 + op.node, clocks[op.node], At(op.t, op.cost));
    if (admitted != nullptr && d.allowed && !d.would_deny) {
      (*admitted)[static_cast<size_t>(op.node)] += op.cost;
    }
  }
  return copies;
}

// (b) The join is commutative, associative and idempotent; Collect commutes with it (up to a final
// Collect) and never changes a decision.
TEST_P(MergeAllAlgorithms, MergeIsASemilatticeAndGcCommutes) {
  for (const LimitSpec& spec : Configs(GetParam())) {
    for (uint64_t seed : kSeeds) {
      const auto [a, b, c] = ConcurrentCopies(spec, seed, 300);
      EXPECT_EQ(Merge(a, b), Merge(b, a));
      EXPECT_EQ(Merge(Merge(a, b), c), Merge(a, Merge(b, c)));
      EXPECT_EQ(Merge(a, a), a);
      EXPECT_EQ(Merge(a, MergeState{}), a);
      MergeState ab = Merge(a, b);
      MergeState collected_then_merged = Merge(a, b);
      MergeState ga = a, gb = b;
      Collect(spec, ga);
      Collect(spec, gb);
      MergeState gab = Merge(ga, gb);
      for (TimeNs dt : {TimeNs{0}, 300 * kMillisecond, 2 * kSecond}) {
        const Request r = At(ab.newest + dt, 1);
        const Decision want = PeekMerged(spec, ab, r);
        ExpectSameDecision(want, PeekMerged(spec, gab, r), "gc before merge");
        MergeState g = ab;
        Collect(spec, g);
        ExpectSameDecision(want, PeekMerged(spec, g, r), "gc after merge");
      }
      Collect(spec, collected_then_merged);
      Collect(spec, gab);
      if (FamilyIsExactGc(spec)) {
        EXPECT_EQ(collected_then_merged, gab);
      }
    }
  }
}

// (c) Concurrent deciders that never hear of each other until the end (a partition, a paused owner)
// lose no admission: with a long window every unit any copy admitted is in the merge, and a key that
// went over stays refused. Hard mode, every algorithm.
TEST_P(MergeAllAlgorithms, ConcurrentDecidersLoseNoAdmission) {
  for (uint64_t seed : kSeeds) {
    LimitSpec spec = Spec(GetParam(), 30, 24 * testing::kHour);
    spec.buckets = 24;
    spec.burst = GetParam() == Algorithm::kGcra ? 29 : 0;  // a capacity of 30 as the others
    std::array<MergeState, 3> copies;
    std::array<uint64_t, 3> admitted{};
    std::mt19937_64 rng(seed);
    TimeNs t = kT0;
    for (int i = 0; i < 90; ++i) {
      t += static_cast<TimeNs>(rng() % (20 * kMillisecond));
      const auto node = static_cast<size_t>(rng() % 3);
      const uint64_t cost = 1 + rng() % 2;
      if (CheckMerged(spec, copies[node], 100 + node, HlcTick(0, t) + static_cast<Hlc>(i), At(t, cost))
              .allowed) {
        admitted[node] += cost;
      }
    }
    const uint64_t total = admitted[0] + admitted[1] + admitted[2];
    ASSERT_GT(total, spec.limit);  // the three sides together went over
    const MergeState merged = Merge(Merge(copies[0], copies[2]), copies[1]);
    const State plain = Materialize(spec, merged);
    switch (GetParam()) {
      case Algorithm::kSlidingLog:
        EXPECT_EQ(plain.tail.size(), total);
        break;
      case Algorithm::kFixedWindow:
      case Algorithm::kAnchoredWindow:
      case Algorithm::kSlidingWindowApprox:
      case Algorithm::kSlidingWindow:
        EXPECT_EQ(static_cast<uint64_t>(plain.word[1]), total);  // the views clamp at 2x on read
        break;
      default: {
        uint64_t consumed = 0;
        for (const Contribution& c : merged.contributions) {
          consumed += c.consumed;
        }
        EXPECT_EQ(consumed, total);
      }
    }
    // Refused now and for a while (the window algorithms: until the day ends; the buckets: until the
    // debt beyond the capacity has drained, at 30 units a day).
    for (DurationNs later : {DurationNs{0}, kSecond, testing::kMinute}) {
      const Decision d = PeekMerged(spec, merged, At(t + later, 1));
      EXPECT_FALSE(d.allowed) << seed << " +" << later;
      EXPECT_GT(d.retry_after, 0);
    }
    // A bucket in debt reports when it will admit again, exactly.
    if (GetParam() == Algorithm::kTokenBucket) {
      const Decision d = PeekMerged(spec, merged, At(t, 1));
      EXPECT_TRUE(PeekMerged(spec, merged, At(t + d.retry_after, 1)).allowed);
      EXPECT_FALSE(PeekMerged(spec, merged, At(t + d.retry_after - 1, 1)).allowed);
      const uint64_t debt_units = total - spec.limit;  // beyond the capacity of 30
      EXPECT_GE(d.retry_after, static_cast<DurationNs>(debt_units) * (24 * testing::kHour / 30));
    }
  }
}

// (d) Time going backwards: an exhausted merged state stays exhausted for any earlier instant.
TEST_P(MergeAllAlgorithms, ExhaustedStaysExhaustedWhenTimeGoesBack) {
  LimitSpec spec = Spec(GetParam(), 5, kSecond);
  MergeState a, b;
  for (int i = 0; i < 5; ++i) {
    (void)CheckMerged(spec, i % 2 == 0 ? a : b, i % 2, MakeHlc(1000, static_cast<uint32_t>(i + 1)), At(kT0));
  }
  const MergeState m = Merge(a, b);
  for (TimeNs t : {kT0, kT0 - kSecond, kT0 - testing::kHour, std::numeric_limits<TimeNs>::min()}) {
    EXPECT_FALSE(PeekMerged(spec, m, At(t)).allowed) << t;
  }
}

// A holder that got a decider's later update first holds nothing of *others* the earlier update lacks;
// another decider's admission it holds is newer than what the earlier update knew.
TEST_P(MergeAllAlgorithms, HoldsOthersNewerLeavesOutTheDecidersOwnLaterRecords) {
  LimitSpec spec = Spec(GetParam(), 50, testing::kHour);
  spec.burst = GetParam() == Algorithm::kGcra ? 10 : 0;  // GCRA: admits several in a row
  constexpr ContributorId kDecider = 7;
  constexpr ContributorId kOther = 9;
  MergeState decider;
  ASSERT_TRUE(CheckMerged(spec, decider, kDecider, MakeHlc(1000, 1), At(kT0)).allowed);
  const MergeState first = decider;  // the update the first decision shipped
  ASSERT_TRUE(CheckMerged(spec, decider, kDecider, MakeHlc(1000, 2), At(kT0 + 1)).allowed);
  MergeState holder = decider;  // got the second update before the first
  EXPECT_FALSE(HoldsOthersNewer(holder, first, kDecider));
  EXPECT_TRUE(HoldsOthersNewer(holder, first, 0));  // nobody left out: the decider's own later record counts
  EXPECT_FALSE(HoldsOthersNewer(first, first, 0));
  EXPECT_FALSE(HoldsOthersNewer(MergeState{}, first, kDecider));
  // Another decider's admission at the holder: newer than anything the first update knew of it.
  ASSERT_TRUE(CheckMerged(spec, holder, kOther, MakeHlc(1000, 3), At(kT0 + 2)).allowed);
  EXPECT_TRUE(HoldsOthersNewer(holder, first, kDecider));
  // ... unless the update knew it already.
  const MergeState knows_other = Merge(first, holder);
  EXPECT_FALSE(HoldsOthersNewer(holder, knows_other, kDecider));
  // A copy of another algorithm is never taken as nothing new.
  const Algorithm other =
      GetParam() == Algorithm::kTokenBucket ? Algorithm::kFixedWindow : Algorithm::kTokenBucket;
  MergeState foreign;
  (void)CheckMerged(Spec(other, 50, testing::kHour), foreign, kDecider, MakeHlc(1000, 4), At(kT0 + 3));
  EXPECT_TRUE(HoldsOthersNewer(foreign, first, kDecider));
}

// A reset survives a merge with the older copies, and deciders that saw it start from nothing.
TEST_P(MergeAllAlgorithms, ResetSurvivesMergeWithOlderCopies) {
  LimitSpec spec = Spec(GetParam(), 4, testing::kHour);
  spec.burst = GetParam() == Algorithm::kGcra ? 3 : 0;
  MergeState a, b;
  for (int i = 0; i < 4; ++i) {
    (void)CheckMerged(spec, a, 1, MakeHlc(1000, static_cast<uint32_t>(i + 1)), At(kT0 + i));
  }
  b = a;  // a replica
  EXPECT_FALSE(PeekMerged(spec, a, At(kT0 + 10)).allowed);
  ResetMerged(spec, a, MakeHlc(2000, 0));
  EXPECT_TRUE(PeekMerged(spec, a, At(kT0 + 10, 4)).allowed);
  const MergeState merged = Merge(b, a);
  EXPECT_TRUE(PeekMerged(spec, merged, At(kT0 + 10, 4)).allowed);
  MergeState c = merged;
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(CheckMerged(spec, c, 1, MakeHlc(3000, static_cast<uint32_t>(i)), At(kT0 + 20)).allowed) << i;
  }
  EXPECT_FALSE(CheckMerged(spec, c, 2, MakeHlc(3001, 0), At(kT0 + 20)).allowed);
  EXPECT_FALSE(PeekMerged(spec, Merge(c, b), At(kT0 + 20)).allowed);
}

// (e) Encoding: random states round-trip; random bytes and damaged encodings are rejected or parse
// into a valid state, never crash (run under ASan/UBSan too).
TEST_P(MergeAllAlgorithms, EncodingRoundTripsAndRejectsGarbage) {
  for (const LimitSpec& spec : Configs(GetParam())) {
    for (uint64_t seed : kSeeds) {
      const auto copies = ConcurrentCopies(spec, seed, 200);
      const MergeState m = Merge(Merge(copies[0], copies[1]), copies[2]);
      const std::string bytes = EncodeMergeState(m);
      Result<MergeState> back = ParseMergeState(bytes);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(*back, m);
      MergeState collected = m;
      Collect(spec, collected);
      EXPECT_LE(
          EncodeMergeState(collected).size(),
          MergeStateMaxBytes(spec, std::max(collected.contributions.size(), collected.base.included.size())));
      std::mt19937_64 rng(seed);
      for (int i = 0; i < 300; ++i) {
        std::string damaged = bytes;
        switch (i % 3) {
          case 0:
            damaged.resize(rng() % damaged.size());
            break;
          case 1:
            damaged[rng() % damaged.size()] ^= static_cast<char>(1 + rng() % 255);
            break;
          default:
            damaged += static_cast<char>(rng());
        }
        Result<MergeState> r = ParseMergeState(damaged);
        if (r.ok()) {
          (void)PeekMerged(spec, *r, At(kT0));  // whatever parsed must be usable
          EXPECT_EQ(EncodeMergeState(*r), damaged);
        } else {
          EXPECT_TRUE(r.status().IsCorruption());
        }
      }
      for (int i = 0; i < 300; ++i) {
        std::string garbage(rng() % 64, '\0');
        for (char& ch : garbage) {
          ch = static_cast<char>(rng());
        }
        if (!garbage.empty() && i % 2 == 0) {
          garbage[0] = 1;  // the format byte, to get further
        }
        Result<MergeState> r = ParseMergeState(garbage);
        if (r.ok()) {
          (void)PeekMerged(spec, *r, At(kT0));
        }
      }
    }
  }
}

// Several limits of one entity, all-or-nothing: CheckAllMerged decides and reports exactly as CheckAll
// on plain states, including the figures of a limit not charged because a sibling refused; and a row
// from before merging (FromPlain) goes on deciding as the plain state would.
TEST_P(MergeAllAlgorithms, CheckAllMergedAndFromPlainDecideAsThePlainPath) {
  for (uint64_t seed : kSeeds) {
    std::mt19937_64 rng(seed);
    LimitSpec big = Spec(GetParam(), 12, kSecond);
    big.buckets = 8;
    LimitSpec small = Spec(GetParam(), 3, kSecond);
    small.buckets = 8;
    small.count_denied = seed % 2 == 0;
    const LimitSpec* specs[] = {&big, &small};
    State plain[2];
    MergeState merged[2];
    State* plain_ptrs[] = {&plain[0], &plain[1]};
    MergeState* merged_ptrs[] = {&merged[0], &merged[1]};
    HybridClock clock(0);
    TimeNs t = kT0;
    for (int i = 0; i < 200; ++i) {
      t += static_cast<TimeNs>(rng() % (150 * kMillisecond));
      const Request request{.cost = 1 + rng() % 2, .now = t};
      Decision want[2], got[2];
      const bool plain_all = CheckAll(specs, plain_ptrs, request, want);
      const bool merged_all = CheckAllMerged(specs, merged_ptrs, 77, clock.Now(t), request, got);
      ASSERT_EQ(merged_all, plain_all) << "seed " << seed << " op " << i;
      for (int j = 0; j < 2; ++j) {
        ASSERT_EQ(got[j].allowed, want[j].allowed) << "seed " << seed << " op " << i << " limit " << j;
        ASSERT_EQ(got[j].remaining, want[j].remaining) << "seed " << seed << " op " << i << " limit " << j;
      }
      if (i == 100) {  // as if read back from a row written before merging
        for (int j = 0; j < 2; ++j) merged[j] = FromPlain(*specs[j], plain[j], 5, clock.Now(t));
      }
    }
  }
}

TEST(MergeEncoding, HostileCountsAreRejectedWithoutAllocating) {
  std::string bytes;
  bytes += static_cast<char>(1);  // format
  bytes += static_cast<char>(Algorithm::kSlidingLog);
  bytes.append(8 + 8 + 8 + 8 + 8, '\0');  // newest, base
  bytes.append("\x00\x00\x00\x00", 4);    // no base entries
  bytes.append("\xff\xff\xff\x7f", 4);    // 2^31 contributions
  Result<MergeState> r = ParseMergeState(bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsCorruption());
  EXPECT_TRUE(ParseMergeState("").status().IsCorruption());
  EXPECT_TRUE(ParseMergeState(std::string("\x02\x00", 2)).status().IsCorruption());  // format 2
  EXPECT_TRUE(ParseMergeState(std::string("\x01\x09", 2)).status().IsCorruption());  // algorithm 9
  EXPECT_TRUE(ParseMergeState(std::string("\x01\x00", 2)).ok());                     // empty state
}

// Found by fuzz/merge_state: a sliding_log record stamped after the state's newest instant parsed, and
// charging it appended the (earlier) newest instant after that stamp: a log no parser accepts.
TEST(MergeEncoding, StampAfterNewestIsRejected) {
  MergeState s;
  s.algorithm = Algorithm::kSlidingLog;
  s.newest = 10 * kSecond;
  Contribution record;
  record.id = 42;
  record.version = 3;
  record.stamps = {9 * kSecond, 10 * kSecond};
  s.contributions.push_back(record);
  ASSERT_TRUE(ParseMergeState(EncodeMergeState(s)).ok());
  s.contributions[0].stamps.push_back(10 * kSecond + 1);
  EXPECT_TRUE(ParseMergeState(EncodeMergeState(s)).status().IsCorruption());
}

// The encoding is stored (RocksDB rows) and sent between nodes of different versions: its bytes are the
// documented layout (merge_codec.cc), little-endian, whatever the writer's implementation.
TEST(MergeEncoding, BytesAreTheDocumentedLayout) {
  std::string expected;
  auto le = [&expected](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) expected.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  MergeState s;
  s.algorithm = Algorithm::kTokenBucket;
  s.newest = 0x0102030405060708;
  s.base.stamp = 0x1112131415161718;
  s.base.level_whole = 7;
  s.base.level_frac = 0x2122;
  s.base.at = -5;
  s.base.included.push_back(
      {.id = 3, .version = 4, .epoch = 5, .consumed = 6, .expires = 0x7fffffffffffffff});
  Contribution record;
  record.id = 9;
  record.version = 0xa0b0c0d0e0f0;
  record.epoch = 11;
  record.consumed = 0xfffffffffffffffe;
  record.last = 13;
  s.contributions.push_back(record);

  le(1, 1);  // format
  le(static_cast<uint64_t>(Algorithm::kTokenBucket), 1);
  le(0x0102030405060708, 8);
  le(0x1112131415161718, 8);
  le(7, 8);
  le(0x2122, 8);
  le(static_cast<uint64_t>(int64_t{-5}), 8);
  le(1, 4);
  for (uint64_t v : {3ULL, 4ULL, 5ULL, 6ULL, 0x7fffffffffffffffULL}) le(v, 8);
  le(1, 4);
  for (uint64_t v : {9ULL, 0xa0b0c0d0e0f0ULL, 11ULL, 0xfffffffffffffffeULL, 13ULL}) le(v, 8);

  EXPECT_EQ(EncodeMergeState(s), expected);
  auto parsed = ParseMergeState(expected);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(*parsed, s);
}

// (f) The packed form (PackState / UnpackState) is exact: whatever packs unpacks field for field, into a
// state whose vectors held something else. One decider with its own HLC packs at almost every step
// (every algorithm but sliding_log, never packed; sliding_window only while at most two cells live);
// merged copies of several deciders do not pack while they hold two records, and whatever packs among
// them round-trips too.
bool ExpectRoundTrip(const LimitSpec& spec, const MergeState& m, const std::string& where) {
  PackedState packed;
  if (!PackState(spec, m, 7, packed)) {
    return false;
  }
  EXPECT_NE(packed.word[0], 0u) << where;
  EXPECT_EQ(PackedTag(packed), 7) << where;
  EXPECT_EQ(PackCandidate(m), m.contributions[0].id) << where;
  MergeState back;
  back.contributions.resize(3);  // dirty storage to reuse
  back.contributions[1].cells.push_back({5, 5});
  back.base.included.resize(2);
  UnpackState(spec, packed, m.contributions[0].id, back);
  EXPECT_EQ(back, m) << where;
  const TimeNs idle = MergedIdleAt(spec, m);
  EXPECT_EQ(PackedIdleAt(spec, packed, m.contributions[0].id, back), idle) << where;
  for (TimeNs now : {m.newest - 1, m.newest, m.newest + 1, idle - 1, idle, idle + 1}) {
    EXPECT_EQ(PackedIdleBy(spec, packed, m.contributions[0].id, back, now), idle <= now)
        << where << " " << now;
  }
  return true;
}

TEST_P(MergeAllAlgorithms, PackedFormRoundTripsExactly) {
  for (const LimitSpec& spec : Configs(GetParam())) {
    for (uint64_t seed : kSeeds) {
      MergeState m;
      HybridClock clock(0);
      int packed = 0, steps = 0;
      for (const Op& op : RandomOps(seed, 300, 1)) {
        Request req = At(op.t, op.cost);
        req.headroom = op.headroom;
        (void)CheckMerged(spec, m, 0x100000001ULL, clock.Now(op.t), req);
        Collect(spec, m);
        const std::string where = std::string(AlgorithmName(spec.algorithm)) + " mode " +
                                  std::string(ModeName(spec.mode)) + " seed " + std::to_string(seed) +
                                  " step " + std::to_string(steps);
        packed += ExpectRoundTrip(spec, m, where) ? 1 : 0;
        steps += m.contributions.empty() ? 0 : 1;
        if (::testing::Test::HasFailure()) {
          return;
        }
      }
      if (spec.algorithm == Algorithm::kSlidingLog) {
        EXPECT_EQ(packed, 0);
      } else if (spec.algorithm != Algorithm::kSlidingWindow) {
        EXPECT_GE(packed, steps * 9 / 10) << AlgorithmName(spec.algorithm) << " seed " << seed;
      }
      const auto copies = ConcurrentCopies(spec, seed, 200);
      MergeState all = Merge(Merge(copies[0], copies[1]), copies[2]);
      for (const MergeState& c : copies) {
        ExpectRoundTrip(spec, c, "copy");
      }
      EXPECT_EQ(PackState(spec, all, 7, *std::make_unique<PackedState>()),
                all.contributions.size() == 1 && ExpectRoundTrip(spec, all, "all"));
    }
  }
}

// (g) Promotion and compaction, as the storage tier does them: a packed copy merges a second decider's
// copy (two records: no packed form, the full form decides), and once the second record has expired
// and Collect dropped it (window algorithms) the state packs again -- to exactly the state the full form
// holds, so no admission recorded in it is lost. Buckets keep the second decider's base entry (a
// tombstone against counting its units twice) and stay in the full form.
TEST_P(MergeAllAlgorithms, PromotedStatesCompactBackOnceTheOtherRecordExpires) {
  if (GetParam() == Algorithm::kSlidingLog) {
    return;  // never packed
  }
  LimitSpec spec = Spec(GetParam(), 5, kSecond);
  spec.buckets = 4;
  spec.burst = GetParam() == Algorithm::kGcra ? 4 : 0;  // a capacity of 5 as the others
  HybridClock a_clock(0), b_clock(0);
  MergeState a, b;
  PackedState packed;
  (void)CheckMerged(spec, a, 1, a_clock.Now(kT0), At(kT0, 2));
  (void)CheckMerged(spec, b, 2, b_clock.Now(kT0 + kMillisecond), At(kT0 + kMillisecond, 2));
  ASSERT_TRUE(PackState(spec, a, 1, packed));
  MergeState promoted = a;
  ASSERT_TRUE(MergeInto(promoted, b));
  Collect(spec, promoted);
  EXPECT_FALSE(PackState(spec, promoted, 1, packed));  // two records: the full form
  // Both deciders' units count: 4 of 5 taken, one more admitted, then refused.
  EXPECT_EQ(PeekMerged(spec, promoted, At(kT0 + kMillisecond, 1)).remaining, 0u);
  EXPECT_TRUE(PeekMerged(spec, promoted, At(kT0 + kMillisecond, 1)).allowed);
  EXPECT_FALSE(PeekMerged(spec, promoted, At(kT0 + kMillisecond, 2)).allowed);
  // Two windows later decider 1 charges again: decider 2's record has expired.
  const TimeNs later = kT0 + 2 * kSecond + 300 * kMillisecond;
  ASSERT_TRUE(CheckMerged(spec, promoted, 1, a_clock.Now(later), At(later, 1)).allowed);
  Collect(spec, promoted);
  const bool bucket = !FamilyIsExactGc(spec);
  EXPECT_EQ(ExpectRoundTrip(spec, promoted, "compacted"), !bucket);
  if (!bucket) {
    EXPECT_EQ(promoted.contributions.size(), 1u);
  }
}

// sliding_log's MergedIdleAt is computed from the records without materialising the merged log (the idle
// sweep's fast path): the same instant as IdleAt of the materialised state, for copies decided, merged and
// collected in random orders, judged under their own spec and under a narrower and a wider window.
TEST(MergeLogIdle, MergedIdleAtIsIdleAtOfTheMaterializedLog) {
  for (LimitSpec spec : Configs(Algorithm::kSlidingLog)) {
    for (uint64_t seed : kSeeds) {
      std::array<MergeState, 3> copies;
      std::mt19937_64 rng(seed);
      int step = 0;
      for (const Op& op : RandomOps(seed, 200, 3)) {
        const auto node = static_cast<size_t>(op.node);
        (void)CheckMerged(spec, copies[node], 100 + node, HlcTick(0, op.t) + static_cast<Hlc>(step),
                          At(op.t, op.cost == 0 ? 1 : op.cost));
        if (rng() % 3 == 0) {
          (void)MergeInto(copies[node], copies[rng() % 3]);
        }
        if (rng() % 4 == 0) {
          Collect(spec, copies[node]);
        }
        for (DurationNs window : {spec.window, spec.window / 3, 5 * spec.window}) {
          LimitSpec judged = spec;
          judged.window = window;
          for (const MergeState& copy : copies) {
            ASSERT_EQ(MergedIdleAt(judged, copy), IdleAt(judged, Materialize(judged, copy)))
                << "seed " << seed << " step " << step << " window " << window;
          }
        }
        ++step;
      }
    }
  }
}

// A key's records grow from one to three in one step, whether the second decider's record arrives by its
// own check or by a merge: a state with a third contributor has not moved out of a two-record block (which
// would stay free in the heap: issue 39), and a state with one record keeps a block of one.
TEST_P(MergeAllAlgorithms, RecordsGrowFromOneToThreeInOneStep) {
  LimitSpec spec = Spec(GetParam(), 100, kSecond);
  spec.burst = GetParam() == Algorithm::kGcra ? 99 : 0;  // a capacity of 100 as the others
  HybridClock clock(0);
  MergeState by_check;
  (void)CheckMerged(spec, by_check, 1, clock.Now(kT0), At(kT0, 1));
  ASSERT_EQ(by_check.contributions.size(), 1u);
  EXPECT_EQ(by_check.contributions.capacity(), 1u);
  (void)CheckMerged(spec, by_check, 2, clock.Now(kT0 + 1), At(kT0 + 1, 1));
  ASSERT_EQ(by_check.contributions.size(), 2u);
  EXPECT_EQ(by_check.contributions.capacity(), 3u);
  const Contribution* block = by_check.contributions.data();
  (void)CheckMerged(spec, by_check, 3, clock.Now(kT0 + 2), At(kT0 + 2, 1));
  ASSERT_EQ(by_check.contributions.size(), 3u);
  EXPECT_EQ(by_check.contributions.data(), block);

  MergeState by_merge, second, third;
  (void)CheckMerged(spec, by_merge, 1, clock.Now(kT0 + 3), At(kT0 + 3, 1));
  (void)CheckMerged(spec, second, 2, clock.Now(kT0 + 4), At(kT0 + 4, 1));
  (void)CheckMerged(spec, third, 3, clock.Now(kT0 + 5), At(kT0 + 5, 1));
  ASSERT_TRUE(MergeInto(by_merge, second));
  EXPECT_EQ(by_merge.contributions.capacity(), 3u);
  block = by_merge.contributions.data();
  ASSERT_TRUE(MergeInto(by_merge, third));
  ASSERT_EQ(by_merge.contributions.size(), 3u);
  EXPECT_EQ(by_merge.contributions.data(), block);
  EXPECT_EQ(PeekMerged(spec, by_merge, At(kT0 + 5, 1)).remaining,
            PeekMerged(spec, by_check, At(kT0 + 5, 1)).remaining);
}

INSTANTIATE_TEST_SUITE_P(Merge, MergeAllAlgorithms, ::testing::ValuesIn(testing::AllAlgorithms()),
                         testing::ParamName);

}  // namespace
}  // namespace ringlimit::limiter
