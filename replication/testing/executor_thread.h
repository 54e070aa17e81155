// ExecutorThread: an AsioExecutor with an io_context and one thread of its own, for the tests of
// replication/ that run the drivers on real time (the deterministic simulator runs them on simulated
// time instead). FlushAndWait: Replicator::Flush for a test thread.
//
// Thread safety: executor() as Executor. Lifetime: destroy the drivers using the executor first.
#ifndef RINGLIMIT_REPLICATION_TESTING_EXECUTOR_THREAD_H_
#define RINGLIMIT_REPLICATION_TESTING_EXECUTOR_THREAD_H_

#include <spdlog/spdlog.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <thread>

#include "replication/asio_executor.h"
#include "replication/replicator.h"

namespace ringlimit::replication::testing {

class ExecutorThread {
 public:
  ExecutorThread() : work_(io_.get_executor()), executor_(io_), thread_([this] { io_.run(); }) {}
  ~ExecutorThread() {
    work_.reset();
    io_.stop();
    thread_.join();
  }
  ExecutorThread(const ExecutorThread&) = delete;
  ExecutorThread& operator=(const ExecutorThread&) = delete;

  Executor& executor() { return executor_; }

  // Waits until everything posted to the executor before this call has run: what a task publishes in
  // steps (a progress snapshot, then a routing table) is then all published. False after `timeout`.
  bool Sync(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    auto ran = std::make_shared<std::promise<void>>();
    std::future<void> done = ran->get_future();
    executor_.Post([ran] { ran->set_value(); });
    return done.wait_for(timeout) == std::future_status::ready;
  }

 private:
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  AsioExecutor executor_;
  // spdlog creates its default logger at the first log line, in a function-local static whose guard
  // Debian's (uninstrumented) libspdlog checks with a load ThreadSanitizer cannot see: made here, on the
  // test's thread, before any executor thread logs, as ringlimitd's main does before its threads.
  const bool logger_made_ = spdlog::default_logger_raw() != nullptr;
  std::thread thread_;
};

// Replicator::Flush, waited for from a thread other than the executor's. False also when the executor
// did not answer within `timeout` + 5 s.
inline bool FlushAndWait(Replicator& replicator, std::chrono::milliseconds timeout) {
  auto result = std::make_shared<std::promise<bool>>();
  std::future<bool> future = result->get_future();
  replicator.Flush(timeout, [result](bool ok) { result->set_value(ok); });
  if (future.wait_for(timeout + std::chrono::seconds(5)) != std::future_status::ready) return false;
  return future.get();
}

}  // namespace ringlimit::replication::testing

#endif  // RINGLIMIT_REPLICATION_TESTING_EXECUTOR_THREAD_H_
