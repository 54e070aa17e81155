// What DurableStore needs around RocksDB to survive a full disk.
//
// RocksDB's own info log (the LOG file) is a WritableFileWriter in the data directory: on a full disk
// its append fails, and the next line it logs reuses the failed writer, which Debian's RocksDB 7.8
// (built with assertions) answers with an abort in WritableFileWriter::AssertFalseAndGetStatusForPrevError.
// SpdlogRocksDbLogger sends RocksDB's log to spdlog instead, so nothing but data lives on that disk.
//
// HasRoomFor is the check the store makes before it closes and reopens a database whose write failed:
// reopening on a disk that is still full would leave the node without a database to read from.
//
// Thread safety: both are safe to use from any thread.
#ifndef RINGLIMIT_STORAGE_ROCKSDB_ENV_H_
#define RINGLIMIT_STORAGE_ROCKSDB_ENV_H_

#include <cstdint>
#include <memory>
#include <string>

namespace rocksdb {
class Logger;
class Status;
}  // namespace rocksdb

namespace ringlimit::storage {

// A RocksDB logger that writes messages of WARN and above to spdlog, prefixed "rocksdb: ". Shared by
// every database of the process (it keeps no state).
[[nodiscard]] std::shared_ptr<rocksdb::Logger> SpdlogRocksDbLogger();

// OK when `bytes` can be allocated in `dir` now: a probe file of that size is allocated
// (posix_fallocate) and removed. NoSpace when the allocation fails for lack of space (or quota), an
// IOError for any other failure to create the probe. A filesystem that cannot preallocate says OK.
[[nodiscard]] rocksdb::Status HasRoomFor(const std::string& dir, uint64_t bytes);

// The probe file's name in the data directory (a leftover of a crash during a probe is removed at open).
inline constexpr const char* kSpaceProbeFile = "ringlimit-space-probe";

}  // namespace ringlimit::storage

#endif  // RINGLIMIT_STORAGE_ROCKSDB_ENV_H_
