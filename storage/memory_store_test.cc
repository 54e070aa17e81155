#include "storage/memory_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace ringlimit::storage {
namespace {

using limiter::Algorithm;
using limiter::kMillisecond;
using limiter::kSecond;
using limiter::LimitSpec;
using limiter::State;

constexpr limiter::TimeNs kT0 = 1'700'000'000 * kSecond;

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
  store.Update(entity, std::span<const Slot>(&slot, 1), now, [&](std::span<State* const> states) {
    decision = limiter::Check(spec, *states[0], limiter::Request{cost, now, 0.});
  });
  return decision;
}

TEST(MemoryStoreTest, UpdateCreatesAndBumpsVersions) {
  MemoryStore store;
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 3, kSecond);
  EXPECT_TRUE(Charge(store, "user:1", "rps", spec, kT0).allowed);
  EXPECT_TRUE(Charge(store, "user:1", "rps", spec, kT0).allowed);
  EXPECT_TRUE(Charge(store, "user:1", "rps", spec, kT0).allowed);
  EXPECT_FALSE(Charge(store, "user:1", "rps", spec, kT0).allowed);
  auto states = store.Get("user:1");
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].name, "rps");
  EXPECT_EQ(states[0].spec.limit, 3u);
  EXPECT_EQ(states[0].version, 3u);  // the denied request changed nothing
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
  store.Update("e", slots, kT0, [&](std::span<State* const> states) {
    limiter::Check(a, *states[0], {1, kT0, 0.});
    limiter::Check(b, *states[1], {1, kT0, 0.});
    limiter::Check(c, *states[2], {1, kT0, 0.});
  });
  auto states = store.Get("e");
  ASSERT_EQ(states.size(), 3u);
  EXPECT_EQ(states[0].name, "alpha");
  EXPECT_EQ(states[1].name, "mid");
  EXPECT_EQ(states[2].name, "zeta");
  EXPECT_EQ(states[1].spec.algorithm, Algorithm::kSlidingWindow);
  EXPECT_FALSE(states[1].state.tail.empty());  // the sub-buckets survived the round trip

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
    EXPECT_EQ(store.Get("k").at(0).state, local);
  }
}

TEST(MemoryStoreTest, SameNameTwiceInOneCallKeepsOneState) {
  MemoryStore store;
  LimitSpec spec = Spec(Algorithm::kFixedWindow, 10, kSecond);
  Slot slots[] = {{"n", &spec}, {"n", &spec}};
  store.Update("k", slots, kT0, [&](std::span<State* const> states) {
    limiter::Check(spec, *states[0], {1, kT0, 0.});
    limiter::Check(spec, *states[1], {2, kT0, 0.});
  });
  auto states = store.Get("k");
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(store.Stats().keys, 1u);
  EXPECT_EQ(limiter::Peek(spec, states[0].state, {0, kT0, 0.}).remaining, 8u);  // the later slot wins
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
  EXPECT_EQ(states[0].version, 2u);
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

  // On access: the idle state is treated as initial (full bucket again).
  MemoryStoreOptions no_sweep;
  no_sweep.shards = 1;
  no_sweep.sweep_per_update = 0;
  MemoryStore lazy(no_sweep);
  for (int i = 0; i < 5; ++i) Charge(lazy, "k", "n", spec, kT0);
  EXPECT_FALSE(Charge(lazy, "k", "n", spec, kT0).allowed);
  auto d = Charge(lazy, "k", "n", spec, kT0 + 10 * kSecond);
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 4u);
  EXPECT_EQ(lazy.Stats().idle_drops, 1u);
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

class RecordingObserver : public StateObserver {
 public:
  void OnChanged(std::string_view entity, const StoredState& state) override {
    changes.push_back(std::string(entity) + "/" + state.name + "@" + std::to_string(state.version));
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
  EXPECT_EQ(observer.changes, std::vector<std::string>{"k/n@1"});
  store.Erase("k", std::nullopt);
  EXPECT_EQ(observer.erased, std::vector<std::string>{"k/n"});
}

TEST(MemoryStoreTest, ApplyIfNewerOrdersByVersion) {
  MemoryStore store;
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 5, kSecond);
  StoredState incoming{"n", spec, {}, 7};
  limiter::Check(spec, incoming.state, {2, kT0, 0.});
  EXPECT_TRUE(store.ApplyIfNewer("k", incoming));
  EXPECT_FALSE(store.ApplyIfNewer("k", incoming));  // same version: not newer
  StoredState older = incoming;
  older.version = 3;
  older.state = State{};
  EXPECT_FALSE(store.ApplyIfNewer("k", older));
  auto states = store.Get("k");
  ASSERT_EQ(states.size(), 1u);
  EXPECT_EQ(states[0].version, 7u);
  EXPECT_EQ(states[0].state, incoming.state);
  // The next local change continues from the applied version.
  Charge(store, "k", "n", spec, kT0);
  EXPECT_EQ(store.Get("k")[0].version, 8u);
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
