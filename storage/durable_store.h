// DurableStore: the memory tier with write-back to RocksDB.
//
// The request path touches memory only (MemoryStore in write-back mode): every change marks its state
// dirty. A flusher thread copies the dirty states out (under each shard's lock, no I/O) every
// flush_interval and writes them in one WriteBatch with no lock held; a state becomes clean (evictable)
// only once its batch is written. A miss reads RocksDB outside every lock (lazy: nothing is read at
// open; a miss that could only find expired rows reads nothing, see MayHoldLiveRow). Idle and erased
// states leave pending deletes that the next batch applies; rows whose expiry has passed are also dropped
// by a compaction filter. A failed write is logged, counted and retried while the node keeps serving from
// memory (the states stay dirty and unevicted).
//
// A failed write leaves RocksDB unusable for writes (its background error; its write-ahead-log writer
// must not be used again), so the retry does not write to that database: once the data directory has room
// for the batch and the memtable (HasRoomFor), the flusher closes the database and opens it again (the
// WAL is replayed up to the last acknowledged batch), then writes. Retries run at most every
// kRetryEvery (or the flush interval if longer); Flush and Close retry at once. Reads wait for a reopen
// (db_mutex_) and, while it fails, count load errors. RocksDB's own log goes to spdlog, never to the data
// disk (storage/rocksdb_env.h says why).
//
// Thread safety: safe for concurrent use from many threads without external synchronisation, except
// Close (see Store). Destruction closes.
#ifndef RINGLIMIT_STORAGE_DURABLE_STORE_H_
#define RINGLIMIT_STORAGE_DURABLE_STORE_H_

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <memory>
#include <mutex>
#include <shared_mutex>
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
  void GetInto(std::string_view entity, std::vector<StoredState>& out) override;
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
  // Test hook: waits until the pass over the rows present at open is over (see MayHoldLiveRow).
  void TEST_WaitOpenScan();
  // Test hook: how many times the database was closed and opened again after a failed write.
  [[nodiscard]] uint64_t TEST_Reopens() const { return reopens_.load(); }

  // The shortest time between two retries of a failed write by the flusher thread.
  static constexpr std::chrono::milliseconds kRetryEvery{1000};

 private:
  class Loader;
  DurableStore(const StorageOptions& options, std::unique_ptr<rocksdb::DB> db);
  // The miss filter. An expired row (expiry <= now) holds a state back at its initial value, which the memory
  // tier drops and the compaction filter removes: reading it decides nothing. So a miss of a key at `now`
  // reads RocksDB only when a row of its bucket (the token's high bits) may expire after `now`: one written
  // since open (row_bounds_, raised before its batch is written) or one present at open (open_bound_).
  [[nodiscard]] bool MayHoldLiveRow(ring::Token token, limiter::TimeNs now) const;
  // The scanner thread: reads every row's expiry once, chunk by chunk, and sets open_bound_ to their latest.
  void ScanOpenBound();
  void FlusherLoop();
  // True when nothing is left dirty or the batch was written. retry_at_once: after a failed write, retry
  // now (Flush, Close) rather than kRetryEvery after the last attempt (the flusher thread).
  bool FlushOnce(bool retry_at_once);
  // Writes one batch (through the test hooks). REQUIRES: flush_mutex_ held.
  rocksdb::Status WriteRows(rocksdb::WriteBatch* writes);
  // After a failed write: closes the database and opens it again, once the data directory has room for
  // `batch_bytes` and the memtable. REQUIRES: flush_mutex_ held.
  rocksdb::Status Reopen(uint64_t batch_bytes);
  // Logging and counting of a failed pass, at most one log line per kFailureLogEvery while it lasts.
  void NoteFailure(size_t states, const rocksdb::Status& status);
  void NoteSuccess();
  void ObserveFlush(int64_t ns);
  [[nodiscard]] RocksDbFigures ReadRocksDbFigures() const;
  // RocksDB's figures, its counters including carried_. REQUIRES: db_mutex_ held (either way).
  [[nodiscard]] RocksDbFigures FiguresLocked() const;

  // Constant after construction.
  const StorageOptions options_;
  std::unique_ptr<Loader> loader_;  // outlives memory_ (declared before it)
  // Per bucket of keys: no row written since open expires later (INT64_MIN: none written).
  std::unique_ptr<std::atomic<int64_t>[]> row_bounds_;
  std::unique_ptr<MemoryStore> memory_;

  // The database: null while a reopen failed, and after Close. Replaced only with flush_mutex_ held and
  // db_mutex_ held exclusively; used with either held (readers hold db_mutex_ shared, so a reopen waits
  // for their iterators to go). carried_ is protected the same way.
  mutable std::shared_mutex db_mutex_;
  std::unique_ptr<rocksdb::DB> db_;
  RocksDbFigures carried_;  // the counters of the databases Reopen closed (-1: none yet)

  // Counters (relaxed atomics).
  std::atomic<uint64_t> flushes_{0};
  std::atomic<uint64_t> flushed_states_{0};
  std::atomic<uint64_t> deleted_rows_{0};
  std::atomic<uint64_t> write_errors_{0};
  std::atomic<uint64_t> loads_{0};
  std::atomic<uint64_t> load_errors_{0};
  std::atomic<uint64_t> load_skips_{0};
  std::atomic<bool> fail_writes_{false};
  std::atomic<int64_t> write_delay_ns_{0};
  // Flush passes that wrote something: durations per kFlushBoundsNs bucket (+Inf last), sum, count.
  std::array<std::atomic<uint64_t>, kFlushBoundsNs.size() + 1> flush_buckets_{};
  std::atomic<int64_t> flush_sum_ns_{0};
  std::atomic<uint64_t> flush_count_{0};
  std::atomic<int64_t> last_flush_success_ns_{0};  // Unix ns; see DurabilityStats

  std::mutex flush_mutex_;  // serialises FlushOnce (the flusher thread and Flush/Close)
  // Protected by flush_mutex_: the write-failure state.
  bool must_reopen_ = false;  // the last write failed: the database is not written again before a reopen
  bool db_closed_ = false;    // Close closed the database: nothing is written any more
  std::chrono::steady_clock::time_point next_retry_{};
  uint64_t failed_passes_ = 0;  // consecutive failed passes
  std::chrono::steady_clock::time_point failing_since_{};
  std::chrono::steady_clock::time_point last_failure_log_{};
  std::atomic<uint64_t> reopens_{0};

  // Protected by wake_mutex_: the flusher's wake-up reasons.
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  bool flush_requested_ = false;

  // The pass over the rows present at open: no such row expires after open_bound_ (INT64_MAX until the
  // pass is over, or for good when it failed).
  std::atomic<int64_t> open_bound_{std::numeric_limits<int64_t>::max()};
  std::atomic<bool> stop_scan_{false};
  std::mutex scan_mutex_;
  std::condition_variable scan_done_cv_;
  bool scan_done_ = false;  // protected by scan_mutex_
  std::thread scanner_;

  std::thread flusher_;
  bool closed_ = false;  // only touched by Close (which must not race)
};

}  // namespace ringlimit::storage

#endif  // RINGLIMIT_STORAGE_DURABLE_STORE_H_
