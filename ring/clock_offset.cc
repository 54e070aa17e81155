#include "ring/clock_offset.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace ringlimit::ring {

namespace {

using std::chrono::nanoseconds;

std::string Seconds(nanoseconds d) {
  char buffer[48];
  std::snprintf(buffer, sizeof buffer, "%.3f s", static_cast<double>(d.count()) / 1e9);
  return buffer;
}

nanoseconds Abs(nanoseconds d) { return d < nanoseconds::zero() ? -d : d; }

}  // namespace

Status Validate(const ClockOffsetOptions& options) {
  if (options.max_offset.count() < 0) return Status::InvalidArgument("max clock offset: must be >= 0");
  if (options.window < 1) return Status::InvalidArgument("clock sample window: must be >= 1");
  if (options.max_age.count() <= 0) return Status::InvalidArgument("clock sample max age: must be positive");
  if (options.max_round_trip.count() <= 0)
    return Status::InvalidArgument("clock sample max round trip: must be positive");
  return Status::OK();
}

std::string_view ClockHealthName(ClockHealth health) {
  switch (health) {
    case ClockHealth::kUnknown:
      return "unknown";
    case ClockHealth::kOk:
      return "ok";
    case ClockHealth::kSkewed:
      return "skewed";
  }
  return "unknown";
}

ClockOffsets::ClockOffsets(ClockOffsetOptions options) : options_(options) {}

bool ClockOffsets::Add(std::string_view member, MonoTime now, const ClockSample& sample) {
  const nanoseconds round_trip = sample.received - sample.sent;
  if (round_trip < nanoseconds::zero() || round_trip > options_.max_round_trip) return false;
  // t1 - (t0 + t2) / 2, without overflowing on the sum.
  const nanoseconds offset = sample.answered - sample.sent - round_trip / 2;
  auto it = samples_.find(member);
  if (it == samples_.end()) it = samples_.emplace(std::string(member), std::deque<Kept>{}).first;
  // The true offset lies within each sample's offset ± half its round trip. A sample whose interval is
  // apart from the current estimate's (by more than kStepMargin, room for the clocks' drift over max_age)
  // proves that one of the two clocks stepped since: the older samples describe a clock that is gone, and
  // the min-RTT filter would keep choosing them until they age out (10 s of deciding on a stale offset:
  // ringlimit_sim skew_pause_closed seed 114). They are dropped.
  if (const std::optional<OffsetEstimate> best = Estimate(member, now)) {
    if (Abs(offset - best->offset) > round_trip / 2 + best->uncertainty + kStepMargin) {
      it->second.clear();
      ++steps_;
    }
  }
  it->second.push_back(Kept{now, offset, round_trip});
  while (it->second.size() > options_.window) it->second.pop_front();
  return true;
}

void ClockOffsets::Forget(std::string_view member) {
  if (auto it = samples_.find(member); it != samples_.end()) samples_.erase(it);
}

std::optional<OffsetEstimate> ClockOffsets::Estimate(std::string_view member, MonoTime now) const {
  auto it = samples_.find(member);
  if (it == samples_.end()) return std::nullopt;
  const Kept* best = nullptr;
  for (const Kept& kept : it->second) {
    if (now - kept.at > options_.max_age) continue;
    if (best == nullptr || kept.round_trip < best->round_trip) best = &kept;
  }
  if (best == nullptr) return std::nullopt;
  return OffsetEstimate{best->offset, best->round_trip / 2, best->at};
}

ClockHealth ClockOffsets::Evaluate(MonoTime now, std::span<const std::string> members) {
  offsets_.clear();        // keeps its capacity: Evaluate runs at every membership tick
  size_t beyond = 0;       // certainly beyond max_offset
  size_t beyond_half = 0;  // certainly beyond max_offset / 2
  const nanoseconds max = options_.max_offset;
  for (const std::string& member : members) {
    std::optional<OffsetEstimate> estimate = Estimate(member, now);
    if (!estimate) continue;
    offsets_.push_back(estimate->offset);
    const nanoseconds certain = Abs(estimate->offset) - estimate->uncertainty;
    if (certain > max) ++beyond;
    if (certain > max / 2) ++beyond_half;
  }
  measured_ = offsets_.size();
  if (measured_ == 0) {
    median_ = nanoseconds::zero();
    health_ = ClockHealth::kUnknown;
    return health_;
  }
  const size_t n = measured_;
  std::sort(offsets_.begin(), offsets_.end());
  median_ = n % 2 == 1 ? offsets_[n / 2] : offsets_[n / 2 - 1] + (offsets_[n / 2] - offsets_[n / 2 - 1]) / 2;
  if (max == nanoseconds::zero()) {
    health_ = ClockHealth::kOk;
    return health_;
  }
  // Off: a majority must be certainly beyond the bound; back: no majority beyond half of it.
  judged_from_skewed_ = health_ == ClockHealth::kSkewed;
  health_ = 2 * (judged_from_skewed_ ? beyond_half : beyond) > n ? ClockHealth::kSkewed : ClockHealth::kOk;
  return health_;
}

// Written out only when asked (logs, /v1/cluster): Evaluate runs at every membership tick.
std::string ClockOffsets::reason() const {
  if (measured_ == 0) return "no clock offset measured yet";
  const nanoseconds max = options_.max_offset;
  // The cluster's clocks run `median_` ahead of this one: this node's offset is its negation.
  std::string text =
      "clock offset " + Seconds(-median_) + " from the median of " + std::to_string(measured_) + " member(s)";
  if (max == nanoseconds::zero()) return text + "; the maximum offset rule is disabled";
  const nanoseconds threshold = judged_from_skewed_ ? max / 2 : max;
  return text +
         (health_ == ClockHealth::kSkewed ? "; more than half of them are beyond "
                                          : "; no majority of them beyond ") +
         Seconds(threshold) + " (--max-clock-offset-ms " + std::to_string(max.count() / 1'000'000) + ")";
}

}  // namespace ringlimit::ring
