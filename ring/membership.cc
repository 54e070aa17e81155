#include "ring/membership.h"

#include <algorithm>
#include <array>
#include <bit>
#include <utility>

namespace ringlimit::ring {
namespace {

constexpr size_t kMaxAddressLength = 256;
constexpr size_t kMaxRelays = 1024;  // indirect probes in flight on behalf of others

bool Probeable(MemberState state) {
  return state == MemberState::kJoining || state == MemberState::kAlive || state == MemberState::kLeaving ||
         state == MemberState::kSuspect;
}

bool Tombstone(MemberState state) { return state == MemberState::kDead || state == MemberState::kLeft; }

// Indexed by MemberState.
constexpr std::array<std::string_view, 6> kStateNames = {"joining", "alive", "leaving",
                                                         "suspect", "dead",  "left"};
constexpr std::array<MemberEventKind, 6> kStateEvents = {MemberEventKind::kJoined,  MemberEventKind::kAlive,
                                                         MemberEventKind::kLeaving, MemberEventKind::kSuspect,
                                                         MemberEventKind::kDead,    MemberEventKind::kLeft};

MemberEventKind EventFor(MemberState state) { return kStateEvents[static_cast<size_t>(state)]; }

bool Valid(const MemberInfo& m) {
  return !m.id.empty() && m.id.size() <= kMaxMemberIdLength && m.vnodes >= 1 && m.vnodes <= kMaxVnodes &&
         m.http_address.size() <= kMaxAddressLength && m.peer_address.size() <= kMaxAddressLength &&
         static_cast<uint8_t>(m.state) <= static_cast<uint8_t>(MemberState::kLeft);
}

// Joining, alive, leaving or suspect: the member may be running at its address.
bool Lives(MemberState state) { return state != MemberState::kDead && state != MemberState::kLeft; }

bool SameIdentity(const MemberInfo& a, const MemberInfo& b) {
  return a.http_address == b.http_address && a.peer_address == b.peer_address && a.vnodes == b.vnodes;
}

}  // namespace

std::string_view MemberStateName(MemberState state) {
  const auto i = static_cast<size_t>(state);
  return i < kStateNames.size() ? kStateNames[i] : "unknown";
}

std::optional<MemberState> ParseMemberState(std::string_view name) {
  for (MemberState s : {MemberState::kJoining, MemberState::kAlive, MemberState::kLeaving,
                        MemberState::kSuspect, MemberState::kDead, MemberState::kLeft}) {
    if (MemberStateName(s) == name) return s;
  }
  return std::nullopt;
}

bool IsInRing(MemberState state) {
  return state == MemberState::kAlive || state == MemberState::kSuspect || state == MemberState::kLeaving;
}

Reach ReachOf(std::span<const MemberInfo> members) {
  Reach reach;
  for (const MemberInfo& m : members) {
    if (m.state == MemberState::kJoining || m.state == MemberState::kLeft) continue;
    ++reach.known;
    if (m.state == MemberState::kAlive || m.state == MemberState::kLeaving) ++reach.reached;
  }
  return reach;
}

bool Supersedes(const MemberInfo& update, const MemberInfo& current) {
  if (update.incarnation != current.incarnation) return update.incarnation > current.incarnation;
  return static_cast<uint8_t>(update.state) > static_cast<uint8_t>(current.state);
}

Status Validate(const MembershipOptions& o) {
  using std::chrono::milliseconds;
  if (o.probe_interval <= milliseconds(0)) return Status::InvalidArgument("probe_interval must be positive");
  if (o.probe_timeout <= milliseconds(0) || o.probe_timeout >= o.probe_interval) {
    return Status::InvalidArgument("probe_timeout must be positive and shorter than probe_interval");
  }
  if (o.suspicion_timeout <= milliseconds(0)) {
    return Status::InvalidArgument("suspicion_timeout must be positive");
  }
  if (o.join_retry_interval <= milliseconds(0)) {
    return Status::InvalidArgument("join_retry_interval must be positive");
  }
  if (o.tombstone_retention < o.suspicion_timeout) {
    return Status::InvalidArgument("tombstone_retention must be >= suspicion_timeout");
  }
  if (o.sync_interval < milliseconds(0)) return Status::InvalidArgument("sync_interval must not be negative");
  if (o.sync_scale_after == 0) return Status::InvalidArgument("sync_scale_after must be at least 1");
  if (o.retransmit_mult == 0) return Status::InvalidArgument("retransmit_mult must be at least 1");
  if (o.max_piggyback == 0) return Status::InvalidArgument("max_piggyback must be at least 1");
  if (o.max_vnodes < 1 || o.max_vnodes > kMaxVnodes) {
    return Status::InvalidArgument("max member vnodes must be between 1 and " + std::to_string(kMaxVnodes));
  }
  return Status::OK();
}

std::chrono::milliseconds SyncIntervalFor(const MembershipOptions& options, size_t members) {
  const size_t scale_after = std::max<size_t>(1, options.sync_scale_after);
  if (members <= scale_after) return options.sync_interval;
  return std::chrono::milliseconds(options.sync_interval.count() * static_cast<int64_t>(members) /
                                   static_cast<int64_t>(scale_after));
}

Membership::Membership(const MembershipOptions& options, MemberInfo self)
    : options_(options),
      self_(std::move(self)),
      dead_news_from_(self_.incarnation),
      rng_(options.random_seed != 0 ? options.random_seed : RingToken(self_.id)) {}

// ---------------------------------------------------------------------------------------------------------
// Entry points. Each one notes the ring entries of the members it touches (TouchRing) and compares them
// at its end (RingChanged), so it can tell the caller when to rebuild the ring.

MembershipOutput Membership::Start(MonoTime now, const std::vector<std::string>& seeds) {
  MembershipOutput out;
  if (started_) return out;
  TouchRing(self_.id);
  started_ = true;
  for (const std::string& s : seeds) {
    if (s != self_.peer_address && std::find(seeds_.begin(), seeds_.end(), s) == seeds_.end())
      seeds_.push_back(s);
  }
  self_.state = seeds_.empty() ? MemberState::kAlive : MemberState::kJoining;
  ++table_version_;
  out.events.push_back(MemberEvent{MemberEventKind::kJoined, self_});
  Enqueue(self_, self_queue_);
  out.ring_changed = RingChanged();
  next_probe_at_ = now;
  next_sync_at_ = now + options_.sync_interval;
  next_heal_at_ = next_sync_at_;
  if (!seeds_.empty()) {
    SendJoin(out);
    next_join_at_ = now + options_.join_retry_interval;
  }
  joining_since_ = now;
  return out;
}

void Membership::SetDiscovered(std::vector<std::string> addresses) {
  std::erase(addresses, self_.peer_address);
  std::sort(addresses.begin(), addresses.end());
  addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
  discovered_ = std::move(addresses);
}

MembershipOutput Membership::Tick(MonoTime now) {
  MembershipOutput out;
  if (!started_ || self_.state == MemberState::kLeft) return out;

  if (self_.state == MemberState::kJoining && options_.join_alone_after.count() > 0 &&
      now - joining_since_ >= options_.join_alone_after) {
    SetSelfState(MemberState::kAlive, out);  // nobody answered: the first of its cluster
  }
  if (self_.state == MemberState::kJoining && now >= next_join_at_) {
    SendJoin(out);
    next_join_at_ = now + options_.join_retry_interval;
  }
  for (auto it = relays_.begin(); it != relays_.end();) {
    it = now >= it->second.expires_at ? relays_.erase(it) : std::next(it);
  }
  ProbeStep(now, out);
  Gossip(now, out);
  // Suspicion timeouts: the expired suspects, declared dead in id order.
  std::vector<std::string> expired;
  for (const auto& [since, id] : suspects_by_time_) {
    if (now - since < options_.suspicion_timeout) break;
    expired.push_back(id);
  }
  std::sort(expired.begin(), expired.end());
  for (const std::string& id : expired) {
    auto it = Lookup(id);
    MemberInfo dead = it->second.info;
    dead.state = MemberState::kDead;
    Apply(now, it, dead, out);
  }
  MaybeSync(now, out);
  Reap(now, out);

  out.ring_changed = RingChanged();
  return out;
}

MembershipOutput Membership::Receive(MonoTime now, const Message& message) {
  MembershipOutput out;
  if (!started_ || self_.state == MemberState::kLeft) return out;

  for (const MemberInfo& update : message.updates) Merge(now, update, out);

  switch (message.type) {
    case MessageType::kPing: {
      Outgoing ack = MakeMessage(MessageType::kAck, message.from, message.from_address, message.seq);
      ack.message.target = self_.id;
      ack.message.echo_wall_ns = message.wall_ns;
      if (message.full_state) {
        ack.message.full_state = true;
        ack.message.updates = FullTable();
      }
      out.messages.push_back(std::move(ack));
      break;
    }
    case MessageType::kPingReq: {
      if (message.target == self_.id) {  // odd, but the answer is obvious
        Outgoing ack = MakeMessage(MessageType::kAck, message.from, message.from_address, message.seq);
        ack.message.target = self_.id;
        ack.message.echo_wall_ns = message.wall_ns;
        out.messages.push_back(std::move(ack));
        break;
      }
      if (relays_.size() >= kMaxRelays) break;  // a flood of PingReqs must not grow memory
      const uint64_t seq = next_seq_++;
      relays_[seq] = Relay{message.from, message.from_address, message.seq, message.target,
                           now + options_.probe_interval};
      out.messages.push_back(MakeMessage(MessageType::kPing, message.target, message.target_address, seq));
      break;
    }
    case MessageType::kAck: {
      if (auto relay = relays_.find(message.seq); relay != relays_.end()) {
        Outgoing ack = MakeMessage(MessageType::kAck, relay->second.requester_id,
                                   relay->second.requester_address, relay->second.requester_seq);
        ack.message.target = relay->second.target;
        out.messages.push_back(std::move(ack));
        relays_.erase(relay);
      } else if (probe_ && message.seq == probe_->seq) {
        probe_.reset();  // the target answered, directly or through a helper
      }
      if (message.full_state && self_.state == MemberState::kJoining) {
        // A seed's table: joined, unless it shows our id held by a live member elsewhere (counted in Merge).
        const bool taken =
            std::any_of(message.updates.begin(), message.updates.end(), [&](const MemberInfo& m) {
              return m.id == self_.id && m.peer_address != self_.peer_address && Lives(m.state);
            });
        if (!taken) SetSelfState(MemberState::kAlive, out);
      }
      break;
    }
  }

  out.ring_changed = RingChanged();
  return out;
}

MembershipOutput Membership::Leave(MonoTime now) {
  MembershipOutput out;
  (void)now;
  if (!started_ || self_.state == MemberState::kLeaving || self_.state == MemberState::kLeft) return out;
  SetSelfState(MemberState::kLeaving, out);
  out.ring_changed = RingChanged();
  return out;
}

MembershipOutput Membership::FinishLeave(MonoTime now) {
  MembershipOutput out;
  (void)now;
  if (!started_ || self_.state == MemberState::kLeft) return out;
  SetSelfState(MemberState::kLeft, out);
  // We will not probe any more, so tell every member directly instead of waiting for piggybacking.
  for (const auto& [id, entry] : members_) {
    if (!Probeable(entry.info.state)) continue;
    Outgoing ping = MakeMessage(MessageType::kPing, id, entry.info.peer_address, next_seq_++);
    ping.message.updates.insert(ping.message.updates.begin(), self_);
    out.messages.push_back(std::move(ping));
  }
  for (QueueLevel& level : queue_) {
    for (const Queued& q : level) *q.state = QueueState{};
    level.clear();
  }
  queued_ = 0;
  out.ring_changed = RingChanged();
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Queries.

std::vector<MemberInfo> Membership::Members() const {
  std::vector<MemberInfo> out = FullTable();
  std::sort(out.begin(), out.end(), [](const MemberInfo& a, const MemberInfo& b) { return a.id < b.id; });
  return out;
}

Reach Membership::reach() const {
  // ReachOf(Members()) from the counts, O(1): the others by state_counts_, then self by its state.
  Reach reach;
  reach.known = members_.size() - CountOf(MemberState::kJoining) - CountOf(MemberState::kLeft);
  reach.reached = CountOf(MemberState::kAlive) + CountOf(MemberState::kLeaving);
  if (self_.state != MemberState::kJoining && self_.state != MemberState::kLeft) ++reach.known;
  if (self_.state == MemberState::kAlive || self_.state == MemberState::kLeaving) ++reach.reached;
  return reach;
}

std::optional<MemberInfo> Membership::Find(std::string_view id) const {
  if (id == self_.id) return self_;
  auto it = Lookup(id);
  if (it == members_.end()) return std::nullopt;
  return it->second.info;
}

std::vector<RingMember> Membership::RingMembers() const {
  std::vector<RingMember> out;
  bool self_added = !started_ || !IsInRing(self_.state);
  for (const auto& [id, entry] : members_) {  // sorted by id; slot self in order
    if (!self_added && self_.id < id) {
      out.push_back(RingMember{self_.id, self_.vnodes, self_.peer_address});
      self_added = true;
    }
    if (IsInRing(entry.info.state)) out.push_back(RingMember{id, entry.info.vnodes, entry.info.peer_address});
  }
  if (!self_added) out.push_back(RingMember{self_.id, self_.vnodes, self_.peer_address});
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Merging.

bool Membership::Merge(MonoTime now, const MemberInfo& update, MembershipOutput& out) {
  if (!Valid(update)) {
    ++stats_.invalid_updates;
    return false;
  }
  if (update.vnodes > options_.max_vnodes) {
    ++stats_.vnodes_refused;
    return false;
  }
  if (update.id == self_.id && update.peer_address != self_.peer_address) {
    // Another node with our id (or our own earlier life at another address): not a rumour about us.
    if (Lives(update.state)) {
      ++stats_.id_conflicts;
      out.id_conflicts.push_back(IdConflict{update.id, update.peer_address, self_.peer_address});
    }
    return false;
  }
  if (update.id == self_.id) {
    // Only we speak for ourselves: anything newer than, or contradicting, our own record is a rumour.
    const bool newer = update.incarnation > self_.incarnation;
    const bool contradicts = update.incarnation == self_.incarnation &&
                             (update.state != self_.state || !SameIdentity(update, self_));
    // A member that declared us dead dropped us from its ring, whatever we refuted since: the rumour may
    // come after we refuted an older suspicion (then it is stale here, yet true). Each such declaration of
    // this life is reported once.
    if (update.state == MemberState::kDead && update.incarnation >= dead_news_from_) {
      out.declared_dead = true;
      dead_news_from_ = update.incarnation + 1;
    }
    if (newer || contradicts) Refute(update.incarnation);
    return false;
  }
  auto it = Lookup(update.id);
  if (it == members_.end() ? Tombstone(update.state) : !Supersedes(update, it->second.info)) {
    ++stats_.stale_updates;
    return false;
  }
  if (it != members_.end() && Lives(it->second.info.state) && Lives(update.state) &&
      it->second.info.peer_address != update.peer_address) {
    ++stats_.id_conflicts;
    out.id_conflicts.push_back(IdConflict{update.id, it->second.info.peer_address, update.peer_address});
    return false;
  }
  Apply(now, it, update, out);
  return true;
}

void Membership::Apply(MonoTime now, Table::iterator it, const MemberInfo& info, MembershipOutput& out) {
  const bool inserted = it == members_.end();
  if (inserted) {
    it = members_.try_emplace(info.id).first;
    index_.emplace(it->first, it);
  }
  Entry& entry = it->second;
  if (!inserted) Unindex(it->first, entry);
  ring_touched_.try_emplace(info.id, inserted ? std::nullopt : RingEntry(info.id, entry.info));
  const bool state_changed = entry.info.state != info.state;
  const bool identity_changed = !SameIdentity(entry.info, info);
  entry.info = info;
  ++table_version_;
  if (inserted || state_changed) entry.changed_at = now;
  Index(it->first, entry);
  if (inserted) {
    out.events.push_back(MemberEvent{MemberEventKind::kJoined, info});
    // A newcomer is probed within this round rather than after the next reshuffle.
    std::uniform_int_distribution<size_t> pos(probe_index_, probe_order_.size());
    probe_order_.insert(probe_order_.begin() + static_cast<std::ptrdiff_t>(pos(rng_)), info.id);
  } else if (state_changed || identity_changed) {
    out.events.push_back(MemberEvent{EventFor(info.state), info});
  }
  Enqueue(entry.info, entry.queue);
}

void Membership::Index(const std::string& id, const Entry& entry) {
  ++state_counts_[static_cast<size_t>(entry.info.state)];
  if (entry.info.state == MemberState::kSuspect) suspects_by_time_.emplace(entry.changed_at, id);
  if (Tombstone(entry.info.state)) tombstones_by_time_.emplace(entry.changed_at, id);
}

void Membership::Unindex(const std::string& id, const Entry& entry) {
  --state_counts_[static_cast<size_t>(entry.info.state)];
  if (entry.info.state == MemberState::kSuspect) suspects_by_time_.erase({entry.changed_at, id});
  if (Tombstone(entry.info.state)) tombstones_by_time_.erase({entry.changed_at, id});
}

std::optional<RingMember> Membership::RingEntry(const std::string& id, const MemberInfo& info) const {
  if (!IsInRing(info.state) || (id == self_.id && !started_)) return std::nullopt;
  return RingMember{id, info.vnodes, info.peer_address};
}

void Membership::TouchRing(const std::string& id) {
  if (id == self_.id) {
    ring_touched_.try_emplace(id, RingEntry(id, self_));
  } else if (auto it = Lookup(id); it != members_.end()) {
    ring_touched_.try_emplace(id, RingEntry(id, it->second.info));
  } else {
    ring_touched_.try_emplace(id, std::nullopt);
  }
}

bool Membership::RingChanged() {
  bool changed = false;
  for (const auto& [id, before] : ring_touched_) {
    std::optional<RingMember> now;
    if (id == self_.id) {
      now = RingEntry(id, self_);
    } else if (auto it = Lookup(id); it != members_.end()) {
      now = RingEntry(id, it->second.info);
    }
    changed = changed || now != before;
  }
  ring_touched_.clear();
  return changed;
}

void Membership::Refute(uint64_t rumour_incarnation) {
  self_.incarnation = std::max(self_.incarnation, rumour_incarnation) + 1;
  ++table_version_;
  ++stats_.refutations;
  Enqueue(self_, self_queue_);
}

void Membership::SetSelfState(MemberState state, MembershipOutput& out) {
  TouchRing(self_.id);
  ++self_.incarnation;  // our own transitions always outrank any rumour at the old incarnation
  self_.state = state;
  ++table_version_;
  out.events.push_back(MemberEvent{EventFor(state), self_});
  Enqueue(self_, self_queue_);
}

void Membership::Enqueue(const MemberInfo& info, QueueState& state) {
  if (queue_.empty()) queue_.resize(1);
  QueueLevel& first = queue_.front();
  if (state.queued) {
    first.splice(first.begin(), queue_[state.transmits], state.at);  // back to no transmits, newest first
  } else {
    first.push_front(Queued{&info, &state});
    ++queued_;
  }
  state.queued = true;
  state.transmits = 0;
  state.at = first.begin();
}

void Membership::Dequeue(QueueState& state) {
  if (!state.queued) return;
  queue_[state.transmits].erase(state.at);
  --queued_;
  state = QueueState{};
}

// ---------------------------------------------------------------------------------------------------------
// Failure detection.

void Membership::ProbeStep(MonoTime now, MembershipOutput& out) {
  if (probe_) {
    if (!probe_->indirect_sent && now - probe_->sent_at >= options_.probe_timeout) {
      probe_->indirect_sent = true;
      auto target = Lookup(probe_->target);
      std::vector<std::string> helpers;
      if (target != members_.end()) helpers = IndirectHelpers(target);  // else forgotten meanwhile
      for (const std::string& h : helpers) {
        Outgoing req =
            MakeMessage(MessageType::kPingReq, h, Lookup(h)->second.info.peer_address, probe_->seq);
        req.message.target = probe_->target;
        req.message.target_address = target->second.info.peer_address;
        out.messages.push_back(std::move(req));
        ++stats_.indirect_probes_sent;
      }
    }
    if (now - probe_->sent_at >= options_.probe_interval) {
      ++stats_.probes_failed;
      const std::string target = probe_->target;
      probe_.reset();
      Suspect(now, target, out);
    }
  }
  if (!probe_ && now >= next_probe_at_) StartProbe(now, out);
}

std::vector<std::string> Membership::IndirectHelpers(Table::const_iterator target) {
  const size_t want = options_.indirect_probes;
  const bool target_alive = target->second.info.state == MemberState::kAlive;
  const size_t others = CountOf(MemberState::kAlive) - (target_alive ? 1 : 0);
  std::vector<std::string> chosen;
  if (want == 0 || others == 0) return chosen;
  // Random draws from the probe order (every probeable member is in it, some gone ones too): O(want) when
  // enough of the members are alive, not a walk over the table for every failed probe.
  if (others > want && !probe_order_.empty()) {
    std::uniform_int_distribution<size_t> index(0, probe_order_.size() - 1);
    for (size_t draw = 0; draw < 4 * want && chosen.size() < want; ++draw) {
      const std::string& id = probe_order_[index(rng_)];
      auto it = Lookup(id);
      if (it == members_.end() || it == target || it->second.info.state != MemberState::kAlive ||
          std::find(chosen.begin(), chosen.end(), id) != chosen.end()) {
        continue;
      }
      chosen.push_back(id);
    }
    if (chosen.size() == want) return chosen;
  }
  // Few alive members, or the draws missed: all of them, shuffled.
  chosen = AliveOthers(target->first);
  std::shuffle(chosen.begin(), chosen.end(), rng_);
  if (chosen.size() > want) chosen.resize(want);
  return chosen;
}

void Membership::Gossip(MonoTime now, MembershipOutput& out) {
  if (options_.gossip_nodes == 0 || queued_ == 0 || now < next_gossip_at_ || probe_order_.empty()) return;
  next_gossip_at_ = now + options_.probe_interval;
  // Random probeable members from the probe order (every probeable member is in it, some gone ones too):
  // O(gossip_nodes) draws, not a walk over the table.
  std::uniform_int_distribution<size_t> index(0, probe_order_.size() - 1);
  std::vector<std::string> chosen;
  for (uint32_t draw = 0; draw < 2 * options_.gossip_nodes && chosen.size() < options_.gossip_nodes; ++draw) {
    const std::string& id = probe_order_[index(rng_)];
    auto it = Lookup(id);
    if (it == members_.end() || !Probeable(it->second.info.state) ||
        std::find(chosen.begin(), chosen.end(), id) != chosen.end()) {
      continue;
    }
    chosen.push_back(id);
  }
  for (const std::string& id : chosen) {
    if (queued_ == 0) break;
    Outgoing gossip = MakeMessage(MessageType::kAck, id, Lookup(id)->second.info.peer_address, 0);
    gossip.message.target = self_.id;
    out.messages.push_back(std::move(gossip));
  }
}

void Membership::StartProbe(MonoTime now, MembershipOutput& out) {
  next_probe_at_ = now + options_.probe_interval;
  const auto target = NextProbeTarget();
  if (target == members_.end()) return;
  const uint64_t seq = next_seq_++;
  out.messages.push_back(
      MakeMessage(MessageType::kPing, target->first, target->second.info.peer_address, seq));
  probe_ = Probe{target->first, seq, now, false};
  ++stats_.probes_sent;
}

Membership::Table::iterator Membership::NextProbeTarget() {
  for (int pass = 0; pass < 2; ++pass) {
    while (probe_index_ < probe_order_.size()) {
      const std::string& id = probe_order_[probe_index_++];
      auto it = Lookup(id);
      if (it != members_.end() && Probeable(it->second.info.state)) return it;
    }
    // End of a round: a fresh random order of everyone probeable.
    probe_order_.clear();
    probe_index_ = 0;
    for (const auto& [id, entry] : members_) {
      if (Probeable(entry.info.state)) probe_order_.push_back(id);
    }
    std::shuffle(probe_order_.begin(), probe_order_.end(), rng_);
  }
  return members_.end();
}

void Membership::Suspect(MonoTime now, const std::string& id, MembershipOutput& out) {
  auto it = Lookup(id);
  if (it == members_.end()) return;
  const MemberState state = it->second.info.state;
  if (state == MemberState::kSuspect || !Probeable(state)) return;
  MemberInfo suspect = it->second.info;
  suspect.state = MemberState::kSuspect;
  Apply(now, it, suspect, out);
}

void Membership::SendJoin(MembershipOutput& out) {
  std::vector<std::string> targets = seeds_;
  for (const std::string& address : discovered_) {
    if (std::find(targets.begin(), targets.end(), address) == targets.end()) targets.push_back(address);
  }
  for (const std::string& seed : targets) {
    Outgoing ping = MakeMessage(MessageType::kPing, "", seed, next_seq_++);
    ping.message.full_state = true;
    ping.message.updates = FullTable();
    out.messages.push_back(std::move(ping));
  }
}

void Membership::MaybeSync(MonoTime now, MembershipOutput& out) {
  if (options_.sync_interval.count() == 0) return;
  const bool anti_entropy = now >= next_sync_at_;
  const bool heal = now >= next_heal_at_;
  if (!anti_entropy && !heal) return;
  if (anti_entropy) next_sync_at_ = now + SyncIntervalFor(options_, members_.size() + 1);
  if (heal) next_heal_at_ = now + options_.sync_interval;
  auto push_pull = [&](const std::string& to_id, const std::string& to_address) {
    Outgoing ping = MakeMessage(MessageType::kPing, to_id, to_address, next_seq_++);
    ping.message.full_state = true;
    ping.message.updates = FullTable();
    out.messages.push_back(std::move(ping));
  };
  auto pick = [&](const std::vector<std::string>& ids) -> const std::string& {
    std::uniform_int_distribution<size_t> index(0, ids.size() - 1);
    return ids[index(rng_)];
  };
  // Anti-entropy with one alive member. The walks over the table below happen only when their push-pull
  // (O(N) bytes) is sent: a heal tick with nobody dead costs O(1), not O(N).
  const bool alone = CountOf(MemberState::kAlive) == 0;
  if (anti_entropy && !alone) {
    const std::vector<std::string> alive = AliveOthers("");
    const std::string& partner = pick(alive);
    push_pull(partner, Lookup(partner)->second.info.peer_address);
  }
  if (!heal) return;
  // Healing: after a partition both sides may have declared each other dead and stopped probing. Keep
  // offering our table to one dead member (until its tombstone is reaped); if it is alive it refutes.
  if (CountOf(MemberState::kDead) > 0) {
    std::vector<std::string> dead;
    for (const auto& [id, entry] : members_) {
      if (entry.info.state == MemberState::kDead) dead.push_back(id);
    }
    const std::string& partner = pick(dead);
    push_pull(partner, Lookup(partner)->second.info.peer_address);
  }
  // Alone although we were started with seeds: try them again.
  if (alone) {
    for (const std::string& seed : seeds_) push_pull("", seed);
  }
  // Discovered addresses no known member has: another node, or another cluster, to merge with.
  std::vector<std::string> unknown;
  for (const std::string& address : discovered_) {
    const bool known = std::any_of(members_.begin(), members_.end(), [&](const auto& m) {
      return m.second.info.peer_address == address && !Tombstone(m.second.info.state);
    });
    if (!known) unknown.push_back(address);
  }
  if (!unknown.empty()) push_pull("", pick(unknown));
}

void Membership::Reap(MonoTime now, MembershipOutput& out) {
  std::vector<std::string> expired;  // forgotten in id order
  for (const auto& [since, id] : tombstones_by_time_) {
    if (now - since < options_.tombstone_retention) break;
    expired.push_back(id);
  }
  std::sort(expired.begin(), expired.end());
  for (const std::string& id : expired) {
    auto it = Lookup(id);
    Unindex(id, it->second);
    out.events.push_back(MemberEvent{MemberEventKind::kForgotten, it->second.info});
    Dequeue(it->second.queue);
    index_.erase(it->first);
    members_.erase(it);
    ++table_version_;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Dissemination.

Outgoing Membership::MakeMessage(MessageType type, const std::string& to_id, const std::string& to_address,
                                 uint64_t seq) {
  Outgoing o;
  o.to_address = to_address;
  o.to_id = to_id;
  o.message.type = type;
  o.message.seq = seq;
  o.message.from = self_.id;
  o.message.from_address = self_.peer_address;

  // The receiver's own record first when we believe it suspect or dead: it can refute at once.
  bool receiver_record_sent = false;
  o.message.updates.reserve(std::min<size_t>(options_.max_piggyback, queued_) + 1);
  if (auto it = Lookup(to_id); it != members_.end()) {
    const MemberState s = it->second.info.state;
    if (s == MemberState::kSuspect || s == MemberState::kDead) {
      o.message.updates.push_back(it->second.info);
      receiver_record_sent = true;
    }
  }

  // Then the least-transmitted updates of the queue (the lowest levels first, each from its front),
  // max_piggyback of them: O(max_piggyback + levels), whatever the queue's length; no lookup by id.
  std::vector<QueueState*> taken;
  taken.reserve(std::min<size_t>(options_.max_piggyback, queued_));
  for (QueueLevel& level : queue_) {
    for (auto q = level.begin(); q != level.end() && taken.size() < options_.max_piggyback; ++q) {
      if (q->info->id != to_id || !receiver_record_sent) o.message.updates.push_back(*q->info);
      taken.push_back(q->state);
    }
    if (taken.size() >= options_.max_piggyback) break;
  }
  const uint32_t limit = RetransmitLimit();
  for (QueueState* state : taken) {
    // To the front of the next level (a splice), or out of the queue at its limit.
    const uint32_t transmits = state->transmits + 1;
    if (transmits >= limit) {
      Dequeue(*state);
      continue;
    }
    if (queue_.size() <= transmits) queue_.resize(transmits + 1);
    QueueLevel& next = queue_[transmits];
    next.splice(next.begin(), queue_[state->transmits], state->at);
    state->transmits = transmits;
  }
  return o;
}

Membership::Table::iterator Membership::Lookup(std::string_view id) {
  auto it = index_.find(id);
  return it != index_.end() ? it->second : members_.end();
}

Membership::Table::const_iterator Membership::Lookup(std::string_view id) const {
  auto it = index_.find(id);
  return it != index_.end() ? Table::const_iterator(it->second) : members_.end();
}

std::vector<MemberInfo> Membership::FullTable() const {
  std::vector<MemberInfo> out;
  out.reserve(members_.size() + 1);
  out.push_back(self_);
  for (const auto& [id, entry] : members_) out.push_back(entry.info);
  return out;
}

std::vector<std::string> Membership::AliveOthers(const std::string& except) const {
  std::vector<std::string> out;
  for (const auto& [id, entry] : members_) {
    if (id != except && entry.info.state == MemberState::kAlive) out.push_back(id);
  }
  return out;
}

uint32_t Membership::RetransmitLimit() const {
  const uint64_t n = members_.size() + 1;
  const uint32_t log2 = static_cast<uint32_t>(std::bit_width(n));  // ceil(log2(n + 1))
  return options_.retransmit_mult * std::max<uint32_t>(1, log2);
}

}  // namespace ringlimit::ring
