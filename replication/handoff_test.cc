#include "replication/handoff.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "limiter/limiter.h"
#include "replication/replicator.h"
#include "replication/testing/executor_thread.h"
#include "replication/testing/loopback_link.h"
#include "replication/testing/manual_executor.h"
#include "storage/memory_store.h"
#include "storage/testing/charge.h"

using ringlimit::storage_testing::ChargeMerged;

namespace ringlimit::replication {
namespace {

using RingPtr = std::shared_ptr<const ring::RingView>;
using testing::LoopbackMember;
using testing::LoopbackNetwork;

constexpr std::chrono::seconds kWait{30};

// Polls `condition` until it holds or `timeout` passes; returns its last value.
bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout = kWait) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return condition();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

limiter::TimeNs WallNow() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A limit whose states stay non-idle for an hour, so no idle sweep drops them during a test.
limiter::LimitSpec HourSpec() {
  limiter::LimitSpec spec;
  spec.algorithm = limiter::Algorithm::kFixedWindow;
  spec.limit = 1'000'000;
  spec.window = 3600 * limiter::kSecond;
  return spec;
}

// Charges `cost` units of the limit "rps" of `key` in `store`.
void Charge(storage::Store& store, const std::string& key, uint64_t cost = 1) {
  static const limiter::LimitSpec spec = HourSpec();
  storage::Slot slot{"rps", &spec};
  const limiter::TimeNs now = WallNow();
  store.Update(key, std::span<const storage::Slot>(&slot, 1), now,
               [&](std::span<limiter::MergeState* const> states) {
                 ChargeMerged(spec, *states[0], limiter::Request{cost, now, 0.});
               });
}

std::string Key(int i) { return "user:" + std::to_string(i); }

// Version of `key`'s "rps" state in `store`; 0 when absent.
uint64_t VersionOf(storage::Store& store, const std::string& key) {
  auto states = store.Get(key);
  return states.empty() ? 0 : states[0].version;
}

size_t CountStates(storage::Store& store) { return store.ScanTokenRange(0, UINT64_MAX).size(); }

// HandleHandoffDone for a synchronous LoopbackMember handler: waits for the answer (or kWait).
std::optional<std::string> HandleDone(HandoffManager& handoff, std::string_view payload) {
  auto answered = std::make_shared<std::promise<std::optional<std::string>>>();
  std::future<std::optional<std::string>> answer = answered->get_future();
  handoff.HandleHandoffDone(
      payload, [answered](std::optional<std::string> ack) { answered->set_value(std::move(ack)); });
  if (answer.wait_for(kWait) != std::future_status::ready) return std::nullopt;
  return answer.get();
}

class HandoffTest : public ::testing::Test {
 protected:
  struct Member {
    std::unique_ptr<testing::ExecutorThread> exec;  // destroyed last
    LoopbackMember* link = nullptr;
    std::unique_ptr<Replicator> replicator;
    std::unique_ptr<HandoffManager> handoff;
    RingPtr ring;  // the last ring this member was told about
  };

  void TearDown() override {
    net_.Shutdown();
    for (auto& [id, m] : members_) {
      m.handoff->Stop();
      m.replicator->Stop();
    }
  }

  // Adds a member with a MemoryStore, a Replicator and a HandoffManager wired to the network.
  Member& Add(const std::string& id) {
    Member& m = members_[id];
    m.link = &net_.Add(id);
    m.exec = std::make_unique<testing::ExecutorThread>();
    ReplicatorOptions ropts;
    ropts.replicas = replicas_;
    m.replicator = std::make_unique<Replicator>(m.link->store(), *m.link, m.exec->executor(), ropts);
    HandoffOptions hopts = handoff_options_;
    hopts.replicas = replicas_;
    m.handoff =
        std::make_unique<HandoffManager>(m.link->store(), *m.link, *m.replicator, m.exec->executor(), hopts);
    m.link->store().SetObserver(m.replicator.get());
    Replicator* r = m.replicator.get();
    HandoffManager* h = m.handoff.get();
    m.link->Handle(peer::METHOD_STATE_UPDATE, [r](std::string_view p) { return r->HandleStateUpdate(p); });
    m.link->Handle(peer::METHOD_HANDOFF_DONE, [h](std::string_view p) { return HandleDone(*h, p); });
    m.replicator->Start();
    m.handoff->Start();
    return m;
  }

  storage::Store& StoreOf(const std::string& id) { return members_.at(id).link->store(); }
  HandoffManager& HandoffOf(const std::string& id) { return *members_.at(id).handoff; }

  // Publishes a ring of `ids` to every member of the network, then tells the managers of `notify`
  // (default: every member) about the change from the ring they saw last, and waits until each has
  // published it into its routing table (with the overrides of the change).
  RingPtr SetRing(const std::vector<std::string>& ids, std::vector<std::string> notify = {}) {
    RingPtr view = net_.SetRing(ids);
    if (notify.empty()) {
      for (auto& [id, m] : members_) notify.push_back(id);
    }
    for (const std::string& id : notify) {
      Member& m = members_.at(id);
      m.handoff->OnRingChanged(m.ring, view);
      m.ring = view;
    }
    for (const std::string& id : notify) {
      HandoffManager& h = HandoffOf(id);
      EXPECT_TRUE(WaitFor([&] { return h.routing().Current().ring == view; })) << id;
    }
    return view;
  }

  // A cluster of `ids` starting together: every member is new, so each waits for the others' HandoffDone
  // (they have nothing to push) -- which must come at once, not after done_timeout.
  RingPtr Bootstrap(const std::vector<std::string>& ids) {
    RingPtr view = SetRing(ids);
    EXPECT_TRUE(WaitFor([&] { return AllIdle(); }, std::chrono::seconds(5)));
    for (const std::string& id : ids) EXPECT_EQ(HandoffOf(id).stats().incoming_abandoned, 0u) << id;
    return view;
  }

  // Adds the members `ids`, starts them together (Bootstrap) and writes `keys` keys on their owners.
  RingPtr StartWithKeys(const std::vector<std::string>& ids, int keys) {
    for (const std::string& id : ids) Add(id);
    RingPtr ring = Bootstrap(ids);
    WriteOnOwners(ring, keys);
    return ring;
  }

  // Writes `n` keys, each on its owner in `ring`.
  void WriteOnOwners(const RingPtr& ring, int n) {
    for (int i = 0; i < n; ++i) Charge(StoreOf(ring->Owner(ring::RingToken(Key(i)))->id), Key(i));
  }

  // Nothing in progress on `id`, and the routing table of the step that finished it published too: the
  // manager publishes its progress before its routing table, within one task of its executor.
  bool Idle(const std::string& id) {
    Member& m = members_.at(id);
    return m.handoff->InProgress().empty() && m.exec->Sync();
  }
  bool AllIdle() {
    for (auto& [id, m] : members_) {
      if (!Idle(id)) return false;
    }
    return true;
  }

  // The body of the RingChangesSettleOnExactlyTheHolders tests (see there).
  void ExpectRingChangesSettleOnTheHolders(bool scan_moved_only) {
    replicas_ = 3;
    handoff_options_.drop_delay = std::chrono::milliseconds(500);
    handoff_options_.scan_moved_only = scan_moved_only;
    constexpr int kKeys = 3'000;
    // Every key on exactly the preference list of `ring` among the members of `ring`, each copy with the
    // owner's version; `last` says what was wrong when it did not hold.
    auto settled = [&](const RingPtr& ring, std::string& last) {
      for (int i = 0; i < kKeys; ++i) {
        const auto list = ring->PreferenceList(ring::RingToken(Key(i)), replicas_);
        const uint64_t version = VersionOf(StoreOf(list[0]->id), Key(i));
        for (const ring::RingMember& m : ring->members()) {
          const bool holder =
              std::any_of(list.begin(), list.end(), [&](const ring::RingMember* h) { return h->id == m.id; });
          const uint64_t v = VersionOf(StoreOf(m.id), Key(i));
          if (version == 0 || (holder && v != version) || (!holder && v != 0)) {
            last = Key(i) + " on " + m.id + ": version " + std::to_string(v) + ", owner " + list[0]->id +
                   "'s " + std::to_string(version) + (holder ? " (a holder)" : " (not a holder)");
            return false;
          }
        }
      }
      return true;
    };
    auto expect_settled = [&](const RingPtr& ring, const char* after) {
      std::string last;
      EXPECT_TRUE(WaitFor([&] { return AllIdle() && settled(ring, last); })) << after << ": " << last;
    };
    RingPtr ring = StartWithKeys({"a", "b", "c", "d"}, kKeys);
    expect_settled(ring, "the start");
    Add("e");
    ring = SetRing({"a", "b", "c", "d", "e"});
    expect_settled(ring, "e joined");
    net_.SetReachable("b", false);  // b crashed; the membership removes it
    ring = SetRing({"a", "c", "d", "e"}, {"a", "c", "d", "e"});
    expect_settled(ring, "b crashed");
    Add("f");
    ring = SetRing({"a", "c", "d", "e", "f"});
    // Handed off (d pushed its ranges to f), then d crashes before the drop of the join ran.
    EXPECT_TRUE(WaitFor([&] { return AllIdle(); }));
    net_.SetReachable("d", false);
    ring = SetRing({"a", "c", "e", "f"}, {"a", "c", "e", "f"});
    expect_settled(ring, "f joined, then d crashed");
    uint64_t scanned = 0;
    for (const char* id : {"a", "c", "e", "f"}) scanned += HandoffOf(id).stats().scanned_states;
    EXPECT_GT(scanned, 0u);
  }

  LoopbackNetwork net_;
  uint32_t replicas_ = 1;
  HandoffOptions handoff_options_;
  std::map<std::string, Member> members_;
};

TEST(HandoffOptionsTest, Validate) {
  EXPECT_TRUE(Validate(HandoffOptions{}).ok());
  HandoffOptions o;
  o.replicas = 0;
  EXPECT_FALSE(Validate(o).ok());
  o = {};
  o.scan_slices = 0;
  EXPECT_FALSE(Validate(o).ok());
  o = {};
  o.done_timeout = std::chrono::milliseconds(0);
  EXPECT_FALSE(Validate(o).ok());
}

TEST_F(HandoffTest, JoinMovesExactlyTheNewOwnersRanges) {
  constexpr int kKeys = 10'000;
  Add("a");
  Add("b");
  RingPtr two = Bootstrap({"a", "b"});
  WriteOnOwners(two, kKeys);
  std::map<std::string, uint64_t> versions;
  for (int i = 0; i < kKeys; ++i)
    versions[Key(i)] = VersionOf(StoreOf(two->Owner(ring::RingToken(Key(i)))->id), Key(i));

  Add("c");
  net_.SetPaused("c", true);  // the pushes to c stall: the handoff stays in progress
  RingPtr three = SetRing({"a", "b", "c"});

  // During the push: the old owner decides, the new one passes the checks to it.
  int moved = 0;
  for (int i = 0; i < kKeys; ++i) {
    const ring::Token t = ring::RingToken(Key(i));
    const std::string old_owner = two->Owner(t)->id;
    const std::string new_owner = three->Owner(t)->id;
    if (new_owner == "c") {
      ++moved;
      ASSERT_EQ(HandoffOf(old_owner).RouteOverride(t), old_owner) << Key(i);
      ASSERT_EQ(HandoffOf("c").RouteOverride(t), old_owner) << Key(i);
    } else {
      ASSERT_EQ(new_owner, old_owner);
      ASSERT_EQ(HandoffOf("a").RouteOverride(t), std::nullopt);
      ASSERT_EQ(HandoffOf("b").RouteOverride(t), std::nullopt);
      ASSERT_EQ(HandoffOf("c").RouteOverride(t), std::nullopt);
    }
  }
  ASSERT_GT(moved, kKeys / 6);
  auto in = HandoffOf("c").InProgress();
  ASSERT_EQ(in.size(), 2u);  // waiting for a and b
  EXPECT_EQ(in[0].direction, "in");
  EXPECT_EQ(in[0].phase, "waiting");
  auto out = HandoffOf("a").InProgress();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].direction, "out");
  EXPECT_EQ(out[0].peer, "c");
  EXPECT_GT(out[0].share, 0.0);
  EXPECT_EQ(HandoffOf("a").stats().in_progress, 1u);

  const auto t0 = std::chrono::steady_clock::now();
  net_.SetPaused("c", false);
  ASSERT_TRUE(WaitFor([&] { return AllIdle(); }));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("join: %d keys handed to the new member in %.3f s\n", moved, seconds);

  EXPECT_EQ(HandoffOf("a").stats().handoffs_completed + HandoffOf("b").stats().handoffs_completed, 2u);
  EXPECT_EQ(HandoffOf("a").stats().handed_off_keys + HandoffOf("b").stats().handed_off_keys,
            static_cast<uint64_t>(moved));
  EXPECT_EQ(HandoffOf("c").stats().incoming_abandoned, 0u);
  EXPECT_GT(HandoffOf("c").stats().incoming_completed, 0u);
  // c holds exactly the keys it now owns, at the old owner's versions; the overrides are gone.
  EXPECT_EQ(CountStates(StoreOf("c")), static_cast<size_t>(moved));
  for (int i = 0; i < kKeys; ++i) {
    const ring::Token t = ring::RingToken(Key(i));
    if (three->Owner(t)->id == "c") {
      ASSERT_EQ(VersionOf(StoreOf("c"), Key(i)), versions[Key(i)]) << Key(i);
    }
    for (const char* id : {"a", "b", "c"}) ASSERT_EQ(HandoffOf(id).RouteOverride(t), std::nullopt);
  }
}

// The switch: once its push is over, the old owner stops deciding (RouteOverride names the new owner)
// and holds the range's checks until its HandoffDone is acknowledged, while the new owner still passes
// them to the old one: neither decides a key whose last change is in flight. Held checks are resumed once.
TEST_F(HandoffTest, SwitchHoldsTheRangesChecksUntilHandoffDoneIsAcknowledged) {
  constexpr int kKeys = 2'000;
  Add("a");
  RingPtr one = Bootstrap({"a"});
  WriteOnOwners(one, kKeys);
  Add("c");
  // c's HandoffDone handler waits at a gate: a's handoff stays in its switch.
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  HandoffManager* c_handoff = &HandoffOf("c");
  members_.at("c").link->Handle(peer::METHOD_HANDOFF_DONE, [c_handoff, opened](std::string_view p) {
    opened.wait();
    return HandleDone(*c_handoff, p);
  });
  RingPtr two = SetRing({"a", "c"});
  std::string moved_key;
  std::string kept_key;
  for (int i = 0; i < kKeys && (moved_key.empty() || kept_key.empty()); ++i) {
    (two->Owner(ring::RingToken(Key(i)))->id == "c" ? moved_key : kept_key) = Key(i);
  }
  const ring::Token moved = ring::RingToken(moved_key);
  const ring::Token kept = ring::RingToken(kept_key);
  ASSERT_TRUE(WaitFor([&] {
    auto out = HandoffOf("a").InProgress();
    return out.size() == 1 && out[0].phase == "done-sent";
  }));
  ASSERT_TRUE(members_.at("a").exec->Sync());  // the routing table of that step is published too
  EXPECT_TRUE(HandoffOf("a").Switching(moved));
  EXPECT_EQ(HandoffOf("a").RouteOverride(moved), "c");  // a no longer decides it...
  EXPECT_EQ(HandoffOf("c").RouteOverride(moved), "a");  // ...nor c, which waits for HandoffDone
  EXPECT_FALSE(HandoffOf("a").Switching(kept));
  EXPECT_FALSE(HandoffOf("c").Switching(moved));

  std::atomic<int> resumed{0};
  std::function<void()> resume = [&resumed] { resumed.fetch_add(1); };
  ASSERT_TRUE(HandoffOf("a").HoldWhileSwitching(moved, resume));
  std::function<void()> not_held = [&resumed] { resumed.fetch_add(100); };
  EXPECT_FALSE(HandoffOf("a").HoldWhileSwitching(kept, not_held));
  EXPECT_TRUE(not_held != nullptr);                            // left to the caller
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // (asserting that nothing happens)
  EXPECT_EQ(resumed.load(), 0);

  gate.set_value();
  ASSERT_TRUE(WaitFor([&] { return resumed.load() == 1; }));
  EXPECT_EQ(HandoffOf("a").RouteOverride(moved), std::nullopt);
  EXPECT_EQ(HandoffOf("c").RouteOverride(moved), std::nullopt);
  EXPECT_FALSE(HandoffOf("a").Switching(moved));
  EXPECT_GT(VersionOf(StoreOf("c"), moved_key), 0u);
  ASSERT_TRUE(WaitFor([&] { return AllIdle(); }));
  EXPECT_EQ(resumed.load(), 1);
}

TEST_F(HandoffTest, LeaveHandsEverythingToTheRemainingOwners) {
  constexpr int kKeys = 5'000;
  RingPtr three = StartWithKeys({"a", "b", "c"}, kKeys);
  const size_t c_keys = CountStates(StoreOf("c"));
  ASSERT_GT(c_keys, 0u);

  std::atomic<int> calls{0};
  std::atomic<bool> result{false};
  HandoffOf("c").Leave([&](bool ok) {
    result = ok;
    ++calls;
  });
  ASSERT_TRUE(WaitFor([&] { return calls.load() == 1; }));
  EXPECT_TRUE(result.load());
  EXPECT_EQ(HandoffOf("c").stats().handed_off_keys, c_keys);

  // A second Leave is refused.
  std::atomic<int> second{-1};
  HandoffOf("c").Leave([&](bool ok) { second = ok ? 1 : 0; });
  ASSERT_TRUE(WaitFor([&] { return second.load() != -1; }));
  EXPECT_EQ(second.load(), 0);

  RingPtr two = ring::RingView::Build(99, {{"a", 64}, {"b", 64}}).view;
  for (int i = 0; i < kKeys; ++i) {
    const ring::Token t = ring::RingToken(Key(i));
    const std::string next = two->Owner(t)->id;
    ASSERT_EQ(HandoffOf("c").RouteOverride(t), next) << Key(i);
    if (three->Owner(t)->id == "c") {
      ASSERT_EQ(VersionOf(StoreOf(next), Key(i)), VersionOf(StoreOf("c"), Key(i))) << Key(i);
    }
  }
  // The membership then drops c: a and b find its HandoffDone already there and wait for nothing.
  SetRing({"a", "b"}, {"a", "b"});
  EXPECT_TRUE(Idle("a"));
  EXPECT_TRUE(Idle("b"));
  EXPECT_EQ(HandoffOf("a").stats().incoming_abandoned + HandoffOf("b").stats().incoming_abandoned, 0u);
  EXPECT_GT(HandoffOf("a").stats().incoming_completed + HandoffOf("b").stats().incoming_completed, 0u);
}

// While one range of a leave is still being handed over, the ranges already handed over go to their new
// owner, not back to the leaving node (which is still an owner on everyone's ring until it has left).
TEST_F(HandoffTest, LeavingNodeRoutesHandedOverRangesToTheirNewOwnerAtOnce) {
  constexpr int kKeys = 3'000;
  RingPtr three = StartWithKeys({"a", "b", "c"}, kKeys);
  net_.SetPaused("b", true);  // c's handoff to b stalls; the one to a completes
  std::atomic<int> calls{0};
  HandoffOf("c").Leave([&](bool) { ++calls; });
  ASSERT_TRUE(WaitFor([&] {
    auto out = HandoffOf("c").InProgress();
    return out.size() == 1 && out[0].peer == "b";
  }));
  RingPtr two = ring::RingView::Build(99, {{"a", 64}, {"b", 64}}).view;
  int to_a = 0;
  for (int i = 0; i < kKeys; ++i) {
    const ring::Token t = ring::RingToken(Key(i));
    if (three->Owner(t)->id != "c" || two->Owner(t)->id != "a") continue;
    ++to_a;
    ASSERT_EQ(HandoffOf("c").RouteOverride(t), "a") << Key(i);
  }
  EXPECT_GT(to_a, 0);
  EXPECT_EQ(calls.load(), 0);
  net_.SetPaused("b", false);
  ASSERT_TRUE(WaitFor([&] { return calls.load() == 1; }));
}

TEST_F(HandoffTest, RejoiningMemberCatchesUpBeforeDeciding) {
  constexpr int kKeys = 3'000;
  Add("a");
  Add("b");
  RingPtr one = SetRing({"a"}, {"a"});
  WriteOnOwners(one, kKeys);
  // b was part of the cluster once: it still holds copies of every key, now stale.
  for (int i = 0; i < kKeys; ++i) {
    for (const storage::StoredState& s : StoreOf("a").Get(Key(i)))
      ASSERT_TRUE(StoreOf("b").Absorb(Key(i), s));
  }
  for (int i = 0; i < kKeys; ++i) Charge(StoreOf("a"), Key(i), 5);

  // b restarts: its first ring has no `before`; every range it gains is incoming from a.
  net_.SetPaused("b", true);  // holds a's push until b's overrides are checked
  RingPtr two = SetRing({"a", "b"});
  int gained = 0;
  for (int i = 0; i < kKeys; ++i) {
    const ring::Token t = ring::RingToken(Key(i));
    if (two->Owner(t)->id == "b") {
      ++gained;
      ASSERT_EQ(HandoffOf("b").RouteOverride(t), "a");
      ASSERT_EQ(HandoffOf("a").RouteOverride(t), "a");
    }
  }
  ASSERT_GT(gained, 0);
  net_.SetPaused("b", false);
  ASSERT_TRUE(WaitFor([&] { return AllIdle(); }));
  for (int i = 0; i < kKeys; ++i) {
    const ring::Token t = ring::RingToken(Key(i));
    if (two->Owner(t)->id != "b") continue;
    ASSERT_EQ(VersionOf(StoreOf("b"), Key(i)), VersionOf(StoreOf("a"), Key(i))) << Key(i);
    ASSERT_EQ(HandoffOf("b").RouteOverride(t), std::nullopt);
  }
  EXPECT_EQ(HandoffOf("b").stats().incoming_abandoned, 0u);
}

TEST_F(HandoffTest, UnreachablePreviousOwnerReleasesIncoming) {
  Add("a");
  Add("b");
  RingPtr two = Bootstrap({"a", "b"});
  WriteOnOwners(two, 2'000);
  Add("c");
  net_.SetReachable("a", false);  // a died; the membership has not removed it yet
  RingPtr three = SetRing({"a", "b", "c"}, {"b", "c"});
  ASSERT_TRUE(WaitFor([&] { return Idle("c"); }));
  EXPECT_GE(HandoffOf("c").stats().incoming_abandoned, 1u);  // a's ranges
  EXPECT_GE(HandoffOf("c").stats().incoming_completed, 1u);  // b's ranges
  for (int i = 0; i < 2'000; ++i) {
    ASSERT_EQ(HandoffOf("c").RouteOverride(ring::RingToken(Key(i))), std::nullopt);
  }
}

TEST_F(HandoffTest, SilentPreviousOwnerIsReleasedAfterDoneTimeout) {
  handoff_options_.done_timeout = std::chrono::milliseconds(300);
  Add("a");
  Add("b");
  SetRing({"a"}, {"a"});
  // a never hears of b (reachable but not told): b waits for a HandoffDone that never comes.
  SetRing({"a", "b"}, {"b"});
  EXPECT_FALSE(Idle("b"));
  ASSERT_TRUE(WaitFor([&] { return Idle("b"); }));
  EXPECT_GE(HandoffOf("b").stats().incoming_abandoned, 1u);
  EXPECT_EQ(HandoffOf("b").stats().incoming_completed, 0u);
}

TEST_F(HandoffTest, RemovedMemberKeysGetBackToRCopies) {
  replicas_ = 3;
  constexpr int kKeys = 4'000;
  const std::vector<std::string> ids = {"a", "b", "c", "d", "e"};
  for (const auto& id : ids) Add(id);
  RingPtr five = Bootstrap(ids);
  WriteOnOwners(five, kKeys);  // live replication copies each key to its 2 successors
  auto copies_ok = [&](const RingPtr& ring) {
    for (int i = 0; i < kKeys; ++i) {
      const ring::Token t = ring::RingToken(Key(i));
      const auto list = ring->PreferenceList(t, 3);
      const uint64_t v = VersionOf(StoreOf(list[0]->id), Key(i));
      if (v == 0) return false;
      for (const ring::RingMember* m : list) {
        if (VersionOf(StoreOf(m->id), Key(i)) != v) return false;
      }
    }
    return true;
  };
  ASSERT_TRUE(WaitFor([&] { return copies_ok(five); }));

  net_.SetReachable("d", false);  // d crashed; the membership removes it
  RingPtr four = SetRing({"a", "b", "c", "e"}, {"a", "b", "c", "e"});
  ASSERT_TRUE(WaitFor([&] { return copies_ok(four); }));
  ASSERT_TRUE(WaitFor([&] {
    uint64_t n = 0;
    for (const char* id : {"a", "b", "c", "e"}) n += HandoffOf(id).stats().rereplicated_keys;
    return n > 0;
  }));
}

TEST_F(HandoffTest, DropsStatesNoLongerOwnedOrReplicated) {
  replicas_ = 2;
  handoff_options_.drop_delay = std::chrono::milliseconds(100);
  constexpr int kKeys = 4'000;
  RingPtr three = StartWithKeys({"a", "b", "c"}, kKeys);
  auto holders_are = [&](const RingPtr& ring) {
    for (int i = 0; i < kKeys; ++i) {
      const auto list = ring->PreferenceList(ring::RingToken(Key(i)), 2);
      std::set<std::string> expected;
      for (const ring::RingMember* m : list) expected.insert(m->id);
      std::set<std::string> actual;
      for (const auto& [id, m] : members_) {
        if (VersionOf(m.link->store(), Key(i)) != 0) actual.insert(id);
      }
      if (actual != expected) return false;
    }
    return true;
  };
  ASSERT_TRUE(WaitFor([&] { return holders_are(three); }));

  Add("d");
  RingPtr four = SetRing({"a", "b", "c", "d"});
  ASSERT_TRUE(WaitFor([&] { return holders_are(four); }));
  // The count is published when the drop's completion reaches the executor, just after the states went.
  auto dropped = [&] {
    uint64_t n = 0;
    for (const char* id : {"a", "b", "c"}) n += HandoffOf(id).stats().dropped_states;
    return n;
  };
  EXPECT_TRUE(WaitFor([&] { return dropped() > 0; })) << dropped();
}

// Scanning only the ranges whose holders changed (HandoffOptions::scan_moved_only) must leave every key
// where the full scan leaves it: once ring changes have settled (handoffs, re-replication, drop), each key
// is on exactly the members of its preference list on the newest ring, each copy with its owner's version.
// Run through a join, a crash, and a join then a crash before the drop runs (it covers both rings). With
// R = 3 preference lists change where the owner stays (a replica joins or goes) as well as where it moves.
// Fails when re-replication skips a range some member joined (a key short of a copy) or the drop skips a
// range held before (a key left on a member that no longer holds it).
TEST_F(HandoffTest, RingChangesSettleOnExactlyTheHoldersScanningMovedRangesOnly) {
  ExpectRingChangesSettleOnTheHolders(/*scan_moved_only=*/true);
}

TEST_F(HandoffTest, RingChangesSettleOnExactlyTheHoldersScanningEverything) {
  ExpectRingChangesSettleOnTheHolders(/*scan_moved_only=*/false);
}

TEST_F(HandoffTest, HandoffDoneBeforeTheRingChangeIsKept) {
  constexpr int kKeys = 3'000;
  Add("a");
  Add("b");
  RingPtr two = Bootstrap({"a", "b"});
  WriteOnOwners(two, kKeys);
  Add("c");
  // a and b learn of c first: they push and send HandoffDone before c has the ring.
  RingPtr three = SetRing({"a", "b", "c"}, {"a", "b"});
  ASSERT_TRUE(WaitFor([&] { return Idle("a") && Idle("b"); }));
  EXPECT_EQ(HandoffOf("a").stats().handoffs_completed + HandoffOf("b").stats().handoffs_completed, 2u);
  // When c gets the ring, nothing is left to wait for.
  SetRing({"a", "b", "c"}, {"c"});
  EXPECT_TRUE(Idle("c"));
  EXPECT_GT(HandoffOf("c").stats().incoming_completed, 0u);
  for (int i = 0; i < kKeys; ++i) {
    const ring::Token t = ring::RingToken(Key(i));
    ASSERT_EQ(HandoffOf("c").RouteOverride(t), std::nullopt);
    if (three->Owner(t)->id == "c") {
      ASSERT_NE(VersionOf(StoreOf("c"), Key(i)), 0u) << Key(i);
    }
  }
}

TEST_F(HandoffTest, LaterRingChangeSupersedesHandoffs) {
  Add("a");
  Add("b");
  RingPtr two = Bootstrap({"a", "b"});
  WriteOnOwners(two, 2'000);
  Add("c");
  net_.SetPaused("c", true);
  SetRing({"a", "b", "c"});
  ASSERT_FALSE(Idle("a"));
  ASSERT_FALSE(Idle("c"));
  // c is removed again before the handoffs finish: a and b keep their ranges, c owns nothing.
  SetRing({"a", "b"});
  EXPECT_TRUE(Idle("a"));
  EXPECT_TRUE(Idle("b"));
  EXPECT_TRUE(Idle("c"));
  EXPECT_EQ(HandoffOf("a").stats().handoffs_failed + HandoffOf("b").stats().handoffs_failed, 2u);
  for (int i = 0; i < 2'000; ++i) {
    const ring::Token t = ring::RingToken(Key(i));
    for (const char* id : {"a", "b", "c"}) ASSERT_EQ(HandoffOf(id).RouteOverride(t), std::nullopt);
  }
  net_.SetPaused("c", false);
}

TEST_F(HandoffTest, UnreachableTargetFailsTheHandoff) {
  Add("a");
  Add("b");
  Bootstrap({"a"});
  for (int i = 0; i < 500; ++i) Charge(StoreOf("a"), Key(i));
  net_.SetReachable("b", false);
  RingPtr two = SetRing({"a", "b"}, {"a"});
  ASSERT_TRUE(WaitFor([&] { return Idle("a"); }));
  EXPECT_EQ(HandoffOf("a").stats().handoffs_failed, 1u);
  EXPECT_EQ(HandoffOf("a").stats().handoffs_completed, 0u);
  for (int i = 0; i < 500; ++i)
    ASSERT_EQ(HandoffOf("a").RouteOverride(ring::RingToken(Key(i))), std::nullopt);
}

TEST_F(HandoffTest, StopDuringLeaveAnswersFalse) {
  Add("a");
  Add("b");
  RingPtr two = Bootstrap({"a", "b"});
  WriteOnOwners(two, 1'000);
  net_.SetPaused("a", true);  // b's pushes to a stall
  std::atomic<int> result{-1};
  HandoffOf("b").Leave([&](bool ok) { result = ok ? 1 : 0; });
  ASSERT_TRUE(WaitFor([&] { return !Idle("b"); }));
  EXPECT_EQ(HandoffOf("b").InProgress()[0].direction, "out");
  HandoffOf("b").Stop();
  EXPECT_EQ(result.load(), 0);
  net_.SetPaused("a", false);
}

TEST_F(HandoffTest, MalformedHandoffDoneIsRejected) {
  Add("a");
  EXPECT_EQ(HandleDone(HandoffOf("a"), "\xff\xff\xff\xff garbage"), std::nullopt);
  peer::HandoffDone reversed;
  reversed.set_from("b");
  peer::TokenRange* r = reversed.add_ranges();
  r->set_first(10);
  r->set_last(5);
  EXPECT_EQ(HandleDone(HandoffOf("a"), reversed.SerializeAsString()), std::nullopt);
  peer::HandoffDone anonymous;
  EXPECT_EQ(HandleDone(HandoffOf("a"), anonymous.SerializeAsString()), std::nullopt);
  peer::HandoffDone fine;
  fine.set_from("b");
  EXPECT_NE(HandleDone(HandoffOf("a"), fine.SerializeAsString()), std::nullopt);
}

// A ring reaches the routing table only on the executor, together with the overrides of its change (one
// table): a node never routes by a ring it gains ranges in without passing them to their previous owner.
TEST(HandoffPublicationTest, RingIsPublishedWithTheOverridesOfItsChange) {
  testing::ManualExecutor exec;
  LoopbackNetwork net;
  LoopbackMember& link = net.Add("b");
  net.Add("a");
  ReplicatorOptions ropts;
  ropts.replicas = 1;
  Replicator replicator(link.store(), link, exec, ropts);
  HandoffOptions hopts;
  hopts.replicas = 1;
  HandoffManager handoff(link.store(), link, replicator, exec, hopts);
  RingPtr two = net.SetRing({"a", "b"});
  const uint64_t version = handoff.routing().version();

  handoff.OnRingChanged(nullptr, two);
  EXPECT_EQ(handoff.routing().version(), version);  // queued, nothing published yet
  EXPECT_EQ(handoff.routing().Current().ring, nullptr);
  exec.RunReady();
  std::shared_ptr<const RoutingTable> table = handoff.routing().Snapshot();
  EXPECT_EQ(table->version, version + 1);  // one table: the ring with its overrides
  EXPECT_EQ(table->ring, two);
  for (const ring::TokenRange& r : two->Arcs("b")) {
    EXPECT_EQ(table->Override(r.first), "a");
    EXPECT_EQ(table->Decider(r.last), "a");
  }
  ASSERT_EQ(handoff.InProgress().size(), 1u);
  EXPECT_EQ(handoff.InProgress()[0].direction, "in");
  handoff.Abandon();  // nothing more runs on `exec`, which no thread drives (Stop would wait for it)
  replicator.Abandon();
  net.Shutdown();
}

TEST_F(HandoffTest, RouteOverrideWithoutHandoffIsNullopt) {
  Add("a");
  SetRing({"a"});
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(HandoffOf("a").RouteOverride(ring::RingToken(Key(i))), std::nullopt);
  EXPECT_TRUE(HandoffOf("a").InProgress().empty());
}

// Not a timing assertion: prints the push time of a large handoff over the loopback network.
TEST_F(HandoffTest, MeasurePushOf200kKeys) {
  constexpr int kKeys = 200'000;
  Add("a");
  Add("b");
  SetRing({"a"}, {"a"});
  for (int i = 0; i < kKeys; ++i) Charge(StoreOf("a"), Key(i));
  // What the push's progress count costs: the memory tier's count (no state copied) against counting a
  // scan (Store's default, what the count was before, and still is on the durable tier).
  storage::Store& store = StoreOf("a");
  const auto c0 = std::chrono::steady_clock::now();
  EXPECT_EQ(store.CountTokenRange(0, UINT64_MAX), static_cast<uint64_t>(kKeys));
  const auto c1 = std::chrono::steady_clock::now();
  EXPECT_EQ(store.Store::CountTokenRange(0, UINT64_MAX), static_cast<uint64_t>(kKeys));
  const auto c2 = std::chrono::steady_clock::now();
  const double count = std::chrono::duration<double>(c1 - c0).count();
  const double scan_count = std::chrono::duration<double>(c2 - c1).count();
  std::printf("counting %d keys: %.4f s (a scan counted: %.3f s, %.0fx)\n", kKeys, count, scan_count,
              scan_count / count);
  const auto t0 = std::chrono::steady_clock::now();
  SetRing({"b"}, {"a", "b"});  // a is replaced by b: every key moves
  ASSERT_TRUE(WaitFor([&] { return AllIdle(); }, std::chrono::seconds(120)));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(HandoffOf("a").stats().handed_off_keys, static_cast<uint64_t>(kKeys));
  EXPECT_EQ(CountStates(StoreOf("b")), static_cast<size_t>(kKeys));
  std::printf("handoff push: %d keys in %.3f s (%.0f keys/s)\n", kKeys, seconds, kKeys / seconds);
}

}  // namespace
}  // namespace ringlimit::replication
