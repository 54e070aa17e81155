// Mergeable state (merge.h): exactness for sequential deciders, the lattice laws, no lost admission
// for concurrent deciders, time going backwards, GC and the encoding. Seeded random operation
// sequences (std::mt19937_64, fixed seeds), every algorithm and mode.
#include "limiter/merge.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
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

INSTANTIATE_TEST_SUITE_P(Merge, MergeAllAlgorithms, ::testing::ValuesIn(testing::AllAlgorithms()),
                         testing::ParamName);

}  // namespace
}  // namespace ringlimit::limiter
