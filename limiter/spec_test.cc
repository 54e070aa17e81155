// Names, parsing, validation, fingerprints and state sizes of a LimitSpec.
#include <gtest/gtest.h>

#include "limiter/limiter.h"
#include "limiter/test_util.h"

namespace ringlimit::limiter {
namespace {

using testing::Spec;

TEST(Names, RoundTripAndRejectEverythingElse) {
  for (Algorithm a : testing::AllAlgorithms()) {
    EXPECT_EQ(ParseAlgorithm(AlgorithmName(a)), a);
  }
  for (Mode m : {Mode::kHard, Mode::kSoft, Mode::kShadow, Mode::kDynamic}) {
    EXPECT_EQ(ParseMode(ModeName(m)), m);
  }
  EXPECT_EQ(AlgorithmName(Algorithm::kSlidingWindowApprox), "sliding_window_approx");
  EXPECT_EQ(ModeName(Mode::kShadow), "shadow");
  for (std::string_view bad : {"", "GCRA", "gcra ", "token-bucket", "fixed"}) {
    EXPECT_EQ(ParseAlgorithm(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(ParseMode("Hard"), std::nullopt);
}

// The field Validate names for `spec`, or "" when valid.
std::string InvalidField(const LimitSpec& spec) {
  auto e = Validate(spec);
  if (e) {
    EXPECT_FALSE(e->message.empty());
  }
  return e ? e->field : "";
}

TEST(Validate, EveryRequirement) {
  const LimitSpec ok = Spec(Algorithm::kTokenBucket, 10, kSecond);
  EXPECT_EQ(InvalidField(ok), "");
  auto with = [&](auto change) {
    LimitSpec s = ok;
    change(s);
    return InvalidField(s);
  };
  EXPECT_EQ(with([](LimitSpec& s) { s.algorithm = static_cast<Algorithm>(0); }), "algorithm");
  EXPECT_EQ(with([](LimitSpec& s) { s.algorithm = static_cast<Algorithm>(9); }), "algorithm");
  EXPECT_EQ(with([](LimitSpec& s) { s.limit = 0; }), "limit");
  EXPECT_EQ(with([](LimitSpec& s) { s.limit = kMaxLimit + 1; }), "limit");
  EXPECT_EQ(with([](LimitSpec& s) { s.limit = kMaxLimit; }), "");
  EXPECT_EQ(with([](LimitSpec& s) { s.window = kMinWindow - 1; }), "window");
  EXPECT_EQ(with([](LimitSpec& s) { s.window = kMaxWindow + 1; }), "window");
  EXPECT_EQ(with([](LimitSpec& s) { s.window = -kSecond; }), "window");
  EXPECT_EQ(with([](LimitSpec& s) { s.burst = kMaxLimit + 1; }), "burst");
  EXPECT_EQ(with([](LimitSpec& s) { s.mode = static_cast<Mode>(9); }), "mode");
  EXPECT_EQ(with([](LimitSpec& s) { s.mode = Mode::kSoft, s.soft_pct = 1001; }), "soft_pct");
  EXPECT_EQ(with([](LimitSpec& s) { s.mode = Mode::kSoft, s.soft_pct = 1000; }), "");
  EXPECT_EQ(with([](LimitSpec& s) { s.mode = Mode::kDynamic, s.dynamic_limit = 9; }), "dynamic_limit");
  EXPECT_EQ(with([](LimitSpec& s) { s.mode = Mode::kDynamic, s.dynamic_limit = 10; }), "");
  EXPECT_EQ(with([](LimitSpec& s) { s.max_delay = kSecond; }), "max_delay");  // token_bucket never shapes
  EXPECT_EQ(with([](LimitSpec& s) { s.algorithm = Algorithm::kLeakyBucket, s.max_delay = -1; }), "max_delay");
  EXPECT_EQ(with([](LimitSpec& s) { s.algorithm = Algorithm::kLeakyBucket, s.max_delay = kSecond; }), "");
  EXPECT_EQ(with([](LimitSpec& s) {
              s.algorithm = Algorithm::kLeakyBucket, s.limit = kMaxLimit, s.window = kMinWindow,
              s.max_delay = kSecond;
            }),
            "max_delay");
  // sliding_window: buckets within range and at least 1 ms wide; other algorithms ignore buckets.
  EXPECT_EQ(with([](LimitSpec& s) { s.buckets = 0; }), "");
  EXPECT_EQ(with([](LimitSpec& s) { s.algorithm = Algorithm::kSlidingWindow, s.buckets = 0; }), "buckets");
  EXPECT_EQ(with([](LimitSpec& s) { s.algorithm = Algorithm::kSlidingWindow, s.buckets = kMaxBuckets + 1; }),
            "buckets");
  EXPECT_EQ(with([](LimitSpec& s) { s.algorithm = Algorithm::kSlidingWindow, s.window = 59 * kMillisecond; }),
            "buckets");
}

TEST(Validate, SlidingLogLimitIsCappedWithAClearMessage) {
  LimitSpec spec = Spec(Algorithm::kSlidingLog, kMaxSlidingLogLimit, kSecond);
  EXPECT_EQ(Validate(spec), std::nullopt);
  spec.limit = kMaxSlidingLogLimit + 1;
  auto e = Validate(spec);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->field, "limit");
  EXPECT_NE(e->message.find("10000"), std::string::npos);
  EXPECT_NE(e->message.find("sliding_window"), std::string::npos);
  // The cap covers what soft / dynamic mode would let the log grow to.
  spec.limit = kMaxSlidingLogLimit;
  spec.mode = Mode::kSoft;
  spec.soft_pct = 10;
  EXPECT_EQ(Validate(spec)->field, "soft_pct");
}

TEST(Fingerprint, StableAndSensitiveToMeaningfulFields) {
  LimitSpec a = Spec(Algorithm::kTokenBucket, 10, kSecond);
  EXPECT_EQ(Fingerprint(a), Fingerprint(Spec(Algorithm::kTokenBucket, 10, kSecond)));
  LimitSpec b = a;
  b.burst = 10;  // the effective burst is what matters: default burst = limit
  EXPECT_EQ(Fingerprint(a), Fingerprint(b));
  b.mode = Mode::kSoft;  // modes do not change the state's meaning
  b.soft_pct = 50;
  EXPECT_EQ(Fingerprint(a), Fingerprint(b));
  for (auto change :
       {+[](LimitSpec& s) { s.limit = 11; }, +[](LimitSpec& s) { s.window = 2 * kSecond; },
        +[](LimitSpec& s) { s.burst = 20; }, +[](LimitSpec& s) { s.algorithm = Algorithm::kGcra; }}) {
    LimitSpec c = a;
    change(c);
    EXPECT_NE(Fingerprint(a), Fingerprint(c));
  }
  LimitSpec w = Spec(Algorithm::kSlidingWindow, 10, kSecond);
  LimitSpec w2 = w;
  w2.buckets = 10;
  EXPECT_NE(Fingerprint(w), Fingerprint(w2));
}

TEST(Fingerprint, PinnedValue) {
  // XXH3-64 over a fixed little-endian layout: the same on every node and every build.
  EXPECT_EQ(Fingerprint(Spec(Algorithm::kFixedWindow, 3, 60 * kSecond)), 6581433084860903055ULL);
}

TEST(StateBytes, PerAlgorithm) {
  EXPECT_EQ(StateBytes(Spec(Algorithm::kFixedWindow, 3, kSecond)), 16u);
  for (Algorithm a : {Algorithm::kSlidingWindowApprox, Algorithm::kTokenBucket, Algorithm::kLeakyBucket,
                      Algorithm::kGcra}) {
    EXPECT_EQ(StateBytes(Spec(a, kMaxLimit, kMaxWindow)), 24u);
  }
  LimitSpec log = Spec(Algorithm::kSlidingLog, 100, kSecond);
  EXPECT_EQ(StateBytes(log), 8u + 100 * 8);
  log.count_denied = true;
  EXPECT_EQ(StateBytes(log), 8u + 200 * 8);
  LimitSpec sw = Spec(Algorithm::kSlidingWindow, 100, kSecond);
  EXPECT_EQ(StateBytes(sw), 16u + 61 * 8);
}

}  // namespace
}  // namespace ringlimit::limiter
