#include "replication/replication_planner.h"

#include <algorithm>
#include <set>

namespace ringlimit::replication {
namespace {

void MarkInto(std::map<std::string, bool, std::less<>>& map, std::string_view key, bool erased) {
  auto it = map.find(key);
  if (it == map.end()) {
    map.emplace(std::string(key), erased);
  } else if (erased) {
    it->second = true;
  }
}

// Memoised reachability: a pass asks about the same few members once per key.
class ReachableCache {
 public:
  explicit ReachableCache(const ClusterView& view) : view_(view) {}
  bool operator()(const std::string& id) {
    auto it = cache_.find(id);
    if (it != cache_.end()) return it->second;
    const bool r = id != view_.self && view_.reachable && view_.reachable(id);
    cache_.emplace(id, r);
    return r;
  }

 private:
  const ClusterView& view_;
  std::map<std::string, bool, std::less<>> cache_;
};

}  // namespace

void ReplicationPlanner::Mark(MonoTime now, std::span<const DirtyKey> keys) {
  if (keys.empty() || stopped_) return;
  if (!dirty_since_.has_value()) dirty_since_ = now;
  for (const DirtyKey& k : keys) MarkInto(dirty_, k.key, k.erased);
}

ReplicationActions ReplicationPlanner::Changed(MonoTime now) {
  ReplicationActions out;
  if (!stopped_ && !pass_at_.has_value()) pass_at_ = now + options_.interval;
  SetWake(out);
  return out;
}

ReplicationActions ReplicationPlanner::Decided(MonoTime now, const ClusterView& view,
                                               std::span<const SyncWait> waits) {
  ReplicationActions out;
  bool registered = false;
  for (const SyncWait& wait : waits) {
    if (stopped_ || wait.keys.empty()) {
      out.waiters_done.push_back(wait.waiter);
      continue;
    }
    ++stats_.sync_waits;
    Waiter& w = waiters_[wait.waiter];
    w.deadline = now + options_.sync_timeout;
    w.acked.assign(wait.keys.size(), false);
    w.remaining = wait.keys.size();
    for (size_t i = 0; i < wait.keys.size(); ++i) {
      sync_keys_.emplace_back(wait.keys[i], Slot{wait.waiter, static_cast<uint32_t>(i)});
    }
    registered = true;
  }
  if (registered) {
    Pass(now, view, /*force=*/false, out);
    FinishFlushes(now, view, out);
  }
  SetWake(out);
  return out;
}

ReplicationActions ReplicationPlanner::Flush(MonoTime now, const ClusterView& view, uint64_t flush,
                                             MonoTime deadline) {
  ReplicationActions out;
  if (stopped_) {
    out.flushes_done.emplace_back(flush, false);
    SetWake(out);
    return out;
  }
  const uint64_t before = last_batch_;
  Pass(now, view, /*force=*/true, out);
  FlushState& f = flushes_[flush];
  f.deadline = deadline;
  f.first_batch = before + 1;
  f.last_batch = last_batch_;
  FinishFlushes(now, view, out);
  SetWake(out);
  return out;
}

ReplicationActions ReplicationPlanner::BatchReply(MonoTime now, const ClusterView& view, uint64_t id,
                                                  bool ok) {
  ReplicationActions out;
  auto it = in_flight_.find(id);
  if (it == in_flight_.end()) {
    SetWake(out);
    return out;
  }
  Batch batch = std::move(it->second);
  in_flight_.erase(it);
  Target& t = targets_[batch.target];
  if (t.in_flight > 0) --t.in_flight;
  if (ok) {
    t.backoff = std::chrono::nanoseconds{0};
    stats_.updates_acked += batch.keys.size();
    stats_.lag = now - batch.oldest;
    stats_.max_lag = std::max(stats_.max_lag, stats_.lag);
    for (const Slot& s : batch.slots) AckSlot(s, out);
  } else {
    ++stats_.send_failures;
    for (auto& [fid, f] : flushes_) {
      if (id >= f.first_batch && id <= f.last_batch) ++f.failures;
    }
    // Retried only while the member can still be reached (gone: re-replication restores the copies once
    // the ring changes) and never after Stop.
    ReachableCache reachable(view);
    if (!stopped_ && reachable(batch.target)) {
      for (const DirtyKey& k : batch.keys) MarkInto(t.retry, k.key, k.erased);
      t.backoff = std::min<std::chrono::nanoseconds>(kMaxBackoff, std::max(options_.interval, t.backoff * 2));
      t.retry_at = now + t.backoff;
    }
  }
  FinishFlushes(now, view, out);
  SetWake(out);
  return out;
}

ReplicationActions ReplicationPlanner::Timer(MonoTime now, const ClusterView& view) {
  ReplicationActions out;
  ExpireWaiters(now, out);
  std::vector<uint64_t> again;  // flushes whose failed pass ships again now
  for (auto& [id, f] : flushes_) {
    if (f.again_at.has_value() && *f.again_at <= now) {
      f.again_at.reset();
      again.push_back(id);
    }
  }
  const bool force = !again.empty();
  const bool retry_due = std::any_of(targets_.begin(), targets_.end(), [&](const auto& e) {
    return !e.second.retry.empty() && e.second.retry_at <= now && e.second.in_flight < kMaxInFlightPerTarget;
  });
  if (force || retry_due || (pass_at_.has_value() && *pass_at_ <= now)) {
    const uint64_t before = last_batch_;
    Pass(now, view, force, out);
    for (uint64_t id : again) {
      FlushState& f = flushes_[id];
      f.first_batch = before + 1;
      f.last_batch = last_batch_;
      f.failures = 0;
    }
  }
  FinishFlushes(now, view, out);
  SetWake(out);
  return out;
}

ReplicationActions ReplicationPlanner::Stop(MonoTime /*now*/) {
  ReplicationActions out;
  stopped_ = true;
  for (auto& [id, w] : waiters_) {
    ++stats_.sync_timeouts;
    out.waiters_done.push_back(id);
  }
  waiters_.clear();
  for (auto& [id, f] : flushes_) out.flushes_done.emplace_back(id, false);
  flushes_.clear();
  sync_keys_.clear();
  pass_at_.reset();
  return out;  // wake_at unset: nothing is due any more
}

PlannerStats ReplicationPlanner::stats() const {
  PlannerStats s = stats_;
  s.pending_keys = dirty_.size();
  for (const auto& [id, t] : targets_) s.pending_keys += t.retry.size();
  return s;
}

// ------------------------------------------------------------------------------------------ the pass

void ReplicationPlanner::Pass(MonoTime now, const ClusterView& view, bool force, ReplicationActions& out) {
  struct Job {
    bool erased = false;
    std::vector<Slot> slots;
    std::string successor;  // sync: the replica whose acknowledgement answers the slots
    bool successor_known = false;
  };
  std::map<std::string, Job, std::less<>> jobs;
  const MonoTime oldest = dirty_since_.value_or(now);
  for (auto& [key, erased] : dirty_) jobs[key].erased |= erased;
  dirty_.clear();
  dirty_since_.reset();
  pass_at_.reset();
  for (auto& [key, slot] : sync_keys_) jobs[key].slots.push_back(slot);
  sync_keys_.clear();

  ReachableCache reachable(view);
  std::vector<const ring::RingMember*> pref;
  auto preference = [&](std::string_view key) {
    pref.clear();
    if (view.ring != nullptr) pref = view.ring->PreferenceList(ring::RingToken(key), options_.replicas);
  };
  std::map<std::string, std::vector<std::string_view>> per_target;  // member -> keys (views into jobs)
  std::map<std::string, std::set<std::string_view>> targeted;
  for (auto& [key, job] : jobs) {
    preference(key);
    for (const ring::RingMember* m : pref) {
      if (reachable(m->id) && targeted[m->id].insert(key).second) per_target[m->id].push_back(key);
    }
    if (!job.slots.empty()) {
      // The successor: the first reachable member after this node in the preference list, i.e. the node
      // that takes the key over if this one dies (an acknowledgement from another replica would leave the
      // successor with an older count).
      const auto me = std::find_if(pref.begin(), pref.end(),
                                   [&](const ring::RingMember* m) { return m->id == view.self; });
      const size_t start = me == pref.end() ? 0 : static_cast<size_t>(me - pref.begin()) + 1;
      for (size_t k = 0; k < pref.size() && job.successor.empty(); ++k) {
        const ring::RingMember* m = pref[(start + k) % pref.size()];
        if (reachable(m->id)) job.successor = m->id;
      }
      if (job.successor.empty()) {  // no replica to wait for
        for (const Slot& s : job.slots) AckSlot(s, out);
        job.slots.clear();
      }
    }
  }

  // Due retries, for their member only, while it is reachable and still a replica of the key.
  std::map<std::string, bool, std::less<>> retry_erased;  // keys only in retries: their erased flag
  for (auto& [id, t] : targets_) {
    if (t.retry.empty() || (!force && now < t.retry_at)) continue;
    auto keys = std::move(t.retry);
    t.retry.clear();
    if (!reachable(id)) continue;
    for (auto& [key, erased] : keys) {
      preference(key);
      if (std::none_of(pref.begin(), pref.end(), [&](const ring::RingMember* m) { return m->id == id; })) {
        continue;
      }
      auto job = jobs.find(key);
      if (job == jobs.end()) {
        job = jobs.emplace(key, Job{erased, {}, {}, false}).first;
      } else {
        job->second.erased |= erased;
      }
      if (targeted[id].insert(job->first).second) per_target[id].push_back(job->first);
    }
  }

  for (auto& [id, keys] : per_target) {
    Target& t = targets_[id];
    for (size_t start = 0; start < keys.size(); start += options_.max_batch) {
      const size_t end = std::min(keys.size(), start + options_.max_batch);
      Batch batch;
      batch.target = id;
      batch.oldest = oldest;
      for (size_t k = start; k < end; ++k) {
        Job& job = jobs.find(keys[k])->second;
        batch.keys.push_back(DirtyKey{std::string(keys[k]), job.erased});
        if (job.successor == id) batch.slots.insert(batch.slots.end(), job.slots.begin(), job.slots.end());
      }
      // Batches that carry Decided keys are never held back: their callers wait.
      if (!force && batch.slots.empty() && t.in_flight >= kMaxInFlightPerTarget) {
        for (const DirtyKey& k : batch.keys) MarkInto(t.retry, k.key, k.erased);
        continue;
      }
      ++t.in_flight;
      const uint64_t id_ = ++last_batch_;
      stats_.updates_sent += batch.keys.size();
      ++stats_.batches_sent;
      out.ship.push_back(ShipBatch{id_, id, batch.keys});
      in_flight_.emplace(id_, std::move(batch));
    }
  }
}

void ReplicationPlanner::AckSlot(const Slot& slot, ReplicationActions& out) {
  auto it = waiters_.find(slot.waiter);
  if (it == waiters_.end()) return;
  Waiter& w = it->second;
  if (slot.index >= w.acked.size() || w.acked[slot.index]) return;
  w.acked[slot.index] = true;
  if (--w.remaining == 0) {
    out.waiters_done.push_back(slot.waiter);
    waiters_.erase(it);
  }
}

void ReplicationPlanner::ExpireWaiters(MonoTime now, ReplicationActions& out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->second.deadline <= now) {
      ++stats_.sync_timeouts;
      out.waiters_done.push_back(it->first);
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

bool ReplicationPlanner::RetryPending() const {
  return std::any_of(targets_.begin(), targets_.end(), [](const auto& e) { return !e.second.retry.empty(); });
}

void ReplicationPlanner::FinishFlushes(MonoTime now, const ClusterView& /*view*/, ReplicationActions& out) {
  for (auto it = flushes_.begin(); it != flushes_.end();) {
    FlushState& f = it->second;
    const bool over = in_flight_.empty() || in_flight_.begin()->first > f.last_batch;
    std::optional<bool> result;
    if (now >= f.deadline) {
      result = false;
    } else if (over && !f.again_at.has_value()) {
      const bool retrying = RetryPending();
      if (f.failures == 0 && !retrying) {
        result = true;
      } else if (!retrying) {
        result = false;  // what failed went to members that are gone
      } else {
        f.again_at = now + options_.interval;
      }
    }
    if (result.has_value()) {
      out.flushes_done.emplace_back(it->first, *result);
      it = flushes_.erase(it);
    } else {
      ++it;
    }
  }
}

void ReplicationPlanner::SetWake(ReplicationActions& out) const {
  std::optional<MonoTime> at = pass_at_;
  auto earliest = [&](MonoTime t) { at = at.has_value() ? std::min(*at, t) : t; };
  for (const auto& [id, w] : waiters_) earliest(w.deadline);
  for (const auto& [id, f] : flushes_) {
    earliest(f.deadline);
    if (f.again_at.has_value()) earliest(*f.again_at);
  }
  // A member with kMaxInFlightPerTarget batches in flight takes no retry (Pass holds it back) until one is
  // answered (BatchReply sets the wake again). Woken for it before that, the timer found the passed retry_at
  // again after every pass: a busy loop until a batch was answered (up to send_timeout; the simulator caught
  // it with one direction of a link cut).
  for (const auto& [id, t] : targets_) {
    if (!t.retry.empty() && t.in_flight < kMaxInFlightPerTarget) earliest(t.retry_at);
  }
  out.wake_at = at;
}

}  // namespace ringlimit::replication
