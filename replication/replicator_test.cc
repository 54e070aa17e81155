#include "replication/replicator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "replication/testing/executor_thread.h"
#include "replication/testing/loopback_link.h"
#include "replication/update_wire.h"
#include "ring/token.h"
#include "storage/memory_store.h"
#include "storage/state_codec.h"
#include "storage/testing/charge.h"

using ringlimit::storage_testing::ChargeMerged;
using ringlimit::storage_testing::Plain;

namespace ringlimit::replication {
namespace {

using namespace std::chrono_literals;
using testing::ExecutorThread;
using testing::FlushAndWait;
using testing::LoopbackMember;
using testing::LoopbackNetwork;

limiter::TimeNs Now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

limiter::LimitSpec HourSpec(uint64_t limit = 1'000'000) {
  limiter::LimitSpec spec;
  spec.algorithm = limiter::Algorithm::kFixedWindow;
  spec.limit = limit;
  spec.window = 3600 * limiter::kSecond;
  return spec;
}

// Charges `cost` units of limit `name` of `entity`.
void Charge(storage::Store& store, std::string_view entity, std::string_view name = "rps", uint64_t cost = 1,
            limiter::ContributorId contributor = storage_testing::kTestContributor) {
  static const limiter::LimitSpec spec = HourSpec();
  const limiter::TimeNs now = Now();
  storage::Slot slot{name, &spec};
  store.Update(
      entity, std::span<const storage::Slot>(&slot, 1), now,
      [&](std::span<limiter::MergeState* const> states) {
        static_cast<void>(ChargeMerged(spec, *states[0], limiter::Request{cost, now, 0.}, contributor));
      });
}

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// Same states (names, versions, words) in both stores for `entity`.
bool SameStates(storage::Store& a, storage::Store& b, std::string_view entity) {
  const auto x = a.Get(entity);
  const auto y = b.Get(entity);
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].name != y[i].name || x[i].version != y[i].version || !(x[i].state == y[i].state)) return false;
  }
  return true;
}

// Same merged states (names and words; versions are each store's own) in both stores for `entity`.
bool SameCounts(storage::Store& a, storage::Store& b, std::string_view entity) {
  const auto x = a.Get(entity);
  const auto y = b.Get(entity);
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].name != y[i].name || !(x[i].state == y[i].state)) return false;
  }
  return true;
}

// Members a, b, c (or as given), each with a MemoryStore and a started Replicator as its store's observer
// and its METHOD_STATE_UPDATE handler.
class Cluster {
 public:
  explicit Cluster(ReplicatorOptions options, std::vector<std::string> ids = {"a", "b", "c"}) : ids_(ids) {
    for (const std::string& id : ids) net_.Add(id);
    ring_ = net_.SetRing(ids);
    for (const std::string& id : ids) {
      LoopbackMember& m = net_.member(id);
      auto r = std::make_unique<Replicator>(m.store(), m, exec_.executor(), options);
      Replicator* raw = r.get();
      m.store().SetObserver(raw);
      m.Handle(peer::METHOD_STATE_UPDATE, [raw](std::string_view p) { return raw->HandleStateUpdate(p); });
      r->Start();
      replicators_.emplace(id, std::move(r));
    }
  }
  ~Cluster() {
    for (auto& [id, r] : replicators_) r->Stop();
    net_.Shutdown();
  }

  LoopbackNetwork& net() { return net_; }
  // Stalls (or resumes) both replicas of a's keys.
  void PauseReplicas(bool paused) {
    net_.SetPaused("b", paused);
    net_.SetPaused("c", paused);
  }
  storage::Store& store(const std::string& id) { return net_.member(id).store(); }
  Executor& executor() { return exec_.executor(); }
  Replicator& replicator(const std::string& id) { return *replicators_.at(id); }

  // A key whose preference list (R = 3) starts with `owner`.
  std::string KeyOwnedBy(const std::string& owner, int n = 0) const {
    for (int i = 0;; ++i) {
      std::string key = "user:" + std::to_string(i);
      if (ring_->Owner(ring::RingToken(key))->id == owner && n-- == 0) return key;
    }
  }

 private:
  ExecutorThread exec_;  // shared by the members' replicators (destroyed after them)
  LoopbackNetwork net_;
  std::vector<std::string> ids_;
  std::shared_ptr<const ring::RingView> ring_;
  std::map<std::string, std::unique_ptr<Replicator>> replicators_;
};

ReplicatorOptions Options(uint32_t replicas = 3) {
  ReplicatorOptions options;
  options.replicas = replicas;
  options.interval = 2ms;
  return options;
}

ReplicatorOptions SyncOptions(std::chrono::milliseconds sync_timeout) {
  ReplicatorOptions options = Options();
  options.mode = ReplicationMode::kSync;
  options.sync_timeout = sync_timeout;
  return options;
}

// Calls Decided(keys) on `r`; the returned counter counts the calls of `done`.
std::shared_ptr<std::atomic<int>> Decide(Replicator& r, std::vector<std::string_view> keys) {
  auto done = std::make_shared<std::atomic<int>>(0);
  r.Decided(keys, [done](bool) { ++*done; });
  return done;
}

std::string Serialize(const peer::StateUpdateBatch& batch) { return batch.SerializeAsString(); }

TEST(ReplicatorOptionsTest, ParseAndValidate) {
  EXPECT_EQ(ParseReplicationMode("async"), ReplicationMode::kAsync);
  EXPECT_EQ(ParseReplicationMode("sync"), ReplicationMode::kSync);
  EXPECT_FALSE(ParseReplicationMode("Sync").has_value());
  EXPECT_FALSE(ParseReplicationMode("").has_value());
  EXPECT_EQ(ToString(ReplicationMode::kSync), "sync");
  EXPECT_EQ(ToString(ReplicationMode::kAsync), "async");
  EXPECT_TRUE(Validate(ReplicatorOptions{}).ok());
  ReplicatorOptions bad;
  bad.replicas = 0;
  EXPECT_TRUE(Validate(bad).IsInvalidArgument());
  bad = {};
  bad.interval = 0ms;
  EXPECT_TRUE(Validate(bad).IsInvalidArgument());
  bad = {};
  bad.max_batch = 0;
  EXPECT_TRUE(Validate(bad).IsInvalidArgument());
  bad = {};
  bad.send_timeout = 0ms;
  EXPECT_TRUE(Validate(bad).IsInvalidArgument());
}

TEST(ReplicatorTest, NamedStateRoundTrip) {
  storage::StoredState s;
  s.name = "rps";
  s.spec = HourSpec(7);
  ChargeMerged(s.spec, s.state, {3, 1'700'000'000'000'000'000, 0.});
  s.version = 12345;
  peer::NamedState named;
  ToNamedState(s, &named);
  auto back = FromNamedState(named);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->name, "rps");
  EXPECT_EQ(back->spec.limit, 7u);
  EXPECT_EQ(back->spec.window, s.spec.window);
  EXPECT_EQ(back->state, s.state);
  EXPECT_EQ(back->version, 12345u);
  // Not usable: an invalid spec, merged bytes cut short.
  named.mutable_state()->mutable_spec()->set_limit(0);
  EXPECT_FALSE(FromNamedState(named).has_value());
  ToNamedState(s, &named);
  named.mutable_state()->mutable_merged()->pop_back();
  EXPECT_FALSE(FromNamedState(named).has_value());
}

// The sender writes each key's update straight into the batch (replication/update_wire.h): the bytes of
// the message FillStateUpdate builds, for every algorithm, erased or not, with states or none.
TEST(ReplicatorTest, AppendStateUpdateWritesWhatProtobufWrites) {
  storage::MemoryStore store;
  const limiter::Algorithm algorithms[] = {
      limiter::Algorithm::kTokenBucket,    limiter::Algorithm::kGcra,
      limiter::Algorithm::kLeakyBucket,    limiter::Algorithm::kFixedWindow,
      limiter::Algorithm::kSlidingWindow,  limiter::Algorithm::kSlidingLog,
      limiter::Algorithm::kAnchoredWindow, limiter::Algorithm::kSlidingWindowApprox};
  for (size_t i = 0; i < std::size(algorithms); ++i) {
    storage::StoredState s;
    s.name = "limit-" + std::to_string(i);
    s.spec = HourSpec(50);
    s.spec.algorithm = algorithms[i];
    s.spec.buckets = 6;
    for (int n = 0; n < 5; ++n)
      ChargeMerged(s.spec, s.state, {1, 1'700'000'000'000'000'000 + n * 1'000'000, 0.});
    s.version = 10 + i;
    ASSERT_TRUE(store.Absorb(i % 2 == 0 ? "user:x" : "user:y", s));
  }
  for (const bool erased : {false, true}) {
    for (const std::string_view entity : {"user:x", "user:y", "none", ""}) {
      peer::StateUpdate message;
      FillStateUpdate(store, entity, &message);
      message.set_erased(erased);
      std::string bytes = "batch so far";
      AppendStateUpdate(entity, erased, store.Get(entity), bytes);
      EXPECT_EQ(bytes, "batch so far" + message.SerializeAsString()) << entity << " " << erased;
    }
  }
}

TEST(ReplicatorTest, OwnerChangeReachesBothSuccessors) {
  Cluster cluster(Options());
  const std::string key = cluster.KeyOwnedBy("a");
  for (int i = 0; i < 5; ++i) Charge(cluster.store("a"), key);
  Charge(cluster.store("a"), key, "daily");
  ASSERT_EQ(cluster.store("a").Get(key).size(), 2u);
  EXPECT_TRUE(WaitFor([&] { return SameStates(cluster.store("a"), cluster.store("b"), key); }));
  EXPECT_TRUE(WaitFor([&] { return SameStates(cluster.store("a"), cluster.store("c"), key); }));
  EXPECT_EQ(Plain(cluster.store("b").Get(key)[1]).word[1], 5);  // "rps" after "daily": 5 units counted
  // Later changes follow.
  Charge(cluster.store("a"), key, "rps", 10);
  EXPECT_TRUE(WaitFor([&] { return SameStates(cluster.store("a"), cluster.store("b"), key); }));
  EXPECT_TRUE(WaitFor([&] { return SameStates(cluster.store("a"), cluster.store("c"), key); }));
  EXPECT_TRUE(WaitFor([&] { return cluster.replicator("a").stats().updates_acked >= 4; }));
  const ReplicatorStats stats = cluster.replicator("a").stats();
  EXPECT_GE(stats.updates_sent, 4u);
  EXPECT_EQ(stats.send_failures, 0u);
  EXPECT_GT(stats.max_lag_seconds, 0.0);
  // Every acknowledged batch is in the lag histogram, and the buckets add up to its count.
  EXPECT_GE(stats.lag_count, 2u);
  uint64_t in_buckets = 0;
  for (uint64_t n : stats.lag_buckets) in_buckets += n;
  EXPECT_EQ(in_buckets, stats.lag_count);
  EXPECT_GT(stats.lag_sum_ns, 0);
  EXPECT_GE(cluster.replicator("b").stats().applied_states, 2u);
}

TEST(ReplicatorTest, ReplicasOneSendsNothing) {
  Cluster cluster(Options(1));
  const std::string key = cluster.KeyOwnedBy("a");
  for (int i = 0; i < 10; ++i) Charge(cluster.store("a"), key);
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 1s));
  EXPECT_EQ(cluster.net().TotalSent(), 0u);
  EXPECT_EQ(cluster.replicator("a").stats().updates_sent, 0u);
  EXPECT_EQ(cluster.replicator("a").stats().pending_keys, 0u);
  EXPECT_TRUE(cluster.store("b").Get(key).empty());
}

TEST(ReplicatorTest, TwoMembersWithThreeReplicasSendToTheOther) {
  Cluster cluster(Options(3), {"a", "b"});
  const std::string key = cluster.KeyOwnedBy("a");
  Charge(cluster.store("a"), key);
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 5s));
  EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store("b"), key));
  EXPECT_EQ(cluster.replicator("a").stats().updates_sent, 1u);
}

TEST(ReplicatorTest, ADecidingNonOwnerShipsToTheWholePreferenceList) {
  // Failover or handoff: a decides keys b owns; b and c (the rest of the list) get the changes.
  Cluster cluster(Options());
  const std::string key = cluster.KeyOwnedBy("b");
  Charge(cluster.store("a"), key);
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 5s));
  EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store("b"), key));
  EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store("c"), key));
}

TEST(ReplicatorTest, NoRingSendsNothing) {
  LoopbackNetwork net;
  LoopbackMember& a = net.Add("a");
  net.Add("b");
  ExecutorThread exec;
  Replicator r(a.store(), a, exec.executor(), Options());
  a.store().SetObserver(&r);
  r.Start();
  Charge(a.store(), "k");
  EXPECT_TRUE(FlushAndWait(r, 1s));
  EXPECT_EQ(net.TotalSent(), 0u);
  r.Stop();
  net.Shutdown();
}

TEST(ReplicatorTest, RepeatsAndReorderingAreHarmless) {
  LoopbackNetwork net;
  LoopbackMember& source = net.Add("a");
  LoopbackMember& replica = net.Add("b");
  net.SetRing({"a", "b"});
  ExecutorThread receiver_exec;
  Replicator receiver(replica.store(), replica, receiver_exec.executor(), Options());

  Charge(source.store(), "k");
  peer::StateUpdateBatch v1;
  *v1.add_updates() = MakeStateUpdate(source.store(), "k");
  Charge(source.store(), "k", "rps", 4);
  peer::StateUpdateBatch v2;
  *v2.add_updates() = MakeStateUpdate(source.store(), "k");
  ASSERT_EQ(v2.updates(0).states_size(), 1);
  EXPECT_EQ(v2.updates(0).token(), ring::RingToken("k"));
  EXPECT_FALSE(v2.updates(0).erased());

  auto apply = [&](const peer::StateUpdateBatch& batch) {
    auto answer = receiver.HandleStateUpdate(Serialize(batch));
    EXPECT_TRUE(answer.has_value());
    peer::StateUpdateAck ack;
    EXPECT_TRUE(ack.ParseFromString(answer.value_or("")));
    return ack;
  };
  EXPECT_EQ(apply(v2).applied(), 1u);
  EXPECT_EQ(apply(v1).ignored(), 1u);  // older, after newer
  EXPECT_EQ(apply(v2).ignored(), 1u);  // repeat
  EXPECT_TRUE(SameStates(source.store(), replica.store(), "k"));
  EXPECT_EQ(Plain(replica.store().Get("k")[0]).word[1], 5);
  const ReplicatorStats stats = receiver.stats();
  EXPECT_EQ(stats.received_updates, 3u);
  EXPECT_EQ(stats.applied_states, 1u);
  EXPECT_EQ(stats.ignored_states, 2u);
  net.Shutdown();
}

TEST(ReplicatorTest, BatchesAreAppliedWhicheverReaderReadsThem) {
  // ASCII keys and names are read in place (update_wire.h); a UTF-8 key goes to Protobuf's parser; a key
  // that is not UTF-8 is a malformed batch to both.
  LoopbackNetwork net;
  LoopbackMember& source = net.Add("a");
  LoopbackMember& replica = net.Add("b");
  ExecutorThread receiver_exec;
  Replicator receiver(replica.store(), replica, receiver_exec.executor(), Options());
  const std::string utf8 = "caf\xc3\xa9";
  for (const std::string& key : {std::string("plain"), utf8}) {
    Charge(source.store(), key, "rps", 3);
    peer::StateUpdateBatch batch;
    batch.set_from("a");
    *batch.add_updates() = MakeStateUpdate(source.store(), key);
    BatchView view;
    EXPECT_EQ(ReadStateUpdateBatch(Serialize(batch), view), key == "plain") << key;
    auto answer = receiver.HandleStateUpdate(Serialize(batch));
    ASSERT_TRUE(answer.has_value()) << key;
    peer::StateUpdateAck ack;
    ASSERT_TRUE(ack.ParseFromString(*answer));
    EXPECT_EQ(ack.applied(), 1u) << key;
    EXPECT_TRUE(SameStates(source.store(), replica.store(), key)) << key;
  }
  peer::StateUpdateBatch bad;
  *bad.add_updates() = MakeStateUpdate(source.store(), "plain");
  std::string bytes = Serialize(bad);
  const size_t at = bytes.find("plain");
  ASSERT_NE(at, std::string::npos);
  bytes[at] = '\xff';  // not UTF-8: Protobuf refuses the batch
  EXPECT_FALSE(receiver.HandleStateUpdate(bytes).has_value());
  EXPECT_EQ(receiver.stats().bad_batches, 1u);
  net.Shutdown();
}

TEST(ReplicatorTest, MalformedAndInvalidPayloads) {
  LoopbackNetwork net;
  LoopbackMember& m = net.Add("a");
  ExecutorThread receiver_exec;
  Replicator receiver(m.store(), m, receiver_exec.executor(), Options());
  EXPECT_FALSE(receiver.HandleStateUpdate("\xff\xff\xff\xff garbage").has_value());
  EXPECT_EQ(receiver.stats().bad_batches, 1u);

  // A state whose spec fails limiter::Validate is ignored, the valid one next to it applied.
  storage::StoredState good;
  good.name = "ok";
  good.spec = HourSpec(5);
  ChargeMerged(good.spec, good.state, {1, 1'700'000'000'000'000'000, 0.});
  good.version = 100;
  storage::StoredState bad = good;
  bad.name = "bad";
  bad.spec.window = 0;
  peer::StateUpdateBatch batch;
  peer::StateUpdate* update = batch.add_updates();
  update->set_key("k");
  ToNamedState(good, update->add_states());
  ToNamedState(bad, update->add_states());
  auto answer = receiver.HandleStateUpdate(Serialize(batch));
  ASSERT_TRUE(answer.has_value());
  peer::StateUpdateAck ack;
  ASSERT_TRUE(ack.ParseFromString(*answer));
  EXPECT_EQ(ack.applied(), 1u);
  EXPECT_EQ(ack.ignored(), 1u);
  ASSERT_EQ(m.store().Get("k").size(), 1u);
  EXPECT_EQ(m.store().Get("k")[0].name, "ok");
  net.Shutdown();
}

TEST(ReplicatorTest, UnreachableMemberGetsNothingThenCatchesUp) {
  Cluster cluster(Options());
  cluster.net().SetReachable("c", false);
  const std::string key = cluster.KeyOwnedBy("a");
  Charge(cluster.store("a"), key);
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 5s));
  EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store("b"), key));
  EXPECT_EQ(cluster.net().Sent("c", peer::METHOD_STATE_UPDATE), 0u);
  EXPECT_TRUE(cluster.store("c").Get(key).empty());

  cluster.net().SetReachable("c", true);
  Charge(cluster.store("a"), key);
  EXPECT_TRUE(WaitFor([&] { return SameStates(cluster.store("a"), cluster.store("c"), key); }));
  EXPECT_EQ(Plain(cluster.store("c").Get(key)[0]).word[1], 2);
}

TEST(ReplicatorTest, FailedSendsAreRetriedWhileTheMemberIsReachable) {
  Cluster cluster(Options());
  cluster.net().SetFailing("b", true);
  const std::string key = cluster.KeyOwnedBy("a");
  Charge(cluster.store("a"), key);
  EXPECT_TRUE(WaitFor([&] { return cluster.replicator("a").stats().send_failures >= 2; }));
  // The other replica is served; the key waits for b (pending while it is not in flight).
  EXPECT_TRUE(WaitFor([&] { return SameStates(cluster.store("a"), cluster.store("c"), key); }));
  EXPECT_TRUE(WaitFor([&] { return cluster.replicator("a").stats().pending_keys >= 1; }));
  EXPECT_TRUE(cluster.store("b").Get(key).empty());
  cluster.net().SetFailing("b", false);
  EXPECT_TRUE(WaitFor([&] { return SameStates(cluster.store("a"), cluster.store("b"), key); }));
  EXPECT_TRUE(WaitFor([&] { return cluster.replicator("a").stats().pending_keys == 0; }));
}

TEST(ReplicatorTest, EraseReachesTheReplicas) {
  Cluster cluster(Options());
  const std::string key = cluster.KeyOwnedBy("a");
  Charge(cluster.store("a"), key, "rps");
  Charge(cluster.store("a"), key, "daily");
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 5s));
  ASSERT_EQ(cluster.store("b").Get(key).size(), 2u);

  // One state erased: the replicas drop it and keep the other.
  EXPECT_EQ(cluster.store("a").Erase(key, "daily"), 1u);
  EXPECT_TRUE(WaitFor(
      [&] { return cluster.store("b").Get(key).size() == 1 && cluster.store("c").Get(key).size() == 1; }));
  EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store("b"), key));
  EXPECT_EQ(cluster.store("c").Get(key)[0].name, "rps");

  // All of them.
  EXPECT_EQ(cluster.store("a").Erase(key, std::nullopt), 1u);
  EXPECT_TRUE(
      WaitFor([&] { return cluster.store("b").Get(key).empty() && cluster.store("c").Get(key).empty(); }));
}

TEST(ReplicatorTest, FlushWaitsForTheAcknowledgements) {
  ReplicatorOptions options = Options();
  options.interval = 60s;  // only Flush ships
  Cluster cluster(options);
  std::vector<std::string> keys;
  for (int i = 0; i < 50; ++i) keys.push_back(cluster.KeyOwnedBy("a", i));
  for (const std::string& key : keys) Charge(cluster.store("a"), key);
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 5s));
  for (const std::string& key : keys) {
    EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store("b"), key));
    EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store("c"), key));
  }
  EXPECT_EQ(cluster.replicator("a").stats().updates_acked, 100u);

  // A stalled replica: Flush gives up at its timeout, and succeeds once the replica answers.
  cluster.net().SetPaused("b", true);
  Charge(cluster.store("a"), keys[0]);
  EXPECT_FALSE(FlushAndWait(cluster.replicator("a"), 100ms));
  cluster.net().SetPaused("b", false);
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 5s));
  EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store("b"), keys[0]));
}

// Not a timing assertion: prints what shipping a key costs end to end (read, encode, send, apply on two
// replicas; all in this process).
TEST(ReplicatorTest, FlushCost) {
  ReplicatorOptions options = Options();
  options.interval = 60s;  // only Flush ships
  Cluster cluster(options);
  constexpr int kKeys = 20'000;
  for (int i = 0; i < kKeys; ++i) {
    const std::string key = "user:" + std::to_string(i);
    Charge(cluster.store("a"), key, "rps");
    Charge(cluster.store("a"), key, "daily");
  }
  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();  // CPU of every thread: the machine may be shared
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 60s));
  const double cpu_us = 1e6 * static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "Flush: %d keys (2 states each) to 2 replicas in %.1f ms wall; CPU (sender + both receivers) "
      "%.2f us per key\n",
      kKeys, us / 1000, cpu_us / kKeys);
  EXPECT_EQ(cluster.replicator("a").stats().updates_acked, 2u * kKeys);
  EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store("c"), "user:777"));
}

TEST(ReplicatorTest, BatchesHoldAtMostMaxBatchUpdates) {
  ReplicatorOptions options = Options();
  options.interval = 60s;
  options.max_batch = 16;
  Cluster cluster(options);
  std::atomic<int> largest{0};
  std::atomic<int> updates{0};
  Replicator& b = cluster.replicator("b");
  cluster.net().member("b").Handle(peer::METHOD_STATE_UPDATE, [&](std::string_view p) {
    peer::StateUpdateBatch batch;
    EXPECT_TRUE(batch.ParseFromArray(p.data(), static_cast<int>(p.size())));
    EXPECT_EQ(batch.from(), "a");
    EXPECT_FALSE(batch.handoff());
    EXPECT_NE(batch.ring_fingerprint(), 0u);
    largest = std::max(largest.load(), batch.updates_size());
    updates += batch.updates_size();
    return b.HandleStateUpdate(p);
  });
  std::vector<std::string> keys;
  for (int i = 0; i < 100; ++i) keys.push_back(cluster.KeyOwnedBy("a", i));
  for (const std::string& key : keys) Charge(cluster.store("a"), key);
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 5s));
  EXPECT_EQ(updates.load(), 100);
  EXPECT_EQ(largest.load(), 16);
  EXPECT_EQ(cluster.net().Handled("b", peer::METHOD_STATE_UPDATE), 7u);  // ceil(100 / 16)
}

// Large states (a sliding_log at its 10 000-unit cap holds 10 000 stamps) do not make one huge message:
// a batch goes out as several messages of at most a few MiB, each far under the peer frame limit, and
// the batch is acknowledged once all of them are.
TEST(ReplicatorTest, BatchesOfLargeStatesAreSplitByBytes) {
  ReplicatorOptions options = Options();
  options.interval = 60s;
  Cluster cluster(options);
  std::atomic<size_t> largest{0};
  std::atomic<int> updates{0};
  Replicator& b = cluster.replicator("b");
  cluster.net().member("b").Handle(peer::METHOD_STATE_UPDATE, [&](std::string_view p) {
    peer::StateUpdateBatch batch;
    EXPECT_TRUE(batch.ParseFromArray(p.data(), static_cast<int>(p.size())));
    largest = std::max(largest.load(), p.size());
    updates += batch.updates_size();
    return b.HandleStateUpdate(p);
  });
  limiter::LimitSpec log;
  log.algorithm = limiter::Algorithm::kSlidingLog;
  log.limit = limiter::kMaxSlidingLogLimit;
  log.window = 3600 * limiter::kSecond;
#if defined(RINGLIMIT_TSAN)
  constexpr int kKeys = 64;  // ~5 MiB of states, still more than one 4 MiB batch: ThreadSanitizer is slow
#else
  constexpr int kKeys = 200;
#endif
  std::vector<std::string> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back(cluster.KeyOwnedBy("a", i));
  for (const std::string& key : keys) {
    const limiter::TimeNs now = Now();
    storage::Slot slot{"log", &log};
    for (limiter::TimeNs at = now; at < now + 10; ++at) {  // 1000 units at a time: 10 000 stamps
      cluster.store("a").Update(key, std::span<const storage::Slot>(&slot, 1), at,
                                [&](std::span<limiter::MergeState* const> states) {
                                  EXPECT_TRUE(ChargeMerged(log, *states[0], {1000, at, 0.}).allowed);
                                });
    }
  }
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 60s));
  EXPECT_EQ(updates.load(), kKeys);
  EXPECT_GT(cluster.net().Handled("b", peer::METHOD_STATE_UPDATE), 1u);  // one batch of kKeys keys, split
  EXPECT_LE(largest.load(), size_t{5} << 20);
  EXPECT_EQ(cluster.replicator("a").stats().updates_acked, 2u * kKeys);
  EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store("b"), keys.back()));
}

TEST(ReplicatorTest, SyncDecidedWaitsForAnAcknowledgement) {
  Cluster cluster(SyncOptions(30s));
  cluster.PauseReplicas(true);
  const std::string key = cluster.KeyOwnedBy("a");
  Charge(cluster.store("a"), key);
  // The acknowledgement that counts is the successor's: the replica that takes the key over if "a" dies.
  const auto pref = cluster.net().member("a").ring()->PreferenceList(ring::RingToken(key), 3);
  ASSERT_EQ(pref.size(), 3u);
  const std::string successor = pref[1]->id;
  const std::string third = pref[2]->id;
  auto done = Decide(cluster.replicator("a"), {key});
  cluster.net().SetPaused(third, false);  // the other replica's acknowledgement is not enough
  EXPECT_TRUE(WaitFor([&] { return SameStates(cluster.store("a"), cluster.store(third), key); }));
  std::this_thread::sleep_for(100ms);  // the successor did not answer: still waiting
  EXPECT_EQ(done->load(), 0);
  cluster.net().SetPaused(successor, false);
  EXPECT_TRUE(WaitFor([&] { return done->load() == 1; }));
  EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store(successor), key));  // acknowledged = applied
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 5s));
  EXPECT_EQ(done->load(), 1);  // exactly once
  EXPECT_EQ(cluster.replicator("a").stats().sync_waits, 1u);
  EXPECT_EQ(cluster.replicator("a").stats().sync_timeouts, 0u);
}

TEST(ReplicatorTest, SyncDecidedAnswersAfterTheTimeoutWithoutReplicas) {
  Cluster cluster(SyncOptions(100ms));
  cluster.PauseReplicas(true);
  const std::string key = cluster.KeyOwnedBy("a");
  const std::string other = cluster.KeyOwnedBy("a", 1);
  Charge(cluster.store("a"), key);
  Charge(cluster.store("a"), other);
  const auto start = std::chrono::steady_clock::now();
  auto done = Decide(cluster.replicator("a"), {key, other});
  EXPECT_TRUE(WaitFor([&] { return done->load() == 1; }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  EXPECT_EQ(cluster.replicator("a").stats().sync_timeouts, 1u);
  cluster.PauseReplicas(false);
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 5s));
  EXPECT_EQ(done->load(), 1);
}

// Decided(keys) on `r` that records the answer: calls, and how many said acked.
struct Answers {
  std::atomic<int> calls{0};
  std::atomic<int> acked{0};
};
std::shared_ptr<Answers> DecideRecorded(Replicator& r, std::vector<std::string_view> keys) {
  auto answers = std::make_shared<Answers>();
  r.Decided(keys, [answers](bool acked) {
    if (acked) ++answers->acked;
    ++answers->calls;
  });
  return answers;
}

ReplicatorOptions MajorityOptions(std::chrono::milliseconds sync_timeout) {
  ReplicatorOptions options = SyncOptions(sync_timeout);
  options.ack_majority = true;
  return options;
}

TEST(ReplicatorTest, MajorityWaitsForOneHolderBesidesTheDecider) {
  Cluster cluster(MajorityOptions(30s));
  cluster.PauseReplicas(true);
  const std::string key = cluster.KeyOwnedBy("a");
  const auto pref = cluster.net().member("a").ring()->PreferenceList(ring::RingToken(key), 3);
  ASSERT_EQ(pref.size(), 3u);
  Charge(cluster.store("a"), key);
  auto answers = DecideRecorded(cluster.replicator("a"), {key});
  std::this_thread::sleep_for(100ms);  // a negative: neither holder answered, so no answer yet
  EXPECT_EQ(answers->calls.load(), 0);
  cluster.net().SetPaused(pref[2]->id, false);  // the third holder is as good as the second: 2 of 3
  EXPECT_TRUE(WaitFor([&] { return answers->calls.load() == 1; }));
  EXPECT_EQ(answers->acked.load(), 1);
  EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store(pref[2]->id), key));  // acknowledged = applied
  cluster.net().SetPaused(pref[1]->id, false);
}

TEST(ReplicatorTest, MajorityAHolderDecidingForAStalledOwnerNeedsNoAnswerFromIt) {
  Cluster cluster(MajorityOptions(30s));
  const std::string key = cluster.KeyOwnedBy("a");
  const auto pref = cluster.net().member("a").ring()->PreferenceList(ring::RingToken(key), 3);
  ASSERT_EQ(pref.size(), 3u);
  cluster.net().SetPaused("a", true);
  const std::string second = pref[1]->id;
  Charge(cluster.store(second), key);
  auto answers = DecideRecorded(cluster.replicator(second), {key});
  EXPECT_TRUE(WaitFor([&] { return answers->calls.load() == 1; }));
  EXPECT_EQ(answers->acked.load(), 1);  // the second and the third: a majority
  EXPECT_TRUE(SameStates(cluster.store(second), cluster.store(pref[2]->id), key));
  cluster.net().SetPaused("a", false);
}

TEST(ReplicatorTest, MajorityAnswersUnackedWhenNoMajorityAnswersOrCanBeReached) {
  Cluster cluster(MajorityOptions(100ms));
  const std::string key = cluster.KeyOwnedBy("a");
  const auto pref = cluster.net().member("a").ring()->PreferenceList(ring::RingToken(key), 3);
  ASSERT_EQ(pref.size(), 3u);
  cluster.PauseReplicas(true);
  Charge(cluster.store("a"), key);
  auto answers = DecideRecorded(cluster.replicator("a"), {key});
  EXPECT_TRUE(WaitFor([&] { return answers->calls.load() == 1; }));
  EXPECT_EQ(answers->acked.load(), 0);
  EXPECT_EQ(cluster.replicator("a").stats().sync_timeouts, 1u);
  // Both other holders gone (unreachable: declared dead): no majority can answer, unacked at once.
  cluster.net().SetReachable(pref[1]->id, false);
  cluster.net().SetReachable(pref[2]->id, false);
  Charge(cluster.store("a"), key);
  auto unreachable = DecideRecorded(cluster.replicator("a"), {key});
  EXPECT_TRUE(WaitFor([&] { return unreachable->calls.load() == 1; }));
  EXPECT_EQ(unreachable->acked.load(), 0);
  EXPECT_EQ(cluster.replicator("a").stats().sync_timeouts, 1u);
  // One of them back: a majority again.
  cluster.net().SetReachable(pref[2]->id, true);
  cluster.net().SetPaused(pref[2]->id, false);
  Charge(cluster.store("a"), key);
  auto again = DecideRecorded(cluster.replicator("a"), {key});
  EXPECT_TRUE(WaitFor([&] { return again->calls.load() == 1; }));
  EXPECT_EQ(again->acked.load(), 1);
  cluster.net().SetPaused(pref[1]->id, false);
}

TEST(ReplicatorTest, MajorityAHolderWithAdmissionsTheDeciderLacksAnswersThemAndTheDecisionIsNotAcked) {
  Cluster cluster(MajorityOptions(30s));
  const std::string key = cluster.KeyOwnedBy("a");
  const auto pref = cluster.net().member("a").ring()->PreferenceList(ring::RingToken(key), 3);
  ASSERT_EQ(pref.size(), 3u);
  const std::string second = pref[1]->id;
  // The second holder decided the key while "a" could not be reached, and its replication to "a" never
  // arrived: charged with no observer, "a" lacks it. The third holder is stalled, so the decision's
  // majority needs the second, whose answer carries those admissions.
  cluster.store(second).SetObserver(nullptr);
  Charge(cluster.store(second), key, "rps", 5, /*contributor=*/2);
  cluster.store(second).SetObserver(&cluster.replicator(second));
  cluster.net().SetPaused(pref[2]->id, true);
  Charge(cluster.store("a"), key);
  auto answers = DecideRecorded(cluster.replicator("a"), {key});
  EXPECT_TRUE(WaitFor([&] { return answers->calls.load() == 1; }));
  EXPECT_EQ(answers->acked.load(), 0);  // not answered as an admission
  // ... and "a" merged the holder's copy: the next decision starts from both.
  EXPECT_TRUE(SameCounts(cluster.store("a"), cluster.store(second), key));
  EXPECT_GE(cluster.replicator("a").stats().newer_received, 1u);
  Charge(cluster.store("a"), key);
  auto next = DecideRecorded(cluster.replicator("a"), {key});
  EXPECT_TRUE(WaitFor([&] { return next->calls.load() == 1; }));
  EXPECT_EQ(next->acked.load(), 1);
  cluster.net().SetPaused(pref[2]->id, false);
}

TEST(ReplicatorTest, SyncDecidedAnswersAtOnceWhenNothingIsToWaitFor) {
  {
    Cluster cluster(SyncOptions(30s));
    cluster.net().SetReachable("b", false);
    cluster.net().SetReachable("c", false);
    const std::string key = cluster.KeyOwnedBy("a");
    Charge(cluster.store("a"), key);
    auto done = Decide(cluster.replicator("a"), {key});
    EXPECT_TRUE(WaitFor([&] { return done->load() == 1; }, 5s));
    EXPECT_EQ(cluster.replicator("a").stats().sync_timeouts, 0u);
  }
  ReplicatorOptions one = SyncOptions(30s);
  one.replicas = 1;
  ReplicatorOptions async = Options();
  for (const ReplicatorOptions& options : {one, async}) {
    Cluster cluster(options);
    EXPECT_EQ(Decide(cluster.replicator("a"), {"k"})->load(), 1);  // at once, inline
  }
}

TEST(ReplicatorTest, ConcurrentDecidedCallsAreEachAnsweredOnce) {
  Cluster cluster(SyncOptions(30s));
  constexpr int kThreads = 4;
  constexpr int kPerThread = 300;
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::string key = "sync:" + std::to_string(t) + ":" + std::to_string(i % 50);
        Charge(cluster.store("a"), key);
        const std::string_view keys[] = {key};
        cluster.replicator("a").Decided(keys, [&](bool) { ++done; });
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(WaitFor([&] { return done.load() == kThreads * kPerThread; }));
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 5s));
  EXPECT_EQ(done.load(), kThreads * kPerThread);
  EXPECT_EQ(cluster.replicator("a").stats().sync_timeouts, 0u);
  EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store("b"), "sync:3:49"));
}

TEST(ReplicatorTest, SyncCallersQueuedTogetherShareOnePass) {
  Cluster cluster(SyncOptions(30s));
  constexpr int kCalls = 20;
  std::vector<std::string> keys;
  for (int i = 0; i < kCalls; ++i) {
    keys.push_back(cluster.KeyOwnedBy("a", i));
    Charge(cluster.store("a"), keys.back());
  }
  ASSERT_TRUE(FlushAndWait(cluster.replicator("a"), 5s));  // the charges' own (async) pass is over
  const uint64_t b_before = cluster.net().Handled("b", peer::METHOD_STATE_UPDATE);
  const uint64_t c_before = cluster.net().Handled("c", peer::METHOD_STATE_UPDATE);
  // The executor is busy while the callers arrive: the first queued posts one event for all of them.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  cluster.executor().Post([released] { released.wait(); });
  std::atomic<int> done{0};
  for (const std::string& key : keys) {
    const std::string_view one[] = {key};
    cluster.replicator("a").Decided(one, [&](bool) { ++done; });
  }
  release.set_value();
  EXPECT_TRUE(WaitFor([&] { return done.load() == kCalls; }));
  EXPECT_EQ(cluster.replicator("a").stats().sync_waits, static_cast<uint64_t>(kCalls));
  ASSERT_TRUE(FlushAndWait(cluster.replicator("a"), 5s));
  // One batch per replica for all twenty, not twenty.
  EXPECT_EQ(cluster.net().Handled("b", peer::METHOD_STATE_UPDATE), b_before + 1);
  EXPECT_EQ(cluster.net().Handled("c", peer::METHOD_STATE_UPDATE), c_before + 1);
  for (const std::string& key : keys) EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store("b"), key));
}

TEST(ReplicatorTest, StopAnswersPendingSyncWaiters) {
  ReplicatorOptions options = SyncOptions(30s);
  options.send_timeout = 100ms;
  Cluster cluster(options);
  cluster.PauseReplicas(true);
  const std::string key = cluster.KeyOwnedBy("a");
  Charge(cluster.store("a"), key);
  auto done = Decide(cluster.replicator("a"), {key});
  cluster.replicator("a").Stop();
  EXPECT_EQ(done->load(), 1);
  cluster.replicator("a").Stop();  // idempotent
  cluster.PauseReplicas(false);
}

TEST(ReplicatorTest, SendUpdatesPushesInBatches) {
  ReplicatorOptions options = Options();
  options.max_batch = 100;
  Cluster cluster(options);
  std::vector<peer::StateUpdate> updates;
  for (int i = 0; i < 1050; ++i) {
    const std::string key = "push:" + std::to_string(i);
    Charge(cluster.store("a"), key);
    updates.push_back(MakeStateUpdate(cluster.store("a"), key));
  }
  // Only SendUpdates ships to d, a member outside the ring.
  std::atomic<int> handoff_batches{0};
  LoopbackMember& d = cluster.net().Add("d");
  ExecutorThread receiver_exec;
  Replicator receiver(d.store(), d, receiver_exec.executor(), options);
  d.Handle(peer::METHOD_STATE_UPDATE, [&](std::string_view p) {
    peer::StateUpdateBatch batch;
    if (batch.ParseFromArray(p.data(), static_cast<int>(p.size())) && batch.handoff()) ++handoff_batches;
    return receiver.HandleStateUpdate(p);
  });
  std::atomic<int> calls{0};
  std::atomic<bool> ok{false};
  cluster.replicator("a").SendUpdates("d", updates, [&](bool result) {
    ok = result;
    ++calls;
  });
  EXPECT_TRUE(WaitFor([&] { return calls.load() == 1; }));
  EXPECT_TRUE(ok.load());
  EXPECT_EQ(handoff_batches.load(), 11);
  EXPECT_EQ(receiver.stats().applied_states, 1050u);
  EXPECT_TRUE(SameStates(cluster.store("a"), d.store(), "push:1049"));

  // Nothing to send: done(true). An unreachable member: done(false), once.
  calls = 0;
  cluster.replicator("a").SendUpdates("d", {}, [&](bool result) {
    ok = result;
    ++calls;
  });
  EXPECT_TRUE(WaitFor([&] { return calls.load() == 1; }));
  EXPECT_TRUE(ok.load());
  calls = 0;
  cluster.net().SetReachable("d", false);
  cluster.replicator("a").SendUpdates("d", updates, [&](bool result) {
    ok = result;
    ++calls;
  });
  EXPECT_TRUE(WaitFor([&] { return calls.load() == 1; }));
  EXPECT_FALSE(ok.load());
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(calls.load(), 1);
  cluster.net().Shutdown();
}

TEST(ReplicatorTest, ConcurrentChangesWhileTheFlusherRuns) {
  Cluster cluster(Options());
  constexpr int kThreads = 8;
  constexpr int kKeys = 500;
  constexpr int kPerThread = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i)
        Charge(cluster.store("a"), "key:" + std::to_string((i * 7 + t) % kKeys));
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(FlushAndWait(cluster.replicator("a"), 10s));
  int64_t total = 0;
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = "key:" + std::to_string(k);
    // Every key reached the other members of its preference list (a may be one of them or the owner).
    for (const char* id : {"b", "c"}) {
      EXPECT_TRUE(SameStates(cluster.store("a"), cluster.store(id), key)) << key << " on " << id;
    }
    total += Plain(cluster.store("a").Get(key)[0]).word[1];
  }
  EXPECT_EQ(total, kThreads * kPerThread);
  EXPECT_EQ(cluster.replicator("a").stats().pending_keys, 0u);
  EXPECT_EQ(cluster.replicator("a").stats().send_failures, 0u);
}

// Not a timing assertion: prints what OnChanged costs on the request path, against a store Update (the
// rest of the request path's storage work) measured in the same run.
TEST(ReplicatorTest, OnChangedCost) {
  ReplicatorOptions options = Options();
  options.interval = 1ms;
  Cluster cluster(options);
  Replicator& r = cluster.replicator("a");
  std::vector<std::string> keys;
  for (int i = 0; i < 10'000; ++i) keys.push_back("user:" + std::to_string(i));
  // CPU time of this thread: what the request path pays, not the time other threads took the core.
  auto thread_ns = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
  };
  auto ns_per_call = [&](int calls, const std::function<void(int)>& fn) {
    const double start = thread_ns();
    for (int i = 0; i < calls; ++i) fn(i);
    return (thread_ns() - start) / calls;
  };
  {
    // Without a flusher: after the first pass over the keys every call finds its key already dirty.
    ExecutorThread idle_exec;
    Replicator idle(cluster.store("a"), cluster.net().member("a"), idle_exec.executor(), options);
    const double hot = ns_per_call(500'000, [&](int i) { idle.OnChanged(keys[i % keys.size()], "rps", 1); });
    std::printf("OnChanged without a flusher: %.1f ns CPU per call\n", hot);
  }
  const double on_changed =
      ns_per_call(500'000, [&](int i) { r.OnChanged(keys[i % keys.size()], "rps", 1); });
  storage::MemoryStore plain;  // no observer
  const double update = ns_per_call(200'000, [&](int i) { Charge(plain, keys[i % keys.size()]); });
  const double observed =
      ns_per_call(200'000, [&](int i) { Charge(cluster.store("a"), keys[i % keys.size()]); });
  std::printf(
      "OnChanged: %.1f ns CPU per call; store Update %.1f ns without an observer, %.1f ns with the "
      "Replicator observing (10k keys, flusher every 1 ms)\n",
      on_changed, update, observed);
  EXPECT_TRUE(FlushAndWait(r, 10s));
  const ReplicatorStats stats = r.stats();
  ASSERT_GT(stats.batches_sent, 0u);
  std::printf("flushes: %lu updates in %lu batches (%.1f per batch)\n",
              static_cast<unsigned long>(stats.updates_sent), static_cast<unsigned long>(stats.batches_sent),
              static_cast<double>(stats.updates_sent) / static_cast<double>(stats.batches_sent));
}

}  // namespace
}  // namespace ringlimit::replication
