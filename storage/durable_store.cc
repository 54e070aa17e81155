#include "storage/durable_store.h"

#include <rocksdb/cache.h>
#include <rocksdb/compaction_filter.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/unordered/unordered_flat_set.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "storage/key_codec.h"
#include "storage/rocksdb_env.h"
#include "storage/state_codec.h"

namespace ringlimit::storage {
namespace {

struct TransparentHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};

// The smallest key greater than every key starting with `prefix` ("" when there is none).
std::string PrefixSuccessor(std::string prefix) {
  while (!prefix.empty() && static_cast<uint8_t>(prefix.back()) == 0xff) prefix.pop_back();
  if (!prefix.empty()) prefix.back() = static_cast<char>(static_cast<uint8_t>(prefix.back()) + 1);
  return prefix;
}

// Least recently used states examined per shard for idleness at every flush interval.
constexpr size_t kSweepPerFlush = 256;
// The miss filter (DurableStore::MayHoldLiveRow): its buckets are the tokens' high kBoundBits bits, and the
// open-time scan reads kScanChunk rows per hold of the database lock.
constexpr int kBoundBits = 16;
constexpr size_t kScanChunk = 4096;
constexpr int64_t kNeverExpires = std::numeric_limits<int64_t>::max();

size_t BoundBucket(ring::Token token) { return static_cast<size_t>(token >> (64 - kBoundBits)); }

// bound = max(bound, value).
void RaiseTo(std::atomic<int64_t>& bound, int64_t value) {
  int64_t seen = bound.load(std::memory_order_relaxed);
  while (seen < value &&
         !bound.compare_exchange_weak(seen, value, std::memory_order_release, std::memory_order_relaxed)) {
  }
}

// While writes fail: at most one log line this often (the first failure and the recovery always log).
constexpr std::chrono::seconds kFailureLogEvery{10};

// Room asked of the data directory beyond the batch and the memtable before a reopen: the new MANIFEST,
// OPTIONS and WAL files and the SST that the replayed WAL is flushed to.
constexpr uint64_t kReopenSlackBytes = 1u << 20;

// a + b for counters where -1 means "not known".
int64_t AddCounter(int64_t a, int64_t b) {
  if (a < 0) return b;
  if (b < 0) return a;
  return a + b;
}

limiter::TimeNs WallNow() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Drops rows whose expiry (Unix ns) has passed: the state is back to its initial value, so the row
// means nothing. Values that do not parse are kept (never lose data because of a reader bug).
class ExpiryFilter : public rocksdb::CompactionFilter {
 public:
  bool Filter(int /*level*/, const rocksdb::Slice& /*key*/, const rocksdb::Slice& value,
              std::string* /*new_value*/, bool* /*value_changed*/) const override {
    auto expiry = DecodeExpiry(std::string_view(value.data(), value.size()));
    return expiry.has_value() && *expiry <= WallNow();
  }
  const char* Name() const override { return "ringlimit.ExpiryFilter"; }
};

// A RocksDB failure to open the data directory as our Status, with `message`. RocksDB's InvalidArgument
// and NotSupported at open mean files it cannot use (another format, other options): corruption to us.
Status OpenFailure(const rocksdb::Status& status, std::string_view message) {
  if (status.IsCorruption() || status.IsInvalidArgument() || status.IsNotSupported()) {
    return Status::Corruption(message);
  }
  return Status::IOError(message);
}

rocksdb::Options MakeRocksOptions(const RocksDbOptions& o) {
  static const ExpiryFilter kExpiryFilter;  // stateless, shared by every DB in the process
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.max_background_jobs = o.max_background_jobs;
  options.write_buffer_size = o.write_buffer_bytes;
  options.level_compaction_dynamic_level_bytes = true;
  options.compaction_filter = &kExpiryFilter;
  options.compression = rocksdb::kLZ4Compression;
  // Each flush inserts its rows sorted: with an insert hint the memtable skiplist resumes its search where
  // the row before left it instead of from the top (rows of one token byte share the hint).
  options.memtable_insert_with_hint_prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(1));
  // Not the LOG file in the data directory: on a full disk its writer fails and RocksDB aborts on the
  // next line it logs (storage/rocksdb_env.h).
  options.info_log = SpdlogRocksDbLogger();
  options.info_log_level = rocksdb::WARN_LEVEL;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(o.block_cache_bytes);
  if (o.bloom_bits_per_key > 0)
    table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(o.bloom_bits_per_key));
  table.cache_index_and_filter_blocks = true;
  table.pin_l0_filter_and_index_blocks_in_cache = true;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

}  // namespace

// Reads of memory misses. Called without store locks; failures are logged, counted, and read as absent.
class DurableStore::Loader final : public MissLoader {
 public:
  static constexpr const char* kNoDatabase =
      "the database is closed: reopening it after a write error failed";

  explicit Loader(DurableStore& store) : store_(store) {}

  std::vector<std::optional<StoredState>> Load(std::string_view entity, ring::Token token,
                                               std::span<const std::string_view> names,
                                               limiter::TimeNs now) override {
    if (now != kAnyRow && !store_.MayHoldLiveRow(token, now)) {  // every row it could find has expired
      store_.load_skips_.fetch_add(1, std::memory_order_relaxed);
      return std::vector<std::optional<StoredState>>(names.size());
    }
    std::vector<std::string> keys;
    std::vector<rocksdb::Slice> slices;
    keys.reserve(names.size());
    for (auto name : names) keys.push_back(EncodeRowKey(token, entity, name));
    for (const auto& k : keys) slices.emplace_back(k);
    std::vector<std::optional<StoredState>> out(names.size());
    std::shared_lock db_lock(store_.db_mutex_);
    if (store_.db_ == nullptr) {
      Fail(entity, kNoDatabase);
      return out;
    }
    std::vector<std::string> values;
    auto statuses = store_.db_->MultiGet(rocksdb::ReadOptions(), slices, &values);
    for (size_t i = 0; i < names.size(); ++i) {
      if (statuses[i].IsNotFound()) continue;
      if (!statuses[i].ok()) {
        Fail(entity, statuses[i].ToString());
        continue;
      }
      out[i] = Decode(entity, names[i], values[i]);
    }
    return out;
  }

  std::vector<StoredState> LoadEntity(std::string_view entity, ring::Token token) override {
    std::string prefix = EntityPrefix(token, entity);
    std::vector<StoredState> out;
    // The bound lets the iterator stop at the entity's last row instead of reading on into the next one.
    const std::string upper = PrefixSuccessor(prefix);
    rocksdb::Slice upper_slice(upper);
    rocksdb::ReadOptions read;
    if (!upper.empty()) read.iterate_upper_bound = &upper_slice;
    std::shared_lock db_lock(store_.db_mutex_);
    if (store_.db_ == nullptr) {
      Fail(entity, kNoDatabase);
      return out;
    }
    std::unique_ptr<rocksdb::Iterator> it(store_.db_->NewIterator(read));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      std::string_view name(it->key().data() + prefix.size(), it->key().size() - prefix.size());
      if (auto s = Decode(entity, name, it->value().ToStringView())) out.push_back(std::move(*s));
    }
    if (!it->status().ok()) Fail(entity, it->status().ToString());
    return out;
  }

  std::optional<StoredState> Decode(std::string_view entity, std::string_view name, std::string_view value) {
    auto s = DecodeStateValue(name, value);
    if (!s) {
      Fail(entity, "unparseable value for limit '" + std::string(name) + "'");
      return std::nullopt;
    }
    store_.loads_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }

 private:
  void Fail(std::string_view entity, const std::string& what) {
    store_.load_errors_.fetch_add(1, std::memory_order_relaxed);
    spdlog::error("storage: reading entity '{}' from RocksDB failed ({}); serving it as new", entity, what);
  }

  DurableStore& store_;
};

Result<std::unique_ptr<DurableStore>> DurableStore::Open(const StorageOptions& options) {
  if (Status valid = Validate(options); !valid.ok()) return valid;
  // RocksDB would log (as an error) that it cannot list a directory it is about to create.
  std::error_code ignored;  // a directory that cannot be created is RocksDB's error to report
  std::filesystem::create_directories(options.data_dir, ignored);
  rocksdb::DB* raw = nullptr;
  rocksdb::Status status = rocksdb::DB::Open(MakeRocksOptions(options.rocksdb), options.data_dir, &raw);
  if (!status.ok()) {
    return OpenFailure(
        status, "cannot open the RocksDB data directory '" + options.data_dir + "': " + status.ToString());
  }
  // A probe left by a crash during HasRoomFor.
  std::filesystem::remove(std::filesystem::path(options.data_dir) / kSpaceProbeFile, ignored);
  std::unique_ptr<DurableStore> store(new DurableStore(options, std::unique_ptr<rocksdb::DB>(raw)));
  spdlog::info("storage: RocksDB write-back tier in '{}', flush every {} ms, max_keys {}", options.data_dir,
               options.flush_interval_ms, options.max_keys);
  return store;
}

DurableStore::DurableStore(const StorageOptions& options, std::unique_ptr<rocksdb::DB> db)
    : options_(options),
      loader_(std::make_unique<Loader>(*this)),
      row_bounds_(std::make_unique<std::atomic<int64_t>[]>(size_t{1} << kBoundBits)),
      db_(std::move(db)) {
  for (size_t b = 0; b < (size_t{1} << kBoundBits); ++b) {
    row_bounds_[b].store(std::numeric_limits<int64_t>::min(), std::memory_order_relaxed);
  }
  MemoryStoreOptions memory;
  memory.max_keys = options.max_keys;
  memory.max_bytes = options.max_bytes;
  memory.shards = options.shards;
  memory.write_back = true;
  memory.loader = loader_.get();
  memory.on_pressure = [this] {
    std::lock_guard lock(wake_mutex_);
    flush_requested_ = true;
    wake_.notify_one();
  };
  memory_ = std::make_unique<MemoryStore>(std::move(memory));
  flusher_ = std::thread([this] { FlusherLoop(); });
  scanner_ = std::thread([this] {
    ScanOpenBound();
    {
      std::lock_guard lock(scan_mutex_);
      scan_done_ = true;
    }
    scan_done_cv_.notify_all();
  });
}

void DurableStore::TEST_WaitOpenScan() {
  std::unique_lock lock(scan_mutex_);
  scan_done_cv_.wait(lock, [this] { return scan_done_; });
}

bool DurableStore::MayHoldLiveRow(ring::Token token, limiter::TimeNs now) const {
  return now < open_bound_.load(std::memory_order_acquire) ||
         now < row_bounds_[BoundBucket(token)].load(std::memory_order_acquire);
}

void DurableStore::ScanOpenBound() {
  const auto started = std::chrono::steady_clock::now();
  uint64_t rows = 0;
  int64_t bound = std::numeric_limits<int64_t>::min();
  std::string resume;  // the last key read: the next chunk starts after it
  bool resumed = false;
  rocksdb::ReadOptions read;
  read.fill_cache = false;  // one pass over every row: not worth the block cache's room
  while (!stop_scan_.load(std::memory_order_relaxed)) {
    std::shared_lock db_lock(db_mutex_);
    if (db_ == nullptr) return;  // closed, or a reopen failed: the bound stays unknown, every miss reads
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
    if (resumed) {
      it->Seek(resume);
      if (it->Valid() && it->key().ToStringView() == resume) it->Next();
    } else {
      it->SeekToFirst();
    }
    for (size_t n = 0; it->Valid() && n < kScanChunk; it->Next(), ++n) {
      // A value that does not parse may hold anything: it keeps the bound unknown.
      bound = std::max(bound, DecodeExpiry(it->value().ToStringView()).value_or(kNeverExpires));
      resume.assign(it->key().data(), it->key().size());
      resumed = true;
      ++rows;
    }
    if (!it->status().ok()) {
      spdlog::warn("storage: reading the rows' expiries at open failed ({}); every memory miss reads RocksDB",
                   it->status().ToString());
      return;
    }
    if (!it->Valid()) {
      open_bound_.store(bound, std::memory_order_release);
      spdlog::info(
          "storage: read the expiries of the {} rows present at open in {} ms", rows,
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started)
              .count());
      return;
    }
  }
}

DurableStore::~DurableStore() { Close(); }

void DurableStore::FlusherLoop() {
  const auto interval = std::chrono::milliseconds(options_.flush_interval_ms);
  std::unique_lock lock(wake_mutex_);
  bool failing = false;
  while (!stop_) {
    // While writes fail, memory pressure does not wake the flusher early (it would only fail again).
    wake_.wait_for(lock, interval, [this, &failing] { return stop_ || (flush_requested_ && !failing); });
    if (stop_) break;
    flush_requested_ = false;
    lock.unlock();
    // States nobody touches any more go even without traffic: their rows are deleted by this flush.
    memory_->SweepIdle(WallNow(), kSweepPerFlush);
    failing = !FlushOnce(false);
    lock.lock();
  }
}

bool DurableStore::FlushOnce(bool retry_at_once) {
  std::lock_guard flush_lock(flush_mutex_);
  if (db_closed_) return false;
  const auto started = std::chrono::steady_clock::now();
  if (must_reopen_ && !retry_at_once && started < next_retry_) return false;  // not yet time to retry
  std::vector<DirtyRecord> batch = memory_->CollectDirty();
  if (batch.empty() && !must_reopen_) {
    last_flush_success_ns_.store(WallNow(), std::memory_order_relaxed);
    return true;
  }
  // Sorted by row key (deletes before puts of the same key, so a state recreated after a delete
  // wins): RocksDB inserts a sorted batch into its memtable skiplist far faster than a random one.
  std::vector<std::pair<std::string, const DirtyRecord*>> rows;
  rows.reserve(batch.size());
  for (const DirtyRecord& r : batch) rows.emplace_back(EncodeRowKey(r.token, r.entity, r.state.name), &r);
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return a.second->erase && !b.second->erase;
  });
  rocksdb::WriteBatch writes;
  uint64_t puts = 0;
  uint64_t deletes = 0;
  std::string value;  // each value is written into it in turn (WriteBatch copies it)
  for (const auto& [key, r] : rows) {
    if (r->erase) {
      writes.Delete(key);
      ++deletes;
    } else {
      value.clear();
      AppendStateMessage(r->state, r->expiry, value);
      writes.Put(key, value);
      // Before the row can be read: a miss of its key (once the state left memory) must read it until then.
      RaiseTo(row_bounds_[BoundBucket(r->token)], r->expiry);
      ++puts;
    }
  }
  // A database whose write failed is not written again (RocksDB may abort on its failed WAL writer):
  // it is reopened first, once there is room.
  rocksdb::Status status = must_reopen_ ? Reopen(writes.GetDataSize()) : rocksdb::Status::OK();
  if (status.ok() && !batch.empty()) status = WriteRows(&writes);
  const auto took = [started] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - started)
        .count();
  };
  if (!status.ok()) {
    must_reopen_ = true;
    next_retry_ = std::chrono::steady_clock::now() +
                  std::max<std::chrono::milliseconds>(kRetryEvery,
                                                      std::chrono::milliseconds(options_.flush_interval_ms));
    NoteFailure(batch.size(), status);
    if (batch.empty()) return false;
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    memory_->AckFlushed(batch, false);
    ObserveFlush(took());
    return false;
  }
  must_reopen_ = false;
  NoteSuccess();
  if (batch.empty()) {
    last_flush_success_ns_.store(WallNow(), std::memory_order_relaxed);
    return true;
  }
  memory_->AckFlushed(batch, true);
  ObserveFlush(took());
  flushes_.fetch_add(1, std::memory_order_relaxed);
  flushed_states_.fetch_add(puts, std::memory_order_relaxed);
  deleted_rows_.fetch_add(deletes, std::memory_order_relaxed);
  last_flush_success_ns_.store(WallNow(), std::memory_order_relaxed);
  return true;
}

rocksdb::Status DurableStore::WriteRows(rocksdb::WriteBatch* writes) {
  if (const int64_t delay = write_delay_ns_.load(); delay > 0) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(delay));
  }
  if (fail_writes_.load()) return rocksdb::Status::IOError("TEST_FailWrites: injected failure");
  rocksdb::WriteOptions write_options;
  write_options.disableWAL = !options_.rocksdb.use_wal;
  write_options.sync = options_.rocksdb.sync;
  return db_->Write(write_options, writes);  // flush_mutex_ keeps db_ in place
}

rocksdb::Status DurableStore::Reopen(uint64_t batch_bytes) {
  uint64_t memtable_bytes = 0;
  if (db_ != nullptr) db_->GetIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables, &memtable_bytes);
  // On a disk that is still full the open would fail and leave the node without reads: keep the failed
  // database (it still reads) until there is room for what the reopen and the batch will write.
  if (rocksdb::Status room = HasRoomFor(options_.data_dir, memtable_bytes + batch_bytes + kReopenSlackBytes);
      !room.ok()) {
    return room;
  }
  std::unique_lock db_lock(db_mutex_);
  if (db_ != nullptr) {
    carried_ = FiguresLocked();  // its counters go on from where they are (gauges in carried_ are unused)
    // The failed WAL writer makes Close report an error; the acknowledged batches are in the WAL files.
    rocksdb::Status closed = db_->Close();
    if (!closed.ok()) spdlog::warn("storage: closing RocksDB after a write error: {}", closed.ToString());
    db_.reset();
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status opened = rocksdb::DB::Open(MakeRocksOptions(options_.rocksdb), options_.data_dir, &raw);
  if (!opened.ok()) return opened;
  db_.reset(raw);
  reopens_.fetch_add(1, std::memory_order_relaxed);
  spdlog::warn("storage: reopened RocksDB in '{}' after a write error", options_.data_dir);
  return rocksdb::Status::OK();
}

void DurableStore::NoteFailure(size_t states, const rocksdb::Status& status) {
  const auto now = std::chrono::steady_clock::now();
  if (failed_passes_++ == 0) {
    failing_since_ = now;
    last_failure_log_ = now;
    spdlog::error(
        "storage: writing {} dirty states to RocksDB failed ({}); serving from memory, the states stay dirty "
        "and are retried every {} ms",
        states, status.ToString(), std::max<int64_t>(kRetryEvery.count(), options_.flush_interval_ms));
    return;
  }
  if (now - last_failure_log_ < kFailureLogEvery) return;
  last_failure_log_ = now;
  spdlog::error("storage: write-back still failing after {} attempts over {} s ({}); {} states dirty",
                failed_passes_,
                std::chrono::duration_cast<std::chrono::seconds>(now - failing_since_).count(),
                status.ToString(), memory_->DirtyCount());
}

void DurableStore::NoteSuccess() {
  if (failed_passes_ == 0) return;
  const auto failed_for = std::chrono::steady_clock::now() - failing_since_;
  spdlog::warn("storage: write-back resumed after {} failed attempts over {} ms", failed_passes_,
               std::chrono::duration_cast<std::chrono::milliseconds>(failed_for).count());
  failed_passes_ = 0;
}

void DurableStore::ObserveFlush(int64_t ns) {
  ns = std::max<int64_t>(0, ns);
  const auto bucket = static_cast<size_t>(std::lower_bound(kFlushBoundsNs.begin(), kFlushBoundsNs.end(), ns) -
                                          kFlushBoundsNs.begin());
  flush_buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  flush_sum_ns_.fetch_add(ns, std::memory_order_relaxed);
  flush_count_.fetch_add(1, std::memory_order_relaxed);
}

RocksDbFigures DurableStore::ReadRocksDbFigures() const {
  std::shared_lock db_lock(db_mutex_);
  return FiguresLocked();
}

RocksDbFigures DurableStore::FiguresLocked() const {
  RocksDbFigures f;
  const auto carry = [this, &f] {
    for (auto [counter, carried] : {std::pair{&f.user_bytes_written, carried_.user_bytes_written},
                                    std::pair{&f.wal_bytes_written, carried_.wal_bytes_written},
                                    std::pair{&f.stall_slowdowns, carried_.stall_slowdowns},
                                    std::pair{&f.stall_stops, carried_.stall_stops},
                                    std::pair{&f.background_errors, carried_.background_errors}}) {
      *counter = AddCounter(*counter, carried);
    }
    return f;
  };
  if (db_ == nullptr) return carry();
  using Properties = rocksdb::DB::Properties;
  const auto read = [this](const std::string& property, int64_t* out) {
    uint64_t value = 0;
    if (db_->GetIntProperty(property, &value)) *out = static_cast<int64_t>(value);
  };
  read(Properties::kEstimatePendingCompactionBytes, &f.pending_compaction_bytes);
  read(Properties::kNumRunningCompactions, &f.running_compactions);
  read(Properties::kIsWriteStopped, &f.write_stopped);
  read(Properties::kActualDelayedWriteRate, &f.delayed_write_rate);
  read(Properties::kLiveSstFilesSize, &f.live_sst_bytes);
  read(Properties::kCurSizeAllMemTables, &f.memtable_bytes);
  read(Properties::kEstimateNumKeys, &f.estimated_keys);
  read(Properties::kBackgroundErrors, &f.background_errors);
  // Figures RocksDB gives only in its stats maps, as decimal text.
  const auto from_map = [](const std::map<std::string, std::string>& map, const char* key, int64_t* out) {
    auto it = map.find(key);
    if (it == map.end()) return;
    char* end = nullptr;
    const double value = std::strtod(it->second.c_str(), &end);
    if (end != it->second.c_str()) *out = static_cast<int64_t>(value);
  };
  std::map<std::string, std::string> map;
  if (db_->GetMapProperty(Properties::kDBStats, &map)) {
    from_map(map, "db.user_bytes_written", &f.user_bytes_written);
    from_map(map, "db.wal_bytes_written", &f.wal_bytes_written);
  }
  map.clear();
  if (db_->GetMapProperty(Properties::kCFStats, &map)) {
    from_map(map, "io_stalls.total_slowdown", &f.stall_slowdowns);
    from_map(map, "io_stalls.total_stop", &f.stall_stops);
  }
  return carry();
}

void DurableStore::Update(std::string_view entity, std::span<const Slot> slots, limiter::TimeNs now,
                          const std::function<void(std::span<limiter::MergeState* const>)>& fn) {
  memory_->Update(entity, slots, now, fn);
}

std::vector<StoredState> DurableStore::Get(std::string_view entity) { return memory_->Get(entity); }

void DurableStore::GetInto(std::string_view entity, std::vector<StoredState>& out) {
  memory_->GetInto(entity, out);
}

size_t DurableStore::Erase(std::string_view entity, std::optional<std::string_view> name) {
  return memory_->Erase(entity, name);
}

StoreStats DurableStore::Stats() const { return memory_->Stats(); }

bool DurableStore::Absorb(std::string_view entity, const StoredState& state) {
  return memory_->Absorb(entity, state);
}

size_t DurableStore::Discard(std::string_view entity) { return memory_->Discard(entity); }

std::vector<EntityState> DurableStore::ScanTokenRange(ring::Token first, ring::Token last) {
  // Memory first: what it holds (dirty or clean) is at least as new as the row. Then the rows of the
  // range that are neither in memory nor pending deletes (erased, discarded, idle: not to be read back).
  // No flush needed, and no lock held across the read. Memory is scanned in chunks while requests run;
  // each shard's pending deletes are taken after its states, so a state that memory dropped before the
  // scan reached it has its delete either listed or already applied to the rows read below (see
  // MemoryStore::ScanTokenRangeWithDeletes).
  MemoryStore::RangeScan scan = memory_->ScanTokenRangeWithDeletes(first, last);
  std::vector<EntityState> out = std::move(scan.states);
  boost::unordered_flat_set<std::string, TransparentHash, std::equal_to<>> skip;
  skip.reserve(out.size() + scan.pending_deletes.size());
  for (const auto& s : out) skip.insert(EncodeRowKey(s.token, s.entity, s.state.name));
  for (auto& row : scan.pending_deletes) skip.insert(std::move(row));

  rocksdb::ReadOptions read;
  read.fill_cache = false;  // a one-off sweep of the range: keep the hot blocks cached
  read.readahead_size = 2 << 20;
  const std::string upper = last == std::numeric_limits<ring::Token>::max() ? "" : TokenPrefix(last + 1);
  rocksdb::Slice upper_slice(upper);
  if (!upper.empty()) read.iterate_upper_bound = &upper_slice;
  std::shared_lock db_lock(db_mutex_);
  if (db_ == nullptr) {
    load_errors_.fetch_add(1, std::memory_order_relaxed);
    spdlog::error("storage: scanning a token range: {}; the scan has memory only", Loader::kNoDatabase);
    return out;
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read));
  for (it->Seek(TokenPrefix(first)); it->Valid(); it->Next()) {
    std::string_view key = it->key().ToStringView();
    if (skip.contains(key)) continue;
    auto row = DecodeRowKey(key);
    if (!row) continue;
    if (row->token > last) break;
    if (auto s = loader_->Decode(row->entity, row->name, it->value().ToStringView())) {
      out.push_back({std::string(row->entity), row->token, std::move(*s)});
    }
  }
  if (!it->status().ok()) {
    load_errors_.fetch_add(1, std::memory_order_relaxed);
    spdlog::error("storage: scanning a token range in RocksDB failed ({}); the scan is incomplete",
                  it->status().ToString());
  }
  return out;
}

void DurableStore::TEST_CompactAll() {
  rocksdb::CompactRangeOptions options;
  options.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
  std::shared_lock db_lock(db_mutex_);
  if (db_ == nullptr) return;
  rocksdb::Status status = db_->CompactRange(options, nullptr, nullptr);
  if (!status.ok()) spdlog::error("storage: compaction failed: {}", status.ToString());
}

void DurableStore::SetObserver(StateObserver* observer) { memory_->SetObserver(observer); }

void DurableStore::Flush() { FlushOnce(true); }

void DurableStore::Close() {
  if (closed_) return;
  closed_ = true;
  {
    std::lock_guard lock(wake_mutex_);
    stop_ = true;
    wake_.notify_one();
  }
  flusher_.join();
  stop_scan_.store(true, std::memory_order_relaxed);
  scanner_.join();
  memory_->SweepIdle(WallNow(), std::numeric_limits<size_t>::max());  // leave no idle rows behind
  if (!FlushOnce(true)) {
    spdlog::error("storage: final flush failed; {} states were not written", memory_->DirtyCount());
  }
  std::lock_guard flush_lock(flush_mutex_);
  std::unique_lock db_lock(db_mutex_);
  db_closed_ = true;
  if (db_ != nullptr) {
    rocksdb::Status status = db_->Close();
    if (!status.ok()) spdlog::error("storage: closing RocksDB: {}", status.ToString());
    db_.reset();
  }
  spdlog::info("storage: closed '{}'", options_.data_dir);
}

DurabilityStats DurableStore::Durability() const {
  DurabilityStats stats;
  stats.persistent = true;
  stats.flushes = flushes_.load(std::memory_order_relaxed);
  stats.flushed_states = flushed_states_.load(std::memory_order_relaxed);
  stats.deleted_rows = deleted_rows_.load(std::memory_order_relaxed);
  stats.write_errors = write_errors_.load(std::memory_order_relaxed);
  stats.loads = loads_.load(std::memory_order_relaxed);
  stats.load_errors = load_errors_.load(std::memory_order_relaxed);
  stats.load_skips = load_skips_.load(std::memory_order_relaxed);
  stats.dirty = memory_->DirtyCount();
  for (size_t b = 0; b < flush_buckets_.size(); ++b) {
    stats.flush_buckets[b] = flush_buckets_[b].load(std::memory_order_relaxed);
  }
  stats.flush_sum_ns = flush_sum_ns_.load(std::memory_order_relaxed);
  stats.flush_count = flush_count_.load(std::memory_order_relaxed);
  stats.last_flush_success_unix_ns = last_flush_success_ns_.load(std::memory_order_relaxed);
  stats.rocksdb = ReadRocksDbFigures();
  return stats;
}

Status Validate(const StorageOptions& options) {
  if (options.flush_interval_ms == 0) return Status::InvalidArgument("flush interval must be at least 1 ms");
  return Status::OK();
}

Result<std::unique_ptr<Store>> OpenStateStore(const StorageOptions& options) {
  if (!options.data_dir.empty()) {
    Result<std::unique_ptr<DurableStore>> durable = DurableStore::Open(options);
    if (!durable.ok()) return std::move(durable).status();
    return std::unique_ptr<Store>(std::move(durable).value());
  }
  spdlog::warn("storage: no data directory (--data-dir): memory-only, counters do not survive a restart");
  MemoryStoreOptions memory;
  memory.max_keys = options.max_keys;
  memory.max_bytes = options.max_bytes;
  memory.shards = options.shards;
  return std::unique_ptr<Store>(std::make_unique<MemoryStore>(std::move(memory)));
}

}  // namespace ringlimit::storage
