// Store: the full interface of the storage tier, as owned by the node.
//
// StateStore (state_store.h) is what request handling needs. Store adds what the node's lifecycle,
// write-back, replication and handoff need: change notification, applying a state received from a peer,
// scanning a ring-token range, flushing and closing. Both the memory-only tier (MemoryStore) and the
// durable tier (DurableStore) implement it; OpenStateStore (storage/open.h) picks one.
//
// Thread safety: every method is safe for concurrent use from many threads without external
// synchronisation, except Close, which must not race with other calls.
#ifndef RINGLIMIT_STORAGE_STORE_H_
#define RINGLIMIT_STORAGE_STORE_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "ring/token.h"
#include "storage/state_store.h"

namespace ringlimit::storage {

// Told about every committed change, for replication (and anything else that follows the store).
//
// Calls happen on the thread that made the change, after the change is committed and outside every
// store lock, so an observer may call Get on the store. Calls for the same entity are not ordered
// between threads; each call carries the whole merged state, so a late one changes nothing (merging is
// idempotent). An observer must be cheap (it runs on the request
// path) and must not block on I/O; queue the work instead. It must outlive the store.
class StateObserver {
 public:
  virtual ~StateObserver() = default;

  // The state `name` of `entity` was created or changed by Update and now has `version` (Get has it; no
  // copy is made for the call, which runs on the request path). (Absorb does not notify: what a peer sent is
  // not sent back out; its holders got it from the same sender.)
  virtual void OnChanged(std::string_view entity, std::string_view name, uint64_t version) = 0;

  // The state `name` of `entity` was removed by Erase (not by idle dropping or eviction, which are
  // local memory decisions and do not change what the state means).
  virtual void OnErased(std::string_view entity, std::string_view name) = 0;
};

// A stored state together with the entity it belongs to (range scans return these).
struct EntityState {
  std::string entity;
  ring::Token token = 0;
  StoredState state;
};

// Upper bounds of the flush duration histogram's buckets (DurabilityStats::flush_buckets), in
// nanoseconds; the +Inf bucket is implicit. From 100 us (a small batch on a fast disk) to 10 s (a disk
// that has stopped answering).
inline constexpr std::array<int64_t, 12> kFlushBoundsNs = {
    100'000,    250'000,    500'000,     1'000'000,   2'500'000,     5'000'000,
    10'000'000, 25'000'000, 100'000'000, 250'000'000, 1'000'000'000, 10'000'000'000};

// RocksDB's own figures, read from its DB properties when the stats are taken (never on the request
// path). Each is -1 when RocksDB did not answer it.
struct RocksDbFigures {
  int64_t user_bytes_written = -1;        // bytes of keys and values written by this process (counter)
  int64_t wal_bytes_written = -1;         // bytes written to the write-ahead log by this process (counter)
  int64_t pending_compaction_bytes = -1;  // estimated bytes compaction must rewrite to settle (gauge)
  int64_t running_compactions = -1;       // (gauge)
  int64_t stall_slowdowns = -1;           // write slowdowns since open (counter)
  int64_t stall_stops = -1;               // write stops since open (counter)
  int64_t write_stopped = -1;             // 1 while writes are stopped (gauge)
  int64_t delayed_write_rate = -1;        // bytes/s writes are held to while slowed down, 0 if not (gauge)
  int64_t live_sst_bytes = -1;            // size of the live SST files (gauge)
  int64_t memtable_bytes = -1;            // size of the memtables (gauge)
  int64_t estimated_keys = -1;            // rows, estimated (gauge)
  int64_t background_errors = -1;         // background errors since open (counter)
};

// Counters of the persistent tier (all zero for a memory-only store).
struct DurabilityStats {
  bool persistent = false;      // false: memory-only, nothing survives a restart
  uint64_t flushes = 0;         // WriteBatches written successfully
  uint64_t flushed_states = 0;  // states written (puts) by those batches
  uint64_t deleted_rows = 0;    // rows deleted (idle, erased) by those batches
  uint64_t write_errors = 0;    // failed batch writes (retried on the next flush)
  uint64_t loads = 0;           // states loaded from disk on a memory miss
  uint64_t load_errors = 0;     // failed disk reads (served as if absent, logged)
  uint64_t load_skips = 0;      // misses answered "absent" without a read: every row they could find expired
  uint64_t dirty = 0;           // states changed in memory and not yet on disk (gauge)
  // Flush passes that had something to write, successful or not: how long each took, from collecting
  // the dirty states to acknowledging them (kFlushBoundsNs, then +Inf; per bucket, not cumulative).
  std::array<uint64_t, kFlushBoundsNs.size() + 1> flush_buckets{};
  int64_t flush_sum_ns = 0;
  uint64_t flush_count = 0;
  // Unix time (ns) at the end of the last flush pass that left nothing unwritten (a pass with nothing
  // dirty counts: nothing waits); 0 before the first.
  int64_t last_flush_success_unix_ns = 0;
  RocksDbFigures rocksdb;
};

class Store : public StateStore {
 public:
  // Merges `state` into the stored state (entity, state.name) (limiter::MergeInto: every admission either
  // copy recorded is kept), or stores it when there is none. Returns true if the stored state changed.
  // Commutative and idempotent: a copy received twice, late or out of order changes nothing more. Used
  // by replication, handoff and catch-up. REQUIRES: limiter::Validate(state.spec) returned nullopt.
  virtual bool Absorb(std::string_view entity, const StoredState& state) = 0;

  // Removes every state of `entity` from memory and disk WITHOUT telling the observer: the key moved to
  // other nodes (handoff cleanup), so this is not an erase to replicate. Returns how many were removed.
  virtual size_t Discard(std::string_view entity) = 0;

  // Every state whose entity's ring token t satisfies first <= t <= last (inclusive, so the whole
  // ring is [0, UINT64_MAX]; empty when first > last), in no particular order, each with its token. For
  // handoff and re-replication. Cost: the memory tier looks only at the shards whose token interval
  // overlaps the range (O(states in those shards), copying only the matches), plus a contiguous RocksDB
  // range read for the durable tier.
  //
  // The scan does not stop the store: memory is read in bounded chunks, each shard's lock released in
  // between, so Update, Get and the rest run concurrently with it. What it guarantees under concurrent
  // calls:
  //  - a state present for the whole scan and not changed during it is returned exactly once, as it is.
  //    "Changed" means an Update that changed it, Absorb, Erase, Discard or an idle drop; memory
  //    eviction and reloading from disk (durable tier) are not changes, a memory-only eviction removes;
  //  - a state created, changed or removed during the scan is returned at most once, with a version it
  //    had at some moment during the scan, or not at all;
  //  - a state removed before the scan started (durable tier: erased, discarded or idle, with its row
  //    delete still pending) is not returned;
  //  - no (entity, name) is returned twice.
  // So a snapshot is not promised: a caller that must not miss changes made during the scan follows
  // them otherwise (StateObserver).
  [[nodiscard]] virtual std::vector<EntityState> ScanTokenRange(ring::Token first, ring::Token last) = 0;

  // How many keys (entities) ScanTokenRange(first, last) would return states of, each counted once, without
  // copying a state: what a handoff's progress counts before its push. Under concurrent changes it is as
  // exact as a scan (a key created or removed meanwhile may or may not count). Default: counts a
  // ScanTokenRange (the durable tier); the memory tier reads only tokens and a flag.
  [[nodiscard]] virtual uint64_t CountTokenRange(ring::Token first, ring::Token last);

  // Sets the observer (nullptr: none). Call before serving; not safe concurrently with Update.
  virtual void SetObserver(StateObserver* observer) = 0;

  // Durable tier: writes every dirty state now and waits for it. Memory tier: no-op.
  virtual void Flush() = 0;

  // Durable tier: stops the flusher, writes everything, closes the database. Idempotent; the destructor
  // calls it. No other call may run concurrently with or after Close.
  virtual void Close() = 0;

  [[nodiscard]] virtual DurabilityStats Durability() const = 0;
};

inline uint64_t Store::CountTokenRange(ring::Token first, ring::Token last) {
  const std::vector<EntityState> states = ScanTokenRange(first, last);
  std::unordered_set<std::string_view> keys;
  keys.reserve(states.size());
  for (const EntityState& s : states) keys.insert(s.entity);
  return keys.size();
}

}  // namespace ringlimit::storage

#endif  // RINGLIMIT_STORAGE_STORE_H_
