// GrantDriver over fake hosts: a holder and an owner (and a next owner) joined by a message queue the test
// pumps, the owner's rows in a real storage::MemoryStore. The clocks are the test's.
#include "node/grants/grant_driver.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "limiter/merge.h"
#include "limiter/spec_wire.h"
#include "node/grants/grant_rows.h"
#include "storage/memory_store.h"

namespace ringlimit::cluster {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;

constexpr limiter::TimeNs kWall0 = 1'700'000'000LL * limiter::kSecond;
constexpr limiter::ContributorId kOwnerContributor = 77;

class Net;

class FakeHost final : public ForwardHost {
 public:
  FakeHost(Net& net, std::string id) : net_(net), id_(std::move(id)) {}
  const std::string& self_id() const override { return id_; }
  uint32_t replicas() const override { return 1; }
  const replication::RoutingTable& routing() const override { return table; }
  bool Paused() const override { return paused; }
  Status ClockRefusal() const override { return Status::OK(); }
  bool ClockSkewed() const override { return false; }
  Status MinorityRefusal() const override { return Status::OK(); }
  std::optional<ring::OffsetEstimate> ClockOffsetOf(std::string_view) const override { return std::nullopt; }
  int64_t WallNowNs() const override;
  nanoseconds SteadyNow() const override;
  // A new value per call (per driver: its grant ids' incarnation), as a restarted process draws anew.
  uint64_t Random() override { return 0x1234'5678'9abc'def0ULL + (++draws_ << 8) + id_.size(); }
  void Call(const std::string& address, peer::Method method, std::string payload, milliseconds timeout,
            CallDone done) override;
  // The grant driver arms no forwarder timer here: a wait for a copy never happens (closed mode is off).
  void After(std::chrono::nanoseconds, std::function<void()>) override {}

  replication::RoutingTable table;
  bool paused = false;

 private:
  Net& net_;
  const std::string id_;
  static inline uint64_t draws_ = 0;
};

// The nodes' shared clock and an in-order message queue; a message to a node without a driver fails.
class Net {
 public:
  nanoseconds now{milliseconds(1000)};
  std::map<std::string, GrantDriver*> drivers;  // by peer address ("peer/<id>")
  struct Message {
    std::string to;
    peer::Method method;
    std::string payload;
    ForwardHost::CallDone done;
  };
  std::deque<Message> queue;
  uint64_t sent = 0;

  // Delivers every queued message and the answers (which may queue more).
  void Pump() {
    while (!queue.empty()) {
      Message m = std::move(queue.front());
      queue.pop_front();
      auto it = drivers.find(m.to);
      if (it == drivers.end()) {
        m.done(peer::PeerResult::Error(peer::PeerErrorKind::kUnavailable, "down"));
        continue;
      }
      it->second->Serve(m.method, std::move(m.payload), std::move(m.done));
    }
  }
};

int64_t FakeHost::WallNowNs() const { return kWall0 + net_.now.count(); }
nanoseconds FakeHost::SteadyNow() const { return net_.now; }
void FakeHost::Call(const std::string& address, peer::Method method, std::string payload, milliseconds,
                    CallDone done) {
  ++net_.sent;
  net_.queue.push_back({address, method, std::move(payload), std::move(done)});
}

limiter::LimitSpec Spec(limiter::Algorithm algorithm, uint64_t limit) {
  limiter::LimitSpec s;
  s.algorithm = algorithm;
  s.limit = limit;
  s.window = 86'400 * limiter::kSecond;
  return s;
}

// A check of `spec` on `key` (state name "t", cost 1) as it enters a node (CheckBatch::DecidedAtEntry's).
node::EntryCheck Check(const limiter::LimitSpec& spec, std::string_view key = "hot") {
  return node::EntryCheck{key, "t", &spec, 1};
}

// A holder "h", the owner "o" (the only member of the ring: it decides every key) and its rows.
class GrantDriverTest : public ::testing::Test {
 protected:
  GrantDriverTest() {
    std::vector<ring::RingMember> ring_members{{"o", 16}};
    auto ring = ring::RingView::Build(1, std::move(ring_members)).view;
    auto members = std::make_shared<std::vector<ring::MemberInfo>>();
    members->push_back(ring::MemberInfo{"h", "http/h", "peer/h", 16, 1, ring::MemberState::kAlive});
    members->push_back(ring::MemberInfo{"o", "http/o", "peer/o", 16, 1, ring::MemberState::kAlive});
    for (FakeHost* host : {&holder_host_, &owner_host_}) {
      host->table.version = 1;
      host->table.ring = ring;
      host->table.members = members;
    }
    options_.enabled = true;
    options_.planner.threshold = 50;
    options_.planner.term = milliseconds(500);
    options_.planner.margin = milliseconds(100);
    holder_ = std::make_unique<GrantDriver>(holder_host_, options_, holder_rows_, AckAll());
    owner_ = std::make_unique<GrantDriver>(owner_host_, options_, owner_rows_,
                                           [this](std::string_view, std::function<void(bool)> done) {
                                             ++acks_;
                                             done(ack_);
                                           });
    net_.drivers["peer/h"] = holder_.get();
    net_.drivers["peer/o"] = owner_.get();
  }

  static GrantDriver::Ack AckAll() {
    return [](std::string_view, std::function<void(bool)> done) { done(true); };
  }

  // The owner deciding a forwarded check itself (its check path: CheckMerged counts the slices out).
  bool OwnerDecides(const limiter::LimitSpec& spec) {
    bool allowed = false;
    const storage::Slot slot{"t", &spec};
    const limiter::TimeNs wall = owner_host_.WallNowNs();
    store_.Update("hot", std::span<const storage::Slot>(&slot, 1), wall,
                  [&](std::span<limiter::MergeState* const> states) {
                    allowed = limiter::CheckMerged(spec, *states[0], kOwnerContributor, hlc_.Now(wall),
                                                   limiter::Request{.cost = 1, .now = wall, .headroom = 0.})
                                  .allowed;
                  });
    return allowed;
  }

  limiter::MergeState Row(const limiter::LimitSpec& spec) {
    limiter::MergeState out;
    const storage::Slot slot{"t", &spec};
    store_.Update("hot", std::span<const storage::Slot>(&slot, 1), owner_host_.WallNowNs(),
                  [&](std::span<limiter::MergeState* const> states) { out = *states[0]; });
    return out;
  }

  // Checks entering the holder, one per ms: local or decided by the owner. Returns the admissions.
  struct Tally {
    uint64_t local = 0;
    uint64_t at_owner = 0;
  };
  Tally Offer(const limiter::LimitSpec& spec, int checks) {
    Tally t;
    for (int i = 0; i < checks; ++i) {
      net_.now += milliseconds(1);
      if (holder_->DecideHere(Check(spec), "o")) {
        ++t.local;
      } else if (OwnerDecides(spec)) {
        ++t.at_owner;
      }
      net_.Pump();
      if (i % 50 == 0) Tick();
    }
    return t;
  }

  void Tick() {
    holder_->Tick();
    owner_->Tick();
    net_.Pump();
  }

  // The owner and the holder go away with slices out (the holder never releases them: it crashed too); a new
  // driver on `host` takes the owner's rows (its replica's copy) and serves as "peer/<id>".
  std::unique_ptr<GrantDriver> ReplaceOwner(FakeHost& host) {
    net_.drivers.erase("peer/h");
    net_.drivers.erase("peer/o");
    owner_.reset();
    host.table = owner_host_.table;
    auto next = std::make_unique<GrantDriver>(host, options_, owner_rows_, AckAll());
    net_.drivers["peer/" + host.self_id()] = next.get();
    return next;
  }

  // Runs `driver` alone for a second: 20 ticks 50 ms apart.
  void TickAlone(GrantDriver& driver) {
    for (int i = 0; i < 20; ++i) {
      net_.now += milliseconds(50);
      driver.Tick();
      net_.Pump();
    }
  }

  // Lets every slice come back: past term + margin, ticking.
  void Settle() {
    for (int i = 0; i < 20; ++i) {
      net_.now += milliseconds(50);
      Tick();
    }
  }

  Net net_;
  FakeHost holder_host_{net_, "h"};
  FakeHost owner_host_{net_, "o"};
  storage::MemoryStore store_;
  limiter::HybridClock hlc_{0};
  StoreGrantRows owner_rows_{store_, kOwnerContributor, hlc_};
  storage::MemoryStore holder_store_;
  StoreGrantRows holder_rows_{holder_store_, 1, hlc_};
  GrantDriverOptions options_;
  bool ack_ = true;
  int acks_ = 0;
  std::unique_ptr<GrantDriver> holder_;
  std::unique_ptr<GrantDriver> owner_;
};

TEST_F(GrantDriverTest, AHotKeyIsDecidedFromSlicesAndNeverOverTheLimit) {
  for (limiter::Algorithm a : {limiter::Algorithm::kFixedWindow, limiter::Algorithm::kTokenBucket}) {
    SCOPED_TRACE(limiter::AlgorithmName(a));
    const limiter::LimitSpec spec = Spec(a, 400);
    const Tally t = Offer(spec, 600);
    EXPECT_LE(t.local + t.at_owner, 400u);
    EXPECT_GT(t.local, 200u) << "most checks decided where they entered";
    const GrantDriverStats owner = owner_->stats();
    EXPECT_GT(owner.planner.grants_made, 0u);
    EXPECT_EQ(owner.requests_served, owner.planner.grants_made + owner.planner.grants_refused);
    EXPECT_EQ(acks_, static_cast<int>(owner.planner.grants_made)) << "every grant acknowledged before use";
    // Every slice back: what was not used is admissible again, exactly.
    Settle();
    EXPECT_EQ(owner_->stats().planner.units_out, 0u);
    EXPECT_EQ(holder_->stats().planner.slices_held, 0u);
    EXPECT_EQ(limiter::GrantsOut(spec, Row(spec), owner_host_.WallNowNs()), 0u);
    uint64_t rest = 0;
    while (OwnerDecides(spec)) ++rest;
    EXPECT_EQ(t.local + t.at_owner + rest, 400u);
    // The next algorithm on a fresh key.
    store_.Erase("hot", std::nullopt);
    acks_ = 0;
    holder_ = std::make_unique<GrantDriver>(holder_host_, options_, holder_rows_, AckAll());
    net_.drivers["peer/h"] = holder_.get();
    owner_ = std::make_unique<GrantDriver>(owner_host_, options_, owner_rows_,
                                           [this](std::string_view, std::function<void(bool)> done) {
                                             ++acks_;
                                             done(ack_);
                                           });
    net_.drivers["peer/o"] = owner_.get();
  }
}

TEST_F(GrantDriverTest, TheOwnerRecallsTheSlicesOutWhenTheKeyNearsItsLimitAndStaysExact) {
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 1000);
  const Tally t = Offer(spec, 100);
  ASSERT_GT(holder_->stats().planner.slices_held, 0u);
  EXPECT_EQ(owner_->stats().planner.recalls, 0u) << "far from the limit: nothing recalled";
  // The owner decides checks of its own until what is left no longer covers the slices out; its Tick
  // (the watch of the keys it lent) recalls them, and the holder gives back what it did not use.
  uint64_t at_owner = 0;
  while (owner_->stats().planner.recalls == 0 && OwnerDecides(spec)) {
    ++at_owner;
    if (at_owner % 10 == 0) Tick();
  }
  Tick();
  EXPECT_GT(owner_->stats().planner.recalls, 0u);
  EXPECT_EQ(holder_->stats().planner.slices_held, 0u) << "every slice released on the recall";
  EXPECT_EQ(owner_->stats().planner.units_out, 0u);
  EXPECT_EQ(limiter::GrantsOut(spec, Row(spec), owner_host_.WallNowNs()), 0u);
  EXPECT_GT(1000 - t.local - t.at_owner - at_owner, 0u) << "recalled before the budget was gone";
  // The holder backs off: its checks go to the owner, which decides the last units exactly.
  const Tally after = Offer(spec, 200);
  EXPECT_EQ(after.local, 0u);
  uint64_t rest = 0;
  while (OwnerDecides(spec)) ++rest;
  EXPECT_EQ(t.local + t.at_owner + at_owner + after.at_owner + rest, 1000u);
}

TEST_F(GrantDriverTest, AResetOrAPolicyChangeAtTheOwnerRecallsTheSlicesOut) {
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 100'000);
  // An admin DELETE at the owner: the row is gone, the slices lent from it are called back.
  Offer(spec, 100);
  ASSERT_GT(holder_->stats().planner.slices_held, 0u);
  EXPECT_EQ(store_.Erase("hot", std::nullopt), 1u);
  Tick();
  EXPECT_GT(owner_->stats().planner.recalls, 0u);
  EXPECT_EQ(holder_->stats().planner.slices_held, 0u);
  // A policy change: the owner decides a check under the new limit; the next Tick recalls the slices lent
  // under the old one.
  net_.now += milliseconds(1500);  // past the holder's back-off after the recall
  Offer(spec, 100);
  ASSERT_GT(holder_->stats().planner.slices_held, 0u);
  const uint64_t recalls = owner_->stats().planner.recalls;
  Tick();
  EXPECT_EQ(owner_->stats().planner.recalls, recalls) << "same generation: nothing recalled";
  limiter::LimitSpec lowered = spec;
  lowered.limit = 50'000;
  EXPECT_TRUE(OwnerDecides(lowered));
  Tick();
  EXPECT_GT(owner_->stats().planner.recalls, recalls);
  EXPECT_EQ(holder_->stats().planner.slices_held, 0u);
  // A reset of the window (Gubernator's RESET_REMAINING at the owner): recalled too.
  net_.now += milliseconds(1500);
  Offer(lowered, 100);
  ASSERT_GT(holder_->stats().planner.slices_held, 0u);
  const uint64_t before_reset = owner_->stats().planner.recalls;
  const storage::Slot slot{"t", &lowered};
  store_.Update("hot", std::span<const storage::Slot>(&slot, 1), owner_host_.WallNowNs(),
                [&](std::span<limiter::MergeState* const> states) {
                  limiter::ResetMerged(lowered, *states[0], hlc_.Now(owner_host_.WallNowNs()));
                });
  Tick();
  EXPECT_GT(owner_->stats().planner.recalls, before_reset);
  EXPECT_EQ(holder_->stats().planner.slices_held, 0u);
}

TEST_F(GrantDriverTest, ALeavingNodeReleasesItsSlicesBeforeItGoes) {
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 100'000);
  Offer(spec, 100);
  ASSERT_GT(holder_->stats().planner.slices_held, 0u);
  ASSERT_GT(owner_->stats().planner.units_out, 0u);
  bool left = false;
  holder_->Leave([&left] { left = true; });
  EXPECT_FALSE(left) << "not before the owner has the Releases";
  EXPECT_EQ(holder_->stats().planner.slices_held, 0u);
  net_.Pump();
  EXPECT_TRUE(left);
  EXPECT_EQ(owner_->stats().planner.units_out, 0u) << "settled from the Releases, not reclaimed";
  EXPECT_EQ(owner_->stats().planner.grants_released, owner_->stats().planner.grants_made);
  EXPECT_EQ(limiter::GrantsOut(spec, Row(spec), owner_host_.WallNowNs()), 0u);
  // From then on it decides nothing from a slice and asks for none.
  const uint64_t sent = net_.sent;
  const Tally after = Offer(spec, 200);
  EXPECT_EQ(after.local, 0u);
  EXPECT_EQ(net_.sent, sent);
}

TEST_F(GrantDriverTest, ALeaveWhoseReleasesGetNoAnswerGoesOnAfterTermAndMargin) {
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 100'000);
  Offer(spec, 100);
  ASSERT_GT(holder_->stats().planner.slices_held, 0u);
  net_.drivers.erase("peer/o");  // the owner does not answer: the Releases fail and wait to be resent
  bool left = false;
  holder_->Leave([&left] { left = true; });
  net_.Pump();
  EXPECT_FALSE(left);
  net_.now += options_.planner.term + options_.planner.margin - milliseconds(1);
  holder_->Tick();
  EXPECT_FALSE(left);
  net_.now += milliseconds(1);
  holder_->Tick();
  EXPECT_TRUE(left) << "the owner has reclaimed every slice by now";
}

TEST_F(GrantDriverTest, ManyHotKeysAcrossTheShardsAreEachDecidedFromTheirOwnSlices) {
  // The holder's side is sharded by key: 40 hot keys land in most of its 16 shards; each is lent its own
  // slices and decided from them, the stats add up over the shards, and a leave releases every shard's.
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 100'000);
  constexpr int kKeys = 40;
  uint64_t local = 0;
  for (int i = 0; i < 200; ++i) {
    net_.now += milliseconds(1);
    for (int k = 0; k < kKeys; ++k) {
      const std::string key = "hot-" + std::to_string(k);
      local += holder_->DecideHere(Check(spec, key), "o").has_value() ? 1 : 0;
    }
    net_.Pump();
    if (i % 50 == 0) Tick();
  }
  const GrantDriverStats holder = holder_->stats();
  EXPECT_EQ(holder.planner.local_checks, local);
  EXPECT_GT(local, 40u * 100) << "most checks of every key decided where they entered";
  EXPECT_EQ(holder.tracked_keys, static_cast<uint64_t>(kKeys));
  EXPECT_GE(holder.planner.slices_held, static_cast<uint64_t>(kKeys));
  EXPECT_GT(owner_->stats().planner.units_out, 0u);
  bool left = false;
  holder_->Leave([&left] { left = true; });
  net_.Pump();
  EXPECT_TRUE(left);
  EXPECT_EQ(holder_->stats().planner.slices_held, 0u);
  EXPECT_EQ(owner_->stats().planner.units_out, 0u) << "every shard's slices released";
}

// A key nothing was charged to yet has an empty state, which a store does not keep: a grant lent from it
// was dropped with it, and the owner went on to admit the whole limit beside the slice (here 1,000 + 300).
// LendMerged gives such a state its spec's algorithm, so the record is kept and counted.
TEST_F(GrantDriverTest, AGrantLentFromAKeyWithNoStateYetIsKeptAndCounted) {
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 1000);
  const GrantKey key{"fresh", "t", spec};
  const limiter::TimeNs now = owner_host_.WallNowNs();
  const GrantId grant = (GrantId{1} << 32) | 1;
  const GrantActions lent =
      owner_rows_.Lend(key, now, [&](const KeyBudget& budget, const std::vector<GrantId>&) {
        EXPECT_EQ(budget.effective, 0u);
        GrantActions out;
        out.lends.push_back(Lend{"h", "fresh", 1, grant, 300, milliseconds(500)});
        return out;
      });
  ASSERT_EQ(lent.lends.size(), 1u);
  const std::optional<KeyBudget> read = owner_rows_.Read(key, now);
  ASSERT_TRUE(read.has_value()) << "the row holding the grant is kept";
  EXPECT_EQ(read->out, 300u);
  EXPECT_EQ(read->effective, 300u);
  EXPECT_EQ(owner_rows_.Settle(key, grant, 120, now + 1000), 120u);
  EXPECT_EQ(owner_rows_.Read(key, now + 2000)->effective, 120u) << "the used units charged, the rest back";
}

TEST_F(GrantDriverTest, ColdKeysAndUnlentSpecsAreForwarded) {
  // Below the threshold: nothing asked.
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 100);
  for (int i = 0; i < 5; ++i) {
    net_.now += milliseconds(100);
    EXPECT_FALSE(holder_->DecideHere(Check(spec), "o"));
    net_.Pump();
  }
  EXPECT_EQ(net_.sent, 0u);
  // Hot, but not lent by this step: sliding_window, soft mode, a reset, cost 0, a check this node decides.
  // (A key's several limits are never offered: CheckBatch decides them all-or-nothing at the decider.)
  limiter::LimitSpec sliding = Spec(limiter::Algorithm::kSlidingWindow, 100);
  sliding.buckets = 10;
  limiter::LimitSpec soft = spec;
  soft.mode = limiter::Mode::kSoft;
  node::EntryCheck reset = Check(spec);
  reset.reset = true;
  node::EntryCheck free = Check(spec);
  free.cost = 0;
  for (int i = 0; i < 200; ++i) {
    net_.now += milliseconds(1);
    EXPECT_FALSE(holder_->DecideHere(Check(sliding), "o"));
    EXPECT_FALSE(holder_->DecideHere(Check(soft), "o"));
    EXPECT_FALSE(holder_->DecideHere(reset, "o"));
    EXPECT_FALSE(holder_->DecideHere(free, "o"));
    EXPECT_FALSE(holder_->DecideHere(Check(spec), "h"));
    net_.Pump();
  }
  EXPECT_EQ(net_.sent, 0u);
}

TEST_F(GrantDriverTest, MayDecideHereSaysWhetherASliceHoldsTheUnitsAndCountsNothing) {
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 1000);
  // Cold: no slice, and asking many times asks the owner for none.
  for (int i = 0; i < 200; ++i) {
    net_.now += milliseconds(1);
    EXPECT_FALSE(holder_->MayDecideHere(Check(spec), "o"));
    net_.Pump();
  }
  EXPECT_EQ(net_.sent, 0u);
  // Hot: slices held.
  Offer(spec, 100);
  ASSERT_GT(holder_->stats().planner.slices_held, 0u);
  auto units_left = [this] {
    const GrantDriver::HotKeys hot = holder_->Hot(10);
    return hot.held.empty() ? uint64_t{0} : hot.held[0].units_left;
  };
  const uint64_t left = units_left();
  ASSERT_GT(left, 1u);
  const uint64_t sent = net_.sent;
  EXPECT_TRUE(holder_->MayDecideHere(Check(spec), "o"));
  node::EntryCheck all = Check(spec);
  all.cost = left;
  EXPECT_TRUE(holder_->MayDecideHere(all, "o"));
  all.cost = left + 1;
  EXPECT_FALSE(holder_->MayDecideHere(all, "o"));
  EXPECT_EQ(units_left(), left) << "nothing used";
  EXPECT_EQ(net_.sent, sent) << "nothing sent";
  EXPECT_TRUE(holder_->DecideHere(Check(spec), "o"));
  // Never for what DecideHere never decides: a check its own node decides, a reset; nor while paused.
  EXPECT_FALSE(holder_->MayDecideHere(Check(spec), "h"));
  node::EntryCheck reset = Check(spec);
  reset.reset = true;
  EXPECT_FALSE(holder_->MayDecideHere(reset, "o"));
  holder_host_.paused = true;
  net_.now += milliseconds(1);
  EXPECT_FALSE(holder_->DecideHere(Check(spec), "o"));  // the fence goes up
  EXPECT_FALSE(holder_->MayDecideHere(Check(spec), "o"));
}

TEST_F(GrantDriverTest, ThePauseFenceReleasesEverySliceAndStopsItsUse) {
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 1000);
  Offer(spec, 100);
  ASSERT_GT(holder_->stats().planner.slices_held, 0u);
  holder_host_.paused = true;
  net_.now += milliseconds(1);
  EXPECT_FALSE(holder_->DecideHere(Check(spec), "o")) << "nothing decided from a slice while paused";
  net_.Pump();
  EXPECT_EQ(holder_->stats().planner.slices_held, 0u);
  // The owner settled them from the Releases, long before their term.
  EXPECT_EQ(owner_->stats().planner.units_out, 0u);
  EXPECT_EQ(owner_->stats().planner.grants_released, owner_->stats().planner.grants_made);
  EXPECT_EQ(limiter::GrantsOut(spec, Row(spec), owner_host_.WallNowNs()), 0u);
}

TEST_F(GrantDriverTest, AGrantNotAcknowledgedIsRefusedAndReclaimedWhole) {
  ack_ = false;
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kTokenBucket, 1000);
  const Tally t = Offer(spec, 100);
  EXPECT_EQ(t.local, 0u);
  EXPECT_GT(owner_->stats().not_acked, 0u);
  const limiter::MergeState row = Row(spec);
  ASSERT_FALSE(row.grants.records.empty()) << "recorded before the acknowledgement was asked";
  EXPECT_GT(limiter::GrantsOut(spec, row, owner_host_.WallNowNs()), 0u);
  Settle();
  EXPECT_GT(owner_->stats().planner.grants_expired, 0u);
  for (const limiter::GrantRecord& g : Row(spec).grants.records) {
    EXPECT_TRUE(g.settled);
    EXPECT_EQ(g.used, g.granted) << "reclaimed: counted wholly used (under-admission, never over)";
  }
}

TEST_F(GrantDriverTest, TheNextOwnerAdoptsTheGrantsInTheRowAndReclaimsThem) {
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 1000);
  Offer(spec, 100);
  ASSERT_GT(owner_->stats().planner.units_out, 0u);
  // The owner dies with slices out. A new owner process on the same row is asked for a slice of the key by
  // another holder.
  FakeHost next_host(net_, "o");
  std::unique_ptr<GrantDriver> owner = ReplaceOwner(next_host);
  GrantDriver& next = *owner;
  peer::GrantRequest request;
  request.set_from("h2");
  request.set_key("hot");
  request.mutable_limit()->set_name("t");
  limiter::SpecToProto(spec, request.mutable_limit()->mutable_spec());
  request.set_request(1);
  request.set_want(10);
  request.set_term_ns(milliseconds(500).count());
  std::optional<peer::GrantReply> reply;
  next.Serve(peer::METHOD_GRANT_REQUEST, request.SerializeAsString(), [&](peer::PeerResult r) {
    ASSERT_TRUE(r.ok());
    reply.emplace();
    ASSERT_TRUE(reply->ParseFromString(r.TakePayload()));
  });
  ASSERT_TRUE(reply);
  EXPECT_GT(reply->units(), 0u);
  TickAlone(next);
  for (const limiter::GrantRecord& g : Row(spec).grants.records) EXPECT_TRUE(g.settled) << g.id;
  EXPECT_EQ(limiter::GrantsOut(spec, Row(spec), next_host.WallNowNs()), 0u);
}

// The simulator's grants_owner_pause_closed seed 93: the owner recorded a grant and stopped before its reply
// went out; the holder gave up on the request, so nobody would ever release it, and the next owner was never
// asked a slice of the key again: the grant stayed unsettled, its units counted as spent. A node whose ring
// gives it ranges it did not own now scans them and adopts what is unsettled there, asked or not.
TEST_F(GrantDriverTest, ANodeTakingOverARangeAdoptsItsUnsettledGrantsUnaskedAndReclaimsThem) {
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 1000);
  Offer(spec, 100);
  ASSERT_GT(limiter::GrantsOut(spec, Row(spec), owner_host_.WallNowNs()), 0u);
  // The owner and the holder go away with the slices out; node "n" holds the replica's copy of the row.
  FakeHost next_host(net_, "n");
  std::unique_ptr<GrantDriver> owner = ReplaceOwner(next_host);
  GrantDriver& next = *owner;
  // While "o" owns the key on n's ring, n adopts nothing (it scans the ranges it owns: none).
  TickAlone(next);
  EXPECT_EQ(next.stats().planner.grants_adopted, 0u);
  EXPECT_GT(limiter::GrantsOut(spec, Row(spec), next_host.WallNowNs()), 0u);
  // "o" is declared dead: n's ring gives it every range. Nobody asks it anything.
  std::vector<ring::RingMember> members{{"n", 16}};
  next_host.table.ring = ring::RingView::Build(2, std::move(members)).view;
  next_host.table.version = 2;
  next.Tick();
  EXPECT_GT(next.stats().planner.grants_adopted, 0u);
  // Reclaimed term + margin after the adoption.
  TickAlone(next);
  for (const limiter::GrantRecord& g : Row(spec).grants.records) EXPECT_TRUE(g.settled) << g.id;
  EXPECT_EQ(limiter::GrantsOut(spec, Row(spec), next_host.WallNowNs()), 0u);
  EXPECT_EQ(next.stats().planner.grants_expired, next.stats().planner.grants_adopted);
}

// The simulator's grants_leave_closed seed 178: a key's owner left just after it lent a slice, the holder's
// Release went to it and failed, and since nobody asked the next owner for a slice of that key again, the
// grant stayed unsettled -- its units counted as spent for the rest of the window. The holder now sends an
// unanswered Release again to whoever decides the key then.
TEST_F(GrantDriverTest, AReleaseThatFindsItsOwnerGoneIsSentToTheNextOwner) {
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 1000);
  Offer(spec, 100);
  ASSERT_GT(holder_->stats().planner.slices_held, 0u);
  // The owner goes away; the holder's slices expire and their Releases get no answer.
  net_.drivers.erase("peer/o");
  for (int i = 0; i < 20; ++i) {
    net_.now += milliseconds(50);
    holder_->Tick();
    net_.Pump();
  }
  EXPECT_EQ(holder_->stats().planner.slices_held, 0u);
  EXPECT_GT(holder_->stats().send_failures, 0u);
  size_t unsettled = 0;
  for (const limiter::GrantRecord& g : Row(spec).grants.records) unsettled += g.settled ? 0 : 1;
  ASSERT_GT(unsettled, 0u) << "the slices held when the owner went away";
  // The key moves to "o2", which holds the row (its replica's copy: here the same store).
  std::vector<ring::RingMember> ring_members{{"o2", 16}};
  auto members = std::make_shared<std::vector<ring::MemberInfo>>(*holder_host_.table.members);
  members->push_back(ring::MemberInfo{"o2", "http/o2", "peer/o2", 16, 1, ring::MemberState::kAlive});
  FakeHost next_host(net_, "o2");
  for (FakeHost* host : {&holder_host_, &next_host}) {
    host->table.version = 2;
    host->table.ring = ring::RingView::Build(2, ring_members).view;
    host->table.members = members;
  }
  GrantDriver next(next_host, options_, owner_rows_, AckAll());
  net_.drivers["peer/o2"] = &next;
  for (int i = 0; i < 10; ++i) {
    net_.now += milliseconds(50);
    holder_->Tick();
    next.Tick();
    net_.Pump();
  }
  EXPECT_GT(holder_->stats().releases_resent, 0u);
  EXPECT_EQ(next.stats().planner.grants_expired, 0u) << "settled from the Releases, not reclaimed";
  for (const limiter::GrantRecord& g : Row(spec).grants.records) EXPECT_TRUE(g.settled) << g.id;
  EXPECT_EQ(limiter::GrantsOut(spec, Row(spec), next_host.WallNowNs()), 0u);
}

// The simulator's grants_owner_pause seed 2: the key's owner was stopped with slices out; the next owner
// settled them from their Releases, then the old owner resumed and served the Releases that had waited for
// it, settling them again in its stale copy -- their used units charged twice once the copies merged, and the
// key denied checks with budget left. An owner now settles only while it decides the key and its pause
// fence is down; the holder sends a refused Release again.
TEST_F(GrantDriverTest, AnOwnerJustResumedFromAPauseSettlesNothingUntilItsFenceIsDown) {
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kFixedWindow, 1000);
  Offer(spec, 100);
  ASSERT_GT(holder_->stats().planner.slices_held, 0u);
  const uint64_t released = owner_->stats().planner.grants_released;
  owner_host_.paused = true;  // the fence is up: the owner just resumed
  for (int i = 0; i < 20; ++i) {
    net_.now += milliseconds(50);
    holder_->Tick();
    owner_->Tick();
    net_.Pump();
  }
  EXPECT_EQ(holder_->stats().planner.slices_held, 0u);
  EXPECT_EQ(owner_->stats().planner.grants_released, released) << "no Release settled while fenced";
  size_t unsettled = 0;
  for (const limiter::GrantRecord& g : Row(spec).grants.records) unsettled += g.settled ? 0 : 1;
  EXPECT_GT(unsettled, 0u);
  owner_host_.paused = false;
  for (int i = 0; i < 10; ++i) {
    net_.now += milliseconds(50);
    holder_->Tick();
    owner_->Tick();
    net_.Pump();
  }
  EXPECT_GT(holder_->stats().releases_resent, 0u);
  for (const limiter::GrantRecord& g : Row(spec).grants.records) EXPECT_TRUE(g.settled) << g.id;
  EXPECT_EQ(limiter::GrantsOut(spec, Row(spec), owner_host_.WallNowNs()), 0u);
}

// A reclaim that falls due while the owner's fence is up is put off, not dropped: once the fence is down
// (the owner still decides the key) the grant is reclaimed, rather than left for an adoption that needs
// another request of the key.
TEST_F(GrantDriverTest, AReclaimDueWhileFencedIsDoneOnceTheFenceIsDown) {
  ack_ = false;  // every grant recorded, then refused: nobody will release it
  const limiter::LimitSpec spec = Spec(limiter::Algorithm::kTokenBucket, 1000);
  Offer(spec, 100);
  ASSERT_FALSE(Row(spec).grants.records.empty());
  owner_host_.paused = true;
  for (int i = 0; i < 20; ++i) {  // past term + margin
    net_.now += milliseconds(50);
    owner_->Tick();
    net_.Pump();
  }
  size_t unsettled = 0;
  for (const limiter::GrantRecord& g : Row(spec).grants.records) unsettled += g.settled ? 0 : 1;
  EXPECT_GT(unsettled, 0u) << "nothing settled while fenced";
  owner_host_.paused = false;
  for (int i = 0; i < 10; ++i) {
    net_.now += milliseconds(50);
    owner_->Tick();
    net_.Pump();
  }
  for (const limiter::GrantRecord& g : Row(spec).grants.records) {
    EXPECT_TRUE(g.settled) << g.id;
    EXPECT_EQ(g.used, g.granted) << "reclaimed whole";
  }
}

}  // namespace
}  // namespace ringlimit::cluster
