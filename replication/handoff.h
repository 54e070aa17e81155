// HandoffManager: moves counters with the ring. When the ring changes, the ranges whose owner changes
// are handed over live, under-replicated keys get their copies back, and states this node no longer
// owns or replicates are dropped.
//
// A range moving from A to B (RingView::Diff of the previous and the new ring), as both ends see it:
//  - A (outgoing): keeps deciding the range's keys itself (RouteOverride says "self") while it pushes
//    every state in the range to B (a ScanTokenRange: RocksDB range + dirty memory states, sent with
//    Replicator::SendUpdates), ships its last changes (Replicator::Flush), sends HandoffDone, and only
//    then lets the ring route the range to B.
//    The switch itself (once the push is over, until HandoffDone is acknowledged) holds the range's
//    checks at A (HoldWhileSwitching), so neither A nor B decides a key whose last change is in flight;
//    the last changes are collected once the decisions routed before the hold are over (DecisionFence).
//  - B (incoming): until A's HandoffDone arrives, passes the range's checks to A (RouteOverride says
//    "A"), so exactly one node decides each key at any moment, apart from requests in flight. If A
//    becomes unreachable (dead, left) or done_timeout passes, B decides from what it has (its replica).
//  - A node that joins or rejoins sees every range it gains as incoming from its previous owner, so a
//    restarted node never decides from its stale copy before the current owner has pushed the newer one
//    (merged in by Absorb: every admission of either copy kept).
// Graceful leave (Leave): the leaving node hands every range it owns to the owners of the ring without
// it, then routes every check to them (RouteOverride) until it exits.
// Re-replication: after a ring change, the owner of each key pushes it to the members that joined its
// preference list (PreferenceList(token, R) before vs after), so each key gets back to R copies. Only the
// tokens where that can happen are read (ReplicationRanges), so a join costs in proportion to what moved.
// Drop: drop_delay after the last ring change, with no handoff in progress, states whose key's
// preference list no longer contains this node are discarded (Store::Discard: not replicated as erases).
// It reads only the ranges this node held on a ring since its last drop and no longer holds; the first
// drop after a start reads every token. (A state absorbed for a range held on no ring this node was told
// of -- sent by a peer on a ring it skipped -- waits for that first drop of the next start.)
//
// Planner and driver: every decision is HandoffPlanner's (handoff_planner.h: a pure state machine, one
// object per outgoing handoff with a std::variant of its phases). HandoffManager is its driver: every
// event -- a ring change, a member change, a push or flush answered, a HandoffDone sent or received, a
// held check, the timer -- is handled on the manager's Executor (a strand of the node's io_context shared
// with the Replicator), where it calls the planner and carries out its actions: store scans, pushes
// (Replicator::SendUpdates), flushes, HandoffDone sends, the routing table, the decision fence, one timer
// armed at the planner's wake_at, one re-replication slice per posted task. No thread of its own, no
// polling, and no lock around the planner: it is only touched on the executor.
// Publication: the manager publishes each ring it is told about into the routing table together with the
// overrides of that change (RoutingPublisher::SetRingAndOverrides), on the executor: whoever calls
// OnRingChanged must leave the ring's publication to it, so no reader sees a new ring without its
// overrides. RouteOverride and Switching are on the request path: one atomic load of the routing table.
// Thread safety: every public method is safe for concurrent use. Lifetime: the store, the link, the
// replicator and the executor must outlive the manager; Stop (or the destructor) before destroying them.
#ifndef RINGLIMIT_REPLICATION_HANDOFF_H_
#define RINGLIMIT_REPLICATION_HANDOFF_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "replication/cluster_link.h"
#include "replication/executor.h"
#include "replication/handoff_planner.h"
#include "replication/replicator.h"
#include "replication/routing_table.h"
#include "ring/ring_view.h"
#include "storage/store.h"

namespace ringlimit::replication {

class HandoffManager {
 public:
  // REQUIRES: Validate(options).ok(). `executor` is the replicator's. The rings
  // and their route overrides are published into `routing` (the node's routing table, which the cluster
  // fills with the members); null: into a publisher of the manager's own (tests). `routing` must outlive
  // the manager.
  HandoffManager(storage::Store& store, ClusterLink& link, Replicator& replicator, Executor& executor,
                 HandoffOptions options, RoutingPublisher* routing = nullptr);
  ~HandoffManager();

  HandoffManager(const HandoffManager&) = delete;
  HandoffManager& operator=(const HandoffManager&) = delete;

  // Call once, before the first OnRingChanged.
  void Start();
  // Abandons what is in progress: from now on nothing runs on the executor for the manager. Waits for
  // what runs there now; must not be called on the executor. Idempotent.
  void Stop();

  // A crash, for the simulator: from now on nothing runs for the manager, nothing is answered, and it
  // never blocks. What is queued on the executor is the executor owner's to drop. Stop does nothing after.
  void Abandon();

  // The members' states changed (one may have become unreachable): incoming ranges whose previous
  // owner is gone are released, outgoing handoffs to a gone member abandoned. From any thread; queued.
  void OnMembersChanged();

  // The ring changed from `before` (null: none) to `after`. Called in ring-version order by the
  // cluster, from any thread; queues the change and returns at once (calls are handled in call order).
  // On the executor, the manager publishes `after` into routing() together with the route overrides of
  // the change (one table), then starts the pushes. If `before` is null or lacks this node while
  // `after` has it, `before` is taken as `after` without this node: every range this node gains is then
  // incoming from its previous owner (and, since such a node owned nothing before, it tells every other
  // member at once that it has nothing to hand off to it: members starting together do not wait
  // done_timeout for each other). A restart noticed on an unchanged ring comes with `after` = the
  // current ring: published again, harmlessly.
  void OnRingChanged(std::shared_ptr<const ring::RingView> before,
                     std::shared_ptr<const ring::RingView> after);

  // Where the checks of a key with ring token `token` go, overriding the ring: nullopt = follow the
  // ring; self_id() = decide here; another id = send them there. Request path: cheap.
  [[nodiscard]] std::optional<std::string> RouteOverride(ring::Token token) const;

  // The switch of a range (outgoing, at the end of its push): this node stops deciding the range, ships
  // its last changes and sends HandoffDone; the new owner decides once it has HandoffDone. In between
  // neither may decide (the new owner would miss the changes this node makes after collecting them), so
  // RouteOverride names the new owner and the range's checks are held here until the switch is over.
  // Switching: whether `token` is in such a range (request path: cheap).
  [[nodiscard]] bool Switching(ring::Token token) const;
  // If `token` is in a range being switched (Switching), takes `resume` and returns true: it is called
  // once, on the manager's executor, when the switch is over, abandoned or superseded, or at Stop, and
  // should route the check again (to the new owner, usually). Otherwise (or once stopping) returns false
  // and leaves `resume`. `resume` runs on the executor (at once if the switch ended before the executor
  // got to it), or at Stop on Stop's caller. Request path: one atomic load, one post when held.
  bool HoldWhileSwitching(ring::Token token, std::function<void()>& resume);

  // The decision fence of the switch (decision_fence.h). A decision calls EnterDecision before it reads
  // the routing table and ExitDecision(pin) once its store updates are done: the switch of a range
  // collects its last changes only when no decision routed with the table before its hold is in flight.
  // Request path: a few atomic operations, no lock.
  [[nodiscard]] uint32_t EnterDecision() const;
  void ExitDecision(uint32_t pin) const;

  // Where the overrides are published (the constructor's `routing`, or the manager's own).
  [[nodiscard]] RoutingPublisher& routing() const;

  // Receiver of METHOD_HANDOFF_DONE: releases the incoming ranges it names. `answer` gets the serialized
  // HandoffDoneAck once the ranges are released (on the executor; at once once stopping), or nullopt at
  // once when the payload does not parse. After Abandon it is never called. From any thread.
  using Answer = std::function<void(std::optional<std::string> ack)>;
  void HandleHandoffDone(std::string_view payload, Answer answer);
  // Receiver of METHOD_SYNC_RANGES: pushes this node's states of the ranges asked to the sender, then
  // answers (SyncRangesAnswer) which of them it holds with their copy; nullopt when the payload does not
  // parse, the push failed, or the manager is stopping (never after Abandon). From any thread.
  void HandleSyncRanges(std::string_view payload, Answer answer);

  // Graceful leave: hands every range this node owns on the current ring (the last one given to
  // OnRingChanged; the link's if none) to its owner on the ring without this node, then routes every
  // check to those owners. Calls done(ok) once (on the executor, or at Stop on Stop's caller): ok when
  // every push was acknowledged. A second call while leaving gets done(false).
  void Leave(std::function<void(bool ok)> done);

  // A snapshot the executor publishes after every event (from any thread; the state once the last
  // event handled so far was over, with `seconds` as of now).
  [[nodiscard]] std::vector<HandoffView> InProgress() const;
  [[nodiscard]] HandoffStats stats() const;

 private:
  struct Core;
  std::shared_ptr<Core> core_;
};

}  // namespace ringlimit::replication

#endif  // RINGLIMIT_REPLICATION_HANDOFF_H_
