// AsioExecutor: replication's Executor (executor.h) over a strand of an io_context, with steady_timers.
//
// Thread safety: as Executor. Lifetime: the io_context must outlive the executor; work still queued when
// the io_context stops is dropped (a driver's Stop does not rely on it).
#ifndef RINGLIMIT_REPLICATION_ASIO_EXECUTOR_H_
#define RINGLIMIT_REPLICATION_ASIO_EXECUTOR_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "replication/executor.h"

namespace ringlimit::replication {

class AsioExecutor final : public Executor {
 public:
  explicit AsioExecutor(boost::asio::io_context& io) : strand_(boost::asio::make_strand(io)) {}

  AsioExecutor(const AsioExecutor&) = delete;
  AsioExecutor& operator=(const AsioExecutor&) = delete;

  [[nodiscard]] MonoTime Now() const override {
    return std::chrono::duration_cast<MonoTime>(std::chrono::steady_clock::now().time_since_epoch());
  }

  void Post(std::function<void()> fn) override { boost::asio::post(strand_, std::move(fn)); }

  [[nodiscard]] std::unique_ptr<Timer> NewTimer() override { return std::make_unique<AsioTimer>(strand_); }

 private:
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;

  class AsioTimer final : public Timer {
   public:
    explicit AsioTimer(const Strand& strand) : timer_(strand), generation_(std::make_shared<uint64_t>(0)) {}
    ~AsioTimer() override { ++*generation_; }  // a queued completion sees another generation: drops fn

    void Arm(MonoTime at, std::function<void()> fn) override {
      const uint64_t generation = ++*generation_;
      armed_ = true;
      timer_.expires_at(std::chrono::steady_clock::time_point(
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(at)));
      // The completion runs on the strand, as every access to generation_ and armed_ does.
      timer_.async_wait([state = generation_, generation, armed = &armed_,
                         fn = std::move(fn)](boost::system::error_code ec) {
        if (ec || *state != generation) return;
        *armed = false;
        fn();
      });
    }
    void Cancel() override {
      ++*generation_;
      armed_ = false;
      timer_.cancel();
    }
    [[nodiscard]] bool armed() const override { return armed_; }

   private:
    boost::asio::steady_timer timer_;
    std::shared_ptr<uint64_t> generation_;  // shared with queued completions; bumped by Arm/Cancel/destructor
    bool armed_ = false;
  };

  Strand strand_;
};

}  // namespace ringlimit::replication

#endif  // RINGLIMIT_REPLICATION_ASIO_EXECUTOR_H_
