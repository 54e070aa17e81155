#include "node/cluster/dedup_cache.h"

#include <algorithm>
#include <utility>

namespace ringlimit::cluster {

namespace {

struct IdHash {
  size_t operator()(const RequestId& id) const {
    // The counter varies fastest; mix both halves (splitmix64 finaliser).
    uint64_t x = id.lo ^ (id.hi * 0x9e3779b97f4a7c15ULL);
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return static_cast<size_t>(x);
  }
};

}  // namespace

struct DedupCache::Shard {
  struct Entry {
    MonoTime begun_at{};
    bool done = false;
    std::string answer;           // when done
    std::vector<Waiter> waiters;  // while in progress
  };
  struct Queued {
    RequestId id;
    MonoTime begun_at{};
  };

  // State below is protected by mutex.
  std::mutex mutex;
  std::unordered_map<RequestId, Entry, IdHash> entries;
  std::deque<Queued> fifo;  // in Begin order; may hold ids already abandoned (skipped when popped)
};

Status Validate(const DedupOptions& options) {
  if (options.ttl.count() <= 0) return Status::InvalidArgument("dedup ttl: must be positive");
  if (options.shards < 1 || options.shards > 1024)
    return Status::InvalidArgument("dedup shards: must be between 1 and 1024");
  if (options.capacity < options.shards)
    return Status::InvalidArgument("dedup capacity: must be at least the number of shards");
  return Status::OK();
}

DedupCache::DedupCache(DedupOptions options)
    : options_(options), shard_capacity_(std::max<size_t>(1, options.capacity / options.shards)) {
  shards_.reserve(options_.shards);
  for (size_t i = 0; i < options_.shards; ++i) shards_.push_back(std::make_unique<Shard>());
}

DedupCache::~DedupCache() = default;

DedupCache::Shard& DedupCache::ShardOf(RequestId id) {
  return *shards_[(IdHash{}(id) >> 7) % shards_.size()];
}

void DedupCache::Trim(Shard& shard, MonoTime now, std::vector<Waiter>& orphans) {
  const MonoTime expiry = now - std::chrono::duration_cast<MonoTime>(options_.ttl);
  while (!shard.fifo.empty()) {
    const Shard::Queued& front = shard.fifo.front();
    auto it = shard.entries.find(front.id);
    const bool live = it != shard.entries.end() && it->second.begun_at == front.begun_at;
    const bool expired = front.begun_at <= expiry;
    const bool full = shard.entries.size() > shard_capacity_ || shard.fifo.size() > 2 * shard_capacity_;
    if (live && !expired && !full) break;
    if (live) {
      (expired ? expired_ : evicted_).fetch_add(1, std::memory_order_relaxed);
      for (Waiter& waiter : it->second.waiters) orphans.push_back(std::move(waiter));
      shard.entries.erase(it);
    }
    shard.fifo.pop_front();
  }
}

DedupCache::Lookup DedupCache::Begin(RequestId id, MonoTime now, Waiter waiter) {
  Shard& shard = ShardOf(id);
  Lookup found;
  std::vector<Waiter> orphans;
  {
    std::lock_guard lock(shard.mutex);
    Trim(shard, now, orphans);  // an expired id must not answer
    auto [it, inserted] = shard.entries.try_emplace(id);
    if (inserted) {
      it->second.begun_at = now;
      shard.fifo.push_back(Shard::Queued{id, now});
      inserted_.fetch_add(1, std::memory_order_relaxed);
    } else if (it->second.done) {
      found.outcome = Outcome::kDone;
      found.answer = it->second.answer;
      hits_.fetch_add(1, std::memory_order_relaxed);
    } else {
      found.outcome = Outcome::kWaiting;
      it->second.waiters.push_back(std::move(waiter));
      waits_.fetch_add(1, std::memory_order_relaxed);
    }
    Trim(shard, now, orphans);  // over capacity: the oldest go
  }
  for (Waiter& orphan : orphans) orphan(std::nullopt);
  return found;
}

void DedupCache::Finish(RequestId id, std::string answer) {
  Shard& shard = ShardOf(id);
  std::vector<Waiter> waiters;
  {
    std::lock_guard lock(shard.mutex);
    auto it = shard.entries.find(id);
    if (it == shard.entries.end() || it->second.done) return;  // evicted or expired meanwhile
    it->second.done = true;
    waiters = std::exchange(it->second.waiters, {});
    it->second.answer = answer;
  }
  for (Waiter& waiter : waiters) waiter(answer);
}

void DedupCache::Abandon(RequestId id) {
  Shard& shard = ShardOf(id);
  std::vector<Waiter> waiters;
  {
    std::lock_guard lock(shard.mutex);
    auto it = shard.entries.find(id);
    if (it == shard.entries.end() || it->second.done) return;
    waiters = std::move(it->second.waiters);
    shard.entries.erase(it);  // its FIFO slot is skipped when popped
    abandoned_.fetch_add(1, std::memory_order_relaxed);
  }
  for (Waiter& waiter : waiters) waiter(std::nullopt);
}

DedupStats DedupCache::stats() const {
  DedupStats s;
  s.inserted = inserted_.load(std::memory_order_relaxed);
  s.hits = hits_.load(std::memory_order_relaxed);
  s.waits = waits_.load(std::memory_order_relaxed);
  s.abandoned = abandoned_.load(std::memory_order_relaxed);
  s.evicted = evicted_.load(std::memory_order_relaxed);
  s.expired = expired_.load(std::memory_order_relaxed);
  for (const auto& shard : shards_) {
    std::lock_guard lock(shard->mutex);
    s.size += shard->entries.size();
  }
  return s;
}

}  // namespace ringlimit::cluster
