// SimNode: one life of one simulated ringlimit node -- from its start (fresh, or restarted on its disk)
// to its crash or exit.
//
// Real code: ring::Membership and everything a node decides about it (node/cluster/cluster_planner.h: the
// ring it builds, restarts and its own death noticed, the clock and quorum judgements), storage::MemoryStore
// (in write-back mode, as the durable tier drives it), replication::Replicator and
// replication::HandoffManager on the node's SimExecutor, the Forwarder (node/forward/forwarder.h: routing,
// retries, relays, deadlines, dedup, pass-on, hold while switching, the failure mode) on this node's
// ForwardHost -- the simulated clock, seeded generator and network -- and the pause fence
// (node/cluster/pause_fence.h), and with SimOptions::grants on, the quota grants' GrantDriver
// (node/grants/grant_driver.h) on the same host and StoreGrantRows on the node's store, wired as
// node/server/node.cc StartGrants wires them (acknowledged through Forwarder::Decided, ticked every 50 ms,
// serving the three grant methods). What is written here is the drivers' plumbing (cluster.cc's Apply, over
// the simulated network) and, until the check service has one home (issue 32, item 2), the check path of
// node/service/check_engine.cc around the Forwarder (RunRouted for one key: refuse when not routing or
// refusing to decide, Classify, decide here or Forward, decide here when Forward comes back empty, 503 on
// CHECK_UNAVAILABLE / CHECK_UNACKED), the deciding of node/api (one limit per key, charged with
// limiter::CheckMerged at the node's wall-clock time) and the durable tier's periodic flush (to a "disk"
// map that survives the node).
//
// Forward-check protocol of the simulator: a peer::ForwardCheckRequest with one check whose check_id is
// the Checker's check id; the decided result's `owner` is "<node id>#<the id of the Checker's
// DecisionRecord>" (so the entry node knows which charge its client saw, through pass-ons and relays).
//
// Thread safety: none needed (one simulation thread). Lifetime: owned by the SimCluster; destroying it is
// a crash (everything queued for it is dropped by the World first).
#ifndef RINGLIMIT_TESTS_SIM_SIM_NODE_H_
#define RINGLIMIT_TESTS_SIM_SIM_NODE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "limiter/hlc.h"
#include "node/cluster/cluster_planner.h"
#include "node/cluster/pause_fence.h"
#include "node/forward/forwarder.h"
#include "node/grants/grant_driver.h"
#include "node/grants/grant_rows.h"
#include "peer.pb.h"
#include "replication/cluster_link.h"
#include "replication/handoff.h"
#include "replication/replicator.h"
#include "ring/clock_offset.h"
#include "ring/membership.h"
#include "ring/ring_view.h"
#include "storage/memory_store.h"
#include "tests/sim/checker.h"
#include "tests/sim/world.h"

namespace ringlimit::sim {

class SimCluster;
struct SimOptions;

// A node's disk: what its durable tier flushed, by (entity, state name). Survives crashes.
using Disk = std::map<std::pair<std::string, std::string>, storage::StoredState>;

// Answers one peer request: the response payload, or nullopt (a failed call).
using Responder = std::function<void(std::optional<std::string>)>;

class SimNode {
 public:
  SimNode(SimCluster& cluster, int slot, uint64_t life, Disk& disk);
  ~SimNode();

  SimNode(const SimNode&) = delete;
  SimNode& operator=(const SimNode&) = delete;

  // Loads the disk into the store, then starts the membership (alone when `seeds` is empty) with
  // incarnation = its wall-clock ms, as a real node does.
  void Start(const std::vector<std::string>& seed_addresses);

  [[nodiscard]] const std::string& id() const { return id_; }
  [[nodiscard]] int slot() const { return slot_; }
  [[nodiscard]] const ring::Membership& membership() const { return planner_->membership(); }
  [[nodiscard]] const std::shared_ptr<const ring::RingView>& ring() const { return planner_->ring(); }
  [[nodiscard]] const replication::HandoffManager& handoff() const { return *handoff_; }
  [[nodiscard]] const replication::Replicator& replicator() const { return *replicator_; }
  [[nodiscard]] storage::MemoryStore& store() { return *store_; }
  // The quota grants' driver, or null when SimOptions::grants is off.
  [[nodiscard]] const cluster::GrantDriver* grants() const { return grants_.get(); }
  // Whether it routes checks: its routing table holds a ring (Forwarder::Routing).
  [[nodiscard]] bool routing() const {
    return handoff_ != nullptr && handoff_->routing().Current().ring != nullptr;
  }
  [[nodiscard]] bool leaving() const { return leaving_; }
  // Left the cluster and draining: new client checks are refused.
  [[nodiscard]] bool draining() const { return left_; }
  [[nodiscard]] bool exited() const { return exited_; }
  // Wall clock: simulated time + the cluster's epoch + this node's skew.
  [[nodiscard]] limiter::TimeNs WallNow() const;

  // Network entry points.
  void Receive(const ring::Message& message);
  void Handle(peer::Method method, std::string payload, Responder respond);

  // A client's check of key `key` (the Checker's id `check`) entering here.
  void ClientCheck(uint64_t check, size_t key);
  // Answers every check that entered here and is not answered yet: `outcome` (the node went away).
  void FailPending(Outcome outcome);

  // Graceful leave, as Cluster::Leave: leaving, the handoff of every range, left; then `exited` is
  // called once the node has drained its checks (or after a bound) and flushed its disk.
  void Leave(std::function<void()> exited);

 private:
  class Link;
  class Host;
  class Rows;

  // The ClusterPlanner's driver (cluster.cc Core: OnTick, Receive, Apply, the leave).
  void Tick();
  void Apply(cluster::ClusterActions actions);
  void FinishLeave();
  void MaybeExit();
  void FlushDisk();
  // node.cc ArmGrantTick: the grant driver's timer, every 50 ms.
  void GrantTick();

  // Deciding (node/api): charges check `check` of `key` here and records it. Returns the decision id.
  uint64_t Charge(uint64_t check, const std::string& key);
  // The Forwarder's LocalDecider: decides a forwarded request here.
  void DecideForwarded(const peer::ForwardCheckRequest& request,
                       std::vector<node::ForwardedOutcome>& outcomes);
  // check_engine.cc: decided here, answered once the Forwarder says the decision may be (acked).
  void DecideHere(uint64_t check, const std::string& key);
  // The answer of a decision: allowed or denied, or 503 (kRefused) for an admission not acked.
  void AnswerDecision(uint64_t check, uint64_t decision, bool acked);
  void Answer(uint64_t check, Outcome outcome, uint64_t decision);

  // Constant after construction.
  SimCluster& cluster_;
  World& world_;
  const SimOptions& options_;
  const int slot_;
  const uint64_t life_;
  limiter::HybridClock hlc_{0};  // stamps this life's charges
  // This life's contributor id in merged states: unique per (slot, life), never storage::kLegacyContributor.
  [[nodiscard]] limiter::ContributorId Contributor() const {
    return (static_cast<uint64_t>(slot_ + 1) << 40) | (life_ + 2);
  }
  const std::string id_;
  Disk& disk_;

  // Destroyed in the reverse order of construction in ~SimNode (a crash): drivers before what they use.
  std::unique_ptr<SimExecutor> executor_;
  std::unique_ptr<cluster::ClusterPlanner> planner_;  // membership, ring, clock and quorum judgements
  std::unique_ptr<storage::MemoryStore> store_;
  std::unique_ptr<Link> link_;
  std::unique_ptr<replication::Replicator> replicator_;
  std::unique_ptr<replication::HandoffManager> handoff_;
  bool clock_skewed_ = false;                   // as last traced
  std::unique_ptr<cluster::PauseFence> fence_;  // ticked by Tick, as cluster.cc's OnTick does
  std::unique_ptr<Host> host_;
  std::unique_ptr<cluster::Forwarder> forwarder_;
  std::unique_ptr<Rows> grant_rows_;              // with SimOptions::grants on
  std::unique_ptr<cluster::GrantDriver> grants_;  // with SimOptions::grants on

  std::set<uint64_t> pending_;  // client checks entered here, not answered yet
  bool leaving_ = false;
  bool left_ = false;
  bool exited_ = false;
  MonoTime left_at_{};
  std::function<void()> on_exit_;
};

}  // namespace ringlimit::sim

#endif  // RINGLIMIT_TESTS_SIM_SIM_NODE_H_
