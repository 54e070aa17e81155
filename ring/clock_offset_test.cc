#include "ring/clock_offset.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace ringlimit::ring {
namespace {

using std::chrono::hours;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

constexpr WallTime kEpoch = std::chrono::duration_cast<WallTime>(seconds(1'795'000'000));

// An exchange with a member whose clock runs `offset` ahead of ours: the Ping takes `out`, the Ack
// `back`; sent at local wall time `at`.
ClockSample Exchange(nanoseconds offset, nanoseconds out, nanoseconds back, WallTime at = kEpoch) {
  return ClockSample{at, at + out + offset, at + out + back};
}

MonoTime Mono(int64_t ms) { return std::chrono::duration_cast<MonoTime>(milliseconds(ms)); }

TEST(ClockOffsetsTest, SymmetricExchangeGivesTheExactOffset) {
  ClockOffsets clocks(ClockOffsetOptions{});
  ASSERT_TRUE(clocks.Add("n2", Mono(0), Exchange(hours(1), milliseconds(3), milliseconds(3))));
  const std::optional<OffsetEstimate> estimate = clocks.Estimate("n2", Mono(0));
  ASSERT_TRUE(estimate.has_value());
  EXPECT_EQ(estimate->offset, hours(1));
  EXPECT_EQ(estimate->uncertainty, milliseconds(3));
  EXPECT_FALSE(clocks.Estimate("n3", Mono(0)).has_value());
}

TEST(ClockOffsetsTest, TheFastestExchangeWins) {
  ClockOffsets clocks(ClockOffsetOptions{});
  const nanoseconds truth = milliseconds(-250);
  // Queueing on one leg skews the midpoint; the fastest exchange is the closest.
  ASSERT_TRUE(clocks.Add("n2", Mono(0), Exchange(truth, milliseconds(40), milliseconds(1))));
  ASSERT_TRUE(clocks.Add("n2", Mono(1), Exchange(truth, microseconds(300), microseconds(200))));
  ASSERT_TRUE(clocks.Add("n2", Mono(2), Exchange(truth, milliseconds(1), milliseconds(30))));
  const OffsetEstimate estimate = *clocks.Estimate("n2", Mono(3));
  EXPECT_EQ(estimate.uncertainty, microseconds(250));
  EXPECT_LE(std::chrono::abs(estimate.offset - truth), microseconds(50));
}

TEST(ClockOffsetsTest, TheErrorNeverExceedsTheUncertainty) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> leg(50'000, 20'000'000);  // 50 us .. 20 ms, each way
  std::uniform_int_distribution<int64_t> skew(-3'600'000'000'000, 3'600'000'000'000);
  for (int run = 0; run < 200; ++run) {
    ClockOffsets clocks(ClockOffsetOptions{});
    const nanoseconds truth(skew(rng));
    for (int i = 0; i < 8; ++i) {
      ASSERT_TRUE(clocks.Add("n2", Mono(i), Exchange(truth, nanoseconds(leg(rng)), nanoseconds(leg(rng)))));
    }
    const OffsetEstimate estimate = *clocks.Estimate("n2", Mono(8));
    EXPECT_LE(std::chrono::abs(estimate.offset - truth), estimate.uncertainty);
  }
}

TEST(ClockOffsetsTest, ImpossibleOrSlowExchangesAreDropped) {
  ClockOffsets clocks(ClockOffsetOptions{.max_round_trip = milliseconds(100)});
  // The local clock stepped back between send and receive: a negative round trip.
  EXPECT_FALSE(clocks.Add("n2", Mono(0), ClockSample{kEpoch, kEpoch, kEpoch - milliseconds(1)}));
  EXPECT_FALSE(clocks.Add("n2", Mono(0), Exchange(nanoseconds(0), milliseconds(60), milliseconds(60))));
  EXPECT_FALSE(clocks.Estimate("n2", Mono(0)).has_value());
}

TEST(ClockOffsetsTest, OldSamplesAgeOutAndTheWindowIsBounded) {
  // One offset throughout, each sample told apart by its round trip (its uncertainty).
  ClockOffsets clocks(ClockOffsetOptions{.window = 2, .max_age = milliseconds(1'000)});
  const nanoseconds truth = seconds(5);
  ASSERT_TRUE(clocks.Add("n2", Mono(0), Exchange(truth, microseconds(10), microseconds(10))));
  ASSERT_TRUE(clocks.Add("n2", Mono(100), Exchange(truth, milliseconds(5), milliseconds(5))));
  EXPECT_EQ(clocks.Estimate("n2", Mono(200))->uncertainty, microseconds(10));  // the fastest
  // Past max_age the fast one no longer counts.
  EXPECT_EQ(clocks.Estimate("n2", Mono(1'050))->uncertainty, milliseconds(5));
  EXPECT_FALSE(clocks.Estimate("n2", Mono(1'200)).has_value());
  // Beyond the window the oldest goes even if fresher ones are slower.
  ASSERT_TRUE(clocks.Add("n2", Mono(1'300), Exchange(truth, milliseconds(7), milliseconds(7))));
  ASSERT_TRUE(clocks.Add("n2", Mono(1'301), Exchange(truth, milliseconds(9), milliseconds(9))));
  ASSERT_TRUE(clocks.Add("n2", Mono(1'302), Exchange(truth, milliseconds(8), milliseconds(8))));
  EXPECT_EQ(clocks.Estimate("n2", Mono(1'303))->uncertainty, milliseconds(8));
  EXPECT_EQ(clocks.steps(), 0u);
  clocks.Forget("n2");
  EXPECT_FALSE(clocks.Estimate("n2", Mono(1'302)).has_value());
}

TEST(ClockOffsetsTest, AStepOfEitherClockReplacesTheEarlierSamples) {
  ClockOffsets clocks(ClockOffsetOptions{});
  // Fast exchanges before the step; then the member's clock (or this one) steps by an hour.
  ASSERT_TRUE(clocks.Add("n2", Mono(0), Exchange(milliseconds(3), microseconds(100), microseconds(100))));
  ASSERT_TRUE(clocks.Add("n2", Mono(1), Exchange(milliseconds(3), microseconds(200), microseconds(200))));
  // A slow exchange that still fits the estimate (a pause on one leg) is only a worse sample.
  ASSERT_TRUE(clocks.Add("n2", Mono(2), Exchange(milliseconds(3), milliseconds(400), microseconds(100))));
  EXPECT_EQ(clocks.Estimate("n2", Mono(3))->offset, milliseconds(3));
  EXPECT_EQ(clocks.steps(), 0u);
  // After the step, the min-RTT filter alone would keep the fast pre-step samples for max_age.
  ASSERT_TRUE(clocks.Add("n2", Mono(4), Exchange(hours(-1), milliseconds(2), milliseconds(2))));
  const OffsetEstimate after = *clocks.Estimate("n2", Mono(5));
  EXPECT_EQ(after.offset, hours(-1));
  EXPECT_EQ(after.uncertainty, milliseconds(2));
  EXPECT_EQ(clocks.steps(), 1u);
  // Drift within kStepMargin is no step.
  ASSERT_TRUE(clocks.Add("n2", Mono(6),
                         Exchange(hours(-1) + ClockOffsets::kStepMargin, milliseconds(1), milliseconds(1))));
  EXPECT_EQ(clocks.steps(), 1u);
}

// Three nodes; n3's clock is an hour ahead. Each node's view of the two others.
TEST(ClockOffsetsTest, OnlyTheSkewedNodeOfThreeRefuses) {
  const std::vector<std::string> others_of_n1 = {"n2", "n3"};
  const std::vector<std::string> others_of_n3 = {"n1", "n2"};
  ClockOffsets n1(ClockOffsetOptions{});
  ClockOffsets n3(ClockOffsetOptions{});
  EXPECT_EQ(n1.Evaluate(Mono(0), others_of_n1), ClockHealth::kUnknown);  // nothing measured yet
  ASSERT_TRUE(n1.Add("n2", Mono(0), Exchange(milliseconds(2), milliseconds(1), milliseconds(1))));
  ASSERT_TRUE(n1.Add("n3", Mono(0), Exchange(hours(1), milliseconds(1), milliseconds(1))));
  ASSERT_TRUE(n3.Add("n1", Mono(0), Exchange(-hours(1), milliseconds(1), milliseconds(1))));
  ASSERT_TRUE(n3.Add("n2", Mono(0), Exchange(-hours(1), milliseconds(1), milliseconds(1))));
  EXPECT_EQ(n1.Evaluate(Mono(1), others_of_n1), ClockHealth::kOk);
  EXPECT_EQ(n3.Evaluate(Mono(1), others_of_n3), ClockHealth::kSkewed);
  EXPECT_EQ(n3.median_offset(), -hours(1));
  EXPECT_NE(n3.reason().find("3600.000 s"), std::string::npos) << n3.reason();
  // One measurement alone already tells a joining node it is off.
  ClockOffsets joining(ClockOffsetOptions{});
  ASSERT_TRUE(joining.Add("n1", Mono(0), Exchange(-hours(1), milliseconds(1), milliseconds(1))));
  EXPECT_EQ(joining.Evaluate(Mono(1), others_of_n3), ClockHealth::kSkewed);
}

TEST(ClockOffsetsTest, AnOffsetWithinItsUncertaintyDoesNotCount) {
  ClockOffsets clocks(ClockOffsetOptions{.max_offset = milliseconds(500)});
  const std::vector<std::string> others = {"n2"};
  // 600 ms measured, but +- 200 ms: possibly 400 ms, within the bound.
  ASSERT_TRUE(clocks.Add("n2", Mono(0), Exchange(milliseconds(600), milliseconds(200), milliseconds(200))));
  EXPECT_EQ(clocks.Evaluate(Mono(0), others), ClockHealth::kOk);
}

TEST(ClockOffsetsTest, HysteresisAvoidsFlapping) {
  ClockOffsets clocks(ClockOffsetOptions{.max_offset = milliseconds(500), .window = 1});
  const std::vector<std::string> others = {"n2"};
  auto at = [&clocks, &others](int64_t ms, nanoseconds offset) {
    EXPECT_TRUE(clocks.Add("n2", Mono(ms), Exchange(offset, microseconds(100), microseconds(100))));
    return clocks.Evaluate(Mono(ms), others);
  };
  EXPECT_EQ(at(0, milliseconds(450)), ClockHealth::kOk);
  EXPECT_EQ(at(1, milliseconds(520)), ClockHealth::kSkewed);
  EXPECT_EQ(at(2, milliseconds(480)), ClockHealth::kSkewed);  // below the bound, not below half of it
  EXPECT_EQ(at(3, milliseconds(260)), ClockHealth::kSkewed);
  EXPECT_EQ(at(4, milliseconds(200)), ClockHealth::kOk);
  EXPECT_EQ(at(5, milliseconds(480)), ClockHealth::kOk);
}

TEST(ClockOffsetsTest, ZeroMaxOffsetDisablesTheRule) {
  ClockOffsets clocks(ClockOffsetOptions{.max_offset = milliseconds(0)});
  const std::vector<std::string> others = {"n2"};
  ASSERT_TRUE(clocks.Add("n2", Mono(0), Exchange(hours(2), milliseconds(1), milliseconds(1))));
  EXPECT_EQ(clocks.Evaluate(Mono(0), others), ClockHealth::kOk);
  EXPECT_EQ(clocks.median_offset(), hours(2));
}

TEST(ClockOffsetsTest, ValidateRejectsBadOptions) {
  EXPECT_TRUE(Validate(ClockOffsetOptions{}).ok());
  EXPECT_FALSE(Validate(ClockOffsetOptions{.max_offset = milliseconds(-1)}).ok());
  EXPECT_FALSE(Validate(ClockOffsetOptions{.window = 0}).ok());
  EXPECT_FALSE(Validate(ClockOffsetOptions{.max_age = milliseconds(0)}).ok());
  EXPECT_FALSE(Validate(ClockOffsetOptions{.max_round_trip = milliseconds(0)}).ok());
}

}  // namespace
}  // namespace ringlimit::ring
