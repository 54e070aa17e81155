#include "storage/durable_store.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "ring/token.h"
#include "storage/key_codec.h"
#include "storage/testing/charge.h"

using ringlimit::storage_testing::ChargeMerged;
using ringlimit::storage_testing::Plain;

namespace ringlimit::storage {
namespace {

using limiter::Algorithm;
using limiter::kMillisecond;
using limiter::kSecond;
using limiter::LimitSpec;
using limiter::State;

constexpr Algorithm kAlgorithms[] = {Algorithm::kFixedWindow,   Algorithm::kSlidingLog,
                                     Algorithm::kSlidingWindow, Algorithm::kSlidingWindowApprox,
                                     Algorithm::kTokenBucket,   Algorithm::kLeakyBucket,
                                     Algorithm::kGcra};

// The compaction filter compares expiries with the wall clock, so the tests run near it.
limiter::TimeNs Now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// An hour ahead of the wall clock, which the flusher's idle sweep reads: however slowly a test runs (a
// sanitizer build), the sweep never finds a state idle that the test's own clock does not.
limiter::TimeNs AheadOfTheSweep() { return Now() + 3600 * kSecond; }

LimitSpec Spec(Algorithm algorithm, uint64_t limit, limiter::DurationNs window) {
  LimitSpec spec;
  spec.algorithm = algorithm;
  spec.limit = limit;
  spec.window = window;
  spec.buckets = 10;
  if (algorithm == Algorithm::kGcra) spec.burst = limit;
  return spec;
}

limiter::Decision Charge(StateStore& store, std::string_view entity, const LimitSpec& spec,
                         limiter::TimeNs now, uint64_t cost = 1) {
  Slot slot{"n", &spec};
  limiter::Decision decision;
  store.Update(entity, std::span<const Slot>(&slot, 1), now,
               [&](std::span<limiter::MergeState* const> states) {
                 decision = ChargeMerged(spec, *states[0], limiter::Request{cost, now, 0.});
               });
  return decision;
}

class DurableStoreTest : public testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "ringlimit-storage-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    options_.data_dir = dir_ + "/db";
    options_.flush_interval_ms = 60'000;  // tests flush explicitly unless they say otherwise
    options_.shards = 2;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<DurableStore> Open() {
    Result<std::unique_ptr<DurableStore>> opened = DurableStore::Open(options_);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    return opened.ok() ? std::move(opened).value() : nullptr;
  }

  // Counts rows by opening the (closed) database directly.
  size_t CountRows() {
    rocksdb::DB* raw = nullptr;
    rocksdb::Options options;
    EXPECT_TRUE(rocksdb::DB::OpenForReadOnly(options, options_.data_dir, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    size_t rows = 0;
    for (it->SeekToFirst(); it->Valid(); it->Next()) ++rows;
    return rows;
  }

  std::string dir_;
  StorageOptions options_;
};

TEST_F(DurableStoreTest, FlushThenReopenRestoresEveryAlgorithmExactly) {
  const limiter::TimeNs t0 = Now();
  std::map<std::string, std::vector<StoredState>> before;
  {
    auto store = Open();
    for (Algorithm a : kAlgorithms) {
      std::string entity = "user:" + std::string(limiter::AlgorithmName(a));
      LimitSpec spec = Spec(a, 10, 60 * kSecond);
      for (int i = 0; i < 4; ++i) Charge(*store, entity, spec, t0 + i * kMillisecond);
      before[entity] = store->Get(entity);
      ASSERT_EQ(before[entity].size(), 1u);
    }
    store->Flush();
    EXPECT_EQ(store->Durability().dirty, 0u);
    EXPECT_GE(store->Durability().flushed_states, 7u);
  }
  auto store = Open();
  EXPECT_EQ(store->Stats().keys, 0u);  // lazy: nothing is read at open
  for (Algorithm a : kAlgorithms) {
    std::string entity = "user:" + std::string(limiter::AlgorithmName(a));
    SCOPED_TRACE(entity);
    auto after = store->Get(entity);
    ASSERT_EQ(after.size(), 1u);
    EXPECT_EQ(after[0].state, before[entity][0].state);
    EXPECT_EQ(after[0].version, before[entity][0].version);
    EXPECT_EQ(limiter::Fingerprint(after[0].spec), limiter::Fingerprint(before[entity][0].spec));
    // The next decision continues from the restored state, as it would have without a restart.
    LimitSpec spec = Spec(a, 10, 60 * kSecond);
    limiter::MergeState reference = before[entity][0].state;
    auto expected = ChargeMerged(spec, reference, {1, t0 + 5 * kMillisecond, 0.});
    auto got = Charge(*store, entity, spec, t0 + 5 * kMillisecond);
    EXPECT_EQ(got.allowed, expected.allowed);
    EXPECT_EQ(got.remaining, expected.remaining);
  }
  EXPECT_GE(store->Durability().loads, 7u);
}

TEST_F(DurableStoreTest, CloseFlushesEverything) {
  const limiter::TimeNs t0 = Now();
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 100, 3600 * kSecond);
  {
    auto store = Open();
    for (int i = 0; i < 1000; ++i) Charge(*store, "k" + std::to_string(i), spec, t0, 1 + i % 7);
    EXPECT_EQ(store->Durability().dirty, 1000u);
  }  // no Flush: the destructor closes, which flushes
  auto store = Open();
  for (int i = 0; i < 1000; ++i) {
    auto d = Charge(*store, "k" + std::to_string(i), spec, t0, 0);
    EXPECT_EQ(d.remaining, 100u - (1 + i % 7)) << i;
  }
}

TEST_F(DurableStoreTest, FlusherWritesInTheBackground) {
  options_.flush_interval_ms = 10;
  auto store = Open();
  Charge(*store, "k", Spec(Algorithm::kFixedWindow, 5, 60 * kSecond), Now());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (store->Durability().flushes == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(store->Durability().flushes, 1u);
  EXPECT_EQ(store->Durability().dirty, 0u);
}

TEST_F(DurableStoreTest, IdleAndErasedStatesLeaveTheDatabase) {
  const limiter::TimeNs t0 = Now();
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 5, kSecond);
  options_.shards = 1;
  {
    auto store = Open();
    Charge(*store, "idle", spec, t0);
    Charge(*store, "erased", spec, t0);
    Charge(*store, "kept", Spec(Algorithm::kTokenBucket, 5, 3600 * kSecond), t0);
    store->Flush();
    EXPECT_EQ(store->Durability().flushed_states, 3u);
    EXPECT_EQ(store->Erase("erased", std::nullopt), 1u);
    // Two seconds later "idle" has refilled: the sweep drops it from memory and from disk.
    for (int i = 0; i < 5; ++i)
      Charge(*store, "kept", Spec(Algorithm::kTokenBucket, 5, 3600 * kSecond), t0 + 2 * kSecond, 0);
    EXPECT_EQ(store->Stats().idle_drops, 1u);
    store->Flush();
    EXPECT_EQ(store->Durability().deleted_rows, 2u);
  }
  EXPECT_EQ(CountRows(), 1u);
}

TEST_F(DurableStoreTest, CompactionDropsExpiredRows) {
  const limiter::TimeNs past = Now() - 3600 * kSecond;
  {
    auto store = Open();
    // States written an hour ago with a one-second window: expired rows, never touched again.
    for (int i = 0; i < 50; ++i)
      Charge(*store, "old" + std::to_string(i), Spec(Algorithm::kFixedWindow, 5, kSecond), past);
    Charge(*store, "live", Spec(Algorithm::kFixedWindow, 5, 3600 * kSecond), Now());
    store->Flush();
    store->TEST_CompactAll();
  }
  EXPECT_EQ(CountRows(), 1u);
}

TEST_F(DurableStoreTest, EvictionUnderATinyBoundReloadsExactly) {
  options_.max_keys = 4;
  options_.shards = 1;
  const limiter::TimeNs t0 = Now();
  auto store = Open();
  MemoryStore reference;  // unbounded: what the states must be
  for (int round = 0; round < 3; ++round) {
    for (Algorithm a : kAlgorithms) {
      for (int e = 0; e < 3; ++e) {
        std::string entity = std::string(limiter::AlgorithmName(a)) + ":" + std::to_string(e);
        LimitSpec spec = Spec(a, 20, 60 * kSecond);
        limiter::TimeNs now = t0 + round * 10 * kMillisecond;
        auto got = Charge(*store, entity, spec, now, 1 + e);
        auto want = Charge(reference, entity, spec, now, 1 + e);
        EXPECT_EQ(got.allowed, want.allowed) << entity;
        EXPECT_EQ(got.remaining, want.remaining) << entity;
      }
      store->Flush();  // dirty states become clean, hence evictable
    }
  }
  EXPECT_GT(store->Stats().evictions, 0u);
  EXPECT_GT(store->Durability().loads, 0u);
  for (const auto& s : reference.ScanTokenRange(0, UINT64_MAX)) {
    auto got = store->Get(s.entity);
    ASSERT_EQ(got.size(), 1u) << s.entity;
    EXPECT_EQ(Plain(got[0]), Plain(s.state)) << s.entity;  // the same counts (the stamps differ)
    EXPECT_EQ(got[0].version, s.state.version) << s.entity;
  }
}

TEST_F(DurableStoreTest, DirtyStatesAreNotEvictedAndFailedWritesAreRetried) {
  options_.max_keys = 2;
  options_.shards = 1;
  const limiter::TimeNs t0 = Now();
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 10, 3600 * kSecond);
  {
    auto store = Open();
    store->TEST_FailWrites(true);
    for (int i = 0; i < 6; ++i) Charge(*store, "k" + std::to_string(i), spec, t0, 3);
    store->Flush();
    EXPECT_GE(store->Durability().write_errors, 1u);
    EXPECT_EQ(store->Stats().keys, 6u);  // over the bound rather than losing unwritten states
    EXPECT_EQ(store->Stats().evictions, 0u);
    EXPECT_EQ(store->Durability().dirty, 6u);
    store->TEST_FailWrites(false);
    store->Flush();
    EXPECT_EQ(store->Durability().dirty, 0u);
    Charge(*store, "k6", spec, t0, 3);  // now clean states can make room
    EXPECT_LE(store->Stats().keys, 2u);
  }
  auto store = Open();
  for (int i = 0; i <= 6; ++i)
    EXPECT_EQ(Charge(*store, "k" + std::to_string(i), spec, t0, 0).remaining, 7u) << i;
}

// After a failed write the database is not written again as it is (RocksDB's failed WAL writer must
// not be reused): the retry closes and reopens it, then writes. Reads keep working throughout, RocksDB's
// counters do not go back, and nothing acknowledged or dirty is lost.
TEST_F(DurableStoreTest, AFailedWriteReopensTheDatabaseBeforeWritingAgain) {
  options_.max_keys = 2;  // most states are on disk only and are read back during the failure
  options_.shards = 1;
  const limiter::TimeNs t0 = Now();
  const LimitSpec spec = Spec(Algorithm::kTokenBucket, 10, 3600 * kSecond);
  {
    auto store = Open();
    for (int i = 0; i < 4; ++i) Charge(*store, "k" + std::to_string(i), spec, t0, 3);
    store->Flush();
    const int64_t written = store->Durability().rocksdb.user_bytes_written;
    EXPECT_GT(written, 0);

    store->TEST_FailWrites(true);
    Charge(*store, "k4", spec, t0, 3);
    store->Flush();
    EXPECT_EQ(store->Durability().write_errors, 1u);
    EXPECT_EQ(store->TEST_Reopens(), 0u) << "the failing pass itself does not reopen";
    store->Flush();  // the retry reopens (there is room), then the injected failure fails it again
    EXPECT_EQ(store->Durability().write_errors, 2u);
    EXPECT_EQ(store->TEST_Reopens(), 1u);
    EXPECT_EQ(store->Durability().dirty, 1u);
    for (int i = 0; i < 5; ++i) {  // evicted ones are read from the reopened database
      EXPECT_EQ(Charge(*store, "k" + std::to_string(i), spec, t0, 0).remaining, 7u) << i;
    }
    EXPECT_EQ(store->Durability().load_errors, 0u);
    EXPECT_GE(store->Durability().rocksdb.user_bytes_written, written) << "a counter went back at the reopen";

    store->TEST_FailWrites(false);
    store->Flush();
    EXPECT_EQ(store->TEST_Reopens(), 2u);
    EXPECT_EQ(store->Durability().dirty, 0u);
    EXPECT_EQ(store->Durability().write_errors, 2u);
    store->Flush();  // healthy again: no further reopen
    EXPECT_EQ(store->TEST_Reopens(), 2u);
  }
  auto store = Open();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Charge(*store, "k" + std::to_string(i), spec, t0, 0).remaining, 7u) << i;
  }
}

// The flusher thread retries a failed write by itself, at most every kRetryEvery (not every flush
// interval), and resumes once writes succeed.
TEST_F(DurableStoreTest, TheFlusherRetriesAFailedWriteAtAModestPace) {
  options_.flush_interval_ms = 10;
  auto store = Open();
  const LimitSpec spec = Spec(Algorithm::kTokenBucket, 10, 3600 * kSecond);
  store->TEST_FailWrites(true);
  const auto started = std::chrono::steady_clock::now();
  Charge(*store, "k", spec, Now(), 3);
  const auto deadline = started + std::chrono::seconds(20);
  while (store->Durability().write_errors < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // polling, with a deadline
  }
  const auto elapsed = std::chrono::steady_clock::now() - started;
  const uint64_t errors = store->Durability().write_errors;
  ASSERT_GE(errors, 2u) << "the flusher did not retry";
  EXPECT_GE(elapsed, DurableStore::kRetryEvery) << "retried faster than kRetryEvery";
  EXPECT_LE(errors, 2 + static_cast<uint64_t>(elapsed / DurableStore::kRetryEvery));
  const int64_t last_good = store->Durability().last_flush_success_unix_ns;
  store->TEST_FailWrites(false);
  while (store->Durability().dirty > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(store->Durability().dirty, 0u);
  EXPECT_GT(store->Durability().last_flush_success_unix_ns, last_good);
  EXPECT_GE(store->TEST_Reopens(), 1u);
}

// What /metrics shows of write-back: a slow flush lands in the duration histogram's upper buckets, a
// failed one counts an error and leaves the last success time where it was, and RocksDB's own figures
// (bytes written) are read from its properties.
TEST_F(DurableStoreTest, FlushFiguresShowSlowAndFailedFlushes) {
  auto store = Open();
  const LimitSpec spec = Spec(Algorithm::kTokenBucket, 10, 3600 * kSecond);
  auto bucket_of = [](int64_t ns) {
    return static_cast<size_t>(std::lower_bound(kFlushBoundsNs.begin(), kFlushBoundsNs.end(), ns) -
                               kFlushBoundsNs.begin());
  };

  store->Flush();  // nothing dirty: a success that took no histogram sample
  DurabilityStats stats = store->Durability();
  EXPECT_EQ(stats.flush_count, 0u);
  const int64_t first_success = stats.last_flush_success_unix_ns;
  EXPECT_GT(first_success, 0);

  Charge(*store, "fast", spec, Now());
  store->Flush();
  stats = store->Durability();
  EXPECT_EQ(stats.flush_count, 1u);
  EXPECT_GE(stats.last_flush_success_unix_ns, first_success);
  EXPECT_GT(stats.rocksdb.user_bytes_written, 0);
  EXPECT_GT(stats.rocksdb.wal_bytes_written, 0);
  EXPECT_EQ(stats.rocksdb.write_stopped, 0);
  EXPECT_EQ(stats.rocksdb.stall_stops, 0);
  EXPECT_GE(stats.rocksdb.pending_compaction_bytes, 0);

  store->TEST_DelayWrites(std::chrono::milliseconds(300));  // a disk that takes 300 ms per batch
  Charge(*store, "slow", spec, Now());
  store->Flush();
  stats = store->Durability();
  EXPECT_EQ(stats.flush_count, 2u);
  EXPECT_EQ(stats.flush_buckets[bucket_of(250'000'000) + 1], 1u) << "one pass between 250 ms and 1 s";
  EXPECT_GE(stats.flush_sum_ns, 300'000'000);
  store->TEST_DelayWrites(std::chrono::nanoseconds(0));

  const int64_t last_good = stats.last_flush_success_unix_ns;
  store->TEST_FailWrites(true);
  Charge(*store, "failed", spec, Now());
  store->Flush();
  store->Flush();
  stats = store->Durability();
  EXPECT_EQ(stats.write_errors, 2u);
  EXPECT_EQ(stats.flush_count, 4u);  // failed passes are timed too
  EXPECT_EQ(stats.dirty, 1u);
  EXPECT_EQ(stats.last_flush_success_unix_ns, last_good);
  store->TEST_FailWrites(false);
  store->Flush();
  stats = store->Durability();
  EXPECT_EQ(stats.dirty, 0u);
  EXPECT_GT(stats.last_flush_success_unix_ns, last_good);
}

TEST_F(DurableStoreTest, ScanTokenRangeSeesMemoryAndDisk) {
  options_.max_keys = 10;
  options_.shards = 1;
  auto store = Open();
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 10, 3600 * kSecond);
  for (int i = 0; i < 100; ++i) {
    Charge(*store, "k" + std::to_string(i), spec, Now());
    if (i % 10 == 9) store->Flush();
  }
  auto all = store->ScanTokenRange(0, UINT64_MAX);
  EXPECT_EQ(all.size(), 100u);
  ring::Token mid = UINT64_MAX / 3;
  auto low = store->ScanTokenRange(0, mid);
  for (const auto& s : low) EXPECT_LE(s.token, mid);
  EXPECT_EQ(low.size() + store->ScanTokenRange(mid + 1, UINT64_MAX).size(), 100u);
}

TEST_F(DurableStoreTest, ScanTokenRangeReturnsEachStateOnceNewestFirst) {
  const limiter::TimeNs t0 = Now();
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 1000, 3600 * kSecond);
  auto name = [](int i) { return "k" + std::to_string(i); };
  {
    auto store = Open();
    for (int i = 0; i < 200; ++i) Charge(*store, name(i), spec, t0, 1);
  }
  auto store = Open();  // everything is on disk only
  for (int i = 0; i < 100; ++i) Charge(*store, name(i), spec, t0 + kMillisecond, 5);  // newer, dirty
  store->Flush();
  for (int i = 0; i < 50; ++i) Charge(*store, name(i), spec, t0 + 2 * kMillisecond, 1);  // newer still
  store->TEST_FailWrites(true);  // the deletes below stay pending
  for (int i = 100; i < 110; ++i) ASSERT_EQ(store->Erase(name(i), std::nullopt), 1u);
  for (int i = 110; i < 120; ++i) ASSERT_EQ(store->Discard(name(i)), 1u);
  store->Flush();
  EXPECT_GT(store->Durability().write_errors, 0u);

  auto all = store->ScanTokenRange(0, UINT64_MAX);
  std::map<std::string, EntityState> by_entity;
  for (auto& s : all) {
    EXPECT_EQ(s.token, ring::RingToken(s.entity));
    EXPECT_TRUE(by_entity.emplace(s.entity, s).second) << "twice: " << s.entity;
  }
  EXPECT_EQ(all.size(), 180u);
  for (int i = 100; i < 120; ++i) EXPECT_FALSE(by_entity.contains(name(i))) << i;
  ring::Token mid = ring::RingToken(name(7));  // a bound that is itself a key's token
  auto low = store->ScanTokenRange(0, mid);
  auto high = store->ScanTokenRange(mid + 1, UINT64_MAX);
  EXPECT_EQ(low.size() + high.size(), 180u);
  for (const auto& s : low) EXPECT_LE(s.token, mid);
  for (const auto& s : high) EXPECT_GT(s.token, mid);
  EXPECT_TRUE(std::any_of(low.begin(), low.end(), [&](const EntityState& s) { return s.entity == name(7); }));
  for (const auto& [entity, scanned] : by_entity) {
    auto got = store->Get(entity);
    ASSERT_EQ(got.size(), 1u) << entity;
    EXPECT_EQ(scanned.state.version, got[0].version) << entity;
    EXPECT_EQ(scanned.state.state, got[0].state) << entity;
  }
  EXPECT_EQ(Charge(*store, name(10), spec, t0 + 2 * kMillisecond, 0).remaining, 1000u - 7);
  EXPECT_EQ(Charge(*store, name(60), spec, t0 + 2 * kMillisecond, 0).remaining, 1000u - 6);
  EXPECT_EQ(Charge(*store, name(150), spec, t0 + 2 * kMillisecond, 0).remaining, 1000u - 1);
  store->TEST_FailWrites(false);
}

// Evictions and reloads from disk while a range scan runs are not changes: every state is returned
// exactly once, from memory or from its row, and states erased before the scan (their deletes still
// pending) are not read back.
TEST_F(DurableStoreTest, ScanTokenRangeWithEvictionsAndReloadsBetweenChunks) {
  options_.shards = 1;
  options_.max_keys = 600;
  auto store = Open();
  const limiter::TimeNs t0 = Now();
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 1000, 3600 * kSecond);
  auto name = [](int i) { return "k" + std::to_string(i); };
  for (int i = 0; i < 1000; ++i) {
    Charge(*store, name(i), spec, t0);
    if (i % 100 == 99) store->Flush();  // clean, so evictable: ~600 in memory, the rest on disk only
  }
  store->TEST_FailWrites(true);  // the deletes below stay pending
  for (int i = 990; i < 1000; ++i) ASSERT_EQ(store->Erase(name(i), std::nullopt), 1u);
  const uint64_t loads = store->Durability().loads;
  int chunks = 0;
  store->TEST_Memory().TEST_SetScanHook([&](size_t) {
    if (++chunks != 2) return;
    // After the first chunk: read every state twice over, in order. Memory holds 600 of them, so each
    // read loads a state evicted earlier and evicts another: states move between slab entries, some
    // from the part scanned already to the part not scanned yet.
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < 990; ++i) ASSERT_EQ(store->Get(name(i)).size(), 1u) << i;
    }
  });
  auto all = store->ScanTokenRange(0, UINT64_MAX);
  store->TEST_Memory().TEST_SetScanHook(nullptr);
  EXPECT_GT(chunks, 2);
  EXPECT_GT(store->Durability().loads, loads);  // the hook did reload states from disk
  std::set<std::string> seen;
  for (const auto& s : all) EXPECT_TRUE(seen.insert(s.entity).second) << "twice: " << s.entity;
  EXPECT_EQ(seen.size(), 990u);
  for (int i = 990; i < 1000; ++i) EXPECT_FALSE(seen.contains(name(i))) << i;
  store->TEST_FailWrites(false);
}

// A state erased during the scan may be left out, or returned as it was in memory, but never as its
// older row, which memory has deleted: a shard's pending deletes are taken after its states.
TEST_F(DurableStoreTest, ScanTokenRangeDoesNotReadBackAStateErasedDuringTheScan) {
  options_.shards = 1;
  auto store = Open();
  const limiter::TimeNs t0 = Now();
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 1000, 3600 * kSecond);
  auto name = [](int i) { return "k" + std::to_string(i); };
  for (int i = 0; i < 1000; ++i) Charge(*store, name(i), spec, t0);
  store->Flush();  // the rows hold the first version
  std::map<std::string, uint64_t> newest;
  for (int i = 0; i < 1000; ++i) {
    Charge(*store, name(i), spec, t0 + kMillisecond);  // a newer version, dirty in memory
    newest[name(i)] = store->Get(name(i))[0].version;
  }
  store->TEST_FailWrites(true);  // the deletes below stay pending
  int chunks = 0;
  store->TEST_Memory().TEST_SetScanHook([&](size_t) {
    if (++chunks != 2) return;
    // After the first chunk (the slab entries of the first states inserted): erase the last ones.
    for (int i = 500; i < 1000; ++i) ASSERT_EQ(store->Erase(name(i), std::nullopt), 1u);
  });
  auto all = store->ScanTokenRange(0, UINT64_MAX);
  store->TEST_Memory().TEST_SetScanHook(nullptr);
  EXPECT_GE(chunks, 2);  // the erasures ran between chunks
  std::set<std::string> seen;
  for (const auto& s : all) {
    EXPECT_TRUE(seen.insert(s.entity).second) << "twice: " << s.entity;
    EXPECT_EQ(s.state.version, newest[s.entity]) << s.entity;
  }
  for (int i = 0; i < 500; ++i) EXPECT_TRUE(seen.contains(name(i))) << i;
  store->TEST_FailWrites(false);
}

TEST_F(DurableStoreTest, DiscardDeletesTheRowsAndSurvivesReopen) {
  const limiter::TimeNs t0 = Now();
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 10, 3600 * kSecond);
  {
    auto store = Open();
    Charge(*store, "flushed", spec, t0, 3);  // on disk only after the flush below... then dirty again
    Charge(*store, "on-disk", spec, t0, 3);  // on disk, clean in memory
    Charge(*store, "kept", spec, t0, 3);
    store->Flush();
    Charge(*store, "flushed", spec, t0, 1);     // a pending change the next flush would write
    Charge(*store, "dirty-only", spec, t0, 1);  // never flushed
    EXPECT_EQ(store->Discard("flushed"), 1u);
    EXPECT_EQ(store->Discard("dirty-only"), 1u);
    EXPECT_EQ(store->Discard("on-disk"), 1u);
    EXPECT_TRUE(store->Get("flushed").empty());
    EXPECT_EQ(store->Durability().dirty, 0u);  // nothing left for a flush to write back
  }
  EXPECT_EQ(CountRows(), 1u);  // only "kept"
  {
    auto store = Open();
    EXPECT_TRUE(store->Get("flushed").empty());
    EXPECT_TRUE(store->Get("on-disk").empty());
    EXPECT_TRUE(store->Get("dirty-only").empty());
    EXPECT_EQ(Charge(*store, "flushed", spec, t0, 0).remaining, 10u);  // starts afresh
    // A state only on disk (not loaded since the reopen) is discarded too.
    EXPECT_EQ(store->Discard("kept"), 1u);
    EXPECT_TRUE(store->Get("kept").empty());
  }
  EXPECT_EQ(CountRows(), 0u);
}

TEST_F(DurableStoreTest, DiscardIsNotUndoneByAFailedThenRetriedFlush) {
  const limiter::TimeNs t0 = Now();
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 10, 3600 * kSecond);
  {
    auto store = Open();
    Charge(*store, "k", spec, t0, 3);
    store->Flush();
    Charge(*store, "k", spec, t0, 3);
    store->TEST_FailWrites(true);
    store->Flush();  // the change stays dirty
    EXPECT_EQ(store->Durability().dirty, 1u);
    EXPECT_EQ(store->Discard("k"), 1u);
    store->TEST_FailWrites(false);
    store->Flush();
    EXPECT_GE(store->Durability().deleted_rows, 1u);
  }
  EXPECT_EQ(CountRows(), 0u);
  auto store = Open();
  EXPECT_TRUE(store->Get("k").empty());
}

TEST_F(DurableStoreTest, VersionsDoNotGoBackAcrossEraseAndReopen) {
  const limiter::TimeNs t0 = Now();
  LimitSpec spec = Spec(Algorithm::kTokenBucket, 1000, 3600 * kSecond);
  uint64_t last = 0;
  {
    auto store = Open();
    for (int i = 0; i < 50; ++i) Charge(*store, "k", spec, t0, 0 + (i % 2));
    last = store->Get("k")[0].version;
    EXPECT_GE(last, static_cast<uint64_t>(t0 / 1'000'000) << 4);
  }
  {
    auto store = Open();
    EXPECT_EQ(store->Get("k")[0].version, last);  // restored exactly
    Charge(*store, "k", spec, t0, 1);
    EXPECT_GT(store->Get("k")[0].version, last);
    last = store->Get("k")[0].version;
    ASSERT_EQ(store->Erase("k", std::nullopt), 1u);
  }
  auto store = Open();
  EXPECT_TRUE(store->Get("k").empty());
  Charge(*store, "k", spec, t0 + 5 * kMillisecond, 1);
  EXPECT_GT(store->Get("k")[0].version, last);
}

TEST_F(DurableStoreTest, CorruptOrUnusableDirectoryIsAnErrorValue) {
  {
    auto store = Open();
    Charge(*store, "k", Spec(Algorithm::kTokenBucket, 10, 3600 * kSecond), Now());
  }
  // Garbage in the manifest pointer.
  std::ofstream(options_.data_dir + "/CURRENT", std::ios::trunc) << "not a manifest\n";
  Result<std::unique_ptr<Store>> corrupt = OpenStateStore(options_);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.status().message().find(options_.data_dir), std::string::npos)
      << corrupt.status().ToString();

  // A regular file where the directory should be.
  std::ofstream(dir_ + "/file") << "x";
  options_.data_dir = dir_ + "/file";
  Result<std::unique_ptr<Store>> not_dir = OpenStateStore(options_);
  ASSERT_FALSE(not_dir.ok());
  EXPECT_TRUE(not_dir.status().IsIOError()) << not_dir.status().ToString();

  options_.data_dir = dir_ + "/db2";
  options_.flush_interval_ms = 0;
  Result<std::unique_ptr<Store>> bad = OpenStateStore(options_);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().IsInvalidArgument()) << bad.status().ToString();
  EXPECT_TRUE(Validate(options_).IsInvalidArgument());
}

TEST_F(DurableStoreTest, SecondOpenOfTheSameDirectoryIsAnError) {
  auto store = Open();
  Result<std::unique_ptr<Store>> second = OpenStateStore(options_);
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(second.status().IsIOError()) << second.status().ToString();
}

// The miss filter: a miss reads RocksDB only while one of the rows it could find has not expired yet.
TEST_F(DurableStoreTest, AMissReadsRocksDbOnlyWhileARowItCouldFindHasNotExpired) {
  const limiter::TimeNs t0 = AheadOfTheSweep();
  const LimitSpec spec = Spec(Algorithm::kTokenBucket, 10, 60 * kSecond);  // a unit drains in 6 s
  options_.max_keys = 1;
  options_.shards = 1;
  // "c", "d" and "e" are never written and share no bucket of the filter with "a" or "b".
  for (const char* other : {"c", "d", "e"}) {
    ASSERT_NE(ring::RingToken(other) >> 48, ring::RingToken("a") >> 48);
    ASSERT_NE(ring::RingToken(other) >> 48, ring::RingToken("b") >> 48);
  }
  {
    auto store = Open();
    store->TEST_WaitOpenScan();                              // an empty directory: no row present at open
    EXPECT_EQ(Charge(*store, "a", spec, t0).remaining, 9u);  // new keys: misses that skip the read
    store->Flush();
    Charge(*store, "b", spec, t0);  // evicts "a", clean since the flush
    ASSERT_EQ(store->Stats().evictions, 1u);
    EXPECT_EQ(store->Durability().load_skips, 2u);
    // Written since open: its bucket of the filter covers the row until it expires.
    EXPECT_EQ(Charge(*store, "a", spec, t0 + kSecond).remaining, 8u);  // read back, charged on
    EXPECT_EQ(store->Durability().loads, 1u);
    EXPECT_EQ(store->Durability().load_skips, 2u);
    EXPECT_EQ(Charge(*store, "c", spec, t0 + kSecond).remaining, 9u);  // nothing written in its bucket
    EXPECT_EQ(store->Durability().loads, 1u);
    EXPECT_EQ(store->Durability().load_skips, 3u);
  }
  {
    // After a restart the rows present at open bound every miss until the last of them has expired.
    auto store = Open();
    store->TEST_WaitOpenScan();
    EXPECT_EQ(Charge(*store, "d", spec, t0 + 2 * kSecond).remaining, 9u);  // looked for: "a" has not expired
    EXPECT_EQ(store->Durability().load_skips, 0u);
    EXPECT_EQ(Charge(*store, "a", spec, t0 + 2 * kSecond).remaining, 7u);
    EXPECT_EQ(store->Durability().loads, 1u);
  }
  // An hour later every row has expired (its state is back to the initial one): no miss reads.
  auto store = Open();
  store->TEST_WaitOpenScan();
  EXPECT_EQ(Charge(*store, "a", spec, t0 + 3600 * kSecond).remaining, 9u);
  EXPECT_EQ(Charge(*store, "e", spec, t0 + 3600 * kSecond).remaining, 9u);
  EXPECT_EQ(store->Durability().loads, 0u);
  EXPECT_EQ(store->Durability().load_skips, 2u);
}

// Short windows, a tiny memory bound and keys coming back after their rows expired: every decision is the
// one an unbounded memory-only store makes, though some misses read RocksDB and others skip it.
TEST_F(DurableStoreTest, SkippedMissesDecideAsAnUnboundedStoreDoes) {
  options_.max_keys = 3;
  options_.shards = 1;
  const limiter::TimeNs t0 = AheadOfTheSweep();
  auto store = Open();
  store->TEST_WaitOpenScan();
  MemoryStore reference;
  std::mt19937_64 random(7);
  for (int step = 0; step < 2000; ++step) {
    const limiter::TimeNs now = t0 + step * 5 * kMillisecond;
    const Algorithm a = kAlgorithms[random() % std::size(kAlgorithms)];
    const uint64_t k = random() % 8;
    const std::string entity = std::string(limiter::AlgorithmName(a)) + ":" + std::to_string(k);
    const LimitSpec spec = Spec(a, 4, static_cast<limiter::DurationNs>(50 + 50 * (k % 4)) * kMillisecond);
    const auto got = Charge(*store, entity, spec, now);
    const auto want = Charge(reference, entity, spec, now);
    ASSERT_EQ(got.allowed, want.allowed) << entity << " at step " << step;
    ASSERT_EQ(got.remaining, want.remaining) << entity << " at step " << step;
    if (step % 7 == 0) store->Flush();  // clean states are evicted by the next keys
  }
  EXPECT_GT(store->Durability().loads, 0u);
  EXPECT_GT(store->Durability().load_skips, 0u);
}

TEST(OpenStateStoreTest, EmptyDataDirIsMemoryOnly) {
  StorageOptions options;
  Result<std::unique_ptr<Store>> opened = OpenStateStore(options);
  ASSERT_TRUE(opened.ok());
  EXPECT_FALSE((*opened)->Durability().persistent);
  EXPECT_TRUE(Validate(options).ok());
}

}  // namespace
}  // namespace ringlimit::storage
