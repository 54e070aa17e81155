#include "storage/memory_store.h"

#include <algorithm>
#include <thread>

#include "storage/memory_shard.h"

namespace ringlimit::storage {
namespace {

size_t ShardCount(const MemoryStoreOptions& options) {
  if (options.shards > 0) return options.shards;
  return std::max<size_t>(16, 4 * std::max(1u, std::thread::hardware_concurrency()));
}

// Reads `need` through the loader (no lock held) into `loaded`, replacing what it held.
void LoadMissing(MissLoader& loader, EntityKey key, const NeedLoad& need, Loaded& loaded) {
  auto results = loader.Load(key.entity, key.token, need.names);
  loaded.asked.assign(need.names.begin(), need.names.end());
  loaded.states.clear();
  for (auto& r : results) {
    if (r) loaded.states.push_back(std::move(*r));
  }
  loaded.epoch = need.epoch;
  loaded.valid = true;
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
  for (size_t i = 0; i < shard_count_; ++i) shards_[i] = std::make_unique<MemoryShard>(options_, capacity);
}

MemoryStore::~MemoryStore() = default;

MemoryShard& MemoryStore::ShardFor(ring::Token token) const {
  // The high bits pick the shard; the shard's hash table mixes the whole token again.
  return *shards_[static_cast<size_t>((static_cast<unsigned __int128>(token) * shard_count_) >> 64)];
}

void MemoryStore::Update(std::string_view entity, std::span<const Slot> slots, limiter::TimeNs now,
                         const std::function<void(std::span<limiter::State* const>)>& fn) {
  EntityKey key{entity, ring::RingToken(entity)};
  MemoryShard& shard = ShardFor(key.token);
  Loaded loaded;
  for (;;) {
    auto outcome = shard.Update(key, slots, now, fn, loaded, observer_ != nullptr);
    if (outcome.need) {
      LoadMissing(*options_.loader, key, *outcome.need, loaded);
      continue;
    }
    if (outcome.pressure && options_.on_pressure) options_.on_pressure();
    for (const StoredState& s : outcome.changed) observer_->OnChanged(entity, s);
    return;
  }
}

std::vector<StoredState> MemoryStore::Get(std::string_view entity) {
  EntityKey key{entity, ring::RingToken(entity)};
  MemoryShard& shard = ShardFor(key.token);
  for (;;) {
    auto states = shard.Get(key, LoadEntity(options_.loader, shard, key));
    if (states) return std::move(*states);
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
  }
  return stats;
}

bool MemoryStore::ApplyIfNewer(std::string_view entity, const StoredState& state) {
  EntityKey key{entity, ring::RingToken(entity)};
  MemoryShard& shard = ShardFor(key.token);
  Loaded loaded;
  for (;;) {
    auto outcome = shard.ApplyIfNewer(key, state, loaded);
    if (outcome.need) {
      LoadMissing(*options_.loader, key, *outcome.need, loaded);
      continue;
    }
    if (outcome.pressure && options_.on_pressure) options_.on_pressure();
    return outcome.applied;
  }
}

std::vector<EntityState> MemoryStore::ScanTokenRange(ring::Token first, ring::Token last) {
  std::vector<EntityState> out;
  for (size_t i = 0; i < shard_count_; ++i) shards_[i]->Scan(first, last, out, nullptr);
  return out;
}

MemoryStore::RangeScan MemoryStore::ScanTokenRangeWithDeletes(ring::Token first, ring::Token last) {
  RangeScan scan;
  for (size_t i = 0; i < shard_count_; ++i) shards_[i]->Scan(first, last, scan.states, &scan.pending_deletes);
  return scan;
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

uint64_t MemoryStore::DirtyCount() const {
  uint64_t n = 0;
  for (size_t i = 0; i < shard_count_; ++i) n += shards_[i]->dirty();
  return n;
}

}  // namespace ringlimit::storage
