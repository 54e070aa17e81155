#include "storage/memory_store.h"

#include <algorithm>
#include <boost/unordered/unordered_flat_set.hpp>
#include <cmath>
#include <functional>
#include <iterator>
#include <thread>

#include "storage/memory_shard.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace ringlimit::storage {
namespace {

// Each shard's share of max_bytes is at least this (a sliding_log state at kMaxSlidingLogLimit with
// count_denied, decided by a few nodes, takes some hundreds of KiB): fewer shards rather than less.
constexpr size_t kMinShardBytes = 2u << 20;

size_t ShardCount(const MemoryStoreOptions& options) {
  if (options.shards > 0) return options.shards;
  size_t shards = std::max<size_t>(16, 4 * std::max(1u, std::thread::hardware_concurrency()));
  if (options.max_bytes > 0) shards = std::clamp<size_t>(options.max_bytes / kMinShardBytes, 1, shards);
  return shards;
}

// Reads `need` through the loader (no lock held) into `loaded`, replacing what it held; `now` as
// MissLoader::Load's.
void LoadMissing(MissLoader& loader, EntityKey key, const NeedLoad& need, limiter::TimeNs now,
                 Loaded& loaded) {
  auto results = loader.Load(key.entity, key.token, need.names, now);
  loaded.asked.assign(need.names.begin(), need.names.end());
  loaded.states.clear();
  for (auto& r : results) {
    if (r) loaded.states.push_back(std::move(*r));
  }
  loaded.epoch = need.epoch;
  loaded.valid = true;
}

// Removes from states[begin, size) every state whose (entity, name) appears twice, keeping the copy with
// the highest version, and keeps the order of the rest.
void KeepNewest(std::vector<EntityState>& states, size_t begin) {
  struct Hash {
    const std::vector<EntityState>* states;
    size_t operator()(size_t i) const {
      const EntityState& s = (*states)[i];
      return s.token ^ std::hash<std::string_view>{}(s.state.name);
    }
  };
  struct Eq {
    const std::vector<EntityState>* states;
    bool operator()(size_t a, size_t b) const {
      const EntityState& x = (*states)[a];
      const EntityState& y = (*states)[b];
      return x.token == y.token && x.entity == y.entity && x.state.name == y.state.name;
    }
  };
  boost::unordered_flat_set<size_t, Hash, Eq> seen(states.size() - begin, Hash{&states}, Eq{&states});
  std::vector<bool> drop(states.size() - begin, false);
  for (size_t i = begin; i < states.size(); ++i) {
    auto [it, inserted] = seen.insert(i);
    if (inserted) continue;
    size_t kept = *it;
    if (states[i].state.version > states[kept].state.version) {
      drop[kept - begin] = true;
      seen.erase(it);
      seen.insert(i);
    } else {
      drop[i - begin] = true;
    }
  }
  size_t to = begin;
  for (size_t i = begin; i < states.size(); ++i) {
    if (drop[i - begin]) continue;
    if (to != i) states[to] = std::move(states[i]);
    ++to;
  }
  states.resize(to);
}

Loaded LoadEntity(MissLoader* loader, MemoryShard& shard, EntityKey key) {
  Loaded loaded;
  if (loader == nullptr) return loaded;
  loaded.epoch = shard.Epoch();
  loaded.states = loader->LoadEntity(key.entity, key.token);
  loaded.valid = true;
  return loaded;
}

}  // namespace

MemoryStore::MemoryStore(MemoryStoreOptions options)
    : options_(std::move(options)), shard_count_(ShardCount(options_)) {
  size_t capacity = options_.max_keys == 0 ? 0 : (options_.max_keys + shard_count_ - 1) / shard_count_;
  shards_ = std::make_unique<std::unique_ptr<MemoryShard>[]>(shard_count_);
  size_t byte_capacity = options_.max_bytes == 0 ? 0 : std::max<size_t>(1, options_.max_bytes / shard_count_);
  for (size_t i = 0; i < shard_count_; ++i) {
    shards_[i] = std::make_unique<MemoryShard>(options_, capacity, byte_capacity);
  }
}

MemoryStore::~MemoryStore() = default;

MemoryShard& MemoryStore::ShardFor(ring::Token token) const {
  // The high bits pick the shard; the shard's hash table mixes the whole token again.
  return *shards_[ShardIndex(token, shard_count_)];
}

void MemoryStore::Update(std::string_view entity, std::span<const Slot> slots, limiter::TimeNs now,
                         const std::function<void(std::span<limiter::MergeState* const>)>& fn) {
  EntityKey key{entity, ring::RingToken(entity)};
  MemoryShard& shard = ShardFor(key.token);
  Loaded loaded;
  for (;;) {
    auto outcome = shard.Update(key, slots, now, fn, loaded, observer_ != nullptr);
    if (outcome.need) {
      LoadMissing(*options_.loader, key, *outcome.need, now, loaded);
      continue;
    }
    if (outcome.pressure && options_.on_pressure) options_.on_pressure();
    if (outcome.released > 0) Released(outcome.released);
    for (const ChangeNotice& c : outcome.changed) observer_->OnChanged(entity, c.name, c.version);
    return;
  }
}

void MemoryStore::Released(size_t bytes) {
  // Freed states stay in the allocator's free lists, per thread arena: states allocated by one thread
  // and evicted by another leave each arena holding up to the whole bound. Handing the free pages back
  // every eighth of the bound keeps the resident size near the bound (glibc; a few ms per call).
  if (options_.max_bytes == 0) return;
  const size_t every = std::max<size_t>(options_.max_bytes / 8, 4u << 20);
  if (released_.fetch_add(bytes, std::memory_order_relaxed) + bytes < every) return;
  released_.store(0, std::memory_order_relaxed);
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

std::vector<StoredState> MemoryStore::Get(std::string_view entity) {
  std::vector<StoredState> out;
  GetInto(entity, out);
  return out;
}

void MemoryStore::GetInto(std::string_view entity, std::vector<StoredState>& out) {
  EntityKey key{entity, ring::RingToken(entity)};
  MemoryShard& shard = ShardFor(key.token);
  while (!shard.GetInto(key, LoadEntity(options_.loader, shard, key), out)) {
  }
}

size_t MemoryStore::Erase(std::string_view entity, std::optional<std::string_view> name) {
  EntityKey key{entity, ring::RingToken(entity)};
  MemoryShard& shard = ShardFor(key.token);
  for (;;) {
    auto removed = shard.Erase(key, name, LoadEntity(options_.loader, shard, key));
    if (!removed) continue;
    if (observer_ != nullptr) {
      for (const std::string& n : *removed) observer_->OnErased(entity, n);
    }
    return removed->size();
  }
}

size_t MemoryStore::Discard(std::string_view entity) {
  EntityKey key{entity, ring::RingToken(entity)};
  MemoryShard& shard = ShardFor(key.token);
  for (;;) {  // an erase the observer is not told about
    auto removed = shard.Erase(key, std::nullopt, LoadEntity(options_.loader, shard, key));
    if (removed) return removed->size();
  }
}

StoreStats MemoryStore::Stats() const {
  StoreStats stats;
  for (size_t i = 0; i < shard_count_; ++i) {
    stats.keys += shards_[i]->keys();
    stats.evictions += shards_[i]->evictions();
    stats.idle_drops += shards_[i]->idle_drops();
    stats.bytes += shards_[i]->bytes();
  }
  return stats;
}

bool MemoryStore::Absorb(std::string_view entity, const StoredState& state) {
  EntityKey key{entity, ring::RingToken(entity)};
  MemoryShard& shard = ShardFor(key.token);
  Loaded loaded;
  for (;;) {
    auto outcome = shard.Absorb(key, state, loaded);
    if (outcome.need) {
      // A copy's merge needs every row, expired or not (no `now` to judge them by).
      LoadMissing(*options_.loader, key, *outcome.need, MissLoader::kAnyRow, loaded);
      continue;
    }
    if (outcome.pressure && options_.on_pressure) options_.on_pressure();
    if (outcome.released > 0) Released(outcome.released);
    return outcome.applied;
  }
}

std::vector<EntityState> MemoryStore::ScanTokenRange(ring::Token first, ring::Token last) {
  std::vector<EntityState> out;
  Scan(first, last, out, nullptr);
  return out;
}

uint64_t MemoryStore::CountTokenRange(ring::Token first, ring::Token last) {
  if (first > last) return 0;
  uint64_t keys = 0;
  const size_t end = ShardIndex(last, shard_count_);
  for (size_t i = ShardIndex(first, shard_count_); i <= end; ++i) {
    MemoryShard::ScanCursor cursor;
    while (!cursor.done) keys += shards_[i]->CountChunk(first, last, cursor);
  }
  return keys;
}

MemoryStore::RangeScan MemoryStore::ScanTokenRangeWithDeletes(ring::Token first, ring::Token last) {
  RangeScan scan;
  Scan(first, last, scan.states, &scan.pending_deletes);
  return scan;
}

void MemoryStore::Scan(ring::Token first, ring::Token last, std::vector<EntityState>& states,
                       std::vector<std::string>* pending_deletes) {
  // The lowest token of shard i, as a real number (2^64 for i = shard_count_): accurate enough to size
  // a reservation.
  auto shard_low = [&](size_t i) {
    return std::ldexp(static_cast<double>(i), 64) / static_cast<double>(shard_count_);
  };
  if (first > last) return;
  std::vector<EntityState> chunk;
  chunk.reserve(MemoryShard::kScanChunkStates);
  const size_t end = ShardIndex(last, shard_count_);
  // Room for about as many states as the range holds (each overlapping shard's count times the share of
  // its interval the range covers; tokens are uniform): growing a vector of a million states step by
  // step moves it and faults fresh pages in at every step, which costs more than the scan itself.
  double estimate = 0;
  for (size_t i = ShardIndex(first, shard_count_); i <= end; ++i) {
    const double low = std::max(static_cast<double>(first), shard_low(i));
    const double high = std::min(static_cast<double>(last) + 1, shard_low(i + 1));
    estimate += static_cast<double>(shards_[i]->keys()) * std::max(0.0, high - low) /
                (shard_low(i + 1) - shard_low(i));
  }
  states.reserve(states.size() + static_cast<size_t>(estimate * 1.05) + MemoryShard::kScanChunkStates);
  for (size_t i = ShardIndex(first, shard_count_); i <= end; ++i) {
    MemoryShard& shard = *shards_[i];
    const size_t begin = states.size();
    MemoryShard::ScanCursor cursor;
    for (;;) {
      if (scan_hook_) scan_hook_(i);
      // Into a small buffer, appended to `states` without the lock: growing `states` (a move of
      // everything copied so far, page faults) must not happen under the shard lock.
      chunk.clear();
      shard.ScanChunk(first, last, cursor, chunk);
      std::move(chunk.begin(), chunk.end(), std::back_inserter(states));
      if (cursor.done) break;
      // No yield here: a request blocked on the lock was woken by its release and takes it while this
      // thread appends the chunk (storage_bench: Update p99.9 during a whole-ring scan as without one;
      // a yield per chunk made the scan 3-5x slower under load for no gain in latency).
    }
    if (cursor.may_repeat) KeepNewest(states, begin);
    // After the states (see ScanTokenRangeWithDeletes).
    if (pending_deletes != nullptr) shard.PendingDeletes(first, last, *pending_deletes);
  }
}

size_t MemoryStore::SweepIdle(limiter::TimeNs now, size_t max_per_shard) {
  size_t dropped = 0;
  for (size_t i = 0; i < shard_count_; ++i) dropped += shards_[i]->SweepIdle(now, max_per_shard);
  return dropped;
}

std::vector<DirtyRecord> MemoryStore::CollectDirty() {
  std::vector<DirtyRecord> out;
  for (size_t i = 0; i < shard_count_; ++i) shards_[i]->CollectDirty(out);
  return out;
}

void MemoryStore::AckFlushed(const std::vector<DirtyRecord>& batch, bool ok) {
  if (!ok) return;
  // Records arrive grouped by shard (CollectDirty's order): hand each shard its run.
  size_t begin = 0;
  while (begin < batch.size()) {
    MemoryShard& shard = ShardFor(batch[begin].token);
    size_t end = begin + 1;
    while (end < batch.size() && &ShardFor(batch[end].token) == &shard) ++end;
    shard.AckFlushed(std::span<const DirtyRecord>(batch.data() + begin, end - begin), ok);
    begin = end;
  }
}

MemoryBreakdown MemoryStore::Breakdown() const {
  MemoryBreakdown out;
  for (size_t i = 0; i < shard_count_; ++i) shards_[i]->AddBreakdown(out);
  return out;
}

uint64_t MemoryStore::DirtyCount() const {
  uint64_t n = 0;
  for (size_t i = 0; i < shard_count_; ++i) n += shards_[i]->dirty();
  return n;
}

}  // namespace ringlimit::storage
