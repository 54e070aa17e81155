#include "tests/sim/sim_node.h"

#include <algorithm>
#include <utility>

#include "node/cluster/routing.h"
#include "ring/token.h"
#include "tests/sim/sim_cluster.h"

namespace ringlimit::sim {
namespace {

// Wall clock at simulated time 0: 2026-01-01 02:00 UTC. A day window starts at midnight, so a node skewed
// by +1 h during a run of minutes stays in the same window: nothing refills.
constexpr int64_t kWallEpochNs = (1'767'225'600LL + 2 * 3600) * 1'000'000'000LL;
// cluster.cc NoticeRestarts: far more refutations than a live member ever makes.
constexpr uint64_t kRestartJump = 1000;
// The name of every key's one limit.
constexpr std::string_view kLimitName = "default";

}  // namespace

// replication_link.cc, over the simulated network and this node's own membership table.
class SimNode::Link final : public replication::ClusterLink {
 public:
  explicit Link(SimNode& node) : node_(node) {}
  const std::string& self_id() const override { return node_.id_; }
  std::shared_ptr<const ring::RingView> ring() const override { return node_.ring_; }
  bool Reachable(std::string_view id) const override {
    if (id == node_.id_ || node_.membership_ == nullptr) return false;
    const std::optional<ring::MemberInfo> info = node_.membership_->Find(id);
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

struct SimNode::Attempt {
  std::string payload;               // serialized ForwardCheckRequest
  std::vector<std::string> targets;  // ids, in the order to try
  size_t next = 0;                   // the next target to try
  uint32_t timeout_retries = 0;      // of the current target
  ForwardDone done;
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
  handoff_.reset();
  replicator_.reset();
  link_.reset();
  store_.reset();
  membership_.reset();
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
  replicator_ = std::make_unique<replication::Replicator>(*store_, *link_, *executor_, options_.replication);
  store_->SetObserver(replicator_.get());
  replicator_->Start();
  handoff_ = std::make_unique<replication::HandoffManager>(*store_, *link_, *replicator_, *executor_,
                                                           options_.handoff);
  handoff_->Start();
  // As forwarder.cc: the ttl covers every retry of a check twice over.
  cluster::DedupOptions dedup;
  dedup.shards = 1;
  dedup.ttl = std::max(dedup.ttl, 2 * (1 + options_.timeout_retries) * options_.forward_timeout);
  dedup_ = std::make_unique<cluster::DedupCache>(dedup);
  clocks_ = std::make_unique<ring::ClockOffsets>(options_.clock);

  ring::MembershipOptions membership_options = options_.membership;
  membership_options.random_seed = world_.Uniform(1, UINT64_MAX);
  ring::MemberInfo self;
  self.id = id_;
  self.http_address = "http/" + id_;
  self.peer_address = SimCluster::AddressOf(slot_);
  self.vnodes = options_.vnodes;
  self.incarnation = static_cast<uint64_t>(WallNow() / 1'000'000);  // wall-clock ms, as cluster.cc
  membership_ = std::make_unique<ring::Membership>(membership_options, self);
  Process(membership_->Start(world_.now(), seed_addresses));
  executor_->Post([this] { Tick(); });
  executor_->Post([this] { FlushDisk(); });
}

// ----------------------------------------------------------------------------------------- membership

void SimNode::Tick() {
  Process(membership_->Tick(world_.now()));
  JudgeClock();
  const auto every = std::max<std::chrono::nanoseconds>(options_.membership.probe_interval / 4,
                                                        std::chrono::milliseconds(1));
  world_.Schedule(world_.now() + every, slot_, life_, [this] { Tick(); });
}

void SimNode::Receive(const ring::Message& message) {
  Process(membership_->Receive(world_.now(), message));
  // cluster.cc Receive: an Ack answering our Ping is a sample of its sender's clock.
  if (message.type == ring::MessageType::kAck && message.echo_wall_ns != 0 && message.wall_ns != 0 &&
      message.from != id_) {
    clocks_->Add(message.from, world_.now(),
                 ring::ClockSample{ring::WallTime(message.echo_wall_ns), ring::WallTime(message.wall_ns),
                                   ring::WallTime(WallNow())});
  }
}

// cluster.cc JudgeClock: the max-offset rule over the other ring members.
void SimNode::JudgeClock() {
  std::vector<std::string> others;
  for (const ring::MemberInfo& m : membership_->Members()) {
    if (m.id != id_ && ring::IsInRing(m.state)) others.push_back(m.id);
  }
  const bool skewed = clocks_->Evaluate(world_.now(), others) == ring::ClockHealth::kSkewed;
  if (skewed != clock_skewed_ && world_.tracing()) {
    world_.Trace(slot_, TraceKind::kMember,
                 id_ + (skewed ? " refuses to decide: " : " decides again: ") + clocks_->reason());
  }
  clock_skewed_ = skewed;
}

// cluster.cc Process: send, note the events, and publish a new ring after its handoff overrides.
void SimNode::Process(ring::MembershipOutput out) {
  for (ring::Outgoing& outgoing : out.messages) {
    outgoing.message.wall_ns = WallNow();  // cluster.cc stamps every message it sends
    cluster_.SendMembership(slot_, outgoing);
  }
  for (const ring::MemberEvent& event : out.events) {
    world_.Hash(static_cast<uint64_t>(event.kind), event.member.incarnation);
    if (event.kind != ring::MemberEventKind::kSuspect && event.kind != ring::MemberEventKind::kLeaving &&
        event.member.id != id_) {
      clocks_->Forget(event.member.id);  // as cluster.cc: its clock may not be the one measured
    }
    if (world_.tracing()) {
      world_.Trace(slot_, TraceKind::kMember,
                   id_ + " sees " + event.member.id + " " +
                       std::string(ring::MemberStateName(event.member.state)) + " (incarnation " +
                       std::to_string(event.member.incarnation) + ")");
    }
  }
  std::shared_ptr<const ring::RingView> new_ring;
  if (out.ring_changed) {
    auto built = ring::RingView::Create(++ring_version_, membership_->RingMembers());
    if (built.ok()) new_ring = std::move(built).value();
  }
  if (new_ring != nullptr) {
    world_.Hash(new_ring->fingerprint(), ring_version_);
    if (world_.tracing()) {
      std::string members;
      for (const ring::RingMember& m : new_ring->members()) members += " " + m.id;
      world_.Trace(slot_, TraceKind::kRing, id_ + " ring v" + std::to_string(ring_version_) + ":" + members);
    }
    // As cluster.cc: the handoff publishes the ring into the routing table with its overrides (on the
    // executor), so no check is routed by the new ring without them.
    handoff_->OnRingChanged(std::exchange(published_, new_ring), new_ring);
    ring_ = new_ring;
  }
  // The routing table's members, as cluster.cc publishes them: only when one changed.
  if (std::vector<ring::MemberInfo> members = membership_->Members(); members != routed_members_) {
    routed_members_ = members;
    handoff_->routing().SetMembers(std::make_shared<const std::vector<ring::MemberInfo>>(std::move(members)));
  }
  if (!out.events.empty() || new_ring != nullptr) NoticeRestarts();
  if (out.declared_dead) CatchUpAfterDeath();
  if (options_.notify_members_changed && !out.events.empty()) handoff_->OnMembersChanged();
}

// cluster.cc NoticeRestarts: a member back with a much higher incarnation without leaving the ring
// restarted; tell the handoff manager as if it had left and joined again.
void SimNode::NoticeRestarts() {
  std::vector<std::string> restarted;
  std::map<std::string, uint64_t> seen;
  for (const ring::MemberInfo& m : membership_->Members()) {
    if (m.id == id_ || !ring::IsInRing(m.state)) continue;
    seen.emplace(m.id, m.incarnation);
    auto it = incarnations_.find(m.id);
    if (it != incarnations_.end() && m.incarnation > it->second + kRestartJump && ring_ != nullptr &&
        ring_->Find(m.id) != nullptr) {
      restarted.push_back(m.id);
    }
  }
  incarnations_ = std::move(seen);
  if (ring_ == nullptr) return;
  for (const std::string& id : restarted) {
    auto without = ring_->Without(id);
    if (!without.ok()) continue;
    world_.Trace(slot_, TraceKind::kRing, id_ + " notices that " + id + " restarted");
    handoff_->OnRingChanged(std::move(without).value(), ring_);
  }
}

// cluster.cc CatchUpAfterDeath: declared dead and refuted, this node takes its ranges as incoming.
void SimNode::CatchUpAfterDeath() {
  if (ring_ == nullptr || ring_->Find(id_) == nullptr) return;
  auto without = ring_->Without(id_);
  if (!without.ok()) return;
  world_.Trace(slot_, TraceKind::kRing, id_ + " was declared dead: takes its ranges as incoming");
  handoff_->OnRingChanged(std::move(without).value(), ring_);
}

void SimNode::Leave(std::function<void()> exited) {
  if (leaving_) return;
  leaving_ = true;
  on_exit_ = std::move(exited);
  Process(membership_->Leave(world_.now()));
  handoff_->Leave([this](bool) { executor_->Post([this] { FinishLeave(); }); });
}

// cluster.cc FinishLeave: announce `left` to every member, then (the process's drain) exit once the
// checks that entered here are answered.
void SimNode::FinishLeave() {
  ring::MembershipOutput out = membership_->FinishLeave(world_.now());
  std::vector<ring::Outgoing> finals = std::move(out.messages);
  out.messages.clear();
  Process(std::move(out));
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

std::string SimNode::DeciderOf(ring::Token token) const {
  return std::string(handoff_->routing().Current().Decider(token));
}

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

// An HTTP check entering here (check_engine.cc RunRouted, one key): decided here when this node decides
// the key, else forwarded; decided here after all when no other node answers.
void SimNode::ClientCheck(uint64_t check, size_t key) {
  if (!routing() || clock_skewed_ || (options_.closed && Minority())) {
    Answer(check, Outcome::kRefused, 0);  // 503 not_ready, clock_offset or unavailable
    return;
  }
  pending_.insert(check);
  const std::string& name = cluster_.checker().keys()[key].key;
  const std::string decider = DeciderOf(ring::RingToken(name));
  auto answer = [this, check](uint64_t decision, bool acked) {
    const bool allowed = cluster_.checker().decision(decision).allowed;
    if (allowed && !acked) {  // check_engine.cc Unacked: 503, the charge stays
      Answer(check, Outcome::kRefused, 0);
      return;
    }
    Answer(check, allowed ? Outcome::kAllowed : Outcome::kDenied, decision);
  };
  if (decider.empty() || decider == id_) {
    Decide(check, name, answer);
    return;
  }
  peer::ForwardedCheck forwarded;
  forwarded.set_check_id(check);
  forwarded.set_key(name);
  forwarded.set_cost(1);
  forwarded.set_hops(1);
  Forward(std::move(forwarded), [this, check, name, answer](std::optional<peer::ForwardedResult> result) {
    if (result.has_value()) {
      answer(result->check_id(), result->status() != peer::CHECK_UNACKED);
      return;
    }
    if (!MayDecideLocally(ring::RingToken(name))) {
      Answer(check, Outcome::kRefused, 0);  // 503 unavailable: no holder answered
      return;
    }
    Decide(check, name, answer);
  });
}

bool SimNode::Minority() const { return ring::ReachOf(membership_->Members()).minority(); }

bool SimNode::MayDecideLocally(ring::Token token) const {
  if (!options_.closed) return true;
  if (Minority()) return false;
  if (ring_ == nullptr) return false;
  for (const ring::RingMember* m : ring_->PreferenceList(token, options_.replication.replicas)) {
    if (m->id == id_) return true;
  }
  return false;
}

void SimNode::Decide(uint64_t check, const std::string& key, std::function<void(uint64_t, bool)> then) {
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
                 });
  const uint64_t id = checker.Decided(check, slot_, world_.now(), decision);
  world_.Hash(id, decision.remaining * 2 + (decision.allowed ? 1 : 0));
  if (world_.tracing()) {
    world_.Trace(slot_, TraceKind::kCheck,
                 "check #" + std::to_string(check) + " key " + key + " decided at " + id_ + ": " +
                     (decision.allowed ? "allowed" : "denied") + ", remaining " +
                     std::to_string(decision.remaining));
  }
  // Forwarder::Decided: the answer waits for replication in sync mode.
  const std::string_view keys[] = {key};
  const bool closed = options_.closed;
  replicator_->Decided(keys,
                       [then = std::move(then), id, closed](bool acked) { then(id, acked || !closed); });
}

// forwarder.cc Forward: held while this node switches the key's range, else tried on the targets.
void SimNode::Forward(peer::ForwardedCheck check, ForwardDone done) {
  const ring::Token token = ring::RingToken(check.key());
  if (handoff_->Switching(token)) {
    auto parked =
        std::make_shared<std::pair<peer::ForwardedCheck, ForwardDone>>(std::move(check), std::move(done));
    std::function<void()> resume = [this, parked] {
      Forward(std::move(parked->first), std::move(parked->second));
    };
    if (handoff_->HoldWhileSwitching(token, resume)) return;
    check = std::move(parked->first);
    done = std::move(parked->second);
  }
  auto attempt = std::make_shared<Attempt>();
  attempt->done = std::move(done);
  // From the routing table, as forwarder.cc does.
  const replication::RoutingTable& table = handoff_->routing().Current();
  std::optional<std::string> route_override;
  if (std::optional<std::string_view> decider = table.Override(token)) route_override.emplace(*decider);
  std::span<const ring::MemberInfo> members;
  if (table.members != nullptr) members = *table.members;
  for (cluster::ForwardTarget& target :
       cluster::ForwardTargets(token, id_, route_override, table.ring.get(), members,
                               options_.replication.replicas, options_.max_attempts)) {
    attempt->targets.push_back(std::move(target.id));
  }
  if (attempt->targets.empty() || attempt->targets[0] == id_) {
    attempt->done(std::nullopt);
    return;
  }
  if (check.request_id_hi() == 0 && check.request_id_lo() == 0) {  // as forwarder.cc: this life's nonce
    check.set_request_id_hi((static_cast<uint64_t>(slot_ + 1) << 32) | life_);
    check.set_request_id_lo(next_request_++);
  }
  peer::ForwardCheckRequest request;
  request.set_from(id_);
  request.set_owner(attempt->targets[0]);
  request.set_ring_fingerprint(ring_ != nullptr ? ring_->fingerprint() : 0);
  *request.add_checks() = std::move(check);
  attempt->payload = request.SerializeAsString();
  Try(std::move(attempt));
}

void SimNode::Try(std::shared_ptr<Attempt> attempt) {
  if (attempt->next >= attempt->targets.size() || attempt->targets[attempt->next] == id_) {
    attempt->done(std::nullopt);
    return;
  }
  ++attempt->next;
  attempt->timeout_retries = 0;
  Call(std::move(attempt));
}

// forwarder.cc Call: a timed-out attempt goes again to the same node unless it is known dead. The link
// answers every failure with nullopt; a timeout is a failure that took the whole timeout.
void SimNode::Call(std::shared_ptr<Attempt> attempt) {
  const std::string& target = attempt->targets[attempt->next - 1];
  const MonoTime sent_at = world_.now();
  link_->Send(target, peer::METHOD_FORWARD_CHECK, attempt->payload, options_.forward_timeout,
              [this, attempt, sent_at](std::optional<std::string> payload) {
                if (payload.has_value()) {
                  peer::ForwardCheckResponse response;
                  if (response.ParseFromString(*payload) && response.results_size() == 1 &&
                      (response.results(0).status() == peer::CHECK_OK ||
                       response.results(0).status() == peer::CHECK_UNACKED)) {
                    attempt->done(std::move(*response.mutable_results(0)));
                    return;
                  }
                }
                const std::string& target = attempt->targets[attempt->next - 1];
                const std::optional<ring::MemberInfo> info = membership_->Find(target);
                const bool dead = info.has_value() && (info->state == ring::MemberState::kDead ||
                                                       info->state == ring::MemberState::kLeft);
                if (!payload.has_value() && world_.now() - sent_at >= options_.forward_timeout &&
                    attempt->timeout_retries < options_.timeout_retries && !dead) {
                  ++attempt->timeout_retries;
                  Call(attempt);
                  return;
                }
                Try(attempt);
              });
}

void SimNode::Handle(peer::Method method, std::string payload, Responder respond) {
  switch (method) {
    case peer::METHOD_STATE_UPDATE:
      respond(replicator_->HandleStateUpdate(payload));
      return;
    case peer::METHOD_HANDOFF_DONE:
      handoff_->HandleHandoffDone(payload, std::move(respond));  // answered from the executor
      return;
    case peer::METHOD_FORWARD_CHECK:
      Serve(std::move(payload), std::move(respond));
      return;
    default:
      respond(std::nullopt);
      return;
  }
}

// forwarder.cc Serve.
void SimNode::Serve(std::string payload, Responder respond) {
  auto request = std::make_shared<peer::ForwardCheckRequest>();
  if (!request->ParseFromString(payload) || request->checks_size() != 1) {
    respond(std::nullopt);
    return;
  }
  if (!routing()) {  // not joined yet: the sender goes on to the key's next node
    respond(std::nullopt);
    return;
  }
  // forwarder.cc Serve: a retry is answered with its first attempt's answer, or waits for it.
  const cluster::RequestId id{request->checks(0).request_id_hi(), request->checks(0).request_id_lo()};
  if (!id.empty()) {
    cluster::DedupCache::Lookup found = dedup_->Begin(id, world_.now(), respond);
    if (found.outcome == cluster::DedupCache::Outcome::kDone) {
      respond(std::move(found.answer));
      return;
    }
    if (found.outcome == cluster::DedupCache::Outcome::kWaiting) return;
    respond = Remembered(id, std::move(respond));
  }
  const ring::Token token = ring::RingToken(request->checks(0).key());
  if (handoff_->Switching(token)) {
    std::function<void()> resume = [this, request, respond] {
      const std::string decider = DeciderOf(ring::RingToken(request->checks(0).key()));
      if (decider.empty() || decider == id_) {
        DecideAndReply(request, respond);
      } else {
        PassOn(request, respond);
      }
    };
    if (handoff_->HoldWhileSwitching(token, resume)) return;
  }
  if (cluster::PassesOn(request->checks(0).hops(), DeciderOf(token), id_, request->from())) {
    PassOn(request, std::move(respond));
    return;
  }
  if (handoff_->routing().Current().Relinquished(token, id_)) {  // sent back by the new owner
    respond(std::nullopt);
    return;
  }
  DecideAndReply(request, std::move(respond));
}

Responder SimNode::Remembered(cluster::RequestId id, Responder respond) {
  return [this, id, respond = std::move(respond)](std::optional<std::string> answer) {
    if (answer.has_value()) {
      dedup_->Finish(id, *answer);
    } else {
      dedup_->Abandon(id);
    }
    respond(std::move(answer));
  };
}

void SimNode::PassOn(const std::shared_ptr<peer::ForwardCheckRequest>& request, Responder respond) {
  peer::ForwardedCheck check = request->checks(0);
  check.set_hops(check.hops() + 1);
  Forward(std::move(check), [this, request, respond](std::optional<peer::ForwardedResult> result) {
    if (!result.has_value()) {
      const ring::Token token = ring::RingToken(request->checks(0).key());
      if (handoff_->routing().Current().Relinquished(token, id_)) {
        respond(std::nullopt);  // left: the original sender goes on to the key's next node
        return;
      }
      if (!MayDecideLocally(token)) {  // closed: no copy here, or a minority
        respond(std::nullopt);
        return;
      }
      DecideAndReply(request, respond);
      return;
    }
    peer::ForwardCheckResponse response;
    response.set_from(id_);
    *response.add_results() = std::move(*result);  // check_id: the decision it came from (see header)
    respond(response.SerializeAsString());
  });
}

void SimNode::DecideAndReply(const std::shared_ptr<peer::ForwardCheckRequest>& request, Responder respond) {
  if (clock_skewed_ || (options_.closed && Minority())) {
    // forwarder.cc: CHECK_UNAVAILABLE, nothing charged; the sender goes on
    respond(std::nullopt);
    return;
  }
  const peer::ForwardedCheck& check = request->checks(0);
  Decide(check.check_id(), check.key(), [this, respond](uint64_t decision, bool acked) {
    const DecisionRecord& d = cluster_.checker().decision(decision);
    peer::ForwardCheckResponse response;
    response.set_from(id_);
    peer::ForwardedResult* result = response.add_results();
    result->set_check_id(decision);
    // forwarder.cc DecideAndReply: an admission not every later holder acknowledged comes back unacked.
    result->set_status(d.allowed && !acked ? peer::CHECK_UNACKED : peer::CHECK_OK);
    result->set_owner(id_);
    result->set_allowed(d.allowed);
    peer::LimitDecision* limit = result->add_decisions();
    limit->set_allowed(d.allowed);
    limit->set_remaining(d.remaining);
    respond(response.SerializeAsString());
  });
}

}  // namespace ringlimit::sim
