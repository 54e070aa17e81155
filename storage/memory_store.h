// MemoryStore: the memory tier. States keyed by (entity key, limit name), sharded by the entity's ring
// token so that all limits of one entity live in one shard; each shard has its own mutex and hash table,
// so the hot path takes no global lock.
//
// Memory: one state costs an 80-byte slab entry (entity key inline up to 16 bytes, its ring token, 48-bit
// version, LRU and entity-chain links as 32-bit indices, and the merged state packed in 32 bytes when it
// has one contributor -- limiter::PackState -- else a pointer to a heap limiter::MergeState) plus a 4-byte
// accounting word and ~6-10 bytes of hash table: ~95 bytes per key in all (docs/storage.md "Memory per
// key"). Limit names and specs are interned per shard and shared by every state that uses them.
//
// Range scans (ScanTokenRange, ScanTokenRangeWithDeletes) visit only the shards whose token interval
// overlaps the range and read each state's stored token. A shard is read in chunks (at most
// MemoryShard::kScanChunkStates states copied per hold of its lock, the lock released in between so that
// Update and Get proceed), following the slab index, which an entry keeps for as long as it lives. The
// guarantee under concurrent changes is the one of Store::ScanTokenRange: every state present for the
// whole scan and not changed during it is returned exactly once; a state created, changed or removed
// during the scan is returned at most once (or not at all), with a version it had during the scan. No
// (entity, name) is returned twice: when entries were inserted into a shard during its scan (only then
// can one state be copied from two slab indices: removed after its copy, inserted again further on), the
// shard's part is deduplicated, keeping the newest version.
//
// Used alone it is the memory-only store. The durable tier (DurableStore) drives it in write-back mode:
// see MemoryStoreOptions::write_back, MissLoader, CollectDirty and AckFlushed.
//
// Thread safety: safe for concurrent use from many threads without external synchronisation.
#ifndef RINGLIMIT_STORAGE_MEMORY_STORE_H_
#define RINGLIMIT_STORAGE_MEMORY_STORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "limiter/limiter.h"
#include "ring/token.h"
#include "storage/store.h"

namespace ringlimit::storage {

class MemoryShard;

// Where the durable tier plugs in the reads of a memory miss. Called without any store lock held.
// Implementations log and count their failures and then report the state as absent.
class MissLoader {
 public:
  virtual ~MissLoader() = default;

  // `now` for Load: read every row, expired or not.
  static constexpr limiter::TimeNs kAnyRow = std::numeric_limits<limiter::TimeNs>::min();

  // The stored state of each (entity, names[i]) or nullopt when there is none. A row whose expiry is at or
  // before `now` (its state is back to the initial one) may be reported as absent without reading it.
  [[nodiscard]] virtual std::vector<std::optional<StoredState>> Load(std::string_view entity,
                                                                     ring::Token token,
                                                                     std::span<const std::string_view> names,
                                                                     limiter::TimeNs now) = 0;

  // Every stored state of `entity`.
  [[nodiscard]] virtual std::vector<StoredState> LoadEntity(std::string_view entity, ring::Token token) = 0;
};

struct MemoryStoreOptions {
  // --- Affects behaviour ---

  // Upper bound on the number of states held in memory; 0 = unbounded. The bound is split evenly among
  // the shards (each holds at most ceil(max_keys / shards)); a full shard evicts its least-recently-used
  // state (in write-back mode its least-recently-used *clean* state; see write_back). Evictions are
  // counted in StoreStats::evictions. Default: 0. Fixed at construction.
  size_t max_keys = 0;

  // Upper bound on the memory the states take, in bytes; 0 = unbounded. Every state is accounted at its
  // real size: the slab and hash set, a key longer than 15 bytes, the MergeState and every record in it
  // (a sliding_log's stamps: 8 bytes per admitted unit per deciding node), interned names. Split evenly
  // among the shards; a shard over its share evicts as for max_keys (whichever bound is reached first),
  // except the state just charged. StoreStats::bytes is the accounted total. Default: 0.
  size_t max_bytes = 0;

  // Write-back mode, set by the durable tier: changes mark states dirty (CollectDirty / AckFlushed),
  // dirty states are never evicted (the shard may exceed its bound until the next flush, and calls
  // on_pressure), and idle or erased states that may be on disk leave a pending delete. Default: false.
  bool write_back = false;

  // Write-back mode: consulted outside the shard lock when an Update or Get misses memory. Not owned;
  // must outlive the store. Default: nullptr (a miss means "initial state").
  MissLoader* loader = nullptr;

  // Write-back mode: called (outside every lock) when a shard is over its bound and holds no clean state
  // to evict, i.e. a flush would let it evict. Must not block. Default: none.
  std::function<void()> on_pressure;

  // --- Affects performance ---

  // Number of independently locked shards. 0 = max(16, 4 x hardware threads). Default: 0.
  size_t shards = 0;

  // Incremental idle sweep: every Update examines up to this many least-recently-used states of its
  // shard and drops those already back to their initial value (limiter::MergedIdleAt <= now). 0 = only
  // by SweepIdle and eviction. Default: 2.
  size_t sweep_per_update = 2;
};

// One dirty state or pending delete, copied out of memory for the flusher.
struct DirtyRecord {
  std::string entity;
  ring::Token token = 0;
  bool erase = false;          // true: delete the row (entity, state.name); state.name is the only field set
  StoredState state;           // the state to write (erase == false)
  limiter::TimeNs expiry = 0;  // limiter::MergedIdleAt(state.spec, state.state): the row may go after it
};

// Where the memory tier's bytes go (MemoryStore::Breakdown), for benchmarks and tools. Sizes are what the
// store asked the allocator for; the allocator adds its own header and rounding to every heap block.
struct MemoryBreakdown {
  uint64_t states = 0;              // states held
  uint64_t pair_states = 0;         // states in the pair form (two contributors: entry + a 32-byte pair cell)
  uint64_t trio_states = 0;         // states in the trio form (three contributors: entry + two 32-byte cells)
  uint64_t entry_bytes = 0;         // per state: its slab entry and its accounting word, and its pair cell
  uint64_t slab_bytes = 0;          // slab and pair slab chunks allocated (in use, free and never used)
  uint64_t index_bytes = 0;         // the hash sets of entity heads (slots and group metadata)
  uint64_t key_heap_bytes = 0;      // keys too long to be stored in their entry
  uint64_t state_objects = 0;       // heap MergeState objects (states not held in their entry)
  uint64_t state_object_bytes = 0;  // their sizeof
  uint64_t state_vector_bytes = 0;  // their vectors' capacities (limiter::HeapBytes)
  uint64_t heap_blocks = 0;         // heap blocks of the above (each pays the allocator's header)
};

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(MemoryStoreOptions options = {});
  ~MemoryStore() override;

  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  // StateStore.
  void Update(std::string_view entity, std::span<const Slot> slots, limiter::TimeNs now,
              const std::function<void(std::span<limiter::MergeState* const>)>& fn) override;
  [[nodiscard]] std::vector<StoredState> Get(std::string_view entity) override;
  void GetInto(std::string_view entity, std::vector<StoredState>& out) override;
  size_t Erase(std::string_view entity, std::optional<std::string_view> name) override;
  [[nodiscard]] StoreStats Stats() const override;

  // Store.
  bool Absorb(std::string_view entity, const StoredState& state) override;
  // Write-back mode: the rows on disk get pending deletes, applied by the next flush.
  size_t Discard(std::string_view entity) override;
  [[nodiscard]] std::vector<EntityState> ScanTokenRange(ring::Token first, ring::Token last) override;
  // Reads the overlapping shards' tokens in chunks, as a scan does, copying nothing.
  [[nodiscard]] uint64_t CountTokenRange(ring::Token first, ring::Token last) override;
  void SetObserver(StateObserver* observer) override { observer_ = observer; }
  void Flush() override {}
  void Close() override {}
  [[nodiscard]] DurabilityStats Durability() const override { return {}; }

  // Drops the idle states (limiter::MergedIdleAt <= now) among the `max_per_shard` least recently used of
  // every shard, one shard lock at a time; returns how many. The per-Update sweep only runs where there
  // is traffic: the durable tier calls this every flush interval (and fully before its last flush); a
  // memory-only node may call it from a timer. Counted in StoreStats::idle_drops.
  size_t SweepIdle(limiter::TimeNs now, size_t max_per_shard);

  // --- Write-back mode (used by DurableStore) ---

  // Copies out every dirty state and pending delete, shard by shard under each shard's lock (no I/O).
  // The states stay dirty until AckFlushed.
  [[nodiscard]] std::vector<DirtyRecord> CollectDirty();

  // Reports the fate of a batch returned by CollectDirty. ok: states not changed since are now clean
  // (evictable) and the pending deletes are forgotten. !ok: everything stays dirty for the next flush.
  void AckFlushed(const std::vector<DirtyRecord>& batch, bool ok);

  // ScanTokenRange plus the RocksDB row keys (key_codec.h) of the pending deletes in the range: the rows
  // the durable tier must not read back. A shard's pending deletes are taken after the last chunk of its
  // states (not under the same hold of the lock), which is what the durable tier needs: a state in the
  // range that is not among `states` was absent from memory when the scan passed its slab index, so its
  // row is either current (never loaded, or evicted clean), or deleted by then (a drop leaves a pending
  // delete, forgotten only after the delete is written to RocksDB, so it is either listed here or
  // already applied to the rows read afterwards), or it belongs to a state changed during the scan,
  // which the guarantee leaves free.
  struct RangeScan {
    std::vector<EntityState> states;
    std::vector<std::string> pending_deletes;
  };
  [[nodiscard]] RangeScan ScanTokenRangeWithDeletes(ring::Token first, ring::Token last);

  // States currently dirty plus pending deletes.
  [[nodiscard]] uint64_t DirtyCount() const;

  // Walks every shard, one lock at a time.
  [[nodiscard]] MemoryBreakdown Breakdown() const;

  size_t TEST_ShardCount() const { return shard_count_; }

  // Called by range scans, with no lock held, before each chunk with the index of the shard it reads
  // (so a test sees which shards a scan visits, and may change the store between chunks). Set it before
  // scanning, not concurrently with a scan. Default: none.
  void TEST_SetScanHook(std::function<void(size_t shard)> hook) { scan_hook_ = std::move(hook); }

 private:
  MemoryShard& ShardFor(ring::Token token) const;
  void Released(size_t bytes);  // states of `bytes` were dropped: gives free memory back now and then
  // Appends the states of [first, last] (and, when set, the pending deletes) shard by shard.
  void Scan(ring::Token first, ring::Token last, std::vector<EntityState>& states,
            std::vector<std::string>* pending_deletes);

  // Constant after construction.
  const MemoryStoreOptions options_;
  size_t shard_count_;
  std::unique_ptr<std::unique_ptr<MemoryShard>[]> shards_;
  StateObserver* observer_ = nullptr;            // set before serving
  std::function<void(size_t shard)> scan_hook_;  // tests only; set before scanning
  std::atomic<size_t> released_{0};              // bytes dropped since the allocator was last trimmed
};

}  // namespace ringlimit::storage

#endif  // RINGLIMIT_STORAGE_MEMORY_STORE_H_
