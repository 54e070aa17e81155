// ClusterPlanner: the decisions of a node's membership in the cluster (cluster.h says what the Cluster
// does) as a pure state machine -- the SWIM member table (ring/membership.h), the ring it builds from it,
// when the ring's listener (the handoff) must take ranges in again (a member restarted without leaving the
// ring, this node was declared dead and refuted it, or its ticks stopped long enough that it may have been),
// the clock judgement (the max-offset rule over the
// members' offsets), the quorum judgement (does this node reach a majority of the members it knows), and
// the snapshot GET /v1/cluster shows.
//
// No I/O, no clock, no threads, no locks: every entry point takes the current steady time (and the wall
// clock where membership stamps or measures it) and returns the actions to carry out. The driver (Cluster,
// cluster.h, on its strand; the deterministic simulator's SimNode) sends, publishes and calls the listeners:
//
//   Start(now, wall, self, seeds)      the node starts: alone, or joining through the seeds
//   Tick(now, wall)                    every probe_interval / 4: failure detection, clock and quorum judged;
//                                      a tick half a suspicion timeout late catches the ranges up (paused)
//   Receive(now, wall, message)        a membership message (`wall`: when it was received)
//   SetDiscovered(addresses)           --join-dns resolved again
//   Leave(now) / FinishLeave(now)      graceful leave: `leaving`, (the driver hands ranges over), `left`
//
// Ordering contract for the driver, per returned ClusterActions: send `send` (one-way, best effort) and
// drop the connections of `disconnect`; publish the snapshot; publish `members` into the routing table and
// tell the members listener; then, in order, each of `ring_changes` to the ring listener (the handoff,
// which publishes the ring into the routing table with its overrides) -- a change with `published` is a
// new ring, to be published into the ring holder right after its listener call (and into the routing table
// by the driver itself when there is no listener); then the snapshot again when `new_ring`. `announce` (only
// from FinishLeave) are requests whose answers the driver awaits before reporting the leave done.
//
// Thread safety: none; the driver serialises every call.
#ifndef RINGLIMIT_NODE_CLUSTER_CLUSTER_PLANNER_H_
#define RINGLIMIT_NODE_CLUSTER_CLUSTER_PLANNER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ring/clock_offset.h"
#include "ring/membership.h"
#include "ring/ring_view.h"

namespace ringlimit::cluster {

using RingPtr = std::shared_ptr<const ring::RingView>;

// The clocks as this node last judged them.
struct ClockView {
  ring::ClockHealth health = ring::ClockHealth::kUnknown;
  std::string reason;                        // ClockOffsets::reason()
  std::chrono::nanoseconds median_offset{};  // the members' median offset from this node
  std::map<std::string, ring::OffsetEstimate, std::less<>> offsets;  // by member id (those measured)
};

// An immutable picture of the membership, rebuilt after every change.
struct ClusterSnapshot {
  ring::MemberInfo self;
  std::vector<ring::MemberInfo> members;  // sorted by id, self and tombstones included
  RingPtr ring;                           // null until this node is in the ring
  bool joined = false;
  ring::MembershipStats stats;
  ClockView clock;

  // The record of `id`, or nullptr. O(log n).
  [[nodiscard]] const ring::MemberInfo* Find(std::string_view id) const;
  // Members per state (index: MemberState).
  [[nodiscard]] std::vector<size_t> CountByState() const;
};

// Whether this node reaches a majority of the members it knows (ring::ReachOf), as last judged.
struct QuorumView {
  bool minority = false;
  size_t reached = 0;
  size_t known = 0;
  bool operator==(const QuorumView&) const = default;
};

struct ClusterPlannerOptions {
  // This member's id. REQUIRES: valid (ValidateNodeId). Default: empty.
  std::string node_id;
  // SWIM timings and limits. Default: see ring::MembershipOptions.
  ring::MembershipOptions membership;
  // The max-offset rule and the estimator's filter. Default: see ring::ClockOffsetOptions.
  ring::ClockOffsetOptions clock;
};

// The ring listener is told `before` -> `after`.
struct RingChange {
  RingPtr before;  // null for the first ring
  RingPtr after;
  // A new ring (publish it into the ring holder after the listener call); false: the same ring, told again
  // because a member restarted without leaving it, or this node was declared dead (`before` lacks that
  // member or this node).
  bool published = false;
};

// What to carry out, in the order of the contract above.
struct [[nodiscard]] ClusterActions {
  std::vector<ring::Outgoing> send;       // one-way, wall-stamped
  std::vector<ring::Outgoing> announce;   // FinishLeave's `left` requests, wall-stamped
  std::vector<std::string> disconnect;    // peer addresses of members gone
  std::vector<ring::MemberEvent> events;  // what membership saw change (logged; traced by the simulator)
  bool snapshot = false;                  // publish Snapshot() again
  std::shared_ptr<const std::vector<ring::MemberInfo>> members;  // the member table changed
  std::vector<RingChange> ring_changes;                          // to the ring listener, in order
  RingPtr new_ring;                                              // the new ring among them, if any
};

class ClusterPlanner {
 public:
  explicit ClusterPlanner(ClusterPlannerOptions options);

  ClusterPlanner(const ClusterPlanner&) = delete;
  ClusterPlanner& operator=(const ClusterPlanner&) = delete;

  // `self` is this node's record (incarnation: its wall-clock ms at start); `discovered`: addresses found
  // through DNS, offered the table when no seed answered.
  ClusterActions Start(ring::MonoTime now, int64_t wall_ns, ring::MemberInfo self,
                       const std::vector<std::string>& seeds, std::vector<std::string> discovered = {});
  ClusterActions Tick(ring::MonoTime now, int64_t wall_ns);
  ClusterActions Receive(ring::MonoTime now, int64_t received_wall_ns, const ring::Message& message);
  void SetDiscovered(std::vector<std::string> addresses);
  ClusterActions Leave(ring::MonoTime now, int64_t wall_ns);
  ClusterActions FinishLeave(ring::MonoTime now, int64_t wall_ns);

  // --- Judgements (as of the last call) ---
  [[nodiscard]] bool clock_skewed() const { return clocks_.health() == ring::ClockHealth::kSkewed; }
  [[nodiscard]] std::string clock_reason() const { return clocks_.reason(); }
  [[nodiscard]] const QuorumView& quorum() const { return quorum_; }
  // The members' clock offsets estimated at the last tick.
  [[nodiscard]] const std::map<std::string, ring::OffsetEstimate, std::less<>>& offsets() const {
    return offsets_;
  }
  // Changes whenever offsets() did, so that a caller republishes them only then.
  [[nodiscard]] uint64_t offsets_version() const { return offsets_version_; }

  // --- State ---
  [[nodiscard]] bool started() const { return membership_.has_value(); }
  // REQUIRES: started().
  [[nodiscard]] const ring::Membership& membership() const { return *membership_; }
  // The last ring built (null before the first).
  [[nodiscard]] const RingPtr& ring() const { return ring_; }
  [[nodiscard]] bool leaving() const { return leaving_; }
  // The snapshot of now. REQUIRES: started().
  [[nodiscard]] std::shared_ptr<ClusterSnapshot> Snapshot(ring::MonoTime now) const;

 private:
  // Carries out what membership returned: stamps and sends, notes the events, judges the quorum, builds
  // the new ring, and notices restarts and this node's own death.
  void Process(ring::MonoTime now, int64_t wall_ns, ring::MembershipOutput out, ClusterActions& actions);
  void JudgeClock(ring::MonoTime now, int64_t wall_ns, ClusterActions& actions);
  // Judges the quorum at `at`; a node back from a long minority catches up as after its death (at
  // FinishCall).
  void JudgeQuorum(ring::MonoTime at);
  // The end of an entry point's work: the catch-up JudgeQuorum asked for, on the ring built meanwhile.
  void FinishCall(ClusterActions& actions);
  void NoticeRestarts(ClusterActions& actions);
  void CatchUpAfterDeath(ClusterActions& actions);

  // Constant after construction.
  const ClusterPlannerOptions options_;

  std::optional<ring::Membership> membership_;
  ring::ClockOffsets clocks_;
  uint64_t ring_version_ = 0;
  RingPtr ring_;                                  // the last ring built
  std::vector<ring::MemberInfo> routed_members_;  // the members last handed out (actions.members)
  uint64_t routed_version_ = 0;                   // membership's table_version() when last compared
  std::map<std::string, uint64_t> incarnations_;  // of the ring members, as last seen
  std::map<std::string, ring::OffsetEstimate, std::less<>> offsets_;
  uint64_t offsets_version_ = 0;
  ring::MonoTime counters_published_{};     // when Process last asked for a snapshot
  std::vector<std::string> clock_members_;  // JudgeClock's scratch, kept for its capacity
  ring::MonoTime last_clock_pings_{};       // when members without a clock estimate were last pinged for one
  size_t clock_ping_cursor_ = 0;            // where the next round of those pings starts
  bool catch_up_ = false;                   // back from a minority: take the ranges in again (FinishCall)
  ring::MonoTime minority_since_{};         // when the quorum judgement last turned to minority
  ring::MonoTime last_tick_{};              // the last Tick's time (none yet: zero)
  QuorumView quorum_;
  bool leaving_ = false;
  std::map<std::string, ring::MonoTime> conflicts_logged_;  // id conflict -> when last logged
};

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_CLUSTER_CLUSTER_PLANNER_H_
