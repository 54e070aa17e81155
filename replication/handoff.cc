#include "replication/handoff.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "peer.pb.h"
#include "replication/decision_fence.h"

namespace ringlimit::replication {
namespace {

using ring::RingView;
using ring::Token;
using ring::TokenRange;
using RingPtr = std::shared_ptr<const RingView>;

// Delay before retrying a failed push or HandoffDone while the target is still reachable.
constexpr std::chrono::milliseconds kRetryDelay{200};
// Longest wait for Replicator::Flush at a handoff switch.
constexpr std::chrono::milliseconds kMaxFlushWait{5'000};
// Stop: longest wait for the work running on the executor.
constexpr std::chrono::seconds kStopWait{5};
// Timeout of one HandoffDone send.
constexpr std::chrono::milliseconds kDoneSendTimeout{2'000};
// An outgoing push scans windows of at most 1/kPushWindows of the token space at a time.
constexpr Token kPushWindows = 16;

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

bool Overlaps(const std::vector<TokenRange>& ranges, Token first, Token last) {
  for (const TokenRange& r : ranges) {
    if (r.first <= last && first <= r.last) return true;
  }
  return false;
}

bool InRanges(const std::vector<TokenRange>& sorted, Token t) {
  auto it = std::upper_bound(sorted.begin(), sorted.end(), t,
                             [](Token v, const TokenRange& r) { return v < r.first; });
  return it != sorted.begin() && std::prev(it)->Contains(t);
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

// The i-th of `n` equal slices of the token space.
TokenRange Slice(uint32_t i, uint32_t n) {
  const Token step = std::numeric_limits<Token>::max() / n;
  const Token first = step * i;
  const Token last = i + 1 == n ? std::numeric_limits<Token>::max() : step * (i + 1) - 1;
  return {first, last};
}

}  // namespace

std::optional<std::string> ValidateHandoffOptions(const HandoffOptions& options) {
  if (options.replicas < 1) return "replicas must be >= 1";
  if (options.scan_slices < 1) return "scan_slices must be >= 1";
  if (options.done_timeout.count() <= 0) return "done_timeout must be > 0";
  if (options.push_timeout.count() <= 0) return "push_timeout must be > 0";
  if (options.drop_delay.count() < 0) return "drop_delay must be >= 0";
  return std::nullopt;
}

struct HandoffManager::Core : std::enable_shared_from_this<HandoffManager::Core> {
  enum class Phase : uint8_t { kPushing, kFlushing, kDoneSent };

  struct Outgoing {
    uint64_t id = 0;
    std::string to;
    std::vector<TokenRange> ranges;  // sorted
    uint64_t fingerprint = 0;        // of the ring the ranges move to
    bool leave = false;
    Phase phase = Phase::kPushing;
    bool running = false;  // a push, flush or HandoffDone is under way
    std::optional<MonoTime> retry_at;
    uint64_t keys = 0;
    MonoTime started;
    uint32_t attempt = 0;             // StartPush calls: answers of an earlier attempt are ignored
    std::vector<TokenRange> windows;  // scan windows of the current attempt
    size_t next_window = 0;
    // Checks of the ranges held while switching (phase kFlushing or kDoneSent), resumed when it ends.
    std::vector<std::function<void()>> held;
  };

  struct Incoming {
    TokenRange range;
    std::string from;
    MonoTime started;
    RingPtr before;  // the ring change that made it, for re-replication once released
    RingPtr after;
  };

  struct EarlyDone {  // a HandoffDone that arrived before the ring change it belongs to
    std::string from;
    std::vector<TokenRange> ranges;
    uint64_t fingerprint = 0;  // of the ring the ranges move in: only a ring change to it consumes them
    MonoTime at;
  };

  struct ReplicationJob {
    uint64_t id = 0;
    RingPtr before;
    RingPtr after;
    std::optional<std::vector<TokenRange>> limit;  // only these tokens (sorted); none: all
    uint32_t next_slice = 0;
    uint32_t outstanding = 0;  // SendUpdates not answered yet
  };

  Core(storage::Store& s, ClusterLink& l, Replicator& r, Executor& e, HandoffOptions o, RoutingPublisher* rp)
      : store(s),
        link(l),
        replicator(r),
        executor(e),
        options(o),
        self(l.self_id()),
        routing(rp),
        fence(e),
        tick_timer(e.NewTimer()) {
    if (routing == nullptr) {
      own_routing = std::make_unique<RoutingPublisher>();
      routing = own_routing.get();
    }
  }

  // --- Constant after construction ---
  storage::Store& store;
  ClusterLink& link;
  Replicator& replicator;
  Executor& executor;
  const HandoffOptions options;
  const std::string self;
  std::unique_ptr<RoutingPublisher> own_routing;  // when the caller gave none
  RoutingPublisher* routing;                      // where the overrides are published (thread-safe)
  DecisionFence fence;                            // Enter/Exit from any thread, Wait on the executor

  // --- On the executor only ---
  std::unique_ptr<Executor::Timer> tick_timer;  // armed at the next deadline (ArmTick)
  bool pump_posted = false;                     // a PumpOnce is queued

  // --- State below is protected by mu ---
  mutable std::mutex mu;
  bool started = false;
  bool stopping = false;
  uint64_t next_id = 1;
  std::map<uint64_t, Outgoing> outgoing;
  std::vector<Incoming> incoming;  // sorted by range.first
  std::vector<EarlyDone> early_dones;
  std::deque<ReplicationJob> jobs;
  RingPtr latest;  // `after` of the last ring change
  MonoTime last_change;
  bool drop_pending = false;
  bool leaving = false;
  bool left = false;
  bool leave_ok = true;
  std::function<void(bool)> leave_done;
  RingPtr left_ring;
  HandoffStats stats;

  // Queues `fn` for the executor. Safe from any thread, with or without a live manager. After `fn`, the
  // tick timer is re-armed for the next deadline and re-replication goes on if it can.
  static void Post(const std::weak_ptr<Core>& weak, std::function<void(Core&)> fn) {
    std::shared_ptr<Core> core = weak.lock();
    if (core == nullptr) return;
    core->executor.Post([weak, fn = std::move(fn)] {
      std::shared_ptr<Core> core = weak.lock();
      if (core == nullptr || core->Stopping()) return;
      fn(*core);
      core->AfterEvent();
    });
  }

  bool Stopping() const {
    std::lock_guard<std::mutex> lock(mu);
    return stopping;
  }

  // On the executor, after every event: the timer for the next deadline, and the next slice of
  // re-replication (one slice per posted task, so other events are served between slices).
  void AfterEvent() {
    ArmTick();
    bool runnable = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      runnable = !stopping && !jobs.empty() && jobs.front().outstanding == 0;
    }
    if (runnable && !pump_posted) {
      pump_posted = true;
      Post(weak_from_this(), [](Core& core) {
        core.pump_posted = false;
        static_cast<void>(core.PumpReplication());
      });
    }
  }

  // Arms the tick timer at the earliest instant something is due: an incoming range's done_timeout, an
  // outgoing push's push_timeout or retry, an early HandoffDone's expiry, the drop. Nothing due: disarmed.
  void ArmTick() {
    std::optional<MonoTime> at;
    auto earliest = [&](MonoTime t) { at = at.has_value() ? std::min(*at, t) : t; };
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) return;
      for (const Incoming& in : incoming) earliest(in.started + options.done_timeout);
      for (const auto& [id, out] : outgoing) {
        earliest(out.started + options.push_timeout);
        if (!out.running && out.retry_at.has_value()) earliest(*out.retry_at);
      }
      for (const EarlyDone& d : early_dones) earliest(d.at + options.done_timeout);
      // The drop waits for every handoff and re-replication to end (Tick), and the end of each re-arms
      // (AfterEvent). Armed before that, a passed drop deadline fired again at once after every Tick: a
      // busy loop on the executor until the handoff ended (up to done_timeout; the simulator caught it).
      if (drop_pending && !left && !leaving && outgoing.empty() && incoming.empty() && jobs.empty())
        earliest(last_change + options.drop_delay);
    }
    if (!at.has_value()) {
      tick_timer->Cancel();
      return;
    }
    tick_timer->Arm(*at, [weak = weak_from_this()] {
      if (std::shared_ptr<Core> core = weak.lock(); core != nullptr && !core->Stopping()) {
        core->Tick();
        core->AfterEvent();
      }
    });
  }

  // Rebuilds and publishes the overrides. REQUIRES: mu held (so overrides are published in order).
  void PublishLocked() {
    auto next = std::make_shared<RouteOverrides>();
    for (const auto& [id, out] : outgoing) {
      // While pushing this node decides the ranges; once switching, neither end does until the switch
      // is over (the new owner waits for HandoffDone, this node for its acknowledgement).
      const bool switching = out.phase != Phase::kPushing;
      for (const TokenRange& r : out.ranges)
        next->entries.push_back({r, switching ? out.to : self, switching});
    }
    for (const Incoming& in : incoming) next->entries.push_back({in.range, in.from});
    std::sort(next->entries.begin(), next->entries.end(),
              [](const auto& x, const auto& y) { return x.range.first < y.range.first; });
    // While leaving, a range whose handoff is over goes to its owner on the ring without this node at
    // once, not back to this node (still an owner on the ring until it has left) while other ranges of
    // the leave are still being handed over.
    next->left_ring = left_ring != nullptr ? left_ring : leaving && !left ? left_ring_pending : nullptr;
    routing->SetOverrides(std::move(next));
  }

  // Whether `token` is in a range this node is switching.
  bool Switching(Token token) const { return routing->Current().Holds(token); }

  bool Hold(Token token, std::function<void()>& resume) {
    std::lock_guard<std::mutex> lock(mu);
    if (stopping) return false;
    for (auto& [id, out] : outgoing) {
      if (out.phase != Phase::kPushing && InRanges(out.ranges, token)) {
        out.held.push_back(std::move(resume));
        return true;
      }
    }
    return false;
  }

  // Runs held checks again (after the lock is released).
  static void Resume(std::vector<std::function<void()>> held) {
    for (auto& resume : held) resume();
  }

  std::optional<std::string> Route(Token token) const {
    if (std::optional<std::string_view> target = routing->Current().Override(token))
      return std::string(*target);
    return std::nullopt;
  }

  // ------------------------------------------------------------------------------------ ring changes

  // Runs on the caller's thread: updates the handoff state and the overrides at once (no I/O), so the
  // routing is right as soon as the cluster publishes `after`; the pushes run on the executor.
  void RingChanged(RingPtr before, RingPtr after) {
    if (after == nullptr) return;
    const MonoTime now = executor.Now();
    std::unique_lock<std::mutex> lock(mu);
    latest = after;
    last_change = now;
    drop_pending = true;
    if (left) {
      left_ring = Without(after, self);
      PublishLocked();
      return;
    }
    const bool fresh = (before == nullptr || before->Find(self) == nullptr) && after->Find(self) != nullptr;
    if (fresh) {
      before = Without(after, self);
    } else if (before == nullptr) {
      before = RingView::Create(0, {}).value();
    }
    // Superseded entries: outgoing ranges their target no longer owns, incoming ranges this node no
    // longer owns. A range that moves back before its handoff finished never changed hands: its
    // previous owner still has the newest states, so neither end waits for or pushes it (below).
    std::map<std::string, std::vector<TokenRange>> kept_out;  // by the target that does not get them
    std::map<std::string, std::vector<TokenRange>> never_in;  // by the previous owner that kept them
    std::vector<std::function<void()>> held;  // checks held by switches the change affects: route again
    for (auto it = outgoing.begin(); it != outgoing.end();) {
      Outgoing& out = it->second;
      if (!out.leave) {
        std::vector<TokenRange> still = Intersect(out.ranges, after->Arcs(out.to));
        auto& back = kept_out[out.to];
        for (const TokenRange& r : Subtract(out.ranges, still)) back.push_back(r);
        if (still.size() != out.ranges.size() ||
            !std::equal(still.begin(), still.end(), out.ranges.begin())) {
          for (auto& h : out.held) held.push_back(std::move(h));
          out.held.clear();
        }
        out.ranges = std::move(still);
      }
      if (out.ranges.empty()) {
        spdlog::info("handoff out to {}: superseded by a ring change", out.to);
        ++stats.handoffs_failed;
        it = outgoing.erase(it);
        continue;
      }
      out.fingerprint = after->fingerprint();
      ++it;
    }
    const std::vector<TokenRange> mine = after->Arcs(self);
    std::vector<Incoming> kept;
    for (Incoming& in : incoming) {
      const std::vector<TokenRange> still = Intersect({in.range}, mine);
      auto& back = never_in[in.from];
      for (const TokenRange& r : Subtract({in.range}, still)) back.push_back(r);
      for (const TokenRange& r : still) {
        Incoming part = in;
        part.range = r;
        kept.push_back(std::move(part));
      }
    }
    incoming = std::move(kept);
    for (auto* by_peer : {&kept_out, &never_in}) {
      for (auto& [peer, ranges] : *by_peer) SortRanges(ranges);
    }

    std::map<std::string, std::vector<TokenRange>> out_moves;
    std::map<std::string, std::vector<TokenRange>> in_moves;
    for (const ring::RangeMove& m : RingView::Diff(*before, *after)) {
      // A leaving node has already started handing everything to the ring without it.
      if (!leaving && m.from == self && !m.to.empty() && m.to != self) out_moves[m.to].push_back(m.range);
      if (m.to == self && !m.from.empty() && m.from != self) in_moves[m.from].push_back(m.range);
    }
    std::vector<uint64_t> started_ids;
    for (auto& [to, moved] : out_moves) {
      std::vector<TokenRange> ranges = Subtract(moved, never_in[to]);
      if (ranges.empty()) continue;
      started_ids.push_back(AddOutgoingLocked(to, std::move(ranges), after->fingerprint(), false, now));
    }
    for (auto& [from, ranges] : in_moves) {
      std::vector<TokenRange> wait = Subtract(ranges, kept_out[from]);
      for (auto it = early_dones.begin(); it != early_dones.end();) {
        if (it->from == from && it->fingerprint == after->fingerprint()) {
          const std::vector<TokenRange> done_here = Intersect(wait, it->ranges);
          if (!done_here.empty()) {
            wait = Subtract(wait, it->ranges);
            it->ranges = Subtract(it->ranges, done_here);
            ++stats.incoming_completed;
          }
        }
        it = it->ranges.empty() ? early_dones.erase(it) : std::next(it);
      }
      for (const TokenRange& r : wait) incoming.push_back({r, from, now, before, after});
      if (!wait.empty()) {
        spdlog::info("handoff in from {}: {} ranges ({:.2f}% of the ring) waiting", from, wait.size(),
                     100 * Share(wait));
      }
    }
    std::sort(incoming.begin(), incoming.end(),
              [](const Incoming& x, const Incoming& y) { return x.range.first < y.range.first; });
    PublishLocked();
    if (before->fingerprint() != after->fingerprint()) {
      jobs.push_back({next_id++, before, after, std::nullopt, 0, 0});
    }
    // Unreachable previous owners are released by the first Tick on the executor, and the pushes start
    // there: neither Reachable nor the store is called on the caller's thread.
    if (!stopping) {
      lock.unlock();
      std::weak_ptr<Core> weak = weak_from_this();
      if (!held.empty()) Post(weak, [held = std::move(held)](Core&) mutable { Resume(std::move(held)); });
      Post(weak, [ids = std::move(started_ids), fresh, after](Core& core) {
        core.Tick();
        for (uint64_t id : ids) core.StartPush(id);
        if (fresh) core.SendNothingToHandOff(after);
      });
    } else if (!held.empty()) {
      lock.unlock();
      Resume(std::move(held));
    }
  }

  // Executor. This node just (re)joined: every other member Y that is new too (its `before` also lacks
  // itself, e.g. a cluster starting) waits for this node's HandoffDone for the ranges it would have
  // from this node on `after` without Y -- but this node owned nothing before, so it has nothing to
  // push. Says so at once; a Y that is not waiting keeps it as an early HandoffDone for `after` only.
  void SendNothingToHandOff(const RingPtr& after) {
    for (const ring::RingMember& m : after->members()) {
      if (m.id == self) continue;
      peer::HandoffDone done;
      done.set_from(self);
      done.set_ring_fingerprint(after->fingerprint());
      for (const ring::RangeMove& move : RingView::Diff(*Without(after, m.id), *after)) {
        if (move.from != self || move.to != m.id) continue;
        peer::TokenRange* r = done.add_ranges();
        r->set_first(move.range.first);
        r->set_last(move.range.last);
      }
      if (done.ranges_size() == 0 || !link.Reachable(m.id)) continue;
      link.Send(m.id, peer::METHOD_HANDOFF_DONE, done.SerializeAsString(), kDoneSendTimeout,
                [](std::optional<std::string>) {});
    }
  }

  // ---------------------------------------------------------------------------------------- outgoing

  // REQUIRES: mu held. Registers an outgoing handoff (its ranges route to self from now on; the caller
  // publishes) and returns its id.
  uint64_t AddOutgoingLocked(const std::string& to, std::vector<TokenRange> ranges, uint64_t fingerprint,
                             bool leave, MonoTime now) {
    Outgoing out;
    out.id = next_id++;
    out.to = to;
    out.ranges = std::move(ranges);
    out.fingerprint = fingerprint;
    out.leave = leave;
    out.started = now;
    spdlog::info("handoff out to {}{}: {} ranges ({:.2f}% of the ring) start", to, leave ? " (leave)" : "",
                 out.ranges.size(), 100 * Share(out.ranges));
    const uint64_t id = out.id;
    outgoing.emplace(id, std::move(out));
    return id;
  }

  // Executor: (re)starts the push of outgoing `id`: its ranges are scanned and pushed one window at a
  // time (PushWindow), so memory holds one window's states, not the whole handoff's.
  void StartPush(uint64_t id) {
    std::string to;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = outgoing.find(id);
      if (it == outgoing.end() || it->second.running) return;
      Outgoing& out = it->second;
      out.running = true;
      out.retry_at.reset();
      out.phase = Phase::kPushing;
      out.keys = 0;
      out.next_window = 0;
      out.windows = ScanWindows(out.ranges);
      ++out.attempt;
      to = out.to;
    }
    if (!link.Reachable(to)) {
      Finish(id, false, "target not reachable");
      return;
    }
    PushWindow(id);
  }

  // Groups sorted `ranges` into scan windows spanning at most 1/kPushWindows of the ring each: a scan
  // of the memory tier costs a pass over memory whatever its width, so one scan per small arc would
  // cost a pass per vnode.
  static std::vector<TokenRange> ScanWindows(const std::vector<TokenRange>& ranges) {
    constexpr Token kSpan = std::numeric_limits<Token>::max() / kPushWindows;
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

  // Executor: pushes the next window of outgoing `id` (skipping empty ones); once every window is
  // acknowledged, moves on to the switch (PushDone).
  void PushWindow(uint64_t id) {
    for (;;) {
      std::string to;
      std::vector<TokenRange> ranges;
      TokenRange window;
      uint32_t attempt = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto it = outgoing.find(id);
        if (it == outgoing.end() || stopping) return;
        Outgoing& out = it->second;
        if (out.next_window >= out.windows.size()) break;
        window = out.windows[out.next_window++];
        to = out.to;
        ranges = out.ranges;  // may have shrunk since the windows were made (a later ring change)
        attempt = out.attempt;
      }
      std::vector<peer::StateUpdate> updates;
      std::vector<storage::EntityState> states = store.ScanTokenRange(window.first, window.last);
      std::unordered_set<std::string_view> seen;
      seen.reserve(states.size());
      for (const storage::EntityState& s : states) {
        if (!InRanges(ranges, s.token) || !seen.insert(s.entity).second) continue;
        peer::StateUpdate update = MakeStateUpdate(store, s.entity);
        if (update.states_size() > 0) updates.push_back(std::move(update));
      }
      if (updates.empty()) continue;
      {
        std::lock_guard<std::mutex> lock(mu);
        auto it = outgoing.find(id);
        if (it == outgoing.end()) return;
        it->second.keys += updates.size();
      }
      std::weak_ptr<Core> weak = weak_from_this();
      replicator.SendUpdates(to, std::move(updates), [weak, id, attempt](bool ok) {
        Post(weak, [id, attempt, ok](Core& core) { core.WindowDone(id, attempt, ok); });
      });
      return;
    }
    PushDone(id, true);
  }

  void WindowDone(uint64_t id, uint32_t attempt, bool ok) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = outgoing.find(id);
      if (it == outgoing.end() || it->second.attempt != attempt) return;
    }
    if (ok) {
      PushWindow(id);
    } else {
      PushDone(id, false);
    }
  }

  // Executor: the push of outgoing `id` finished; ship the last changes and send HandoffDone.
  void PushDone(uint64_t id, bool ok) {
    std::string to;
    MonoTime started;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = outgoing.find(id);
      if (it == outgoing.end()) return;
      Outgoing& out = it->second;
      out.running = false;
      if (!ok) {
        ScheduleRetryLocked(out, "push");
        return;
      }
      out.phase = Phase::kFlushing;
      out.running = true;
      to = out.to;
      started = out.started;
      PublishLocked();  // the switch: from now on this node holds the ranges' checks
    }
    // Decisions routed with the table before the hold may still be charging the store: once they are all
    // done, the last changes are complete.
    fence.Wait([weak = weak_from_this(), id, to, started] {
      std::shared_ptr<Core> locked = weak.lock();
      if (locked == nullptr || locked->Stopping()) return;
      Core& core = *locked;
      const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(core.executor.Now() - started);
      const auto wait =
          std::clamp(core.options.push_timeout - spent, std::chrono::milliseconds(1), kMaxFlushWait);
      core.replicator.Flush(wait, [weak = core.weak_from_this(), id, to](bool ok) {
        if (!ok) spdlog::warn("handoff out to {}: the last changes were not all acknowledged", to);
        Post(weak, [id](Core& core) { core.SendDone(id); });
      });
    });
  }

  void SendDone(uint64_t id) {
    std::string to;
    peer::HandoffDone done;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = outgoing.find(id);
      if (it == outgoing.end()) return;
      Outgoing& out = it->second;
      out.phase = Phase::kDoneSent;
      out.running = true;
      out.retry_at.reset();
      to = out.to;
      done.set_from(self);
      done.set_ring_fingerprint(out.fingerprint);
      done.set_keys(out.keys);
      for (const TokenRange& r : out.ranges) {
        peer::TokenRange* pr = done.add_ranges();
        pr->set_first(r.first);
        pr->set_last(r.last);
      }
    }
    std::weak_ptr<Core> weak = weak_from_this();
    link.Send(to, peer::METHOD_HANDOFF_DONE, done.SerializeAsString(), kDoneSendTimeout,
              [weak, id](std::optional<std::string> reply) {
                const bool ok = reply.has_value();
                Post(weak, [id, ok](Core& core) { core.DoneAcked(id, ok); });
              });
  }

  void DoneAcked(uint64_t id, bool ok) {
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = outgoing.find(id);
      if (it == outgoing.end()) return;
      it->second.running = false;
      if (!ok) {
        ScheduleRetryLocked(it->second, "HandoffDone");
        return;
      }
    }
    Finish(id, true, "");
  }

  // REQUIRES: mu held. Retries later while the target is reachable (checked by Tick) and the push
  // deadline has not passed.
  void ScheduleRetryLocked(Outgoing& out, const char* what) {
    spdlog::warn("handoff out to {}: {} failed, retrying", out.to, what);
    out.retry_at = executor.Now() + kRetryDelay;
  }

  // Ends outgoing `id`: completed (acknowledged) or failed. Either way the ring routes its ranges.
  void Finish(uint64_t id, bool ok, std::string_view why) {
    std::function<void(bool)> done;
    bool done_ok = false;
    std::vector<std::function<void()>> held;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = outgoing.find(id);
      if (it == outgoing.end()) return;
      const Outgoing& out = it->second;
      const double seconds = Seconds(executor.Now() - out.started);
      if (ok) {
        ++stats.handoffs_completed;
        stats.handed_off_keys += out.keys;
        spdlog::info("handoff out to {}: done, {} keys in {} ranges in {:.3f} s", out.to, out.keys,
                     out.ranges.size(), seconds);
      } else {
        ++stats.handoffs_failed;
        spdlog::warn("handoff out to {}: abandoned after {:.3f} s ({})", out.to, seconds, why);
      }
      const bool was_leave = out.leave;
      if (was_leave && !ok) leave_ok = false;
      held = std::move(it->second.held);
      outgoing.erase(it);
      if (was_leave && leave_done != nullptr &&
          std::none_of(outgoing.begin(), outgoing.end(), [](const auto& e) { return e.second.leave; })) {
        left = true;
        left_ring = left_ring_pending;
        done = std::move(leave_done);
        leave_done = nullptr;
        done_ok = leave_ok;
        spdlog::info("leave: handoffs finished ({}), routing every check to the remaining members",
                     done_ok ? "acknowledged" : "some failed");
      }
      PublishLocked();
    }
    Resume(std::move(held));  // routed by the ring now
    if (done != nullptr) done(done_ok);
  }

  // ---------------------------------------------------------------------------------------- incoming

  std::optional<std::string> HandleDone(std::string_view payload) {
    peer::HandoffDone msg;
    if (!msg.ParseFromArray(payload.data(), static_cast<int>(payload.size())) || msg.from().empty()) {
      return std::nullopt;
    }
    std::vector<TokenRange> ranges;
    for (const peer::TokenRange& r : msg.ranges()) {
      if (r.first() > r.last()) return std::nullopt;
      ranges.push_back({r.first(), r.last()});
    }
    SortRanges(ranges);
    for (size_t i = 1; i < ranges.size(); ++i) {
      if (ranges[i].first <= ranges[i - 1].last) return std::nullopt;  // overlapping: malformed
    }
    const MonoTime now = executor.Now();
    std::lock_guard<std::mutex> lock(mu);
    std::vector<TokenRange> matched;
    std::vector<Incoming> kept;
    for (Incoming& in : incoming) {
      if (in.from != msg.from()) {
        kept.push_back(std::move(in));
        continue;
      }
      const std::vector<TokenRange> done_here = Intersect({in.range}, ranges);
      if (done_here.empty()) {
        kept.push_back(std::move(in));
        continue;
      }
      matched.insert(matched.end(), done_here.begin(), done_here.end());
      ++stats.incoming_completed;
      spdlog::info("handoff in from {}: range done after {:.3f} s ({} keys announced)", in.from,
                   Seconds(now - in.started), msg.keys());
      for (const TokenRange& r : done_here) QueueReplicationLocked(in, r);
      for (const TokenRange& r : Subtract({in.range}, done_here)) {
        Incoming part = in;
        part.range = r;
        kept.push_back(std::move(part));
      }
    }
    std::sort(kept.begin(), kept.end(),
              [](const Incoming& x, const Incoming& y) { return x.range.first < y.range.first; });
    incoming = std::move(kept);
    SortRanges(matched);
    std::vector<TokenRange> rest = Subtract(ranges, matched);
    if (!rest.empty()) early_dones.push_back({msg.from(), std::move(rest), msg.ring_fingerprint(), now});
    PublishLocked();
    // This runs on the caller's thread: wake the executor, so the released ranges' re-replication starts
    // and the tick timer is re-armed now (it may be waiting for a deadline of the ranges just released).
    if (!matched.empty()) Post(weak_from_this(), [](Core&) {});
    return peer::HandoffDoneAck().SerializeAsString();
  }

  // REQUIRES: mu held. Once `in`'s range `r` is released, its keys are this node's: re-replicate them.
  void QueueReplicationLocked(const Incoming& in, TokenRange r) {
    if (!jobs.empty() && jobs.back().limit.has_value() && jobs.back().next_slice == 0 &&
        jobs.back().before == in.before && jobs.back().after == in.after) {
      auto& limit = *jobs.back().limit;
      limit.push_back(r);
      SortRanges(limit);
      return;
    }
    jobs.push_back({next_id++, in.before, in.after, std::vector<TokenRange>{r}, 0, 0});
  }

  // ------------------------------------------------------------------------------------------ ticks

  // Executor: releases incoming ranges whose previous owner is gone or late, enforces push deadlines and
  // retries, expires early HandoffDones, and runs the drop when it is due.
  void Tick() {
    const MonoTime now = executor.Now();
    std::set<std::string> peers;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const Incoming& in : incoming) peers.insert(in.from);
      for (const auto& [id, out] : outgoing) peers.insert(out.to);
    }
    std::set<std::string> gone;
    for (const std::string& p : peers) {
      if (!link.Reachable(p)) gone.insert(p);
    }
    std::vector<uint64_t> to_fail;
    std::vector<uint64_t> to_push;
    std::vector<uint64_t> to_done;
    bool drop = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      std::vector<Incoming> kept;
      bool changed = false;
      for (Incoming& in : incoming) {
        const bool absent = gone.count(in.from) > 0;
        if (absent || now - in.started >= options.done_timeout) {
          ++stats.incoming_abandoned;
          spdlog::warn("handoff in from {}: released after {:.3f} s ({})", in.from, Seconds(now - in.started),
                       absent ? "previous owner unreachable" : "done_timeout");
          QueueReplicationLocked(in, in.range);
          changed = true;
        } else {
          kept.push_back(std::move(in));
        }
      }
      incoming = std::move(kept);
      if (changed) PublishLocked();
      for (auto& [id, out] : outgoing) {
        if (now - out.started >= options.push_timeout || (!out.running && gone.count(out.to) > 0)) {
          to_fail.push_back(id);
        } else if (!out.running && out.retry_at.has_value() && now >= *out.retry_at) {
          (out.phase == Phase::kDoneSent ? to_done : to_push).push_back(id);
        }
      }
      std::erase_if(early_dones, [&](const EarlyDone& d) { return now - d.at >= options.done_timeout; });
      drop = drop_pending && !left && !leaving && outgoing.empty() && incoming.empty() && jobs.empty() &&
             now - last_change >= options.drop_delay;
    }
    for (uint64_t id : to_fail) Finish(id, false, "target unreachable or push_timeout");
    for (uint64_t id : to_push) StartPush(id);
    for (uint64_t id : to_done) SendDone(id);
    if (drop) Drop();
  }

  // ------------------------------------------------------------------------------- re-replication

  // Executor: advances the first re-replication job by one slice.
  // Returns whether it scanned a slice (more may follow at once); false when there is nothing to do
  // now (no job, or the current one waits for its pushes). One slice per call, so tasks and ticks are
  // served between slices.
  bool PumpReplication() {
    for (;;) {
      ReplicationJob job;
      std::vector<TokenRange> pending_in;
      RingPtr current;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopping || jobs.empty()) return false;
        ReplicationJob& front = jobs.front();
        if (front.outstanding > 0) return false;
        if (front.next_slice >= options.scan_slices) {
          jobs.pop_front();
          continue;
        }
        job = front;
        ++front.next_slice;
        for (const Incoming& in : incoming) pending_in.push_back(in.range);
        current = latest;
      }
      const TokenRange slice = Slice(job.next_slice, options.scan_slices);
      if (job.limit.has_value() && !Overlaps(*job.limit, slice.first, slice.last)) continue;
      ReplicateSlice(job, slice, pending_in, current);
      return true;
    }
  }

  // Scans one slice and pushes the keys this node owns to the members new in their preference list.
  // The job's outstanding count is raised before the pushes start (their answers lower it).
  void ReplicateSlice(const ReplicationJob& job, TokenRange slice, const std::vector<TokenRange>& pending_in,
                      const RingPtr& current) {
    std::unordered_map<std::string, std::vector<peer::StateUpdate>> per_target;
    std::unordered_map<std::string, bool> reachable;
    std::vector<storage::EntityState> states = store.ScanTokenRange(slice.first, slice.last);
    std::unordered_set<std::string_view> seen;
    seen.reserve(states.size());
    for (const storage::EntityState& s : states) {
      if (job.limit.has_value() && !InRanges(*job.limit, s.token)) continue;
      if (InRanges(pending_in, s.token)) continue;
      const ring::RingMember* owner = job.after->Owner(s.token);
      if (owner == nullptr || owner->id != self) continue;
      if (current != nullptr && current != job.after) {
        const ring::RingMember* now_owner = current->Owner(s.token);
        if (now_owner == nullptr || now_owner->id != self) continue;
      }
      if (!seen.insert(s.entity).second) continue;
      const auto before_list = job.before->PreferenceList(s.token, options.replicas);
      std::vector<std::string_view> targets;
      for (const ring::RingMember* m : job.after->PreferenceList(s.token, options.replicas)) {
        if (m->id == self) continue;
        if (std::any_of(before_list.begin(), before_list.end(),
                        [&](const ring::RingMember* b) { return b->id == m->id; })) {
          continue;
        }
        auto [it, inserted] = reachable.try_emplace(m->id, false);
        if (inserted) it->second = link.Reachable(m->id);
        if (it->second) targets.push_back(m->id);
      }
      if (targets.empty()) continue;
      peer::StateUpdate update = MakeStateUpdate(store, s.entity);
      if (update.states_size() == 0) continue;
      for (size_t i = 0; i < targets.size(); ++i) {
        auto& list = per_target[std::string(targets[i])];
        if (i + 1 == targets.size()) {
          list.push_back(std::move(update));
        } else {
          list.push_back(update);
        }
      }
    }
    if (per_target.empty()) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (ReplicationJob& j : jobs) {
        if (j.id == job.id) j.outstanding += static_cast<uint32_t>(per_target.size());
      }
    }
    std::weak_ptr<Core> weak = weak_from_this();
    for (auto& [target, updates] : per_target) {
      const uint64_t keys = updates.size();
      replicator.SendUpdates(target, std::move(updates), [weak, id = job.id, keys](bool ok) {
        Post(weak, [id, keys, ok](Core& core) { core.Replicated(id, keys, ok); });
      });
    }
  }

  void Replicated(uint64_t job_id, uint64_t keys, bool ok) {
    std::lock_guard<std::mutex> lock(mu);
    if (ok) {
      stats.rereplicated_keys += keys;
    } else {
      spdlog::warn("re-replication: a push of {} keys failed", keys);
    }
    for (ReplicationJob& j : jobs) {
      if (j.id == job_id && j.outstanding > 0) --j.outstanding;
    }
  }

  // ------------------------------------------------------------------------------------------- drop

  // Executor: discards every state whose key's preference list on the current ring lacks this node.
  void Drop() {
    RingPtr current;
    {
      std::lock_guard<std::mutex> lock(mu);
      current = latest;
      drop_pending = false;
    }
    if (current == nullptr || current->Find(self) == nullptr) return;
    const auto t0 = executor.Now();
    uint64_t dropped = 0;
    for (uint32_t i = 0; i < options.scan_slices; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        // A ring change or a handoff started meanwhile: the next drop pass will run on that ring.
        if (stopping || latest != current || !outgoing.empty() || !incoming.empty()) break;
      }
      const TokenRange slice = Slice(i, options.scan_slices);
      std::vector<storage::EntityState> states = store.ScanTokenRange(slice.first, slice.last);
      std::unordered_set<std::string_view> seen;
      seen.reserve(states.size());
      for (const storage::EntityState& s : states) {
        if (!seen.insert(s.entity).second) continue;
        const auto list = current->PreferenceList(s.token, options.replicas);
        if (std::any_of(list.begin(), list.end(), [&](const ring::RingMember* m) { return m->id == self; })) {
          continue;
        }
        dropped += store.Discard(s.entity);
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    stats.dropped_states += dropped;
    if (dropped > 0) {
      spdlog::info("handoff drop: discarded {} states no longer owned or replicated here in {:.3f} s",
                   dropped, Seconds(executor.Now() - t0));
    }
  }

  // ------------------------------------------------------------------------------------------ leave

  void StartLeave(std::function<void(bool)> done) {
    RingPtr current = link.ring();
    std::vector<uint64_t> ids;
    {
      std::unique_lock<std::mutex> lock(mu);
      if (leaving) {
        lock.unlock();
        done(false);
        return;
      }
      leaving = true;
      RingPtr without = Without(current, self);
      if (current == nullptr || current->Find(self) == nullptr || without->empty()) {
        left = true;
        left_ring = without->empty() ? nullptr : without;
        PublishLocked();
        lock.unlock();
        spdlog::info("leave: nothing to hand off");
        done(true);
        return;
      }
      left_ring_pending = without;
      std::map<std::string, std::vector<TokenRange>> moves;
      for (const ring::RangeMove& m : RingView::Diff(*current, *without)) {
        if (m.from == self && !m.to.empty()) moves[m.to].push_back(m.range);
      }
      const MonoTime now = executor.Now();
      for (auto& [to, ranges] : moves) {
        ids.push_back(AddOutgoingLocked(to, std::move(ranges), without->fingerprint(), true, now));
      }
      leave_done = std::move(done);
      leave_ok = true;
      PublishLocked();
      spdlog::info("leave: handing {} ranges to {} members", current->Arcs(self).size(), moves.size());
    }
    for (uint64_t id : ids) StartPush(id);
  }

  RingPtr left_ring_pending;  // protected by mu: the ring without this node, installed when leave ends
};

HandoffManager::HandoffManager(storage::Store& store, ClusterLink& link, Replicator& replicator,
                               Executor& executor, HandoffOptions options, RoutingPublisher* routing)
    : core_(std::make_shared<Core>(store, link, replicator, executor, options, routing)) {}

HandoffManager::~HandoffManager() { Stop(); }

void HandoffManager::Start() {
  std::lock_guard<std::mutex> lock(core_->mu);
  if (core_->started || core_->stopping) return;
  core_->started = true;
}

void HandoffManager::Stop() {
  std::function<void(bool)> leave_done;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    if (core_->stopping) return;
    core_->stopping = true;
    leave_done = std::move(core_->leave_done);
    core_->leave_done = nullptr;
  }
  // Work queued from now on does nothing; wait for what runs on the executor now, and disarm the timers.
  auto barrier = std::make_shared<std::promise<void>>();
  std::future<void> reached = barrier->get_future();
  core_->executor.Post([core = core_, barrier] {
    core->tick_timer->Cancel();
    core->fence.Clear();
    barrier->set_value();
  });
  if (reached.wait_for(kStopWait) != std::future_status::ready) {
    spdlog::warn("handoff: stop did not reach the executor in time");
  }
  // Checks held by a switch in progress are routed again (Hold refuses from now on), not left hanging.
  std::vector<std::function<void()>> held;
  {
    std::lock_guard<std::mutex> lock(core_->mu);
    for (auto& [id, out] : core_->outgoing) {
      for (auto& h : out.held) held.push_back(std::move(h));
      out.held.clear();
    }
  }
  Core::Resume(std::move(held));
  if (leave_done != nullptr) leave_done(false);
}

void HandoffManager::Abandon() {
  std::lock_guard<std::mutex> lock(core_->mu);
  core_->stopping = true;
  core_->leave_done = nullptr;
  for (auto& [id, out] : core_->outgoing) out.held.clear();
}

void HandoffManager::OnMembersChanged() {
  Core::Post(core_, [](Core& core) { core.Tick(); });
}

void HandoffManager::OnRingChanged(std::shared_ptr<const ring::RingView> before,
                                   std::shared_ptr<const ring::RingView> after) {
  core_->RingChanged(std::move(before), std::move(after));
}

std::optional<std::string> HandoffManager::RouteOverride(ring::Token token) const {
  return core_->Route(token);
}

bool HandoffManager::Switching(ring::Token token) const { return core_->Switching(token); }

uint32_t HandoffManager::EnterDecision() const { return core_->fence.Enter(); }

void HandoffManager::ExitDecision(uint32_t pin) const { core_->fence.Exit(pin); }

RoutingPublisher& HandoffManager::routing() const { return *core_->routing; }

bool HandoffManager::HoldWhileSwitching(ring::Token token, std::function<void()>& resume) {
  return core_->Hold(token, resume);
}

std::optional<std::string> HandoffManager::HandleHandoffDone(std::string_view payload) {
  return core_->HandleDone(payload);
}

void HandoffManager::Leave(std::function<void(bool ok)> done) {
  Core::Post(core_, [done = std::move(done)](Core& core) mutable { core.StartLeave(std::move(done)); });
}

std::vector<HandoffView> HandoffManager::InProgress() const {
  const MonoTime now = core_->executor.Now();
  std::vector<HandoffView> views;
  std::lock_guard<std::mutex> lock(core_->mu);
  for (const auto& [id, out] : core_->outgoing) {
    HandoffView v;
    v.direction = "out";
    v.peer = out.to;
    v.ranges = out.ranges.size();
    v.share = Share(out.ranges);
    v.keys = out.keys;
    v.phase = out.phase == Core::Phase::kPushing    ? "pushing"
              : out.phase == Core::Phase::kFlushing ? "flushing"
                                                    : "done-sent";
    v.seconds = Seconds(now - out.started);
    views.push_back(std::move(v));
  }
  std::map<std::string, HandoffView> in;
  for (const Core::Incoming& i : core_->incoming) {
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

HandoffStats HandoffManager::stats() const {
  std::lock_guard<std::mutex> lock(core_->mu);
  HandoffStats s = core_->stats;
  std::set<std::string_view> peers;
  for (const Core::Incoming& i : core_->incoming) peers.insert(i.from);
  s.in_progress = core_->outgoing.size() + peers.size();
  return s;
}

}  // namespace ringlimit::replication
