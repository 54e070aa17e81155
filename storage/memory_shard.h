// MemoryShard: one independently locked part of the memory tier (internal to storage/).
//
// Layout (per state, see memory_store.h for the budget): an 80-byte Entry (its merged state packed in it;
// with two contributors, half in it and half in a 32-byte cell of a second slab, the pair form; with three,
// a third in it and the rest in two cells of that slab, the trio form; or on the heap) in a chunked
// slab addressed by 32-bit indices, holding the entity's ring token (computed once, by the caller); a flat
// hash set of the index of each entity's first entry (its other entries follow through Entry::entity_next),
// hashed by that stored token; a doubly-linked LRU list through the slab; interned (name, spec) slots.
//
// Thread safety: every public method takes mutex_ itself; safe for concurrent use. No method does I/O
// or calls out while holding mutex_ (except the caller's `fn`, which must not block).
#ifndef RINGLIMIT_STORAGE_MEMORY_SHARD_H_
#define RINGLIMIT_STORAGE_MEMORY_SHARD_H_

#include <array>
#include <atomic>
#include <boost/unordered/unordered_flat_map.hpp>
#include <boost/unordered/unordered_flat_set.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "storage/memory_store.h"

namespace ringlimit::storage {

// The shard of `token` among `shard_count` shards: shard i holds the tokens t with
// floor(t * shard_count / 2^64) == i, i.e. [ceil(i * 2^64 / n), ceil((i + 1) * 2^64 / n)). The index
// never decreases as the token grows, so the shards that can hold a token of [first, last] are exactly
// ShardIndex(first) ... ShardIndex(last). REQUIRES: shard_count > 0.
inline size_t ShardIndex(ring::Token token, size_t shard_count) {
  return static_cast<size_t>((static_cast<unsigned __int128>(token) * shard_count) >> 64);
}

// A state an Update changed (for StateObserver::OnChanged).
struct ChangeNotice {
  std::string name;
  uint64_t version = 0;
};

struct EntityKey {
  std::string_view entity;
  ring::Token token = 0;
};

// What a call needs from disk before it can proceed (write-back mode with a loader only).
struct NeedLoad {
  std::vector<std::string_view> names;  // missing from memory and not pending delete
  uint64_t epoch = 0;                   // pass back with the loaded states
};

// States read from disk for a call, valid only if the shard's epoch has not moved since `epoch`.
struct Loaded {
  std::vector<std::string> asked;  // the names read (absent from `states`: no row on disk)
  std::vector<StoredState> states;
  uint64_t epoch = 0;
  bool valid = false;
};

class MemoryShard {
 public:
  // At most `capacity` states (0: unbounded) and `byte_capacity` bytes (0: unbounded).
  MemoryShard(const MemoryStoreOptions& options, size_t capacity, size_t byte_capacity);
  ~MemoryShard();
  MemoryShard(const MemoryShard&) = delete;
  MemoryShard& operator=(const MemoryShard&) = delete;

  struct Outcome {
    std::optional<NeedLoad> need;       // set: nothing was done; load these names and call again
    std::vector<ChangeNotice> changed;  // the changed states' names and versions, when want_changes
    bool pressure = false;              // over the bound with nothing clean to evict
    size_t released = 0;                // bytes of states dropped since the last Update or Absorb
  };

  Outcome Update(EntityKey key, std::span<const Slot> slots, limiter::TimeNs now,
                 const std::function<void(std::span<limiter::MergeState* const>)>& fn, const Loaded& loaded,
                 bool want_changes);

  // Merges `state` into the stored copy (inserting it when there is none). `applied`: the stored copy
  // changed.
  struct ApplyOutcome {
    std::optional<NeedLoad> need;
    bool applied = false;
    bool pressure = false;
    size_t released = 0;  // as Outcome::released
  };
  ApplyOutcome Absorb(EntityKey key, const StoredState& state, const Loaded& loaded);

  // The current epoch (moves when pending deletes are forgotten), for LoadEntity-based calls.
  uint64_t Epoch();

  // Every state of the entity in memory, merged with `on_disk` (inserted as clean entries when the name
  // is neither in memory nor pending delete). Returns nullopt when `on_disk` is stale (epoch moved).
  std::optional<std::vector<StoredState>> Get(EntityKey key, const Loaded& on_disk);
  // The same into `out` (resized to the count; its states keep their storage where they can). false: as
  // Get's nullopt (`out` unspecified).
  bool GetInto(EntityKey key, const Loaded& on_disk, std::vector<StoredState>& out);

  // Removes the named state (or all); `on_disk` names get a pending delete too. Returns the names removed
  // or nullopt when `on_disk` is stale.
  std::optional<std::vector<std::string>> Erase(EntityKey key, std::optional<std::string_view> name,
                                                const Loaded& on_disk);

  // Examines up to `max` least-recently-used states and drops those idle at `now`. Returns drops.
  size_t SweepIdle(limiter::TimeNs now, size_t max);

  // A range scan walks the slab by index, one chunk per hold of the lock. An entry keeps its slab index
  // for as long as it lives (the hash set and the LRU list only hold indices; a rehash moves indices,
  // never entries), so a cursor "every index below `next` has been looked at" stays meaningful however
  // the shard changes between chunks: an entry that lives through the whole scan is looked at exactly
  // once. An entry inserted meanwhile may land at a freed index below the cursor (not seen) or at or
  // above it (seen), so a state erased or evicted after it was copied and then inserted again can be
  // copied twice: `may_repeat` says whether anything was inserted while the scan ran.
  struct ScanCursor {
    uint32_t next = 0;        // the slab index to look at next
    uint64_t inserts = 0;     // inserts_ when the first chunk ran
    bool started = false;     // the first chunk has run
    bool done = false;        // every slab index has been looked at
    bool may_repeat = false;  // (when done) entries were inserted during the scan
  };

  // At most this many states are copied per hold of the lock, and at most kScanChunkVisits slab entries
  // are looked at (reading a token is a few ns; a copy is ~100 ns, more when the key or name is over 15
  // bytes or the state has a tail, which allocate): a chunk holds the lock for some tens of microseconds,
  // as long as a few dozen Updates, so requests queued on the lock wait for one chunk, not for a scan of
  // the whole shard.
  static constexpr size_t kScanChunkStates = 256;
  static constexpr uint32_t kScanChunkVisits = 4096;

  // Appends to `out` the states whose token is in [first, last] among the slab indices from
  // cursor.next on, under one hold of the lock, stopping after kScanChunkStates copies or
  // kScanChunkVisits entries; advances `cursor` (sets done at the end of the slab). Pass an `out` with
  // room for kScanChunkStates more: growing a large vector under the lock would hold it for long.
  void ScanChunk(ring::Token first, ring::Token last, ScanCursor& cursor, std::vector<EntityState>& out);

  // Counting copies nothing: a chunk looks at this many slab entries (a token and a flag each).
  static constexpr uint32_t kCountChunkVisits = 16384;
  // How many entities have their first state (the head of their chain) at one of the slab indices from
  // cursor.next on with a token in [first, last], under one hold of the lock, looking at most
  // kCountChunkVisits entries; advances `cursor` as ScanChunk does.
  [[nodiscard]] uint64_t CountChunk(ring::Token first, ring::Token last, ScanCursor& cursor);

  // Appends the RocksDB row keys of the pending deletes whose token is in [first, last].
  void PendingDeletes(ring::Token first, ring::Token last, std::vector<std::string>& out);
  void CollectDirty(std::vector<DirtyRecord>& out);
  void AckFlushed(std::span<const DirtyRecord> records, bool ok);

  // Adds this shard's figures to `out` (MemoryStore::Breakdown).
  void AddBreakdown(MemoryBreakdown& out) const;

  uint64_t keys() const { return keys_.load(std::memory_order_relaxed); }
  uint64_t evictions() const { return evictions_.load(std::memory_order_relaxed); }
  uint64_t idle_drops() const { return idle_drops_.load(std::memory_order_relaxed); }
  uint64_t dirty() const { return dirty_count_.load(std::memory_order_relaxed); }
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 public:
  struct Entry;  // (public for the helpers of memory_shard.cc)

 private:
  struct SlotInfo;
  struct EntityHash;
  struct EntityEq;
  enum class DropReason { kIdle, kEvicted, kErased };

  Entry& At(uint32_t index) const;
  uint32_t& Accounted(uint32_t index) const;  // the bytes counted in bytes_ for the entry
  void Account(uint32_t index);               // counts the entry's current size
  bool OverBound() const {
    return (capacity_ != 0 && keys_.load(std::memory_order_relaxed) > capacity_) ||
           (byte_capacity_ != 0 && bytes_.load(std::memory_order_relaxed) > byte_capacity_);
  }
  uint32_t Allocate();
  void Free(uint32_t index);
  uint32_t FindHead(EntityKey key) const;
  uint32_t FindInChain(uint32_t head, std::string_view name) const;
  uint32_t Intern(std::string_view name, const limiter::LimitSpec& spec);
  void Release(uint32_t slot);
  void LruUnlink(uint32_t index);
  void LruPushFront(uint32_t index);
  uint32_t Insert(EntityKey key, std::string_view name, const limiter::LimitSpec& spec, uint64_t version,
                  const limiter::MergeState& state, bool on_disk);
  // The entry's state: its heap MergeState, the empty state, or the packed state unpacked into `scratch`.
  const limiter::MergeState& StateOf(uint32_t index, limiter::MergeState& scratch) const;
  // Makes `state` the entry's state (a copy, unless it is the entry's heap object): packed into the entry
  // when limiter::PackState accepts it, else in the pair or trio form when limiter::PackGroup does (the heap
  // object or the group cell, if any and no longer needed, goes), else in a heap MergeState. Accounts.
  void Keep(uint32_t index, const limiter::MergeState& state);
  // Keep's group form of N = 2 or 3 contributors: false (nothing changed) when limiter::PackGroup<N> does
  // not take `state`.
  template <size_t N>
  bool KeepGroup(Entry& e, const limiter::LimitSpec& spec, const limiter::MergeState& state);
  // The entry's heap MergeState (if any) goes to the spares or is freed, or its group cell to its free list.
  void ReleaseHeap(Entry& e);
  // The 32-byte cells that hold a group form's words beyond the entry's (limiter::PackedGroup<N>
  // word[4..4N-1], 32 bytes a cell: one for a pair, two for a trio, the second's index in the high half of
  // the first's word 3): chunks of 1024 cells (counted in bytes_ when allocated, as the entry slab), indexed
  // by 32 bits; freed cells are linked through their word 0.
  using Cell = std::array<uint64_t, 4>;
  Cell& CellAt(uint32_t index) const;
  uint32_t AllocateCell();
  void ReleaseCell(uint32_t index);
  template <size_t N>
  void UnpackGroupOf(const Entry& e, limiter::MergeState& scratch) const;
  // The tag of contributor `id` in this shard's packed states; false when all 65,536 are taken.
  bool TagOf(limiter::ContributorId id, uint16_t& tag);
  limiter::MergeState& Scratch(size_t i) {
    if (scratch_.size() <= i) scratch_.resize(i + 1);
    return scratch_[i];
  }
  void Drop(uint32_t index, DropReason reason);
  void Changed(uint32_t index, uint64_t version);  // sets the version (and algorithm), marks dirty
  void MarkDirty(uint32_t index);
  StoredState Copy(uint32_t index) const;
  void CopyInto(uint32_t index, StoredState& out) const;
  bool Tombstoned(EntityKey key, std::string_view name) const;
  // Resolves `names` to entry indices (kNil when absent), inserting loaded states. Returns need-load.
  std::optional<NeedLoad> Resolve(EntityKey key, std::span<const std::string_view> names,
                                  const Loaded& loaded, std::span<uint32_t> indices);
  bool Trim(limiter::TimeNs now);  // eviction and incremental sweep; returns "pressure"
  // `spare_head`: never the most recently used state.
  size_t SweepLocked(limiter::TimeNs now, size_t max, bool spare_head = false);

  // Constant after construction.
  const MemoryStoreOptions& options_;
  const size_t capacity_;       // 0 = unbounded
  const size_t byte_capacity_;  // 0 = unbounded

  // Statistics, written under mutex_, read without it.
  std::atomic<uint64_t> keys_{0};
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> idle_drops_{0};
  std::atomic<uint64_t> dirty_count_{0};
  std::atomic<uint64_t> bytes_{0};  // accounted memory: states, slab chunks, interned names

  // Everything below is protected by mutex_.
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Entry[]>> chunks_;        // the slab
  std::vector<std::unique_ptr<uint32_t[]>> accounted_;  // per slab entry: its bytes in bytes_
  uint32_t fresh_ = 0;                                  // next never-used index (never decreases)
  uint64_t inserts_ = 0;                                // entries inserted so far (see ScanCursor)
  uint32_t free_head_;                                  // free list through Entry::lru_next
  uint32_t lru_head_;                                   // most recently used
  uint32_t lru_tail_;                                   // least recently used
  std::unique_ptr<boost::unordered_flat_set<uint32_t, EntityHash, EntityEq>> heads_;
  std::vector<SlotInfo> slots_;
  std::vector<uint32_t> free_slots_;
  // The slot Intern returned last: states are mostly created under the same few (name, spec) pairs,
  // found again here without building their key. kNil: none.
  uint32_t last_interned_ = UINT32_MAX;
  // States of dropped entries, kept for the next Insert (their vectors keep their capacity), at most
  // kSpareStates.
  std::vector<std::unique_ptr<limiter::MergeState>> spare_states_;
  // Packed states are charged, merged and looked at unpacked in these (their vectors keep their room:
  // no allocation once warm). scratch_[i]: slot i of an Update, [0] for Absorb; sweep_scratch_: sweeps
  // and flush acknowledgements.
  std::vector<limiter::MergeState> scratch_;
  mutable limiter::MergeState sweep_scratch_;
  // The group forms' cells (CellAt).
  std::vector<std::unique_ptr<Cell[]>> cell_chunks_;
  uint32_t cell_fresh_ = 0;          // next never-used cell
  uint32_t cell_free_ = UINT32_MAX;  // free list head (UINT32_MAX: none)
  // Contributor tags of packed states: tag_ids_[tag] is the id; tags are never reused.
  std::vector<limiter::ContributorId> tag_ids_;
  boost::unordered_flat_map<limiter::ContributorId, uint16_t> tags_;
  uint16_t last_tag_ = 0;
  boost::unordered_flat_map<std::string, uint32_t> slot_ids_;  // SlotKey(name, spec) -> slot
  boost::unordered_flat_set<uint32_t> dirty_;                  // write-back: entries newer than disk
  struct Tomb {
    std::string entity;
    ring::Token token;
    std::string name;
  };
  boost::unordered_flat_map<std::string, Tomb> tombs_;  // row key -> pending delete (write-back)
  uint64_t epoch_ = 0;   // moves whenever a pending delete is forgotten (disk rows changed under loads)
  size_t released_ = 0;  // bytes of states dropped, not yet reported in an Outcome
};

}  // namespace ringlimit::storage

#endif  // RINGLIMIT_STORAGE_MEMORY_SHARD_H_
