#include "node/metrics/name_counters.h"

#include <algorithm>
#include <bit>

namespace ringlimit::node {

namespace {

size_t SlotCount(size_t cap) { return std::bit_ceil(std::max<size_t>(2 * cap, 2)); }

}  // namespace

NameCounters::NameCounters(size_t cap)
    : cap_(cap), mask_(SlotCount(cap) - 1), slots_(new std::atomic<Entry*>[SlotCount(cap)]) {
  for (size_t i = 0; i <= mask_; ++i) slots_[i].store(nullptr, std::memory_order_relaxed);
}

NameCounters::~NameCounters() {
  for (size_t i = 0; i <= mask_; ++i) delete slots_[i].load(std::memory_order_relaxed);
}

DecisionCounters* NameCounters::Find(std::string_view name) {
  if (name == kOverflowName) return &overflow_;
  for (size_t i = std::hash<std::string_view>()(name) & mask_;; i = (i + 1) & mask_) {
    Entry* entry = slots_[i].load(std::memory_order_acquire);
    if (entry == nullptr) {
      // Not in the table. Room for it? Reserve a place under the cap before building the entry.
      if (size_.load(std::memory_order_relaxed) >= cap_) return &overflow_;
      if (size_.fetch_add(1, std::memory_order_relaxed) >= cap_) {
        size_.fetch_sub(1, std::memory_order_relaxed);
        return &overflow_;
      }
      auto fresh = std::make_unique<Entry>(name);
      if (slots_[i].compare_exchange_strong(entry, fresh.get(), std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
        return &fresh.release()->counters;
      }
      // Another name took the slot first: give the place back and look at what is there now.
      size_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (entry->name == name) return &entry->counters;
  }
}

void NameCounters::ForEach(const std::function<void(std::string_view, const DecisionCounters&)>& fn) const {
  for (size_t i = 0; i <= mask_; ++i) {
    if (const Entry* entry = slots_[i].load(std::memory_order_acquire)) fn(entry->name, entry->counters);
  }
  fn(kOverflowName, overflow_);
}

}  // namespace ringlimit::node
