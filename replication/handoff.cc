#include "replication/handoff.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <future>
#include <iterator>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/published.h"
#include "peer.pb.h"
#include "replication/decision_fence.h"

namespace ringlimit::replication {
namespace {

using ring::TokenRange;

// Stop: longest wait for the work running on the executor.
constexpr std::chrono::seconds kStopWait{5};
// Timeout of one HandoffDone send.
constexpr std::chrono::milliseconds kDoneSendTimeout{2'000};

double Seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

// What InProgress() and stats() read from other threads: the planner's, after the last event.
struct Progress {
  MonoTime at{};  // when it was taken: views' `seconds` are as of then
  std::vector<HandoffView> views;
  HandoffStats stats;
};

// Timeout of one METHOD_SYNC_RANGES call: the answer comes once the holder's push was acknowledged.
constexpr std::chrono::milliseconds kSyncCallTimeout{10'000};

// `in` sorted; nullopt when malformed (a reversed or overlapping range).
std::optional<std::vector<TokenRange>> ParseRanges(
    const google::protobuf::RepeatedPtrField<peer::TokenRange>& in) {
  std::vector<TokenRange> ranges;
  for (const peer::TokenRange& r : in) {
    if (r.first() > r.last()) return std::nullopt;
    ranges.push_back({r.first(), r.last()});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const TokenRange& x, const TokenRange& y) { return x.first < y.first; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first <= ranges[i - 1].last) return std::nullopt;  // overlapping: malformed
  }
  return ranges;
}

// A message with a sender and ranges (HandoffDone, SyncRanges): its ranges, sorted; nullopt when malformed
// (no sender, a reversed or overlapping range).
template <typename Message>
std::optional<std::vector<TokenRange>> ParseFromRanges(std::string_view payload, Message& msg) {
  if (!msg.ParseFromArray(payload.data(), static_cast<int>(payload.size())) || msg.from().empty()) {
    return std::nullopt;
  }
  return ParseRanges(msg.ranges());
}

void AddRanges(const std::vector<TokenRange>& ranges,
               google::protobuf::RepeatedPtrField<peer::TokenRange>* out) {
  for (const TokenRange& r : ranges) {
    peer::TokenRange* pr = out->Add();
    pr->set_first(r.first);
    pr->set_last(r.last);
  }
}

}  // namespace

// The driver. Everything under "On the executor only" is touched by work running on the executor, never
// elsewhere: it needs no lock.
struct HandoffManager::Core : std::enable_shared_from_this<HandoffManager::Core> {
  Core(storage::Store& s, ClusterLink& l, Replicator& r, Executor& e, HandoffOptions o, RoutingPublisher* rp)
      : store(s),
        link(l),
        replicator(r),
        executor(e),
        options(o),
        self(l.self_id()),
        routing(rp),
        fence(e),
        planner(l.self_id(), o),
        timer(e.NewTimer()) {
    if (routing == nullptr) {
      own_routing = std::make_unique<RoutingPublisher>();
      routing = own_routing.get();
    }
    progress.Publish(std::make_shared<const Progress>());
  }

  // --- Constant after construction ---
  storage::Store& store;
  ClusterLink& link;
  Replicator& replicator;
  Executor& executor;
  const HandoffOptions options;
  const std::string self;
  std::unique_ptr<RoutingPublisher> own_routing;  // when the caller gave none
  RoutingPublisher* routing;                      // where rings and overrides are published (thread-safe)
  DecisionFence fence;                            // Enter/Exit from any thread, Wait on the executor

  // --- Any thread ---
  std::atomic<bool> stopping{false};   // Stop or Abandon called: nothing more runs on the executor
  std::atomic<bool> abandoned{false};  // Abandon called: nothing is answered or resumed either
  Published<Progress> progress;        // written on the executor

  // --- On the executor only ---
  HandoffPlanner planner;
  std::unique_ptr<Executor::Timer> timer;                       // armed at the planner's wake_at
  std::map<uint64_t, std::vector<std::function<void()>>> held;  // by switching handoff: checks to resume
  std::function<void(bool)> leave_done;                         // of the leave in progress

  // Queues `fn` for the executor. Safe from any thread, with or without a live manager; `fn` does not run
  // once the manager is stopping.
  static void Post(const std::weak_ptr<Core>& weak, std::function<void(Core&)> fn) {
    std::shared_ptr<Core> core = weak.lock();
    if (core == nullptr) return;
    core->executor.Post([weak, fn = std::move(fn)] {
      std::shared_ptr<Core> core = weak.lock();
      if (core == nullptr || core->stopping.load()) return;
      fn(*core);
    });
  }

  MonoTime Now() const { return executor.Now(); }

  // The planner's view of the cluster now (reachability only: the rings come with the events).
  ClusterView View() {
    return ClusterView{self, nullptr, [this](std::string_view id) { return link.Reachable(id); }, nullptr};
  }

  // Carries out what the planner decided, and what it decides about the reports that come at once.
  void Apply(HandoffActions first) {
    std::deque<HandoffActions> queue;
    queue.push_back(std::move(first));
    while (!queue.empty()) {
      HandoffActions a = std::move(queue.front());
      queue.pop_front();
      // The snapshot of the planner after every event so far (the reports queued here are planner calls
      // made by the previous round), before the routing table: whoever sees the new table sees what is in
      // progress with it.
      PublishProgress();
      if (a.ring != nullptr && a.overrides != nullptr) {
        routing->SetRingAndOverrides(std::move(a.ring), std::move(a.overrides));
      } else if (a.ring != nullptr) {
        routing->SetRing(std::move(a.ring));
      } else if (a.overrides != nullptr) {
        routing->SetOverrides(std::move(a.overrides));
      }
      for (uint64_t id : a.resume) Resume(id);  // routed by the table just published
      for (uint64_t id : a.fence) {
        // The hold is published: once the decisions routed before it are over, the last changes are
        // complete.
        fence.Wait([weak = weak_from_this(), id] {
          Post(weak, [id](Core& core) { core.Apply(core.planner.FenceDone(core.Now(), id)); });
        });
      }
      for (const CountKeys& count : a.count) {
        queue.push_back(planner.KeysCounted(Now(), count.handoff, count.attempt, Count(count)));
      }
      for (PushWindow& push : a.push) {
        if (std::optional<HandoffActions> next = Push(std::move(push))) queue.push_back(std::move(*next));
      }
      for (const FlushLastChanges& flush : a.flush) {
        replicator.Flush(flush.wait, [weak = weak_from_this(), id = flush.handoff](bool ok) {
          Post(weak, [id, ok](Core& core) { core.Apply(core.planner.FlushDone(core.Now(), id, ok)); });
        });
      }
      for (SendDone& done : a.send_done) Send(std::move(done));
      for (PullSync& pull : a.pull) Pull(std::move(pull));
      if (a.replicate.has_value()) queue.push_back(Replicate(*a.replicate));
      if (a.drop.has_value()) queue.push_back(Drop(*a.drop));
      if (a.pump) {
        Post(weak_from_this(), [](Core& core) { core.Apply(core.planner.ReplicationPump(core.Now())); });
      }
      if (a.leave_done.has_value() && leave_done != nullptr)
        std::exchange(leave_done, nullptr)(*a.leave_done);
      if (a.wake_at.has_value()) {
        timer->Arm(*a.wake_at, [weak = weak_from_this()] {
          if (std::shared_ptr<Core> core = weak.lock(); core != nullptr && !core->stopping.load()) {
            core->Apply(core->planner.Timer(core->Now(), core->View()));
          }
        });
      } else {
        timer->Cancel();
      }
    }
  }

  void PublishProgress() {
    auto p = std::make_shared<Progress>();
    p->at = Now();
    p->views = planner.Views(p->at);
    p->stats = planner.stats();
    progress.Publish(std::move(p));
  }

  void Resume(uint64_t id) {
    auto it = held.find(id);
    if (it == held.end()) return;
    std::vector<std::function<void()>> checks = std::move(it->second);
    held.erase(it);
    for (auto& resume : checks) resume();
  }

  // A held check reaches the executor: it waits for its switch, or goes on at once if that is over.
  void Hold(ring::Token token, std::function<void()> resume) {
    if (std::optional<uint64_t> id = planner.Holding(token)) {
      held[*id].push_back(std::move(resume));
    } else {
      resume();
    }
  }

  // The keys of each window of `count` whose token is in its ranges (Store::CountTokenRange: no state
  // copied).
  std::vector<uint64_t> Count(const CountKeys& count) {
    const MonoTime t0 = Now();
    std::vector<uint64_t> per_window;
    per_window.reserve(count.windows.size());
    uint64_t total = 0;
    for (const TokenRange& window : count.windows) {
      uint64_t keys = 0;  // a key's states share its token: the parts count disjoint keys
      for (const TokenRange& part : ScanParts(window, count.ranges))
        keys += store.CountTokenRange(part.first, part.last);
      per_window.push_back(keys);
      total += keys;
    }
    spdlog::info("handoff out: {} keys to send in {} windows (counted in {:.3f} s)", total,
                 count.windows.size(), Seconds(Now() - t0));
    return per_window;
  }

  // Scans one push window and sends its states; returns the report when there was nothing to send.
  std::optional<HandoffActions> Push(PushWindow push) {
    std::vector<peer::StateUpdate> updates;
    std::vector<storage::EntityState> states = Scan(ScanParts(push.window, push.ranges));
    std::unordered_set<std::string_view> seen;
    seen.reserve(states.size());
    uint64_t bytes = 0;  // the updates' serialized size (cached by protobuf for the send)
    for (const storage::EntityState& s : states) {
      if (!InSortedRanges(push.ranges, s.token) || !seen.insert(s.entity).second) continue;
      peer::StateUpdate update = MakeStateUpdate(store, s.entity);
      if (update.states_size() == 0) continue;
      bytes += update.ByteSizeLong();
      updates.push_back(std::move(update));
    }
    if (updates.empty()) return planner.PushWindowDone(Now(), push.handoff, push.attempt, true, 0, 0);
    const uint64_t keys = updates.size();
    replicator.SendUpdates(
        push.to, std::move(updates),
        [weak = weak_from_this(), id = push.handoff, attempt = push.attempt, keys, bytes](bool ok) {
          Post(weak, [id, attempt, keys, bytes, ok](Core& core) {
            core.Apply(core.planner.PushWindowDone(core.Now(), id, attempt, ok, keys, bytes));
          });
        });
    return std::nullopt;
  }

  void Send(SendDone done) {
    peer::HandoffDone msg;
    msg.set_from(self);
    msg.set_ring_fingerprint(done.fingerprint);
    msg.set_keys(done.keys);
    // Not deciding (a clock judged off), this node's copy may lack what the next holders decided for it.
    msg.set_synced(done.synced && link.Deciding());
    AddRanges(done.ranges, msg.mutable_ranges());
    link.Send(done.to, peer::METHOD_HANDOFF_DONE, msg.SerializeAsString(), kDoneSendTimeout,
              [weak = weak_from_this(), id = done.handoff](std::optional<std::string> reply) {
                if (id == 0) return;  // "nothing to hand off": no answer expected
                Post(weak, [id, ok = reply.has_value()](Core& core) {
                  core.Apply(core.planner.DoneAcked(core.Now(), id, ok));
                });
              });
  }

  // Asks a holder to push its copy of ranges this node holds unsynced.
  void Pull(PullSync pull) {
    peer::SyncRanges msg;
    msg.set_from(self);
    AddRanges(pull.ranges, msg.mutable_ranges());
    msg.set_fingerprint(pull.fingerprint);
    link.Send(pull.to, peer::METHOD_SYNC_RANGES, msg.SerializeAsString(), kSyncCallTimeout,
              [weak = weak_from_this(), round = pull.round, to = pull.to](std::optional<std::string> reply) {
                std::optional<std::vector<TokenRange>> synced;
                std::vector<TokenRange> not_handed;
                peer::SyncRangesAnswer answer;
                if (reply.has_value() && answer.ParseFromString(*reply)) {
                  synced = ParseRanges(answer.synced());
                  not_handed = ParseRanges(answer.not_handed()).value_or(std::vector<TokenRange>{});
                }
                Post(weak, [round, to, synced = std::move(synced),
                            not_handed = std::move(not_handed)](Core& core) mutable {
                  core.Apply(core.planner.SyncPulled(core.Now(), round, to, std::move(synced), not_handed));
                });
              });
  }

  // Pushes this node's states of `ranges` (sorted) to `to`; `done(keys)` once acknowledged, or
  // done(nullopt) when the push failed.
  void PushRanges(const std::string& to, const std::vector<TokenRange>& ranges,
                  std::function<void(std::optional<uint64_t>)> done) {
    std::vector<peer::StateUpdate> updates;
    for (uint32_t i = 0; i < options.scan_slices; ++i) {
      const std::vector<TokenRange> parts = ScanParts(ScanSlice(i, options.scan_slices), ranges);
      if (parts.empty()) continue;
      std::vector<storage::EntityState> states = Scan(parts);
      std::unordered_set<std::string_view> seen;
      seen.reserve(states.size());
      for (const storage::EntityState& s : states) {
        if (!InSortedRanges(ranges, s.token) || !seen.insert(s.entity).second) continue;
        peer::StateUpdate update = MakeStateUpdate(store, s.entity);
        if (update.states_size() > 0) updates.push_back(std::move(update));
      }
    }
    if (updates.empty()) {
      done(0);
      return;
    }
    const uint64_t keys = updates.size();
    replicator.SendUpdates(to, std::move(updates), [keys, done = std::move(done)](bool ok) {
      done(ok ? std::optional<uint64_t>(keys) : std::nullopt);
    });
  }

  // Scans one re-replication slice and pushes each key this node owns to the members new in its
  // preference list; returns the report of the scan (the pushes report later).
  HandoffActions Replicate(const ReplicateSlice& slice) {
    std::unordered_map<std::string, std::vector<peer::StateUpdate>> per_target;
    std::unordered_map<std::string, bool> reachable;
    auto is_reachable = [&](std::string_view id) {
      auto [it, inserted] = reachable.try_emplace(std::string(id), false);
      if (inserted) it->second = link.Reachable(id);
      return it->second;
    };
    std::vector<storage::EntityState> states = Scan(ScanParts(slice.slice, slice.limit));
    std::unordered_set<std::string_view> seen;
    seen.reserve(states.size());
    for (const storage::EntityState& s : states) {
      if (!seen.insert(s.entity).second) continue;
      std::vector<std::string> targets =
          ReplicationTargets(slice, self, options.replicas, s.token, is_reachable);
      if (targets.empty()) continue;
      peer::StateUpdate update = MakeStateUpdate(store, s.entity);
      if (update.states_size() == 0) continue;
      for (size_t i = 0; i < targets.size(); ++i) {
        auto& list = per_target[targets[i]];
        if (i + 1 == targets.size()) {
          list.push_back(std::move(update));
        } else {
          list.push_back(update);
        }
      }
    }
    for (auto& [target, updates] : per_target) {
      const uint64_t keys = updates.size();
      replicator.SendUpdates(target, std::move(updates),
                             [weak = weak_from_this(), job = slice.job, keys](bool ok) {
                               Post(weak, [job, keys, ok](Core& core) {
                                 core.Apply(core.planner.ReplicationPushDone(core.Now(), job, keys, ok));
                               });
                             });
    }
    return planner.ReplicationSliceScanned(Now(), slice.job, static_cast<uint32_t>(per_target.size()),
                                           states.size());
  }

  // The states of `parts` (sorted, non-overlapping), one scan each.
  std::vector<storage::EntityState> Scan(const std::vector<TokenRange>& parts) {
    if (parts.size() == 1) return store.ScanTokenRange(parts[0].first, parts[0].last);
    std::vector<storage::EntityState> states;
    for (const TokenRange& part : parts) {
      std::vector<storage::EntityState> more = store.ScanTokenRange(part.first, part.last);
      if (states.empty()) {
        states = std::move(more);
      } else {
        std::move(more.begin(), more.end(), std::back_inserter(states));
      }
    }
    return states;
  }

  // Discards every state of `drop`'s ranges whose key's preference list on its ring lacks this node;
  // returns the report.
  HandoffActions Drop(const DropStates& drop) {
    const MonoTime t0 = Now();
    const ring::RingView& ring = *drop.ring;
    uint64_t dropped = 0;
    uint64_t scanned = 0;
    for (uint32_t i = 0; i < options.scan_slices; ++i) {
      const std::vector<TokenRange> parts = ScanParts(ScanSlice(i, options.scan_slices), drop.ranges);
      if (parts.empty()) continue;
      std::vector<storage::EntityState> states = Scan(parts);
      scanned += states.size();
      std::unordered_set<std::string_view> seen;
      seen.reserve(states.size());
      for (const storage::EntityState& s : states) {
        if (!seen.insert(s.entity).second) continue;
        const auto list = ring.PreferenceList(s.token, options.replicas);
        if (std::any_of(list.begin(), list.end(), [&](const ring::RingMember* m) { return m->id == self; })) {
          continue;
        }
        dropped += store.Discard(s.entity);
      }
    }
    if (dropped > 0) {
      spdlog::info(
          "handoff drop: discarded {} states no longer owned or replicated here in {:.3f} s ({} read)",
          dropped, Seconds(Now() - t0), scanned);
    }
    return planner.Dropped(Now(), dropped, scanned);
  }
};

HandoffManager::HandoffManager(storage::Store& store, ClusterLink& link, Replicator& replicator,
                               Executor& executor, HandoffOptions options, RoutingPublisher* routing)
    : core_(std::make_shared<Core>(store, link, replicator, executor, options, routing)) {}

HandoffManager::~HandoffManager() { Stop(); }

void HandoffManager::Start() {}

void HandoffManager::Stop() {
  if (core_->stopping.exchange(true)) return;
  // Work queued from now on does nothing; wait for what runs on the executor now, disarm the timer, and
  // take what waits for the manager: held checks are routed again (Hold refuses from now on) and the
  // leave in progress is answered, here, not left hanging.
  struct Leftovers {
    std::vector<std::function<void()>> held;
    std::function<void(bool)> leave_done;
  };
  auto barrier = std::make_shared<std::promise<Leftovers>>();
  std::future<Leftovers> reached = barrier->get_future();
  core_->executor.Post([core = core_, barrier] {
    core->timer->Cancel();
    core->fence.Clear();
    Leftovers left;
    for (auto& [id, checks] : core->held) {
      for (auto& resume : checks) left.held.push_back(std::move(resume));
    }
    core->held.clear();
    left.leave_done = std::exchange(core->leave_done, nullptr);
    barrier->set_value(std::move(left));
  });
  if (reached.wait_for(kStopWait) != std::future_status::ready) {
    spdlog::warn("handoff: stop did not reach the executor in time");
    return;
  }
  Leftovers left = reached.get();
  for (auto& resume : left.held) resume();
  if (left.leave_done != nullptr) left.leave_done(false);
}

void HandoffManager::Abandon() {
  core_->abandoned.store(true);
  core_->stopping.store(true);
}

void HandoffManager::OnMembersChanged() {
  Core::Post(core_, [](Core& core) { core.Apply(core.planner.MembersChanged(core.Now(), core.View())); });
}

void HandoffManager::OnRingChanged(std::shared_ptr<const ring::RingView> before,
                                   std::shared_ptr<const ring::RingView> after) {
  Core::Post(core_, [before = std::move(before), after = std::move(after)](Core& core) {
    core.Apply(core.planner.RingChanged(core.Now(), core.View(), before, after));
  });
}

std::optional<std::string> HandoffManager::RouteOverride(ring::Token token) const {
  if (std::optional<std::string_view> target = core_->routing->Current().Override(token)) {
    return std::string(*target);
  }
  return std::nullopt;
}

bool HandoffManager::Switching(ring::Token token) const { return core_->routing->Current().Holds(token); }

uint32_t HandoffManager::EnterDecision() const { return core_->fence.Enter(); }

void HandoffManager::ExitDecision(uint32_t pin) const { core_->fence.Exit(pin); }

RoutingPublisher& HandoffManager::routing() const { return *core_->routing; }

bool HandoffManager::HoldWhileSwitching(ring::Token token, std::function<void()>& resume) {
  if (core_->stopping.load() || !core_->routing->Current().Holds(token)) return false;
  // Not through Post: a check taken here must run again even if Stop comes first (then at once).
  core_->executor.Post([weak = std::weak_ptr<Core>(core_), token, resume = std::move(resume)]() mutable {
    std::shared_ptr<Core> core = weak.lock();
    if (core == nullptr || core->abandoned.load()) return;
    if (core->stopping.load()) {
      resume();
      return;
    }
    core->Hold(token, std::move(resume));
  });
  resume = nullptr;
  return true;
}

void HandoffManager::HandleHandoffDone(std::string_view payload, Answer answer) {
  auto msg = std::make_shared<peer::HandoffDone>();
  std::optional<std::vector<TokenRange>> ranges = ParseFromRanges(payload, *msg);
  if (!ranges.has_value()) {
    answer(std::nullopt);
    return;
  }
  // Not through Post: answered even if Stop comes first (then without releasing anything).
  core_->executor.Post(
      [weak = std::weak_ptr<Core>(core_), msg, ranges = std::move(*ranges), answer = std::move(answer)] {
        std::shared_ptr<Core> core = weak.lock();
        if (core == nullptr || core->abandoned.load()) return;
        if (!core->stopping.load()) {
          core->Apply(core->planner.HandoffDoneReceived(core->Now(), msg->from(), ranges,
                                                        msg->ring_fingerprint(), msg->keys(), msg->synced()));
        }
        answer(peer::HandoffDoneAck().SerializeAsString());
      });
}

void HandoffManager::HandleSyncRanges(std::string_view payload, Answer answer) {
  peer::SyncRanges msg;
  std::optional<std::vector<TokenRange>> ranges = ParseFromRanges(payload, msg);
  if (!ranges.has_value()) {
    answer(std::nullopt);
    return;
  }
  // Not through Post: answered (failed) even if Stop comes first.
  core_->executor.Post([weak = std::weak_ptr<Core>(core_), from = msg.from(), ranges = std::move(*ranges),
                        fingerprint = msg.fingerprint(), answer = std::move(answer)] {
    std::shared_ptr<Core> core = weak.lock();
    if (core == nullptr || core->abandoned.load()) return;
    if (core->stopping.load()) {
      answer(std::nullopt);
      return;
    }
    // Which parts are synced is judged before the push: whatever this node held then is in it.
    std::vector<TokenRange> synced = core->planner.SyncedOf(ranges);
    std::vector<TokenRange> not_handed = core->planner.NotHandedOf(ranges, fingerprint);
    core->PushRanges(from, ranges,
                     [synced = std::move(synced), not_handed = std::move(not_handed),
                      answer](std::optional<uint64_t> keys) {
                       if (!keys.has_value()) {
                         answer(std::nullopt);
                         return;
                       }
                       peer::SyncRangesAnswer reply;
                       AddRanges(synced, reply.mutable_synced());
                       AddRanges(not_handed, reply.mutable_not_handed());
                       reply.set_keys(*keys);
                       answer(reply.SerializeAsString());
                     });
  });
}

void HandoffManager::Leave(std::function<void(bool ok)> done) {
  Core::Post(core_, [done = std::move(done)](Core& core) mutable {
    std::optional<HandoffActions> actions = core.planner.Leave(core.Now(), core.View(), core.link.ring());
    if (!actions.has_value()) {  // already leaving
      done(false);
      return;
    }
    core.leave_done = std::move(done);
    core.Apply(std::move(*actions));
  });
}

std::vector<HandoffView> HandoffManager::InProgress() const {
  std::shared_ptr<const Progress> p = core_->progress.Load();
  std::vector<HandoffView> views = p->views;
  const double since = Seconds(core_->executor.Now() - p->at);
  for (HandoffView& v : views) v.seconds += since;
  return views;
}

HandoffStats HandoffManager::stats() const { return core_->progress.Load()->stats; }

}  // namespace ringlimit::replication
