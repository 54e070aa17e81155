// SimNode: one life of one simulated ringlimit node -- from its start (fresh, or restarted on its disk)
// to its crash or exit.
//
// Real code: ring::Membership, storage::MemoryStore (in write-back mode, as the durable tier drives it),
// replication::Replicator and replication::HandoffManager on the node's SimExecutor, and the Forwarder's
// routing decisions (node/cluster/routing.h). Mirrored here, because they live inside classes bound to
// sockets and strands: the ring publication of node/cluster/cluster.cc (Process, NoticeRestarts, Leave),
// the sequencing of node/cluster/forwarder.cc (hold while switching, try the targets in order, retry a
// timed-out target, decide locally when none answers, pass on once, answer a check's retries from the
// dedup cache by its request id, refuse to decide while the clock is off -- a refusal is a failed call
// here, CHECK_UNAVAILABLE there; both send the sender on at once), the deciding of node/api (one limit per
// key, charged with limiter::CheckMerged at the node's wall-clock time) and the durable tier's periodic flush
// (to a "disk" map that survives the node).
//
// Forward-check protocol of the simulator: a peer::ForwardCheckRequest with one check whose check_id is
// the Checker's check id; the ForwardCheckResponse's single result carries, in check_id, the id of the
// Checker's DecisionRecord it comes from (so the checker knows which charge a client saw).
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
#include "node/cluster/dedup_cache.h"
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
  [[nodiscard]] const ring::Membership& membership() const { return *membership_; }
  [[nodiscard]] const std::shared_ptr<const ring::RingView>& ring() const { return ring_; }
  [[nodiscard]] const replication::HandoffManager& handoff() const { return *handoff_; }
  [[nodiscard]] const replication::Replicator& replicator() const { return *replicator_; }
  [[nodiscard]] storage::MemoryStore& store() { return *store_; }
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
  struct Attempt;

  // Membership plumbing (cluster.cc: Process, NoticeRestarts).
  void Tick();
  void JudgeClock();
  void Process(ring::MembershipOutput out);
  void NoticeRestarts();
  void CatchUpAfterDeath();
  void FinishLeave();
  void MaybeExit();
  void FlushDisk();

  // Routing and deciding (forwarder.cc, node/api).
  using ForwardDone = std::function<void(std::optional<peer::ForwardedResult>)>;
  void Forward(peer::ForwardedCheck check, ForwardDone done);
  void Try(std::shared_ptr<Attempt> attempt);
  void Call(std::shared_ptr<Attempt> attempt);
  void Serve(std::string payload, Responder respond);
  void PassOn(const std::shared_ptr<peer::ForwardCheckRequest>& request, Responder respond);
  void DecideAndReply(const std::shared_ptr<peer::ForwardCheckRequest>& request, Responder respond);
  // `respond`, also remembering the answer of request `id` in the dedup cache (a failure forgets it).
  Responder Remembered(cluster::RequestId id, Responder respond);
  // Charges check `check` of `key` here, then (after replication in sync mode) calls then(decision id).
  // Decides `key` here; then(decision, acked): acked false when, under closed, not every holder after
  // this node acknowledged it (forwarder.cc Decided).
  void Decide(uint64_t check, const std::string& key, std::function<void(uint64_t, bool)> then);
  // cluster.cc JudgeQuorum: this node reaches (alive or leaving, itself included) no more than half of the
  // members it knows. Only consulted under closed.
  [[nodiscard]] bool Minority() const;
  // forwarder.cc RefusesToDecide + HoldsCopy: under closed, whether this node may decide `token` itself
  // when no other node answered.
  [[nodiscard]] bool MayDecideLocally(ring::Token token) const;
  std::string DeciderOf(ring::Token token) const;
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
  std::unique_ptr<ring::Membership> membership_;
  std::unique_ptr<storage::MemoryStore> store_;
  std::unique_ptr<Link> link_;
  std::unique_ptr<replication::Replicator> replicator_;
  std::unique_ptr<replication::HandoffManager> handoff_;
  std::unique_ptr<cluster::DedupCache> dedup_;  // forwarded checks served, by request id
  std::unique_ptr<ring::ClockOffsets> clocks_;  // the other members' clocks, from membership traffic
  bool clock_skewed_ = false;                   // this node's clock is off: it decides nothing
  uint64_t next_request_ = 1;                   // the low half of this life's request ids

  // Ring publication (as cluster.cc).
  std::shared_ptr<const ring::RingView> ring_;
  std::shared_ptr<const ring::RingView> published_;  // the last view handed to the handoff manager
  std::vector<ring::MemberInfo> routed_members_;     // the members last published into the routing table
  uint64_t ring_version_ = 0;
  std::map<std::string, uint64_t> incarnations_;  // of the ring members, as last seen

  std::set<uint64_t> pending_;  // client checks entered here, not answered yet
  bool leaving_ = false;
  bool left_ = false;
  bool exited_ = false;
  MonoTime left_at_{};
  std::function<void()> on_exit_;
};

}  // namespace ringlimit::sim

#endif  // RINGLIMIT_TESTS_SIM_SIM_NODE_H_
