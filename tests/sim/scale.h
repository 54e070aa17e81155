// Scale: the cluster's membership at hundreds or thousands of nodes, on the deterministic simulator's World.
//
// Every node is a real ring::Membership (ring/membership.h) ticked every probe_interval / 4, as
// node/cluster/cluster.cc ticks it; every message it sends is encoded with ring/membership_wire.h (so the
// byte counts are the wire's), delivered after a random latency, decoded and handed to the receiver's
// Receive. Nothing else of a node runs (no stores, replication or forwarding): this measures the membership
// and its ring publication alone.
//
// One run, in order (RunScale):
//  1. Bootstrap: node 1 starts alone, the others join through it; the run waits until every node knows
//     every other as alive and no node has gossip left to retransmit (not measured).
//  2. Steady state: the payload bytes and messages every node sends per second, over a window that covers
//     several anti-entropy (push-pull) exchanges.
//  3. Join: one more node starts with one member as its seed. Agreement: every live node (the newcomer
//     too) holds every live node as alive, and their ring members are the same.
//  4. Crash: one member stops answering (its life ends). Agreement: every live node holds it as dead.
//     Target: within suspicion_timeout + 10 probe periods of the crash.
//  5. Partition and heal: the live nodes split in two random halves that lose every message between them,
//     until every node holds every node of the other half as dead; then the cut heals. Agreement: every
//     live node holds every live node as alive again.
// "Agreement" is read from the membership's own events (a matrix of who holds whom in which state), checked
// every check_interval, and confirmed at the end of each phase with every live node's Members(); the ring
// agreement compares every live node's RingMembers() (what cluster.cc builds its RingView from) with the
// live members of its side. ringlimit_scale times one RingView::Create of the final ring.
//
// Deterministic: one seed gives the same run (the trace hash covers every event, message and member event).
// Thread safety: none needed; one call runs one simulation on the caller's thread.
#ifndef RINGLIMIT_TESTS_SIM_SCALE_H_
#define RINGLIMIT_TESTS_SIM_SCALE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ring/membership.h"
#include "ring/ring_view.h"

namespace ringlimit::sim {

struct ScaleOptions {
  // Members of the cluster once bootstrapped (the join phase adds one more). REQUIRES: >= 4.
  size_t nodes = 100;
  uint64_t seed = 1;
  // The membership's options; random_seed is drawn per node from the world. Default: the product's.
  ring::MembershipOptions membership{};
  // Virtual nodes per member (the ring view built at the end of each phase). Default: the product's 128.
  uint32_t vnodes = 128;
  // One-way latency of a message, uniform in [min_latency, max_latency]. Default: 0.2-2 ms.
  std::chrono::microseconds min_latency{200};
  std::chrono::microseconds max_latency{2'000};
  // Steady-state window: at least this, and at least three anti-entropy exchanges at this size. Default: 60
  // s.
  std::chrono::milliseconds steady_window{60'000};
  // How often agreement is checked (the resolution of the times printed). Default: 50 ms.
  std::chrono::milliseconds check_interval{50};
  // A phase that has not converged within this fails. Default: 10 minutes of simulated time.
  std::chrono::milliseconds phase_limit{600'000};
  // The bootstrap may take this long (simulated) before it fails. Default: 30 minutes.
  std::chrono::milliseconds bootstrap_limit{1'800'000};
  // Only the bootstrap and the steady state (no join, crash, partition). Default: false.
  bool steady_only = false;
  // Progress of the bootstrap on stderr, every 30 s simulated. Default: false.
  bool progress = false;
};

struct PhaseReport {
  std::string name;
  bool converged = false;
  std::chrono::nanoseconds agreement{};       // from the fault (or start) until every member agreed
  std::chrono::nanoseconds ring_agreement{};  // until every live node's ring members were the same
  uint64_t bytes = 0;                         // payload bytes sent by all nodes during the phase
  uint64_t messages = 0;
  uint64_t ring_changes =
      0;               // ring_changed outputs over all nodes (each one a RingView rebuild in cluster.cc)
  double cpu_s = 0;    // CPU seconds the simulator spent on the phase (not simulated: this machine's)
  std::string detail;  // what was waited for, or why it failed
};

struct ScaleReport {
  size_t nodes = 0;
  bool bootstrapped = false;
  std::chrono::nanoseconds bootstrap{};  // simulated time until the bootstrap converged
  double bootstrap_cpu_s = 0;            // CPU seconds the simulator spent on it
  // Steady state: payload bytes and messages sent per node per second.
  double steady_bytes_per_node_s = 0;
  double steady_messages_per_node_s = 0;
  std::chrono::nanoseconds steady_window{};
  double steady_cpu_s = 0;  // CPU seconds the simulator spent on the steady window
  // The anti-entropy interval the nodes used at this size (observed: full-state pings sent per node).
  double full_state_per_node_s = 0;
  std::vector<PhaseReport> phases;  // join, crash, partition, heal (empty with steady_only)
  // The crash target: suspicion_timeout + 10 * probe_interval.
  std::chrono::nanoseconds death_target{};
  uint64_t id_conflicts = 0;           // IdConflicts reported by any node (none expected)
  std::vector<ring::RingMember> ring;  // a live node's ring members at the end (for timing RingView::Create)
  uint64_t events = 0;
  uint64_t trace_hash = 0;
  std::chrono::nanoseconds simulated{};

  [[nodiscard]] const PhaseReport* phase(const std::string& name) const;
};

// Runs one simulation. Never throws on a failed phase: see PhaseReport::converged.
[[nodiscard]] ScaleReport RunScale(const ScaleOptions& options);

}  // namespace ringlimit::sim

#endif  // RINGLIMIT_TESTS_SIM_SCALE_H_
