#include "replication/routing_table.h"

#include <algorithm>
#include <array>

#include "replication/handoff_planner.h"  // InSortedRanges

namespace ringlimit::replication {

namespace {

std::atomic<uint64_t> next_publisher_id{1};

// Publishers a thread reads at once before the least recent one's cached table is replaced.
constexpr size_t kCacheSlots = 8;

}  // namespace

const RouteOverrides::Entry* RouteOverrides::Find(ring::Token token) const {
  auto it = std::upper_bound(entries.begin(), entries.end(), token,
                             [](ring::Token v, const Entry& e) { return v < e.range.first; });
  return it != entries.begin() && std::prev(it)->range.Contains(token) ? &*std::prev(it) : nullptr;
}

std::optional<std::string_view> RoutingTable::Override(ring::Token token) const {
  if (overrides == nullptr) return std::nullopt;
  if (const RouteOverrides::Entry* entry = overrides->Find(token)) return std::string_view(entry->target);
  if (overrides->left_ring != nullptr) {
    if (const ring::RingMember* owner = overrides->left_ring->Owner(token))
      return std::string_view(owner->id);
  }
  return std::nullopt;
}

std::string_view RoutingTable::Decider(ring::Token token) const {
  if (std::optional<std::string_view> target = Override(token)) return *target;
  if (ring == nullptr || ring->empty()) return {};
  return ring->Owner(token)->id;
}

bool RoutingTable::Holds(ring::Token token) const {
  if (overrides == nullptr) return false;
  const RouteOverrides::Entry* entry = overrides->Find(token);
  return entry != nullptr && entry->hold;
}

bool RoutingTable::Unsynced(ring::Token token) const {
  return overrides != nullptr && !overrides->unsynced.empty() && InSortedRanges(overrides->unsynced, token);
}

bool RoutingTable::Relinquished(ring::Token token, std::string_view self) const {
  return overrides != nullptr && overrides->left_ring != nullptr && Decider(token) != self;
}

const ring::MemberInfo* RoutingTable::Member(std::string_view id) const {
  if (members == nullptr) return nullptr;
  auto it = std::lower_bound(members->begin(), members->end(), id,
                             [](const ring::MemberInfo& m, std::string_view v) { return m.id < v; });
  return it != members->end() && it->id == id ? &*it : nullptr;
}

RoutingPublisher::RoutingPublisher()
    : id_(next_publisher_id.fetch_add(1)), current_(std::make_shared<const RoutingTable>()) {}

void RoutingPublisher::PublishLocked(std::shared_ptr<RoutingTable> next) {
  next->version = current_->version + 1;
  current_ = std::move(next);
  version_.store(current_->version);  // seq_cst: a decision that pinned after this reads the new table
}

void RoutingPublisher::SetRing(std::shared_ptr<const ring::RingView> ring) {
  std::lock_guard lock(mutex_);
  auto next = std::make_shared<RoutingTable>(*current_);
  next->ring = std::move(ring);
  PublishLocked(std::move(next));
}

void RoutingPublisher::SetOverrides(std::shared_ptr<const RouteOverrides> overrides) {
  std::lock_guard lock(mutex_);
  auto next = std::make_shared<RoutingTable>(*current_);
  next->overrides = overrides != nullptr && !overrides->empty() ? std::move(overrides) : nullptr;
  PublishLocked(std::move(next));
}

void RoutingPublisher::SetRingAndOverrides(std::shared_ptr<const ring::RingView> ring,
                                           std::shared_ptr<const RouteOverrides> overrides) {
  std::lock_guard lock(mutex_);
  auto next = std::make_shared<RoutingTable>(*current_);
  next->ring = std::move(ring);
  next->overrides = overrides != nullptr && !overrides->empty() ? std::move(overrides) : nullptr;
  PublishLocked(std::move(next));
}

void RoutingPublisher::SetMembers(std::shared_ptr<const std::vector<ring::MemberInfo>> members) {
  std::lock_guard lock(mutex_);
  auto next = std::make_shared<RoutingTable>(*current_);
  next->members = std::move(members);
  PublishLocked(std::move(next));
}

const RoutingTable& RoutingPublisher::Current() const {
  struct Slot {
    uint64_t owner = 0;
    std::shared_ptr<const RoutingTable> table;
  };
  thread_local std::array<Slot, kCacheSlots> slots;
  thread_local size_t next_victim = 0;
  const uint64_t version = version_.load();
  Slot* slot = nullptr;
  for (Slot& s : slots) {
    if (s.owner != id_) continue;
    if (s.table->version == version) return *s.table;
    slot = &s;
    break;
  }
  if (slot == nullptr) slot = &slots[next_victim++ % kCacheSlots];
  std::shared_ptr<const RoutingTable> table = Snapshot();
  slot->owner = id_;
  slot->table = std::move(table);
  return *slot->table;
}

std::shared_ptr<const RoutingTable> RoutingPublisher::Snapshot() const {
  std::lock_guard lock(mutex_);
  return current_;
}

}  // namespace ringlimit::replication
