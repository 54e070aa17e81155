// ClockOffsets: what one node knows of the other members' wall clocks, and the max-offset rule that
// tells it when its own clock is too far from the cluster's to decide (CockroachDB's rule).
//
// Samples come from membership traffic (ring/membership.h): every Ping carries its sender's wall-clock
// time, every Ack echoes it and adds the answerer's. At the prober, an Ack yields, NTP-style,
//   t0 = Ping sent (local wall), t1 = answered (remote wall), t2 = Ack received (local wall)
//   offset = t1 - (t0 + t2) / 2          (remote minus local; positive: the member runs ahead)
//   uncertainty = (t2 - t0) / 2          (the true offset lies within offset ± uncertainty)
// A member's estimate is its sample with the smallest round trip among the last `window` taken within
// `max_age` (a min-RTT filter: queueing only ever adds delay, so the fastest exchange is the most exact).
// The filter assumes the offset holds still; a sample that contradicts the estimate (their intervals do
// not meet: either clock stepped) starts the member's samples afresh.
//
// The rule (Evaluate): among the members with an estimate, this node's clock is off when more than half
// are "far": |offset| - uncertainty > max_offset (so only an offset certainly beyond the bound counts).
// Once off, it is back only when no more than half are beyond max_offset / 2 (hysteresis: no flapping
// around the bound). With no estimate at all (alone, or before the first Ack) the clock is not judged
// and the node decides. In a cluster of two, either node's skew makes both refuse (neither can tell
// which clock is wrong); three or more nodes single out the skewed one.
//
// No clock reads: every time is an argument (MonoTime on the caller's steady clock, WallTime as read
// from the wall clocks), so tests and the simulator drive it.
//
// Thread safety: not thread-safe; the owner serialises calls (the Cluster runs it on its strand).
#ifndef RINGLIMIT_RING_CLOCK_OFFSET_H_
#define RINGLIMIT_RING_CLOCK_OFFSET_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "ring/membership.h"

namespace ringlimit::ring {

using WallTime = std::chrono::nanoseconds;  // a wall-clock reading: since the Unix epoch

struct ClockOffsetOptions {
  // --- Affects behaviour ---
  // The largest offset from the cluster at which this node still decides (--max-clock-offset-ms).
  // 0 disables the rule (offsets are still measured and shown). REQUIRES: >= 0. Default: 500 ms.
  std::chrono::milliseconds max_offset{500};
  // Samples kept per member; the estimate is the one with the smallest round trip. REQUIRES: >= 1.
  // Default: 8 (with 200 ms probes, the last few seconds).
  size_t window = 8;
  // Samples older than this are not used; a member without a newer one has no estimate. REQUIRES: > 0.
  // Default: 10 s.
  std::chrono::milliseconds max_age{10'000};
  // Samples with a longer round trip are dropped (their uncertainty says nothing). REQUIRES: > 0.
  // Default: 1 s.
  std::chrono::milliseconds max_round_trip{1'000};
};

// OK when every REQUIRES of `options` holds, else InvalidArgument saying what is wrong.
[[nodiscard]] Status Validate(const ClockOffsetOptions& options);

// One Ping/Ack exchange with a member, as wall-clock readings.
struct ClockSample {
  WallTime sent{};      // t0: this node sent the Ping (its wall clock)
  WallTime answered{};  // t1: the member answered it (the member's wall clock)
  WallTime received{};  // t2: this node received the Ack (its wall clock)
};

struct OffsetEstimate {
  std::chrono::nanoseconds offset{};       // member minus this node; positive: the member runs ahead
  std::chrono::nanoseconds uncertainty{};  // half the sample's round trip
  MonoTime measured_at{};                  // when the sample was taken (steady clock)

  bool operator==(const OffsetEstimate&) const = default;
};

enum class ClockHealth : uint8_t {
  kUnknown = 0,  // no estimate yet: not judged, the node decides
  kOk = 1,       // within the bound of most members
  kSkewed = 2,   // beyond it: the node refuses to decide
};

// "unknown", "ok", "skewed".
[[nodiscard]] std::string_view ClockHealthName(ClockHealth health);

class ClockOffsets {
 public:
  // How far apart a new sample's interval (offset ± half its round trip) may be from the estimate's before
  // it is taken as a step of one of the clocks (Add): the drift of two free-running clocks over max_age.
  static constexpr std::chrono::milliseconds kStepMargin{2};

  explicit ClockOffsets(ClockOffsetOptions options);

  ClockOffsets(const ClockOffsets&) = delete;
  ClockOffsets& operator=(const ClockOffsets&) = delete;

  // Records an exchange with `member` taken at `now`. Returns false (and keeps nothing) when its round
  // trip is negative (the local wall clock stepped back) or longer than max_round_trip. A sample that
  // cannot be reconciled with the member's estimate (their intervals apart by more than kStepMargin: a
  // clock stepped) replaces the member's earlier samples (counted in steps()).
  bool Add(std::string_view member, MonoTime now, const ClockSample& sample);

  // Drops what is known of `member` (it died, left or restarted: its clock may have changed).
  void Forget(std::string_view member);

  // The current estimate of `member`'s offset, if it has a sample within max_age of `now`.
  [[nodiscard]] std::optional<OffsetEstimate> Estimate(std::string_view member, MonoTime now) const;

  // Applies the rule over `members` (the ring members other than this node) at `now` and returns the
  // new health (also health()). reason() then says why, for logs and errors.
  ClockHealth Evaluate(MonoTime now, std::span<const std::string> members);

  [[nodiscard]] ClockHealth health() const { return health_; }
  // Why the last Evaluate judged as it did, e.g. "clock offset -3600.002 s (median of 2 members),
  // beyond the maximum 0.500 s".
  [[nodiscard]] std::string reason() const;
  // The median of the members' offsets at the last Evaluate (0 without estimates): how far the cluster's
  // clocks are from this node's (positive: they run ahead of it).
  [[nodiscard]] std::chrono::nanoseconds median_offset() const { return median_; }
  [[nodiscard]] const ClockOffsetOptions& options() const { return options_; }
  // Clock steps seen since construction (Add).
  [[nodiscard]] uint64_t steps() const { return steps_; }

 private:
  struct Kept {
    MonoTime at{};
    std::chrono::nanoseconds offset{};
    std::chrono::nanoseconds round_trip{};
  };

  // Constant after construction.
  const ClockOffsetOptions options_;

  std::map<std::string, std::deque<Kept>, std::less<>> samples_;  // by member, oldest first
  ClockHealth health_ = ClockHealth::kUnknown;
  std::chrono::nanoseconds median_{};
  // What reason() writes out, from the last Evaluate.
  size_t measured_ = 0;              // members with an estimate
  bool judged_from_skewed_ = false;  // the rule applied was the one for coming back (half the bound)
  uint64_t steps_ = 0;
  std::vector<std::chrono::nanoseconds> offsets_;  // Evaluate's scratch, kept for its capacity
};

}  // namespace ringlimit::ring

#endif  // RINGLIMIT_RING_CLOCK_OFFSET_H_
