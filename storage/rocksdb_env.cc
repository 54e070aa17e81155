#include "storage/rocksdb_env.h"

#include <fcntl.h>
#include <rocksdb/env.h>
#include <rocksdb/status.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace ringlimit::storage {
namespace {

class SpdlogLogger final : public rocksdb::Logger {
 public:
  SpdlogLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL) {}

  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override { Write(spdlog::level::info, format, ap); }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    switch (level) {
      case rocksdb::InfoLogLevel::WARN_LEVEL:
        Write(spdlog::level::warn, format, ap);
        break;
      case rocksdb::InfoLogLevel::ERROR_LEVEL:
        Write(spdlog::level::err, format, ap);
        break;
      case rocksdb::InfoLogLevel::FATAL_LEVEL:
        Write(spdlog::level::critical, format, ap);
        break;
      default:
        Write(spdlog::level::info, format, ap);
        break;
    }
  }

 private:
  static void Write(spdlog::level::level_enum level, const char* format, va_list ap) {
    char buffer[1024];
    va_list copy;
    va_copy(copy, ap);
    const int n = std::vsnprintf(buffer, sizeof buffer, format, copy);
    va_end(copy);
    if (n < 0) return;
    std::string_view text(buffer, std::min(static_cast<size_t>(n), sizeof buffer - 1));
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
    spdlog::log(level, "rocksdb: {}", text);
  }
};

}  // namespace

std::shared_ptr<rocksdb::Logger> SpdlogRocksDbLogger() {
  static const std::shared_ptr<rocksdb::Logger> kLogger = std::make_shared<SpdlogLogger>();
  return kLogger;
}

rocksdb::Status HasRoomFor(const std::string& dir, uint64_t bytes) {
  const std::string path = dir + "/" + kSpaceProbeFile;
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOSPC || error == EDQUOT)
      return rocksdb::Status::NoSpace("creating " + path, strerror(error));
    return rocksdb::Status::IOError("creating " + path, strerror(error));
  }
  const int error = bytes == 0 ? 0 : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  ::close(fd);
  ::unlink(path.c_str());
  if (error == 0 || error == EOPNOTSUPP || error == EINVAL) return rocksdb::Status::OK();
  const std::string what = "allocating " + std::to_string(bytes) + " bytes in " + dir;
  if (error == ENOSPC || error == EDQUOT) return rocksdb::Status::NoSpace(what, strerror(error));
  return rocksdb::Status::IOError(what, strerror(error));
}

}  // namespace ringlimit::storage
