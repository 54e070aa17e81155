#include "limiter/spec_wire.h"

#include <string>

namespace ringlimit::limiter {

state::Algorithm AlgorithmToProto(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kFixedWindow:
      return state::ALGORITHM_FIXED_WINDOW;
    case Algorithm::kSlidingLog:
      return state::ALGORITHM_SLIDING_LOG;
    case Algorithm::kSlidingWindow:
      return state::ALGORITHM_SLIDING_WINDOW;
    case Algorithm::kSlidingWindowApprox:
      return state::ALGORITHM_SLIDING_WINDOW_APPROX;
    case Algorithm::kTokenBucket:
      return state::ALGORITHM_TOKEN_BUCKET;
    case Algorithm::kLeakyBucket:
      return state::ALGORITHM_LEAKY_BUCKET;
    case Algorithm::kGcra:
      return state::ALGORITHM_GCRA;
    case Algorithm::kAnchoredWindow:
      return state::ALGORITHM_ANCHORED_WINDOW;
  }
  // No enumerator: Algorithm{} (0 = ALGORITHM_UNSPECIFIED) or garbage, sent as its number.
  return static_cast<state::Algorithm>(static_cast<int>(algorithm));
}

state::Mode ModeToProto(Mode mode) {
  switch (mode) {
    case Mode::kHard:
      return state::MODE_HARD;
    case Mode::kSoft:
      return state::MODE_SOFT;
    case Mode::kShadow:
      return state::MODE_SHADOW;
    case Mode::kDynamic:
      return state::MODE_DYNAMIC;
  }
  return static_cast<state::Mode>(static_cast<int>(mode));  // no enumerator: sent as its number
}

Result<Algorithm> AlgorithmFromProto(state::Algorithm algorithm) {
  switch (algorithm) {
    case state::ALGORITHM_FIXED_WINDOW:
      return Algorithm::kFixedWindow;
    case state::ALGORITHM_SLIDING_LOG:
      return Algorithm::kSlidingLog;
    case state::ALGORITHM_SLIDING_WINDOW:
      return Algorithm::kSlidingWindow;
    case state::ALGORITHM_SLIDING_WINDOW_APPROX:
      return Algorithm::kSlidingWindowApprox;
    case state::ALGORITHM_TOKEN_BUCKET:
      return Algorithm::kTokenBucket;
    case state::ALGORITHM_LEAKY_BUCKET:
      return Algorithm::kLeakyBucket;
    case state::ALGORITHM_GCRA:
      return Algorithm::kGcra;
    case state::ALGORITHM_ANCHORED_WINDOW:
      return Algorithm::kAnchoredWindow;
    case state::ALGORITHM_UNSPECIFIED:
      return Status::InvalidArgument("algorithm: unspecified");
    // protoc's range markers, not values.
    case state::Algorithm_INT_MIN_SENTINEL_DO_NOT_USE_:
    case state::Algorithm_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return Status::InvalidArgument("algorithm: unknown wire value " +
                                 std::to_string(static_cast<int>(algorithm)));
}

Result<Mode> ModeFromProto(state::Mode mode) {
  switch (mode) {
    case state::MODE_HARD:
      return Mode::kHard;
    case state::MODE_SOFT:
      return Mode::kSoft;
    case state::MODE_SHADOW:
      return Mode::kShadow;
    case state::MODE_DYNAMIC:
      return Mode::kDynamic;
    // protoc's range markers, not values.
    case state::Mode_INT_MIN_SENTINEL_DO_NOT_USE_:
    case state::Mode_INT_MAX_SENTINEL_DO_NOT_USE_:
      break;
  }
  return Status::InvalidArgument("mode: unknown wire value " + std::to_string(static_cast<int>(mode)));
}

void SpecToProto(const LimitSpec& spec, state::LimitSpec* out) {
  out->set_algorithm(AlgorithmToProto(spec.algorithm));
  out->set_limit(spec.limit);
  out->set_window_ns(spec.window);
  out->set_burst(spec.burst);
  out->set_buckets(spec.buckets);
  out->set_max_delay_ns(spec.max_delay);
  out->set_mode(ModeToProto(spec.mode));
  out->set_soft_pct(spec.soft_pct);
  out->set_dynamic_limit(spec.dynamic_limit);
  out->set_count_denied(spec.count_denied);
}

Result<LimitSpec> SpecFromProto(const state::LimitSpec& in) {
  Result<Algorithm> algorithm = AlgorithmFromProto(in.algorithm());
  if (!algorithm.ok()) return std::move(algorithm).status();
  Result<Mode> mode = ModeFromProto(in.mode());
  if (!mode.ok()) return std::move(mode).status();
  LimitSpec spec;
  spec.algorithm = *algorithm;
  spec.limit = in.limit();
  spec.window = in.window_ns();
  spec.burst = in.burst();
  spec.buckets = in.buckets();
  spec.max_delay = in.max_delay_ns();
  spec.mode = *mode;
  spec.soft_pct = in.soft_pct();
  spec.dynamic_limit = in.dynamic_limit();
  spec.count_denied = in.count_denied();
  if (std::optional<InvalidSpec> invalid = Validate(spec)) {
    return Status::InvalidArgument(invalid->field, invalid->message);
  }
  return spec;
}

}  // namespace ringlimit::limiter
