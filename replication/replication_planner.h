// ReplicationPlanner: the decisions of live replication as a pure state machine -- which changed keys go
// to which member, in which batches, what to retry and when, when a sync-mode caller may be answered and
// when a flush is over.
//
// No I/O, no clock, no threads: every entry point takes the current time (and, where it plans targets,
// a ClusterView: this node's id, its ring and which members can be reached) and returns the actions to
// carry out. The driver (Replicator, replicator.h) reads each shipped key's states from the store,
// sends the batches, and reports every batch's fate back with BatchReply.
//
//   Mark(keys)        keys this node changed (the driver drains the request path's dirty set into it)
//   Changed(now)      something is dirty: a pass is due within `interval` (async mode batching)
//   Decided(...)      sync mode: callers wait for their keys' successors (with ack_majority: a majority
//                     of the holders on each ring the key is read from); shipped at once, in one pass
//   Flush(...)        ship everything pending now; answered once it is all acknowledged (or deadline)
//   BatchReply(...)   a batch was acknowledged or failed (failed keys are retried while the member is
//                     reachable and still a replica of the key, with exponential backoff)
//   Timer(now)        the instant of the last `wake_at` came
//
// A pass: the dirty keys (all of them: the newest state of a key is read when its batch is built, so a key
// changed many times in one interval is shipped once), the keys of waiting Decided calls and the due
// retries go to every reachable member of the key's preference list other than this node, at most
// max_batch keys per batch, at most kMaxInFlightPerTarget batches in flight per member (beyond it keys
// wait for the member's next retry; batches that carry waiting Decided keys are never held back).
//
// Thread safety: none; the driver serialises every call on its executor.
#ifndef RINGLIMIT_REPLICATION_REPLICATION_PLANNER_H_
#define RINGLIMIT_REPLICATION_REPLICATION_PLANNER_H_

#include <array>
#include <boost/unordered/unordered_flat_map.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "replication/executor.h"
#include "ring/ring_view.h"

namespace ringlimit::replication {

// An entity key to ship, and whether one of its states was erased since it was last shipped (the
// receiver then drops what it has before applying what comes).
struct DirtyKey {
  std::string key;
  bool erased = false;
};

// A ring a key is read from (ClusterView::reading).
struct ReadRing {
  const ring::RingView* ring = nullptr;
  // A majority of its holders' copies are here already (the read is held for read_hold, for members still
  // deciding on it): its majority is asked only while one is reachable. Otherwise a decision needs it.
  bool held = false;
};

// What the planner is told of the cluster with an event.
struct ClusterView {
  std::string_view self;
  const ring::RingView* ring = nullptr;  // null: no ring yet (nothing is shipped)
  // Whether member `id` may be sent to. Called during the event only.
  std::function<bool(std::string_view id)> reachable;
  // ack_majority: appends the rings this node still reads the key of `token` from besides `ring` (its
  // take-over read: the rings before a change of the key's holders, RouteOverrides::reading). Null: none.
  // The rings stay valid during the event.
  std::function<void(ring::Token token, std::vector<ReadRing>& out)> reading;
};

// Send `keys` (their current states) to `target` as one StateUpdateBatch; report with BatchReply(id).
struct ShipBatch {
  uint64_t id = 0;
  std::string target;
  std::vector<DirtyKey> keys;
  bool awaited = false;  // Decided callers wait for its acknowledgement
};

struct ReplicationActions {
  std::vector<ShipBatch> ship;
  std::vector<uint64_t> waiters_done;  // Decided calls that may be answered now
  std::vector<uint64_t>
      waiters_unacked;  // Decided calls answered without every acknowledgement they wait for
  std::vector<std::pair<uint64_t, bool>> flushes_done;  // Flush calls that are over: id, everything acked
  // When to call Timer next (replaces any earlier instant); nullopt: nothing is due.
  std::optional<MonoTime> wake_at;
};

// One sync caller: the driver's id for it and the keys it waits for.
struct SyncWait {
  uint64_t waiter = 0;
  std::vector<std::string> keys;
};

struct PlannerOptions {
  uint32_t replicas = 3;                               // preference-list length R. REQUIRES: >= 1
  std::chrono::nanoseconds interval{2'000'000};        // async batching window. REQUIRES: > 0
  std::chrono::nanoseconds sync_timeout{250'000'000};  // longest wait of a Decided call
  size_t max_batch = 512;                              // keys per batch. REQUIRES: >= 1
  // Sync mode, instead of the successor alone: a Decided key waits until a majority of its holders -- this
  // node counted when it is one -- acknowledged it without holding admissions it lacks (want_newer), on the
  // ring and on every ring the view's `reading` names for the key (the majority read of a take-over: the
  // holders the earlier admissions were acknowledged by). Every reachable holder of those rings is sent
  // the key; one answering `stale` (a copy with admissions this node lacked, merged by the driver)
  // answers the waiter unacked at once, and so does a majority no longer reachable (a failed batch, too
  // few holders reachable). With N = 3 holders: W = 2, and every later decider's majority meets this one
  // at a holder that refuses the older copy. For --failure-mode closed.
  bool ack_majority = false;
};

// Upper bounds of the replication lag histogram's buckets, in nanoseconds (+Inf implicit).
inline constexpr std::array<int64_t, 12> kLagBoundsNs = {
    100'000,    250'000,    500'000,     1'000'000,   2'500'000,     5'000'000,
    10'000'000, 25'000'000, 100'000'000, 250'000'000, 1'000'000'000, 10'000'000'000};

struct PlannerStats {
  uint64_t updates_sent = 0;   // keys shipped (one per key and target)
  uint64_t updates_acked = 0;  // of those, acknowledged
  uint64_t batches_sent = 0;
  uint64_t send_failures = 0;  // batches that failed
  uint64_t pending_keys = 0;   // gauge: dirty keys here plus keys awaiting a retry
  uint64_t sync_waits = 0;     // Decided calls that waited
  uint64_t sync_timeouts = 0;  // of those, answered at sync_timeout without an acknowledgement
  // ack_majority: Decided calls answered unacked before sync_timeout, by why: a holder held admissions the
  // batch lacked (newer), a majority of some ring was out of reach when the batch was made (unreachable), or
  // failed sends left too few holders to make one (lost).
  uint64_t unacked_newer = 0;
  uint64_t unacked_unreachable = 0;
  uint64_t unacked_lost = 0;
  std::chrono::nanoseconds lag{0};      // last acknowledged batch: oldest change in it -> acknowledgement
  std::chrono::nanoseconds max_lag{0};  // since start
  // Every acknowledged batch's lag: counts per kLagBoundsNs bucket (the last one +Inf), sum, count.
  std::array<uint64_t, kLagBoundsNs.size() + 1> lag_buckets{};
  std::chrono::nanoseconds lag_sum{0};
  uint64_t lag_count = 0;
};

class ReplicationPlanner {
 public:
  // Batches in flight to one member before further keys wait for a retry.
  static constexpr size_t kMaxInFlightPerTarget = 32;
  // Retry backoff of a member whose batches fail while it is still reachable.
  static constexpr std::chrono::milliseconds kMaxBackoff{500};

  explicit ReplicationPlanner(PlannerOptions options) : options_(options) {}

  void Mark(MonoTime now, std::span<const DirtyKey> keys);
  [[nodiscard]] ReplicationActions Changed(MonoTime now);
  // Registers each wait (`waiter`, an id of the driver's, for `keys`) and ships every one's keys at once,
  // in one pass: the sync callers that arrived since the driver's last event share their batches.
  [[nodiscard]] ReplicationActions Decided(MonoTime now, const ClusterView& view,
                                           std::span<const SyncWait> waits);
  // Ships everything pending now (retries ignore their backoff and the in-flight cap); flushes_done
  // reports `flush` once every batch sent so far is over: ok when none failed and nothing awaits a retry,
  // not ok when what failed went to members that are gone, or at `deadline`. While sends keep failing
  // to a reachable member, the flush ships again every `interval`.
  [[nodiscard]] ReplicationActions Flush(MonoTime now, const ClusterView& view, uint64_t flush,
                                         MonoTime deadline);
  // `stale`: keys of the batch whose receiver held admissions the batch lacked (StateUpdateAck.newer):
  // their waiters are answered unacked (ack_majority).
  [[nodiscard]] ReplicationActions BatchReply(MonoTime now, const ClusterView& view, uint64_t batch, bool ok,
                                              std::span<const std::string> stale = {});
  [[nodiscard]] ReplicationActions Timer(MonoTime now, const ClusterView& view);
  // Stops: every waiting Decided and Flush is answered (flushes not ok); later replies retry nothing.
  [[nodiscard]] ReplicationActions Stop(MonoTime now);

  [[nodiscard]] PlannerStats stats() const;

 private:
  struct Quorum {  // ack_majority: one ring's majority of one key
    uint32_t need = 0;
    uint32_t possible = 0;
  };
  // ack_majority: rings a key is validated on at most (more are ignored: never seen, a ring change every
  // few seconds with reads of a second or less).
  static constexpr size_t kMaxRings = 8;
  struct Slot {  // one key of one Decided call
    uint64_t waiter = 0;
    uint32_t index = 0;
  };
  struct Waiter {
    MonoTime deadline{};
    std::vector<uint32_t> needed;  // per key: acknowledgements still awaited
    size_t remaining = 0;          // keys with needed > 0
    // ack_majority, per key: per ring (the view's ring first, then the reading ones) the clean
    // acknowledgements still needed and the holders that may still give one.
    std::vector<std::vector<Quorum>> quorums;
  };
  struct Waiting {  // a Decided key in a batch
    Slot slot;
    uint32_t key = 0;    // index in the batch's keys
    uint32_t rings = 0;  // ack_majority: bit i set when the target holds the key on the key's ring i
  };
  struct Batch {
    std::string target;
    std::vector<DirtyKey> keys;
    std::vector<Waiting> waiting;  // Decided keys that wait for this batch's target
    MonoTime oldest{};
  };
  struct Target {
    size_t in_flight = 0;
    std::map<std::string, bool, std::less<>> retry;  // key -> erased: failed or held back, this member only
    MonoTime retry_at{};
    std::chrono::nanoseconds backoff{0};
  };
  struct FlushState {
    MonoTime deadline{};
    uint64_t first_batch = 0;          // batches of its last pass: [first_batch, last_batch]
    uint64_t last_batch = 0;           // every batch up to here must be over
    uint64_t failures = 0;             // of its last pass
    std::optional<MonoTime> again_at;  // a failed pass ships again then
  };

  void Pass(MonoTime now, const ClusterView& view, bool force, ReplicationActions& out);
  void Await(const Slot& slot, size_t acks);
  void AckSlot(const Slot& slot, ReplicationActions& out);
  // ack_majority: registers the quorums of one key; false when one of them cannot be met.
  bool AwaitMajority(const Slot& slot, const std::vector<Quorum>& quorums);
  // ack_majority: a clean acknowledgement (ok) or a failed batch (!ok) of a target holding the key on
  // the rings of `mask`.
  void MajorityReply(const Slot& slot, uint32_t mask, bool ok, ReplicationActions& out);
  // ack_majority: the quorums of `key` (the view's ring, then the rings it is read from) and the holders
  // to ask, each with its rings as bits (appended to `validators`).
  [[nodiscard]] std::vector<Quorum> MajorityTargets(
      const ClusterView& view, std::string_view key, const std::function<bool(const std::string&)>& reachable,
      std::vector<std::pair<std::string, uint32_t>>& validators) const;
  // The slot's caller is answered unacked (once): false when it was answered already.
  bool FailSlot(const Slot& slot, ReplicationActions& out);
  void FinishIfAnswered(uint64_t waiter, ReplicationActions& out);
  void FinishFlushes(MonoTime now, const ClusterView& view, ReplicationActions& out);
  void ExpireWaiters(MonoTime now, ReplicationActions& out);
  [[nodiscard]] bool RetryPending() const;
  void SetWake(ReplicationActions& out) const;

  const PlannerOptions options_;
  bool stopped_ = false;

  // key -> erased. Hashed: every change of a key marks it (a std::map's node per key cost ~0.5 k
  // instructions per change, issue 33).
  struct KeyHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  boost::unordered_flat_map<std::string, bool, KeyHash, std::equal_to<>> dirty_;
  std::optional<MonoTime> dirty_since_;
  std::optional<MonoTime> pass_at_;  // a regular pass is due then
  std::vector<std::pair<std::string, Slot>> sync_keys_;

  uint64_t last_batch_ = 0;
  std::map<uint64_t, Batch> in_flight_;  // by id
  std::map<std::string, Target, std::less<>> targets_;
  std::map<uint64_t, Waiter> waiters_;  // by the driver's id
  std::map<uint64_t, FlushState> flushes_;

  PlannerStats stats_;
};

}  // namespace ringlimit::replication

#endif  // RINGLIMIT_REPLICATION_REPLICATION_PLANNER_H_
