#include "node/cluster/cluster.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <future>
#include <map>
#include <mutex>
#include <utility>

#include "node/peer/peer_client.h"
#include "node/peer/peer_server.h"
#include "peer.pb.h"
#include "ring/membership_wire.h"

namespace ringlimit::cluster {

namespace net = boost::asio;
using ring::MemberState;
using ring::MonoTime;

namespace {

constexpr size_t kMaxNodeIdBytes = 64;

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

MonoTime Now() {
  return std::chrono::duration_cast<MonoTime>(std::chrono::steady_clock::now().time_since_epoch());
}

int64_t WallClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t WallClockMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

peer::PeerServerOptions ServerOptions(const ClusterOptions& options) {
  peer::PeerServerOptions server;
  server.address = options.peer_host;
  server.port = options.peer_port;
  server.cluster_secret = options.cluster_secret;
  server.framing.tls = options.peer_tls_server;
  server.single_thread = options.single_thread;
  return server;
}

peer::PeerClientOptions ClientOptions(const ClusterOptions& options) {
  peer::PeerClientOptions client;
  client.cluster_secret = options.cluster_secret;
  client.framing.tls = options.peer_tls_client;
  client.single_thread = options.single_thread;
  // A member that crashed and came back must be reachable again quickly: its probes and the seed's
  // answers to its join go through this client.
  client.connect_timeout = std::max(options.membership.probe_timeout, std::chrono::milliseconds(200));
  client.backoff_max = std::chrono::milliseconds(500);
  return client;
}

}  // namespace

std::optional<std::string> ValidateNodeId(std::string_view id) {
  if (id.empty() || id.size() > kMaxNodeIdBytes) return "node id: must be 1 to 64 bytes";
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return "node id: only letters, digits, '.', '_' and '-' are allowed";
  }
  return std::nullopt;
}

std::optional<std::string> ValidateClusterOptions(const ClusterOptions& options) {
  if (auto error = ValidateNodeId(options.node_id)) return error;
  if (options.vnodes < 1 || options.vnodes > ring::kMaxVnodes)
    return "vnodes: must be between 1 and " + std::to_string(ring::kMaxVnodes);
  if (options.vnodes > options.membership.max_vnodes) {
    return "vnodes: " + std::to_string(options.vnodes) + " is above --max-member-vnodes " +
           std::to_string(options.membership.max_vnodes) + " (the other members would refuse this node)";
  }
  if (options.replicas < 1) return "replicas: must be at least 1";
  if (options.leave_timeout.count() <= 0) return "leave timeout: must be positive";
  if (Status status = ring::Validate(options.membership); !status.ok()) return status.message();
  if (Status status = ring::Validate(options.clock); !status.ok()) return status.message();
  return std::nullopt;
}

const ring::MemberInfo* ClusterSnapshot::Find(std::string_view id) const {
  auto it = std::lower_bound(members.begin(), members.end(), id,
                             [](const ring::MemberInfo& m, std::string_view v) { return m.id < v; });
  return it != members.end() && it->id == id ? &*it : nullptr;
}

std::vector<size_t> ClusterSnapshot::CountByState() const {
  std::vector<size_t> counts(static_cast<size_t>(MemberState::kLeft) + 1, 0);
  for (const auto& m : members) ++counts[static_cast<size_t>(m.state)];
  return counts;
}

// Everything below `strand` is touched only on the strand, except where noted.
struct Cluster::Core : std::enable_shared_from_this<Core> {
  Core(net::io_context& io_in, const ClusterOptions& options_in)
      : io(io_in),
        options(options_in),
        strand(net::make_strand(io_in)),
        timer(strand),
        leave_timer(strand),
        dns_timer(strand),
        clocks(options_in.clock),
        server(io_in, ServerOptions(options_in)),
        client(io_in, ClientOptions(options_in)) {}

  void RegisterHandlers();
  void Begin(ring::MemberInfo self, std::vector<std::string> seeds, std::vector<std::string> discovered);
  void Arm();
  // --join-dns: resolves the names again every dns_refresh (off the strand: getaddrinfo blocks), then
  // hands the addresses to the membership on the strand.
  void ArmDns();
  void OnTick();
  void Receive(ring::Message message, int64_t received_wall_ns);
  void Process(ring::MembershipOutput out);
  // Cluster::ready.
  bool Ready() const {
    std::shared_ptr<const ClusterSnapshot> snap;
    {
      const std::lock_guard<std::mutex> lock(snapshot_mutex);
      snap = snapshot;
    }
    // The routing table gets its first ring from the handoff's executor, a moment after the snapshot:
    // ready only once checks are routed (a check before that is refused with 503 not_ready).
    return snap->joined && snap->self.state == MemberState::kAlive && snap->ring != nullptr &&
           snap->ring->Find(options.node_id) != nullptr && routing.Snapshot()->ring != nullptr;
  }
  // Whether the first readiness was logged.
  bool ready_logged = false;
  // When each id conflict (id and refused address) was last logged.
  std::map<std::string, MonoTime> conflicts_logged;
  // Applies the max-offset rule; logs and publishes a change of the clock's health.
  void JudgeClock();
  // Whether this node reaches a majority of the members it knows (MinorityRefusal); logs a change.
  void JudgeQuorum();
  void Publish();
  void NoticeRestarts();
  void CatchUpAfterDeath();
  void DoLeave(std::function<void()> on_left);
  void FinishLeave();
  void LeaveDone();

  // Constant after construction.
  net::io_context& io;
  const ClusterOptions options;  // a copy: pending handlers may keep the Core alive past the Cluster
  ring::RingHolder ring;         // thread-safe; published only from the strand
  // Thread-safe; the members are published only from the strand, the ring by the ring listener (the
  // handoff, with its overrides), or from the strand when there is none.
  replication::RoutingPublisher routing;
  std::vector<ring::MemberInfo> routed_members;  // the members last published into `routing`
  net::strand<net::io_context::executor_type> strand;

  net::steady_timer timer;
  net::steady_timer leave_timer;
  net::steady_timer dns_timer;
  std::optional<ring::Membership> membership;
  uint64_t ring_version = 0;
  bool stopped = false;
  bool leaving = false;
  size_t leave_pending = 0;
  std::function<void()> on_left;
  std::shared_ptr<const ring::RingView> published;  // the last view handed to ring_listener
  std::map<std::string, uint64_t> incarnations;     // of the ring members, as last seen
  ring::ClockOffsets clocks;
  MonoTime last_clock_pings{};  // when members without a clock estimate were last pinged for one

  // Set before Start, then read on the strand only.
  RingListener ring_listener;
  std::function<void()> members_listener;
  LeavePreparer leave_preparer;

  // Thread-safe on their own.
  peer::PeerServer server;
  peer::PeerClient client;

  // Written on the strand, read anywhere: whether the clock is judged skewed (ClockRefusal).
  std::atomic<bool> clock_skewed{false};
  // Written on the strand, read anywhere: the last quorum judgement (MinorityRefusal).
  std::atomic<bool> in_minority{false};
  std::atomic<size_t> minority_reached{0};
  std::atomic<size_t> minority_known{0};
  // The pause fence (Cluster::Paused): the steady time (ns) of the last membership tick (0: none yet), and
  // until when this node stays fenced after a gap was seen. Any thread.
  std::atomic<int64_t> last_tick_ns{0};
  std::atomic<int64_t> fenced_until_ns{0};
  // Whether the gap since the last tick says this process was paused; fences it if so. Any thread.
  bool SeesPause(int64_t now_ns) {
    const int64_t last = last_tick_ns.load(std::memory_order_acquire);
    if (last == 0 || now_ns - last <= PauseGapNs()) return false;
    const int64_t until = now_ns + FenceWindowNs();
    int64_t current = fenced_until_ns.load(std::memory_order_relaxed);
    while (current < until && !fenced_until_ns.compare_exchange_weak(current, until)) {
    }
    if (current < now_ns) {  // a new fence, not one already running
      spdlog::warn(
          "cluster: {} ms since the last membership tick: this process was paused; not deciding for "
          "{} ms, until membership has caught up",
          (now_ns - last) / 1'000'000, FenceWindowNs() / 1'000'000);
    }
    return true;
  }
  // A gap this long between ticks (every probe_interval / 4) means the process was stopped, not busy, and
  // long enough for another holder to have decided its keys: its forwards timed out (takeover_after), or
  // the others suspected it (half the suspicion timeout); at least 500 ms. (Within a shorter pause the
  // senders are still waiting for it or retrying it, and a check whose sender gave up is not decided:
  // Forwarder, "Deadlines".)
  int64_t PauseGapNs() const {
    int64_t gap = std::chrono::nanoseconds(options.membership.suspicion_timeout).count() / 2;
    if (options.takeover_after.count() > 0)
      gap = std::min<int64_t>(gap, std::chrono::nanoseconds(options.takeover_after).count());
    return std::max<int64_t>(500'000'000, gap);
  }
  // Long enough for a probe round trip (which tells a node declared dead that it was).
  int64_t FenceWindowNs() const {
    return 2 * std::chrono::nanoseconds(options.membership.probe_interval).count();
  }

  // The members' clock offsets as estimated at the last tick (ClockOffsetOf). Protected by offsets_mutex.
  mutable std::mutex offsets_mutex;
  std::map<std::string, ring::OffsetEstimate, std::less<>> offsets;

  // Protected by snapshot_mutex (a pointer copy only).
  mutable std::mutex snapshot_mutex;
  std::shared_ptr<const ClusterSnapshot> snapshot = std::make_shared<ClusterSnapshot>();
};

void Cluster::Core::RegisterHandlers() {
  for (uint32_t method : {peer::METHOD_PING, peer::METHOD_PING_REQ, peer::METHOD_ACK}) {
    server.Register(
        method, [weak = weak_from_this(), method](std::string payload, peer::PeerResponder responder) {
          const int64_t received_wall_ns = WallClockNs();  // as early as possible: it bounds the exchange
          auto message = ring::DecodeMembershipMessage(method, payload);
          // Requests (the final `left` announcements) are acknowledged once queued for the strand.
          if (!responder.one_way()) responder.Reply({});
          if (!message) return;
          auto self = weak.lock();
          if (!self) return;
          net::post(self->strand, [self, m = std::move(*message), received_wall_ns]() mutable {
            self->Receive(std::move(m), received_wall_ns);
          });
        });
  }
}

void Cluster::Core::Begin(ring::MemberInfo self, std::vector<std::string> seeds,
                          std::vector<std::string> discovered) {
  ring::MembershipOptions membership_options = options.membership;
  if (!options.join_dns.empty() && membership_options.join_alone_after.count() == 0) {
    membership_options.join_alone_after = std::chrono::milliseconds(3'000);
  }
  membership.emplace(membership_options, std::move(self));
  membership->SetDiscovered(std::move(discovered));
  Process(membership->Start(Now(), seeds));
  Arm();
  ArmDns();
}

void Cluster::Core::ArmDns() {
  if (stopped || options.join_dns.empty()) return;
  dns_timer.expires_after(options.dns_refresh);
  dns_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->stopped) return;
    // getaddrinfo blocks: resolved on a thread of the pool, the result brought back to the strand.
    net::post(self->io, [self] {
      std::vector<std::string> found;
      for (const std::string& name : self->options.join_dns) {
        auto resolved = ResolvePeers(name);
        if (!resolved) {
          spdlog::warn("cluster: --join-dns {}: {}", name, resolved.error());
          continue;
        }
        found.insert(found.end(), resolved->begin(), resolved->end());
      }
      net::post(self->strand, [self, found = std::move(found)]() mutable {
        if (self->stopped) return;
        self->membership->SetDiscovered(std::move(found));
        self->ArmDns();
      });
    });
  });
}

void Cluster::Core::Arm() {
  if (stopped) return;
  timer.expires_after(std::max(options.membership.probe_interval / 4, std::chrono::milliseconds(1)));
  timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->stopped) return;
    self->OnTick();
  });
}

void Cluster::Core::OnTick() {
  const int64_t now_ns = SteadyNs();
  static_cast<void>(SeesPause(now_ns));
  last_tick_ns.store(now_ns, std::memory_order_release);
  Process(membership->Tick(Now()));
  JudgeClock();
  JudgeQuorum();
  Arm();
}

void Cluster::Core::JudgeQuorum() {
  const ring::Reach reach = ring::ReachOf(membership->Members());
  const size_t known = reach.known;
  const size_t reached = reach.reached;
  const bool minority = reach.minority();
  if (minority_reached.load(std::memory_order_relaxed) == reached &&
      minority_known.load(std::memory_order_relaxed) == known &&
      in_minority.load(std::memory_order_relaxed) == minority) {
    return;
  }
  minority_reached.store(reached, std::memory_order_relaxed);
  minority_known.store(known, std::memory_order_relaxed);
  if (in_minority.exchange(minority, std::memory_order_acq_rel) != minority) {
    if (minority) {
      spdlog::warn("cluster: this node reaches {} of the {} members it knows: a minority", reached, known);
    } else {
      spdlog::info("cluster: this node reaches {} of the {} members it knows: a majority again", reached,
                   known);
    }
  }
}

void Cluster::Core::Receive(ring::Message message, int64_t received_wall_ns) {
  if (stopped || !membership) return;
  Process(membership->Receive(Now(), message));
  // After the membership's events (which forget the clocks of members that joined or came back).
  if (message.type == ring::MessageType::kAck && message.echo_wall_ns != 0 && message.wall_ns != 0 &&
      message.from != options.node_id) {
    clocks.Add(message.from, Now(),
               ring::ClockSample{ring::WallTime(message.echo_wall_ns), ring::WallTime(message.wall_ns),
                                 ring::WallTime(received_wall_ns)});
  }
}

void Cluster::Core::JudgeClock() {
  std::vector<std::string> others;
  std::vector<std::string> unmeasured_addresses;
  const MonoTime now = Now();
  for (const ring::MemberInfo& m : membership->Members()) {
    if (m.id == options.node_id || !ring::IsInRing(m.state)) continue;
    others.push_back(m.id);
    if (!clocks.Estimate(m.id, now)) unmeasured_addresses.push_back(m.peer_address);
  }
  const ring::ClockHealth before = clocks.health();
  const ring::ClockHealth after = clocks.Evaluate(now, others);
  std::map<std::string, ring::OffsetEstimate, std::less<>> estimates;
  for (const std::string& id : others) {
    if (std::optional<ring::OffsetEstimate> estimate = clocks.Estimate(id, now))
      estimates.emplace(id, *estimate);
  }
  // A member just met, or not probed for long (a large cluster probes each member rarely), is pinged for
  // its clock at once rather than at its turn: forwarded checks from it are judged against its offset
  // (Forwarder, "Deadlines"). The Ack, unknown to the membership (seq 0), only feeds the estimator.
  if (!unmeasured_addresses.empty() && now - last_clock_pings >= options.membership.probe_interval) {
    last_clock_pings = now;
    for (const std::string& address : unmeasured_addresses) {
      ring::Message ping;
      ping.type = ring::MessageType::kPing;
      ping.from = options.node_id;
      ping.from_address = membership->self().peer_address;
      ping.wall_ns = WallClockNs();
      ring::WireMessage wire = ring::EncodeMembershipMessage(ping);
      (void)client.Send(address, wire.method, std::move(wire.payload));
    }
  }
  {
    const std::lock_guard<std::mutex> lock(offsets_mutex);
    offsets.swap(estimates);
  }
  clock_skewed.store(after == ring::ClockHealth::kSkewed, std::memory_order_release);
  if (after == before) return;
  if (after == ring::ClockHealth::kSkewed) {
    spdlog::error("cluster: this node's clock is off: it refuses to decide checks until it is back: {}",
                  clocks.reason());
  } else if (before == ring::ClockHealth::kSkewed) {
    spdlog::warn("cluster: this node's clock is back within the maximum offset; deciding again: {}",
                 clocks.reason());
  } else {
    spdlog::info("cluster: clock {}: {}", ring::ClockHealthName(after), clocks.reason());
  }
  Publish();
}

void Cluster::Core::Process(ring::MembershipOutput out) {
  for (ring::Outgoing& outgoing : out.messages) {
    outgoing.message.wall_ns = WallClockNs();
    ring::WireMessage wire = ring::EncodeMembershipMessage(outgoing.message);
    // Best effort: a lost message is what SWIM is built to tolerate.
    (void)client.Send(outgoing.to_address, wire.method, std::move(wire.payload));
  }
  for (const ring::MemberEvent& event : out.events) {
    const ring::MemberInfo& m = event.member;
    if (m.id == options.node_id && event.kind == ring::MemberEventKind::kJoined) continue;
    spdlog::info("cluster: {} is {} (incarnation {}, peer {})", m.id, ring::MemberStateName(m.state),
                 m.incarnation, m.peer_address);
    if ((event.kind == ring::MemberEventKind::kLeft || event.kind == ring::MemberEventKind::kForgotten) &&
        m.id != options.node_id) {
      client.Disconnect(m.peer_address);
    }
    // Dead, gone or back from a restart: its clock may not be the one measured.
    if (event.kind != ring::MemberEventKind::kSuspect && event.kind != ring::MemberEventKind::kLeaving &&
        m.id != options.node_id) {
      clocks.Forget(m.id);
    }
  }
  for (const ring::IdConflict& conflict : out.id_conflicts) {
    // Once per few seconds per pair: a refused node retries its join every second.
    const MonoTime now = Now();
    auto [it, first] = conflicts_logged.try_emplace(conflict.id + " " + conflict.refused, now);
    if (!first && now - it->second < std::chrono::seconds(5)) continue;
    it->second = now;
    if (conflicts_logged.size() > 1024) conflicts_logged.clear();
    if (conflict.id == options.node_id) {
      spdlog::error(
          "cluster: this node's id {} is taken by the live member at {}: not joining until that member is "
          "gone; give this node another --node-id",
          conflict.id, conflict.held_by);
    } else {
      spdlog::error("cluster: refused the node at {} announcing id {}: the live member at {} holds that id",
                    conflict.refused, conflict.id, conflict.held_by);
    }
  }
  // Before the ring without the members just declared dead is published: a node that now reaches only a
  // minority must not decide keys whose other holders that smaller ring leaves on its side.
  if (!out.events.empty()) JudgeQuorum();
  std::shared_ptr<const ring::RingView> new_ring;
  if (out.ring_changed) {
    auto built = ring::RingView::Create(++ring_version, membership->RingMembers());
    if (built.ok()) {
      new_ring = std::move(built).value();
      spdlog::info("cluster: ring version {} with {} members", ring_version, new_ring->members().size());
    } else {
      spdlog::error("cluster: cannot build the ring: {}", built.status().message());
    }
  }
  // The members first: the listener's work (handoffs) looks them up in the snapshot.
  if (!out.messages.empty() || !out.events.empty() || out.ring_changed || !out.id_conflicts.empty())
    Publish();
  if (new_ring != nullptr) {
    // The routing table gets the new ring only together with the handoff route overrides of the change:
    // the listener (the handoff) publishes both as one table, on its own executor. A check routed before
    // that follows the old ring, which the old overrides agree with. A ring published before its
    // overrides left a moment in which a node decided a range it gains from what it had, before its
    // previous owner's push. Without a listener, the ring is published here.
    if (ring_listener) {
      ring_listener(std::exchange(published, new_ring), new_ring);
    } else {
      routing.SetRing(new_ring);
    }
    ring.Publish(new_ring);
    Publish();
  }
  if (!out.events.empty() || new_ring != nullptr) NoticeRestarts();
  if (out.declared_dead) CatchUpAfterDeath();
  if (!ready_logged && Ready()) {
    // When /readyz turns 200 (a joining node: once a seed answered and its ranges are routed).
    ready_logged = true;
    spdlog::info("cluster: ready: joined, in the ring, checks routed (/readyz 200)");
  }
}

// This node was declared dead (paused, or cut off, past failure detection) and refuted it. Its own ring
// never lost it, but the others' did: their successors decided its ranges meanwhile, and they will hand them
// back when they see it alive again, as to a joining node. So take its ranges as incoming, like a joining
// node, instead of deciding them from its memory from before the pause: tell the listener as if it had left
// and joined again.
void Cluster::Core::CatchUpAfterDeath() {
  const std::shared_ptr<const ring::RingView> current = ring.Current();
  if (!ring_listener || current == nullptr || current->Find(options.node_id) == nullptr) return;
  auto without = current->Without(options.node_id);
  if (!without.ok()) return;
  spdlog::warn(
      "cluster: this node was declared dead and refuted it: waiting for its ranges to be handed back");
  ring_listener(std::move(without).value(), current);
}

// A member that restarted before anyone declared it dead comes back with a much higher incarnation (its
// start time in ms; a refutation adds 1) without ever leaving the ring: the ring does not change, yet it
// lost its memory tier and must be handed its ranges back like a joining node (which is how it sees
// itself: every range it owns is incoming). Tell the listener as if it had left and joined again.
void Cluster::Core::NoticeRestarts() {
  constexpr uint64_t kRestartJump = 1000;  // far more refutations than a live member ever makes
  const std::shared_ptr<const ring::RingView> current = ring.Current();
  std::vector<std::string> restarted;
  std::map<std::string, uint64_t> seen;
  for (const ring::MemberInfo& m : membership->Members()) {
    if (m.id == options.node_id || !ring::IsInRing(m.state)) continue;
    seen.emplace(m.id, m.incarnation);
    auto it = incarnations.find(m.id);
    if (it != incarnations.end() && m.incarnation > it->second + kRestartJump && current != nullptr &&
        current->Find(m.id) != nullptr) {
      restarted.push_back(m.id);
    }
  }
  incarnations = std::move(seen);
  if (!ring_listener || current == nullptr) return;
  for (const std::string& id : restarted) {
    auto without = current->Without(id);
    if (!without.ok()) continue;
    spdlog::info("cluster: {} restarted without leaving the ring: handing its ranges back", id);
    ring_listener(std::move(without).value(), current);
  }
}

void Cluster::Core::Publish() {
  auto snap = std::make_shared<ClusterSnapshot>();
  snap->self = membership->self();
  snap->members = membership->Members();
  snap->ring = ring.Current();
  snap->joined = membership->joined();
  snap->stats = membership->stats();
  snap->clock.health = clocks.health();
  snap->clock.reason = clocks.reason();
  snap->clock.median_offset = clocks.median_offset();
  const MonoTime now = Now();
  for (const ring::MemberInfo& m : snap->members) {
    if (m.id == options.node_id) continue;
    if (std::optional<ring::OffsetEstimate> estimate = clocks.Estimate(m.id, now))
      snap->clock.offsets.emplace(m.id, *estimate);
  }
  if (snap->members != routed_members) {  // a new routing table only when a member changed
    routed_members = snap->members;
    routing.SetMembers(std::make_shared<const std::vector<ring::MemberInfo>>(snap->members));
    if (members_listener) members_listener();
  }
  std::lock_guard lock(snapshot_mutex);
  snapshot = std::move(snap);
}

void Cluster::Core::DoLeave(std::function<void()> callback) {
  if (stopped || leaving || !membership) return;
  leaving = true;
  on_left = std::move(callback);
  Process(membership->Leave(Now()));
  if (!leave_preparer) {
    FinishLeave();
    return;
  }
  spdlog::info("cluster: leaving; handing this node's ranges over first");
  // The preparer may call back on any thread: come back to the strand.
  leave_preparer([weak = weak_from_this()] {
    if (auto self = weak.lock()) net::post(self->strand, [self] { self->FinishLeave(); });
  });
}

// Announces `left` to every member. Those announcements are requests, so each one's answer says it
// arrived.
void Cluster::Core::FinishLeave() {
  if (stopped || !membership) return;
  ring::MembershipOutput out = membership->FinishLeave(Now());
  std::vector<ring::Outgoing> finals = std::move(out.messages);
  out.messages.clear();
  Process(std::move(out));
  Publish();
  leave_pending = finals.size();
  spdlog::info("cluster: leaving; announcing `left` to {} member(s)", leave_pending);
  if (leave_pending == 0) {
    net::post(strand, [self = shared_from_this()] { self->LeaveDone(); });
    return;
  }
  leave_timer.expires_after(options.leave_timeout);
  leave_timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec) return;
    spdlog::warn("cluster: {} `left` announcement(s) unacknowledged after {} ms", self->leave_pending,
                 self->options.leave_timeout.count());
    self->LeaveDone();
  });
  for (ring::Outgoing& outgoing : finals) {
    ring::WireMessage wire = ring::EncodeMembershipMessage(outgoing.message);
    client.Call(
        outgoing.to_address, wire.method, std::move(wire.payload),
        [self = shared_from_this()](peer::PeerResult result) {
          net::dispatch(self->strand, [self, ok = result.ok()] {
            (void)ok;  // delivered or not, this member will learn it from the others
            if (self->leave_pending > 0 && --self->leave_pending == 0) self->LeaveDone();
          });
        },
        peer::CallOptions{.timeout = options.leave_timeout});
  }
}

void Cluster::Core::LeaveDone() {
  if (stopped) return;
  leave_timer.cancel();
  leave_pending = 0;
  if (auto callback = std::exchange(on_left, nullptr)) {
    spdlog::info("cluster: left the cluster");
    callback();
  }
}

Cluster::Cluster(net::io_context& io, ClusterOptions options)
    : options_(std::move(options)), core_(std::make_shared<Core>(io, options_)) {
  core_->RegisterHandlers();
}

Cluster::~Cluster() { Stop(); }

peer::PeerServer& Cluster::server() { return core_->server; }
peer::PeerClient& Cluster::client() { return core_->client; }

boost::system::result<std::vector<std::string>, std::string> ResolvePeers(std::string_view name_and_port) {
  const size_t colon = name_and_port.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == name_and_port.size()) {
    return std::string("expected NAME:PORT");
  }
  net::io_context io;
  net::ip::tcp::resolver resolver(io);
  boost::system::error_code ec;
  const auto results = resolver.resolve(name_and_port.substr(0, colon), name_and_port.substr(colon + 1), ec);
  if (ec) return ec.message();
  std::vector<std::string> out;
  for (const auto& entry : results) {
    const net::ip::tcp::endpoint endpoint = entry.endpoint();
    const std::string host = endpoint.address().is_v6() ? "[" + endpoint.address().to_string() + "]"
                                                        : endpoint.address().to_string();
    std::string address = host + ":" + std::to_string(endpoint.port());
    if (std::find(out.begin(), out.end(), address) == out.end()) out.push_back(std::move(address));
  }
  return out;
}

std::string AdvertisedAddress(std::string_view host_or_address, uint16_t port) {
  // "host:port", "[v6]:port" as given; "host", "[v6]" or a bare IPv6 address with the port appended.
  const size_t colon = host_or_address.rfind(':');
  const bool has_port = colon != std::string_view::npos &&
                        (host_or_address.find(':') == colon || host_or_address.starts_with('[')) &&
                        colon + 1 < host_or_address.size() &&
                        host_or_address.find_first_not_of("0123456789", colon + 1) == std::string_view::npos;
  if (has_port) return std::string(host_or_address);
  if (host_or_address.find(':') != std::string_view::npos && !host_or_address.starts_with('['))
    return "[" + std::string(host_or_address) + "]:" + std::to_string(port);
  return std::string(host_or_address) + ":" + std::to_string(port);
}

boost::system::result<void, std::string> Cluster::Start() {
  if (auto error = ValidateClusterOptions(options_)) return *error;
  if (auto started = core_->server.Start(); !started) {
    return "cannot listen for peers on " + options_.peer_host + ":" + std::to_string(options_.peer_port) +
           ": " + started.error().message();
  }
  peer_address_ = AdvertisedAddress(
      options_.advertise_peer.empty() ? options_.peer_host : options_.advertise_peer, core_->server.port());
  ring::MemberInfo self;
  self.id = options_.node_id;
  self.http_address = options_.http_address;
  self.peer_address = peer_address_;
  self.vnodes = options_.vnodes;
  self.incarnation = WallClockMs();
  spdlog::info("cluster: member {} (peer {}, {} vnodes){}", self.id, peer_address_, self.vnodes,
               options_.seeds.empty() ? ", starting alone" : ", joining");
  std::vector<std::string> seeds = options_.seeds;
  std::vector<std::string> discovered;
  for (const std::string& name : options_.join_dns) {
    auto resolved = ResolvePeers(name);
    if (!resolved) {
      spdlog::warn("cluster: --join-dns {}: {} (tried again every {} ms)", name, resolved.error(),
                   options_.dns_refresh.count());
      continue;
    }
    spdlog::info("cluster: --join-dns {}: {} address(es)", name, resolved->size());
    discovered.insert(discovered.end(), resolved->begin(), resolved->end());
  }
  for (const std::string& address : discovered) {
    if (address != peer_address_) seeds.push_back(address);
  }
  net::post(core_->strand, [core = core_, self = std::move(self), seeds = std::move(seeds),
                            discovered = std::move(discovered)]() mutable {
    core->Begin(std::move(self), std::move(seeds), std::move(discovered));
  });
  started_ = true;
  return {};
}

void Cluster::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (!started_) {  // nothing runs on the strand (and the io_context may not run at all)
    core_->server.Stop();
    core_->client.Stop();
    return;
  }
  auto done = std::make_shared<std::promise<void>>();
  auto future = done->get_future();
  net::post(core_->strand, [core = core_, done] {
    core->stopped = true;
    core->timer.cancel();
    core->leave_timer.cancel();
    core->dns_timer.cancel();
    done->set_value();
  });
  // If the io_context is no longer running, the posted work never runs: don't wait forever.
  if (future.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    spdlog::warn("cluster: stop did not reach the strand (io_context stopped?)");
  }
  core_->server.Stop();
  core_->client.Stop();
}

void Cluster::SetRingListener(RingListener listener) { core_->ring_listener = std::move(listener); }

void Cluster::SetMembersListener(std::function<void()> listener) {
  core_->members_listener = std::move(listener);
}

void Cluster::SetLeavePreparer(LeavePreparer preparer) { core_->leave_preparer = std::move(preparer); }

void Cluster::Leave(std::function<void()> on_left) {
  net::post(core_->strand,
            [core = core_, on_left = std::move(on_left)]() mutable { core->DoLeave(std::move(on_left)); });
}

const ring::RingHolder& Cluster::ring() const { return core_->ring; }

replication::RoutingPublisher& Cluster::routing() { return core_->routing; }

uint16_t Cluster::peer_port() const { return core_->server.port(); }

std::shared_ptr<const ClusterSnapshot> Cluster::Snapshot() const {
  std::lock_guard lock(core_->snapshot_mutex);
  return core_->snapshot;
}

bool Cluster::ready() const { return core_->Ready(); }

bool Cluster::Paused() const {
  const int64_t now_ns = SteadyNs();
  if (core_->SeesPause(now_ns)) return true;
  return now_ns < core_->fenced_until_ns.load(std::memory_order_acquire);
}

std::optional<ring::OffsetEstimate> Cluster::ClockOffsetOf(std::string_view member) const {
  const std::lock_guard<std::mutex> lock(core_->offsets_mutex);
  auto it = core_->offsets.find(member);
  if (it == core_->offsets.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> Cluster::MinorityRefusal() const {
  if (!core_->in_minority.load(std::memory_order_acquire)) return std::nullopt;
  return "this node reaches " + std::to_string(core_->minority_reached.load(std::memory_order_relaxed)) +
         " of the " + std::to_string(core_->minority_known.load(std::memory_order_relaxed)) +
         " members it knows, a minority, so it does not decide (--failure-mode closed)";
}

std::optional<std::string> Cluster::ClockRefusal() const {
  if (!core_->clock_skewed.load(std::memory_order_acquire)) return std::nullopt;
  return "this node's clock is off from the cluster's, so it does not decide: " + Snapshot()->clock.reason;
}

peer::PeerStats Cluster::ServerStats() const { return core_->server.Stats(); }
peer::PeerStats Cluster::ClientStats() const { return core_->client.Stats(); }

}  // namespace ringlimit::cluster
