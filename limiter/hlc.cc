#include "limiter/hlc.h"

#include <algorithm>
#include <string>

#include "limiter/arith.h"

namespace ringlimit::limiter {
namespace {

// The smallest timestamp above `floor` whose physical part is at least `wall_ms`.
Hlc After(Hlc floor, int64_t wall_ms) {
  if (wall_ms > HlcWallMs(floor)) {
    return MakeHlc(wall_ms, 0);
  }
  // floor + 1 carries a full logical counter into the physical part; at the very top it saturates.
  return floor == UINT64_MAX ? floor : floor + 1;
}

}  // namespace

int64_t HlcPhysicalMs(TimeNs physical) {
  const int64_t ms = internal::FloorDiv(physical, kMillisecond);
  return std::clamp<int64_t>(ms, 0, kHlcMaxWallMs);
}

Hlc HlcTick(Hlc last, TimeNs physical) { return After(last, HlcPhysicalMs(physical)); }

Result<Hlc> HlcReceive(Hlc last, TimeNs physical, Hlc received, DurationNs max_offset) {
  const int64_t wall = HlcPhysicalMs(physical);
  const int64_t ahead_ms = HlcWallMs(received) - wall;
  // Whole milliseconds: a received timestamp within the same millisecond as max_offset passes.
  if (ahead_ms > 0 && static_cast<internal::i128>(ahead_ms) * kMillisecond > max_offset) {
    return Status::InvalidArgument("hlc: received timestamp is " + std::to_string(ahead_ms) +
                                   " ms ahead of the local clock, beyond the maximum offset of " +
                                   std::to_string(max_offset / kMillisecond) + " ms");
  }
  return After(std::max(last, received), wall);
}

Hlc HybridClock::Now(TimeNs physical) {
  Hlc last = last_.load(std::memory_order_acquire);
  Hlc next = HlcTick(last, physical);
  while (!last_.compare_exchange_weak(last, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
    next = HlcTick(last, physical);
  }
  return next;
}

Result<Hlc> HybridClock::Update(TimeNs physical, Hlc received) {
  Hlc last = last_.load(std::memory_order_acquire);
  for (;;) {
    Result<Hlc> next = HlcReceive(last, physical, received, max_offset_);
    if (!next.ok()) {
      return next;
    }
    if (last_.compare_exchange_weak(last, *next, std::memory_order_acq_rel, std::memory_order_acquire)) {
      return next;
    }
  }
}

}  // namespace ringlimit::limiter
