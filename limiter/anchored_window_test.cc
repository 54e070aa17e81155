// anchored_window: a fixed window that starts at the first charged request (Gubernator's TOKEN_BUCKET),
// plain and merged. The generic properties (contract, merge laws, encoding) run over it with the other
// algorithms (AllAlgorithms); these are its own rules.
#include <gtest/gtest.h>

#include "limiter/hlc.h"
#include "limiter/limiter.h"
#include "limiter/merge.h"
#include "limiter/test_util.h"

namespace ringlimit::limiter {
namespace {

using testing::At;
using testing::Spec;

constexpr TimeNs kT0 = 1'700'000'000'123'456'789LL;  // not on any multiple of a second
constexpr DurationNs kMs = kMillisecond;

TEST(AnchoredWindow, StartsAtTheFirstChargeAndGivesEverythingBackAtItsEnd) {
  const LimitSpec spec = Spec(Algorithm::kAnchoredWindow, 2, kSecond);
  State st;
  Decision a = Check(spec, st, At(kT0 + 300 * kMs));
  EXPECT_TRUE(a.allowed);
  EXPECT_EQ(a.remaining, 1u);
  EXPECT_EQ(a.reset_after, kSecond);  // a whole window from the first request
  Decision b = Check(spec, st, At(kT0 + 800 * kMs));
  EXPECT_TRUE(b.allowed);
  EXPECT_EQ(b.reset_after, 500 * kMs);  // the same end: nothing refills before it
  Decision c = Check(spec, st, At(kT0 + 900 * kMs));
  EXPECT_FALSE(c.allowed);
  EXPECT_EQ(c.retry_after, 400 * kMs);
  // At the end everything comes back at once, and the next window starts with the next request.
  Decision d = Check(spec, st, At(kT0 + 1'300 * kMs));
  EXPECT_TRUE(d.allowed);
  EXPECT_EQ(d.remaining, 1u);
  EXPECT_EQ(d.reset_after, kSecond);
  EXPECT_EQ(st.word[2], kT0 + 1'300 * kMs);
}

TEST(AnchoredWindow, ARequestThatChargesNothingStartsNoWindow) {
  const LimitSpec spec = Spec(Algorithm::kAnchoredWindow, 2, kSecond);
  State st;
  Decision peek = Check(spec, st, At(kT0, 0));
  EXPECT_TRUE(peek.allowed);
  EXPECT_EQ(peek.reset_after, 0);
  EXPECT_EQ(Check(spec, st, At(kT0 + 700 * kMs, 3)).retry_after, kNever);  // can never fit: not charged
  Decision first = Check(spec, st, At(kT0 + 900 * kMs));
  EXPECT_EQ(first.reset_after, kSecond);  // the window starts here, not at the peek
}

TEST(AnchoredWindow, MergedCopiesCountEveryWindowUntilTheLastOneEnds) {
  const LimitSpec spec = Spec(Algorithm::kAnchoredWindow, 4, kSecond);
  // Two sides of a partition each start a window (at 0 ms and at 600 ms) and charge 2.
  MergeState left, right;
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(CheckMerged(spec, left, 1, MakeHlc(1000, static_cast<uint32_t>(i)), At(kT0)).allowed);
    EXPECT_TRUE(
        CheckMerged(spec, right, 2, MakeHlc(1600, static_cast<uint32_t>(i)), At(kT0 + 600 * kMs)).allowed);
  }
  MergeState merged = Merge(left, right);
  // Both windows count, in the one that started last (never fewer units than either side saw): nothing
  // more is admitted until it ends, at 1.6 s.
  EXPECT_FALSE(PeekMerged(spec, merged, At(kT0 + 700 * kMs)).allowed);
  EXPECT_FALSE(PeekMerged(spec, merged, At(kT0 + 1'100 * kMs)).allowed);
  EXPECT_EQ(PeekMerged(spec, merged, At(kT0 + 1'100 * kMs)).retry_after, 500 * kMs);
  Decision next = CheckMerged(spec, merged, 1, MakeHlc(2600, 0), At(kT0 + 1'600 * kMs));
  EXPECT_TRUE(next.allowed);
  EXPECT_EQ(next.remaining, 3u);
  EXPECT_EQ(next.reset_after, kSecond);
  // Every copy of the merged state round-trips through its encoding.
  Result<MergeState> back = ParseMergeState(EncodeMergeState(merged));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, merged);
}

TEST(AnchoredWindow, AWindowLengthChangeKeepsTheCountWhileTheWindowStillRunsUnderTheNewLength) {
  LimitSpec spec = Spec(Algorithm::kAnchoredWindow, 3, kSecond);
  State st;
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Check(spec, st, At(kT0)).allowed);
  spec.window = 10 * kSecond;
  EXPECT_FALSE(Check(spec, st, At(kT0 + 2 * kSecond)).allowed);  // 2 s < 10 s: still the same window
  spec.window = kSecond;
  EXPECT_TRUE(Check(spec, st, At(kT0 + 2 * kSecond)).allowed);  // 2 s >= 1 s: a new window
}

}  // namespace
}  // namespace ringlimit::limiter
