#include "replication/replicator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/unordered/unordered_flat_map.hpp>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <utility>

#include "limiter/limiter.h"
#include "limiter/merge.h"
#include "replication/replication_planner.h"
#include "replication/update_wire.h"
#include "ring/token.h"
#include "state.pb.h"
#include "storage/proto_append.h"
#include "storage/state_codec.h"

namespace ringlimit::replication {
namespace {

// Dirty-key shards: OnChanged takes one small mutex, chosen by the key's hash.
constexpr size_t kDirtyShards = 32;
// SendUpdates batches in flight (per call).
constexpr size_t kMaxPushInFlight = 4;
// The most bytes of updates one StateUpdateBatch message carries: a batch of max_batch keys whose states
// are large (a sliding_log holds 8 bytes per admitted unit) goes out as several messages, each well under
// the peer frame limit (peer::PeerOptions::max_frame_bytes, 16 MiB), which any single state fits.
constexpr size_t kMaxBatchBytes = 4u << 20;
// Apply's buffers of one round of updates (Core::ship_bytes, ship_at): grown beyond these by a burst of
// changes, they are released after it.
constexpr size_t kKeepShipBytes = 1 << 20;
constexpr size_t kKeepShipKeys = 1 << 14;
// Stop: how much longer than send_timeout to wait for the executor before giving up on it.
constexpr std::chrono::seconds kStopSlack{1};

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

double Seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

// Appends one serialized StateUpdate to a serialized StateUpdateBatch: a repeated message field is its
// elements one after the other, each as tag + length + bytes, exactly what protobuf writes itself. So each
// key's update is serialized once, not once per target member.
void AppendUpdate(std::string& batch, std::string_view update) {
  storage::proto_append::Bytes(batch, peer::StateUpdateBatch::kUpdatesFieldNumber, update);
}

}  // namespace

std::optional<ReplicationMode> ParseReplicationMode(std::string_view text) {
  if (text == "async") return ReplicationMode::kAsync;
  if (text == "sync") return ReplicationMode::kSync;
  return std::nullopt;
}

std::string_view ToString(ReplicationMode mode) { return mode == ReplicationMode::kSync ? "sync" : "async"; }

Status Validate(const ReplicatorOptions& options) {
  if (options.replicas < 1) return Status::InvalidArgument("replicas must be at least 1");
  if (options.sync_timeout.count() < 0) return Status::InvalidArgument("sync_timeout must not be negative");
  if (options.send_timeout.count() < 1) return Status::InvalidArgument("send_timeout must be at least 1 ms");
  if (options.interval.count() < 1) return Status::InvalidArgument("interval must be at least 1 ms");
  if (options.max_batch < 1) return Status::InvalidArgument("max_batch must be at least 1");
  return Status::OK();
}

// The wire form of a state is its RocksDB value (storage/state_codec.h): one encoding, one validation.
void ToNamedState(const storage::StoredState& s, peer::NamedState* out) {
  out->set_name(s.name);
  // No expiry on the wire: a receiver computes its own when it writes the row.
  storage::StateToProto(s, 0, out->mutable_state());
}

std::optional<storage::StoredState> FromNamedState(const peer::NamedState& named) {
  return storage::StateFromProto(named.name(), named.state());
}

peer::StateUpdate MakeStateUpdate(storage::Store& store, std::string_view entity) {
  peer::StateUpdate update;
  FillStateUpdate(store, entity, &update);
  return update;
}

void FillStateUpdate(storage::Store& store, std::string_view entity, peer::StateUpdate* out) {
  out->Clear();
  out->set_key(entity.data(), entity.size());
  out->set_token(ring::RingToken(entity));
  for (const storage::StoredState& s : store.Get(entity)) ToNamedState(s, out->add_states());
}

// ---------------------------------------------------------------------------------------------- Core

// Everything below "On the executor" is touched only by work running on the executor.
struct Replicator::Core : std::enable_shared_from_this<Core> {
  struct alignas(64) DirtyShard {
    std::mutex mu;  // guards keys
    DirtyMap keys;
  };

  // A Decided call in sync mode, queued for the executor.
  struct SyncCall {
    std::vector<std::string> keys;
    std::function<void(bool)> done;
    SyncCall* next = nullptr;
    // ack_majority: each key's states when the call came (right after the decision), to see whether
    // another node's admissions were merged in before the key is shipped.
    std::vector<std::vector<storage::StoredState>> decided;
  };

  // A SendUpdates call.
  struct Push {
    std::string target;
    std::vector<peer::StateUpdate> updates;
    size_t next = 0;
    size_t in_flight = 0;
    bool failed = false;
    std::function<void(bool)> done;
  };

  Core(storage::Store& s, ClusterLink& l, Executor& e, const ReplicatorOptions& o)
      : store(s),
        link(l),
        executor(e),
        options(o),
        planner(PlannerOptions{o.replicas, o.interval, o.sync_timeout, o.max_batch, o.ack_majority}),
        timer(e.NewTimer()) {
    accepting.store(options.replicas > 1);
  }

  // ------------------------------------------------------------------------------ any thread

  void Mark(std::string_view entity, bool erased) {
    if (!accepting.load(std::memory_order_relaxed) || !peers.load(std::memory_order_relaxed)) return;
    {
      DirtyShard& shard = shards[KeyHash{}(entity) % kDirtyShards];
      std::lock_guard lock(shard.mu);
      MarkDirty(shard.keys, entity, erased);
    }
    // The first change since the last drain tells the executor (one post per pass, not per change).
    if (!wake_posted.exchange(true, std::memory_order_acq_rel)) {
      executor.Post(
          [core = shared_from_this()] { core->Apply(core->planner.Changed(core->executor.Now())); });
    }
  }

  // Sync mode: queues a caller for the executor. Lock-free; the first caller queued since the executor
  // last took the queue posts one event for all of them (under load, one pass ships many callers' keys).
  void QueueSync(std::span<const std::string_view> keys, std::function<void(bool)> done) {
    auto* call =
        new SyncCall{std::vector<std::string>(keys.begin(), keys.end()), std::move(done), nullptr, {}};
    if (options.ack_majority) {
      call->decided.reserve(keys.size());
      for (std::string_view key : keys) call->decided.push_back(store.Get(key));
    }
    SyncCall* head = sync_calls.load(std::memory_order_relaxed);
    do {
      call->next = head;
    } while (
        !sync_calls.compare_exchange_weak(head, call, std::memory_order_release, std::memory_order_relaxed));
    if (head == nullptr) executor.Post([core = shared_from_this()] { core->OnSyncCalls(); });
  }

  // Deletes a queue taken from sync_calls; returns its calls in arrival order.
  static std::vector<SyncCall> TakeCalls(SyncCall* list) {
    std::vector<SyncCall> calls;
    while (list != nullptr) {
      std::unique_ptr<SyncCall> call(list);
      list = call->next;
      calls.push_back(std::move(*call));
    }
    std::reverse(calls.begin(), calls.end());
    return calls;
  }

  ~Core() { static_cast<void>(TakeCalls(sync_calls.exchange(nullptr))); }  // queued, never run (Abandon)

  // ------------------------------------------------------------------------------ on the executor

  void OnSyncCalls() {
    std::vector<SyncCall> calls = TakeCalls(sync_calls.exchange(nullptr, std::memory_order_acquire));
    Drain();
    std::vector<SyncWait> waits;
    waits.reserve(calls.size());
    std::vector<uint64_t> merged;  // ack_majority: calls whose keys took in another node's admissions
    for (SyncCall& call : calls) {
      const uint64_t id = ++next_id;
      if (MergedSince(call)) merged.push_back(id);
      waiters.emplace(id, std::move(call.done));
      waits.push_back(SyncWait{id, std::move(call.keys)});
    }
    const auto ring = link.ring();
    // Shipped all the same (the decision is this node's to replicate), but answered unacked now: it may
    // have been made without the admissions merged in since, which the holders then hold too.
    for (uint64_t id : merged) {
      auto it = waiters.find(id);
      std::function<void(bool)> done = std::move(it->second);
      waiters.erase(it);
      done(false);
    }
    Apply(planner.Decided(executor.Now(), View(ring), waits));
  }

  // ack_majority: whether a key of `call` holds another node's records newer than when it was decided.
  bool MergedSince(const SyncCall& call) {
    for (size_t k = 0; k < call.decided.size() && k < call.keys.size(); ++k) {
      for (const storage::StoredState& now : store.Get(call.keys[k])) {
        for (const storage::StoredState& then : call.decided[k]) {
          if (now.name == then.name &&
              limiter::HoldsOthersNewer(now.state, then.state, options.contributor)) {
            return true;
          }
        }
      }
    }
    return false;
  }

  // The planner's view of the cluster now. Valid while `ring` lives.
  ClusterView View(const std::shared_ptr<const ring::RingView>& ring) {
    ClusterView view{link.self_id(), ring.get(), [this](std::string_view id) { return link.Reachable(id); },
                     nullptr};
    if (options.ack_majority) {
      // The overrides (and the rings they keep) live as long as the view's function.
      std::shared_ptr<const RouteOverrides> overrides = link.overrides();
      if (overrides != nullptr && !overrides->reading.empty()) {
        view.reading = [overrides](ring::Token token, std::vector<ReadRing>& out) {
          for (const RouteOverrides::Reading& r : overrides->reading) {
            if (r.range.Contains(token)) out.push_back(ReadRing{r.before.get(), r.read});
          }
        };
      }
    }
    return view;
  }

  // Moves the request path's dirty keys into the planner.
  void Drain() {
    wake_posted.store(false, std::memory_order_release);  // a change after this posts again
    std::vector<DirtyKey> keys;
    for (DirtyShard& shard : shards) {
      // Copied out and cleared rather than swapped with an empty map: the shard keeps its capacity, so the
      // request path does not grow the map from nothing again after every pass.
      std::lock_guard lock(shard.mu);
      if (shard.keys.empty()) continue;
      for (auto& [key, erased] : shard.keys) keys.push_back(DirtyKey{key, erased});
      shard.keys.clear();
    }
    planner.Mark(executor.Now(), keys);
  }

  void OnTimer() {
    Drain();
    const auto ring = link.ring();
    Apply(planner.Timer(executor.Now(), View(ring)));
  }

  void OnReply(uint64_t batch, bool ok, const std::vector<std::string>& stale) {
    const auto ring = link.ring();
    Apply(planner.BatchReply(executor.Now(), View(ring), batch, ok, stale));
  }

  // A StateUpdateAck's `newer` copies (want_newer): merged into the store; returns their keys.
  std::vector<std::string> AbsorbNewer(const peer::StateUpdateAck& ack) {
    std::vector<std::string> keys;
    for (const peer::StateUpdate& update : ack.newer()) {
      for (const peer::NamedState& named : update.states()) {
        if (std::optional<storage::StoredState> s = FromNamedState(named)) store.Absorb(update.key(), *s);
      }
      keys.push_back(update.key());
    }
    newer_received.fetch_add(keys.size(), std::memory_order_relaxed);
    return keys;
  }

  // Carries out what the planner decided.
  void Apply(ReplicationActions actions) {
    std::deque<ReplicationActions> queue;
    queue.push_back(std::move(actions));
    while (!queue.empty()) {
      ReplicationActions a = std::move(queue.front());
      queue.pop_front();
      PublishStats();  // before the callbacks below: what they were told is in the stats
      // Each key's update is read and serialized once, whatever the number of batches it is in: into
      // ship_bytes, one buffer for all (its storage kept from pass to pass), found by the key's view (into
      // a.ship, which outlives the loop) -- no allocation per key.
      // (What a burst of changes -- a handoff's, a restart's -- grew them to is not kept.)
      if (ship_bytes.capacity() > kKeepShipBytes) std::string().swap(ship_bytes);
      if (ship_at.bucket_count() > kKeepShipKeys) ship_at = {};
      ship_bytes.clear();
      ship_at.clear();
      const std::shared_ptr<const ring::RingView> ring = link.ring();
      const uint64_t fingerprint = ring != nullptr ? ring->fingerprint() : 0;
      for (ShipBatch& b : a.ship) {
        peer::StateUpdateBatch header;
        header.set_from(link.self_id());
        header.set_ring_fingerprint(fingerprint);
        if (b.awaited && options.ack_majority) {
          header.set_want_newer(true);
          header.set_contributor(options.contributor);
        }
        const std::string empty = header.SerializeAsString();
        // Usually one message; more when the states are large (kMaxBatchBytes).
        std::vector<std::string> payloads{empty};
        for (const DirtyKey& k : b.keys) {
          auto [it, inserted] = ship_at.try_emplace(std::string_view(k.key));
          if (inserted) {
            store.GetInto(k.key, ship_states);
            // A key with no states left that was not erased needs nothing from its replicas.
            const size_t begin = ship_bytes.size();
            if (k.erased || !ship_states.empty()) AppendStateUpdate(k.key, k.erased, ship_states, ship_bytes);
            it->second = {begin, ship_bytes.size() - begin};
          }
          const std::string_view update(ship_bytes.data() + it->second.first, it->second.second);
          if (update.empty()) continue;
          if (payloads.back().size() > empty.size() &&
              payloads.back().size() + update.size() > kMaxBatchBytes) {
            payloads.push_back(empty);
          }
          if (payloads.back().size() == empty.size()) {  // grown once for the batch's keys, as this one
            payloads.back().reserve(
                std::min(kMaxBatchBytes, empty.size() + (update.size() + 4) * b.keys.size()));
          }
          AppendUpdate(payloads.back(), update);
        }
        if (payloads.back().size() == empty.size()) {  // nothing to send: as good as acknowledged
          queue.push_back(planner.BatchReply(executor.Now(), View(ring), b.id, true));
          continue;
        }
        // The batch is answered once every message of it is: acknowledged when all of them are.
        struct Answers {
          size_t left = 0;
          bool ok = true;
          std::vector<std::string> stale;
        };
        auto answers = std::make_shared<Answers>();
        answers->left = payloads.size();
        for (std::string& payload : payloads) {
          auto reply = [weak = weak_from_this(), id = b.id, answers](std::optional<std::string> reply) {
            peer::StateUpdateAck ack;
            const bool ok = reply.has_value() && ack.ParseFromString(*reply);
            auto core = weak.lock();
            if (core == nullptr) return;
            std::vector<std::string> stale;
            if (ok && ack.newer_size() > 0) stale = core->AbsorbNewer(ack);  // before the waiters are told
            core->executor.Post([core, id, ok, answers, stale = std::move(stale)]() mutable {
              answers->ok &= ok;
              answers->stale.insert(answers->stale.end(), std::make_move_iterator(stale.begin()),
                                    std::make_move_iterator(stale.end()));
              if (--answers->left == 0) core->OnReply(id, answers->ok, answers->stale);
            });
          };
          if (b.awaited && options.ack_majority) {
            link.SendRelayed(b.target, std::move(payload), options.sync_timeout * 2 / 5, options.send_timeout,
                             std::move(reply));
          } else {
            link.Send(b.target, peer::METHOD_STATE_UPDATE, std::move(payload), options.send_timeout,
                      std::move(reply));
          }
        }
      }
      auto answer = [this](uint64_t w, bool acked) {
        auto it = waiters.find(w);
        if (it == waiters.end()) return;
        std::function<void(bool)> done = std::move(it->second);
        waiters.erase(it);
        done(acked);
      };
      for (uint64_t w : a.waiters_done) answer(w, true);
      for (uint64_t w : a.waiters_unacked) answer(w, false);
      for (auto [f, ok] : a.flushes_done) {
        auto it = flushes.find(f);
        if (it == flushes.end()) continue;
        std::function<void(bool)> done = std::move(it->second);
        flushes.erase(it);
        done(ok);
      }
      if (a.wake_at.has_value()) {
        timer->Arm(*a.wake_at, [weak = weak_from_this()] {
          if (auto core = weak.lock()) core->OnTimer();
        });
      } else {
        timer->Cancel();
      }
    }
  }

  void PublishStats() {
    PlannerStats p = planner.stats();
    std::lock_guard lock(stats_mu);
    planner_stats = p;
  }

  void PushMore(const std::shared_ptr<Push>& push) {
    while (true) {
      if (push->failed || push->next >= push->updates.size()) {
        if (push->in_flight == 0 && push->done != nullptr) {
          push->updates.clear();
          std::function<void(bool)> done = std::move(push->done);
          push->done = nullptr;
          done(!push->failed);
        }
        return;
      }
      if (push->in_flight >= kMaxPushInFlight) return;  // a reply continues
      peer::StateUpdateBatch msg;
      const size_t end = std::min(push->updates.size(), push->next + options.max_batch);
      size_t carried = 0;  // bytes: large states go in more, smaller messages (kMaxBatchBytes)
      for (; push->next < end; ++push->next) {
        const size_t size = push->updates[push->next].ByteSizeLong();
        if (msg.updates_size() > 0 && carried + size > kMaxBatchBytes) break;
        carried += size;
        *msg.add_updates() = std::move(push->updates[push->next]);
      }
      ++push->in_flight;
      msg.set_from(link.self_id());
      const std::shared_ptr<const ring::RingView> view = link.ring();
      msg.set_ring_fingerprint(view != nullptr ? view->fingerprint() : 0);
      msg.set_handoff(true);
      link.Send(push->target, peer::METHOD_STATE_UPDATE, msg.SerializeAsString(), options.send_timeout,
                [weak = weak_from_this(), push](std::optional<std::string> payload) {
                  peer::StateUpdateAck ack;
                  const bool ok = payload.has_value() && ack.ParseFromString(*payload);
                  auto core = weak.lock();
                  if (core == nullptr) return;
                  core->executor.Post([core, push, ok] {
                    --push->in_flight;
                    if (!ok) push->failed = true;
                    core->PushMore(push);
                  });
                });
    }
  }

  // ------------------------------------------------------------------------------ receiving (any thread)

  std::optional<std::string> HandleStateUpdate(std::string_view payload) {
    peer::StateUpdateAck ack;
    uint64_t applied = 0;
    uint64_t ignored = 0;
    // Read in place (the hot path, update_wire.h); whatever that reader leaves is parsed by Protobuf.
    thread_local BatchView view;
    if (ReadStateUpdateBatch(payload, view)) {
      for (const StateUpdateView& update : view.updates) {
        ApplyUpdate(
            update.key, update.erased, view.want_newer, view.contributor, update.count,
            [&](uint32_t i) { return view.State(update.first + i); }, ack, applied, ignored);
      }
      received_updates.fetch_add(view.updates.size(), std::memory_order_relaxed);
    } else {
      // On an arena that starts on the stack: one batch is a few hundred small messages and strings,
      // allocated and freed together.
      alignas(16) char first_block[8192];
      google::protobuf::ArenaOptions arena_options;
      arena_options.initial_block = first_block;
      arena_options.initial_block_size = sizeof first_block;
      google::protobuf::Arena arena(arena_options);
      peer::StateUpdateBatch& batch = *google::protobuf::Arena::CreateMessage<peer::StateUpdateBatch>(&arena);
      if (!batch.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
        bad_batches.fetch_add(1, std::memory_order_relaxed);
        return std::nullopt;
      }
      for (const peer::StateUpdate& update : batch.updates()) {
        ApplyUpdate(
            update.key(), update.erased(), batch.want_newer(), batch.contributor(),
            static_cast<uint32_t>(update.states_size()),
            [&](uint32_t i) { return FromNamedState(update.states(static_cast<int>(i))); }, ack, applied,
            ignored);
      }
      received_updates.fetch_add(static_cast<uint64_t>(batch.updates_size()), std::memory_order_relaxed);
    }
    applied_states.fetch_add(applied, std::memory_order_relaxed);
    ignored_states.fetch_add(ignored, std::memory_order_relaxed);
    ack.set_applied(applied);
    ack.set_ignored(ignored);
    return ack.SerializeAsString();
  }

  // One update of a batch: `state(i)` decodes its i-th state (of `count`).
  template <typename StateAt>
  void ApplyUpdate(std::string_view key, bool erased, bool want_newer, uint64_t contributor, uint32_t count,
                   const StateAt& state, peer::StateUpdateAck& ack, uint64_t& applied, uint64_t& ignored) {
    if (erased) static_cast<void>(store.Discard(key));
    bool newer_here = false;  // want_newer: this copy held admissions the update lacks
    std::vector<storage::StoredState> held;
    if (want_newer) held = store.Get(key);
    for (uint32_t i = 0; i < count; ++i) {
      // A pointer into the batch's view, or a state Protobuf's route decoded: empty when not valid.
      const auto s = state(i);
      if (s && store.Absorb(key, *s)) {
        ++applied;
      } else {
        ++ignored;
      }
      if (s && !newer_here) {
        // Merged with what was held, the state is the update's own unless the held copy had more.
        for (const storage::StoredState& h : held) {
          if (h.name == s->name && limiter::HoldsOthersNewer(h.state, s->state, contributor))
            newer_here = true;
        }
      }
    }
    if (newer_here) *ack.add_newer() = MakeStateUpdate(store, key);
  }

  ReplicatorStats Stats() {
    ReplicatorStats s;
    PlannerStats p;
    {
      std::lock_guard lock(stats_mu);
      p = planner_stats;
    }
    s.updates_sent = p.updates_sent;
    s.updates_acked = p.updates_acked;
    s.batches_sent = p.batches_sent;
    s.send_failures = p.send_failures;
    s.pending_keys = p.pending_keys;
    for (DirtyShard& shard : shards) {
      std::lock_guard lock(shard.mu);
      s.pending_keys += shard.keys.size();
    }
    s.sync_waits = p.sync_waits;
    s.sync_timeouts = p.sync_timeouts;
    s.unacked_newer = p.unacked_newer;
    s.unacked_unreachable = p.unacked_unreachable;
    s.unacked_lost = p.unacked_lost;
    s.lag_seconds = Seconds(p.lag);
    s.max_lag_seconds = Seconds(p.max_lag);
    s.lag_buckets = p.lag_buckets;
    s.lag_sum_ns = p.lag_sum.count();
    s.lag_count = p.lag_count;
    s.received_updates = received_updates.load();
    s.applied_states = applied_states.load();
    s.ignored_states = ignored_states.load();
    s.bad_batches = bad_batches.load();
    s.newer_received = newer_received.load();
    return s;
  }

  // Constant after construction.
  storage::Store& store;
  ClusterLink& link;
  Executor& executor;
  const ReplicatorOptions options;

  // Any thread.
  std::atomic<bool> accepting{false};  // OnChanged marks keys (R > 1, not stopping)
  std::atomic<bool> peers{true};       // the ring has other members (SetPeers)
  std::atomic<bool> running{false};    // started and not stopped: Decided waits in sync mode
  std::atomic<bool> stop_called{false};
  std::atomic<bool> wake_posted{false};        // a Changed event is posted and the set not drained since
  std::atomic<SyncCall*> sync_calls{nullptr};  // sync callers not yet taken by the executor, newest first
  DirtyShard shards[kDirtyShards];
  std::atomic<uint64_t> received_updates{0};
  std::atomic<uint64_t> applied_states{0};
  std::atomic<uint64_t> ignored_states{0};
  std::atomic<uint64_t> bad_batches{0};
  std::atomic<uint64_t> newer_received{0};  // keys whose replica answered a newer copy (want_newer)
  std::mutex stats_mu;                      // guards planner_stats (a copy published after every event)
  PlannerStats planner_stats;

  // On the executor.
  ReplicationPlanner planner;
  std::unique_ptr<Executor::Timer> timer;
  uint64_t next_id = 0;
  std::map<uint64_t, std::function<void(bool)>> waiters;  // Decided calls, by planner waiter id
  std::map<uint64_t, std::function<void(bool)>> flushes;  // Flush calls, by planner flush id
  // Apply's serialized updates of one round of batches, and where each key's is (offset, size).
  std::string ship_bytes;
  boost::unordered_flat_map<std::string_view, std::pair<size_t, size_t>> ship_at;
  // The states of the key Apply is shipping, kept from key to key for their storage.
  std::vector<storage::StoredState> ship_states;
};

// ------------------------------------------------------------------------------------------ Replicator

Replicator::Replicator(storage::Store& store, ClusterLink& link, Executor& executor,
                       ReplicatorOptions options)
    : options_(std::move(options)), core_(std::make_shared<Core>(store, link, executor, options_)) {}

Replicator::~Replicator() { Stop(); }

void Replicator::Start() { core_->running.store(true); }

void Replicator::Stop() {
  Core& core = *core_;
  if (core.stop_called.exchange(true)) return;
  core.accepting.store(false);
  auto flushed = std::make_shared<std::promise<void>>();
  std::future<void> flushed_future = flushed->get_future();
  Flush(options_.send_timeout, [flushed](bool) { flushed->set_value(); });
  if (flushed_future.wait_for(options_.send_timeout + kStopSlack) != std::future_status::ready) {
    spdlog::warn("replication: stop did not reach the executor in time");
  }
  auto stopped = std::make_shared<std::promise<void>>();
  std::future<void> stopped_future = stopped->get_future();
  core.executor.Post([core = core_, stopped] {
    core->running.store(false);
    core->Apply(core->planner.Stop(core->executor.Now()));
    core->timer->Cancel();
    stopped->set_value();
  });
  if (stopped_future.wait_for(kStopSlack) != std::future_status::ready) {
    spdlog::warn("replication: stop did not reach the executor in time");
  }
}

void Replicator::Abandon() {
  if (core_->stop_called.exchange(true)) return;
  core_->accepting.store(false);
  core_->running.store(false);
}

void Replicator::OnChanged(std::string_view entity, std::string_view /*name*/, uint64_t /*version*/) {
  core_->Mark(entity, false);
}

void Replicator::OnErased(std::string_view entity, std::string_view /*name*/) { core_->Mark(entity, true); }

void Replicator::SetPeers(bool any) { core_->peers.store(any, std::memory_order_relaxed); }

void Replicator::Decided(std::span<const std::string_view> keys, std::function<void(bool acked)> done) {
  if (options_.mode != ReplicationMode::kSync || !core_->accepting.load() || !core_->running.load() ||
      keys.empty()) {
    // Stopping with ack_majority: the holders are not told, so the caller must not answer as if they were.
    done(!(options_.ack_majority && core_->stop_called.load()));
    return;
  }
  core_->QueueSync(keys, std::move(done));
}

void Replicator::Flush(std::chrono::milliseconds timeout, std::function<void(bool ok)> done) {
  core_->executor.Post([core = core_, timeout, done = std::move(done)]() mutable {
    core->Drain();
    const uint64_t id = ++core->next_id;
    core->flushes.emplace(id, std::move(done));
    const MonoTime now = core->executor.Now();
    const auto ring = core->link.ring();
    core->Apply(core->planner.Flush(now, core->View(ring), id, now + timeout));
  });
}

void Replicator::SendUpdates(std::string_view id, std::vector<peer::StateUpdate> updates,
                             std::function<void(bool ok)> done) {
  auto push = std::make_shared<Core::Push>();
  push->target = std::string(id);
  push->updates = std::move(updates);
  push->done = std::move(done);
  core_->executor.Post([core = core_, push] { core->PushMore(push); });
}

std::optional<std::string> Replicator::HandleStateUpdate(std::string_view payload) {
  return core_->HandleStateUpdate(payload);
}

ReplicatorStats Replicator::stats() const { return core_->Stats(); }

}  // namespace ringlimit::replication
