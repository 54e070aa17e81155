#include "replication/handoff_planner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <set>
#include <span>
#include <utility>

namespace ringlimit::replication {
namespace {

using ring::RingView;
using ring::Token;
using ring::TokenRange;

double Seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

// `a` and `b` sorted and non-overlapping; returns the tokens in both, sorted.
std::vector<TokenRange> Intersect(const std::vector<TokenRange>& a, const std::vector<TokenRange>& b) {
  std::vector<TokenRange> out;
  size_t i = 0;
  size_t j = 0;
  while (i < a.size() && j < b.size()) {
    const Token first = std::max(a[i].first, b[j].first);
    const Token last = std::min(a[i].last, b[j].last);
    if (first <= last) out.push_back({first, last});
    if (a[i].last < b[j].last) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

// `a` and `b` sorted and non-overlapping; returns the tokens of `a` not in `b`, sorted.
std::vector<TokenRange> Subtract(const std::vector<TokenRange>& a, const std::vector<TokenRange>& b) {
  std::vector<TokenRange> out;
  size_t j = 0;
  for (const TokenRange& r : a) {
    while (j < b.size() && b[j].last < r.first) ++j;
    Token cursor = r.first;
    bool covered = false;
    for (size_t k = j; k < b.size() && b[k].first <= r.last; ++k) {
      if (b[k].first > cursor) out.push_back({cursor, b[k].first - 1});
      if (b[k].last >= r.last) {
        covered = true;
        break;
      }
      cursor = std::max(cursor, b[k].last + 1);
    }
    if (!covered) out.push_back({cursor, r.last});
  }
  return out;
}

void SortRanges(std::vector<TokenRange>& ranges) {
  std::sort(ranges.begin(), ranges.end(),
            [](const TokenRange& x, const TokenRange& y) { return x.first < y.first; });
}

// `ranges` in any order, overlapping or not; returns the tokens in any of them, sorted, adjacent ranges
// merged.
std::vector<TokenRange> Union(std::vector<TokenRange> ranges) {
  SortRanges(ranges);
  std::vector<TokenRange> out;
  for (const TokenRange& r : ranges) {
    if (!out.empty() &&
        (out.back().last == std::numeric_limits<Token>::max() || r.first <= out.back().last + 1)) {
      out.back().last = std::max(out.back().last, r.last);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

bool Overlaps(const std::vector<TokenRange>& ranges, TokenRange t) {
  return std::any_of(ranges.begin(), ranges.end(),
                     [&](const TokenRange& r) { return r.first <= t.last && t.first <= r.last; });
}

double Share(const std::vector<TokenRange>& ranges) {
  double share = 0;
  for (const TokenRange& r : ranges) share += r.Fraction();
  return share;
}

// `ring` without member `id` (the same ring if it has no such member).
RingPtr Without(const RingPtr& ring, std::string_view id) {
  if (ring == nullptr) return RingView::Create(0, {}).value();
  if (ring->Find(id) == nullptr) return ring;
  std::vector<ring::RingMember> members;
  for (const ring::RingMember& m : ring->members()) {
    if (m.id != id) members.push_back(m);
  }
  // A subset of a valid ring's members is valid: Create cannot fail here.
  return RingView::Create(ring->version(), std::move(members)).value();
}

// Groups sorted `ranges` into scan windows spanning at most 1/kPushWindows of the ring each: a scan of
// the memory tier costs a pass over memory whatever its width, so one scan per small arc would cost a
// pass per vnode.
std::vector<TokenRange> ScanWindows(const std::vector<TokenRange>& ranges) {
  constexpr Token kSpan = std::numeric_limits<Token>::max() / HandoffPlanner::kPushWindows;
  std::vector<TokenRange> windows;
  for (const TokenRange& r : ranges) {
    if (!windows.empty() && r.last - windows.back().first <= kSpan) {
      windows.back().last = r.last;
    } else {
      windows.push_back(r);
    }
  }
  return windows;
}

bool InList(std::span<const ring::RingMember* const> list, std::string_view id) {
  return std::any_of(list.begin(), list.end(), [&](const ring::RingMember* m) { return m->id == id; });
}

}  // namespace

bool InSortedRanges(const std::vector<TokenRange>& sorted, Token t) {
  auto it = std::upper_bound(sorted.begin(), sorted.end(), t,
                             [](Token v, const TokenRange& r) { return v < r.first; });
  return it != sorted.begin() && std::prev(it)->Contains(t);
}

TokenRange ScanSlice(uint32_t i, uint32_t n) {
  const Token step = std::numeric_limits<Token>::max() / n;
  const Token first = step * i;
  const Token last = i + 1 == n ? std::numeric_limits<Token>::max() : step * (i + 1) - 1;
  return {first, last};
}

Status Validate(const HandoffOptions& options) {
  if (options.replicas < 1) return Status::InvalidArgument("replicas must be >= 1");
  if (options.scan_slices < 1) return Status::InvalidArgument("scan_slices must be >= 1");
  if (options.done_timeout.count() <= 0) return Status::InvalidArgument("done_timeout must be > 0");
  if (options.push_timeout.count() <= 0) return Status::InvalidArgument("push_timeout must be > 0");
  if (options.drop_delay.count() < 0) return Status::InvalidArgument("drop_delay must be >= 0");
  if (options.resync_timeout.count() <= 0) return Status::InvalidArgument("resync_timeout must be > 0");
  if (options.read_hold.count() < 0) return Status::InvalidArgument("read_hold must be >= 0");
  return Status::OK();
}

std::vector<std::string> ReplicationTargets(const ReplicateSlice& slice, std::string_view self,
                                            uint32_t replicas, Token token,
                                            const std::function<bool(std::string_view)>& reachable) {
  if (slice.limit.has_value() && !InSortedRanges(*slice.limit, token)) return {};
  if (InSortedRanges(slice.pending_in, token)) return {};  // not this node's to push until released
  const ring::RingMember* owner = slice.after->Owner(token);
  if (owner == nullptr || owner->id != self) return {};
  if (slice.current != nullptr && slice.current != slice.after) {
    const ring::RingMember* now_owner = slice.current->Owner(token);
    if (now_owner == nullptr || now_owner->id != self) return {};
  }
  const auto before_list = slice.before->PreferenceList(token, replicas);
  std::vector<std::string> targets;
  for (const ring::RingMember* m : slice.after->PreferenceList(token, replicas)) {
    if (m->id == self || InList(before_list, m->id)) continue;
    if (reachable(m->id)) targets.push_back(m->id);
  }
  return targets;
}

std::vector<TokenRange> ReplicationRanges(const RingView& before, const RingView& after,
                                          std::string_view self, uint32_t replicas) {
  const std::vector<TokenRange> owned = after.Arcs(self);
  if (owned.empty()) return {};
  std::vector<TokenRange> gained;  // where some other member joined the preference list
  for (const ring::RingMember& m : after.members()) {
    if (m.id == self) continue;
    for (const TokenRange& r :
         Subtract(after.HeldRanges(m.id, replicas), before.HeldRanges(m.id, replicas))) {
      gained.push_back(r);
    }
  }
  return Intersect(owned, Union(std::move(gained)));
}

std::vector<TokenRange> ScanParts(TokenRange slice, const std::optional<std::vector<TokenRange>>& ranges) {
  if (!ranges.has_value()) return {slice};
  return Intersect(*ranges, {slice});
}

HandoffPlanner::HandoffPlanner(std::string self, HandoffOptions options)
    : self_(std::move(self)), options_(options) {}

// Exhaustive over the phases: a new phase does not compile until it says whether it switches and how
// GET /v1/cluster names it.
bool HandoffPlanner::Switching(const Phase& phase) {
  struct IsSwitching {
    bool operator()(const Pushing&) const { return false; }
    bool operator()(const PushDue&) const { return false; }
    bool operator()(const Fencing&) const { return true; }
    bool operator()(const Flushing&) const { return true; }
    bool operator()(const DoneSent&) const { return true; }
    bool operator()(const DoneRetry&) const { return true; }
  };
  return std::visit(IsSwitching{}, phase);
}

const char* HandoffPlanner::PhaseName(const Phase& phase) {
  struct Name {
    const char* operator()(const Pushing&) const { return "pushing"; }
    const char* operator()(const PushDue&) const { return "pushing"; }
    const char* operator()(const Fencing&) const { return "flushing"; }
    const char* operator()(const Flushing&) const { return "flushing"; }
    const char* operator()(const DoneSent&) const { return "done-sent"; }
    const char* operator()(const DoneRetry&) const { return "done-sent"; }
  };
  return std::visit(Name{}, phase);
}

// ------------------------------------------------------------------------------------------- publish

void HandoffPlanner::Publish(HandoffActions& out) const {
  auto next = std::make_shared<RouteOverrides>();
  for (const auto& [id, o] : outgoing_) {
    // While pushing this node decides the ranges; once switching, neither end does until the switch is
    // over (the new owner waits for HandoffDone, this node for its acknowledgement).
    const bool switching = Switching(o.phase);
    for (const TokenRange& r : o.ranges) next->entries.push_back({r, switching ? o.to : self_, switching});
  }
  for (const Incoming& in : incoming_) next->entries.push_back({in.range, in.from});
  std::sort(next->entries.begin(), next->entries.end(),
            [](const auto& x, const auto& y) { return x.range.first < y.range.first; });
  // While leaving, a range whose handoff is over goes to its owner on the ring without this node at once,
  // not back to this node (still an owner on the ring until it has left) while other ranges of the leave
  // are still being handed over.
  next->unsynced = UnsyncedRanges();
  for (const ReadingRange& r : reading_) next->reading.push_back({r.range, r.before, r.read});
  next->left_ring = left_ring_ != nullptr ? left_ring_ : leaving_ && !left_ ? left_ring_pending_ : nullptr;
  out.overrides = std::move(next);
}

HandoffActions& HandoffPlanner::Done(HandoffActions& out) {
  // Re-replication: one slice per pump, so the driver serves other events between slices.
  if (!pump_requested_ && !jobs_.empty() && !jobs_.front().scanning && jobs_.front().outstanding == 0) {
    pump_requested_ = true;
    out.pump = true;
  }
  std::optional<MonoTime> at;
  auto earliest = [&](MonoTime t) { at = at.has_value() ? std::min(*at, t) : t; };
  for (const Incoming& in : incoming_) {
    earliest(in.started + options_.done_timeout);
    auto q = queries_.find(in.from);
    if (q == queries_.end()) {
      earliest(in.started + kHandoffQueryAfter);
    } else if (q->second.round == 0) {
      earliest(std::max(in.started + kHandoffQueryAfter, q->second.next));
    }
  }
  for (const auto& [id, o] : outgoing_) {
    earliest(o.started + options_.push_timeout);
    if (const auto* retry = std::get_if<PushDue>(&o.phase)) earliest(retry->at);
    if (const auto* retry = std::get_if<DoneRetry>(&o.phase)) earliest(retry->at);
  }
  for (const EarlyDone& d : early_dones_) earliest(d.at + options_.done_timeout);
  for (const UnsyncedRange& u : unsynced_) earliest(u.since + options_.resync_timeout);
  for (const ReadingRange& r : reading_) {
    earliest(r.read ? r.since + options_.read_hold : r.since + options_.resync_timeout);
    if (!r.read) earliest(read_next_);
  }
  if (!unsynced_.empty() && !round_.has_value()) earliest(next_round_);
  // The drop waits for every handoff and re-replication to end, and the end of each computes this again.
  // Armed before that, a passed drop deadline would fire again at once after every Timer: a busy loop
  // until the handoff ended.
  if (drop_pending_ && !dropping_ && !left_ && !leaving_ && outgoing_.empty() && incoming_.empty() &&
      jobs_.empty()) {
    earliest(last_change_ + options_.drop_delay);
  }
  out.wake_at = at;
  return out;
}

// ---------------------------------------------------------------------------------------- ring changes

HandoffActions HandoffPlanner::RingChanged(MonoTime now, const ClusterView& view, RingPtr before,
                                           RingPtr after) {
  HandoffActions out;
  if (after == nullptr) return Done(out);
  out.ring = after;
  if (drop_scope_.has_value()) {  // every range held on the rings left behind may hold states to drop
    for (const RingPtr& left : {before, latest_}) {
      if (left == nullptr) continue;
      const std::vector<TokenRange> held = left->HeldRanges(self_, options_.replicas);
      drop_scope_->insert(drop_scope_->end(), held.begin(), held.end());
    }
    drop_scope_ = Union(std::move(*drop_scope_));
  }
  latest_ = after;
  last_change_ = now;
  drop_pending_ = true;
  if (left_) {
    left_ring_ = Without(after, self_);
    Publish(out);
    return Done(out);
  }
  const bool fresh = (before == nullptr || before->Find(self_) == nullptr) && after->Find(self_) != nullptr;
  if (fresh) {
    before = Without(after, self_);
  } else if (before == nullptr) {
    before = RingView::Create(0, {}).value();
  }
  const std::vector<TokenRange> was_unsynced = UnsyncedRanges();
  std::vector<TokenRange> deciding;  // ranges this node still decided while handing them off
  for (const auto& [id, o] : outgoing_) {
    if (o.synced) deciding.insert(deciding.end(), o.ranges.begin(), o.ranges.end());
  }
  UpdateUnsynced(now, before, after, Union(std::move(deciding)));
  if (options_.majority_read) UpdateReading(now, before, after);
  // Superseded entries: outgoing ranges their target no longer owns, incoming ranges this node no longer
  // owns. A range that moves back before its handoff finished never changed hands: its previous owner
  // still has the newest states, so neither end waits for or pushes it (below).
  std::map<std::string, std::vector<TokenRange>> kept_out;  // by the target that does not get them
  std::map<std::string, std::vector<TokenRange>> never_in;  // by the previous owner that kept them
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    Outgoing& o = it->second;
    if (!o.leave) {
      std::vector<TokenRange> still = Intersect(o.ranges, after->Arcs(o.to));
      auto& back = kept_out[o.to];
      for (const TokenRange& r : Subtract(o.ranges, still)) back.push_back(r);
      // Checks held by a switch whose ranges change are routed again.
      if (still != o.ranges && Switching(o.phase)) out.resume.push_back(it->first);
      o.ranges = std::move(still);
    }
    if (o.ranges.empty()) {
      spdlog::info("handoff out to {}: superseded by a ring change", o.to);
      ++stats_.handoffs_failed;
      it = outgoing_.erase(it);
      continue;
    }
    o.fingerprint = after->fingerprint();
    ++it;
  }
  const std::vector<TokenRange> mine = after->Arcs(self_);
  std::vector<Incoming> kept;
  for (Incoming& in : incoming_) {
    const std::vector<TokenRange> still = Intersect({in.range}, mine);
    auto& back = never_in[in.from];
    for (const TokenRange& r : Subtract({in.range}, still)) back.push_back(r);
    for (const TokenRange& r : still) {
      Incoming part = in;
      part.range = r;
      kept.push_back(std::move(part));
    }
  }
  incoming_ = std::move(kept);
  for (auto* by_peer : {&kept_out, &never_in}) {
    for (auto& [peer, ranges] : *by_peer) SortRanges(ranges);
  }

  std::map<std::string, std::vector<TokenRange>> out_moves;
  std::map<std::string, std::vector<TokenRange>> in_moves;
  for (const ring::RangeMove& m : RingView::Diff(*before, *after)) {
    // A leaving node has already started handing everything to the ring without it.
    if (!leaving_ && m.from == self_ && !m.to.empty() && m.to != self_) out_moves[m.to].push_back(m.range);
    if (m.to == self_ && !m.from.empty() && m.from != self_) in_moves[m.from].push_back(m.range);
  }
  for (auto& [to, moved] : out_moves) {
    std::vector<TokenRange> ranges = Subtract(moved, never_in[to]);
    if (ranges.empty()) continue;
    const bool synced = Intersect(ranges, was_unsynced).empty();
    outgoing_.at(AddOutgoing(now, to, std::move(ranges), after->fingerprint(), false)).synced = synced;
  }
  for (auto& [from, ranges] : in_moves) {
    std::vector<TokenRange> wait = Subtract(ranges, kept_out[from]);
    for (auto it = early_dones_.begin(); it != early_dones_.end();) {
      if (it->from == from && it->fingerprint == after->fingerprint()) {
        const std::vector<TokenRange> done_here = Intersect(wait, it->ranges);
        if (!done_here.empty()) {
          wait = Subtract(wait, it->ranges);
          it->ranges = Subtract(it->ranges, done_here);
          ++stats_.incoming_completed;
          if (it->synced) MarkSynced(done_here);
        }
      }
      it = it->ranges.empty() ? early_dones_.erase(it) : std::next(it);
    }
    for (const TokenRange& r : wait) incoming_.push_back({r, from, now, before, after});
    if (!wait.empty()) {
      spdlog::info("handoff in from {}: {} ranges ({:.2f}% of the ring) waiting", from, wait.size(),
                   100 * Share(wait));
    }
  }
  std::sort(incoming_.begin(), incoming_.end(),
            [](const Incoming& x, const Incoming& y) { return x.range.first < y.range.first; });
  if (before->fingerprint() != after->fingerprint()) {
    std::optional<std::vector<TokenRange>> limit;
    if (options_.scan_moved_only) limit = MovedForReplication(before, after);
    if (!limit.has_value() || !limit->empty())
      jobs_.push_back({next_id_++, before, after, limit, 0, false, 0});
  }
  // The overrides of the change are published with `after`; then the pushes start and unreachable previous
  // owners are released (Tick): a handoff to an unreachable target fails, which publishes again (the last
  // publication of an event is the one the driver carries out).
  Publish(out);
  Tick(now, view, out);
  if (fresh) SendNothingToHandOff(view, after, out);
  return Done(out);
}

// This node just (re)joined: every other member Y that is new too (its `before` also lacks itself, e.g. a
// cluster starting) waits for this node's HandoffDone for the ranges it would have from this node on
// `after` without Y -- but this node owned nothing before, so it has nothing to push. Says so at once; a Y
// that is not waiting keeps it as an early HandoffDone for `after` only.
void HandoffPlanner::SendNothingToHandOff(const ClusterView& view, const RingPtr& after,
                                          HandoffActions& out) const {
  for (const ring::RingMember& m : after->members()) {
    if (m.id == self_) continue;
    SendDone done;
    done.to = m.id;
    done.fingerprint = after->fingerprint();
    for (const ring::RangeMove& move : RingView::Diff(*Without(after, m.id), *after)) {
      if (move.from == self_ && move.to == m.id) done.ranges.push_back(move.range);
    }
    if (done.ranges.empty() || !view.reachable(m.id)) continue;
    out.send_done.push_back(std::move(done));
  }
}

// -------------------------------------------------------------------------------------------- outgoing

uint64_t HandoffPlanner::AddOutgoing(MonoTime now, const std::string& to, std::vector<TokenRange> ranges,
                                     uint64_t fingerprint, bool leave) {
  const uint64_t id = next_id_++;
  spdlog::info("handoff out to {}{}: {} ranges ({:.2f}% of the ring) start", to, leave ? " (leave)" : "",
               ranges.size(), 100 * Share(ranges));
  outgoing_.emplace(id,
                    Outgoing{to, std::move(ranges), fingerprint, leave, now, 0, 0, PushDue{now}, false, {}});
  return id;
}

// (Re)starts the push of `id`: its ranges are pushed one scan window at a time, so the driver holds one
// window's states, not the whole handoff's.
void HandoffPlanner::StartPush(MonoTime now, const ClusterView& view, uint64_t id, HandoffActions& out) {
  auto it = outgoing_.find(id);
  if (it == outgoing_.end()) return;
  Outgoing& o = it->second;
  if (!view.reachable(o.to)) {
    Finish(now, id, false, "target not reachable", out);
    return;
  }
  o.keys = 0;
  o.bytes = 0;
  Pushing push{next_id_++, ScanWindows(o.ranges), 0};
  o.progress.window_keys.assign(push.windows.size(), 0);
  o.progress.counted = false;
  o.progress.windows_done = 0;
  o.progress.windows_total = push.windows.size();
  out.count.push_back({id, push.attempt, push.windows, o.ranges});
  o.phase = std::move(push);
  NextWindow(now, id, out);
}

// Asks for the next window of `id`, or, once every window is acknowledged, starts the switch: from the
// publication on, this node holds the ranges' checks; the decision fence then says when the decisions
// routed before the hold are over, so the last changes are complete.
void HandoffPlanner::NextWindow(MonoTime /*now*/, uint64_t id, HandoffActions& out) {
  Outgoing& o = outgoing_.at(id);
  auto& push = std::get<Pushing>(o.phase);
  if (push.next_window < push.windows.size()) {
    // The ranges may have shrunk since the windows were made (a later ring change): sent with each window.
    out.push.push_back({id, push.attempt, o.to, push.windows[push.next_window++], o.ranges});
    return;
  }
  o.phase = Fencing{};
  Publish(out);
  out.fence.push_back(id);
}

HandoffActions HandoffPlanner::PushWindowDone(MonoTime now, uint64_t handoff, uint64_t attempt, bool ok,
                                              uint64_t keys, uint64_t bytes) {
  HandoffActions out;
  auto it = outgoing_.find(handoff);
  if (it == outgoing_.end()) return Done(out);
  auto* push = std::get_if<Pushing>(&it->second.phase);
  if (push == nullptr || push->attempt != attempt) return Done(out);
  it->second.keys += keys;
  it->second.bytes += bytes;
  if (ok) {
    // The window acknowledged is the last one asked for: it counts what it sent from now on.
    Outgoing& o = it->second;
    o.progress.window_keys.at(push->next_window - 1) = keys;
    o.progress.windows_done = push->next_window;
    NextWindow(now, handoff, out);
  } else {
    spdlog::warn("handoff out to {}: push failed, retrying", it->second.to);
    it->second.phase = PushDue{now + kRetryDelay};
  }
  return Done(out);
}

HandoffActions HandoffPlanner::KeysCounted(MonoTime /*now*/, uint64_t handoff, uint64_t attempt,
                                           const std::vector<uint64_t>& per_window) {
  HandoffActions out;
  auto it = outgoing_.find(handoff);
  if (it == outgoing_.end()) return Done(out);
  Outgoing& o = it->second;
  const auto* push = std::get_if<Pushing>(&o.phase);
  if (push == nullptr || push->attempt != attempt || per_window.size() != o.progress.window_keys.size())
    return Done(out);
  for (size_t i = o.progress.windows_done; i < per_window.size(); ++i)
    o.progress.window_keys[i] = per_window[i];
  o.progress.counted = true;
  return Done(out);
}

HandoffActions HandoffPlanner::FenceDone(MonoTime now, uint64_t handoff) {
  HandoffActions out;
  auto it = outgoing_.find(handoff);
  if (it == outgoing_.end() || !std::holds_alternative<Fencing>(it->second.phase)) return Done(out);
  it->second.phase = Flushing{};
  const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second.started);
  out.flush.push_back(
      {handoff, std::clamp(options_.push_timeout - spent, std::chrono::milliseconds(1), kMaxFlushWait)});
  return Done(out);
}

HandoffActions HandoffPlanner::FlushDone(MonoTime /*now*/, uint64_t handoff, bool ok) {
  HandoffActions out;
  auto it = outgoing_.find(handoff);
  if (it == outgoing_.end() || !std::holds_alternative<Flushing>(it->second.phase)) return Done(out);
  if (!ok) spdlog::warn("handoff out to {}: the last changes were not all acknowledged", it->second.to);
  SendDoneOf(handoff, out);
  return Done(out);
}

void HandoffPlanner::SendDoneOf(uint64_t id, HandoffActions& out) {
  Outgoing& o = outgoing_.at(id);
  o.phase = DoneSent{};
  out.send_done.push_back({id, o.to, o.fingerprint, o.keys, o.ranges, o.synced});
}

HandoffActions HandoffPlanner::DoneAcked(MonoTime now, uint64_t handoff, bool ok) {
  HandoffActions out;
  auto it = outgoing_.find(handoff);
  if (it == outgoing_.end() || !std::holds_alternative<DoneSent>(it->second.phase)) return Done(out);
  if (ok) {
    Finish(now, handoff, true, "", out);
  } else {
    spdlog::warn("handoff out to {}: HandoffDone failed, retrying", it->second.to);
    it->second.phase = DoneRetry{now + kRetryDelay};
  }
  return Done(out);
}

// Ends outgoing `id`: completed (acknowledged) or failed. Either way the ring routes its ranges.
void HandoffPlanner::Finish(MonoTime now, uint64_t id, bool ok, std::string_view why, HandoffActions& out) {
  auto it = outgoing_.find(id);
  if (it == outgoing_.end()) return;
  const Outgoing& o = it->second;
  const double seconds = Seconds(now - o.started);
  if (ok) {
    ++stats_.handoffs_completed;
    stats_.handed_off_keys += o.keys;
    spdlog::info("handoff out to {}: done, {} keys in {} ranges in {:.3f} s", o.to, o.keys, o.ranges.size(),
                 seconds);
  } else {
    ++stats_.handoffs_failed;
    spdlog::warn("handoff out to {}: abandoned after {:.3f} s ({})", o.to, seconds, why);
  }
  const bool was_leave = o.leave;
  if (Switching(o.phase)) out.resume.push_back(id);  // routed by the ring now
  outgoing_.erase(it);
  if (was_leave && !ok) leave_ok_ = false;
  if (was_leave && leaving_ && !left_ &&
      std::none_of(outgoing_.begin(), outgoing_.end(), [](const auto& e) { return e.second.leave; })) {
    left_ = true;
    left_ring_ = left_ring_pending_;
    out.leave_done = leave_ok_;
    spdlog::info("leave: handoffs finished ({}), routing every check to the remaining members",
                 leave_ok_ ? "acknowledged" : "some failed");
  }
  Publish(out);
}

// --------------------------------------------------------------------------------------------- timer

HandoffActions HandoffPlanner::Timer(MonoTime now, const ClusterView& view) {
  HandoffActions out;
  Tick(now, view, out);
  return Done(out);
}

void HandoffPlanner::Tick(MonoTime now, const ClusterView& view, HandoffActions& out) {
  std::map<std::string, bool, std::less<>> gone;  // peer -> unreachable, asked once per event
  auto is_gone = [&](const std::string& peer) {
    auto [it, inserted] = gone.try_emplace(peer, false);
    if (inserted) it->second = !view.reachable(peer);
    return it->second;
  };
  std::vector<Incoming> kept;
  bool changed = false;
  for (Incoming& in : incoming_) {
    const bool absent = is_gone(in.from);
    if (absent || now - in.started >= options_.done_timeout) {
      ++stats_.incoming_abandoned;
      spdlog::warn("handoff in from {}: released after {:.3f} s ({})", in.from, Seconds(now - in.started),
                   absent ? "previous owner unreachable" : "done_timeout");
      QueueReplication(in, in.range);
      changed = true;
    } else {
      kept.push_back(std::move(in));
    }
  }
  incoming_ = std::move(kept);
  if (changed) Publish(out);
  QueryWaitingHandoffs(now, view, out);
  std::vector<uint64_t> to_fail;
  std::vector<uint64_t> to_push;
  std::vector<uint64_t> to_done;
  for (const auto& [id, o] : outgoing_) {
    // Nothing under way: a retry waits (PushDue, DoneRetry).
    const bool idle = std::holds_alternative<PushDue>(o.phase) || std::holds_alternative<DoneRetry>(o.phase);
    if (now - o.started >= options_.push_timeout || (idle && is_gone(o.to))) {
      to_fail.push_back(id);
    } else if (const auto* retry = std::get_if<PushDue>(&o.phase); retry != nullptr && now >= retry->at) {
      to_push.push_back(id);
    } else if (const auto* retry = std::get_if<DoneRetry>(&o.phase); retry != nullptr && now >= retry->at) {
      to_done.push_back(id);
    }
  }
  std::erase_if(early_dones_, [&](const EarlyDone& d) { return now - d.at >= options_.done_timeout; });
  ExpireUnsynced(now, out);
  if (!unsynced_.empty() && !round_.has_value() && now >= next_round_) StartSyncRound(now, view, out);
  EndReads(now, out);
  if (!reading_.empty() && now >= read_next_) StartReads(now, view, out);
  for (uint64_t id : to_fail) Finish(now, id, false, "target unreachable or push_timeout", out);
  for (uint64_t id : to_push) StartPush(now, view, id, out);
  for (uint64_t id : to_done) SendDoneOf(id, out);
  if (drop_pending_ && !dropping_ && !left_ && !leaving_ && outgoing_.empty() && incoming_.empty() &&
      jobs_.empty() && now - last_change_ >= options_.drop_delay) {
    drop_pending_ = false;
    if (latest_ != nullptr && latest_->Find(self_) != nullptr) {
      std::optional<std::vector<TokenRange>> ranges;  // none: every token
      if (options_.scan_moved_only && drop_scope_.has_value()) {
        ranges = Subtract(*drop_scope_, latest_->HeldRanges(self_, options_.replicas));
      }
      drop_scope_ = std::vector<TokenRange>{};
      if (!ranges.has_value() || !ranges->empty()) {
        dropping_ = true;
        out.drop = DropStates{latest_, std::move(ranges)};
      }
    }
  }
}

// -------------------------------------------------------------------------------------------- incoming

HandoffActions HandoffPlanner::HandoffDoneReceived(MonoTime now, std::string_view from,
                                                   const std::vector<TokenRange>& ranges,
                                                   uint64_t fingerprint, uint64_t keys, bool synced) {
  HandoffActions out;
  std::vector<TokenRange> matched = ReleaseIncoming(now, from, ranges, keys);
  if (synced && MarkSynced(matched)) {
    spdlog::info("sync: {} ranges synced by the HandoffDone of {}", matched.size(), from);
  }
  std::vector<TokenRange> rest = Subtract(ranges, matched);
  if (!rest.empty()) early_dones_.push_back({std::string(from), std::move(rest), fingerprint, now, synced});
  Publish(out);
  return Done(out);
}

std::vector<TokenRange> HandoffPlanner::ReleaseIncoming(MonoTime now, std::string_view from,
                                                        const std::vector<TokenRange>& ranges,
                                                        uint64_t keys) {
  std::vector<TokenRange> matched;
  std::vector<Incoming> kept;
  for (Incoming& in : incoming_) {
    const std::vector<TokenRange> done_here =
        in.from == from ? Intersect({in.range}, ranges) : std::vector<TokenRange>{};
    if (done_here.empty()) {
      kept.push_back(std::move(in));
      continue;
    }
    matched.insert(matched.end(), done_here.begin(), done_here.end());
    ++stats_.incoming_completed;
    spdlog::info("handoff in from {}: range done after {:.3f} s ({} keys announced)", in.from,
                 Seconds(now - in.started), keys);
    for (const TokenRange& r : done_here) QueueReplication(in, r);
    for (const TokenRange& r : Subtract({in.range}, done_here)) {
      Incoming part = in;
      part.range = r;
      kept.push_back(std::move(part));
    }
  }
  std::sort(kept.begin(), kept.end(),
            [](const Incoming& x, const Incoming& y) { return x.range.first < y.range.first; });
  incoming_ = std::move(kept);
  SortRanges(matched);
  return matched;
}

// Once `in`'s range `r` is released, its keys are this node's: re-replicate them.
void HandoffPlanner::QueueReplication(const Incoming& in, TokenRange r) {
  std::vector<TokenRange> part{r};
  if (options_.scan_moved_only) part = Intersect(part, MovedForReplication(in.before, in.after));
  if (part.empty()) return;  // no key of it has anyone new to go to
  if (!jobs_.empty() && jobs_.back().limit.has_value() && jobs_.back().next_slice == 0 &&
      !jobs_.back().scanning && jobs_.back().before == in.before && jobs_.back().after == in.after) {
    auto& limit = *jobs_.back().limit;
    limit.insert(limit.end(), part.begin(), part.end());
    limit = Union(std::move(limit));
    return;
  }
  jobs_.push_back({next_id_++, in.before, in.after, std::move(part), 0, false, 0});
}

const std::vector<TokenRange>& HandoffPlanner::MovedForReplication(const RingPtr& before,
                                                                   const RingPtr& after) {
  if (moved_cache_.before != before || moved_cache_.after != after) {
    moved_cache_.ranges = ReplicationRanges(*before, *after, self_, options_.replicas);
    moved_cache_.before = before;
    moved_cache_.after = after;
  }
  return moved_cache_.ranges;
}

// ------------------------------------------------------------------------------------ unsynced ranges

void HandoffPlanner::UpdateUnsynced(MonoTime now, const RingPtr& before, const RingPtr& after,
                                    const std::vector<TokenRange>& deciding) {
  const std::vector<TokenRange> held = after->HeldRanges(self_, options_.replicas);
  std::vector<UnsyncedRange> next;
  std::vector<TokenRange> still;
  for (const UnsyncedRange& u : unsynced_) {
    for (const TokenRange& r : Intersect({u.range}, held)) {
      next.push_back({r, u.since, u.before});
      still.push_back(r);
    }
  }
  SortRanges(still);
  std::vector<TokenRange> had = before->HeldRanges(self_, options_.replicas);
  had.insert(had.end(), deciding.begin(), deciding.end());
  const std::vector<TokenRange> gained = Subtract(Subtract(held, Union(std::move(had))), still);
  for (const TokenRange& r : gained) next.push_back({r, now, before});
  std::sort(next.begin(), next.end(),
            [](const UnsyncedRange& x, const UnsyncedRange& y) { return x.range.first < y.range.first; });
  if (!gained.empty()) {
    spdlog::info("sync: holding {} new ranges ({:.2f}% of the ring) without their copy yet", gained.size(),
                 100 * Share(gained));
    next_round_ = now;  // pull at once
    round_delay_ = kSyncRetryFirst;
  }
  unsynced_ = std::move(next);
  copied_ = Intersect(copied_, Union(std::move(still)));  // a range gained again waits for a copy again
}

bool HandoffPlanner::MarkSynced(const std::vector<TokenRange>& given) {
  if (given.empty() || unsynced_.empty()) return false;
  std::vector<TokenRange> ranges = given;
  if (options_.majority_read) {
    const std::vector<TokenRange> unread = UnreadRanges();
    std::vector<TokenRange> held_back = Intersect(Intersect(ranges, unread), UnsyncedRanges());
    if (!held_back.empty()) {
      held_back.insert(held_back.end(), copied_.begin(), copied_.end());
      copied_ = Union(std::move(held_back));
      ranges = Subtract(ranges, unread);
      if (ranges.empty()) return false;
    }
  }
  std::vector<UnsyncedRange> next;
  uint64_t touched = 0;  // unsynced ranges that received all or part of their copy
  for (const UnsyncedRange& u : unsynced_) {
    const std::vector<TokenRange> left = Subtract({u.range}, ranges);
    if (left.size() != 1 || left[0].first != u.range.first || left[0].last != u.range.last) ++touched;
    for (const TokenRange& r : left) next.push_back({r, u.since, u.before});
  }
  if (touched == 0) return false;
  stats_.synced_ranges += touched;
  unsynced_ = std::move(next);
  return true;
}

bool HandoffPlanner::ReleaseCopied() {
  if (copied_.empty()) return false;
  const std::vector<TokenRange> unread = UnreadRanges();
  const std::vector<TokenRange> ready = Subtract(copied_, unread);
  if (ready.empty()) return false;
  copied_ = Intersect(copied_, unread);
  if (!MarkSynced(ready)) return false;
  spdlog::info("sync: {} ranges synced once their take-over reads had a majority, {} left", ready.size(),
               unsynced_.size());
  return true;
}

std::vector<TokenRange> HandoffPlanner::UnreadRanges() const {
  std::vector<TokenRange> out;
  for (const ReadingRange& r : reading_) {
    if (!r.read) out.push_back(r.range);
  }
  return Union(std::move(out));
}

void HandoffPlanner::ExpireUnsynced(MonoTime now, HandoffActions& out) {
  std::vector<TokenRange> expired;
  for (const UnsyncedRange& u : unsynced_) {
    if (now - u.since >= options_.resync_timeout) expired.push_back(u.range);
  }
  if (expired.empty()) return;
  stats_.resync_expired += expired.size();
  spdlog::warn(
      "sync: {} ranges ({:.2f}% of the ring) unsynced for {:.0f} s, no holder with their copy "
      "answered: decided from what this node has",
      expired.size(), 100 * Share(expired), Seconds(options_.resync_timeout));
  std::erase_if(unsynced_, [&](const UnsyncedRange& u) { return now - u.since >= options_.resync_timeout; });
  Publish(out);
}

void HandoffPlanner::StartSyncRound(MonoTime now, const ClusterView& view, HandoffActions& out) {
  SyncRound round;
  round.id = next_id_++;
  // The ranges each member holds on the newest ring or on the ring an unsynced range came with.
  std::map<std::pair<const RingView*, std::string>, std::vector<TokenRange>> held;
  auto held_by = [&](const RingPtr& ring, const std::string& id) -> const std::vector<TokenRange>& {
    auto [it, inserted] = held.try_emplace({ring.get(), id});
    if (inserted) it->second = ring->HeldRanges(id, options_.replicas);
    return it->second;
  };
  std::map<std::string, bool> reachable;
  std::map<std::string, std::vector<TokenRange>> asked;
  for (const UnsyncedRange& u : unsynced_) {
    std::vector<TokenRange> covered;
    for (const RingPtr& ring : {latest_, u.before}) {
      if (ring == nullptr) continue;
      for (const ring::RingMember& m : ring->members()) {
        if (m.id == self_) continue;
        const std::vector<TokenRange> part = Intersect({u.range}, held_by(ring, m.id));
        if (part.empty()) continue;
        covered.insert(covered.end(), part.begin(), part.end());
        auto [it, inserted] = reachable.try_emplace(m.id, false);
        if (inserted) it->second = view.reachable(m.id);
        auto& into = it->second ? asked[m.id] : round.unanswered;
        into.insert(into.end(), part.begin(), part.end());
      }
    }
    for (const TokenRange& r : Subtract({u.range}, Union(std::move(covered)))) round.unheld.push_back(r);
  }
  round.unanswered = Union(std::move(round.unanswered));
  for (auto& [id, ranges] : asked) {
    round.asked[id] = Union(std::move(ranges));
    out.pull.push_back({round.id, id, round.asked[id], latest_ == nullptr ? 0 : latest_->fingerprint()});
  }
  round.pending = round.asked.size();
  round_ = std::move(round);
  if (round_->pending == 0) EndSyncRound(now, out);
}

void HandoffPlanner::QueryWaitingHandoffs(MonoTime now, const ClusterView& view, HandoffActions& out) {
  std::erase_if(queries_, [&](const auto& q) { return q.second.round == 0 && now >= q.second.next; });
  std::map<std::string, std::vector<TokenRange>, std::less<>> waiting;
  for (const Incoming& in : incoming_) {
    if (now - in.started >= kHandoffQueryAfter) waiting[in.from].push_back(in.range);
  }
  for (auto& [from, ranges] : waiting) {
    if (queries_.contains(from) || !view.reachable(from)) continue;
    const uint64_t round = next_id_++;
    queries_[from] = {round, now};
    out.pull.push_back(
        {round, from, Union(std::move(ranges)), latest_ == nullptr ? 0 : latest_->fingerprint()});
  }
}

HandoffActions HandoffPlanner::SyncPulled(MonoTime now, uint64_t round, std::string_view from,
                                          std::optional<std::vector<TokenRange>> synced,
                                          const std::vector<TokenRange>& not_handed) {
  HandoffActions out;
  if (auto q = queries_.find(from); q != queries_.end() && q->second.round == round) {
    q->second = {0, now + kHandoffQueryAfter};
  }
  if (synced.has_value() && !not_handed.empty()) {
    // `from` has nothing (more) of these to hand over: what it had is merged here by now.
    const std::vector<TokenRange> matched = ReleaseIncoming(now, from, not_handed, 0);
    if (!matched.empty()) {
      spdlog::info("handoff in from {}: {} ranges not handed off by it on the same ring: released", from,
                   matched.size());
      MarkSynced(Intersect(matched, *synced));
      Publish(out);
    }
  }
  if (ReadPulled(now, round, from, synced.has_value())) {
    EndReads(now, out);
    ReleaseCopied();
    Publish(out);  // pieces read now are published as such (and copied ones synced)
    return Done(out);
  }
  if (!round_.has_value() || round_->id != round) return Done(out);
  auto it = round_->asked.find(std::string(from));
  if (it == round_->asked.end() || round_->pending == 0) return Done(out);
  if (synced.has_value()) {
    round_->synced.insert(round_->synced.end(), synced->begin(), synced->end());
  } else {
    round_->unanswered.insert(round_->unanswered.end(), it->second.begin(), it->second.end());
  }
  if (--round_->pending == 0) EndSyncRound(now, out);
  return Done(out);
}

// A range is synced once a member holding it synced pushed it, or every member holding it (on the newest
// ring and the ring it came with) answered: none holds a copy this node lacks.
void HandoffPlanner::EndSyncRound(MonoTime now, HandoffActions& out) {
  SyncRound round = std::move(*round_);
  round_.reset();
  std::vector<TokenRange> done = round.synced;
  std::vector<TokenRange> asked;
  for (const auto& [id, ranges] : round.asked) asked.insert(asked.end(), ranges.begin(), ranges.end());
  for (const TokenRange& r : Subtract(Union(std::move(asked)), Union(std::move(round.unanswered)))) {
    done.push_back(r);
  }
  done.insert(done.end(), round.unheld.begin(), round.unheld.end());
  const size_t before = unsynced_.size();
  if (MarkSynced(Union(std::move(done)))) {
    spdlog::info("sync: {} ranges synced, {} left", before - std::min(before, unsynced_.size()),
                 unsynced_.size());
    round_delay_ = kSyncRetryFirst;
    Publish(out);
  } else {
    round_delay_ = std::min(kSyncRetryMax, round_delay_ * 2);
  }
  next_round_ = now + round_delay_;
}

// ------------------------------------------------------------------------------------ take-over reads

void HandoffPlanner::UpdateReading(MonoTime now, const RingPtr& before, const RingPtr& after) {
  if (before->empty() || after->Find(self_) == nullptr) return;
  // Pieces whose preference lists are constant on both rings: split at the first token of every arc.
  std::vector<Token> bounds{0};
  for (const RingPtr& ring : {before, after}) {
    for (const ring::RingMember& m : ring->members()) {
      for (const TokenRange& a : ring->Arcs(m.id)) bounds.push_back(a.first);
    }
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  auto ids = [&](const RingPtr& ring, Token t) {
    std::vector<std::string> out;
    for (const ring::RingMember* m : ring->PreferenceList(t, options_.replicas)) out.push_back(m->id);
    return out;
  };
  std::vector<ReadingRange> added;
  for (size_t i = 0; i < bounds.size(); ++i) {
    const TokenRange piece{bounds[i],
                           i + 1 < bounds.size() ? bounds[i + 1] - 1 : std::numeric_limits<Token>::max()};
    std::vector<std::string> now_holders = ids(after, piece.first);
    if (std::find(now_holders.begin(), now_holders.end(), self_) == now_holders.end()) continue;
    std::vector<std::string> was_holders = ids(before, piece.first);
    std::vector<std::string> a = was_holders;
    std::vector<std::string> b = now_holders;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    if (a == b || was_holders.empty()) continue;  // the same holders: their majorities meet as before
    if (!added.empty() && added.back().holders == was_holders && added.back().range.last + 1 == piece.first) {
      added.back().range.last = piece.last;
      continue;
    }
    added.push_back({piece, before, std::move(was_holders), {}, now, false});
    // Read already when this node alone is a majority of them (their only earlier holder): no answer would
    // ever come to complete it.
    MarkReadIfMajority(added.back());
  }
  if (added.empty()) return;
  double share = 0;
  for (const ReadingRange& r : added) share += r.range.Fraction();
  spdlog::info("take-over: reading {} ranges ({:.2f}% of the ring) from a majority of their earlier holders",
               added.size(), 100 * share);
  reading_.insert(reading_.end(), std::make_move_iterator(added.begin()),
                  std::make_move_iterator(added.end()));
  std::stable_sort(reading_.begin(), reading_.end(), [](const ReadingRange& x, const ReadingRange& y) {
    return x.range.first < y.range.first;
  });
  read_next_ = now;  // pull at once
}

void HandoffPlanner::StartReads(MonoTime now, const ClusterView& view, HandoffActions& out) {
  read_next_ = now + kSyncRetryFirst;
  std::map<std::string, std::vector<TokenRange>> asked;
  for (const ReadingRange& r : reading_) {
    if (r.read) continue;
    for (const std::string& h : r.holders) {
      if (h == self_ || std::find(r.answered.begin(), r.answered.end(), h) != r.answered.end()) continue;
      asked[h].push_back(r.range);
    }
  }
  for (auto& entry : asked) {
    const std::string& to = entry.first;  // (not a structured binding: clang 14 cannot capture one)
    std::vector<TokenRange>& ranges = entry.second;
    const bool in_flight = std::any_of(read_rounds_.begin(), read_rounds_.end(),
                                       [&](const auto& e) { return e.second.first == to; });
    if (in_flight || !view.reachable(to)) continue;
    const uint64_t round = next_id_++;
    std::vector<TokenRange> merged = Union(std::move(ranges));
    out.pull.push_back({round, to, merged, latest_ == nullptr ? 0 : latest_->fingerprint()});
    read_rounds_.emplace(round, std::make_pair(to, std::move(merged)));
  }
}

bool HandoffPlanner::ReadPulled(MonoTime /*now*/, uint64_t round, std::string_view from, bool answered) {
  auto it = read_rounds_.find(round);
  if (it == read_rounds_.end()) return false;
  const std::vector<TokenRange> asked = std::move(it->second.second);
  read_rounds_.erase(it);
  if (!answered) return true;  // asked again at the next StartReads
  for (ReadingRange& r : reading_) {
    if (r.read || std::find(r.holders.begin(), r.holders.end(), from) == r.holders.end() ||
        Intersect({r.range}, asked).empty()) {
      continue;
    }
    if (std::find(r.answered.begin(), r.answered.end(), from) == r.answered.end()) {
      r.answered.emplace_back(from);
    }
    MarkReadIfMajority(r);
  }
  return true;
}

void HandoffPlanner::MarkReadIfMajority(ReadingRange& r) {
  const bool self_held = std::find(r.holders.begin(), r.holders.end(), self_) != r.holders.end();
  if (!r.read && r.answered.size() + (self_held ? 1 : 0) >= r.holders.size() / 2 + 1) {
    r.read = true;
    ++stats_.reads_completed;
  }
}

void HandoffPlanner::EndReads(MonoTime now, HandoffActions& out) {
  size_t expired = 0;
  const size_t before = reading_.size();
  std::erase_if(reading_, [&](const ReadingRange& r) {
    if (r.read) return now - r.since >= options_.read_hold;
    if (now - r.since < options_.resync_timeout) return false;
    ++expired;
    return true;
  });
  if (expired > 0) {
    stats_.reads_expired += expired;
    spdlog::warn("take-over: {} reads without a majority of their earlier holders for {:.0f} s: dropped",
                 expired, Seconds(options_.resync_timeout));
    ReleaseCopied();  // (their copied ranges are decided from the copy they have)
  }
  if (reading_.size() != before) Publish(out);
}

std::vector<TokenRange> HandoffPlanner::SyncedOf(const std::vector<TokenRange>& ranges) const {
  if (latest_ == nullptr) return {};
  return Subtract(Intersect(ranges, latest_->HeldRanges(self_, options_.replicas)), UnsyncedRanges());
}

std::vector<TokenRange> HandoffPlanner::NotHandedOf(const std::vector<TokenRange>& ranges,
                                                    uint64_t fingerprint) const {
  if (latest_ == nullptr || fingerprint == 0 || latest_->fingerprint() != fingerprint) return {};
  std::vector<TokenRange> handing;
  for (const auto& [id, o] : outgoing_) handing.insert(handing.end(), o.ranges.begin(), o.ranges.end());
  return Subtract(Subtract(ranges, latest_->Arcs(self_)), Union(std::move(handing)));
}

std::vector<TokenRange> HandoffPlanner::UnsyncedRanges() const {
  std::vector<TokenRange> out;
  out.reserve(unsynced_.size());
  for (const UnsyncedRange& u : unsynced_) out.push_back(u.range);
  return out;
}

bool HandoffPlanner::Unsynced(Token token) const {
  auto it = std::upper_bound(unsynced_.begin(), unsynced_.end(), token,
                             [](Token t, const UnsyncedRange& u) { return t < u.range.first; });
  return it != unsynced_.begin() && std::prev(it)->range.Contains(token);
}

// -------------------------------------------------------------------------------------- re-replication

HandoffActions HandoffPlanner::ReplicationPump(MonoTime /*now*/) {
  HandoffActions out;
  pump_requested_ = false;
  while (!jobs_.empty()) {
    ReplicationJob& job = jobs_.front();
    if (job.scanning || job.outstanding > 0) break;
    if (job.next_slice >= options_.scan_slices) {
      jobs_.pop_front();
      continue;
    }
    const TokenRange slice = ScanSlice(job.next_slice++, options_.scan_slices);
    if (job.limit.has_value() && !Overlaps(*job.limit, slice)) continue;
    ReplicateSlice r;
    r.job = job.id;
    r.slice = slice;
    if (job.limit.has_value()) r.limit = ScanParts(slice, job.limit);
    for (const Incoming& in : incoming_) r.pending_in.push_back(in.range);
    r.before = job.before;
    r.after = job.after;
    r.current = latest_;
    job.scanning = true;
    out.replicate = std::move(r);
    break;
  }
  return Done(out);
}

HandoffActions HandoffPlanner::ReplicationSliceScanned(MonoTime /*now*/, uint64_t job, uint32_t pushes,
                                                       uint64_t scanned) {
  HandoffActions out;
  stats_.scanned_states += scanned;
  for (ReplicationJob& j : jobs_) {
    if (j.id != job) continue;
    j.scanning = false;
    j.outstanding += pushes;
  }
  return Done(out);
}

HandoffActions HandoffPlanner::ReplicationPushDone(MonoTime /*now*/, uint64_t job, uint64_t keys, bool ok) {
  HandoffActions out;
  if (ok) {
    stats_.rereplicated_keys += keys;
  } else {
    spdlog::warn("re-replication: a push of {} keys failed", keys);
  }
  for (ReplicationJob& j : jobs_) {
    if (j.id == job && j.outstanding > 0) --j.outstanding;
  }
  return Done(out);
}

HandoffActions HandoffPlanner::Dropped(MonoTime /*now*/, uint64_t dropped, uint64_t scanned) {
  HandoffActions out;
  stats_.scanned_states += scanned;
  dropping_ = false;
  stats_.dropped_states += dropped;
  return Done(out);
}

// ----------------------------------------------------------------------------------------------- leave

std::optional<HandoffActions> HandoffPlanner::Leave(MonoTime now, const ClusterView& view, RingPtr ring) {
  if (leaving_) return std::nullopt;
  HandoffActions out;
  leaving_ = true;
  const RingPtr current = latest_ != nullptr ? latest_ : std::move(ring);
  RingPtr without = Without(current, self_);
  if (current == nullptr || current->Find(self_) == nullptr || without->empty()) {
    left_ = true;
    left_ring_ = without->empty() ? nullptr : without;
    Publish(out);
    spdlog::info("leave: nothing to hand off");
    out.leave_done = true;
    return Done(out);
  }
  left_ring_pending_ = without;
  leave_ok_ = true;
  std::map<std::string, std::vector<TokenRange>> moves;
  for (const ring::RangeMove& m : RingView::Diff(*current, *without)) {
    if (m.from == self_ && !m.to.empty()) moves[m.to].push_back(m.range);
  }
  const std::vector<TokenRange> unsynced = UnsyncedRanges();
  std::vector<uint64_t> ids;
  for (auto& [to, ranges] : moves) {
    const bool synced = Intersect(ranges, unsynced).empty();
    ids.push_back(AddOutgoing(now, to, std::move(ranges), without->fingerprint(), true));
    outgoing_.at(ids.back()).synced = synced;
  }
  spdlog::info("leave: handing {} ranges to {} members", current->Arcs(self_).size(), moves.size());
  Publish(out);
  for (uint64_t id : ids) StartPush(now, view, id, out);
  return Done(out);
}

// ---------------------------------------------------------------------------------------------- queries

std::optional<uint64_t> HandoffPlanner::Holding(Token token) const {
  for (const auto& [id, o] : outgoing_) {
    if (Switching(o.phase) && InSortedRanges(o.ranges, token)) return id;
  }
  return std::nullopt;
}

std::vector<HandoffView> HandoffPlanner::Views(MonoTime now) const {
  std::vector<HandoffView> views;
  for (const auto& [id, o] : outgoing_) {
    HandoffView v;
    v.direction = "out";
    v.peer = o.to;
    v.ranges = o.ranges.size();
    v.share = Share(o.ranges);
    v.keys = o.keys;
    v.bytes = o.bytes;
    v.phase = PhaseName(o.phase);
    v.seconds = Seconds(now - o.started);
    FillProgress(o, v);
    views.push_back(std::move(v));
  }
  std::map<std::string, HandoffView> in;
  for (const Incoming& i : incoming_) {
    HandoffView& v = in[i.from];
    v.direction = "in";
    v.peer = i.from;
    ++v.ranges;
    v.share += i.range.Fraction();
    v.phase = "waiting";
    v.seconds = std::max(v.seconds, Seconds(now - i.started));
  }
  for (auto& [peer, v] : in) views.push_back(std::move(v));
  return views;
}

void HandoffPlanner::FillProgress(const Outgoing& o, HandoffView& v) {
  v.windows_total = o.progress.windows_total;
  v.windows_done = o.progress.windows_done;
  if (Switching(o.phase)) {  // every window acknowledged: what was sent is what there was to send
    v.keys_total = o.keys;
    v.done = 1;
    return;
  }
  if (!std::holds_alternative<Pushing>(o.phase)) return;  // (re)starting: nothing known yet
  if (o.progress.counted) {
    for (size_t i = 0; i < o.progress.window_keys.size(); ++i) {
      v.keys_total += o.progress.window_keys[i];
      if (i >= o.progress.windows_done) v.keys_left += o.progress.window_keys[i];
    }
  }
  if (v.keys_total > 0) {
    v.done = static_cast<double>(v.keys_total - v.keys_left) / static_cast<double>(v.keys_total);
  } else if (o.progress.windows_total > 0) {
    v.done = static_cast<double>(o.progress.windows_done) / static_cast<double>(o.progress.windows_total);
  }
}

HandoffStats HandoffPlanner::stats() const {
  HandoffStats s = stats_;
  for (const auto& [id, o] : outgoing_) {
    HandoffView v;
    FillProgress(o, v);
    s.keys_left += v.keys_left;
  }
  std::set<std::string_view> peers;
  for (const Incoming& i : incoming_) peers.insert(i.from);
  s.in_progress = outgoing_.size() + peers.size();
  s.unsynced_ranges = unsynced_.size();
  for (const UnsyncedRange& u : unsynced_) s.unsynced_share += u.range.Fraction();
  s.reading_ranges = reading_.size();
  return s;
}

}  // namespace ringlimit::replication
