#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ring/membership.h"

namespace ringlimit::ring {
namespace {

using std::chrono::milliseconds;

std::string Addr(const std::string& id) { return "127.0.0.1/" + id; }

MemberInfo Info(const std::string& id, uint64_t incarnation = 1, MemberState state = MemberState::kAlive) {
  return MemberInfo{id, "http/" + id, Addr(id), kDefaultVnodes, incarnation, state};
}

// An in-memory network of Membership state machines driven by one deterministic fake clock. Messages are
// delivered after `latency`, dropped with probability `loss`, and dropped when either end is crashed or
// isolated. Every node keeps its RingView up to date from `ring_changed`, like the node layer will.
class SimCluster {
 public:
  explicit SimCluster(uint64_t seed = 1, double loss = 0.0, milliseconds latency = milliseconds(1))
      : rng_(seed), loss_(loss), latency_(latency) {}

  MonoTime now() const { return now_; }

  // Starts node `id` joining through the nodes in `seeds` (empty: alone).
  void Start(const std::string& id, const std::vector<std::string>& seeds, uint64_t incarnation = 1,
             MembershipOptions options = {}) {
    options.random_seed = std::hash<std::string>()(id) ^ (incarnation * 7919);
    auto node = std::make_unique<Node>();
    node->membership = std::make_unique<Membership>(options, Info(id, incarnation));
    std::vector<std::string> seed_addresses;
    for (const std::string& s : seeds) seed_addresses.push_back(Addr(s));
    nodes_[id] = std::move(node);
    Handle(id, nodes_[id]->membership->Start(now_, seed_addresses));
  }

  // A crash: the node's state is gone and nothing reaches it any more.
  void Crash(const std::string& id) { nodes_.erase(id); }
  // A partition of one node: it runs, but every message to or from it is lost.
  void Isolate(const std::string& id, bool isolated) {
    if (isolated) {
      isolated_.insert(id);
    } else {
      isolated_.erase(id);
    }
  }

  Membership& node(const std::string& id) { return *nodes_.at(id)->membership; }
  const RingView* ring(const std::string& id) { return nodes_.at(id)->ring.get(); }
  const std::vector<MemberEvent>& events(const std::string& id) { return nodes_.at(id)->events; }
  bool running(const std::string& id) const { return nodes_.count(id) > 0; }
  std::vector<std::string> ids() const {
    std::vector<std::string> out;
    for (const auto& [id, n] : nodes_) out.push_back(id);
    return out;
  }

  // Lets `id` call one entry point and routes what it returns.
  void Do(const std::string& id, const std::function<MembershipOutput(Membership&)>& f) {
    Handle(id, f(node(id)));
  }

  // Advances the clock one step: deliveries due, then a Tick on every node.
  void Step() {
    now_ += kStep;
    std::vector<InFlight> due;
    std::vector<InFlight> later;
    for (InFlight& m : in_flight_) (m.deliver_at <= now_ ? due : later).push_back(std::move(m));
    in_flight_ = std::move(later);
    for (InFlight& m : due) {
      auto to = by_address_.find(m.to_address);
      if (to == by_address_.end() || !running(to->second) || isolated_.count(to->second)) continue;
      Handle(to->second, node(to->second).Receive(now_, m.message));
    }
    for (const std::string& id : ids()) {
      if (running(id)) Handle(id, node(id).Tick(now_));
    }
  }

  void RunFor(milliseconds d) {
    const MonoTime end = now_ + d;
    while (now_ < end) Step();
  }

  // Steps until `done()` holds or `limit` of simulated time has passed; returns whether it held.
  bool RunUntil(const std::function<bool()>& done, milliseconds limit) {
    const MonoTime end = now_ + limit;
    while (!done()) {
      if (now_ >= end) return false;
      Step();
    }
    return true;
  }

  // What `observer` believes about `id` (nullopt: unknown).
  std::optional<MemberState> StateOf(const std::string& observer, const std::string& id) {
    auto info = node(observer).Find(id);
    if (!info) return std::nullopt;
    return info->state;
  }

  // Every running node believes `id` is in `state`.
  bool AllSee(const std::string& id, MemberState state) {
    for (const std::string& observer : ids()) {
      if (StateOf(observer, id) != state) return false;
    }
    return true;
  }

  // Every running node sees exactly `expected` as its ring members, all alive, with one ring.
  bool Converged(const std::set<std::string>& expected) {
    uint64_t fingerprint = 0;
    for (const std::string& id : ids()) {
      Membership& m = node(id);
      std::set<std::string> in_ring;
      for (const RingMember& r : m.RingMembers()) in_ring.insert(r.id);
      if (in_ring != expected) return false;
      for (const std::string& e : expected) {
        if (StateOf(id, e) != MemberState::kAlive) return false;
      }
      const RingView* view = ring(id);
      if (view == nullptr) return false;
      if (fingerprint == 0) fingerprint = view->fingerprint();
      if (view->fingerprint() != fingerprint) return false;
    }
    return true;
  }

  // Starts n1..nN: n1 alone, each other one joining through a random earlier node; waits for convergence.
  void Form(int n) {
    Start("n1", {});
    std::set<std::string> all{"n1"};
    for (int i = 2; i <= n; ++i) {
      std::uniform_int_distribution<int> pick(1, i - 1);
      Start("n" + std::to_string(i), {"n" + std::to_string(pick(rng_))});
      all.insert("n" + std::to_string(i));
    }
    ASSERT_TRUE(RunUntil([&] { return Converged(all); }, milliseconds(10'000))) << "no convergence";
  }

  static constexpr milliseconds kStep{5};

 private:
  struct Node {
    std::unique_ptr<Membership> membership;
    std::shared_ptr<const RingView> ring;
    uint64_t ring_version = 0;
    std::vector<MemberEvent> events;
  };
  struct InFlight {
    MonoTime deliver_at;
    std::string to_address;
    Message message;
  };

  void Handle(const std::string& id, MembershipOutput out) {
    Node& n = *nodes_.at(id);
    by_address_[n.membership->self().peer_address] = id;
    for (MemberEvent& e : out.events) n.events.push_back(std::move(e));
    if (out.ring_changed) {
      Result<std::shared_ptr<const RingView>> built =
          RingView::Create(++n.ring_version, n.membership->RingMembers());
      ASSERT_TRUE(built.ok()) << built.status().ToString();
      n.ring = std::move(built).value();
    }
    if (isolated_.count(id)) return;
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    for (Outgoing& o : out.messages) {
      if (loss_ > 0 && coin(rng_) < loss_) continue;
      in_flight_.push_back(InFlight{now_ + latency_, std::move(o.to_address), std::move(o.message)});
    }
  }

  std::mt19937_64 rng_;
  double loss_;
  milliseconds latency_;
  MonoTime now_{milliseconds(1'000'000)};
  std::map<std::string, std::unique_ptr<Node>> nodes_;
  std::map<std::string, std::string> by_address_;
  std::set<std::string> isolated_;
  std::vector<InFlight> in_flight_;
};

std::set<std::string> Ids(int n, const std::string& except = "") {
  std::set<std::string> out;
  for (int i = 1; i <= n; ++i) {
    if ("n" + std::to_string(i) != except) out.insert("n" + std::to_string(i));
  }
  return out;
}

bool AnyEvent(SimCluster& c, const std::string& about, MemberEventKind kind) {
  for (const std::string& id : c.ids()) {
    for (const MemberEvent& e : c.events(id)) {
      if (e.member.id == about && e.kind == kind) return true;
    }
  }
  return false;
}

// --- Whole-cluster behaviour ----------------------------------------------------------------------------

TEST(MembershipSimTest, ConvergesToOneMemberListAndRing) {
  for (int n : {2, 3, 5, 10}) {
    SimCluster c(/*seed=*/n);
    c.Form(n);
    for (const std::string& id : c.ids()) {
      EXPECT_TRUE(c.node(id).joined());
      EXPECT_EQ(c.node(id).Members().size(), static_cast<size_t>(n));
      EXPECT_EQ(c.ring(id)->members().size(), static_cast<size_t>(n));
    }
    // And it stays that way: no false suspicion on a healthy network.
    c.RunFor(milliseconds(20'000));
    EXPECT_TRUE(c.Converged(Ids(n)));
    EXPECT_FALSE(AnyEvent(c, "n1", MemberEventKind::kSuspect));
  }
}

TEST(MembershipSimTest, CrashedMemberIsDeclaredDeadWithinThreeSeconds) {
  milliseconds worst{0};
  for (int n : {3, 5, 10}) {
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      SimCluster c(seed * 100 + n);
      c.Form(n);
      c.RunFor(milliseconds(1'000 + 137 * seed));  // crash at an arbitrary phase of the probe rounds
      const MonoTime crashed_at = c.now();
      c.Crash("n2");
      const bool all_know =
          c.RunUntil([&] { return c.AllSee("n2", MemberState::kDead); }, milliseconds(10'000));
      ASSERT_TRUE(all_know) << "n=" << n << " seed=" << seed;
      const auto took = std::chrono::duration_cast<milliseconds>(c.now() - crashed_at);
      worst = std::max(worst, took);
      EXPECT_LE(took, milliseconds(3'000)) << "n=" << n << " seed=" << seed;
      // The survivors' ring drops it.
      for (const std::string& id : c.ids()) EXPECT_EQ(c.ring(id)->Find("n2"), nullptr);
      EXPECT_TRUE(c.Converged(Ids(n, "n2")));
    }
  }
  std::printf("worst time until every survivor saw the crashed member dead: %lld ms\n",
              static_cast<long long>(worst.count()));
}

TEST(MembershipSimTest, SuspectedButAliveMemberRefutes) {
  SimCluster c(7);
  c.Form(4);
  const uint64_t before = c.node("n3").self().incarnation;
  // A short partition: long enough to be suspected, shorter than the suspicion timeout.
  c.Isolate("n3", true);
  ASSERT_TRUE(c.RunUntil([&] { return AnyEvent(c, "n3", MemberEventKind::kSuspect); }, milliseconds(3'000)));
  c.RunFor(milliseconds(300));
  c.Isolate("n3", false);
  ASSERT_TRUE(c.RunUntil([&] { return c.Converged(Ids(4)); }, milliseconds(5'000)));
  EXPECT_GT(c.node("n3").self().incarnation, before);
  EXPECT_GE(c.node("n3").stats().refutations, 1u);
  EXPECT_FALSE(AnyEvent(c, "n3", MemberEventKind::kDead));
  for (const std::string& id : c.ids())
    EXPECT_EQ(c.node(id).Find("n3")->incarnation, c.node("n3").self().incarnation);
}

TEST(MembershipSimTest, PartitionedMemberDeclaredDeadComesBackAfterHealing) {
  SimCluster c(8);
  c.Form(3);
  c.Isolate("n3", true);
  ASSERT_TRUE(c.RunUntil([&] { return c.StateOf("n1", "n3") == MemberState::kDead; }, milliseconds(5'000)));
  c.Isolate("n3", false);
  // n3 keeps probing; the answers carry its dead record, which it refutes.
  ASSERT_TRUE(c.RunUntil([&] { return c.Converged(Ids(3)); }, milliseconds(15'000)));
}

TEST(MembershipSimTest, RestartedMemberRejoins) {
  for (uint64_t restart_incarnation : {uint64_t{1000}, uint64_t{0}}) {  // clock-based, or forgotten
    SimCluster c(9);
    c.Form(4);
    c.Crash("n4");
    ASSERT_TRUE(c.RunUntil(
        [&] {
          return c.StateOf("n1", "n4") == MemberState::kDead && c.StateOf("n2", "n4") == MemberState::kDead;
        },
        milliseconds(5'000)));
    c.Start("n4", {"n2"}, restart_incarnation);
    EXPECT_FALSE(c.node("n4").joined());
    ASSERT_TRUE(c.RunUntil([&] { return c.Converged(Ids(4)); }, milliseconds(5'000)))
        << "incarnation " << restart_incarnation;
    EXPECT_TRUE(c.node("n4").joined());
    EXPECT_GT(c.node("n1").Find("n4")->incarnation, 1u);
  }
}

TEST(MembershipSimTest, GracefulLeavePropagates) {
  SimCluster c(10);
  c.Form(5);
  c.Do("n5", [&](Membership& m) { return m.Leave(c.now()); });
  ASSERT_TRUE(c.RunUntil([&] { return c.AllSee("n5", MemberState::kLeaving); }, milliseconds(3'000)));
  // Still in the ring while it hands its state off.
  EXPECT_NE(c.ring("n1")->Find("n5"), nullptr);
  c.Do("n5", [&](Membership& m) { return m.FinishLeave(c.now()); });
  EXPECT_FALSE(c.node("n5").HasPendingGossip());
  c.RunFor(milliseconds(50));  // the direct Pings are delivered
  c.Crash("n5");               // the process exits
  ASSERT_TRUE(c.RunUntil([&] { return c.AllSee("n5", MemberState::kLeft); }, milliseconds(3'000)));
  EXPECT_TRUE(c.Converged(Ids(4)));
  // Left is final: it is never suspected or declared dead afterwards, and it is forgotten in due time.
  c.RunFor(milliseconds(10'000));
  EXPECT_FALSE(AnyEvent(c, "n5", MemberEventKind::kDead));
  c.RunFor(milliseconds(60'000));
  EXPECT_EQ(c.node("n1").Find("n5"), std::nullopt);
  EXPECT_TRUE(AnyEvent(c, "n5", MemberEventKind::kForgotten));
}

TEST(MembershipSimTest, LossyNetworkConvergesAndStillDetectsCrashes) {
  SimCluster c(11, /*loss=*/0.10, milliseconds(2));
  c.Form(6);
  c.RunFor(milliseconds(30'000));
  // False suspicions may happen under loss, but they are refuted: everyone is alive at the end.
  ASSERT_TRUE(c.RunUntil([&] { return c.Converged(Ids(6)); }, milliseconds(10'000)));
  const MonoTime crashed_at = c.now();
  c.Crash("n6");
  ASSERT_TRUE(c.RunUntil([&] { return c.AllSee("n6", MemberState::kDead); }, milliseconds(10'000)));
  EXPECT_LE(c.now() - crashed_at, milliseconds(5'000));
}

TEST(MembershipSimTest, SimultaneousStartWithEachOtherAsSeeds) {
  SimCluster c(12);
  c.Start("n1", {"n2", "n3"});
  c.Start("n2", {"n1", "n3"});
  c.Start("n3", {"n1", "n2"});
  ASSERT_TRUE(c.RunUntil([&] { return c.Converged(Ids(3)); }, milliseconds(5'000)));
}

TEST(MembershipSimTest, JoinRetriesUntilASeedAnswers) {
  SimCluster c(13);
  c.Start("n2", {"n1"});  // n1 is not up yet
  c.RunFor(milliseconds(2'000));
  EXPECT_FALSE(c.node("n2").joined());
  EXPECT_TRUE(c.node("n2").RingMembers().empty());
  c.Start("n1", {});
  ASSERT_TRUE(c.RunUntil([&] { return c.Converged(Ids(2)); }, milliseconds(3'000)));
}

}  // namespace
}  // namespace ringlimit::ring
