// Cluster: this node's membership in a ringlimit cluster. It runs the SWIM state machine
// (ring/membership.h) on a strand of its own, drives it with a steady timer (every probe_interval / 4),
// carries its messages over the peer transport (node/peer/: one-way envelopes, METHOD_PING/PING_REQ/ACK),
// and publishes a new RingView into ring() whenever the set of ring members changes.
//
//   Cluster cluster(io, options);
//   forwarder.RegisterHandlers(cluster.server());     // other peer methods, before Start
//   if (Status started = cluster.Start(); !started.ok()) ...started.message()...
//   cluster.ring().Current()->Owner(RingToken(key));  // from any thread
//   cluster.Leave([] { /* left: exit */ });
//
// Clocks: every membership message carries the sender's wall-clock time and every Ack echoes the Ping's,
// so the node estimates each member's clock offset (ring/clock_offset.h) and applies the max-offset rule
// every tick: a node whose clock is off from most members by more than --max-clock-offset-ms is
// "skewed" and decides nothing, passing its checks on to their keys' other holders (ClockRefusal; the
// Forwarder asks). Snapshot().clock shows
// the estimates (GET /v1/cluster, /metrics).
//
// The member record of this node carries incarnation = wall-clock milliseconds at construction, so a
// restarted node outranks the tombstone (dead/left) its previous life left in the others' tables.
//
// Thread safety: after Start, every public method may be called from any thread. Membership state lives
// on the strand; readers get immutable snapshots (Snapshot(), ring()), each a Published value: a
// read costs one atomic load while the value is unchanged, and never takes a lock on the check path.
//
// Lifetime: the io_context must outlive the Cluster and keep running until Stop() returns. Stop() (also
// run by the destructor) must not be called from a thread of the io_context.
#ifndef RINGLIMIT_NODE_CLUSTER_CLUSTER_H_
#define RINGLIMIT_NODE_CLUSTER_CLUSTER_H_

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "node/cluster/cluster_planner.h"
#include "node/peer/peer_options.h"
#include "node/peer/peer_stats.h"
#include "replication/routing_table.h"
#include "ring/clock_offset.h"
#include "ring/membership.h"
#include "ring/ring_view.h"

namespace ringlimit::peer {
class PeerClient;
class PeerServer;
}  // namespace ringlimit::peer

namespace ringlimit::cluster {

struct ClusterOptions {
  // --- Affects behaviour ---

  // This member's id (--node-id). REQUIRES: valid per ValidateNodeId. Default: empty (invalid).
  std::string node_id;
  // The advertised HTTP address "host:port", shown in /v1/cluster. Default: empty.
  std::string http_address;
  // Where the peer server listens (--peer-listen); port 0 picks an ephemeral port. The advertised peer
  // address is "peer_host:<bound port>". Default: 127.0.0.1:0.
  std::string peer_host = "127.0.0.1";
  uint16_t peer_port = 0;
  // The peer address announced to the others instead of peer_host (--advertise-peer): "host" (with the
  // bound port) or "host:port" (e.g. behind NAT or a container's port mapping). Default: empty (peer_host).
  std::string advertise_peer;
  // NAME:PORT names whose addresses are peers to join through (--join-dns; a Kubernetes headless service):
  // resolved at start (their addresses join the seeds; a node no seed answers within 3 s starts alone)
  // and every dns_refresh after (MembershipOptions' SetDiscovered). Default: empty.
  std::vector<std::string> join_dns;
  std::chrono::milliseconds dns_refresh{10'000};
  // Peer addresses of members to join through (--join). Empty: start alone. Default: empty.
  std::vector<std::string> seeds;
  // Virtual nodes of this member (--vnodes). REQUIRES: 1..ring::kMaxVnodes. Default: 128.
  uint32_t vnodes = ring::kDefaultVnodes;
  // Preference-list length (--replicas). REQUIRES: >= 1. Default: 3.
  uint32_t replicas = 3;
  // HMAC secret of the peer handshake (--cluster-secret). Default: empty (no authentication).
  std::string cluster_secret;
  // TLS on the peer port, server and client side (peer::MakeTlsContext: --peer-tls-cert, --peer-tls-key,
  // --peer-tls-ca). Both or neither. Default: null (plain TCP).
  std::shared_ptr<boost::asio::ssl::context> peer_tls_server;
  std::shared_ptr<boost::asio::ssl::context> peer_tls_client;
  // SWIM timings (--probe-interval-ms, --probe-timeout-ms, --suspicion-timeout-ms). Defaults: see
  // ring::MembershipOptions.
  ring::MembershipOptions membership;
  // Clock comparison: the largest offset from the cluster at which this node decides
  // (clock.max_offset, --max-clock-offset-ms; 0 disables the rule) and the estimator's filter.
  // Defaults: see ring::ClockOffsetOptions (500 ms).
  ring::ClockOffsetOptions clock{};
  // How soon after a key's owner stops answering another holder may decide the key: the forwarder's
  // (1 + timeout_retries) * timeout (the node sets it). A pause of this process longer than this, or than
  // half the suspicion timeout, and at least 500 ms, fences it (Paused). Default: 0 (not given: the
  // suspicion timeout alone).
  std::chrono::milliseconds takeover_after{0};
  // Leave(): how long to wait for the `left` announcements to be delivered before reporting done.
  // Default: 2000 ms.
  std::chrono::milliseconds leave_timeout{2000};

  // --- Affects performance ---

  // Exactly one thread runs the io_context: the peer transport's channels and connections use its
  // executor rather than a strand each (PeerServerOptions/PeerClientOptions::single_thread). The node
  // sets it for --threads 1. Default: false.
  bool single_thread = false;
};

// The address to announce for a listener on `port`: `host_or_address` as given when it carries a port
// ("10.0.0.5:7101", "[::1]:7101"), else with `port` appended ("10.0.0.5" -> "10.0.0.5:7101", "::1" ->
// "[::1]:7101").
[[nodiscard]] std::string AdvertisedAddress(std::string_view host_or_address, uint16_t port);

// The "ip:port" addresses `name_and_port` ("NAME:PORT") resolves to now, each once, or what went wrong.
[[nodiscard]] Result<std::vector<std::string>> ResolvePeers(std::string_view name_and_port);

// Returns nullopt when `id` is 1..64 bytes of [A-Za-z0-9._-], else what is wrong.
[[nodiscard]] Status ValidateNodeId(std::string_view id);

// Returns nullopt when every REQUIRES of `options` holds, else what is wrong.
[[nodiscard]] Status Validate(const ClusterOptions& options);

class Cluster {
 public:
  Cluster(boost::asio::io_context& io, ClusterOptions options);
  ~Cluster();

  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  // The peer transport, shared with other components (forwarding). Register handlers on server() before
  // Start; client() may be used from any thread once Start has returned.
  [[nodiscard]] peer::PeerServer& server();
  [[nodiscard]] peer::PeerClient& client();

  // Binds the peer port and starts the membership (alone, or joining through the seeds). InvalidArgument
  // for bad options, IOError when the peer port cannot be bound; the message is for humans.
  [[nodiscard]] Status Start();

  // Stops the timer and the transport without telling anyone (a crash, as far as the others can tell,
  // unless Leave completed first). Blocks until the strand has stopped. Idempotent.
  void Stop();

  // Graceful leave: announces `leaving`, runs the leave preparer (the handoff of this node's ranges) if
  // one is set, then announces `left` to every member directly, and calls `on_left` once every
  // announcement is acknowledged or leave_timeout has passed (on an io_context thread, once). A second
  // call while leaving is ignored (its callback is dropped).
  void Leave(std::function<void()> on_left);
  // Runs `fn` on the cluster's strand `delay` from now, unless Stop() came first (never after Stop returns).
  void After(std::chrono::nanoseconds delay, std::function<void()> fn);

  // Told about every ring this node publishes, with the one it replaces (null for the first), in ring
  // version order, on the cluster's strand: it must not block. Set before Start. A listener takes over
  // publishing the ring into routing(): it must publish every `after` there itself, in the order given
  // (the handoff does, with the route overrides of the change; HandoffManager::OnRingChanged). It is also
  // told, with `before` = the ring without that member, when a member restarted without leaving the ring
  // (`after` is then the current ring again).
  using RingListener = std::function<void(std::shared_ptr<const ring::RingView> before,
                                          std::shared_ptr<const ring::RingView> after)>;
  void SetRingListener(RingListener listener);

  // Told (on the cluster's strand; must not block) whenever a member's record changed: state, address or
  // incarnation. Set before Start.
  void SetMembersListener(std::function<void()> listener);

  // Runs between `leaving` and `left`: hands this node's state over, then calls `ready` (once, from any
  // thread). While it runs the node is still in everyone's ring and keeps serving. Set before Start.
  using LeavePreparer = std::function<void(std::function<void()> ready)>;
  void SetLeavePreparer(LeavePreparer preparer);

  // Constant after Start.
  [[nodiscard]] const std::string& self_id() const { return options_.node_id; }
  [[nodiscard]] const std::string& peer_address() const { return peer_address_; }
  [[nodiscard]] uint16_t peer_port() const;
  [[nodiscard]] const ClusterOptions& options() const { return options_; }

  // The current ring (published on every ring change; its version() is the ring version).
  [[nodiscard]] const ring::RingHolder& ring() const;

  // The routing table of the request path: the cluster publishes the ring (after the ring listener ran,
  // so the handoff's overrides of a change are in before the ring that needs them) and the members into
  // it; the handoff publishes its overrides. Thread-safe.
  [[nodiscard]] replication::RoutingPublisher& routing();

  [[nodiscard]] std::shared_ptr<const ClusterSnapshot> Snapshot() const;

  // Joined (not `joining`), in the ring, and not leaving.
  [[nodiscard]] bool ready() const;

  // Why this node must not decide now -- its clock is off from the cluster's beyond the maximum offset
  // -- or nullopt when it may. One atomic load when it may. It still takes checks and passes them on
  // (Forwarder, "Clock").
  [[nodiscard]] Status ClockRefusal() const;
  // Whether ClockRefusal has a reason now. One atomic load.
  [[nodiscard]] bool ClockSkewed() const;

  // The pause fence: true while this node must not decide because its process was just paused (stopped by
  // the scheduler, a VM or SIGSTOP) -- seen as a gap of more than max(500 ms, min(suspicion timeout / 2,
  // takeover_after)) since its last membership tick, when another holder may have decided its keys -- and for
  // 2 probe intervals after, long enough for one membership round trip to tell it whether it was declared
  // dead meanwhile (then its ranges become incoming: CatchUpAfterDeath). Until then its checks go to their
  // next holder. Two atomic loads and a clock read.
  [[nodiscard]] bool Paused() const;

  // Why this node is on the minority side of the cluster now -- it reaches (alive or leaving, itself
  // included; not suspect) no more than half of the members it knows (those plus the suspect ones and the
  // dead ones not yet forgotten) -- or nullopt. Judged every membership tick and on every membership
  // change, before a ring without newly dead members is published. Under --failure-mode closed such a node
  // decides nothing and refuses checks (Forwarder::RefusesChecks): the majority side takes its keys over once
  // it declares it dead. Suspects count as not reached so that a cut-off node stops deciding as soon as it
  // suspects the others, before it declares them dead and its ring makes it the holder of their keys (the
  // majority side declares it dead no sooner: a suspicion timeout after suspecting it). One atomic load when
  // it is not.
  [[nodiscard]] Status MinorityRefusal() const;

  // The last estimate of `member`'s clock offset (member minus this node), refreshed every membership
  // tick; nullopt when it has not been measured (or not lately). Thread-safe, lock-free: one atomic load of
  // the published table, then a hash lookup.
  [[nodiscard]] std::optional<ring::OffsetEstimate> ClockOffsetOf(std::string_view member) const;

  [[nodiscard]] peer::PeerStats ServerStats() const;
  [[nodiscard]] peer::PeerStats ClientStats() const;

 private:
  struct Core;  // the strand-side state

  const ClusterOptions options_;
  std::string peer_address_;  // set by Start
  bool started_ = false;
  bool stopped_ = false;
  std::shared_ptr<Core> core_;  // also held by its pending handlers
};

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_CLUSTER_CLUSTER_H_
