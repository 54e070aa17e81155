#include "base/published.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace ringlimit {
namespace {

// A value whose parts must agree: a torn or mixed-up read shows as a mismatch.
struct Value {
  Value(uint64_t instance_in, uint64_t n_in) : instance(instance_in), n(n_in), items(n_in % 64, n_in) {}

  [[nodiscard]] bool Consistent() const {
    if (items.size() != n % 64) return false;
    for (uint64_t item : items) {
      if (item != n) return false;
    }
    return true;
  }

  uint64_t instance;
  uint64_t n;
  std::vector<uint64_t> items;
};

std::shared_ptr<const Value> Make(uint64_t instance, uint64_t n) {
  return std::make_shared<Value>(instance, n);
}

TEST(PublishedTest, EmptyUntilTheFirstPublish) {
  Published<Value> published;
  EXPECT_EQ(published.version(), 0u);
  EXPECT_EQ(published.Load(), nullptr);
  EXPECT_EQ(published.Current(), nullptr);
  EXPECT_EQ(published.Cached(), nullptr);
  Published<Value>::Reader reader(published);
  EXPECT_EQ(reader.Get(), nullptr);
}

TEST(PublishedTest, PublishNumbersValuesAndEveryReadSeesTheLatest) {
  Published<Value> published;
  Published<Value>::Reader reader(published);
  EXPECT_EQ(published.Publish(Make(0, 10)), 1u);
  EXPECT_EQ(published.version(), 1u);
  EXPECT_EQ(published.Current()->n, 10u);
  EXPECT_EQ(reader.Get()->n, 10u);
  EXPECT_EQ(published.Publish(Make(0, 11)), 2u);
  EXPECT_EQ(published.Current()->n, 11u);
  EXPECT_EQ(published.Cached()->n, 11u);
  EXPECT_EQ(reader.Get()->n, 11u);
  EXPECT_EQ(published.Load()->n, 11u);
  // A null value is a value too.
  EXPECT_EQ(published.Publish(nullptr), 3u);
  EXPECT_EQ(published.Current(), nullptr);
  EXPECT_EQ(reader.Get(), nullptr);
}

TEST(PublishedTest, PublishVersionInstallsOnlyNewerVersions) {
  Published<Value> published;
  // Version 0 is accepted as the first value, and readers see it although version() does not move.
  EXPECT_TRUE(published.PublishVersion(Make(0, 0), 0));
  EXPECT_EQ(published.version(), 0u);
  ASSERT_NE(published.Current(), nullptr);
  EXPECT_EQ(published.Current()->n, 0u);
  EXPECT_FALSE(published.PublishVersion(Make(0, 1), 0));
  EXPECT_TRUE(published.PublishVersion(Make(0, 5), 5));
  EXPECT_FALSE(published.PublishVersion(Make(0, 4), 4));
  EXPECT_FALSE(published.PublishVersion(Make(0, 6), 5));
  EXPECT_EQ(published.version(), 5u);
  EXPECT_EQ(published.Current()->n, 5u);
  EXPECT_TRUE(published.PublishVersion(Make(0, 6), 6));
  EXPECT_EQ(published.Current()->n, 6u);
  // Publish continues from the caller's numbering.
  EXPECT_EQ(published.Publish(Make(0, 7)), 7u);
}

TEST(PublishedTest, UnchangedReadsReturnTheSameCachedObject) {
  Published<Value> published;
  published.Publish(Make(0, 1));
  const std::shared_ptr<const Value>* first = &published.Cached();
  const long count = first->use_count();
  EXPECT_EQ(&published.Cached(), first);
  EXPECT_EQ(published.Cached().use_count(), count);  // no copy was made

  Published<Value>::Reader reader(published);
  const std::shared_ptr<const Value>* own = &reader.Get();
  EXPECT_EQ(&reader.Get(), own);
  EXPECT_EQ(reader.Get().get(), published.Cached().get());
}

TEST(PublishedTest, ReplacedValuesAreReleasedOnceReadersMoveOn) {
  Published<Value> published;
  published.Publish(Make(0, 1));
  std::weak_ptr<const Value> first = published.Load();
  Published<Value>::Reader reader(published);
  ASSERT_EQ(reader.Get()->n, 1u);
  published.Publish(Make(0, 2));
  EXPECT_FALSE(first.expired());  // the reader still holds it
  ASSERT_EQ(reader.Get()->n, 2u);
  EXPECT_TRUE(first.expired());
}

TEST(PublishedTest, InstancesNeverSeeEachOthersValues) {
  // More instances than cache entries, read interleaved: each read must return its own instance's value.
  constexpr int kInstances = 20;
  std::vector<std::unique_ptr<Published<Value>>> all;
  for (int i = 0; i < kInstances; ++i) {
    all.push_back(std::make_unique<Published<Value>>());
    all.back()->Publish(Make(static_cast<uint64_t>(i), 1));
  }
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kInstances; ++i) {
      const auto& value = all[static_cast<size_t>(i)]->Cached();
      ASSERT_NE(value, nullptr);
      EXPECT_EQ(value->instance, static_cast<uint64_t>(i));
      EXPECT_EQ(value->n, static_cast<uint64_t>(round + 1));
    }
    for (int i = 0; i < kInstances; ++i)
      all[static_cast<size_t>(i)]->Publish(Make(static_cast<uint64_t>(i), round + 2));
  }
}

TEST(PublishedTest, AnInstanceRecreatedAtTheSameAddressStartsEmpty) {
  // What the instance id guards against: a cache keyed by address would return the old instance's value.
  alignas(Published<Value>) unsigned char storage[sizeof(Published<Value>)];
  auto* first = new (storage) Published<Value>();
  first->Publish(Make(1, 1));
  ASSERT_NE(first->Current(), nullptr);
  first->~Published<Value>();
  auto* second = new (storage) Published<Value>();
  EXPECT_EQ(second->Current(), nullptr);
  EXPECT_EQ(second->Cached(), nullptr);
  second->Publish(Make(2, 1));
  EXPECT_EQ(second->Current()->instance, 2u);
  second->~Published<Value>();
}

TEST(PublishedTest, ReadersOnManyThreadsSeeWholeValuesInPublishOrder) {
  // Run under TSan too. Two instances, published by one writer each, read by three threads through all
  // three read paths; every value read must be whole, belong to its instance and never go back.
  constexpr uint64_t kVersions = 300;
  Published<Value> a;
  Published<Value> b;
  a.Publish(Make(0, 1));
  b.Publish(Make(1, 1));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> failures{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      Published<Value>::Reader reader_a(a);
      Published<Value>::Reader reader_b(b);
      uint64_t last[2] = {0, 0};
      for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        const uint64_t which = (i + static_cast<uint64_t>(r)) % 2;
        Published<Value>& source = which == 0 ? a : b;
        Published<Value>::Reader& reader = which == 0 ? reader_a : reader_b;
        std::shared_ptr<const Value> value;
        switch (i % 3) {
          case 0:
            value = source.Current();
            break;
          case 1:
            value = source.Cached();
            break;
          default:
            value = reader.Get();
            break;
        }
        const bool ok =
            value != nullptr && value->instance == which && value->Consistent() && value->n >= last[which];
        if (!ok) failures.fetch_add(1);
        if (value != nullptr) last[which] = value->n;
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::thread writer_b([&] {
    for (uint64_t n = 2; n <= kVersions; ++n) b.Publish(Make(1, n));
  });
  // Let readers read between publishes (bounded: a slow machine only makes the test weaker).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (uint64_t n = 2; n <= kVersions; ++n) {
    const uint64_t target = reads.load() + 5;
    while (reads.load() < target && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    a.Publish(Make(0, n));
  }
  writer_b.join();
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(a.version(), kVersions);
  EXPECT_EQ(b.version(), kVersions);
  EXPECT_EQ(a.Current()->n, kVersions);
  EXPECT_EQ(b.Current()->n, kVersions);
}

}  // namespace
}  // namespace ringlimit
