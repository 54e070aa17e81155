#include "replication/replication_planner.h"

#include <algorithm>
#include <boost/unordered/unordered_flat_map.hpp>
#include <set>

#include "ring/token.h"

namespace ringlimit::replication {
namespace {

template <typename Map>
void MarkInto(Map& map, std::string_view key, bool erased) {
  auto it = map.find(key);
  if (it == map.end()) {
    map.emplace(std::string(key), erased);
  } else if (erased) {
    it->second = true;
  }
}

// Memoised reachability: a pass asks about the same few members once per key (a handful of members: a
// vector searched in order beats a tree).
class ReachableCache {
 public:
  explicit ReachableCache(const ClusterView& view) : view_(view) {}
  bool operator()(const std::string& id) {
    for (const auto& [member, r] : cache_) {
      if (member == id) return r;
    }
    const bool r = id != view_.self && view_.reachable && view_.reachable(id);
    cache_.emplace_back(id, r);
    return r;
  }

 private:
  const ClusterView& view_;
  std::vector<std::pair<std::string, bool>> cache_;
};

// member -> the jobs of a pass it is sent, in the order members first come up (a handful per pass).
class PerTarget {
 public:
  std::vector<uint32_t>& operator[](std::string_view id) {
    for (auto& [member, jobs] : targets_) {
      if (member == id) return jobs;
    }
    return targets_.emplace_back(std::string(id), std::vector<uint32_t>()).second;
  }
  auto begin() { return targets_.begin(); }
  auto end() { return targets_.end(); }

 private:
  std::vector<std::pair<std::string, std::vector<uint32_t>>> targets_;
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
    w.needed.assign(wait.keys.size(), 0);
    w.remaining = 0;
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

ReplicationActions ReplicationPlanner::BatchReply(MonoTime now, const ClusterView& view, uint64_t id, bool ok,
                                                  std::span<const std::string> stale) {
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
    const int64_t lag_ns = std::max<int64_t>(0, stats_.lag.count());
    ++stats_.lag_buckets[static_cast<size_t>(
        std::lower_bound(kLagBoundsNs.begin(), kLagBoundsNs.end(), lag_ns) - kLagBoundsNs.begin())];
    stats_.lag_sum += std::chrono::nanoseconds(lag_ns);
    ++stats_.lag_count;
    for (const Waiting& w : batch.waiting) {
      const std::string& key = batch.keys[w.key].key;
      if (std::find(stale.begin(), stale.end(), key) != stale.end()) {
        if (FailSlot(w.slot, out)) ++stats_.unacked_newer;
      } else if (options_.ack_majority) {
        MajorityReply(w.slot, w.rings, true, out);
      } else {
        AckSlot(w.slot, out);
      }
    }
  } else {
    ++stats_.send_failures;
    if (options_.ack_majority) {
      // This holder cannot count any more: unacked once a majority is out of reach.
      for (const Waiting& w : batch.waiting) MajorityReply(w.slot, w.rings, false, out);
    }
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
    out.waiters_unacked.push_back(id);
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
    std::string key;
    bool erased = false;
    bool retry_only = false;  // came from retries alone: not yet sent to every reachable holder
    std::vector<Slot> slots;
    std::vector<std::string> successors;  // sync: the replicas whose acknowledgements answer the slots
    // ack_majority: the holders asked, each with the rings it holds the key on (a bit per ring)
    std::vector<std::pair<std::string, uint32_t>> validators;
  };
  // Jobs never move once added (reserved for every key this pass can see), so views of their keys stay valid.
  size_t most = dirty_.size() + sync_keys_.size();
  for (const auto& [id, t] : targets_) most += t.retry.size();
  std::vector<Job> jobs;
  jobs.reserve(most);
  // key -> its job: built on the first lookup (the dirty keys, unique, need none; a pass of async changes
  // alone never looks one up).
  boost::unordered_flat_map<std::string_view, uint32_t> index;
  bool indexed = false;
  auto job_of = [&](std::string_view key, bool& added) -> Job& {
    if (!indexed) {
      index.reserve(most);
      for (uint32_t j = 0; j < jobs.size(); ++j) index.emplace(jobs[j].key, j);
      indexed = true;
    }
    added = false;
    if (auto it = index.find(key); it != index.end()) return jobs[it->second];
    added = true;
    jobs.push_back(Job{std::string(key), false, false, {}, {}, {}});
    index.emplace(jobs.back().key, static_cast<uint32_t>(jobs.size() - 1));
    return jobs.back();
  };
  const MonoTime oldest = dirty_since_.value_or(now);
  bool added = false;
  for (auto& [key, erased] : dirty_) jobs.push_back(Job{key, erased, false, {}, {}, {}});
  dirty_.clear();
  dirty_since_.reset();
  pass_at_.reset();
  for (auto& [key, slot] : sync_keys_) job_of(key, added).slots.push_back(slot);
  sync_keys_.clear();

  ReachableCache reachable(view);
  ring::RingView::MemberList pref;
  auto preference = [&](std::string_view key) {
    pref.clear();
    if (view.ring != nullptr) pref = view.ring->PreferenceList(ring::RingToken(key), options_.replicas);
  };
  PerTarget per_target;
  std::set<uint64_t> awaited;  // waiters whose keys this pass registered
  for (uint32_t j = 0; j < jobs.size(); ++j) {
    Job& job = jobs[j];
    preference(job.key);
    for (const ring::RingMember* m : pref) {
      if (reachable(m->id)) per_target[m->id].push_back(j);
    }
    if (!job.slots.empty() && options_.ack_majority) {
      const std::vector<Quorum> quorums = MajorityTargets(
          view, job.key, [&](const std::string& id) { return reachable(id); }, job.validators);
      for (const auto& validator : job.validators) {
        const std::string& id = validator.first;  // (not a structured binding: clang 14 cannot capture one)
        if (std::none_of(pref.begin(), pref.end(), [&](const ring::RingMember* m) { return m->id == id; })) {
          per_target[id].push_back(j);  // a holder on a ring the key is read from only
        }
      }
      for (const Slot& s : job.slots) {
        if (!AwaitMajority(s, quorums)) {
          if (FailSlot(s, out)) ++stats_.unacked_unreachable;  // a majority of some ring is out of reach
          continue;
        }
        awaited.insert(s.waiter);
      }
    } else if (!job.slots.empty()) {
      // The successor: the first reachable member after this node in the preference list, i.e. the node
      // that takes the key over if this one dies (an acknowledgement from another replica would leave the
      // successor with an older count).
      const auto me = std::find_if(pref.begin(), pref.end(),
                                   [&](const ring::RingMember* m) { return m->id == view.self; });
      const size_t start = me == pref.end() ? 0 : static_cast<size_t>(me - pref.begin()) + 1;
      for (size_t k = 0; k < pref.size() && job.successors.empty(); ++k) {
        const ring::RingMember* m = pref[(start + k) % pref.size()];
        if (reachable(m->id)) job.successors.push_back(m->id);
      }
      for (const Slot& s : job.slots) {
        Await(s, job.successors.size());
        awaited.insert(s.waiter);
      }
    }
  }
  // A caller none of whose keys has a replica to wait for is answered now.
  for (uint64_t waiter : awaited) FinishIfAnswered(waiter, out);

  // Due retries, for their member only, while it is reachable and still a replica of the key. A key this
  // pass already ships went to every reachable holder, this member included.
  for (auto& [id, t] : targets_) {
    if (t.retry.empty() || (!force && now < t.retry_at)) continue;
    auto keys = std::move(t.retry);
    t.retry.clear();
    if (!reachable(id)) continue;
    for (auto& [key, erased] : keys) {
      preference(key);
      // (A named copy: clang 14 cannot capture a structured binding.)
      const std::string_view member = id;
      if (std::none_of(pref.begin(), pref.end(),
                       [&](const ring::RingMember* m) { return m->id == member; })) {
        continue;
      }
      Job& job = job_of(key, added);
      job.erased |= erased;  // an erasure still owed to this member goes to every target of the key
      if (added) job.retry_only = true;
      if (!job.retry_only) continue;
      per_target[id].push_back(static_cast<uint32_t>(&job - jobs.data()));
    }
  }

  for (auto& [id, js] : per_target) {
    Target& t = targets_[id];
    for (size_t start = 0; start < js.size(); start += options_.max_batch) {
      const size_t end = std::min(js.size(), start + options_.max_batch);
      Batch batch;
      batch.target = id;
      batch.oldest = oldest;
      batch.keys.reserve(end - start);
      for (size_t k = start; k < end; ++k) {
        const Job& job = jobs[js[k]];
        batch.keys.push_back(DirtyKey{job.key, job.erased});
        const auto key_index = static_cast<uint32_t>(batch.keys.size() - 1);
        if (std::find(job.successors.begin(), job.successors.end(), id) != job.successors.end()) {
          for (const Slot& slot : job.slots) batch.waiting.push_back(Waiting{slot, key_index, 0});
        }
        for (const auto& [holder, mask] : job.validators) {
          if (holder != id) continue;
          for (const Slot& slot : job.slots) batch.waiting.push_back(Waiting{slot, key_index, mask});
        }
      }
      // Batches that carry Decided keys are never held back: their callers wait.
      if (!force && batch.waiting.empty() && t.in_flight >= kMaxInFlightPerTarget) {
        for (const DirtyKey& k : batch.keys) MarkInto(t.retry, k.key, k.erased);
        continue;
      }
      ++t.in_flight;
      const uint64_t id_ = ++last_batch_;
      stats_.updates_sent += batch.keys.size();
      ++stats_.batches_sent;
      out.ship.push_back(ShipBatch{id_, id, batch.keys, !batch.waiting.empty()});
      in_flight_.emplace(id_, std::move(batch));
    }
  }
}

void ReplicationPlanner::Await(const Slot& slot, size_t acks) {
  auto it = waiters_.find(slot.waiter);
  if (it == waiters_.end() || slot.index >= it->second.needed.size()) return;
  Waiter& w = it->second;
  if (acks > 0) {
    if (w.needed[slot.index] == 0) ++w.remaining;
    w.needed[slot.index] = static_cast<uint32_t>(acks);
  }
}

void ReplicationPlanner::AckSlot(const Slot& slot, ReplicationActions& out) {
  auto it = waiters_.find(slot.waiter);
  if (it == waiters_.end()) return;
  Waiter& w = it->second;
  if (slot.index < w.needed.size() && w.needed[slot.index] > 0) {
    if (--w.needed[slot.index] == 0) --w.remaining;
  }
  FinishIfAnswered(slot.waiter, out);
}

bool ReplicationPlanner::AwaitMajority(const Slot& slot, const std::vector<Quorum>& quorums) {
  auto it = waiters_.find(slot.waiter);
  if (it == waiters_.end() || slot.index >= it->second.needed.size()) return true;
  Waiter& w = it->second;
  if (w.quorums.size() < w.needed.size()) w.quorums.resize(w.needed.size());
  w.quorums[slot.index] = quorums;
  bool pending = false;
  for (const Quorum& q : quorums) {
    if (q.need > q.possible) return false;
    pending |= q.need > 0;
  }
  if (pending && w.needed[slot.index] == 0) {
    w.needed[slot.index] = 1;
    ++w.remaining;
  }
  return true;
}

void ReplicationPlanner::MajorityReply(const Slot& slot, uint32_t mask, bool ok, ReplicationActions& out) {
  auto it = waiters_.find(slot.waiter);
  if (it == waiters_.end() || slot.index >= it->second.quorums.size()) return;
  Waiter& w = it->second;
  std::vector<Quorum>& quorums = w.quorums[slot.index];
  bool pending = false;
  bool lost = false;
  for (size_t r = 0; r < quorums.size(); ++r) {
    Quorum& q = quorums[r];
    if ((mask >> r & 1U) != 0 && q.possible > 0) {
      --q.possible;
      if (ok && q.need > 0) --q.need;
    }
    pending |= q.need > 0;
    lost |= q.need > q.possible;
  }
  if (lost) {
    if (FailSlot(slot, out)) ++stats_.unacked_lost;
    return;
  }
  if (!pending && w.needed[slot.index] > 0) {
    w.needed[slot.index] = 0;
    --w.remaining;
  }
  FinishIfAnswered(slot.waiter, out);
}

std::vector<ReplicationPlanner::Quorum> ReplicationPlanner::MajorityTargets(
    const ClusterView& view, std::string_view key, const std::function<bool(const std::string&)>& reachable,
    std::vector<std::pair<std::string, uint32_t>>& validators) const {
  std::vector<ReadRing> rings;
  if (view.ring != nullptr) rings.push_back(ReadRing{view.ring, false});
  const ring::Token token = ring::RingToken(key);
  if (view.reading) view.reading(token, rings);
  std::vector<Quorum> quorums;
  std::vector<uint64_t> seen;  // fingerprints: a ring named twice counts once
  for (const auto& [ring, held] : rings) {
    if (ring == nullptr || quorums.size() >= kMaxRings) continue;
    if (std::find(seen.begin(), seen.end(), ring->fingerprint()) != seen.end()) continue;
    seen.push_back(ring->fingerprint());
    const uint32_t bit = 1U << quorums.size();
    const ring::RingView::MemberList holders = ring->PreferenceList(token, options_.replicas);
    Quorum q;
    const size_t majority = holders.size() / 2 + 1;
    const bool self_holds = std::any_of(holders.begin(), holders.end(),
                                        [&](const ring::RingMember* m) { return m->id == view.self; });
    q.need = static_cast<uint32_t>(majority - (self_holds ? 1 : 0));
    for (const ring::RingMember* m : holders) {
      if (m->id != view.self && reachable(m->id)) ++q.possible;
    }
    if (held && q.need > q.possible) continue;  // read already, and no majority of it is reachable
    for (const ring::RingMember* m : holders) {
      if (m->id == view.self || !reachable(m->id)) continue;
      auto v =
          std::find_if(validators.begin(), validators.end(), [&](const auto& e) { return e.first == m->id; });
      if (v == validators.end()) {
        validators.emplace_back(m->id, bit);
      } else {
        v->second |= bit;
      }
    }
    quorums.push_back(q);
  }
  return quorums;
}

bool ReplicationPlanner::FailSlot(const Slot& slot, ReplicationActions& out) {
  auto it = waiters_.find(slot.waiter);
  if (it == waiters_.end()) return false;
  out.waiters_unacked.push_back(slot.waiter);
  waiters_.erase(it);
  return true;
}

void ReplicationPlanner::FinishIfAnswered(uint64_t waiter, ReplicationActions& out) {
  auto it = waiters_.find(waiter);
  if (it == waiters_.end() || it->second.remaining > 0) return;
  out.waiters_done.push_back(waiter);
  waiters_.erase(it);
}

void ReplicationPlanner::ExpireWaiters(MonoTime now, ReplicationActions& out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    const Waiter& w = it->second;
    if (w.deadline <= now) {
      ++stats_.sync_timeouts;
      out.waiters_unacked.push_back(it->first);
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
