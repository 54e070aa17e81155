#include "tests/sim/sim_node.h"

#include <algorithm>
#include <utility>

#include "limiter/merge.h"
#include "limiter/spec_wire.h"
#include "node/forward/routing.h"
#include "ring/token.h"
#include "tests/sim/sim_cluster.h"

namespace ringlimit::sim {
namespace {

// Wall clock at simulated time 0: 2026-01-01 02:00 UTC. A day window starts at midnight, so a node skewed
// by +1 h during a run of minutes stays in the same window: nothing refills.
constexpr int64_t kWallEpochNs = (1'767'225'600LL + 2 * 3600) * 1'000'000'000LL;
// The name of every key's one limit.
constexpr std::string_view kLimitName = "default";

}  // namespace

// replication_link.cc, over the simulated network and this node's own membership table.
class SimNode::Link final : public replication::ClusterLink {
 public:
  explicit Link(SimNode& node) : node_(node) {}
  const std::string& self_id() const override { return node_.id_; }
  std::shared_ptr<const ring::RingView> ring() const override { return node_.planner_->ring(); }
  std::shared_ptr<const replication::RouteOverrides> overrides() const override {
    return node_.handoff_ != nullptr ? node_.handoff_->routing().Current().overrides : nullptr;
  }
  bool Reachable(std::string_view id) const override {
    if (id == node_.id_ || node_.planner_ == nullptr || !node_.planner_->started()) return false;
    const std::optional<ring::MemberInfo> info = node_.planner_->membership().Find(id);
    if (!info.has_value() || info->peer_address.empty()) return false;
    return info->state == ring::MemberState::kAlive || info->state == ring::MemberState::kSuspect ||
           info->state == ring::MemberState::kLeaving;
  }
  void Send(std::string_view id, peer::Method method, std::string payload, std::chrono::milliseconds timeout,
            Reply reply) override {
    node_.cluster_.Request(node_.slot_, id, method, std::move(payload), timeout, std::move(reply));
  }

 private:
  SimNode& node_;
};

// The Forwarder's host (node/forward/forward_host.h) over this node: its routing table, its judgements,
// the simulated clocks, the world's seeded generator and the simulated network.
class SimNode::Host final : public cluster::ForwardHost {
 public:
  explicit Host(SimNode& node) : node_(node) {}
  const std::string& self_id() const override { return node_.id_; }
  uint32_t replicas() const override { return node_.options_.replication.replicas; }
  const replication::RoutingTable& routing() const override { return node_.handoff_->routing().Current(); }
  bool Paused() const override { return node_.fence_->Paused(node_.world_.now()); }
  Status ClockRefusal() const override {
    if (!node_.planner_->clock_skewed()) return Status::OK();
    return Status::Unavailable("this node's clock is off from the cluster's: " +
                               node_.planner_->clock_reason());
  }
  bool ClockSkewed() const override { return node_.planner_->clock_skewed(); }
  Status MinorityRefusal() const override {
    if (!node_.planner_->quorum().minority) return Status::OK();
    return Status::Unavailable("this node reaches only a minority of the members it knows");
  }
  std::optional<ring::OffsetEstimate> ClockOffsetOf(std::string_view member) const override {
    const auto& offsets = node_.planner_->offsets();
    auto it = offsets.find(member);
    if (it == offsets.end()) return std::nullopt;
    return it->second;
  }
  int64_t WallNowNs() const override { return node_.WallNow(); }
  std::chrono::nanoseconds SteadyNow() const override { return node_.world_.now(); }
  uint64_t Random() override { return node_.world_.Uniform(1, UINT64_MAX); }
  void Call(const std::string& address, peer::Method method, std::string payload,
            std::chrono::milliseconds timeout, CallDone done) override {
    node_.cluster_.Call(node_.slot_, address, method, std::move(payload), timeout, std::move(done));
  }
  void After(std::chrono::nanoseconds delay, std::function<void()> fn) override {
    node_.world_.Schedule(node_.world_.now() + delay, node_.slot_, node_.life_, std::move(fn));
  }

 private:
  SimNode& node_;
};

// node.cc's StoreGrantRows on this node's store, telling the Checker every grant recorded and settled (the
// floor's allowance for slices and the classes' proof that grants happened).
class SimNode::Rows final : public cluster::GrantRows {
 public:
  explicit Rows(SimNode& node) : node_(node), rows_(*node.store_, node.Contributor(), node.hlc_) {}
  cluster::GrantActions Lend(const cluster::GrantKey& key, limiter::TimeNs now,
                             const Decide& decide) override {
    cluster::GrantActions out = rows_.Lend(
        key, now, [&](const cluster::KeyBudget& budget, const std::vector<cluster::GrantId>& unsettled) {
          cluster::GrantActions decided = decide(budget, unsettled);
          if (const std::optional<size_t> k = node_.cluster_.checker().KeyIndex(key.key)) {
            node_.cluster_.checker().Asked(*k, node_.slot_, node_.world_.now(), !decided.lends.empty());
          }
          if (node_.world_.tracing()) {
            node_.world_.Trace(node_.slot_, TraceKind::kNote,
                               node_.id_ + " asked a slice of " + key.key + ": capacity " +
                                   std::to_string(budget.capacity) + ", effective " +
                                   std::to_string(budget.effective) + ", term cap " +
                                   std::to_string(budget.term_cap.count() / 1'000'000) + " ms, " +
                                   std::to_string(unsettled.size()) + " unsettled grants; " +
                                   (decided.lends.empty() ? "refused" : "lends"));
          }
          return decided;
        });
    Checker& checker = node_.cluster_.checker();
    const std::optional<size_t> k = checker.KeyIndex(key.key);
    for (const cluster::Lend& l : out.lends) {
      node_.world_.Hash(l.grant, l.units);
      if (k.has_value()) {
        checker.Lent(*k, l.grant, node_.slot_, node_.cluster_.SlotOf(l.to), node_.world_.now(), l.units);
      }
      if (node_.world_.tracing()) {
        node_.world_.Trace(node_.slot_, TraceKind::kNote,
                           node_.id_ + " lends " + std::to_string(l.units) + " of " + key.key + " to " +
                               l.to + " (grant " + std::to_string(l.grant) + ")");
      }
    }
    return out;
  }
  uint64_t Settle(const cluster::GrantKey& key, cluster::GrantId grant, std::optional<uint64_t> used,
                  limiter::TimeNs now) override {
    const uint64_t charged = rows_.Settle(key, grant, used, now);
    node_.cluster_.checker().Settled(grant, node_.slot_, node_.world_.now(), used);
    node_.world_.Hash(grant, charged);
    if (node_.world_.tracing()) {
      node_.world_.Trace(node_.slot_, TraceKind::kNote,
                         node_.id_ + " settles grant " + std::to_string(grant) + " of " + key.key + ": " +
                             (used.has_value() ? "used " + std::to_string(*used) : std::string("reclaimed")) +
                             ", charged " + std::to_string(charged));
    }
    return charged;
  }
  std::optional<cluster::KeyBudget> Read(const cluster::GrantKey& key, limiter::TimeNs now) override {
    return rows_.Read(key, now);
  }
  std::vector<UnsettledRow> Unsettled(ring::Token first, ring::Token last) override {
    std::vector<UnsettledRow> rows = rows_.Unsettled(first, last);
    if (node_.world_.tracing()) {
      for (const UnsettledRow& row : rows) {
        node_.world_.Trace(node_.slot_, TraceKind::kNote,
                           node_.id_ + " finds " + std::to_string(row.grants.size()) +
                               " unsettled grants of " + row.key.key + " in a range it took over");
      }
    }
    return rows;
  }

 private:
  SimNode& node_;
  cluster::StoreGrantRows rows_;
};

SimNode::SimNode(SimCluster& cluster, int slot, uint64_t life, Disk& disk)
    : cluster_(cluster),
      world_(cluster.world()),
      options_(cluster.options()),
      slot_(slot),
      life_(life),
      id_(SimCluster::IdOf(slot)),
      disk_(disk) {}

SimNode::~SimNode() {
  // A crash: nothing more runs for the drivers, nothing is answered; then everything goes, drivers first.
  if (handoff_ != nullptr) handoff_->Abandon();
  if (replicator_ != nullptr) replicator_->Abandon();
  forwarder_.reset();
  grants_.reset();
  grant_rows_.reset();
  host_.reset();
  handoff_.reset();
  replicator_.reset();
  link_.reset();
  store_.reset();
  planner_.reset();
  executor_.reset();
}

limiter::TimeNs SimNode::WallNow() const {
  return kWallEpochNs + world_.now().count() + cluster_.skew(slot_).count();
}

void SimNode::Start(const std::vector<std::string>& seed_addresses) {
  executor_ = std::make_unique<SimExecutor>(world_, slot_, life_);
  storage::MemoryStoreOptions store_options;
  store_options.write_back = true;  // as the durable tier drives it: the flush below is the disk
  store_options.shards = 4;         // not derived from the machine's threads
  store_ = std::make_unique<storage::MemoryStore>(store_options);
  for (const auto& [where, state] : disk_) static_cast<void>(store_->Absorb(where.first, state));
  link_ = std::make_unique<Link>(*this);
  replication::ReplicatorOptions replication = options_.replication;
  replication.contributor = Contributor();  // as node.cc passes the check service's
  replicator_ = std::make_unique<replication::Replicator>(*store_, *link_, *executor_, replication);
  store_->SetObserver(replicator_.get());
  replicator_->Start();
  handoff_ = std::make_unique<replication::HandoffManager>(*store_, *link_, *replicator_, *executor_,
                                                           options_.handoff);
  handoff_->Start();
  // As node.cc: another holder may decide a key once its owner has not answered for every try of a
  // forward, which the pause fence bounds.
  fence_ = std::make_unique<cluster::PauseFence>(options_.membership,
                                                 (1 + options_.timeout_retries) * options_.forward_timeout);
  host_ = std::make_unique<Host>(*this);
  cluster::ForwarderOptions forward;
  forward.timeout = options_.forward_timeout;
  forward.max_attempts = options_.max_attempts;
  forward.timeout_retries = options_.timeout_retries;
  forward.failure_mode = options_.closed ? cluster::FailureMode::kClosed : cluster::FailureMode::kOpen;
  forward.dedup.shards = 1;
  forwarder_ = std::make_unique<cluster::Forwarder>(
      *host_, forward,
      [this](const peer::ForwardCheckRequest& request, std::vector<node::ForwardedOutcome>& outcomes) {
        DecideForwarded(request, outcomes);
      },
      replicator_.get(), handoff_.get());
  if (options_.grants.enabled) {  // node.cc StartGrants
    grant_rows_ = std::make_unique<Rows>(*this);
    cluster::Forwarder& forwarder = *forwarder_;
    grants_ = std::make_unique<cluster::GrantDriver>(
        *host_, options_.grants, *grant_rows_,
        [&forwarder](std::string_view key, std::function<void(bool)> done) {
          const std::string_view keys[1] = {key};
          forwarder.Decided(keys, std::move(done));
        });
    forwarder_->SetGrants(grants_.get());
  }

  cluster::ClusterPlannerOptions planner_options;
  planner_options.node_id = id_;
  planner_options.membership = options_.membership;
  planner_options.membership.random_seed = world_.Uniform(1, UINT64_MAX);
  planner_options.clock = options_.clock;
  planner_ = std::make_unique<cluster::ClusterPlanner>(std::move(planner_options));
  ring::MemberInfo self;
  self.id = id_;
  self.http_address = "http/" + id_;
  self.peer_address = SimCluster::AddressOf(slot_);
  self.vnodes = options_.vnodes;
  self.incarnation = static_cast<uint64_t>(WallNow() / 1'000'000);  // wall-clock ms, as cluster.cc
  Apply(planner_->Start(world_.now(), WallNow(), std::move(self), seed_addresses));
  executor_->Post([this] { Tick(); });
  executor_->Post([this] { FlushDisk(); });
  if (grants_ != nullptr) executor_->Post([this] { GrantTick(); });
}

void SimNode::GrantTick() {
  grants_->Tick();
  world_.Schedule(world_.now() + std::chrono::milliseconds(50), slot_, life_, [this] { GrantTick(); });
}

// ----------------------------------------------------------------------------------------- membership

void SimNode::Tick() {
  fence_->Tick(world_.now());
  Apply(planner_->Tick(world_.now(), WallNow()));
  const auto every = std::max<std::chrono::nanoseconds>(options_.membership.probe_interval / 4,
                                                        std::chrono::milliseconds(1));
  world_.Schedule(world_.now() + every, slot_, life_, [this] { Tick(); });
}

void SimNode::Receive(const ring::Message& message) {
  Apply(planner_->Receive(world_.now(), WallNow(), message));
}

// cluster.cc Core::Apply: the planner's actions in the order of its contract, on the simulated network, the
// handoff manager being the ring listener (with the replicator's peers, as node.cc wires it) and the members
// listener.
void SimNode::Apply(cluster::ClusterActions actions) {
  for (const ring::Outgoing& outgoing : actions.send) cluster_.SendMembership(slot_, outgoing);
  for (const ring::MemberEvent& event : actions.events) {
    world_.Hash(static_cast<uint64_t>(event.kind), event.member.incarnation);
    if (world_.tracing()) {
      world_.Trace(slot_, TraceKind::kMember,
                   id_ + " sees " + event.member.id + " " +
                       std::string(ring::MemberStateName(event.member.state)) + " (incarnation " +
                       std::to_string(event.member.incarnation) + ")");
    }
  }
  if (planner_->clock_skewed() != clock_skewed_ && world_.tracing()) {
    world_.Trace(slot_, TraceKind::kMember,
                 id_ + (planner_->clock_skewed() ? " refuses to decide: " : " decides again: ") +
                     planner_->clock_reason());
  }
  clock_skewed_ = planner_->clock_skewed();
  if (actions.members != nullptr) {
    handoff_->routing().SetMembers(actions.members);
    if (options_.notify_members_changed) handoff_->OnMembersChanged();
  }
  for (cluster::RingChange& change : actions.ring_changes) {
    if (change.published) {
      world_.Hash(change.after->fingerprint(), change.after->version());
      if (world_.tracing()) {
        std::string members;
        for (const ring::RingMember& m : change.after->members()) members += " " + m.id;
        world_.Trace(slot_, TraceKind::kRing,
                     id_ + " ring v" + std::to_string(change.after->version()) + ":" + members);
      }
    } else if (world_.tracing()) {
      world_.Trace(slot_, TraceKind::kRing, id_ + " takes ranges in again (a restart, or declared dead)");
    }
    replicator_->SetPeers(change.after->members().size() > 1);
    handoff_->OnRingChanged(std::move(change.before), change.after);
  }
}

void SimNode::Leave(std::function<void()> exited) {
  if (leaving_) return;
  leaving_ = true;
  on_exit_ = std::move(exited);
  Apply(planner_->Leave(world_.now(), WallNow()));
  // node.cc's leave preparer: the slices this node holds go back to their owners, then the handoff.
  auto hand_over = [this] { handoff_->Leave([this](bool) { executor_->Post([this] { FinishLeave(); }); }); };
  if (grants_ != nullptr) {
    grants_->Leave([this, hand_over] { executor_->Post(hand_over); });
  } else {
    hand_over();
  }
}

// cluster.cc FinishLeave: announce `left` to every member, then (the process's drain) exit once the
// checks that entered here are answered.
void SimNode::FinishLeave() {
  cluster::ClusterActions actions = planner_->FinishLeave(world_.now(), WallNow());
  std::vector<ring::Outgoing> finals = std::move(actions.announce);
  Apply(std::move(actions));
  for (const ring::Outgoing& outgoing : finals) cluster_.SendMembership(slot_, outgoing);
  left_ = true;
  left_at_ = world_.now();
  MaybeExit();
}

void SimNode::MaybeExit() {
  if (!left_ || exited_) return;
  if (!pending_.empty() && world_.now() - left_at_ < options_.drain_timeout) {
    world_.Schedule(world_.now() + std::chrono::milliseconds(10), slot_, life_, [this] { MaybeExit(); });
    return;
  }
  FlushDisk();
  exited_ = true;
  if (on_exit_) std::exchange(on_exit_, nullptr)();
}

// The durable tier's flush: dirty states and pending deletes go to the disk.
void SimNode::FlushDisk() {
  const std::vector<storage::DirtyRecord> batch = store_->CollectDirty();
  for (const storage::DirtyRecord& r : batch) {
    if (r.erase) {
      disk_.erase({r.entity, r.state.name});
    } else {
      disk_[{r.entity, r.state.name}] = r.state;
    }
  }
  store_->AckFlushed(batch, true);
  if (exited_) return;
  world_.Schedule(world_.now() + options_.flush_interval, slot_, life_, [this] { FlushDisk(); });
}

// -------------------------------------------------------------------------------------------- checks

void SimNode::Answer(uint64_t check, Outcome outcome, uint64_t decision) {
  pending_.erase(check);
  cluster_.checker().Answered(check, world_.now(), outcome, decision);
  world_.Hash(check, static_cast<uint64_t>(outcome) * 1'000'003 + decision);
  if (world_.tracing()) {
    std::string text =
        "check #" + std::to_string(check) + " answered at " + id_ + ": " + OutcomeName(outcome);
    if (decision != 0) {
      const DecisionRecord& d = cluster_.checker().decision(decision);
      text += " (decided by " + SimCluster::IdOf(d.node) + ", remaining " + std::to_string(d.remaining) + ")";
    }
    world_.Trace(slot_, TraceKind::kCheck, std::move(text));
  }
}

void SimNode::FailPending(Outcome outcome) {
  const std::set<uint64_t> pending = std::move(pending_);
  pending_.clear();
  for (uint64_t check : pending) Answer(check, outcome, 0);
}

namespace {

// The DecisionRecord a decided result comes from: the number after '#' in its owner (see sim_node.h); 0
// when there is none.
uint64_t DecisionOf(const peer::ForwardedResult& result) {
  const size_t hash = result.owner().rfind('#');
  if (hash == std::string::npos) return 0;
  uint64_t id = 0;
  for (size_t i = hash + 1; i < result.owner().size(); ++i) {
    const char c = result.owner()[i];
    if (c < '0' || c > '9') return 0;
    id = id * 10 + static_cast<uint64_t>(c - '0');
  }
  return id;
}

}  // namespace

// An HTTP check entering here: check_engine.cc RunRouted for one key, on the real Forwarder.
void SimNode::ClientCheck(uint64_t check, size_t key) {
  // RefusalOf: 503 not_ready or unavailable.
  if (!forwarder_->Routing() || forwarder_->RefusesChecks().has_value()) {
    Answer(check, Outcome::kRefused, 0);
    return;
  }
  pending_.insert(check);
  const std::string& name = cluster_.checker().keys()[key].key;
  const std::string_view keys[] = {name};
  uint8_t remote = 0;
  const uint32_t pin = forwarder_->EnterDecisions();
  forwarder_->Classify(keys, std::span<uint8_t>(&remote, 1));
  if (remote == 0) {
    DecideHere(check, name);
    forwarder_->ExitDecisions(pin);
    return;
  }
  forwarder_->ExitDecisions(pin);
  if (grants_ != nullptr) {  // check_engine.cc DecidedAtEntry: a slice held here decides it
    const limiter::LimitSpec& spec = cluster_.checker().keys()[key].spec;
    if (std::optional<uint64_t> left =
            forwarder_->DecideAtEntry(node::EntryCheck{name, kLimitName, &spec, 1})) {
      const uint64_t decision = cluster_.checker().DecidedFromSlice(check, slot_, world_.now());
      world_.Hash(decision, 1);
      if (world_.tracing()) {
        world_.Trace(slot_, TraceKind::kCheck,
                     "check #" + std::to_string(check) + " key " + name + " admitted at " + id_ +
                         " from a slice (" + std::to_string(*left) + " left here)");
      }
      Answer(check, Outcome::kAllowed, decision);
      return;
    }
  }
  peer::ForwardedCheck forwarded;
  forwarded.set_check_id(check);
  forwarded.set_key(name);
  forwarded.set_cost(1);
  forwarded.set_hops(1);
  if (grants_ != nullptr) {  // as check_engine.cc MakeForwarded: the limit travels with the check
    peer::NamedLimit* limit = forwarded.add_limits();
    limit->set_name(std::string(kLimitName));
    limiter::SpecToProto(cluster_.checker().keys()[key].spec, limit->mutable_spec());
  }
  forwarder_->Forward(std::move(forwarded), [this, check, name](std::optional<peer::ForwardedResult> result) {
    if (result.has_value() &&
        (result->status() == peer::CHECK_UNAVAILABLE || result->status() == peer::CHECK_UNACKED)) {
      Answer(check, Outcome::kRefused, 0);  // 503: nothing charged, or not acknowledged by the holders
      return;
    }
    if (!result.has_value() || result->status() != peer::CHECK_OK || DecisionOf(*result) == 0) {
      DecideHere(check, name);  // nobody else could decide: this node does
      return;
    }
    AnswerDecision(check, DecisionOf(*result), true);
  });
}

void SimNode::DecideHere(uint64_t check, const std::string& key) {
  const uint64_t decision = Charge(check, key);
  const std::string_view keys[] = {key};
  forwarder_->Decided(keys, [this, check, decision](bool acked) { AnswerDecision(check, decision, acked); });
}

void SimNode::AnswerDecision(uint64_t check, uint64_t decision, bool acked) {
  const bool allowed = cluster_.checker().decision(decision).allowed;
  if (allowed && !acked) {  // check_engine.cc Unacked: 503, the charge stays
    Answer(check, Outcome::kRefused, 0);
    return;
  }
  Answer(check, allowed ? Outcome::kAllowed : Outcome::kDenied, decision);
}

uint64_t SimNode::Charge(uint64_t check, const std::string& key) {
  Checker& checker = cluster_.checker();
  const limiter::LimitSpec& spec = checker.keys()[checker.check(check).key].spec;
  const limiter::TimeNs now = WallNow();
  limiter::Decision decision;
  const storage::Slot slot{kLimitName, &spec};
  store_->Update(key, std::span<const storage::Slot>(&slot, 1), now,
                 [&](std::span<limiter::MergeState* const> states) {
                   // One contributor per life (as a restarted ringlimitd draws a new one).
                   decision = limiter::CheckMerged(spec, *states[0], Contributor(), hlc_.Now(now),
                                                   limiter::Request{.cost = 1, .now = now});
                   // With grants, `remaining` leaves out the slices lent; the Checker's rollback rule
                   // follows the key's unlent budget, which only falls as units are charged or settled.
                   if (grants_ != nullptr) decision.remaining += limiter::GrantsOut(spec, *states[0], now);
                 });
  const uint64_t id = checker.Decided(check, slot_, world_.now(), decision);
  world_.Hash(id, decision.remaining * 2 + (decision.allowed ? 1 : 0));
  if (world_.tracing()) {
    world_.Trace(slot_, TraceKind::kCheck,
                 "check #" + std::to_string(check) + " key " + key + " decided at " + id_ + ": " +
                     (decision.allowed ? "allowed" : "denied") + ", remaining " +
                     std::to_string(decision.remaining));
  }
  return id;
}

void SimNode::DecideForwarded(const peer::ForwardCheckRequest& request,
                              std::vector<node::ForwardedOutcome>& outcomes) {
  outcomes.clear();
  for (const peer::ForwardedCheck& check : request.checks()) {
    const uint64_t id = Charge(check.check_id(), check.key());
    const DecisionRecord& d = cluster_.checker().decision(id);
    node::ForwardedOutcome& result = outcomes.emplace_back();
    result.check_id = check.check_id();
    result.status = peer::CHECK_OK;
    result.owner = id_ + "#" + std::to_string(id);
    result.allowed = d.allowed;
    limiter::Decision& limit = result.decisions.emplace_back();
    limit.allowed = d.allowed;
    limit.remaining = d.remaining;
  }
}

void SimNode::Handle(peer::Method method, std::string payload, Responder respond) {
  switch (method) {
    case peer::METHOD_STATE_UPDATE:
      respond(replicator_->HandleStateUpdate(payload));
      return;
    case peer::METHOD_HANDOFF_DONE:
      handoff_->HandleHandoffDone(payload, std::move(respond));  // answered from the executor
      return;
    case peer::METHOD_SYNC_RANGES:  // answered once this node's states of the ranges reached the sender
      handoff_->HandleSyncRanges(payload, std::move(respond));
      return;
    case peer::METHOD_GRANT_REQUEST:
    case peer::METHOD_GRANT_RELEASE:
    case peer::METHOD_GRANT_RECALL:
      if (grants_ == nullptr) {  // --grants off: no handler
        respond(std::nullopt);
        return;
      }
      grants_->Serve(method, std::move(payload), [respond = std::move(respond)](peer::PeerResult result) {
        if (result.ok()) {
          respond(result.TakePayload());
        } else {
          respond(std::nullopt);
        }
      });
      return;
    case peer::METHOD_FORWARD_CHECK:
      forwarder_->Serve(std::move(payload), [respond = std::move(respond)](peer::PeerResult result) {
        if (result.ok()) {
          respond(result.TakePayload());
        } else {
          respond(std::nullopt);
        }
      });
      return;
    default:
      respond(std::nullopt);
      return;
  }
}

}  // namespace ringlimit::sim
