// Replicator: ships every change of the states this node decides to the other members of each key's
// preference list (its R-1 successors on the ring), and applies what other nodes ship to it.
//
// It is the driver of a ReplicationPlanner (replication_planner.h), which makes every decision -- targets,
// batches, retries, when a sync caller or a flush is answered -- as a pure state machine. The driver runs
// the planner on its Executor (a strand of the node's io_context): it feeds it events, reads the shipped
// keys' states from the store, sends the batches over the ClusterLink and arms one timer for the
// planner's next instant. No thread of its own, no polling.
//
// Sending (async mode, the default): the store tells the Replicator about every change (it is the
// store's StateObserver). The observer only marks the entity key dirty in a sharded set -- O(1), one
// shard mutex, no I/O, on the request path -- and the first mark after a pass posts one event to the
// executor. `interval` later the driver drains the set into the planner and ships: each key once, at its
// newest state, to every reachable member of its preference list other than this node. Failed sends are
// retried while the target is still reachable.
//
// Sending (sync mode): Decided(keys, done) ships the keys' states at once and calls `done` only when, for
// every key, its successor acknowledged -- the first reachable replica after this node in the key's
// preference list, the node that takes the key over if this one dies (or no replica is reachable, or
// sync_timeout passed -- counted, and the answer goes out anyway: availability over durability). With
// ack_majority (--failure-mode closed) it waits for a majority of the key's holders instead, and
// done(false) says no majority acknowledged, or a holder answered a copy with admissions this one lacked
// (merged in): the caller answers 503 rather than an admission. The request path calls it
// after a local decision and answers the client from `done`.
//
// Receiving: HandleStateUpdate merges a StateUpdateBatch in with Store::Absorb (a merge keeps every
// admission; repeats and reordering are harmless) -- for live replication, handoff pushes and re-replication
// alike. It runs on the caller's thread (the peer transport's).
//
// Thread safety: every public method is safe for concurrent use, except Stop (see there). Completions
// (`done` of Decided, Flush and SendUpdates) run on the executor. Lifetime: the store, the link and the
// executor must outlive the Replicator; Stop (or the destructor) before destroying them.
#ifndef RINGLIMIT_REPLICATION_REPLICATOR_H_
#define RINGLIMIT_REPLICATION_REPLICATOR_H_

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "limiter/merge.h"
#include "peer.pb.h"
#include "replication/cluster_link.h"
#include "replication/executor.h"
#include "replication/replication_planner.h"
#include "storage/store.h"

namespace ringlimit::replication {

enum class ReplicationMode : uint8_t {
  kAsync = 0,  // answer at once; ship within `interval`
  kSync = 1,   // answer after at least one replica acknowledged
};

// "async" / "sync".
[[nodiscard]] std::optional<ReplicationMode> ParseReplicationMode(std::string_view text);
[[nodiscard]] std::string_view ToString(ReplicationMode mode);

struct ReplicatorOptions {
  // --- Affects behaviour ---
  // --replication. Default: async.
  ReplicationMode mode = ReplicationMode::kAsync;
  // --replicas: copies of each key including the owner's (the preference-list length R), capped at the
  // member count by the ring. 1 = no replication. REQUIRES: >= 1. Default: 3.
  uint32_t replicas = 3;
  // Sync mode: how long Decided waits for a replica's acknowledgement before answering anyway.
  // REQUIRES: >= 0. Default: 250 ms.
  std::chrono::milliseconds sync_timeout{250};
  // Sync mode, instead of the successor alone: Decided waits until a majority of a key's holders (this node
  // counted when it is one) acknowledged without holding admissions this node lacks, on the ring and on every
  // ring the link's RouteOverrides::reading names for the key (the take-over read:
  // PlannerOptions::ack_majority). A decision whose key took in another node's admissions between the charge
  // and the shipping is answered unacked (it may have been decided without them). A holder that does not
  // answer directly within 2/5 of sync_timeout is sent the batch through another member. Set by
  // --failure-mode closed (with HandoffOptions::majority_read). Default: false.
  bool ack_majority = false;
  // This node's contributor id in merged states (the check service's; 0 = not given). Sent with the batches
  // a sync decision waits for, so that their holders tell a later decision of this node, reordered ahead of
  // the batch, from another node's admission (StateUpdateBatch.contributor). Default: 0.
  limiter::ContributorId contributor = 0;
  // Timeout of one StateUpdateBatch send. REQUIRES: >= 1 ms. Default: 2000 ms.
  std::chrono::milliseconds send_timeout{2000};

  // --- Affects performance ---
  // Async mode: how often the flusher ships the dirty keys (--replication-interval-ms).
  // REQUIRES: >= 1 ms. Default: 2 ms.
  std::chrono::milliseconds interval{2};
  // Most StateUpdates per StateUpdateBatch. REQUIRES: >= 1. Default: 512.
  size_t max_batch = 512;
};

// Returns nullopt when every REQUIRES of `options` holds, else what is wrong.
[[nodiscard]] Status Validate(const ReplicatorOptions& options);

struct ReplicatorStats {
  // Sending side.
  uint64_t updates_sent = 0;   // StateUpdates sent (one per key and target), live replication only
  uint64_t updates_acked = 0;  // of those, acknowledged
  uint64_t batches_sent = 0;
  uint64_t send_failures = 0;  // batches that got no answer (their keys are retried)
  uint64_t pending_keys = 0;   // gauge: dirty keys not shipped yet, and failed ones awaiting a retry
  uint64_t sync_waits = 0;     // Decided calls that waited for an acknowledgement (sync mode)
  uint64_t sync_timeouts = 0;  // of those, answered after sync_timeout without one
  // ack_majority: keys whose holder answered a copy with admissions this node's lacked (merged in;
  // the decision that waited was not answered as an admission)
  uint64_t newer_received = 0;
  // ack_majority: Decided calls answered unacked before sync_timeout (PlannerStats::unacked_*).
  uint64_t unacked_newer = 0;
  uint64_t unacked_unreachable = 0;
  uint64_t unacked_lost = 0;
  double lag_seconds = 0;      // last batch: time from the oldest change in it to its acknowledgement
  double max_lag_seconds = 0;  // since start
  // Every acknowledged batch's lag: per bucket of kLagBoundsNs (replication_planner.h; the last +Inf),
  // sum and count.
  std::array<uint64_t, kLagBoundsNs.size() + 1> lag_buckets{};
  int64_t lag_sum_ns = 0;
  uint64_t lag_count = 0;
  // Receiving side (every StateUpdateBatch: replication, handoff, re-replication).
  uint64_t received_updates = 0;
  uint64_t applied_states = 0;  // newer than ours: kept
  uint64_t ignored_states = 0;  // not newer: ignored
  uint64_t bad_batches = 0;     // did not parse
};

// The StateUpdate of `entity` as `store` holds it now: every state (name, spec, words, version), the
// ring token, `erased` false. `states` is empty when the store holds none.
[[nodiscard]] peer::StateUpdate MakeStateUpdate(storage::Store& store, std::string_view entity);
// The same into `out` (cleared first; a reused message keeps its allocations).
void FillStateUpdate(storage::Store& store, std::string_view entity, peer::StateUpdate* out);

// One stored state as it travels: name, spec (with its fingerprint), the merged state's bytes and the
// version (no expiry: the receiver computes its own). For pushes built from Store::ScanTokenRange.
void ToNamedState(const storage::StoredState& state, peer::NamedState* out);

// The stored state a NamedState carries, or nullopt when it is not a usable state (unknown algorithm or
// mode, merged bytes limiter::ParseMergeState rejects, a spec that fails limiter::Validate).
[[nodiscard]] std::optional<storage::StoredState> FromNamedState(const peer::NamedState& named);

class Replicator final : public storage::StateObserver {
 public:
  // REQUIRES: Validate(options).ok().
  Replicator(storage::Store& store, ClusterLink& link, Executor& executor, ReplicatorOptions options);
  ~Replicator() override;

  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // Starts accepting changes. Call once, before the store is shared with request handling.
  void Start();
  // Ships what is pending (waiting at most send_timeout for the acknowledgements), then stops: waiting
  // Decided calls are answered, nothing is retried any more. Blocks until the executor has done so (at
  // most about send_timeout + 1 s). Must not be called on the executor. Idempotent.
  void Stop();

  // Whether the ring has members besides this node (default true). While it has none, changes are not
  // even marked: there is nobody to ship them to, and when members arrive the ring change's handoff and
  // re-replication scan the store and push everything the new holders need. Call before the ring change
  // is handed to the handoff.
  void SetPeers(bool any);

  // storage::StateObserver (request path: O(1), no I/O).
  void OnChanged(std::string_view entity, std::string_view name, uint64_t version) override;
  void OnErased(std::string_view entity, std::string_view name) override;

  // This node just decided (charged) checks of `keys`. Calls done(acked) exactly once, possibly on
  // another thread, possibly before returning: at once in async mode, with R == 1 or when no replica is
  // reachable (acked true); in sync mode once every key's successor (a majority of its holders, with
  // ack_majority) acknowledged (acked true) or sync_timeout passed or, with ack_majority, no majority can
  // acknowledge any more (false).
  void Decided(std::span<const std::string_view> keys, std::function<void(bool acked)> done);
  // Whether Decided may wait (sync mode); otherwise it answers at once.
  [[nodiscard]] bool Waits() const { return options_.mode == ReplicationMode::kSync; }

  // A crash, for the simulator: stops at once, ships nothing, answers nothing, never blocks. What is
  // queued on the executor is the executor owner's to drop. Idempotent; Stop does nothing after it.
  void Abandon();

  // Ships every pending change now and calls done(ok) on the executor once the acknowledgements are in
  // (ok: everything pending at the call was acknowledged) or `timeout` passed (not ok). Used at a handoff
  // switch ("last changes") and by Stop.
  void Flush(std::chrono::milliseconds timeout, std::function<void(bool ok)> done);

  // Sends `updates` to member `id` in batches of max_batch (flagged `handoff`), at most a few batches
  // in flight, and calls done(ok) once, on the executor: ok when every batch was acknowledged. For
  // handoff pushes and re-replication.
  void SendUpdates(std::string_view id, std::vector<peer::StateUpdate> updates,
                   std::function<void(bool ok)> done);

  // Receiver: applies a serialized StateUpdateBatch to the store and returns the serialized
  // StateUpdateAck, or nullopt when the payload does not parse (nothing applied). States whose spec
  // fails limiter::Validate are ignored.
  [[nodiscard]] std::optional<std::string> HandleStateUpdate(std::string_view payload);

  [[nodiscard]] const ReplicatorOptions& options() const { return options_; }
  [[nodiscard]] ReplicatorStats stats() const;

 private:
  struct Core;
  const ReplicatorOptions options_;
  std::shared_ptr<Core> core_;  // also held by pending completions
};

}  // namespace ringlimit::replication

#endif  // RINGLIMIT_REPLICATION_REPLICATOR_H_
