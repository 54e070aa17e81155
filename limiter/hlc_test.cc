#include "limiter/hlc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>

namespace ringlimit::limiter {
namespace {

constexpr TimeNs kT0 = 1'700'000'000LL * kSecond;

TEST(Hlc, FollowsPhysicalTimeWhenItAdvances) {
  HybridClock clock(500 * kMillisecond);
  const Hlc a = clock.Now(kT0);
  EXPECT_EQ(HlcWallMs(a), kT0 / kMillisecond);
  EXPECT_EQ(HlcLogical(a), 0u);
  const Hlc b = clock.Now(kT0 + 3 * kMillisecond);
  EXPECT_EQ(HlcWallMs(b), kT0 / kMillisecond + 3);
  EXPECT_EQ(HlcLogical(b), 0u);
  EXPECT_EQ(clock.Last(), b);
}

TEST(Hlc, CountsLogicallyWithinOneMillisecondAndWhenTimeGoesBack) {
  HybridClock clock(0);
  const Hlc a = clock.Now(kT0);
  const Hlc b = clock.Now(kT0 + 10);  // same millisecond
  const Hlc c = clock.Now(kT0 - kSecond);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_EQ(HlcWallMs(c), HlcWallMs(a));
  EXPECT_EQ(HlcLogical(c), 2u);
}

TEST(Hlc, LogicalOverflowCarriesIntoThePhysicalPart) {
  Hlc h = MakeHlc(1000, static_cast<uint32_t>(kHlcLogicalMask));
  const Hlc next = HlcTick(h, 1000 * kMillisecond);
  EXPECT_GT(next, h);
  EXPECT_EQ(HlcWallMs(next), 1001);
  EXPECT_EQ(HlcLogical(next), 0u);
  EXPECT_EQ(HlcTick(UINT64_MAX, 0), UINT64_MAX);  // saturates, never wraps
}

TEST(Hlc, PhysicalTimeIsClampedToTheRepresentableRange) {
  EXPECT_EQ(HlcPhysicalMs(-5), 0);
  EXPECT_EQ(HlcPhysicalMs(std::numeric_limits<TimeNs>::min()), 0);
  EXPECT_EQ(HlcPhysicalMs(std::numeric_limits<TimeNs>::max()),
            std::numeric_limits<TimeNs>::max() / kMillisecond);
}

TEST(Hlc, ReceiveOrdersAfterTheReceivedTimestamp) {
  HybridClock clock(500 * kMillisecond);
  const Hlc local = clock.Now(kT0);
  const Hlc remote = MakeHlc(kT0 / kMillisecond + 200, 7);  // 200 ms ahead: within the offset
  Result<Hlc> r = clock.Update(kT0, remote);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(*r, remote);
  EXPECT_GT(*r, local);
  EXPECT_EQ(HlcWallMs(*r), HlcWallMs(remote));
  EXPECT_GT(clock.Now(kT0), *r);  // the next local event follows the receipt
}

TEST(Hlc, ReceiveRefusesATimestampBeyondTheMaximumOffset) {
  HybridClock clock(500 * kMillisecond);
  const Hlc before = clock.Now(kT0);
  const Hlc remote = MakeHlc(kT0 / kMillisecond + 3'600'000, 0);  // an hour ahead
  Result<Hlc> r = clock.Update(kT0, remote);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(r.status().IsInvalidArgument());
  EXPECT_EQ(clock.Last(), before);  // unchanged
  // Exactly at the offset is accepted; one millisecond more is not.
  EXPECT_TRUE(clock.Update(kT0, MakeHlc(kT0 / kMillisecond + 500, 0)).ok());
  EXPECT_FALSE(clock.Update(kT0, MakeHlc(kT0 / kMillisecond + 501, 0)).ok());
  // A timestamp behind the local clock is always accepted.
  EXPECT_TRUE(clock.Update(kT0, MakeHlc(1, 0)).ok());
}

TEST(Hlc, MonotonicOverRandomPhysicalTimesAndMessages) {
  std::mt19937_64 rng(7);
  HybridClock a(kSecond), b(kSecond);
  Hlc last_a = 0, last_b = 0;
  TimeNs pa = kT0, pb = kT0, newest_physical = kT0;
  for (int i = 0; i < 20000; ++i) {
    // Physical clocks wander, including backwards, by up to +-50 ms per step.
    pa += static_cast<TimeNs>(rng() % (100 * kMillisecond)) - 50 * kMillisecond;
    pb += static_cast<TimeNs>(rng() % (100 * kMillisecond)) - 50 * kMillisecond;
    newest_physical = std::max({newest_physical, pa, pb});
    if (rng() % 3 == 0) {
      const Hlc sent = a.Now(pa);
      ASSERT_GT(sent, last_a);
      last_a = sent;
      Result<Hlc> got = b.Update(pb, sent);
      if (got.ok()) {
        ASSERT_GT(*got, sent);
        ASSERT_GT(*got, last_b);
        last_b = *got;
      } else {
        ASSERT_EQ(b.Last(), last_b);
      }
    } else {
      const Hlc h = b.Now(pb);
      ASSERT_GT(h, last_b);
      last_b = h;
    }
    // Neither clock runs ahead of the newest physical time either side has seen.
    ASSERT_LE(HlcWallMs(last_b), newest_physical / kMillisecond);
  }
}

}  // namespace
}  // namespace ringlimit::limiter
