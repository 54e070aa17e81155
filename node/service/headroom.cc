#include "node/service/headroom.h"

namespace ringlimit::node {

void Headroom::Write(Cell& cell, double value, limiter::TimeNs expires_at) {
  // acq_rel: the field stores below cannot move before the odd sequence is visible.
  cell.sequence.fetch_add(1, std::memory_order_acq_rel);
  cell.value.store(value, std::memory_order_release);
  cell.expires_at.store(expires_at, std::memory_order_release);
  cell.sequence.fetch_add(1, std::memory_order_release);
}

bool Headroom::Set(std::string_view name, double value, limiter::TimeNs expires_at, limiter::TimeNs now) {
  std::lock_guard lock(write_mutex_);
  const std::shared_ptr<const Index> current = index_.Load();
  if (current != nullptr) {
    if (auto it = current->find(name); it != current->end()) {
      Write(*it->second, value, expires_at);
      return true;
    }
  }
  // A new name: publish a copy of the index with it (and without expired names if the table is full).
  auto next = current != nullptr ? std::make_shared<Index>(*current) : std::make_shared<Index>();
  if (next->size() >= max_entries_) {
    std::erase_if(*next, [&](const auto& e) {
      return e.second->expires_at.load(std::memory_order_relaxed) <= now;  // only this writer writes it
    });
  }
  if (next->size() >= max_entries_) return false;
  auto cell = std::make_shared<Cell>();
  cell->value.store(value, std::memory_order_relaxed);
  cell->expires_at.store(expires_at, std::memory_order_relaxed);  // published (with release) below
  next->emplace(std::string(name), std::move(cell));
  index_.Publish(std::move(next));
  return true;
}

double Headroom::Get(std::string_view name, limiter::TimeNs now) const {
  // No reference count either: the cached index is not kept past this call.
  const std::shared_ptr<const Index>& index = index_.Cached();
  if (index == nullptr) return 0.;
  auto it = index->find(name);
  if (it == index->end()) return 0.;
  const Cell& cell = *it->second;
  for (;;) {
    const uint64_t before = cell.sequence.load(std::memory_order_acquire);
    // Acquire loads: if either reads a write that started after `before`, the reload of the sequence
    // below sees that write's odd increment, and the read is retried.
    const double value = cell.value.load(std::memory_order_acquire);
    const limiter::TimeNs expires_at = cell.expires_at.load(std::memory_order_acquire);
    if (before % 2 == 0 && cell.sequence.load(std::memory_order_relaxed) == before) {
      return expires_at <= now ? 0. : value;
    }
  }
}

}  // namespace ringlimit::node
