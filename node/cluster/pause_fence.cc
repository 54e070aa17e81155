#include "node/cluster/pause_fence.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "node/forward/mutation.h"

namespace ringlimit::cluster {
namespace {

int64_t GapNs(const ring::MembershipOptions& membership, std::chrono::milliseconds takeover_after) {
  int64_t gap = std::chrono::nanoseconds(membership.suspicion_timeout).count() / 2;
  if (takeover_after.count() > 0)
    gap = std::min<int64_t>(gap, std::chrono::nanoseconds(takeover_after).count());
  return std::max<int64_t>(500'000'000, gap);
}

}  // namespace

PauseFence::PauseFence(const ring::MembershipOptions& membership, std::chrono::milliseconds takeover_after)
    : gap_ns_(GapNs(membership, takeover_after)),
      window_ns_(2 * std::chrono::nanoseconds(membership.probe_interval).count()) {}

bool PauseFence::SeesPause(int64_t now_ns) {
  const int64_t last = last_tick_ns_.load(std::memory_order_acquire);
  if (last == 0 || now_ns - last <= gap_ns_) return false;
  const int64_t until = now_ns + window_ns_;
  int64_t current = fenced_until_ns_.load(std::memory_order_relaxed);
  while (current < until && !fenced_until_ns_.compare_exchange_weak(current, until)) {
  }
  if (current < now_ns) {  // a new fence, not one already running
    spdlog::warn(
        "cluster: {} ms since the last membership tick: this process was paused; not deciding for {} ms, "
        "until membership has caught up",
        (now_ns - last) / 1'000'000, window_ns_ / 1'000'000);
  }
  return true;
}

void PauseFence::Tick(std::chrono::nanoseconds now) {
  static_cast<void>(SeesPause(now.count()));
  last_tick_ns_.store(now.count(), std::memory_order_release);
}

bool PauseFence::Paused(std::chrono::nanoseconds now) {
  if (mutation::Is(mutation::Mutation::kSkipPauseFence)) return false;
  if (SeesPause(now.count())) return true;
  return now.count() < fenced_until_ns_.load(std::memory_order_acquire);
}

}  // namespace ringlimit::cluster
