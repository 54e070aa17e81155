#include "node/server/file_watcher.h"

#include <spdlog/spdlog.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace ringlimit::node {

FileWatcher::FileWatcher(boost::asio::io_context& io, std::string path, std::function<void()> on_change)
    : stream_(io), path_(std::move(path)), on_change_(std::move(on_change)) {
  const std::filesystem::path p(path_);
  directory_ = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  name_ = p.filename().string();
}

FileWatcher::~FileWatcher() { Stop(); }

Status FileWatcher::Start() {
  const int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return Status::IOError("inotify_init1", std::strerror(errno));
  // Not IN_CREATE: a file is empty when created; its content is there once it is closed (or renamed in).
  constexpr uint32_t kMask = IN_CLOSE_WRITE | IN_MOVED_TO;
  if (inotify_add_watch(fd, directory_.c_str(), kMask) < 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    return Status::IOError("cannot watch " + directory_, why);
  }
  stream_.assign(fd);
  Read();
  return Status::OK();
}

void FileWatcher::Stop() {
  boost::system::error_code ignored;
  stream_.cancel(ignored);
  stream_.close(ignored);
}

void FileWatcher::Read() {
  stream_.async_read_some(boost::asio::buffer(buffer_),
                          [this](const boost::system::error_code& ec, size_t n) {
                            if (ec) {
                              if (ec != boost::asio::error::operation_aborted)
                                spdlog::warn("watching {}: {}", path_, ec.message());
                              return;
                            }
                            Consume(n);
                            Read();
                          });
}

void FileWatcher::Consume(size_t bytes) {
  bool changed = false;
  size_t at = 0;
  while (at + sizeof(inotify_event) <= bytes) {
    inotify_event event;
    std::memcpy(&event, buffer_.data() + at, sizeof event);
    const char* name = buffer_.data() + at + sizeof(inotify_event);
    const std::string_view event_name(name, event.len == 0 ? 0 : strnlen(name, event.len));
    // The file itself, or Kubernetes' "..data" symlink that a ConfigMap update swaps.
    if (event_name == name_ || event_name == "..data") changed = true;
    at += sizeof(inotify_event) + event.len;
  }
  if (changed) on_change_();
}

}  // namespace ringlimit::node
