#include "node/cluster/cluster_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>

namespace ringlimit::cluster {
namespace {

using std::chrono::milliseconds;

ring::MemberInfo Info(const std::string& id, uint64_t incarnation,
                      ring::MemberState state = ring::MemberState::kAlive) {
  return ring::MemberInfo{id, "http/" + id, "peer/" + id, 16, incarnation, state};
}

// The changes told to the ring listener that take this node's ranges in again: the same ring, `before`
// without this node.
size_t CatchUps(const ClusterActions& actions, const std::string& self) {
  return static_cast<size_t>(
      std::count_if(actions.ring_changes.begin(), actions.ring_changes.end(), [&](const RingChange& change) {
        return !change.published && change.before != nullptr && change.before->Find(self) == nullptr &&
               change.after != nullptr && change.after->Find(self) != nullptr;
      }));
}

class ClusterPlannerTest : public ::testing::Test {
 protected:
  ClusterPlannerTest() : planner_(Options()) {
    (void)planner_.Start(now_, kWall, Info("a", 5), {});
    ring::Message hello;
    hello.type = ring::MessageType::kAck;
    hello.seq = 999'999;
    hello.from = "b";
    hello.from_address = "peer/b";
    hello.updates = {Info("b", 7)};
    const ClusterActions actions = planner_.Receive(now_, kWall, hello);
    EXPECT_NE(actions.new_ring, nullptr);
  }

  static ClusterPlannerOptions Options() {
    ClusterPlannerOptions options;
    options.node_id = "a";
    return options;
  }

  ClusterActions Tick(milliseconds after) {
    now_ += after;
    return planner_.Tick(now_, kWall);
  }

  static constexpr int64_t kWall = 1'767'225'600'000'000'000;
  ring::MonoTime now_{milliseconds(10'000)};
  ClusterPlanner planner_;
};

// A tick half a suspicion timeout late means the process was stopped or starved long enough that the others
// may have declared it dead and decided its ranges -- and it may never hear so: its ranges are taken in again
// (unsynced until a holder pushed them), once. Ticks on time take nothing in.
TEST_F(ClusterPlannerTest, ALateTickTakesTheRangesInAgainOnce) {
  const ring::MembershipOptions membership;
  const auto period = std::chrono::duration_cast<milliseconds>(membership.probe_interval / 4);
  const auto late = std::chrono::duration_cast<milliseconds>(membership.suspicion_timeout / 2);
  EXPECT_EQ(CatchUps(Tick(period), "a"), 0u);
  EXPECT_EQ(CatchUps(Tick(late - milliseconds(1)), "a"), 0u) << "not late enough";
  EXPECT_EQ(CatchUps(Tick(period), "a"), 0u);
  EXPECT_EQ(CatchUps(Tick(late), "a"), 1u);
  EXPECT_EQ(CatchUps(Tick(period), "a"), 0u);
}

// A rumour of this node's death taken in after it refuted an older suspicion (the order in which a resumed
// node reads them) still takes its ranges in again.
TEST_F(ClusterPlannerTest, ADeathRumourAfterARefutedSuspicionTakesTheRangesInAgain) {
  ring::Message suspicion;
  suspicion.type = ring::MessageType::kAck;
  suspicion.seq = 999'998;
  suspicion.from = "b";
  suspicion.from_address = "peer/b";
  suspicion.updates = {Info("a", 5, ring::MemberState::kSuspect)};
  EXPECT_EQ(CatchUps(planner_.Receive(now_, kWall, suspicion), "a"), 0u);
  ring::Message death = suspicion;
  death.updates = {Info("a", 5, ring::MemberState::kDead)};
  EXPECT_EQ(CatchUps(planner_.Receive(now_, kWall, death), "a"), 1u);
  EXPECT_EQ(CatchUps(planner_.Receive(now_, kWall, death), "a"), 0u) << "the same rumour again";
}

// A member's clock estimate outlives its death and its return: forwards it sent into a partition reach this
// node after the heal and are judged against it (Forwarder, "Deadlines"). It goes when the member leaves.
TEST_F(ClusterPlannerTest, AClockEstimateOutlivesDeathAndReturnButNotLeaving) {
  ring::Message ack;
  ack.type = ring::MessageType::kAck;
  ack.seq = 0;  // a clock ping's Ack: only a sample
  ack.from = "b";
  ack.from_address = "peer/b";
  ack.echo_wall_ns = kWall - 1'000'000;  // this node's Ping, sent 1 ms before
  ack.wall_ns = kWall + 5'000'000'000;   // b's clock 5 s ahead
  (void)planner_.Receive(now_, kWall, ack);
  (void)Tick(milliseconds(10));
  auto offset_of_b = [&]() -> std::optional<std::chrono::nanoseconds> {
    auto it = planner_.offsets().find("b");
    if (it == planner_.offsets().end()) return std::nullopt;
    return it->second.offset;
  };
  ASSERT_TRUE(offset_of_b().has_value());
  const std::chrono::nanoseconds measured = *offset_of_b();
  EXPECT_GT(measured, std::chrono::milliseconds(4'990));

  ring::Message rumour;
  rumour.type = ring::MessageType::kAck;
  rumour.seq = 999'997;
  rumour.from = "c";
  rumour.from_address = "peer/c";
  rumour.updates = {Info("c", 3), Info("b", 7, ring::MemberState::kDead)};
  (void)planner_.Receive(now_, kWall, rumour);
  (void)Tick(milliseconds(10));
  EXPECT_EQ(offset_of_b(), measured) << "dead";

  rumour.updates = {Info("b", 8)};
  (void)planner_.Receive(now_, kWall, rumour);
  (void)Tick(milliseconds(10));
  EXPECT_EQ(offset_of_b(), measured) << "back";

  rumour.updates = {Info("b", 9, ring::MemberState::kLeft)};
  (void)planner_.Receive(now_, kWall, rumour);
  (void)Tick(milliseconds(10));
  EXPECT_FALSE(offset_of_b().has_value()) << "left";
}

}  // namespace
}  // namespace ringlimit::cluster
