// Everything about a LimitSpec that does not touch a State: names, validation, fingerprint, sizes,
// and the capacities a spec's mode gives a request.
#include <xxhash.h>

#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include "limiter/arith.h"
#include "limiter/judge.h"
#include "limiter/limiter.h"

namespace ringlimit::limiter {
namespace {

using internal::u128;

struct AlgorithmEntry {
  Algorithm algorithm;
  std::string_view name;
};
constexpr std::array<AlgorithmEntry, 8> kAlgorithms = {{
    {Algorithm::kFixedWindow, "fixed_window"},
    {Algorithm::kAnchoredWindow, "anchored_window"},
    {Algorithm::kSlidingLog, "sliding_log"},
    {Algorithm::kSlidingWindow, "sliding_window"},
    {Algorithm::kSlidingWindowApprox, "sliding_window_approx"},
    {Algorithm::kTokenBucket, "token_bucket"},
    {Algorithm::kLeakyBucket, "leaky_bucket"},
    {Algorithm::kGcra, "gcra"},
}};

struct ModeEntry {
  Mode mode;
  std::string_view name;
};
constexpr std::array<ModeEntry, 4> kModes = {{
    {Mode::kHard, "hard"},
    {Mode::kSoft, "soft"},
    {Mode::kShadow, "shadow"},
    {Mode::kDynamic, "dynamic"},
}};

// The largest number of units any mode of any spec may admit at once (Validate enforces it);
// keeps every count below 2^45 so that count * window (< 2^55) stays far below 2^128.
constexpr uint64_t kMaxCapacity = 11 * kMaxLimit;

bool IsBucket(Algorithm a) {
  return a == Algorithm::kTokenBucket || a == Algorithm::kLeakyBucket || a == Algorithm::kGcra;
}

// Capacity before the mode: limit, or the bucket size. Computed in 128 bits so that it can be
// validated before it is trusted.
u128 BaseCapacity(const LimitSpec& spec) {
  switch (spec.algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
      return spec.burst != 0 ? spec.burst : spec.limit;
    case Algorithm::kGcra:
      return static_cast<u128>(spec.burst) + 1;
    case Algorithm::kFixedWindow:
    case Algorithm::kAnchoredWindow:
    case Algorithm::kSlidingLog:
    case Algorithm::kSlidingWindow:
    case Algorithm::kSlidingWindowApprox:
      break;
  }
  return spec.limit;  // the window algorithms (and values with no enumerator, which Validate rejects)
}

// Extra units the mode can ever add on top of the base capacity.
u128 MaxExtra(const LimitSpec& spec, u128 base) {
  switch (spec.mode) {
    case Mode::kSoft:
      return base * spec.soft_pct / 100;
    case Mode::kDynamic:
      return spec.dynamic_limit > spec.limit ? base * (spec.dynamic_limit - spec.limit) / spec.limit : 0;
    case Mode::kHard:
    case Mode::kShadow:
      break;
  }
  return 0;  // hard, shadow (and values with no enumerator, which Validate rejects)
}

std::optional<InvalidSpec> Invalid(std::string field, std::string message) {
  return InvalidSpec{std::move(field), std::move(message)};
}

}  // namespace

std::string_view AlgorithmName(Algorithm algorithm) {
  for (const auto& e : kAlgorithms) {
    if (e.algorithm == algorithm) {
      return e.name;
    }
  }
  return "unknown";
}

std::optional<Algorithm> ParseAlgorithm(std::string_view name) {
  for (const auto& e : kAlgorithms) {
    if (e.name == name) {
      return e.algorithm;
    }
  }
  return std::nullopt;
}

std::string_view ModeName(Mode mode) {
  for (const auto& e : kModes) {
    if (e.mode == mode) {
      return e.name;
    }
  }
  return "unknown";
}

std::optional<Mode> ParseMode(std::string_view name) {
  for (const auto& e : kModes) {
    if (e.name == name) {
      return e.mode;
    }
  }
  return std::nullopt;
}

std::optional<InvalidSpec> Validate(const LimitSpec& spec) {
  if (AlgorithmName(spec.algorithm) == "unknown") {
    return Invalid("algorithm", "unknown algorithm " + std::to_string(static_cast<int>(spec.algorithm)));
  }
  const std::string algo(AlgorithmName(spec.algorithm));
  if (spec.limit < 1 || spec.limit > kMaxLimit) {
    return Invalid("limit", "must be between 1 and " + std::to_string(kMaxLimit));
  }
  if (spec.algorithm == Algorithm::kSlidingLog && spec.limit > kMaxSlidingLogLimit) {
    return Invalid("limit",
                   "sliding_log keeps one timestamp per admitted unit, so its limit must be at most " +
                       std::to_string(kMaxSlidingLogLimit) +
                       "; use sliding_window or sliding_window_approx for larger limits");
  }
  if (spec.window < kMinWindow || spec.window > kMaxWindow) {
    return Invalid("window", "must be between " + std::to_string(kMinWindow) + " ns (1 ms) and " +
                                 std::to_string(kMaxWindow) + " ns (366 days)");
  }
  if (IsBucket(spec.algorithm) && spec.burst > kMaxLimit) {
    return Invalid("burst", "must be at most " + std::to_string(kMaxLimit));
  }
  if (spec.algorithm == Algorithm::kSlidingWindow) {
    if (spec.buckets < 1 || spec.buckets > kMaxBuckets) {
      return Invalid("buckets", "must be between 1 and " + std::to_string(kMaxBuckets));
    }
    if (spec.window / spec.buckets < kMinWindow) {
      return Invalid("buckets", "window / buckets must be at least 1 ms");
    }
  }
  if (spec.max_delay < 0 || spec.max_delay > kMaxWindow) {
    return Invalid("max_delay", "must be between 0 and " + std::to_string(kMaxWindow) + " ns");
  }
  if (spec.max_delay > 0) {
    if (spec.algorithm != Algorithm::kLeakyBucket) {
      return Invalid("max_delay", "only leaky_bucket shapes traffic; must be 0 for " + algo);
    }
    if (static_cast<u128>(spec.max_delay) * spec.limit / static_cast<uint64_t>(spec.window) > kMaxLimit) {
      return Invalid("max_delay", "would queue more than " + std::to_string(kMaxLimit) + " units");
    }
  }
  if (ModeName(spec.mode) == "unknown") {
    return Invalid("mode", "unknown mode " + std::to_string(static_cast<int>(spec.mode)));
  }
  switch (spec.mode) {
    case Mode::kHard:
    case Mode::kShadow:
      break;
    case Mode::kSoft:
      if (spec.soft_pct > 1000) {
        return Invalid("soft_pct", "must be at most 1000 (percent)");
      }
      break;
    case Mode::kDynamic:
      if (spec.dynamic_limit < spec.limit) {
        return Invalid("dynamic_limit", "must be >= limit in dynamic mode");
      }
      if (spec.dynamic_limit > kMaxCapacity) {
        return Invalid("dynamic_limit", "must be at most " + std::to_string(kMaxCapacity));
      }
      break;
  }
  const u128 base = BaseCapacity(spec);
  const u128 max = base + MaxExtra(spec, base);
  const char* mode_field = spec.mode == Mode::kSoft      ? "soft_pct"
                           : spec.mode == Mode::kDynamic ? "dynamic_limit"
                                                         : "burst";
  if (spec.algorithm == Algorithm::kSlidingLog && max > kMaxSlidingLogLimit) {
    return Invalid(mode_field,
                   "sliding_log keeps one timestamp per admitted unit: the mode's ceiling must be at most " +
                       std::to_string(kMaxSlidingLogLimit));
  }
  if (max > kMaxCapacity) {
    return Invalid(mode_field, "the most this limit could admit at once exceeds " +
                                   std::to_string(kMaxCapacity) + " units");
  }
  return std::nullopt;
}

uint64_t Fingerprint(const LimitSpec& spec) {
  // Fixed little-endian layout so the value is the same on every node and every build.
  uint8_t bytes[1 + 8 + 8 + 8 + 4] = {};
  size_t at = 0;
  auto put = [&](uint64_t v, int width) {
    for (int i = 0; i < width; ++i) {
      bytes[at++] = static_cast<uint8_t>(v >> (8 * i));
    }
  };
  put(static_cast<uint8_t>(spec.algorithm), 1);
  put(spec.limit, 8);
  put(static_cast<uint64_t>(spec.window), 8);
  const bool bucket = IsBucket(spec.algorithm);
  put(bucket ? internal::SatU64(BaseCapacity(spec)) : 0, 8);
  put(spec.algorithm == Algorithm::kSlidingWindow ? spec.buckets : 0, 4);
  return XXH3_64bits(bytes, sizeof(bytes));
}

size_t StateBytes(const LimitSpec& spec) {
  switch (spec.algorithm) {
    case Algorithm::kFixedWindow:
      return 16;                      // newest instant seen, count
    case Algorithm::kAnchoredWindow:  // newest instant seen, count, window start
    case Algorithm::kSlidingWindowApprox:
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
    case Algorithm::kGcra:
      return 24;
    case Algorithm::kSlidingWindow:
      return 16 + 8 * (static_cast<size_t>(spec.buckets) + 1);  // instant, total; width + counters
    case Algorithm::kSlidingLog: {
      const u128 base = BaseCapacity(spec);
      // Admitted units never exceed the mode's ceiling; count_denied may record up to
      // kCountDeniedFactor times as many.
      const u128 units =
          (base + MaxExtra(spec, base)) * (spec.count_denied ? internal::kCountDeniedFactor : 1);
      return 8 + 8 * static_cast<size_t>(units);  // newest instant seen + one stamp per unit
    }
  }
  return 0;
}

namespace internal {

Capacities ComputeCapacities(const LimitSpec& spec, double headroom) {
  Capacities caps;
  const u128 base = BaseCapacity(spec);
  caps.base = static_cast<uint64_t>(base);
  const auto extra = static_cast<uint64_t>(MaxExtra(spec, base));
  caps.max = caps.base + extra;
  caps.now = caps.max;
  if (spec.mode == Mode::kDynamic) {
    // headroom is clamped to [0, 1] (NaN reads as 0): ceiling = base + floor(extra * headroom).
    const double h = headroom > 0. ? (headroom < 1. ? headroom : 1.) : 0.;
    const double scaled = std::floor(static_cast<double>(extra) * h);
    caps.now = caps.base + std::min(extra, static_cast<uint64_t>(scaled));
  }
  caps.max_delay = spec.algorithm == Algorithm::kLeakyBucket ? spec.max_delay : 0;
  return caps;
}

}  // namespace internal
}  // namespace ringlimit::limiter
