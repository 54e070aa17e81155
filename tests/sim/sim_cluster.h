// SimCluster: N simulated nodes (SimNode) on one World, the simulated network between them, the
// faults a scenario applies, and the clients' entry point.
//
// Network: every message -- membership (ring::Message, as structs: no encoding) and peer requests and
// their answers (serialized protobuf, as on the wire) -- travels with a random latency in
// [min_latency, max_latency] (so messages reorder), is dropped with probability `drop`, and duplicated
// with probability `duplicate` (requests and one-way messages; a duplicated request is handled twice,
// its second answer ignored). Faults: cut directed links (a partition is every link across it; a half cut
// is one direction), pause a node (everything addressed to it, and its own work, waits), crash it, restart
// it on its disk, skew its wall clock, make it join or leave.
//
// A request's `reply` is called exactly once, on the sender's node: with the answer; or nullopt when its
// timeout passes first (a lost, cut or unanswered request, a paused target); or nullopt after one network
// latency when the target is known but down (connection refused); or nullopt at once when the target is
// unknown. A call to the sender itself is served at once, never lost (the node's own server over
// loopback: a holder that became its key's decider sends itself its grant's Release). A crashed sender's
// replies are dropped with its other events.
//
// Thread safety: none needed (one simulation thread).
#ifndef RINGLIMIT_TESTS_SIM_SIM_CLUSTER_H_
#define RINGLIMIT_TESTS_SIM_SIM_CLUSTER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "node/grants/grant_driver.h"
#include "node/peer/peer_status.h"
#include "peer.pb.h"
#include "replication/cluster_link.h"
#include "replication/handoff.h"
#include "replication/replicator.h"
#include "ring/clock_offset.h"
#include "ring/membership.h"
#include "tests/sim/checker.h"
#include "tests/sim/sim_node.h"
#include "tests/sim/world.h"

namespace ringlimit::sim {

struct NetworkOptions {
  // One-way latency of a message: uniform in [min_latency, max_latency]. Default: 0.2-2 ms.
  std::chrono::microseconds min_latency{200};
  std::chrono::microseconds max_latency{2'000};
  // Probability that a message is lost. Default: 0.
  double drop = 0;
  // Probability that a message is delivered twice. Default: 0.
  double duplicate = 0;
};

struct SimOptions {
  // --- Affects behaviour ---
  // Node slots n1..nN (some may start later, or never). REQUIRES: >= 1. Default: 5.
  size_t slots = 5;
  // Virtual nodes per member (the product's default is 128; fewer keep runs fast). Default: 32.
  uint32_t vnodes = 32;
  replication::ReplicatorOptions replication;
  replication::HandoffOptions handoff;
  ring::MembershipOptions membership;
  // Forwarder: timeout of one forwarded check, and the nodes tried (ForwarderOptions). Default: 500 ms, 2.
  std::chrono::milliseconds forward_timeout{500};
  uint32_t max_attempts = 2;
  // Sends of a timed-out forwarded check to the same node (ForwarderOptions::timeout_retries). Default: 1.
  uint32_t timeout_retries = 1;
  // The max-offset rule (ClusterOptions::clock, --max-clock-offset-ms). Default: 500 ms.
  ring::ClockOffsetOptions clock{};
  // The durable tier's flush interval (--flush-interval-ms): what a crash loses. Default: 100 ms.
  std::chrono::milliseconds flush_interval{100};
  // How long a node that has left waits for its own checks before it exits anyway. Default: 5 s.
  std::chrono::milliseconds drain_timeout{5'000};
  // --failure-mode closed (with replication.mode sync, replication.ack_majority and handoff.majority_read, as
  // node.cc sets them): a node reaching only a minority decides nothing, a node holding no copy of a key
  // never decides it, and an admission a majority of its holders did not acknowledge is answered 503
  // (kRefused). Default: false (open).
  bool closed = false;
  // Call HandoffManager::OnMembersChanged after membership events, as node/server/node.cc does (through
  // Cluster::SetMembersListener). Default: true.
  bool notify_members_changed = true;
  // --grants: the quota grants' driver on every node (SimNode). Default: off, at the product's defaults.
  cluster::GrantDriverOptions grants;
  NetworkOptions network;
};

class SimCluster {
 public:
  SimCluster(uint64_t seed, SimOptions options, std::vector<SimKey> keys);
  ~SimCluster();

  SimCluster(const SimCluster&) = delete;
  SimCluster& operator=(const SimCluster&) = delete;

  [[nodiscard]] World& world() { return world_; }
  [[nodiscard]] Checker& checker() { return checker_; }
  [[nodiscard]] const Checker& checker() const { return checker_; }
  [[nodiscard]] const SimOptions& options() const { return options_; }
  [[nodiscard]] NetworkOptions& network() { return options_.network; }

  [[nodiscard]] size_t size() const { return nodes_.size(); }
  [[nodiscard]] static std::string IdOf(int slot) { return "n" + std::to_string(slot + 1); }
  [[nodiscard]] static std::string AddressOf(int slot) { return "sim/" + IdOf(slot); }
  // The slot of member `id` or peer address `address`; -1 when none.
  [[nodiscard]] int SlotOf(std::string_view id) const;
  [[nodiscard]] int SlotOfAddress(std::string_view address) const;
  // The running node of `slot` (null when down or exited).
  [[nodiscard]] SimNode* node(int slot) const { return nodes_[slot].get(); }
  [[nodiscard]] std::vector<int> Running() const;

  // --- Faults -----------------------------------------------------------------------------------------
  // Starts (or restarts, on its disk) `slot`, joining through `seeds` (empty: alone).
  void Start(int slot, const std::vector<int>& seeds);
  // kill -9: memory lost, disk kept, checks that entered there are lost.
  void Crash(int slot);
  void Pause(int slot);
  void Resume(int slot);
  // Graceful leave; the node exits once done.
  void Leave(int slot);
  // Cuts (or restores) the directed link from -> to.
  void Cut(int from, int to, bool cut);
  // Cuts every link between `side` and the other slots, both ways.
  void Partition(const std::vector<int>& side, bool cut);
  void HealLinks() { cut_.clear(); }
  [[nodiscard]] bool IsCut(int from, int to) const { return cut_.count({from, to}) > 0; }
  // The wall-clock skew of `slot` (kept across restarts).
  void SetSkew(int slot, std::chrono::nanoseconds skew) { skew_[slot] = skew; }
  [[nodiscard]] std::chrono::nanoseconds skew(int slot) const { return skew_[slot]; }

  // --- Clients ----------------------------------------------------------------------------------------
  // A client sends a check of key `key` to `entry`.
  void ClientCheck(size_t key, int entry);

  // --- Network (for the nodes) ------------------------------------------------------------------------
  void SendMembership(int from, const ring::Outgoing& outgoing);
  void Request(int from, std::string_view to_id, peer::Method method, std::string payload,
               std::chrono::milliseconds timeout, replication::ClusterLink::Reply reply);
  // The same to the member at peer address `to_address`, answered with the kind of a failure as the peer
  // transport reports it (ForwardHost::Call): kTimeout when nothing came back within `timeout` (lost,
  // cut, or the receiver is paused), kUnavailable when the receiver is down or unknown, kRemoteError when
  // its handler refused.
  using CallDone = std::function<void(peer::PeerResult result)>;
  void Call(int from, std::string_view to_address, peer::Method method, std::string payload,
            std::chrono::milliseconds timeout, CallDone done);
  // Call's `done` of a forwarded check, wrapped to trace where it went and what came back (tracing only).
  CallDone TracedForward(int from, std::string_view to_address, const std::string& payload, CallDone done);

  // --- Observation ------------------------------------------------------------------------------------
  // Every running node has joined, holds a ring with exactly the running non-leaving nodes (the same
  // everywhere), sees each of them alive, and has no handoff in progress.
  [[nodiscard]] bool Settled() const;

 private:
  MonoTime Latency();
  // Ends the life of `slot` (crash or exit): its clients' checks are lost, its events dropped.
  void Stop(int slot);

  SimOptions options_;
  World world_;
  Checker checker_;
  std::vector<Disk> disks_;
  std::vector<std::chrono::nanoseconds> skew_;
  std::vector<std::unique_ptr<SimNode>> nodes_;
  std::set<std::pair<int, int>> cut_;         // directed (from, to)
  std::vector<std::set<uint64_t>> arriving_;  // per slot: client checks queued for it, not received yet
};

}  // namespace ringlimit::sim

#endif  // RINGLIMIT_TESTS_SIM_SIM_CLUSTER_H_
