#include "replication/replicator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/unordered/unordered_flat_map.hpp>
#include <boost/unordered/unordered_flat_set.hpp>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "limiter/limiter.h"
#include "ring/token.h"
#include "state.pb.h"
#include "storage/state_codec.h"

namespace ringlimit::replication {
namespace {

using Clock = std::chrono::steady_clock;

// Dirty-key shards: OnChanged takes one small mutex, chosen by the key's hash.
constexpr size_t kDirtyShards = 32;
// Live-replication batches in flight to one member; beyond it keys wait for the next pass.
constexpr size_t kMaxInFlightPerTarget = 32;
// SendUpdates batches in flight (per call).
constexpr size_t kMaxPushInFlight = 4;
// Retry backoff of a member whose sends fail while it is still reachable.
constexpr std::chrono::milliseconds kMaxBackoff{500};

// Transparent hashing so lookups by string_view do not build a std::string.
struct KeyHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
struct KeyEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

// entity key -> whether one of its states was erased since it was last shipped.
using DirtyMap = boost::unordered_flat_map<std::string, bool, KeyHash, KeyEq>;

void MarkDirty(DirtyMap& map, std::string_view key, bool erased) {
  auto it = map.find(key);
  if (it == map.end()) {
    map.emplace(std::string(key), erased);
  } else if (erased) {
    it->second = true;
  }
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Appends one serialized StateUpdate to a serialized StateUpdateBatch: a repeated message field is its
// elements one after the other, each as tag + length + bytes, exactly what protobuf writes itself. So each
// key's update is serialized once, not once per target member.
void AppendUpdate(std::string& batch, std::string_view update) {
  constexpr uint32_t kLengthDelimited = 2;
  static_assert(peer::StateUpdateBatch::kUpdatesFieldNumber < 16);  // a one-byte tag
  batch.push_back(static_cast<char>((peer::StateUpdateBatch::kUpdatesFieldNumber << 3) | kLengthDelimited));
  for (uint64_t n = update.size(); true; n >>= 7) {
    if (n < 0x80) {
      batch.push_back(static_cast<char>(n));
      break;
    }
    batch.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  batch.append(update);
}

}  // namespace

std::optional<ReplicationMode> ParseReplicationMode(std::string_view text) {
  if (text == "async") return ReplicationMode::kAsync;
  if (text == "sync") return ReplicationMode::kSync;
  return std::nullopt;
}

std::string_view ToString(ReplicationMode mode) { return mode == ReplicationMode::kSync ? "sync" : "async"; }

std::optional<std::string> ValidateReplicatorOptions(const ReplicatorOptions& options) {
  if (options.replicas < 1) return "replicas must be at least 1";
  if (options.sync_timeout.count() < 0) return "sync_timeout must not be negative";
  if (options.send_timeout.count() < 1) return "send_timeout must be at least 1 ms";
  if (options.interval.count() < 1) return "interval must be at least 1 ms";
  if (options.max_batch < 1) return "max_batch must be at least 1";
  return std::nullopt;
}

// The wire form of a state is its RocksDB value (storage/state_codec.h): one encoding, one validation.
void ToNamedState(const storage::StoredState& s, peer::NamedState* out) {
  out->set_name(s.name);
  // IdleAt requires a valid spec (every stored one is; a receiver ignores an invalid one anyway).
  const limiter::TimeNs expiry = limiter::Validate(s.spec).has_value() ? 0 : limiter::IdleAt(s.spec, s.state);
  const std::string value = storage::EncodeStateValue(s, expiry);
  out->mutable_state()->ParseFromString(value);
}

std::optional<storage::StoredState> FromNamedState(const peer::NamedState& named) {
  return storage::DecodeStateValue(named.name(), named.state().SerializeAsString());
}

peer::StateUpdate MakeStateUpdate(storage::Store& store, std::string_view entity) {
  peer::StateUpdate update;
  update.set_key(std::string(entity));
  update.set_token(ring::RingToken(entity));
  for (const storage::StoredState& s : store.Get(entity)) ToNamedState(s, update.add_states());
  return update;
}

// ---------------------------------------------------------------------------------------------- Core

struct Replicator::Core : std::enable_shared_from_this<Core> {
  // A Decided call waiting for one acknowledgement per key (sync mode).
  struct Waiter {
    std::function<void()> done;
    Clock::time_point deadline;
    std::unique_ptr<std::atomic<bool>[]> acked;  // per key slot
    std::atomic<size_t> remaining{0};
    std::atomic<bool> finished{false};
  };
  struct WaiterSlot {
    std::shared_ptr<Waiter> waiter;
    uint32_t slot = 0;
  };

  // The batches of one pass: Flush waits for them and checks that none failed.
  struct PassTracker {
    std::atomic<uint64_t> failures{0};
  };

  // One live-replication batch in flight.
  struct Batch {
    uint64_t id = 0;
    std::string target;
    std::vector<std::pair<std::string, bool>> keys;  // key, erased
    std::vector<WaiterSlot> waiters;
    Clock::time_point oldest;  // oldest change it carries (approximately: of its pass)
    std::shared_ptr<PassTracker> tracker;
  };

  // Per destination member (guarded by targets_mu).
  struct Target {
    size_t in_flight = 0;
    DirtyMap retry;  // keys whose send failed (or that waited for the in-flight cap), for this member only
    Clock::time_point retry_at{};
    std::chrono::milliseconds backoff{0};
  };

  struct alignas(64) DirtyShard {
    std::mutex mu;  // guards the fields below
    DirtyMap keys;
    Clock::time_point since{};  // when `keys` last became non-empty
  };

  // A SendUpdates call.
  struct Push {
    std::mutex mu;  // guards the fields below
    std::string target;
    std::vector<peer::StateUpdate> updates;
    size_t next = 0;
    size_t in_flight = 0;
    bool failed = false;
    bool finished = false;
    std::function<void(bool)> done;
  };

  Core(storage::Store& s, ClusterLink& l, const ReplicatorOptions& o) : store(s), link(l), options(o) {
    accepting.store(options.replicas > 1);
  }

  // ------------------------------------------------------------------------------ request path

  void Mark(std::string_view entity, bool erased) {
    if (!accepting.load(std::memory_order_relaxed)) return;
    DirtyShard& shard = shards[KeyHash{}(entity) % kDirtyShards];
    std::lock_guard lock(shard.mu);
    if (shard.keys.empty()) shard.since = Clock::now();
    MarkDirty(shard.keys, entity, erased);
  }

  void Decided(std::span<const std::string_view> keys, std::function<void()> done) {
    if (options.mode != ReplicationMode::kSync || !accepting.load() || !running.load() || keys.empty()) {
      done();
      return;
    }
    auto waiter = std::make_shared<Waiter>();
    waiter->done = std::move(done);
    waiter->deadline = Clock::now() + options.sync_timeout;
    waiter->acked = std::make_unique<std::atomic<bool>[]>(keys.size());
    waiter->remaining.store(keys.size());
    sync_waits.fetch_add(1, std::memory_order_relaxed);
    {
      std::lock_guard lock(sync_mu);
      for (size_t i = 0; i < keys.size(); ++i) {
        sync_queue.emplace_back(std::string(keys[i]), WaiterSlot{waiter, static_cast<uint32_t>(i)});
      }
      waiters.push_back(waiter);
    }
    Wake();
  }

  void Wake() {
    {
      std::lock_guard lock(wake_mu);
      wake_requested = true;
    }
    wake_cv.notify_one();
  }

  void AckSlot(const WaiterSlot& ws) {
    Waiter& w = *ws.waiter;
    if (!w.acked[ws.slot].exchange(true) && w.remaining.fetch_sub(1) == 1) FinishWaiter(w, false);
  }

  void FinishWaiter(Waiter& w, bool timed_out) {
    if (w.finished.exchange(true)) return;
    if (timed_out) sync_timeouts.fetch_add(1, std::memory_order_relaxed);
    std::function<void()> done = std::move(w.done);
    done();
  }

  // Finishes the waiters whose deadline passed (all of them when `all`); returns the next deadline.
  std::optional<Clock::time_point> ExpireWaiters(Clock::time_point now, bool all) {
    std::vector<std::shared_ptr<Waiter>> expired;
    std::optional<Clock::time_point> next;
    {
      std::lock_guard lock(sync_mu);
      while (!waiters.empty()) {
        const auto& front = waiters.front();
        if (!front->finished.load() && !all && front->deadline > now) {
          next = front->deadline;
          break;
        }
        if (!front->finished.load()) expired.push_back(front);
        waiters.pop_front();
      }
    }
    for (auto& w : expired) FinishWaiter(*w, true);
    return next;
  }

  // ------------------------------------------------------------------------------ the pass

  struct Job {
    std::string key;
    bool erased = false;
    std::vector<WaiterSlot> waiters;
    std::string bytes;  // the serialized StateUpdate
    bool sendable = false;
    // Sync mode: the replica whose acknowledgement answers the waiters -- the first reachable member
    // after this node in the key's preference list, i.e. the node that takes the key over if this one
    // dies (an acknowledgement from another replica would leave the successor with an older count).
    std::string successor;
  };

  struct PassResult {
    uint64_t last_batch_id = 0;  // every batch sent so far has an id <= this
    std::shared_ptr<PassTracker> tracker;
  };

  // One pass: takes the dirty keys, the sync keys and the due retries, reads their states and sends
  // them. `force`: retries ignore their backoff and the in-flight cap (Flush, Stop).
  // REQUIRES: pass_mu held (one pass at a time).
  PassResult RunPass(bool force) {
    auto tracker = std::make_shared<PassTracker>();
    const Clock::time_point now = Clock::now();
    Clock::time_point oldest = now;

    boost::unordered_flat_map<std::string_view, size_t, KeyHash, KeyEq> index;
    std::deque<Job> jobs;  // stable addresses: `index` views the keys
    auto job_for = [&](std::string key, bool erased) -> size_t {
      auto it = index.find(key);
      if (it != index.end()) {
        jobs[it->second].erased |= erased;
        return it->second;
      }
      jobs.push_back(Job{std::move(key), erased, {}, {}, false, {}});
      index.emplace(jobs.back().key, jobs.size() - 1);
      return jobs.size() - 1;
    };

    // Dirty keys, shard by shard (each shard's map is swapped with an empty spare that keeps capacity).
    for (size_t i = 0; i < kDirtyShards; ++i) {
      DirtyShard& shard = shards[i];
      DirtyMap& spare = spares[i];
      {
        std::lock_guard lock(shard.mu);
        if (shard.keys.empty()) continue;
        oldest = std::min(oldest, shard.since);
        spare.swap(shard.keys);
      }
      for (const auto& [key, erased] : spare) job_for(key, erased);
      spare.clear();
    }
    // Keys of Decided calls.
    std::vector<std::pair<std::string, WaiterSlot>> sync_keys;
    {
      std::lock_guard lock(sync_mu);
      sync_keys.swap(sync_queue);
    }
    for (auto& [key, ws] : sync_keys) jobs[job_for(std::move(key), false)].waiters.push_back(std::move(ws));

    const std::shared_ptr<const ring::RingView> view = link.ring();
    const std::string& self = link.self_id();
    boost::unordered_flat_map<std::string, bool> reachable_cache;
    auto reachable = [&](const std::string& id) {
      auto it = reachable_cache.find(id);
      if (it != reachable_cache.end()) return it->second;
      bool r = link.Reachable(id);
      reachable_cache.emplace(id, r);
      return r;
    };
    std::map<std::string, std::vector<size_t>> per_target;
    std::vector<const ring::RingMember*> pref;
    auto replicas_of = [&](std::string_view key) {
      pref.clear();
      if (view != nullptr) pref = view->PreferenceList(ring::RingToken(key), options.replicas);
    };
    for (size_t j = 0; j < jobs.size(); ++j) {
      replicas_of(jobs[j].key);
      for (const ring::RingMember* m : pref) {
        if (m->id != self && reachable(m->id)) per_target[m->id].push_back(j);
      }
      if (!jobs[j].waiters.empty()) {
        const auto me =
            std::find_if(pref.begin(), pref.end(), [&](const ring::RingMember* m) { return m->id == self; });
        const size_t start = me == pref.end() ? 0 : static_cast<size_t>(me - pref.begin()) + 1;
        for (size_t k = 0; k < pref.size() && jobs[j].successor.empty(); ++k) {
          const ring::RingMember* m = pref[(start + k) % pref.size()];
          if (m->id != self && reachable(m->id)) jobs[j].successor = m->id;
        }
      }
    }

    // Due retries: for their member only, while it is reachable and still a replica of the key.
    std::vector<std::pair<std::string, DirtyMap>> due;
    {
      std::lock_guard lock(targets_mu);
      for (auto& [id, t] : targets) {
        if (t.retry.empty() || (!force && now < t.retry_at)) continue;
        due.emplace_back(id, DirtyMap{});
        due.back().second.swap(t.retry);
      }
    }
    for (auto& [id, keys] : due) {
      if (!reachable(id)) continue;  // gone: re-replication restores the copies after the ring changes
      std::vector<size_t>& list = per_target[id];
      const boost::unordered_flat_set<size_t> live(list.begin(), list.end());
      for (const auto& [key, erased] : keys) {
        replicas_of(key);
        if (std::none_of(pref.begin(), pref.end(), [&](const ring::RingMember* m) { return m->id == id; })) {
          continue;
        }
        const size_t j = job_for(key, erased);
        if (!live.contains(j)) list.push_back(j);  // else already going to this member as a live change
      }
    }

    // Read the states of the keys that go somewhere; acknowledge the waiters of the others.
    std::vector<bool> targeted(jobs.size(), false);
    for (const auto& [id, list] : per_target) {
      for (size_t j : list) targeted[j] = true;
    }
    for (size_t j = 0; j < jobs.size(); ++j) {
      Job& job = jobs[j];
      if (targeted[j]) {
        peer::StateUpdate update = MakeStateUpdate(store, job.key);
        update.set_erased(job.erased);
        job.sendable = job.erased || update.states_size() > 0;
        if (job.sendable) job.bytes = update.SerializeAsString();  // once, whatever the number of targets
      }
      if (!job.sendable) {
        for (const WaiterSlot& ws : job.waiters) AckSlot(ws);
      }
    }

    // One batch per max_batch keys per member.
    const uint64_t fingerprint = view != nullptr ? view->fingerprint() : 0;
    for (auto& [id, list] : per_target) {
      std::vector<size_t> sendable;
      for (size_t j : list) {
        if (jobs[j].sendable) sendable.push_back(j);
      }
      for (size_t start = 0; start < sendable.size(); start += options.max_batch) {
        const size_t end = std::min(sendable.size(), start + options.max_batch);
        auto batch = std::make_shared<Batch>();
        batch->target = id;
        batch->oldest = oldest;
        batch->tracker = tracker;
        peer::StateUpdateBatch header;
        header.set_from(self);
        header.set_ring_fingerprint(fingerprint);
        std::string payload = header.SerializeAsString();
        for (size_t k = start; k < end; ++k) {
          Job& job = jobs[sendable[k]];
          batch->keys.emplace_back(job.key, job.erased);
          if (job.successor == id)
            batch->waiters.insert(batch->waiters.end(), job.waiters.begin(), job.waiters.end());
          AppendUpdate(payload, job.bytes);
        }
        bool capped = false;
        {
          std::lock_guard lock(targets_mu);
          Target& t = targets[id];
          // Batches that carry Decided keys are never held back: their callers wait.
          if (!force && batch->waiters.empty() && t.in_flight >= kMaxInFlightPerTarget) {
            capped = true;
            for (const auto& [key, erased] : batch->keys) MarkDirty(t.retry, key, erased);
          } else {
            ++t.in_flight;
          }
        }
        if (capped) continue;
        {
          std::lock_guard lock(ack_mu);
          batch->id = ++last_batch_id;
          in_flight_ids.insert(batch->id);
        }
        updates_sent.fetch_add(batch->keys.size(), std::memory_order_relaxed);
        batches_sent.fetch_add(1, std::memory_order_relaxed);
        link.Send(id, peer::METHOD_STATE_UPDATE, std::move(payload), options.send_timeout,
                  [core = shared_from_this(), batch](std::optional<std::string> payload) {
                    core->OnBatchReply(*batch, payload);
                  });
      }
    }
    std::lock_guard lock(ack_mu);
    return PassResult{last_batch_id, tracker};
  }

  void OnBatchReply(const Batch& batch, const std::optional<std::string>& payload) {
    peer::StateUpdateAck ack;
    const bool ok = payload.has_value() && ack.ParseFromString(*payload);
    // A failed send is retried only while the member can still be reached (never after Stop: the link
    // may be going away).
    const bool retry = !ok && !stopped.load() && link.Reachable(batch.target);
    const Clock::time_point now = Clock::now();
    {
      std::lock_guard lock(targets_mu);
      Target& t = targets[batch.target];
      --t.in_flight;
      if (ok) {
        t.backoff = std::chrono::milliseconds{0};
      } else if (retry) {
        for (const auto& [key, erased] : batch.keys) MarkDirty(t.retry, key, erased);
        t.backoff = std::min(kMaxBackoff, std::max(options.interval, t.backoff * 2));
        t.retry_at = now + t.backoff;
      }
    }
    if (ok) {
      updates_acked.fetch_add(batch.keys.size(), std::memory_order_relaxed);
      const auto lag = std::chrono::duration_cast<std::chrono::nanoseconds>(now - batch.oldest).count();
      lag_ns.store(lag, std::memory_order_relaxed);
      int64_t max = max_lag_ns.load(std::memory_order_relaxed);
      while (lag > max && !max_lag_ns.compare_exchange_weak(max, lag, std::memory_order_relaxed)) {
      }
      for (const WaiterSlot& ws : batch.waiters) AckSlot(ws);
    } else {
      send_failures.fetch_add(1, std::memory_order_relaxed);
      batch.tracker->failures.fetch_add(1);
      SPDLOG_DEBUG("replication: batch of {} keys to {} failed{}", batch.keys.size(), batch.target,
                   retry ? " (will retry)" : "");
    }
    {
      std::lock_guard lock(ack_mu);
      in_flight_ids.erase(batch.id);
    }
    ack_cv.notify_all();
  }

  bool RetryPending() {
    std::lock_guard lock(targets_mu);
    return std::any_of(targets.begin(), targets.end(), [](const auto& t) { return !t.second.retry.empty(); });
  }

  bool Flush(std::chrono::milliseconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (true) {
      PassResult pass;
      {
        std::lock_guard lock(pass_mu);
        pass = RunPass(/*force=*/true);
      }
      {
        std::unique_lock lock(ack_mu);
        const bool drained = ack_cv.wait_until(lock, deadline, [&] {
          return in_flight_ids.empty() || *in_flight_ids.begin() > pass.last_batch_id;
        });
        if (!drained) return false;
      }
      const bool retrying = RetryPending();
      if (pass.tracker->failures.load() == 0 && !retrying) return true;
      if (!retrying) return false;  // what failed went to members that are gone
      const Clock::time_point now = Clock::now();
      if (now >= deadline) return false;
      std::this_thread::sleep_for(std::min<Clock::duration>(options.interval, deadline - now));
    }
  }

  void FlusherLoop() {
    std::unique_lock lock(wake_mu);
    while (!stop_flusher) {
      Clock::time_point until = Clock::now() + options.interval;
      lock.unlock();
      std::optional<Clock::time_point> next_deadline = ExpireWaiters(Clock::now(), false);
      lock.lock();
      if (next_deadline.has_value()) until = std::min(until, *next_deadline);
      wake_cv.wait_until(lock, until, [&] { return stop_flusher || wake_requested; });
      if (stop_flusher) break;
      wake_requested = false;
      lock.unlock();
      {
        std::lock_guard pass_lock(pass_mu);
        RunPass(/*force=*/false);
      }
      lock.lock();
    }
  }

  // ------------------------------------------------------------------------------ receiving

  std::optional<std::string> HandleStateUpdate(std::string_view payload) {
    peer::StateUpdateBatch batch;
    if (!batch.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
      bad_batches.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    uint64_t applied = 0;
    uint64_t ignored = 0;
    for (const peer::StateUpdate& update : batch.updates()) {
      if (update.erased()) static_cast<void>(store.Discard(update.key()));
      for (const peer::NamedState& named : update.states()) {
        std::optional<storage::StoredState> s = FromNamedState(named);
        if (s.has_value() && store.ApplyIfNewer(update.key(), *s)) {
          ++applied;
        } else {
          ++ignored;
        }
      }
    }
    received_updates.fetch_add(static_cast<uint64_t>(batch.updates_size()), std::memory_order_relaxed);
    applied_states.fetch_add(applied, std::memory_order_relaxed);
    ignored_states.fetch_add(ignored, std::memory_order_relaxed);
    peer::StateUpdateAck ack;
    ack.set_applied(applied);
    ack.set_ignored(ignored);
    return ack.SerializeAsString();
  }

  // ------------------------------------------------------------------------------ pushes

  void PushMore(const std::shared_ptr<Push>& push) {
    while (true) {
      peer::StateUpdateBatch msg;
      bool finish = false;
      bool ok = false;
      std::vector<peer::StateUpdate> sent;  // freed outside the lock
      {
        std::lock_guard lock(push->mu);
        if (push->failed || push->next >= push->updates.size()) {
          if (push->in_flight == 0 && !push->finished) {
            push->finished = true;
            finish = true;
            ok = !push->failed;
            // Under the lock: a concurrent PushMore (a late reply, the caller's loop) reads updates.size().
            sent.swap(push->updates);
            push->next = 0;
          }
        } else if (push->in_flight < kMaxPushInFlight) {
          const size_t end = std::min(push->updates.size(), push->next + options.max_batch);
          for (; push->next < end; ++push->next) *msg.add_updates() = std::move(push->updates[push->next]);
          ++push->in_flight;
        }
      }
      if (finish) {
        std::function<void(bool)> done = std::move(push->done);
        done(ok);
        return;
      }
      if (msg.updates_size() == 0) return;  // at the in-flight cap: a reply continues
      msg.set_from(link.self_id());
      const std::shared_ptr<const ring::RingView> view = link.ring();
      msg.set_ring_fingerprint(view != nullptr ? view->fingerprint() : 0);
      msg.set_handoff(true);
      link.Send(push->target, peer::METHOD_STATE_UPDATE, msg.SerializeAsString(), options.send_timeout,
                [core = shared_from_this(), push](std::optional<std::string> payload) {
                  peer::StateUpdateAck ack;
                  const bool ok = payload.has_value() && ack.ParseFromString(*payload);
                  {
                    std::lock_guard lock(push->mu);
                    --push->in_flight;
                    if (!ok) push->failed = true;
                  }
                  core->PushMore(push);
                });
    }
  }

  ReplicatorStats Stats() {
    ReplicatorStats s;
    s.updates_sent = updates_sent.load();
    s.updates_acked = updates_acked.load();
    s.batches_sent = batches_sent.load();
    s.send_failures = send_failures.load();
    for (DirtyShard& shard : shards) {
      std::lock_guard lock(shard.mu);
      s.pending_keys += shard.keys.size();
    }
    {
      std::lock_guard lock(targets_mu);
      for (const auto& [id, t] : targets) s.pending_keys += t.retry.size();
    }
    s.sync_waits = sync_waits.load();
    s.sync_timeouts = sync_timeouts.load();
    s.lag_seconds = Seconds(std::chrono::nanoseconds(lag_ns.load()));
    s.max_lag_seconds = Seconds(std::chrono::nanoseconds(max_lag_ns.load()));
    s.received_updates = received_updates.load();
    s.applied_states = applied_states.load();
    s.ignored_states = ignored_states.load();
    s.bad_batches = bad_batches.load();
    return s;
  }

  storage::Store& store;
  ClusterLink& link;
  const ReplicatorOptions options;

  std::atomic<bool> accepting{false};  // OnChanged marks keys (R > 1, not stopping)
  std::atomic<bool> running{false};    // the flusher runs
  std::atomic<bool> stopped{false};    // Stop finished its flush: no more retries
  std::atomic<bool> stop_called{false};

  DirtyShard shards[kDirtyShards];
  DirtyMap spares[kDirtyShards];  // used by the pass only (under pass_mu)

  std::mutex pass_mu;  // one pass at a time (flusher, Flush)

  std::mutex sync_mu;  // guards sync_queue and waiters
  std::vector<std::pair<std::string, WaiterSlot>> sync_queue;
  std::deque<std::shared_ptr<Waiter>> waiters;  // deadline order (sync_timeout is constant)

  std::mutex targets_mu;  // guards targets
  std::map<std::string, Target, std::less<>> targets;

  std::mutex ack_mu;  // guards last_batch_id and in_flight_ids
  std::condition_variable ack_cv;
  uint64_t last_batch_id = 0;
  std::set<uint64_t> in_flight_ids;

  std::mutex wake_mu;  // guards wake_requested and stop_flusher
  std::condition_variable wake_cv;
  bool wake_requested = false;
  bool stop_flusher = false;
  std::thread flusher;

  std::atomic<uint64_t> updates_sent{0};
  std::atomic<uint64_t> updates_acked{0};
  std::atomic<uint64_t> batches_sent{0};
  std::atomic<uint64_t> send_failures{0};
  std::atomic<uint64_t> sync_waits{0};
  std::atomic<uint64_t> sync_timeouts{0};
  std::atomic<int64_t> lag_ns{0};
  std::atomic<int64_t> max_lag_ns{0};
  std::atomic<uint64_t> received_updates{0};
  std::atomic<uint64_t> applied_states{0};
  std::atomic<uint64_t> ignored_states{0};
  std::atomic<uint64_t> bad_batches{0};
};

// ------------------------------------------------------------------------------------------ Replicator

Replicator::Replicator(storage::Store& store, ClusterLink& link, ReplicatorOptions options)
    : options_(std::move(options)), core_(std::make_shared<Core>(store, link, options_)) {}

Replicator::~Replicator() { Stop(); }

void Replicator::Start() {
  std::lock_guard lock(core_->wake_mu);
  if (core_->running.load() || core_->stop_flusher) return;
  core_->running.store(true);
  core_->flusher = std::thread([core = core_.get()] { core->FlusherLoop(); });
}

void Replicator::Stop() {
  Core& core = *core_;
  if (core.stop_called.exchange(true)) return;
  core.accepting.store(false);
  static_cast<void>(core.Flush(options_.send_timeout));
  {
    std::lock_guard lock(core.wake_mu);
    core.stop_flusher = true;
  }
  core.wake_cv.notify_one();
  if (core.flusher.joinable()) core.flusher.join();
  core.running.store(false);
  core.stopped.store(true);
  core.ExpireWaiters(Clock::now(), /*all=*/true);
}

void Replicator::OnChanged(std::string_view entity, const storage::StoredState& /*state*/) {
  core_->Mark(entity, false);
}

void Replicator::OnErased(std::string_view entity, std::string_view /*name*/) { core_->Mark(entity, true); }

void Replicator::Decided(std::span<const std::string_view> keys, std::function<void()> done) {
  core_->Decided(keys, std::move(done));
}

bool Replicator::Flush(std::chrono::milliseconds timeout) { return core_->Flush(timeout); }

void Replicator::SendUpdates(std::string_view id, std::vector<peer::StateUpdate> updates,
                             std::function<void(bool ok)> done) {
  auto push = std::make_shared<Core::Push>();
  push->target = std::string(id);
  push->updates = std::move(updates);
  push->done = std::move(done);
  core_->PushMore(push);
}

std::optional<std::string> Replicator::HandleStateUpdate(std::string_view payload) {
  return core_->HandleStateUpdate(payload);
}

ReplicatorStats Replicator::stats() const { return core_->Stats(); }

}  // namespace ringlimit::replication
