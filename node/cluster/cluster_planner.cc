#include "node/cluster/cluster_planner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace ringlimit::cluster {

using ring::MemberState;
using ring::MonoTime;

namespace {

// A member back with an incarnation this much higher without leaving the ring restarted: far more
// refutations than a live member ever makes (an incarnation is its start time in ms; a refutation adds 1).
constexpr uint64_t kRestartJump = 1000;
// Members without a clock estimate pinged for one per probe interval, at most.
constexpr size_t kClockPingsPerRound = 8;

}  // namespace

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

ClusterPlanner::ClusterPlanner(ClusterPlannerOptions options)
    : options_(std::move(options)), clocks_(options_.clock) {}

ClusterActions ClusterPlanner::Start(MonoTime now, int64_t wall_ns, ring::MemberInfo self,
                                     const std::vector<std::string>& seeds,
                                     std::vector<std::string> discovered) {
  membership_.emplace(options_.membership, std::move(self));
  routed_version_ = 0;  // a new table: compared at the first Process
  membership_->SetDiscovered(std::move(discovered));
  ClusterActions actions;
  Process(now, wall_ns, membership_->Start(now, seeds), actions);
  return actions;
}

void ClusterPlanner::SetDiscovered(std::vector<std::string> addresses) {
  if (membership_) membership_->SetDiscovered(std::move(addresses));
}

ClusterActions ClusterPlanner::Tick(MonoTime now, int64_t wall_ns) {
  ClusterActions actions;
  if (!membership_) return actions;
  // A tick this late means the process was stopped or starved (ticks come every probe interval / 4): as
  // long as a minority spell that asks for a catch-up (JudgeQuorum), the others may have declared this node
  // dead meanwhile and decided its ranges, and it may never hear so -- the rumour can arrive after it
  // refuted an older suspicion at a higher incarnation (then it is stale), or not at all. So it catches up as
  // after its death: its ranges stay unsynced until a holder with their copy has pushed it, instead of being
  // decided from what this node held before the pause once the pause fence lifts.
  if (last_tick_ != MonoTime{} && now - last_tick_ >= options_.membership.suspicion_timeout / 2) {
    spdlog::warn("cluster: {} ms since the last membership tick: catching up as after being declared dead",
                 std::chrono::duration_cast<std::chrono::milliseconds>(now - last_tick_).count());
    catch_up_ = true;
  }
  last_tick_ = now;
  Process(now, wall_ns, membership_->Tick(now), actions);
  JudgeClock(now, wall_ns, actions);
  JudgeQuorum(now);
  FinishCall(actions);
  return actions;
}

ClusterActions ClusterPlanner::Receive(MonoTime now, int64_t received_wall_ns, const ring::Message& message) {
  ClusterActions actions;
  if (!membership_) return actions;
  Process(now, received_wall_ns, membership_->Receive(now, message), actions);
  // After the membership's events (which forget the clocks of members that left): an Ack
  // answering this node's Ping is a sample of its sender's clock.
  if (message.type == ring::MessageType::kAck && message.echo_wall_ns != 0 && message.wall_ns != 0 &&
      message.from != options_.node_id) {
    clocks_.Add(message.from, now,
                ring::ClockSample{ring::WallTime(message.echo_wall_ns), ring::WallTime(message.wall_ns),
                                  ring::WallTime(received_wall_ns)});
  }
  return actions;
}

ClusterActions ClusterPlanner::Leave(MonoTime now, int64_t wall_ns) {
  ClusterActions actions;
  if (!membership_ || leaving_) return actions;
  leaving_ = true;
  Process(now, wall_ns, membership_->Leave(now), actions);
  return actions;
}

ClusterActions ClusterPlanner::FinishLeave(MonoTime now, int64_t wall_ns) {
  ClusterActions actions;
  if (!membership_) return actions;
  ring::MembershipOutput out = membership_->FinishLeave(now);
  actions.announce = std::move(out.messages);
  out.messages.clear();
  for (ring::Outgoing& outgoing : actions.announce) outgoing.message.wall_ns = wall_ns;
  Process(now, wall_ns, std::move(out), actions);
  actions.snapshot = true;
  return actions;
}

void ClusterPlanner::JudgeQuorum(MonoTime at) {
  const ring::Reach reach = membership_->reach();  // ReachOf(Members()) without copying the table
  const QuorumView now{reach.minority(), reach.reached, reach.known};
  if (now == quorum_) return;
  const bool was_minority = quorum_.minority;
  quorum_ = now;
  if (now.minority == was_minority) return;
  if (now.minority) {
    spdlog::warn("cluster: this node reaches {} of the {} members it knows: a minority", now.reached,
                 now.known);
    minority_since_ = at;
    return;
  }
  spdlog::info("cluster: this node reaches {} of the {} members it knows: a majority again", now.reached,
               now.known);
  // Cut off from the majority for long, this node may have been declared dead there and its keys decided by
  // their next holders, which it may not have heard yet (the rumour comes later, or never: the majority
  // forgot it). So it catches up as if it had been: its ranges become incoming until a holder with their
  // copy has pushed it (unsynced), instead of deciding them from what it held when it was cut off. On the
  // ring built from what this call learnt (the members back), so after it: FinishCall. "For long": half a
  // suspicion timeout -- the others declare it dead no sooner than a suspicion timeout after suspecting it,
  // and they lose it about when it loses them; a shorter flap (a busy machine) costs no resync.
  if (at - minority_since_ >= options_.membership.suspicion_timeout / 2) catch_up_ = true;
}

void ClusterPlanner::FinishCall(ClusterActions& actions) {
  if (!std::exchange(catch_up_, false)) return;
  CatchUpAfterDeath(actions);
}

void ClusterPlanner::JudgeClock(MonoTime now, int64_t wall_ns, ClusterActions& actions) {
  // From the table Process keeps (routed_members_, current after the call's Process), into scratch kept
  // for its capacity: this runs at every tick.
  clock_members_.clear();
  std::vector<std::string_view> unmeasured_addresses;
  bool offsets_changed = false;
  size_t measured = 0;
  for (const ring::MemberInfo& m : routed_members_) {
    if (m.id == options_.node_id || !ring::IsInRing(m.state)) continue;
    clock_members_.push_back(m.id);
    std::optional<ring::OffsetEstimate> estimate = clocks_.Estimate(m.id, now);
    if (!estimate) {
      unmeasured_addresses.push_back(m.peer_address);
      continue;
    }
    ++measured;
    auto it = offsets_.find(m.id);
    if (it == offsets_.end()) {
      offsets_.emplace(m.id, *estimate);
      offsets_changed = true;
    } else if (!(it->second == *estimate)) {
      it->second = *estimate;
      offsets_changed = true;
    }
  }
  if (measured != offsets_.size()) {
    // Members no longer measured leave the map; one out of the ring (dead) stays while its estimate does, so
    // that its late forwards are judged (above).
    const size_t before = offsets_.size();
    std::erase_if(offsets_, [&](const auto& entry) { return !clocks_.Estimate(entry.first, now); });
    offsets_changed = offsets_changed || offsets_.size() != before;
  }
  if (offsets_changed) ++offsets_version_;
  const ring::ClockHealth before = clocks_.health();
  const ring::ClockHealth after = clocks_.Evaluate(now, clock_members_);
  // A member just met, or not probed for long (a large cluster probes each member rarely), is pinged for
  // its clock at once rather than at its turn: forwarded checks from it are judged against its offset
  // (Forwarder, "Deadlines"). The Ack, unknown to the membership (seq 0), only feeds the estimator. At most
  // kClockPingsPerRound a probe interval, taken in turn, so the traffic does not grow with the cluster (at
  // 1,000 members every estimate goes stale between two probes of that member: tests/sim/scale.h); a member
  // not measured yet is not judged (its checks get no deadline), which is the safe side.
  if (!unmeasured_addresses.empty() && now - last_clock_pings_ >= options_.membership.probe_interval) {
    last_clock_pings_ = now;
    const size_t n = unmeasured_addresses.size();
    const size_t first = clock_ping_cursor_ % n;
    const size_t count = std::min(n, kClockPingsPerRound);
    clock_ping_cursor_ = first + count;
    for (size_t i = 0; i < count; ++i) {
      ring::Outgoing ping;
      ping.to_address = std::string(unmeasured_addresses[(first + i) % n]);
      ping.message.type = ring::MessageType::kPing;
      ping.message.from = options_.node_id;
      ping.message.from_address = membership_->self().peer_address;
      ping.message.wall_ns = wall_ns;
      actions.send.push_back(std::move(ping));
    }
  }
  if (after == before) return;
  if (after == ring::ClockHealth::kSkewed) {
    spdlog::error(
        "cluster: this node's clock is off: it decides nothing (it passes its checks on) until it "
        "is back: {}",
        clocks_.reason());
  } else if (before == ring::ClockHealth::kSkewed) {
    spdlog::warn("cluster: this node's clock is back within the maximum offset; deciding again: {}",
                 clocks_.reason());
  } else {
    spdlog::info("cluster: clock {}: {}", ring::ClockHealthName(after), clocks_.reason());
  }
  actions.snapshot = true;
}

void ClusterPlanner::Process(MonoTime now, int64_t wall_ns, ring::MembershipOutput out,
                             ClusterActions& actions) {
  for (ring::Outgoing& outgoing : out.messages) {
    outgoing.message.wall_ns = wall_ns;
    actions.send.push_back(std::move(outgoing));
  }
  actions.events.insert(actions.events.end(), out.events.begin(), out.events.end());
  for (const ring::MemberEvent& event : out.events) {
    const ring::MemberInfo& m = event.member;
    if (m.id == options_.node_id && event.kind == ring::MemberEventKind::kJoined) continue;
    spdlog::info("cluster: {} is {} (incarnation {}, peer {})", m.id, ring::MemberStateName(m.state),
                 m.incarnation, m.peer_address);
    if ((event.kind == ring::MemberEventKind::kLeft || event.kind == ring::MemberEventKind::kForgotten) &&
        m.id != options_.node_id) {
      actions.disconnect.push_back(m.peer_address);
    }
    // Gone: nothing more to judge of its clock. A member declared dead, or back (refuted, or restarted),
    // keeps its estimate while its samples are within max_age: forwards it sent into a partition may reach
    // this node only after the heal, out of TCP's retransmission queue, and are judged against it (Forwarder,
    // "Deadlines"). A restart under another clock shows in its first sample, which then replaces the others
    // (ring::ClockOffsets::Add); until then a forward whose send time reads minutes off is not judged.
    if ((event.kind == ring::MemberEventKind::kLeft || event.kind == ring::MemberEventKind::kForgotten) &&
        m.id != options_.node_id) {
      clocks_.Forget(m.id);
    }
  }
  for (const ring::IdConflict& conflict : out.id_conflicts) {
    // Once per few seconds per pair: a refused node retries its join every second.
    auto [it, first] = conflicts_logged_.try_emplace(conflict.id + " " + conflict.refused, now);
    if (!first && now - it->second < std::chrono::seconds(5)) continue;
    it->second = now;
    if (conflicts_logged_.size() > 1024) conflicts_logged_.clear();
    if (conflict.id == options_.node_id) {
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
  if (!out.events.empty()) JudgeQuorum(now);
  RingPtr new_ring;
  if (out.ring_changed) {
    auto built = ring::RingView::Create(++ring_version_, membership_->RingMembers());
    if (built.ok()) {
      new_ring = std::move(built).value();
      spdlog::info("cluster: ring version {} with {} members", ring_version_, new_ring->members().size());
    } else {
      spdlog::error("cluster: cannot build the ring: {}", built.status().message());
    }
  }
  // The members first: the listener's work (handoffs) looks them up.
  // Messages alone (probes and their answers, at every tick) change only the snapshot's counters: those
  // are republished at most once a probe interval.
  if (!out.events.empty() || out.ring_changed || !out.id_conflicts.empty() ||
      (!out.messages.empty() && now - counters_published_ >= options_.membership.probe_interval)) {
    actions.snapshot = true;
    counters_published_ = now;
  }
  // The table is copied only when it may have changed: every message and tick comes through here, and a copy
  // is O(N).
  if (membership_->table_version() != routed_version_) {
    routed_version_ = membership_->table_version();
    if (std::vector<ring::MemberInfo> members = membership_->Members(); members != routed_members_) {
      routed_members_ = members;
      actions.members = std::make_shared<const std::vector<ring::MemberInfo>>(std::move(members));
      actions.snapshot = true;
    }
  }
  if (new_ring != nullptr) {
    // The routing table gets the new ring only together with the handoff route overrides of the change:
    // the listener (the handoff) publishes both as one table. A check routed before that follows the old
    // ring, which the old overrides agree with.
    actions.ring_changes.push_back(RingChange{std::exchange(ring_, new_ring), new_ring, true});
    actions.new_ring = new_ring;
  }
  if (!out.events.empty() || new_ring != nullptr) NoticeRestarts(actions);
  if (out.declared_dead) {
    catch_up_ = false;  // the same catch-up, once
    CatchUpAfterDeath(actions);
  }
  FinishCall(actions);
}

// This node was declared dead (paused, or cut off, past failure detection) and refuted it. Its own ring
// never lost it, but the others' did: their successors decided its ranges meanwhile, and they will hand them
// back when they see it alive again, as to a joining node. So take its ranges as incoming, like a joining
// node, instead of deciding them from its memory from before the pause: tell the listener as if it had left
// and joined again.
void ClusterPlanner::CatchUpAfterDeath(ClusterActions& actions) {
  if (ring_ == nullptr || ring_->Find(options_.node_id) == nullptr || ring_->members().size() < 2) return;
  auto without = ring_->Without(options_.node_id);
  if (!without.ok()) return;
  spdlog::warn("cluster: this node may have been declared dead: waiting for its ranges to be handed back");
  actions.ring_changes.push_back(RingChange{std::move(without).value(), ring_, false});
}

// A member that restarted before anyone declared it dead comes back with a much higher incarnation (its
// start time in ms) without ever leaving the ring: the ring does not change, yet it lost its memory tier and
// must be handed its ranges back like a joining node (which is how it sees itself: every range it owns is
// incoming). Tell the listener as if it had left and joined again.
void ClusterPlanner::NoticeRestarts(ClusterActions& actions) {
  std::vector<std::string> restarted;
  std::map<std::string, uint64_t> seen;
  for (const ring::MemberInfo& m : membership_->Members()) {
    if (m.id == options_.node_id || !ring::IsInRing(m.state)) continue;
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
    spdlog::info("cluster: {} restarted without leaving the ring: handing its ranges back", id);
    actions.ring_changes.push_back(RingChange{std::move(without).value(), ring_, false});
  }
}

std::shared_ptr<ClusterSnapshot> ClusterPlanner::Snapshot(MonoTime now) const {
  auto snap = std::make_shared<ClusterSnapshot>();
  snap->self = membership_->self();
  snap->members = membership_->Members();
  snap->ring = ring_;
  snap->joined = membership_->joined();
  snap->stats = membership_->stats();
  snap->clock.health = clocks_.health();
  snap->clock.reason = clocks_.reason();
  snap->clock.median_offset = clocks_.median_offset();
  for (const ring::MemberInfo& m : snap->members) {
    if (m.id == options_.node_id) continue;
    if (std::optional<ring::OffsetEstimate> estimate = clocks_.Estimate(m.id, now))
      snap->clock.offsets.emplace(m.id, *estimate);
  }
  return snap;
}

}  // namespace ringlimit::cluster
