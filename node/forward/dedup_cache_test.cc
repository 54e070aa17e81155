#include "node/forward/dedup_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ringlimit::cluster {
namespace {

using std::chrono::milliseconds;
using MonoTime = DedupCache::MonoTime;

MonoTime At(int64_t ms) { return std::chrono::duration_cast<MonoTime>(milliseconds(ms)); }

DedupCache::Waiter Ignore() {
  return [](std::optional<std::string>) {};
}

TEST(DedupCacheTest, FirstAttemptIsNewAndRetryGetsTheFirstAnswer) {
  DedupCache cache(DedupOptions{});
  const RequestId id{7, 1};
  EXPECT_EQ(cache.Begin(id, At(0), Ignore()).outcome, DedupCache::Outcome::kNew);
  cache.Finish(id, "first");
  const DedupCache::Lookup again = cache.Begin(id, At(10), Ignore());
  EXPECT_EQ(again.outcome, DedupCache::Outcome::kDone);
  EXPECT_EQ(again.answer, "first");
  // A later Finish (a duplicate decision) never replaces the first answer.
  cache.Finish(id, "second");
  EXPECT_EQ(cache.Begin(id, At(20), Ignore()).answer, "first");
  const DedupStats stats = cache.stats();
  EXPECT_EQ(stats.inserted, 1u);
  EXPECT_EQ(stats.hits, 2u);
  EXPECT_EQ(stats.size, 1u);
}

TEST(DedupCacheTest, DifferentIdsAreIndependent) {
  DedupCache cache(DedupOptions{});
  EXPECT_EQ(cache.Begin({7, 1}, At(0), Ignore()).outcome, DedupCache::Outcome::kNew);
  EXPECT_EQ(cache.Begin({7, 2}, At(0), Ignore()).outcome, DedupCache::Outcome::kNew);
  EXPECT_EQ(cache.Begin({8, 1}, At(0), Ignore()).outcome, DedupCache::Outcome::kNew);
  EXPECT_EQ(cache.stats().size, 3u);
}

TEST(DedupCacheTest, RetryWhileInProgressWaitsForTheFirstAnswer) {
  DedupCache cache(DedupOptions{});
  const RequestId id{1, 1};
  ASSERT_EQ(cache.Begin(id, At(0), Ignore()).outcome, DedupCache::Outcome::kNew);
  std::vector<std::optional<std::string>> got;
  auto waiter = [&got](std::optional<std::string> answer) { got.push_back(std::move(answer)); };
  EXPECT_EQ(cache.Begin(id, At(1), waiter).outcome, DedupCache::Outcome::kWaiting);
  EXPECT_EQ(cache.Begin(id, At(2), waiter).outcome, DedupCache::Outcome::kWaiting);
  EXPECT_TRUE(got.empty());
  cache.Finish(id, "decided");
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], "decided");
  EXPECT_EQ(got[1], "decided");
  EXPECT_EQ(cache.stats().waits, 2u);
}

TEST(DedupCacheTest, AbandonRefusesWaitersAndForgetsTheId) {
  DedupCache cache(DedupOptions{});
  const RequestId id{1, 1};
  ASSERT_EQ(cache.Begin(id, At(0), Ignore()).outcome, DedupCache::Outcome::kNew);
  std::vector<std::optional<std::string>> got;
  ASSERT_EQ(
      cache.Begin(id, At(1), [&got](std::optional<std::string> a) { got.push_back(std::move(a)); }).outcome,
      DedupCache::Outcome::kWaiting);
  cache.Abandon(id);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_FALSE(got[0].has_value());
  // Nothing was charged: a later attempt is decided afresh.
  EXPECT_EQ(cache.Begin(id, At(2), Ignore()).outcome, DedupCache::Outcome::kNew);
  EXPECT_EQ(cache.stats().abandoned, 1u);
}

TEST(DedupCacheTest, IdsExpireAfterTheirTtl) {
  DedupCache cache(DedupOptions{.ttl = milliseconds(100), .capacity = 64, .shards = 4});
  const RequestId id{3, 3};
  ASSERT_EQ(cache.Begin(id, At(0), Ignore()).outcome, DedupCache::Outcome::kNew);
  cache.Finish(id, "a");
  EXPECT_EQ(cache.Begin(id, At(99), Ignore()).outcome, DedupCache::Outcome::kDone);
  EXPECT_EQ(cache.Begin(id, At(100), Ignore()).outcome, DedupCache::Outcome::kNew);
  EXPECT_EQ(cache.stats().expired, 1u);
}

TEST(DedupCacheTest, ExpiryOfAnInProgressIdRefusesItsWaiters) {
  DedupCache cache(DedupOptions{.ttl = milliseconds(100), .capacity = 1, .shards = 1});
  ASSERT_EQ(cache.Begin({1, 1}, At(0), Ignore()).outcome, DedupCache::Outcome::kNew);
  int refused = 0;
  ASSERT_EQ(cache
                .Begin({1, 1}, At(10),
                       [&refused](std::optional<std::string> a) {
                         if (!a) ++refused;
                       })
                .outcome,
            DedupCache::Outcome::kWaiting);
  EXPECT_EQ(cache.Begin({1, 2}, At(200), Ignore()).outcome, DedupCache::Outcome::kNew);
  EXPECT_EQ(refused, 1);
  cache.Finish({1, 1}, "late");  // forgotten: nothing to do
  EXPECT_EQ(cache.stats().size, 1u);
}

TEST(DedupCacheTest, CapacityEvictsTheOldestOfAShard) {
  DedupCache cache(DedupOptions{.ttl = milliseconds(60'000), .capacity = 4, .shards = 1});
  for (uint64_t i = 1; i <= 6; ++i) {
    ASSERT_EQ(cache.Begin({9, i}, At(static_cast<int64_t>(i)), Ignore()).outcome, DedupCache::Outcome::kNew);
    cache.Finish({9, i}, std::to_string(i));
  }
  const DedupStats stats = cache.stats();
  EXPECT_EQ(stats.size, 4u);
  EXPECT_EQ(stats.evicted, 2u);
  EXPECT_EQ(cache.Begin({9, 6}, At(7), Ignore()).answer, "6");
  EXPECT_EQ(cache.Begin({9, 3}, At(7), Ignore()).answer, "3");
  EXPECT_EQ(cache.Begin({9, 1}, At(7), Ignore()).outcome, DedupCache::Outcome::kNew);
}

TEST(DedupCacheTest, SizeStaysBoundedUnderChurn) {
  DedupCache cache(DedupOptions{.ttl = milliseconds(60'000), .capacity = 256, .shards = 16});
  for (uint64_t i = 1; i <= 100'000; ++i) {
    (void)cache.Begin({5, i}, At(static_cast<int64_t>(i / 1000)), Ignore());
    if (i % 7 == 0) {
      cache.Abandon({5, i});
    } else {
      cache.Finish({5, i}, "x");
    }
  }
  EXPECT_LE(cache.stats().size, 256u);
}

TEST(DedupCacheTest, ConcurrentRetriesOfOneIdChargeOnce) {
  DedupCache cache(DedupOptions{});
  constexpr int kThreads = 8;
  constexpr uint64_t kIds = 2'000;
  std::atomic<int> charged{0}, answered{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (uint64_t i = 1; i <= kIds; ++i) {
        DedupCache::Lookup found = cache.Begin({42, i}, At(0), [&answered](std::optional<std::string> a) {
          if (a) answered.fetch_add(1);
        });
        if (found.outcome == DedupCache::Outcome::kNew) {
          charged.fetch_add(1);
          cache.Finish({42, i}, "ok");
          answered.fetch_add(1);
        } else if (found.outcome == DedupCache::Outcome::kDone) {
          answered.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(charged.load(), static_cast<int>(kIds));
  EXPECT_EQ(answered.load(), kThreads * static_cast<int>(kIds));
}

// The answer of id {hi, lo}: some longer than a slot holds (kept on the locked side).
std::string AnswerOf(uint64_t lo) {
  return "answer-" + std::to_string(lo) + std::string(lo % 3 == 0 ? 300 : 20, '.');
}

// Many threads Begin the same ids at once. The first winner of every fourth id abandons it (its waiters get
// nullopt, a later Begin wins again), every other winner finishes it. With no eviction and no expiry:
// exactly one kNew per id at a time (and for good once finished), every kDone and waiter answer is the id's
// answer, every waiter is called exactly once. With eviction (!entries_live), only the answers and the
// waiters' calls are checked.
void Hammer(DedupOptions options, uint64_t ids, bool entries_live) {
  DedupCache cache(options);
  constexpr int kThreads = 8;
  struct PerId {
    std::atomic<int> live{0};  // winners deciding or finished
    std::atomic<int> news{0};  // kNew outcomes
    std::atomic<bool> abandoned{false};
  };
  std::vector<PerId> per_id(ids + 1);
  std::atomic<int> waiters_registered{0}, waiter_calls{0}, overlapping_wins{0}, wrong_answers{0};
  std::vector<std::unique_ptr<std::atomic<int>>> calls;  // per waiter: times called
  for (int i = 0; i < kThreads * static_cast<int>(ids); ++i)
    calls.push_back(std::make_unique<std::atomic<int>>(0));
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();  // start together
      for (uint64_t n = 1; n <= ids; ++n) {
        const uint64_t i = n;  // all in step: the same id at once
        std::atomic<int>& my_calls = *calls[t * ids + (i - 1)];
        auto waiter = [&, i](std::optional<std::string> answer) {
          my_calls.fetch_add(1);
          waiter_calls.fetch_add(1);
          // nullopt: the attempt was abandoned, or (under eviction) its entry replaced.
          const bool refusal_ok = per_id[i].abandoned.load() || !entries_live;
          if (answer.has_value() ? *answer != AnswerOf(i) : !refusal_ok) wrong_answers.fetch_add(1);
        };
        DedupCache::Lookup found = cache.Begin({99, i}, At(0), waiter);
        switch (found.outcome) {
          case DedupCache::Outcome::kNew: {
            per_id[i].news.fetch_add(1);
            if (per_id[i].live.fetch_add(1) != 0 && entries_live) overlapping_wins.fetch_add(1);
            for (int y = 0; y < 3; ++y) std::this_thread::yield();  // let retries arrive meanwhile
            if (i % 4 == 0 && !per_id[i].abandoned.exchange(true)) {
              per_id[i].live.fetch_sub(1);
              cache.Abandon({99, i});
            } else {
              cache.Finish({99, i}, AnswerOf(i));
            }
            break;
          }
          case DedupCache::Outcome::kDone:
            if (found.answer != AnswerOf(i)) wrong_answers.fetch_add(1);
            break;
          case DedupCache::Outcome::kWaiting:
            waiters_registered.fetch_add(1);
            break;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong_answers.load(), 0);
  EXPECT_EQ(waiter_calls.load(), waiters_registered.load());
  for (const auto& c : calls) ASSERT_LE(c->load(), 1);
  if (entries_live) {
    EXPECT_EQ(overlapping_wins.load(), 0);
    uint64_t remembered = 0;  // ids with a finished entry: all but those abandoned and not won again
    for (uint64_t i = 1; i <= ids; ++i) {
      // An abandoned id is won again by a Begin that came after the Abandon, if any did.
      const int news = per_id[i].news.load();
      ASSERT_TRUE(news == 1 || (per_id[i].abandoned.load() && news == 2)) << "id " << i << ": " << news;
      if (!per_id[i].abandoned.load() || news == 2) ++remembered;
    }
    EXPECT_EQ(cache.stats().size, remembered);
  }
  // The stress reached the rare paths it is about.
  EXPECT_GT(waiters_registered.load(), 0);
  EXPECT_GT(cache.stats().abandoned, 0u);
}

TEST(DedupCacheTest, StressOneNewPerIdAndEveryWaiterCalledOnce) {
  for (int round = 0; round < 3; ++round) Hammer(DedupOptions{}, 3'000, /*entries_live=*/true);
  // One bucket: every id contends for the same 8 slots.
  Hammer(DedupOptions{.capacity = 8, .shards = 1}, 8, /*entries_live=*/true);
}

TEST(DedupCacheTest, StressUnderEvictionCallsEveryWaiterOnce) {
  // 64 slots for 3,000 ids: entries in progress are replaced, their waiters refused; answers stay right.
  Hammer(DedupOptions{.capacity = 64, .shards = 2}, 3'000, /*entries_live=*/false);
}

TEST(DedupCacheTest, ValidateRejectsBadOptions) {
  EXPECT_TRUE(Validate(DedupOptions{}).ok());
  EXPECT_FALSE(Validate(DedupOptions{.ttl = milliseconds(0)}).ok());
  EXPECT_FALSE(Validate(DedupOptions{.capacity = 4, .shards = 16}).ok());
  EXPECT_FALSE(Validate(DedupOptions{.shards = 0}).ok());
  EXPECT_FALSE(Validate(DedupOptions{.shards = 2000}).ok());
}

}  // namespace
}  // namespace ringlimit::cluster
