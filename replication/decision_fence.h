// DecisionFence: lets the handoff wait until every decision that may have routed with an older routing
// table has finished charging the store -- with no lock and no sleep on the request path.
//
// A decision brackets its routing and its store updates with Enter/Exit:
//
//   const uint32_t pin = fence.Enter();   // before reading the routing table
//   ... route, decide, charge the store (which marks the keys for replication) ...
//   fence.Exit(pin);
//
// The writer (the handoff's switch, on its executor) publishes the table that changes the routing, then
// calls Wait(done): `done` runs on the executor once every decision that entered before the Wait call
// has exited. A decision that enters after it reads the new table (it reads after Enter; the table was
// published before Wait), so after `done` no decision of the old routing is in flight: the last changes
// of a switched range can be collected.
//
// How: two counters of decisions in flight, selected by the parity of an epoch. Wait advances the epoch
// and waits for the previous parity's counter to drain; the Exit that drains it while a Wait is pending
// posts one check to the executor. Decisions of a later epoch with the same parity only lengthen a wait.
//
// Thread safety: Enter/Exit from any thread; Wait on the executor only. Lifetime: the executor given to
// the constructor must outlive the fence; Exit may be called after the fence's owner stopped (the posted
// check then finds no waiter).
#ifndef RINGLIMIT_REPLICATION_DECISION_FENCE_H_
#define RINGLIMIT_REPLICATION_DECISION_FENCE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "replication/executor.h"

namespace ringlimit::replication {

class DecisionFence {
 public:
  explicit DecisionFence(Executor& executor) : state_(std::make_shared<State>(executor)) {}

  DecisionFence(const DecisionFence&) = delete;
  DecisionFence& operator=(const DecisionFence&) = delete;

  // Request path: one atomic load and one atomic increment.
  [[nodiscard]] uint32_t Enter() const {
    State& s = *state_;
    const uint32_t parity = static_cast<uint32_t>(s.epoch.load() & 1);
    s.active[parity].fetch_add(1);
    return parity;
  }

  // Request path: one atomic decrement (and, rarely, one post to the executor).
  void Exit(uint32_t parity) const {
    State& s = *state_;
    if (s.active[parity].fetch_sub(1) == 1 && s.waiting[parity].load()) {
      s.executor.Post([state = state_] { state->Check(); });
    }
  }

  // Executor: `done` runs (on the executor; possibly before Wait returns) once every decision entered
  // before this call has exited.
  void Wait(std::function<void()> done) {
    State& s = *state_;
    const uint32_t parity = static_cast<uint32_t>(s.epoch.fetch_add(1) & 1);
    s.waiting[parity].store(true);
    s.waits.push_back({parity, std::move(done)});
    s.Check();
  }

  // Executor: forgets the waits in progress (their `done` never runs).
  void Clear() { state_->waits.clear(); }

  // Decisions in flight now (both parities), for tests.
  [[nodiscard]] int64_t TEST_active() const { return state_->active[0].load() + state_->active[1].load(); }

 private:
  struct State {
    explicit State(Executor& e) : executor(e) {}

    // Executor: runs the waits whose parity drained.
    void Check() {
      std::vector<std::function<void()>> ready;
      bool still[2] = {false, false};
      for (auto it = waits.begin(); it != waits.end();) {
        if (active[it->first].load() == 0) {
          ready.push_back(std::move(it->second));
          it = waits.erase(it);
        } else {
          still[it->first] = true;
          ++it;
        }
      }
      for (uint32_t p = 0; p < 2; ++p) {
        if (!still[p]) waiting[p].store(false);
      }
      for (auto& done : ready) done();
    }

    Executor& executor;
    std::atomic<uint64_t> epoch{0};
    std::atomic<int64_t> active[2] = {0, 0};
    std::atomic<bool> waiting[2] = {false, false};
    std::vector<std::pair<uint32_t, std::function<void()>>> waits;  // executor only
  };

  std::shared_ptr<State> state_;  // shared with posted checks
};

}  // namespace ringlimit::replication

#endif  // RINGLIMIT_REPLICATION_DECISION_FENCE_H_
