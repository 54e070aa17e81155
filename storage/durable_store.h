// DurableStore: the memory tier with write-back to RocksDB.
//
// The request path touches memory only (MemoryStore in write-back mode): every change marks its state
// dirty. A flusher thread copies the dirty states out (under each shard's lock, no I/O) every
// flush_interval and writes them in one WriteBatch with no lock held; a state becomes clean (evictable)
// only once its batch is written. A miss reads RocksDB outside every lock (lazy: nothing is read at
// open). Idle and erased states leave pending deletes that the next batch applies; rows whose expiry has
// passed are also dropped by a compaction filter. A failed write is logged, counted and retried on the
// next flush while the node keeps serving from memory.
//
// Thread safety: safe for concurrent use from many threads without external synchronisation, except
// Close (see Store). Destruction closes.
#ifndef RINGLIMIT_STORAGE_DURABLE_STORE_H_
#define RINGLIMIT_STORAGE_DURABLE_STORE_H_

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "storage/memory_store.h"
#include "storage/open.h"

namespace rocksdb {
class DB;
class Status;
class WriteBatch;
}  // namespace rocksdb

namespace ringlimit::storage {

class DurableStore final : public Store {
 public:
  // Opens (creating if missing) the database in options.data_dir. REQUIRES: !options.data_dir.empty().
  // Errors as OpenStateStore's.
  [[nodiscard]] static Result<std::unique_ptr<DurableStore>> Open(const StorageOptions& options);

  ~DurableStore() override;
  DurableStore(const DurableStore&) = delete;
  DurableStore& operator=(const DurableStore&) = delete;

  // StateStore.
  void Update(std::string_view entity, std::span<const Slot> slots, limiter::TimeNs now,
              const std::function<void(std::span<limiter::MergeState* const>)>& fn) override;
  [[nodiscard]] std::vector<StoredState> Get(std::string_view entity) override;
  size_t Erase(std::string_view entity, std::optional<std::string_view> name) override;
  [[nodiscard]] StoreStats Stats() const override;

  // Store.
  bool Absorb(std::string_view entity, const StoredState& state) override;
  // The rows are deleted by the next flush (Flush or Close make it durable now).
  size_t Discard(std::string_view entity) override;
  [[nodiscard]] std::vector<EntityState> ScanTokenRange(ring::Token first, ring::Token last) override;
  void SetObserver(StateObserver* observer) override;
  void Flush() override;
  void Close() override;
  [[nodiscard]] DurabilityStats Durability() const override;

  // Test hook: while set, every batch write fails as if the disk were full.
  void TEST_FailWrites(bool fail) { fail_writes_.store(fail); }
  // Test hook: every batch write takes `delay` longer, as on a slow disk (0: off).
  void TEST_DelayWrites(std::chrono::nanoseconds delay) { write_delay_ns_.store(delay.count()); }
  // Test hook: flushes the memtable and compacts the whole key range (runs the expiry filter).
  void TEST_CompactAll();
  // Test hook: the memory tier (to set its scan hook). Valid until Close.
  MemoryStore& TEST_Memory() { return *memory_; }

 private:
  class Loader;
  DurableStore(const StorageOptions& options, std::unique_ptr<rocksdb::DB> db);
  void FlusherLoop();
  bool FlushOnce();  // true when nothing is left dirty or the batch was written
  // Writes one batch (through the test hooks).
  rocksdb::Status WriteRows(rocksdb::WriteBatch* writes);
  void ObserveFlush(int64_t ns);
  [[nodiscard]] RocksDbFigures ReadRocksDbFigures() const;

  // Constant after construction.
  const StorageOptions options_;
  std::unique_ptr<rocksdb::DB> db_;  // closed and reset by Close, after the flusher stopped
  std::unique_ptr<Loader> loader_;   // outlives memory_ (declared before it)
  std::unique_ptr<MemoryStore> memory_;

  // Counters (relaxed atomics).
  std::atomic<uint64_t> flushes_{0};
  std::atomic<uint64_t> flushed_states_{0};
  std::atomic<uint64_t> deleted_rows_{0};
  std::atomic<uint64_t> write_errors_{0};
  std::atomic<uint64_t> loads_{0};
  std::atomic<uint64_t> load_errors_{0};
  std::atomic<bool> fail_writes_{false};
  std::atomic<int64_t> write_delay_ns_{0};
  // Flush passes that wrote something: durations per kFlushBoundsNs bucket (+Inf last), sum, count.
  std::array<std::atomic<uint64_t>, kFlushBoundsNs.size() + 1> flush_buckets_{};
  std::atomic<int64_t> flush_sum_ns_{0};
  std::atomic<uint64_t> flush_count_{0};
  std::atomic<int64_t> last_flush_success_ns_{0};  // Unix ns; see DurabilityStats

  std::mutex flush_mutex_;  // serialises FlushOnce (the flusher thread and Flush/Close)

  // Protected by wake_mutex_: the flusher's wake-up reasons.
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool flush_requested_ = false;

  std::thread flusher_;
  bool closed_ = false;  // only touched by Close (which must not race)
};

}  // namespace ringlimit::storage

#endif  // RINGLIMIT_STORAGE_DURABLE_STORE_H_
