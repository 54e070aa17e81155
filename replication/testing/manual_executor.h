// ManualExecutor: an Executor driven by the test -- a fake clock it advances, posted work and due timers
// run only from RunReady(). Single-threaded apart from Post (which may come from any thread).
#ifndef RINGLIMIT_REPLICATION_TESTING_MANUAL_EXECUTOR_H_
#define RINGLIMIT_REPLICATION_TESTING_MANUAL_EXECUTOR_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "replication/executor.h"

namespace ringlimit::replication::testing {

class ManualExecutor final : public Executor {
 public:
  [[nodiscard]] MonoTime Now() const override { return now_; }
  void Post(std::function<void()> fn) override {
    std::lock_guard lock(mu_);
    posted_.push_back(std::move(fn));
  }
  [[nodiscard]] std::unique_ptr<Timer> NewTimer() override { return std::make_unique<ManualTimer>(*this); }

  // Moves the clock to `now` (never back).
  void AdvanceTo(MonoTime now) { now_ = std::max(now_, now); }

  // Runs posted work and due timers until none is left; returns how many functions ran.
  size_t RunReady() {
    size_t ran = 0;
    for (;;) {
      std::function<void()> fn;
      {
        std::lock_guard lock(mu_);
        if (!posted_.empty()) {
          fn = std::move(posted_.front());
          posted_.pop_front();
        }
      }
      if (!fn) {
        auto due = timers_.begin();
        if (due == timers_.end() || due->first.first > now_) return ran;
        fn = std::move(due->second);
        timers_.erase(due);
      }
      fn();
      ++ran;
    }
  }

 private:
  using Key = std::pair<MonoTime, uint64_t>;  // (instant, arm sequence)

  class ManualTimer final : public Timer {
   public:
    explicit ManualTimer(ManualExecutor& e) : e_(e) {}
    ~ManualTimer() override { Cancel(); }
    void Arm(MonoTime at, std::function<void()> fn) override {
      Cancel();
      key_ = Key{at, ++e_.seq_};
      e_.timers_.emplace(*key_, [this, fn = std::move(fn)] {
        key_.reset();
        fn();
      });
    }
    void Cancel() override {
      if (key_.has_value()) e_.timers_.erase(*key_);
      key_.reset();
    }
    [[nodiscard]] bool armed() const override { return key_.has_value(); }

   private:
    ManualExecutor& e_;
    std::optional<Key> key_;
  };

  MonoTime now_{0};
  uint64_t seq_ = 0;
  std::map<Key, std::function<void()>> timers_;
  std::mutex mu_;  // guards posted_
  std::deque<std::function<void()>> posted_;
};

}  // namespace ringlimit::replication::testing

#endif  // RINGLIMIT_REPLICATION_TESTING_MANUAL_EXECUTOR_H_
