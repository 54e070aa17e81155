// OpenStateStore: the one factory the node calls to get its storage tier.
//
//   storage::StorageOptions options;
//   options.data_dir = flags.data_dir;                  // --data-dir ("" = memory-only)
//   options.flush_interval_ms = flags.flush_interval_ms;  // --flush-interval-ms
//   options.max_keys = flags.max_keys;                  // --max-keys
//   Result<std::unique_ptr<storage::Store>> opened = storage::OpenStateStore(options);
//   if (!opened.ok()) { spdlog::critical("{}", opened.status().message()); return 1; }
//   std::unique_ptr<storage::Store> store = std::move(opened).value();
//
// The store must be destroyed (or Close()d) after the last call into it: that writes every dirty state.
#ifndef RINGLIMIT_STORAGE_OPEN_H_
#define RINGLIMIT_STORAGE_OPEN_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "storage/store.h"

namespace ringlimit::storage {

// RocksDB settings for this workload: small values (~50-600 bytes), point reads on a memory miss,
// blind batched writes every flush interval, most rows short-lived (deleted or expired within a window).
struct RocksDbOptions {
  // --- Affects behaviour ---

  // Write-ahead log on, sync off. The WAL makes every flushed batch survive a process crash (kill -9)
  // even though RocksDB's memtable is not yet on disk; without it a crash would lose everything since the
  // last memtable flush (minutes), not just the last flush interval. fsync per batch is off: it only adds
  // protection against machine or kernel crashes, for ~1-10 ms per flush. Default: true / false.
  bool use_wal = true;
  bool sync = false;

  // --- Affects performance ---

  // Shared LRU block cache for reads of evicted or not-yet-loaded states, in bytes. Default: 32 MiB.
  size_t block_cache_bytes = 32u << 20;
  // Bloom filter bits per key (whole-key filter): a miss for a key that was never stored (most first
  // requests of a new entity) costs no data-block read. 0 = no filter. Default: 10 (~1% false positives).
  int bloom_bits_per_key = 10;
  // Memtable size in bytes. Default: 32 MiB.
  size_t write_buffer_bytes = 32u << 20;
  // Background flush + compaction threads. Default: 2.
  int max_background_jobs = 2;
  // Compaction: level style with dynamic level sizes (bounded space amplification; universal would
  // write less but can double the space). The compaction filter drops expired rows whenever their files
  // are compacted, so keys that are gone do not accumulate. Not configurable.
};

struct StorageOptions {
  // --- Affects behaviour ---

  // RocksDB directory (created if missing). Empty: memory-only, nothing survives a restart (logged at
  // start). Default: "" . Fixed at open.
  std::string data_dir;

  // How often dirty states are written to RocksDB, in milliseconds: after kill -9 and restart, every update
  // older than this is there. REQUIRES: >= 1. Default: 100.
  uint32_t flush_interval_ms = 100;

  // Upper bound on states held in memory; 0 = unbounded (see MemoryStoreOptions::max_keys). With a
  // data_dir, evicted states stay on disk and are reloaded on their next use. Default: 0.
  size_t max_keys = 0;

  // Upper bound on the memory states take in bytes; 0 = unbounded (see MemoryStoreOptions::max_bytes).
  // Default: 0.
  size_t max_bytes = 0;

  // --- Affects performance ---

  // Memory-tier shards; 0 = max(16, 4 x hardware threads). Default: 0.
  size_t shards = 0;

  RocksDbOptions rocksdb;
};

// OK when every REQUIRES of `options` holds, else InvalidArgument saying which does not.
[[nodiscard]] Status Validate(const StorageOptions& options);

// Opens the storage tier: a MemoryStore when options.data_dir is empty, otherwise a DurableStore on
// RocksDB in data_dir (lazy loading: returns at once, no scan). Never throws for bad directories.
// Errors: InvalidArgument (an option out of range, see Validate); Corruption (the data directory holds
// data RocksDB cannot read); IOError (the directory cannot be created, read, locked or written). The
// message names the directory and the cause.
[[nodiscard]] Result<std::unique_ptr<Store>> OpenStateStore(const StorageOptions& options);

}  // namespace ringlimit::storage

#endif  // RINGLIMIT_STORAGE_OPEN_H_
