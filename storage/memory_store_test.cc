#include "storage/memory_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "storage/allocator.h"
#include "storage/memory_shard.h"
#include "storage/testing/charge.h"

using ringlimit::storage_testing::ChargeMerged;

namespace ringlimit::storage {
namespace {

using limiter::Algorithm;
using limiter::kMillisecond;
using limiter::kSecond;
using limiter::LimitSpec;
using limiter::State;

constexpr limiter::TimeNs kT0 = 1'700'000'000 * kSecond;
// The clock part of a version changed at `now` (the hybrid-logical-clock rule).
constexpr uint64_t ClockVersion(limiter::TimeNs now) { return static_cast<uint64_t>(now / 1'000'000) << 4; }

LimitSpec Spec(Algorithm algorithm, uint64_t limit, limiter::DurationNs window) {
  LimitSpec spec;
  spec.algorithm = algorithm;
  spec.limit = limit;
  spec.window = window;
  if (algorithm == Algorithm::kSlidingWindow) spec.buckets = 10;
  return spec;
}

// Charges `cost` against one limit of `entity`; returns the decision.
limiter::Decision Charge(StateStore& store, std::string_view entity, std::string_view name,
                         const LimitSpec& spec, limiter::TimeNs now, uint64_t cost = 1) {
  Slot slot{name, &spec};
  limiter::Decision decision;
  store.Update(entity, std::span<const Slot>(&slot, 1), now,
               [&](std::span<limiter::MergeState* const> states) {
                 decision = ChargeMerged(spec, *states[0], limiter::Request{cost, now, 0.});
               });
  return decision;
}

// ringlimitd fixes glibc's mmap and trim thresholds at start (storage/allocator.h): the call takes effect
// wherever glibc's allocator serves the process (a sanitizer's allocator ignores mallopt).
TEST(AllocatorTest, FixesGlibcThresholds) {
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_TRUE(FixAllocatorThresholds());
#else
  GTEST_SKIP() << "not glibc's allocator (a sanitizer's, or another libc)";
#endif
}

TEST(MemoryStoreTest, UpdateCreatesAndBumpsVersions) {
  MemoryStore store;
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 3, kSecond);
  EXPECT_TRUE(Charge(store, "user:1", "rps", spec, kT0).allowed);
  EXPECT_EQ(store.Get("user:1")[0].version, ClockVersion(kT0));  // created: the clock
  EXPECT_TRUE(Charge(store, "user:1", "rps", spec, kT0).allowed);
  EXPECT_TRUE(Charge(store, "user:1", "rps", spec, kT0).allowed);
  EXPECT_FALSE(Charge(store, "user:1", "rps", spec, kT0).allowed);
  auto states = store.Get("user:1");
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].name, "rps");
  EXPECT_EQ(states[0].spec.limit, 3u);
  // Same millisecond: +1 per change; the denied request changed nothing.
  EXPECT_EQ(states[0].version, ClockVersion(kT0) + 2);
  EXPECT_EQ(states[0].state.algorithm, Algorithm::kTokenBucket);
  EXPECT_EQ(store.Stats().keys, 1u);
  EXPECT_TRUE(store.Get("user:2").empty());
}

TEST(MemoryStoreTest, SeveralLimitsOfOneEntityInNameOrder) {
  MemoryStore store;
  LimitSpec a = Spec(Algorithm::kFixedWindow, 10, kSecond);
  LimitSpec b = Spec(Algorithm::kGcra, 10, kSecond);
  LimitSpec c = Spec(Algorithm::kSlidingWindow, 10, kSecond);
  Slot slots[] = {{"zeta", &a}, {"alpha", &b}, {"mid", &c}};
  store.Update("e", slots, kT0, [&](std::span<limiter::MergeState* const> states) {
    ChargeMerged(a, *states[0], {1, kT0, 0.});
    ChargeMerged(b, *states[1], {1, kT0, 0.});
    ChargeMerged(c, *states[2], {1, kT0, 0.});
  });
  auto states = store.Get("e");
  ASSERT_EQ(states.size(), 3u);
  EXPECT_EQ(states[0].name, "alpha");
  EXPECT_EQ(states[1].name, "mid");
  EXPECT_EQ(states[2].name, "zeta");
  EXPECT_EQ(states[1].spec.algorithm, Algorithm::kSlidingWindow);
  EXPECT_FALSE(states[1].state.contributions.empty());  // the record survived the round trip

  EXPECT_EQ(store.Erase("e", "mid"), 1u);
  EXPECT_EQ(store.Get("e").size(), 2u);
  EXPECT_EQ(store.Erase("e", "nope"), 0u);
  EXPECT_EQ(store.Erase("e", std::nullopt), 2u);
  EXPECT_TRUE(store.Get("e").empty());
  EXPECT_EQ(store.Stats().keys, 0u);
}

TEST(MemoryStoreTest, StateIsKeptAcrossCallsForEveryAlgorithm) {
  for (Algorithm algorithm : {Algorithm::kFixedWindow, Algorithm::kSlidingLog, Algorithm::kSlidingWindow,
                              Algorithm::kSlidingWindowApprox, Algorithm::kTokenBucket,
                              Algorithm::kLeakyBucket, Algorithm::kGcra}) {
    SCOPED_TRACE(std::string(limiter::AlgorithmName(algorithm)));
    MemoryStore store;
    LimitSpec spec = Spec(algorithm, 5, 10 * kSecond);
    int allowed = 0;
    for (int i = 0; i < 8; ++i)
      allowed += Charge(store, "k", "n", spec, kT0 + i * kMillisecond).allowed ? 1 : 0;
    EXPECT_EQ(allowed, algorithm == Algorithm::kGcra ? allowed : 5);
    // Whatever the algorithm decided, the store handed it back its own state each time: a fresh store
    // replaying the same calls on a local State agrees.
    State local;
    int local_allowed = 0;
    for (int i = 0; i < 8; ++i) {
      local_allowed += limiter::Check(spec, local, {1, kT0 + i * kMillisecond, 0.}).allowed ? 1 : 0;
    }
    EXPECT_EQ(allowed, local_allowed);
    EXPECT_EQ(
        limiter::Peek(spec, local, {0, kT0 + 8 * kMillisecond, 0.}).remaining,
        limiter::PeekMerged(spec, store.Get("k").at(0).state, {0, kT0 + 8 * kMillisecond, 0.}).remaining);
  }
}

TEST(MemoryStoreTest, SameNameTwiceInOneCallKeepsOneState) {
  MemoryStore store;
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 10, kSecond);
  Slot slots[] = {{"n", &spec}, {"n", &spec}};
  store.Update("k", slots, kT0, [&](std::span<limiter::MergeState* const> states) {
    ChargeMerged(spec, *states[0], {1, kT0, 0.});
    ChargeMerged(spec, *states[1], {2, kT0, 0.});
  });
  auto states = store.Get("k");
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(store.Stats().keys, 1u);
  EXPECT_EQ(limiter::PeekMerged(spec, states[0].state, {0, kT0, 0.}).remaining, 8u);  // the later slot wins
}

TEST(MemoryStoreTest, SpecChangeKeepsStateAndRecordsNewSpec) {
  MemoryStore store;
  LimitSpec small = Spec(Algorithm::kTokenBucket, 2, kSecond);
  LimitSpec big = Spec(Algorithm::kTokenBucket, 20, kSecond);
  Charge(store, "k", "n", small, kT0);
  Charge(store, "k", "n", big, kT0);
  auto states = store.Get("k");
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].spec.limit, 20u);
  EXPECT_EQ(states[0].version, ClockVersion(kT0) + 1);
}

TEST(MemoryStoreTest, IdleStatesAreDroppedBySweepAndOnAccess) {
  MemoryStoreOptions options;
  options.shards = 1;
  options.sweep_per_update = 4;
  MemoryStore store(options);
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 5, kSecond);
  Charge(store, "old", "n", spec, kT0);
  EXPECT_EQ(store.Stats().keys, 1u);
  // Long after "old" refilled, another entity's update sweeps it away.
  Charge(store, "new", "n", spec, kT0 + 10 * kSecond);
  EXPECT_EQ(store.Stats().keys, 1u);
  EXPECT_EQ(store.Stats().idle_drops, 1u);
  EXPECT_TRUE(store.Get("old").empty());

  // On access: the idle state decides as an initial one (full bucket again); it is dropped only by a sweep
  // (the merged record stays until then, at no cost to the decision).
  MemoryStoreOptions no_sweep;
  no_sweep.shards = 1;
  no_sweep.sweep_per_update = 0;
  MemoryStore lazy(no_sweep);
  for (int i = 0; i < 5; ++i) Charge(lazy, "k", "n", spec, kT0);
  EXPECT_FALSE(Charge(lazy, "k", "n", spec, kT0).allowed);
  auto d = Charge(lazy, "k", "n", spec, kT0 + 10 * kSecond);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 4u);
  EXPECT_EQ(lazy.Stats().idle_drops, 0u);
}

TEST(MemoryStoreTest, SweepIdleDropsIdleStatesWithoutTraffic) {
  MemoryStoreOptions options;
  options.sweep_per_update = 0;
  MemoryStore store(options);
  LimitSpec short_window = Spec(Algorithm::kFixedWindow, 5, kSecond);
  LimitSpec long_window = Spec(Algorithm::kFixedWindow, 5, 3600 * kSecond);
  for (int i = 0; i < 100; ++i) Charge(store, "short:" + std::to_string(i), "n", short_window, kT0);
  Charge(store, "long", "n", long_window, kT0);
  EXPECT_EQ(store.SweepIdle(kT0 + kSecond / 2, SIZE_MAX), 0u);  // nothing idle yet
  EXPECT_EQ(store.SweepIdle(kT0 + 2 * kSecond, SIZE_MAX), 100u);
  EXPECT_EQ(store.Stats().keys, 1u);
  EXPECT_EQ(store.Stats().idle_drops, 100u);
  EXPECT_EQ(store.Get("long").size(), 1u);
}

TEST(MemoryStoreTest, BoundEvictsLeastRecentlyUsed) {
  MemoryStoreOptions options;
  options.shards = 1;
  options.max_keys = 3;
  options.sweep_per_update = 0;
  MemoryStore store(options);
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 5, 60 * kSecond);
  Charge(store, "a", "n", spec, kT0);
  Charge(store, "b", "n", spec, kT0);
  Charge(store, "c", "n", spec, kT0);
  Charge(store, "a", "n", spec, kT0);  // "b" is now the least recently used
  Charge(store, "d", "n", spec, kT0);
  EXPECT_EQ(store.Stats().keys, 3u);
  EXPECT_EQ(store.Stats().evictions, 1u);
  EXPECT_TRUE(store.Get("b").empty());
  EXPECT_EQ(store.Get("a").size(), 1u);
  EXPECT_EQ(store.Get("c").size(), 1u);
  EXPECT_EQ(store.Get("d").size(), 1u);
}

TEST(MemoryStoreTest, BoundIsSplitAcrossShards) {
  MemoryStoreOptions options;
  options.shards = 4;
  options.max_keys = 100;
  MemoryStore store(options);
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 5, 60 * kSecond);
  for (int i = 0; i < 1000; ++i) Charge(store, "user:" + std::to_string(i), "n", spec, kT0);
  EXPECT_LE(store.Stats().keys, 100u);
  EXPECT_EQ(store.Stats().keys + store.Stats().evictions, 1000u);
}

// max_bytes accounts each state at its real size: a sliding_log state holds one 8-byte stamp per admitted
// unit, a long key is on the heap. The bound evicts least recently used states by bytes; dropping them
// gives their bytes back.
TEST(MemoryStoreTest, ByteBoundAccountsRealSizes) {
  MemoryStoreOptions options;
  options.shards = 1;
  options.max_bytes = 4u << 20;
  options.sweep_per_update = 0;
  MemoryStore store(options);
  LimitSpec small = Spec(Algorithm::kTokenBucket, 5, 60 * kSecond);
  // Charged as a node does, with an HLC of its own that follows kT0 (ChargeMerged's clock is shared by
  // every test of the process): the states pack.
  limiter::HybridClock clock(0);
  auto charge_small = [&](std::string_view key) {
    Slot slot{"n", &small};
    store.Update(key, std::span<const Slot>(&slot, 1), kT0, [&](std::span<limiter::MergeState* const> s) {
      (void)limiter::CheckMerged(small, *s[0], 1, clock.Now(kT0), {1, kT0, 0.});
    });
  };
  charge_small("first");  // the slab's first chunk and the interned name
  const uint64_t empty = store.Stats().bytes;
  charge_small("k");
  const uint64_t one_small = store.Stats().bytes - empty;
  EXPECT_EQ(store.Breakdown().state_objects, 0u);  // packed in its entry
  EXPECT_GT(one_small, 4u);                        // its share of the hash set (the entry: with the slab)
  EXPECT_LT(one_small, 32u);
  charge_small(std::string(1000, 'x'));  // the key alone is a KiB
  EXPECT_GT(store.Stats().bytes - empty - one_small, 1000u + one_small);

  LimitSpec log = Spec(Algorithm::kSlidingLog, 10'000, 600 * kSecond);
  for (int i = 0; i < 200; ++i) {  // 200 x ~80 KB = 16 MB into a 4 MiB bound
    EXPECT_TRUE(Charge(store, "log:" + std::to_string(i), "n", log, kT0, 10'000).allowed);
    EXPECT_LE(store.Stats().bytes, options.max_bytes);
  }
  EXPECT_GT(store.Stats().evictions, 140u);
  EXPECT_EQ(store.Get("log:199").size(), 1u);  // the most recent stay
  EXPECT_TRUE(store.Get("log:0").empty());
  for (int i = 0; i < 200; ++i) store.Erase("log:" + std::to_string(i), std::nullopt);
  store.Erase("k", std::nullopt);
  store.Erase(std::string(1000, 'x'), std::nullopt);
  store.Erase("first", std::nullopt);
  EXPECT_EQ(store.Stats().keys, 0u);
  EXPECT_LT(store.Stats().bytes, empty);  // nothing but the slab, which stays
  EXPECT_GT(store.Stats().bytes, 0u);
}

class RecordingObserver : public StateObserver {
 public:
  void OnChanged(std::string_view entity, std::string_view name, uint64_t version) override {
    changes.push_back(std::string(entity) + "/" + std::string(name) + "@" + std::to_string(version));
  }
  void OnErased(std::string_view entity, std::string_view name) override {
    erased.push_back(std::string(entity) + "/" + std::string(name));
  }
  std::vector<std::string> changes;
  std::vector<std::string> erased;
};

TEST(MemoryStoreTest, ObserverSeesCommittedChanges) {
  MemoryStore store;
  RecordingObserver observer;
  store.SetObserver(&observer);
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 1, kSecond);
  Charge(store, "k", "n", spec, kT0);
  Charge(store, "k", "n", spec, kT0);  // denied: no change, no call
  Charge(store, "k", "n", spec, kT0, 0);
  EXPECT_EQ(observer.changes, std::vector<std::string>{"k/n@" + std::to_string(ClockVersion(kT0))});
  store.Erase("k", std::nullopt);
  EXPECT_EQ(observer.erased, std::vector<std::string>{"k/n"});
}

TEST(MemoryStoreTest, DiscardRemovesEveryStateWithoutTellingTheObserver) {
  MemoryStore store;
  RecordingObserver observer;
  store.SetObserver(&observer);
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 5, kSecond);
  Charge(store, "k", "a", spec, kT0);
  Charge(store, "k", "b", spec, kT0);
  Charge(store, "other", "a", spec, kT0);
  observer.changes.clear();
  EXPECT_EQ(store.Discard("k"), 2u);
  EXPECT_EQ(store.Discard("k"), 0u);
  EXPECT_EQ(store.Discard("never"), 0u);
  EXPECT_TRUE(store.Get("k").empty());
  EXPECT_EQ(store.Get("other").size(), 1u);
  EXPECT_EQ(store.Stats().keys, 1u);
  EXPECT_TRUE(observer.changes.empty());
  EXPECT_TRUE(observer.erased.empty());
  // The key starts afresh.
  EXPECT_EQ(Charge(store, "k", "a", spec, kT0).remaining, 4u);
}

// Write-back bookkeeping: a state dropped while its batch was being written leaves a pending delete
// for the row that batch wrote.
TEST(MemoryStoreTest, WriteBackRowOfAStateDroppedDuringItsFlushIsDeletedNext) {
  MemoryStoreOptions options;
  options.shards = 1;
  options.write_back = true;
  MemoryStore store(options);
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 5, 60 * kSecond);
  using Counts = std::pair<size_t, size_t>;  // (puts, erases) of one entity in a batch
  auto writes_of = [](const std::vector<DirtyRecord>& batch, const std::string& entity) {
    size_t puts = 0, erases = 0;
    for (const auto& r : batch) {
      if (r.entity != entity) continue;
      (r.erase ? erases : puts)++;
    }
    return std::pair(puts, erases);
  };
  // A new state collected, then discarded before the batch is acknowledged.
  Charge(store, "a", "n", spec, kT0);
  auto batch = store.CollectDirty();
  EXPECT_EQ(writes_of(batch, "a"), Counts(1, 0));
  EXPECT_EQ(store.Discard("a"), 1u);
  store.AckFlushed(batch, true);
  EXPECT_EQ(writes_of(store.CollectDirty(), "a"), Counts(0, 1));

  // A row erased and recreated (delete + put in one batch), discarded during that batch.
  Charge(store, "b", "n", spec, kT0);
  store.AckFlushed(store.CollectDirty(), true);
  store.AckFlushed(store.CollectDirty(), true);  // "a"'s delete
  ASSERT_EQ(store.Erase("b", std::nullopt), 1u);
  Charge(store, "b", "n", spec, kT0);
  batch = store.CollectDirty();
  EXPECT_EQ(writes_of(batch, "b"), Counts(1, 1));
  EXPECT_EQ(store.Discard("b"), 1u);
  store.AckFlushed(batch, true);
  auto next = store.CollectDirty();
  EXPECT_EQ(next.size(), 1u);
  EXPECT_EQ(writes_of(next, "b"), Counts(0, 1));

  // A state recreated in the same millisecond (same version) after its batch was collected stays dirty.
  store.AckFlushed(next, true);
  Charge(store, "c", "n", spec, kT0);
  batch = store.CollectDirty();
  ASSERT_EQ(store.Discard("c"), 1u);
  Charge(store, "c", "n", spec, kT0, 2);
  ASSERT_EQ(store.Get("c")[0].version, batch[0].state.version);
  store.AckFlushed(batch, true);
  next = store.CollectDirty();
  EXPECT_EQ(writes_of(next, "c").first, 1u);
  EXPECT_EQ(store.DirtyCount(), 1u);
}

TEST(MemoryStoreTest, VersionsFollowTheClockAndNeverGoBack) {
  MemoryStoreOptions options;
  options.shards = 1;
  options.sweep_per_update = 0;
  MemoryStore store(options);
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 1000, kSecond);
  // Many changes in one millisecond: the logical part runs ahead of the clock...
  for (int i = 0; i < 40; ++i) Charge(store, "k", "n", spec, kT0);
  const uint64_t ahead = store.Get("k")[0].version;
  EXPECT_EQ(ahead, ClockVersion(kT0) + 39);
  // ...and the clock catching up does not take it back.
  Charge(store, "k", "n", spec, kT0 + kMillisecond);
  EXPECT_EQ(store.Get("k")[0].version, ahead + 1);
  // A later millisecond jumps to the clock.
  Charge(store, "k", "n", spec, kT0 + 10 * kMillisecond);
  EXPECT_EQ(store.Get("k")[0].version, ClockVersion(kT0 + 10 * kMillisecond));
  // A clock that went backwards does not either.
  uint64_t before = store.Get("k")[0].version;
  Charge(store, "k", "n", spec, kT0 - kSecond);
  EXPECT_EQ(store.Get("k")[0].version, before + 1);
  // Times before the epoch count as clock 0.
  Charge(store, "early", "n", spec, -5 * kSecond);
  EXPECT_EQ(store.Get("early")[0].version, 1u);
}

TEST(MemoryStoreTest, RecreatedStatesGetGreaterVersions) {
  MemoryStoreOptions options;
  options.shards = 1;
  options.sweep_per_update = 0;
  MemoryStore store(options);
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 5, kSecond);
  limiter::TimeNs now = kT0;
  Charge(store, "k", "n", spec, now);
  uint64_t last = store.Get("k")[0].version;
  // Idle drop by the sweep.
  now += 10 * kSecond;
  ASSERT_EQ(store.SweepIdle(now, SIZE_MAX), 1u);
  Charge(store, "k", "n", spec, now);
  EXPECT_GT(store.Get("k")[0].version, last);
  last = store.Get("k")[0].version;
  // Erase, then a new state a millisecond later.
  ASSERT_EQ(store.Erase("k", std::nullopt), 1u);
  now += kMillisecond;
  Charge(store, "k", "n", spec, now);
  EXPECT_GT(store.Get("k")[0].version, last);
  last = store.Get("k")[0].version;
  // Discard, then recreate.
  ASSERT_EQ(store.Discard("k"), 1u);
  now += kMillisecond;
  Charge(store, "k", "n", spec, now);
  EXPECT_GT(store.Get("k")[0].version, last);

  // A replica holding the state from before the recreate cannot overwrite the newer one.
  MemoryStore replica;
  StoredState old = store.Get("k")[0];
  old.version = last;
  old.state = limiter::MergeState{};
  EXPECT_FALSE(store.Absorb("k", old));
  EXPECT_EQ(store.Get("k")[0].version, ClockVersion(now));
  EXPECT_TRUE(replica.Absorb("k", old));
  EXPECT_TRUE(replica.Absorb("k", store.Get("k")[0]));
  EXPECT_EQ(replica.Get("k")[0].version, ClockVersion(now));
}

TEST(MemoryStoreTest, AbsorbMergesCopiesAndKeepsEveryAdmission) {
  MemoryStore store;
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 10, 60 * kSecond);
  // Another node's copy: 3 units it admitted.
  StoredState incoming{"n", spec, {}, 7};
  for (int i = 0; i < 3; ++i) ChargeMerged(spec, incoming.state, {1, kT0, 0.}, /*contributor=*/99);
  EXPECT_TRUE(store.Absorb("k", incoming));
  EXPECT_FALSE(store.Absorb("k", incoming));                       // the same copy again: nothing new
  EXPECT_FALSE(store.Absorb("k", StoredState{"n", spec, {}, 3}));  // an empty (older) copy: nothing new
  auto states = store.Get("k");
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].version, 7u);
  EXPECT_EQ(states[0].state, incoming.state);
  // This node charges 2 more while the other node, unaware, charges 4 more on its copy: merging either
  // way round counts all 9 -- neither copy rolls the other back, whatever the versions say.
  Charge(store, "k", "n", spec, kT0, 2);
  for (int i = 0; i < 4; ++i) ChargeMerged(spec, incoming.state, {1, kT0, 0.}, /*contributor=*/99);
  incoming.version = 1;  // an older version changes nothing: merging does not look at it
  EXPECT_TRUE(store.Absorb("k", incoming));
  EXPECT_EQ(limiter::PeekMerged(spec, store.Get("k")[0].state, {0, kT0, 0.}).remaining, 1u);
  MemoryStore other;
  ASSERT_TRUE(other.Absorb("k", incoming));
  EXPECT_TRUE(other.Absorb("k", store.Get("k")[0]));
  EXPECT_EQ(other.Get("k")[0].state, store.Get("k")[0].state);
  EXPECT_EQ(Charge(store, "k", "n", spec, kT0, 2).allowed, false);  // 9 + 2 > 10
  EXPECT_EQ(Charge(store, "k", "n", spec, kT0, 1).allowed, true);
  // The local version keeps increasing past whatever was absorbed.
  StoredState ahead = store.Get("k")[0];
  ahead.version = ClockVersion(kT0) + 100;
  ChargeMerged(spec, ahead.state, {0, kT0 + kMillisecond, 0.}, /*contributor=*/98);  // (charges nothing)
  ahead.state.base.stamp += 1;  // a copy that differs: a newer reset base
  EXPECT_TRUE(store.Absorb("k", ahead));
  EXPECT_EQ(store.Get("k")[0].version, ClockVersion(kT0) + 100);
}

// Packed states (issue 39): a key decided by one contributor lives packed in its entry (no heap state); a
// second contributor's copy moves it to the pair form (entry + a 32-byte pair cell, still no heap state), a
// third one's to the trio form (entry + a 64-byte trio cell), a fourth one's promotes it to a heap
// MergeState; once the others' records have expired it goes back to the one-contributor form (window
// algorithms; a bucket keeps the others' base entries as tombstones: with one other that is the pair form
// again, with two the trio form, with three the heap until the key goes idle). At every step the store holds
// exactly the state the plain merge rules give (a reference merged and collected alongside): packing,
// promoting and compacting lose no admission and add none; the accounting follows each move.
TEST(MemoryStoreTest, PackedStatesArePromotedAndCompactedWithoutChangingThem) {
  for (Algorithm algorithm :
       {Algorithm::kTokenBucket, Algorithm::kGcra, Algorithm::kLeakyBucket, Algorithm::kFixedWindow,
        Algorithm::kAnchoredWindow, Algorithm::kSlidingWindowApprox}) {
    SCOPED_TRACE(std::string(limiter::AlgorithmName(algorithm)));
    LimitSpec spec = Spec(algorithm, 8, kSecond);
    if (algorithm == Algorithm::kGcra) spec.burst = 7;
    MemoryStore store;
    limiter::HybridClock a_clock(0), b_clock(0), c_clock(0), d_clock(0);
    limiter::MergeState reference;
    constexpr limiter::ContributorId kA = (uint64_t{1} << 32) | 1, kB = (uint64_t{2} << 32) | 1,
                                     kC = (uint64_t{3} << 32) | 1, kD = (uint64_t{4} << 32) | 1;
    // Contributor A charges through the store and the reference alike (one stamp for both).
    auto charge = [&](limiter::TimeNs now, uint64_t cost) {
      const limiter::Hlc stamp = a_clock.Now(now);
      Slot slot{"n", &spec};
      bool allowed = false;
      store.Update("key", std::span<const Slot>(&slot, 1), now, [&](std::span<limiter::MergeState* const> s) {
        allowed = limiter::CheckMerged(spec, *s[0], kA, stamp, {cost, now, 0.}).allowed;
      });
      EXPECT_EQ(limiter::CheckMerged(spec, reference, kA, stamp, {cost, now, 0.}).allowed, allowed);
      limiter::Collect(spec, reference);
      return allowed;
    };
    // Another contributor's copy of 2 units, absorbed.
    auto absorb = [&](limiter::ContributorId id, limiter::HybridClock& clock, limiter::TimeNs now) {
      StoredState copy{"n", spec, {}, 1};
      ASSERT_TRUE(limiter::CheckMerged(spec, copy.state, id, clock.Now(now), {2, now, 0.}).allowed);
      EXPECT_TRUE(store.Absorb("key", copy));
      limiter::MergeInto(reference, copy.state);
      limiter::Collect(spec, reference);
    };
    // (heap states, pair states, trio states)
    using Forms = std::tuple<uint64_t, uint64_t, uint64_t>;
    auto forms = [&] {
      const MemoryBreakdown b = store.Breakdown();
      return Forms(b.state_objects, b.pair_states, b.trio_states);
    };
    const uint64_t empty_bytes = store.Stats().bytes;
    EXPECT_TRUE(charge(kT0, 1));
    EXPECT_TRUE(charge(kT0 + kMillisecond, 1));
    EXPECT_EQ(store.Get("key")[0].state, reference);
    EXPECT_EQ(forms(), Forms(0, 0, 0));  // packed
    const uint64_t single_bytes = store.Stats().bytes;
    absorb(kB, b_clock, kT0 + 2 * kMillisecond);
    EXPECT_EQ(store.Get("key")[0].state, reference);
    const bool bucket = algorithm == Algorithm::kTokenBucket || algorithm == Algorithm::kGcra ||
                        algorithm == Algorithm::kLeakyBucket;
    // A bucket's absorbed copy is newer than the base: on the heap until the next charge rebases it.
    EXPECT_EQ(forms(), bucket ? Forms(1, 0, 0) : Forms(0, 1, 0));
    EXPECT_TRUE(charge(kT0 + 3 * kMillisecond, 1));  // 5 of 8
    EXPECT_EQ(store.Get("key")[0].state, reference);
    EXPECT_EQ(forms(), Forms(0, 1, 0));  // the pair form: no heap state
    // The pair slab's first chunk is accounted (32 KiB), nothing per state beyond it.
    EXPECT_EQ(store.Stats().bytes, single_bytes + 1024 * 32);
    absorb(kC, c_clock, kT0 + 4 * kMillisecond);  // 7 of 8
    EXPECT_EQ(store.Get("key")[0].state, reference);
    EXPECT_EQ(forms(), bucket ? Forms(1, 0, 0) : Forms(0, 0, 1));
    EXPECT_TRUE(charge(kT0 + 5 * kMillisecond, 1));  // 8 of 8
    EXPECT_EQ(store.Get("key")[0].state, reference);
    EXPECT_EQ(forms(), Forms(0, 0, 1));  // the trio form: no heap state
    // The pair's cell and a second one of the same chunk: nothing more accounted.
    EXPECT_EQ(store.Stats().bytes, single_bytes + 1024 * 32);
    absorb(kD, d_clock, kT0 + 6 * kMillisecond);  // 10 of 8: over
    EXPECT_EQ(store.Get("key")[0].state, reference);
    EXPECT_EQ(forms(), Forms(1, 0, 0));  // four contributors: the heap
    const uint64_t heap_bytes = store.Stats().bytes;
    EXPECT_GT(heap_bytes, single_bytes + 1024 * 32 + sizeof(limiter::MergeState));
    EXPECT_FALSE(charge(kT0 + 6 * kMillisecond, 1));  // B's, C's and D's units count
    EXPECT_EQ(store.Get("key")[0].state, reference);
    // Three windows later the others' records have expired (buckets: drained, kept as tombstones).
    EXPECT_TRUE(charge(kT0 + 3 * kSecond, 1));
    EXPECT_EQ(store.Get("key")[0].state, reference);
    EXPECT_EQ(forms(), bucket ? Forms(1, 0, 0) : Forms(0, 0, 0));
    if (!bucket) {
      // Back to the one-contributor form: the heap state is no longer counted.
      EXPECT_EQ(store.Stats().bytes, single_bytes + 1024 * 32);
    }
    EXPECT_GT(store.Stats().bytes, empty_bytes);
  }
}

// The group forms' compaction tests: token_bucket, fixed_window and anchored_window, each on a store of
// one shard (every key shares one cell slab) under a spec of 6 per second.
class GroupFormTest : public ::testing::TestWithParam<Algorithm> {
 protected:
  static MemoryStoreOptions OneShard() {
    MemoryStoreOptions options;
    options.shards = 1;
    return options;
  }
  LimitSpec spec_ = Spec(GetParam(), 6, kSecond);
  MemoryStore store_{OneShard()};
};

// Two contributors only: the pair form until the other's record expires, then one contributor (windows)
// or one record with the other's tombstone (buckets: the pair form stays until the key goes idle). A freed
// pair cell is reused by the next pair.
TEST_P(GroupFormTest, PairFormCompactsBackAndItsCellsAreReused) {
  const Algorithm algorithm = GetParam();
  LimitSpec& spec = spec_;
  MemoryStore& store = store_;
  limiter::HybridClock a_clock(0), b_clock(0);
  constexpr limiter::ContributorId kA = 11, kB = 12;
  auto charge = [&](std::string_view key, limiter::ContributorId id, limiter::HybridClock& clock,
                    limiter::TimeNs now) {
    Slot slot{"n", &spec};
    store.Update(key, std::span<const Slot>(&slot, 1), now, [&](std::span<limiter::MergeState* const> s) {
      (void)limiter::CheckMerged(spec, *s[0], id, clock.Now(now), {1, now, 0.});
    });
  };
  charge("k1", kA, a_clock, kT0);
  charge("k1", kB, b_clock, kT0 + kMillisecond);
  EXPECT_EQ(store.Breakdown().pair_states, 1u);
  const uint64_t bytes = store.Stats().bytes;
  charge("k1", kA, a_clock, kT0 + 3 * kSecond);
  const bool bucket = algorithm == Algorithm::kTokenBucket;
  EXPECT_EQ(store.Breakdown().pair_states, bucket ? 1u : 0u);
  EXPECT_EQ(store.Breakdown().state_objects, 0u);
  EXPECT_EQ(store.Stats().bytes, bytes);  // the pair chunk stays allocated (and counted), as the slab's
  // A second key in the pair form takes the freed cell (windows) or a fresh one: no new chunk either way.
  charge("k2", kA, a_clock, kT0 + 3 * kSecond);
  const uint64_t single = store.Stats().bytes;
  charge("k2", kB, b_clock, kT0 + 3 * kSecond + kMillisecond);
  EXPECT_EQ(store.Breakdown().pair_states, bucket ? 2u : 1u);
  EXPECT_EQ(store.Stats().bytes, single);
}

// Three contributors: the trio form (two cells of the pair form's slab) until the others' records expire,
// then one contributor (windows: both cells freed) or one record with two tombstones (buckets: the trio
// form stays until the key goes idle). A trio becoming a pair gives its second cell back. Every step holds
// the state the plain merge rules give (a reference alongside); no step allocates a second chunk.
TEST_P(GroupFormTest, TrioFormCompactsBackAndItsCellsAreReused) {
  const Algorithm algorithm = GetParam();
  LimitSpec& spec = spec_;
  MemoryStore& store = store_;
  std::array<limiter::HybridClock, 3> clocks = {limiter::HybridClock(0), limiter::HybridClock(0),
                                                limiter::HybridClock(0)};
  constexpr std::array<limiter::ContributorId, 3> kIds = {21, 22, 23};
  std::map<std::string, limiter::MergeState> reference;
  auto charge = [&](const std::string& key, size_t who, limiter::TimeNs now) {
    Slot slot{"n", &spec};
    const limiter::Hlc stamp = clocks[who].Now(now);
    store.Update(key, std::span<const Slot>(&slot, 1), now, [&](std::span<limiter::MergeState* const> s) {
      (void)limiter::CheckMerged(spec, *s[0], kIds[who], stamp, {1, now, 0.});
    });
    (void)limiter::CheckMerged(spec, reference[key], kIds[who], stamp, {1, now, 0.});
    limiter::Collect(spec, reference[key]);
    EXPECT_EQ(store.Get(key).at(0).state, reference[key]) << key << " by " << who;
  };
  auto forms = [&] {
    const MemoryBreakdown b = store.Breakdown();
    return std::tuple<uint64_t, uint64_t, uint64_t>(b.state_objects, b.pair_states, b.trio_states);
  };
  using Forms = std::tuple<uint64_t, uint64_t, uint64_t>;
  const bool bucket = algorithm == Algorithm::kTokenBucket;
  for (size_t who = 0; who < 3; ++who)
    charge("k1", who, kT0 + static_cast<limiter::TimeNs>(who) * kMillisecond);
  EXPECT_EQ(forms(), Forms(0, 0, 1));
  const uint64_t slab = store.Breakdown().slab_bytes;
  charge("k1", 0, kT0 + 3 * kSecond);  // B's and C's records have expired (buckets: drained)
  EXPECT_EQ(forms(), bucket ? Forms(0, 0, 1) : Forms(0, 0, 0));
  // Windows: B and C charge again, then only C's and A's records live a window on: trio, pair.
  if (!bucket) {
    charge("k1", 1, kT0 + 3 * kSecond + kMillisecond);
    EXPECT_EQ(forms(), Forms(0, 1, 0));
    charge("k1", 2, kT0 + 3 * kSecond + 2 * kMillisecond);
    EXPECT_EQ(forms(), Forms(0, 0, 1));
    charge("k1", 0, kT0 + 4 * kSecond + 500 * kMillisecond);
    charge("k1", 2, kT0 + 4 * kSecond + 501 * kMillisecond);
    EXPECT_EQ(forms(), Forms(0, 1, 0));  // B's record left the window: the trio gave a cell back
  }
  EXPECT_EQ(store.Breakdown().slab_bytes, slab);
}

INSTANTIATE_TEST_SUITE_P(Forms, GroupFormTest,
                         ::testing::Values(Algorithm::kTokenBucket, Algorithm::kFixedWindow,
                                           Algorithm::kAnchoredWindow),
                         [](const ::testing::TestParamInfo<Algorithm>& info) {
                           return std::string(limiter::AlgorithmName(info.param));
                         });

// Keys of every size: in the entry up to 16 bytes, on the heap beyond; found, scanned and erased alike.
TEST(MemoryStoreTest, KeysOfEverySizeAreStoredOnce) {
  MemoryStore store;
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 10, kSecond);
  const std::vector<std::string> keys = {"",
                                         "a",
                                         std::string(15, 'b'),
                                         std::string(16, 'c'),
                                         std::string(17, 'd'),
                                         std::string(300, 'e'),
                                         std::string("z\0z", 3)};
  for (const std::string& k : keys) EXPECT_TRUE(Charge(store, k, "n", spec, kT0).allowed);
  for (const std::string& k : keys) EXPECT_TRUE(Charge(store, k, "n", spec, kT0).allowed);
  EXPECT_EQ(store.Stats().keys, keys.size());
  const MemoryBreakdown breakdown = store.Breakdown();
  EXPECT_EQ(breakdown.key_heap_bytes, 2 * sizeof(uint32_t) + 17 + 300);  // the two longer than 16 bytes
  std::set<std::string> scanned;
  for (const EntityState& s : store.ScanTokenRange(0, std::numeric_limits<ring::Token>::max())) {
    scanned.insert(s.entity);
    EXPECT_EQ(limiter::Materialize(spec, s.state.state).word[1], 2);
  }
  EXPECT_EQ(scanned, std::set<std::string>(keys.begin(), keys.end()));
  for (const std::string& k : keys) EXPECT_EQ(store.Erase(k, std::nullopt), 1u) << k;
  EXPECT_EQ(store.Stats().keys, 0u);
}

TEST(MemoryStoreTest, ScanTokenRangeSelectsByRingToken) {
  MemoryStore store;
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 5, kSecond);
  for (int i = 0; i < 100; ++i) Charge(store, "user:" + std::to_string(i), "n", spec, kT0);
  EXPECT_EQ(store.ScanTokenRange(0, UINT64_MAX).size(), 100u);
  const ring::Token mid = UINT64_MAX / 2;
  auto low = store.ScanTokenRange(0, mid);
  auto high = store.ScanTokenRange(mid + 1, UINT64_MAX);
  EXPECT_EQ(low.size() + high.size(), 100u);
  for (const auto& s : low) {
    EXPECT_EQ(s.token, ring::RingToken(s.entity));
    EXPECT_LE(s.token, mid);
  }
  for (const auto& s : high) EXPECT_GT(s.token, mid);
}

// --- Range scans ---

using u128 = unsigned __int128;
constexpr ring::Token kMaxToken = std::numeric_limits<ring::Token>::max();

// The lowest token of shard i of n, from the definition "shard i holds [i * 2^64 / n, (i + 1) * 2^64 / n)"
// (rounded up to whole tokens), independently of ShardIndex: a 65-bit value, 2^64 for i = n.
u128 ShardLow(size_t i, size_t n) { return ((static_cast<u128>(i) << 64) + n - 1) / n; }

bool ShardCanHold(size_t i, size_t n, ring::Token first, ring::Token last) {
  return ShardLow(i, n) <= last && ShardLow(i + 1, n) > first;
}

constexpr size_t kShardCounts[] = {1, 2, 3, 5, 7, 16, 17, 48, 64, 100, 1000};

// Ranges of every width from one token to the whole ring, random and on shard boundaries.
std::vector<std::pair<ring::Token, ring::Token>> Ranges(std::mt19937_64& rng, size_t n, int count) {
  std::vector<std::pair<ring::Token, ring::Token>> ranges = {{0, kMaxToken}, {0, 0}, {kMaxToken, kMaxToken}};
  for (int k = 0; k < count; ++k) {
    ring::Token first = rng();
    int bits = static_cast<int>(rng() % 65);
    ring::Token width = bits == 64 ? kMaxToken : (ring::Token{1} << bits) - 1 + (rng() & 1);
    if (k % 4 == 1) {  // starting or ending exactly at a shard boundary (or one token off it)
      u128 low = ShardLow(rng() % n, n);
      first = static_cast<ring::Token>(low) - static_cast<ring::Token>(rng() % 2);
    }
    ring::Token last = first > kMaxToken - width ? kMaxToken : first + width;
    if (k % 4 == 2) {
      u128 low = ShardLow(1 + rng() % n, n);
      last = static_cast<ring::Token>(low - 1 + rng() % 2);
      if (last < first) std::swap(first, last);
    }
    ranges.emplace_back(first, last);
  }
  return ranges;
}

TEST(MemoryStoreScanTest, ShardIndexFollowsTheShardIntervals) {
  std::mt19937_64 rng(7);
  for (size_t n : kShardCounts) {
    for (size_t i = 0; i < n; ++i) {
      ring::Token low = static_cast<ring::Token>(ShardLow(i, n));
      EXPECT_EQ(ShardIndex(low, n), i) << n;
      if (i > 0) {
        EXPECT_EQ(ShardIndex(low - 1, n), i - 1) << n;
      }
    }
    EXPECT_EQ(ShardIndex(kMaxToken, n), n - 1);
    for (int k = 0; k < 1000; ++k) {
      ring::Token t = rng();
      size_t i = ShardIndex(t, n);
      ASSERT_LT(i, n);
      EXPECT_TRUE(ShardLow(i, n) <= t && t < ShardLow(i + 1, n)) << n << " " << t;
    }
  }
}

TEST(MemoryStoreScanTest, VisitsExactlyTheShardsThatCanHoldTheRange) {
  std::mt19937_64 rng(11);
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 5, kSecond);
  for (size_t n : kShardCounts) {
    MemoryStoreOptions options;
    options.shards = n;
    MemoryStore store(options);
    for (int i = 0; i < 50; ++i) Charge(store, "user:" + std::to_string(i), "n", spec, kT0);
    std::set<size_t> visited;
    store.TEST_SetScanHook([&](size_t shard) { visited.insert(shard); });
    for (auto [first, last] : Ranges(rng, n, 300)) {
      visited.clear();
      (void)store.ScanTokenRange(first, last);
      std::set<size_t> expected;
      for (size_t i = 0; i < n; ++i) {
        if (ShardCanHold(i, n, first, last)) expected.insert(i);
      }
      ASSERT_EQ(visited, expected) << n << " shards, [" << first << ", " << last << "]";
    }
    visited.clear();
    EXPECT_TRUE(store.ScanTokenRange(5, 4).empty());  // first > last: nothing, no shard
    EXPECT_TRUE(visited.empty());
  }
}

using StateKey = std::pair<std::string, std::string>;  // (entity, name)

TEST(MemoryStoreScanTest, ReturnsExactlyTheStatesInTheRange) {
  std::mt19937_64 rng(13);
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 5, kSecond);
  LimitSpec window = Spec(Algorithm::kSlidingWindow, 5, kSecond);
  for (size_t n : {size_t{1}, size_t{7}, size_t{0}}) {
    MemoryStoreOptions options;
    options.shards = n;
    MemoryStore store(options);
    std::map<StateKey, ring::Token> inserted;
    for (int i = 0; i < 6000; ++i) {
      std::string entity = "user:" + std::to_string(i);
      Charge(store, entity, "rps", spec, kT0);
      inserted[{entity, "rps"}] = ring::RingToken(entity);
      if (i % 3 == 0) {
        Charge(store, entity, "rpm", window, kT0);
        inserted[{entity, "rpm"}] = ring::RingToken(entity);
      }
    }
    size_t chunks = 0;
    store.TEST_SetScanHook([&](size_t) { ++chunks; });
    auto ranges = Ranges(rng, store.TEST_ShardCount(), 200);
    for (int k = 0; k < 20; ++k) {  // ranges bounded by stored tokens
      ring::Token a = std::next(inserted.begin(), static_cast<long>(rng() % inserted.size()))->second;
      ring::Token b = std::next(inserted.begin(), static_cast<long>(rng() % inserted.size()))->second;
      ranges.emplace_back(std::min(a, b), std::max(a, b));
      ranges.emplace_back(a, a);
    }
    for (auto [first, last] : ranges) {
      std::vector<StateKey> expected;
      for (const auto& [key, token] : inserted) {
        if (token >= first && token <= last) expected.push_back(key);
      }
      std::vector<StateKey> got;
      for (const EntityState& s : store.ScanTokenRange(first, last)) {
        ASSERT_EQ(s.token, ring::RingToken(s.entity));
        ASSERT_EQ(s.state.spec.algorithm, s.state.name == "rps" ? spec.algorithm : window.algorithm);
        got.emplace_back(s.entity, s.state.name);
      }
      std::sort(got.begin(), got.end());
      ASSERT_EQ(got, expected) << n << " shards, [" << first << ", " << last << "]";
    }
    // The whole ring of one shard of ~8000 states takes many chunks.
    if (n == 1) {
      EXPECT_GE(chunks, 8000 / MemoryShard::kScanChunkStates);
    }
  }
}

// CountTokenRange counts each key with a state in the range once (a key's first state may go: the next
// one counts it then), as the default Store::CountTokenRange (a scan, counted by key) does.
TEST(MemoryStoreScanTest, CountTokenRangeCountsEachKeyOnce) {
  std::mt19937_64 rng(17);
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 5, kSecond);
  for (size_t n : {size_t{1}, size_t{0}}) {
    MemoryStoreOptions options;
    options.shards = n;
    MemoryStore store(options);
    std::map<std::string, ring::Token> keys;  // the keys left with a state
    for (int i = 0; i < 6000; ++i) {
      const std::string entity = "user:" + std::to_string(i);
      Charge(store, entity, "rps", spec, kT0);
      if (i % 3 == 0) Charge(store, entity, "rpm", spec, kT0);
      if (i % 6 == 0) {
        ASSERT_EQ(store.Erase(entity, std::string_view("rps")), 1u);  // its first state: "rpm" counts it
      } else if (i % 5 == 0) {
        ASSERT_GT(store.Erase(entity, std::nullopt), 0u);  // gone
        continue;
      }
      keys[entity] = ring::RingToken(entity);
    }
    auto ranges = Ranges(rng, store.TEST_ShardCount(), 100);
    ranges.emplace_back(0, UINT64_MAX);
    for (auto [first, last] : ranges) {
      uint64_t expected = 0;
      for (const auto& [key, token] : keys) expected += token >= first && token <= last ? 1 : 0;
      ASSERT_EQ(store.CountTokenRange(first, last), expected)
          << n << " shards, [" << first << ", " << last << "]";
      ASSERT_EQ(store.Store::CountTokenRange(first, last), expected);
    }
    EXPECT_EQ(store.CountTokenRange(0, UINT64_MAX), keys.size());
  }
}

// A state removed after its chunk was copied and inserted again at a slab index the scan has not reached
// yet is met twice in the slab; it is returned once, with its newest version.
TEST(MemoryStoreScanTest, ReturnsAStateReinsertedDuringTheScanOnce) {
  MemoryStoreOptions options;
  options.shards = 1;
  MemoryStore store(options);
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 1000, 3600 * kSecond);  // nothing idle: no sweep drops
  auto entity = [](int i) { return "user:" + std::to_string(i); };
  for (int i = 0; i < 1000; ++i) Charge(store, entity(i), "n", spec, kT0);
  int chunks = 0;
  store.TEST_SetScanHook([&](size_t) {
    if (++chunks != 2) return;
    // The first chunk copied the first states inserted. Free their slab entries, fill those entries
    // with other entities, then bring the states back: they land at the end of the slab.
    for (int i = 0; i < 10; ++i) ASSERT_EQ(store.Erase(entity(i), std::nullopt), 1u);
    for (int i = 0; i < 10; ++i) Charge(store, "filler:" + std::to_string(i), "n", spec, kT0);
    for (int i = 0; i < 10; ++i) Charge(store, entity(i), "n", spec, kT0 + kMillisecond);
  });
  auto all = store.ScanTokenRange(0, kMaxToken);
  EXPECT_GT(chunks, 2);
  std::map<std::string, uint64_t> versions;
  for (const auto& s : all) EXPECT_TRUE(versions.emplace(s.entity, s.state.version).second) << s.entity;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(versions.contains(entity(i))) << i;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(versions[entity(i)], ClockVersion(kT0 + kMillisecond)) << i;
  for (int i = 10; i < 1000; ++i) EXPECT_EQ(versions[entity(i)], ClockVersion(kT0)) << i;
}

// Scans on one thread, creations, changes and erasures on another: every state nobody touches is
// returned exactly once by every scan whose range holds it, and no state twice.
TEST(MemoryStoreScanTest, ConcurrentUpdatesLeaveUntouchedStatesExactlyOnce) {
  MemoryStoreOptions options;
  options.shards = 3;
  MemoryStore store(options);
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 1000, 3600 * kSecond);
  std::map<std::string, ring::Token> untouched;
  for (int i = 0; i < 3000; ++i) {
    std::string entity = "still:" + std::to_string(i);
    Charge(store, entity, "n", spec, kT0);
    untouched[entity] = ring::RingToken(entity);
  }
  for (int i = 0; i < 1000; ++i) Charge(store, "churn:" + std::to_string(i), "n", spec, kT0);

  std::atomic<bool> scanning{true};
  std::thread writer([&] {
    std::mt19937_64 rng(17);
    // The clock stands still: nothing goes idle, so the sweeps of the Updates drop nothing.
    for (int k = 0; k < 2'000'000 && scanning.load(std::memory_order_relaxed); ++k) {
      std::string entity = "churn:" + std::to_string(rng() % 2000);
      if (rng() % 4 == 0)
        store.Erase(entity, std::nullopt);
      else
        Charge(store, entity, rng() % 2 ? "n" : "m", spec, kT0);
    }
  });
  struct JoinAtExit {  // also when an assertion returns early
    std::atomic<bool>& scanning;
    std::thread& writer;
    ~JoinAtExit() {
      scanning = false;
      writer.join();
    }
  } join_at_exit{scanning, writer};
  std::mt19937_64 rng(19);
  auto ranges = Ranges(rng, 3, 40);
  for (auto [first, last] : ranges) {
    std::set<StateKey> seen;
    std::set<std::string> seen_untouched;
    for (const auto& s : store.ScanTokenRange(first, last)) {
      ASSERT_TRUE(s.token >= first && s.token <= last);
      ASSERT_EQ(s.token, ring::RingToken(s.entity));
      ASSERT_TRUE(seen.emplace(s.entity, s.state.name).second)
          << "twice: " << s.entity << " " << s.state.name;
      if (untouched.contains(s.entity)) seen_untouched.insert(s.entity);
    }
    for (const auto& [entity, token] : untouched) {
      if (token >= first && token <= last) {
        ASSERT_TRUE(seen_untouched.contains(entity)) << entity;
      }
    }
  }
}

TEST(MemoryStoreTest, ConcurrentUpdatesAdmitExactlyTheLimit) {
  MemoryStoreOptions options;
  options.shards = 4;
  MemoryStore store(options);
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 1000, 3600 * kSecond);
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        if (Charge(store, "hot", "n", spec, kT0).allowed) allowed.fetch_add(1);
        Charge(store, "cold:" + std::to_string(t * 1000 + i), "n", spec, kT0);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 1000);
  EXPECT_EQ(store.Stats().keys, 4001u);
}

}  // namespace
}  // namespace ringlimit::storage
