#include "node/cluster/cluster.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <future>
#include <map>
#include <utility>

#include "base/published.h"
#include "node/cluster/cluster_planner.h"
#include "node/cluster/pause_fence.h"
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

Status ValidateNodeId(std::string_view id) {
  if (id.empty() || id.size() > kMaxNodeIdBytes)
    return Status::InvalidArgument("node id: must be 1 to 64 bytes");
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return Status::InvalidArgument("node id: only letters, digits, '.', '_' and '-' are allowed");
  }
  return Status::OK();
}

Status Validate(const ClusterOptions& options) {
  if (Status status = ValidateNodeId(options.node_id); !status.ok()) return status;
  if (options.vnodes < 1 || options.vnodes > ring::kMaxVnodes)
    return Status::InvalidArgument("vnodes: must be between 1 and " + std::to_string(ring::kMaxVnodes));
  if (options.vnodes > options.membership.max_vnodes) {
    return Status::InvalidArgument(
        "vnodes: " + std::to_string(options.vnodes) + " is above --max-member-vnodes " +
        std::to_string(options.membership.max_vnodes) + " (the other members would refuse this node)");
  }
  if (options.replicas < 1) return Status::InvalidArgument("replicas: must be at least 1");
  if (options.leave_timeout.count() <= 0) return Status::InvalidArgument("leave timeout: must be positive");
  if (Status status = ring::Validate(options.membership); !status.ok()) return status;
  if (Status status = ring::Validate(options.clock); !status.ok()) return status;
  return Status::OK();
}

namespace {

ClusterPlannerOptions PlannerOptions(const ClusterOptions& options) {
  ClusterPlannerOptions planner;
  planner.node_id = options.node_id;
  planner.membership = options.membership;
  if (!options.join_dns.empty() && planner.membership.join_alone_after.count() == 0) {
    planner.membership.join_alone_after = std::chrono::milliseconds(3'000);
  }
  planner.clock = options.clock;
  return planner;
}

}  // namespace

// The driver of the ClusterPlanner (cluster_planner.h): the strand, the timers, the transport, and what the
// request path reads (the ring, the routing table, the snapshot, the judgements), published from here.
// The clocks are read here only: once per event, handed to the planner and the pause fence.
// Everything below `strand` is touched only on the strand, except where noted.
struct Cluster::Core : std::enable_shared_from_this<Core> {
  Core(net::io_context& io_in, const ClusterOptions& options_in)
      : io(io_in),
        options(options_in),
        strand(net::make_strand(io_in)),
        timer(strand),
        leave_timer(strand),
        dns_timer(strand),
        planner(PlannerOptions(options_in)),
        server(io_in, ServerOptions(options_in)),
        client(io_in, ClientOptions(options_in)),
        fence(options_in.membership, options_in.takeover_after) {
    snapshot.Publish(std::make_shared<const ClusterSnapshot>());
  }

  void RegisterHandlers();
  void Begin(ring::MemberInfo self, std::vector<std::string> seeds, std::vector<std::string> discovered);
  void Arm();
  // --join-dns: resolves the names again every dns_refresh (off the strand: getaddrinfo blocks), then
  // hands the addresses to the planner on the strand.
  void ArmDns();
  void OnTick();
  void Receive(ring::Message message, int64_t received_wall_ns);
  // Carries out the planner's actions in the order of its contract, then publishes its judgements.
  void Apply(ClusterActions actions);
  void PublishSnapshot();
  // Cluster::ready.
  bool Ready() const {
    const std::shared_ptr<const ClusterSnapshot> snap = snapshot.Current();
    // The routing table gets its first ring from the handoff's executor, a moment after the snapshot:
    // ready only once checks are routed (a check before that is refused with 503 not_ready).
    return snap->joined && snap->self.state == MemberState::kAlive && snap->ring != nullptr &&
           snap->ring->Find(options.node_id) != nullptr && routing.Snapshot()->ring != nullptr;
  }
  // Whether the first readiness was logged.
  bool ready_logged = false;
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
  net::strand<net::io_context::executor_type> strand;

  net::steady_timer timer;
  net::steady_timer leave_timer;
  net::steady_timer dns_timer;
  ClusterPlanner planner;
  bool stopped = false;
  size_t leave_pending = 0;
  std::function<void()> on_left;

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
  // The pause fence (Cluster::Paused). Thread-safe.
  PauseFence fence;
  // The members' clock offsets as estimated at the last tick (ClockOffsetOf). Published from the strand,
  // read lock-free (one atomic load) anywhere.
  using Offsets = std::map<std::string, ring::OffsetEstimate, std::less<>>;
  Published<Offsets> offsets;
  uint64_t published_offsets_version = ~uint64_t{0};  // planner.offsets_version() last published

  // Published from the strand (PublishSnapshot), read lock-free anywhere (Cluster::Snapshot): the
  // replication link reads it per batch it sends.
  Published<ClusterSnapshot> snapshot;
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
  Apply(planner.Start(Now(), WallClockNs(), std::move(self), seeds, std::move(discovered)));
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
        if (!resolved.ok()) {
          spdlog::warn("cluster: --join-dns {}: {}", name, resolved.status().message());
          continue;
        }
        found.insert(found.end(), resolved->begin(), resolved->end());
      }
      net::post(self->strand, [self, found = std::move(found)]() mutable {
        if (self->stopped) return;
        self->planner.SetDiscovered(std::move(found));
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
  const MonoTime now = Now();
  fence.Tick(now);
  Apply(planner.Tick(now, WallClockNs()));
  // Estimated at every tick; copied out only when they changed.
  if (planner.offsets_version() != published_offsets_version) {
    published_offsets_version = planner.offsets_version();
    offsets.Publish(std::make_shared<const Offsets>(planner.offsets()));
  }
  Arm();
}

void Cluster::Core::Receive(ring::Message message, int64_t received_wall_ns) {
  if (stopped || !planner.started()) return;
  Apply(planner.Receive(Now(), received_wall_ns, message));
}

void Cluster::Core::Apply(ClusterActions actions) {
  for (ring::Outgoing& outgoing : actions.send) {
    ring::WireMessage wire = ring::EncodeMembershipMessage(outgoing.message);
    // Best effort: a lost message is what SWIM is built to tolerate.
    (void)client.Send(outgoing.to_address, wire.method, std::move(wire.payload));
  }
  for (const std::string& address : actions.disconnect) client.Disconnect(address);
  // The judgements first: a node that now reaches only a minority must not decide keys whose other
  // holders the ring published below leaves on its side.
  const QuorumView& quorum = planner.quorum();
  minority_reached.store(quorum.reached, std::memory_order_relaxed);
  minority_known.store(quorum.known, std::memory_order_relaxed);
  in_minority.store(quorum.minority, std::memory_order_release);
  clock_skewed.store(planner.clock_skewed(), std::memory_order_release);
  // The members before the ring: the listener's work (handoffs) looks them up in the snapshot.
  if (actions.snapshot) PublishSnapshot();
  if (actions.members != nullptr) {
    routing.SetMembers(actions.members);
    if (members_listener) members_listener();
  }
  for (RingChange& change : actions.ring_changes) {
    if (ring_listener) {
      ring_listener(std::move(change.before), change.after);
    } else if (change.published) {
      routing.SetRing(change.after);
    }
    if (change.published) ring.Publish(change.after);
  }
  if (actions.new_ring != nullptr) PublishSnapshot();
  if (!ready_logged && Ready()) {
    // When /readyz turns 200 (a joining node: once a seed answered and its ranges are routed).
    ready_logged = true;
    spdlog::info("cluster: ready: joined, in the ring, checks routed (/readyz 200)");
  }
}

void Cluster::Core::PublishSnapshot() {
  std::shared_ptr<ClusterSnapshot> snap = planner.Snapshot(Now());
  snap->ring = ring.Current();
  snapshot.Publish(std::move(snap));
}

void Cluster::Core::DoLeave(std::function<void()> callback) {
  if (stopped || planner.leaving() || !planner.started()) return;
  on_left = std::move(callback);
  Apply(planner.Leave(Now(), WallClockNs()));
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
  if (stopped || !planner.started()) return;
  ClusterActions actions = planner.FinishLeave(Now(), WallClockNs());
  std::vector<ring::Outgoing> finals = std::move(actions.announce);
  Apply(std::move(actions));
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

Result<std::vector<std::string>> ResolvePeers(std::string_view name_and_port) {
  const size_t colon = name_and_port.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == name_and_port.size()) {
    return Status::InvalidArgument("expected NAME:PORT");
  }
  net::io_context io;
  net::ip::tcp::resolver resolver(io);
  boost::system::error_code ec;
  const auto results = resolver.resolve(name_and_port.substr(0, colon), name_and_port.substr(colon + 1), ec);
  if (ec) return Status::Unavailable(ec.message());
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

Status Cluster::Start() {
  if (Status status = Validate(options_); !status.ok()) return status;
  if (Status started = core_->server.Start(); !started.ok()) {
    return started.WithContext("cannot listen for peers on " + options_.peer_host + ":" +
                               std::to_string(options_.peer_port));
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
    if (!resolved.ok()) {
      spdlog::warn("cluster: --join-dns {}: {} (tried again every {} ms)", name, resolved.status().message(),
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
  return Status::OK();
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

void Cluster::After(std::chrono::nanoseconds delay, std::function<void()> fn) {
  auto timer = std::make_shared<net::steady_timer>(core_->io, delay);
  timer->async_wait(net::bind_executor(
      core_->strand, [core = core_, timer, fn = std::move(fn)](const boost::system::error_code& ec) {
        if (ec || core->stopped) return;
        fn();
      }));
}

const ring::RingHolder& Cluster::ring() const { return core_->ring; }

replication::RoutingPublisher& Cluster::routing() { return core_->routing; }

uint16_t Cluster::peer_port() const { return core_->server.port(); }

std::shared_ptr<const ClusterSnapshot> Cluster::Snapshot() const { return core_->snapshot.Current(); }

bool Cluster::ready() const { return core_->Ready(); }

bool Cluster::Paused() const { return core_->fence.Paused(std::chrono::nanoseconds(SteadyNs())); }

std::optional<ring::OffsetEstimate> Cluster::ClockOffsetOf(std::string_view member) const {
  const std::shared_ptr<const Core::Offsets>& offsets = core_->offsets.Cached();
  if (offsets == nullptr) return std::nullopt;
  auto it = offsets->find(member);
  if (it == offsets->end()) return std::nullopt;
  return it->second;
}

Status Cluster::MinorityRefusal() const {
  if (!core_->in_minority.load(std::memory_order_acquire)) return Status::OK();
  return Status::Unavailable(
      "this node reaches " + std::to_string(core_->minority_reached.load(std::memory_order_relaxed)) +
      " of the " + std::to_string(core_->minority_known.load(std::memory_order_relaxed)) +
      " members it knows, a minority, so it does not decide (--failure-mode closed)");
}

bool Cluster::ClockSkewed() const { return core_->clock_skewed.load(std::memory_order_acquire); }

Status Cluster::ClockRefusal() const {
  if (!ClockSkewed()) return Status::OK();
  return Status::Unavailable("this node's clock is off from the cluster's, so it does not decide: " +
                             Snapshot()->clock.reason);
}

peer::PeerStats Cluster::ServerStats() const { return core_->server.Stats(); }
peer::PeerStats Cluster::ClientStats() const { return core_->client.Stats(); }

}  // namespace ringlimit::cluster
