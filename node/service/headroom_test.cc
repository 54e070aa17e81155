// Headroom: signals, expiry, the table bound, and lock-free reads racing writes.
#include "node/service/headroom.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace ringlimit::node {
namespace {

TEST(HeadroomTest, SignalsLastUntilTheyExpire) {
  Headroom headroom;
  EXPECT_EQ(headroom.Get("api", 0), 0.);
  ASSERT_TRUE(headroom.Set("api", 0.5, /*expires_at=*/100, /*now=*/0));
  EXPECT_EQ(headroom.Get("api", 99), 0.5);
  EXPECT_EQ(headroom.Get("api", 100), 0.);
  EXPECT_EQ(headroom.Get("other", 0), 0.);
  ASSERT_TRUE(headroom.Set("api", 0.25, 200, 150));  // renewed in place
  EXPECT_EQ(headroom.Get("api", 150), 0.25);
}

TEST(HeadroomTest, AFullTableMakesRoomOnlyByPurgingExpiredSignals) {
  Headroom headroom(/*max_entries=*/2);
  ASSERT_TRUE(headroom.Set("a", 0.1, 100, 0));
  ASSERT_TRUE(headroom.Set("b", 0.2, 200, 0));
  EXPECT_FALSE(headroom.Set("c", 0.3, 300, 50));  // both live
  EXPECT_TRUE(headroom.Set("a", 0.4, 300, 50));   // a known name is always updated
  EXPECT_TRUE(headroom.Set("c", 0.3, 300, 250));  // b has expired: purged
  EXPECT_EQ(headroom.Get("c", 250), 0.3);
  EXPECT_EQ(headroom.Get("a", 250), 0.4);
  EXPECT_EQ(headroom.Get("b", 0), 0.);
}

TEST(HeadroomTest, InstancesDoNotShareSignals) {
  Headroom one;
  Headroom two;
  ASSERT_TRUE(one.Set("api", 0.5, 100, 0));
  EXPECT_EQ(one.Get("api", 0), 0.5);
  EXPECT_EQ(two.Get("api", 0), 0.);
}

TEST(HeadroomTest, ReadsRacingWritesSeeWholeSignals) {
  // Run under TSan too. The writer alternates (0.25, live) and (0.75, expired): a torn read would
  // return 0.75 (the new value with the old expiry).
  Headroom headroom;
  constexpr limiter::TimeNs kNow = 1'000;
  ASSERT_TRUE(headroom.Set("api", 0.25, kNow + 1, kNow));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> torn{0};
  std::atomic<uint64_t> reads{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        const double h = headroom.Get("api", kNow);
        if (h != 0.25 && h != 0.) torn.fetch_add(1);
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  // At least 20,000 writes, and on until the readers have read a while (on a loaded machine they may not
  // have been scheduled at all during the first 20,000), bounded by a deadline.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (int i = 0; i < 20'000 || (reads.load(std::memory_order_relaxed) < 1'000 &&
                                 std::chrono::steady_clock::now() < deadline);
       ++i) {
    ASSERT_TRUE(i % 2 == 0 ? headroom.Set("api", 0.75, kNow - 1, kNow)
                           : headroom.Set("api", 0.25, kNow + 1, kNow));
    if (i % 100 == 0) {
      ASSERT_TRUE(headroom.Set("n" + std::to_string(i), 0.5, kNow + 1, kNow));  // a new name: republished
    }
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
}

}  // namespace
}  // namespace ringlimit::node
