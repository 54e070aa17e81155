// Executor: the one serial context replication's drivers run on -- a monotonic clock, a queue of work
// run one item at a time, and one-shot timers firing on the same context.
//
// The drivers (Replicator, HandoffManager) keep every piece of their state on their executor: nothing of
// it is touched from another thread, so it needs no mutex, and a driver never sleeps or polls -- it arms
// a timer for the next instant something is due. Two implementations:
//  - AsioExecutor (asio_executor.h): a strand of the node's io_context with steady_timers.
//  - the deterministic simulator's (tests/sim/): simulated time, one event queue for every node.
//
// Thread safety: Now() and Post() may be called from any thread. A Timer's methods only on the context.
// Lifetime: the executor must outlive its timers and every driver using it. A destroyed timer's function
// never runs.
#ifndef RINGLIMIT_REPLICATION_EXECUTOR_H_
#define RINGLIMIT_REPLICATION_EXECUTOR_H_

#include <functional>
#include <memory>

#include "ring/membership.h"

namespace ringlimit::replication {

using MonoTime = ring::MonoTime;  // nanoseconds since an arbitrary fixed instant of a monotonic clock

class Executor {
 public:
  virtual ~Executor() = default;

  // The context's clock. Never goes back.
  [[nodiscard]] virtual MonoTime Now() const = 0;

  // Runs `fn` on the context later -- never inline, even when called on the context.
  virtual void Post(std::function<void()> fn) = 0;

  // A one-shot timer on the context. Arm replaces what was armed before; Cancel forgets it. A function
  // that was replaced or cancelled never runs, even if its instant had already passed.
  class Timer {
   public:
    virtual ~Timer() = default;
    virtual void Arm(MonoTime at, std::function<void()> fn) = 0;
    virtual void Cancel() = 0;
    // Whether a function is armed and has not run yet.
    [[nodiscard]] virtual bool armed() const = 0;
  };
  [[nodiscard]] virtual std::unique_ptr<Timer> NewTimer() = 0;
};

}  // namespace ringlimit::replication

#endif  // RINGLIMIT_REPLICATION_EXECUTOR_H_
