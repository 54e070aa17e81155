// LimitSpec, Algorithm and Mode <-> proto/state.proto.
#include "limiter/spec_wire.h"

#include <gtest/gtest.h>

#include "limiter/test_util.h"

namespace ringlimit::limiter {
namespace {

constexpr Mode kAllModes[] = {Mode::kHard, Mode::kSoft, Mode::kShadow, Mode::kDynamic};

// A valid spec of `algorithm` in `mode` with every field away from its default where the pair allows it.
LimitSpec FullSpec(Algorithm algorithm, Mode mode) {
  LimitSpec spec = testing::Spec(algorithm, 100, 10 * kSecond);
  spec.burst = 40;
  spec.buckets = 10;
  spec.mode = mode;
  if (algorithm == Algorithm::kLeakyBucket) spec.max_delay = 250 * kMillisecond;
  if (mode == Mode::kSoft) spec.soft_pct = 25;
  if (mode == Mode::kDynamic) spec.dynamic_limit = 150;
  spec.count_denied = true;
  return spec;
}

TEST(SpecWire, EveryAlgorithmAndModeRoundTrips) {
  for (Algorithm a : testing::AllAlgorithms()) {
    for (Mode m : kAllModes) {
      const LimitSpec spec = FullSpec(a, m);
      ASSERT_EQ(Validate(spec), std::nullopt) << AlgorithmName(a) << "/" << ModeName(m);
      state::LimitSpec wire;
      SpecToProto(spec, &wire);
      // Through bytes, as it travels.
      state::LimitSpec parsed;
      ASSERT_TRUE(parsed.ParseFromString(wire.SerializeAsString()));
      Result<LimitSpec> back = SpecFromProto(parsed);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(*back, spec) << AlgorithmName(a) << "/" << ModeName(m);
    }
  }
}

TEST(SpecWire, EnumsMapByNameNotByAccident) {
  EXPECT_EQ(AlgorithmToProto(Algorithm::kFixedWindow), state::ALGORITHM_FIXED_WINDOW);
  EXPECT_EQ(AlgorithmToProto(Algorithm::kSlidingLog), state::ALGORITHM_SLIDING_LOG);
  EXPECT_EQ(AlgorithmToProto(Algorithm::kSlidingWindow), state::ALGORITHM_SLIDING_WINDOW);
  EXPECT_EQ(AlgorithmToProto(Algorithm::kSlidingWindowApprox), state::ALGORITHM_SLIDING_WINDOW_APPROX);
  EXPECT_EQ(AlgorithmToProto(Algorithm::kTokenBucket), state::ALGORITHM_TOKEN_BUCKET);
  EXPECT_EQ(AlgorithmToProto(Algorithm::kLeakyBucket), state::ALGORITHM_LEAKY_BUCKET);
  EXPECT_EQ(AlgorithmToProto(Algorithm::kGcra), state::ALGORITHM_GCRA);
  EXPECT_EQ(AlgorithmToProto(Algorithm{}), state::ALGORITHM_UNSPECIFIED);  // a State never written
  EXPECT_EQ(ModeToProto(Mode::kHard), state::MODE_HARD);
  EXPECT_EQ(ModeToProto(Mode::kSoft), state::MODE_SOFT);
  EXPECT_EQ(ModeToProto(Mode::kShadow), state::MODE_SHADOW);
  EXPECT_EQ(ModeToProto(Mode::kDynamic), state::MODE_DYNAMIC);
  for (Algorithm a : testing::AllAlgorithms()) EXPECT_EQ(*AlgorithmFromProto(AlgorithmToProto(a)), a);
  for (Mode m : kAllModes) EXPECT_EQ(*ModeFromProto(ModeToProto(m)), m);
}

TEST(SpecWire, UnknownWireEnumValuesAreRejected) {
  // proto3 enums are open: a newer node's algorithm 9 parses into the field as the number 9.
  for (int number : {-1, 9, 42, 1 << 20}) {
    const Result<Algorithm> a = AlgorithmFromProto(static_cast<state::Algorithm>(number));
    EXPECT_TRUE(a.status().IsInvalidArgument()) << number;
    EXPECT_NE(a.status().message().find(std::to_string(number)), std::string::npos) << a.status().message();
  }
  EXPECT_TRUE(AlgorithmFromProto(state::ALGORITHM_UNSPECIFIED).status().IsInvalidArgument());
  EXPECT_TRUE(AlgorithmFromProto(state::Algorithm_INT_MAX_SENTINEL_DO_NOT_USE_).status().IsInvalidArgument());
  for (int number : {-1, 4, 99}) {
    EXPECT_TRUE(ModeFromProto(static_cast<state::Mode>(number)).status().IsInvalidArgument()) << number;
  }

  state::LimitSpec wire;
  SpecToProto(FullSpec(Algorithm::kGcra, Mode::kHard), &wire);
  ASSERT_TRUE(SpecFromProto(wire).ok());
  state::LimitSpec newer_algorithm = wire;
  newer_algorithm.set_algorithm(static_cast<state::Algorithm>(9));
  state::LimitSpec parsed;  // through bytes: the unknown number survives parsing
  ASSERT_TRUE(parsed.ParseFromString(newer_algorithm.SerializeAsString()));
  EXPECT_EQ(static_cast<int>(parsed.algorithm()), 9);
  EXPECT_TRUE(SpecFromProto(parsed).status().IsInvalidArgument());
  state::LimitSpec newer_mode = wire;
  newer_mode.set_mode(static_cast<state::Mode>(4));
  EXPECT_TRUE(SpecFromProto(newer_mode).status().IsInvalidArgument());
  state::LimitSpec unspecified = wire;
  unspecified.clear_algorithm();
  EXPECT_TRUE(SpecFromProto(unspecified).status().IsInvalidArgument());
}

TEST(SpecWire, InvalidSpecsAreRejectedWithTheirField) {
  state::LimitSpec wire;
  SpecToProto(FullSpec(Algorithm::kFixedWindow, Mode::kHard), &wire);
  wire.set_limit(0);
  const Result<LimitSpec> spec = SpecFromProto(wire);
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(spec.status().IsInvalidArgument());
  EXPECT_EQ(spec.status().message().rfind("limit: ", 0), 0u) << spec.status().message();
}

}  // namespace
}  // namespace ringlimit::limiter
