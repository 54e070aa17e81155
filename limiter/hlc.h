// A hybrid logical clock (Kulkarni et al., "Logical Physical Clocks", 2014): versions that follow
// physical time when clocks agree, never go backwards when they do not, and order every event
// after the events it has seen (received timestamps).
//
// Contract
//  - Pure: the physical time is passed in (TimeNs, as everywhere in limiter/); nothing reads a clock.
//  - A timestamp (Hlc) is a uint64: the physical component in milliseconds in the upper 48 bits
//    (Unix epoch: good until the year 10889) and a logical counter in the lower 16. Comparing two
//    Hlc values as integers orders them. 0 is "no timestamp" and is below every timestamp issued.
//  - Monotonic: every value HybridClock returns is greater than every value it returned before and
//    every value it accepted, even when `physical` goes backwards. When the logical counter would
//    overflow (65,536 events in one millisecond) the physical component advances by one
//    millisecond: the clock then runs ahead of physical time by at most that.
//  - Bounded: Update refuses a received timestamp more than `max_offset` ahead of the local
//    physical time (CockroachDB's max-offset rule) and leaves the clock unchanged, so one node
//    whose clock runs an hour ahead cannot drag every other clock (and win every conflict) with it.
//  - Thread safety: HybridClock is safe for concurrent use from several threads without external
//    synchronisation (one atomic word, compare-and-swap). The free functions are reentrant.
#ifndef RINGLIMIT_LIMITER_HLC_H_
#define RINGLIMIT_LIMITER_HLC_H_

#include <atomic>
#include <cstdint>

#include "base/status.h"
#include "limiter/limiter.h"

namespace ringlimit::limiter {

using Hlc = uint64_t;

inline constexpr int kHlcLogicalBits = 16;
inline constexpr uint64_t kHlcLogicalMask = (uint64_t{1} << kHlcLogicalBits) - 1;
inline constexpr int64_t kHlcMaxWallMs = (int64_t{1} << (64 - kHlcLogicalBits)) - 1;

// Components of a timestamp.
inline int64_t HlcWallMs(Hlc h) { return static_cast<int64_t>(h >> kHlcLogicalBits); }
inline uint32_t HlcLogical(Hlc h) { return static_cast<uint32_t>(h & kHlcLogicalMask); }
// REQUIRES: 0 <= wall_ms <= kHlcMaxWallMs, logical <= kHlcLogicalMask.
inline Hlc MakeHlc(int64_t wall_ms, uint32_t logical) {
  return (static_cast<uint64_t>(wall_ms) << kHlcLogicalBits) | logical;
}

// The physical component for `physical` ns: floor to ms, clamped to [0, kHlcMaxWallMs].
int64_t HlcPhysicalMs(TimeNs physical);

// The timestamp of a local event that follows `last` at physical time `physical`.
// Result > last, and HlcWallMs(result) >= HlcPhysicalMs(physical).
[[nodiscard]] Hlc HlcTick(Hlc last, TimeNs physical);

// The timestamp of receiving `received` after `last` at physical time `physical`:
// result > max(last, received). Refused (kInvalidArgument, clock unchanged by the caller) when
// `received` is more than `max_offset` ahead of `physical`. REQUIRES: max_offset >= 0.
[[nodiscard]] Result<Hlc> HlcReceive(Hlc last, TimeNs physical, Hlc received, DurationNs max_offset);

// A clock: the newest timestamp issued or accepted, advanced by Now / Update.
class HybridClock {
 public:
  // REQUIRES: max_offset >= 0 (0 accepts no timestamp ahead of the local physical time).
  explicit HybridClock(DurationNs max_offset) : max_offset_(max_offset) {}
  HybridClock(const HybridClock&) = delete;
  HybridClock& operator=(const HybridClock&) = delete;

  // A local event (a decision, a write) at physical time `physical`.
  [[nodiscard]] Hlc Now(TimeNs physical);

  // A message carrying `received` arrives at physical time `physical`: the clock moves past it
  // and returns the receive event's timestamp, or refuses it (see HlcReceive) without moving.
  [[nodiscard]] Result<Hlc> Update(TimeNs physical, Hlc received);

  // The newest timestamp issued or accepted (0 before the first).
  [[nodiscard]] Hlc Last() const { return last_.load(std::memory_order_acquire); }

  DurationNs max_offset() const { return max_offset_; }

 private:
  // Constant after construction.
  const DurationNs max_offset_;
  // Atomic; advanced by compare-and-swap only.
  std::atomic<Hlc> last_{0};
};

}  // namespace ringlimit::limiter

#endif  // RINGLIMIT_LIMITER_HLC_H_
