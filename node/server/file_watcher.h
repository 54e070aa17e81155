// FileWatcher: calls back when a file may have changed -- written and closed, replaced by a rename (how
// editors and `mv` save), or its directory's `..data` link swapped (how Kubernetes updates a
// mounted ConfigMap). It watches the file's directory with inotify, on the caller's io_context: no thread
// of its own, no polling. The callback decides what a change means (ringlimitd rereads --rls-config and
// keeps the old configuration when the new file is bad).
//
// Thread safety: Start, Stop and the callback run on the io_context's thread. Lifetime: Stop (or the
// destructor) before the io_context dies.
#ifndef RINGLIMIT_NODE_SERVER_FILE_WATCHER_H_
#define RINGLIMIT_NODE_SERVER_FILE_WATCHER_H_

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <string>

#include "base/status.h"

namespace ringlimit::node {

class FileWatcher {
 public:
  FileWatcher(boost::asio::io_context& io, std::string path, std::function<void()> on_change);
  ~FileWatcher();
  FileWatcher(const FileWatcher&) = delete;
  FileWatcher& operator=(const FileWatcher&) = delete;

  // Starts watching. Errors: IOError when inotify cannot watch the directory.
  [[nodiscard]] Status Start();
  void Stop();

 private:
  void Read();
  void Consume(size_t bytes);

  boost::asio::posix::stream_descriptor stream_;
  const std::string path_;
  std::string directory_;
  std::string name_;
  std::function<void()> on_change_;
  alignas(8) std::array<char, 4096> buffer_{};
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVER_FILE_WATCHER_H_
