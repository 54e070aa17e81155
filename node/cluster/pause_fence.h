// PauseFence: how a node notices that its process was just paused (stopped by the scheduler, a VM or
// SIGSTOP) and stays out of deciding until membership has caught up (Cluster::Paused; the Forwarder asks it
// through its ForwardHost).
//
// The membership ticks every probe_interval / 4. A gap of more than `gap` since the last tick means the
// process was stopped, not busy, and for long enough that another holder may have decided its keys
// meanwhile. The node is then fenced from that instant for `window` (two probe intervals: long enough for
// one membership round trip to tell it whether it was declared dead meanwhile, after which its ranges
// become incoming). A check arriving before the late tick runs sees the gap too (Paused).
//
// No clock of its own: every call takes the steady time, so the deterministic simulator (tests/sim/) runs
// the fence a node runs on its simulated clock.
//
// Thread safety: every method is safe for concurrent use (two atomics; Paused is lock-free).
#ifndef RINGLIMIT_NODE_CLUSTER_PAUSE_FENCE_H_
#define RINGLIMIT_NODE_CLUSTER_PAUSE_FENCE_H_

#include <atomic>
#include <chrono>
#include <cstdint>

#include "ring/membership.h"

namespace ringlimit::cluster {

class PauseFence {
 public:
  // The gap that means a pause: max(500 ms, min(suspicion timeout / 2, takeover_after)) -- within a shorter
  // pause the senders are still waiting for this node or retrying it, and a check whose sender gave up is
  // not decided (Forwarder, "Deadlines"). takeover_after 0: not given (the suspicion timeout alone).
  // The window: 2 probe intervals.
  PauseFence(const ring::MembershipOptions& membership, std::chrono::milliseconds takeover_after);

  PauseFence(const PauseFence&) = delete;
  PauseFence& operator=(const PauseFence&) = delete;

  // A membership tick at steady time `now`: fences the node if the gap since the last tick says it was
  // paused, then records the tick.
  void Tick(std::chrono::nanoseconds now);

  // Whether the node must not decide at `now`: fenced, or the gap since the last tick already says it was
  // paused (then it is fenced from now on).
  [[nodiscard]] bool Paused(std::chrono::nanoseconds now);

  [[nodiscard]] std::chrono::nanoseconds gap() const { return std::chrono::nanoseconds(gap_ns_); }
  [[nodiscard]] std::chrono::nanoseconds window() const { return std::chrono::nanoseconds(window_ns_); }

 private:
  // Whether the gap since the last tick says the process was paused; fences it if so.
  bool SeesPause(int64_t now_ns);

  // Constant after construction.
  const int64_t gap_ns_;
  const int64_t window_ns_;

  // The steady time of the last tick (0: none yet), and until when the node stays fenced.
  std::atomic<int64_t> last_tick_ns_{0};
  std::atomic<int64_t> fenced_until_ns_{0};
};

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_CLUSTER_PAUSE_FENCE_H_
