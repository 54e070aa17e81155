// NameCounters: decision counters per name seen at run time (inline limit names, RLS descriptor rules),
// with a hard cap on how many names get series of their own.
//
// The first `cap` distinct names keep their counters for the life of the process; every later name counts
// under the overflow, rendered as name="other" (so is a name that is literally "other"). Series never move
// between names, so rate() over any of them stays right, and 100 000 distinct names cost `cap` entries.
//
// The table is open addressing over a fixed array of atomic pointers, twice the cap rounded up to a power of
// two, so it never fills and a probe always ends at the name or an empty slot. A lookup takes no lock and
// allocates nothing: one hash, then pointer loads and a string compare. A new name below the cap allocates
// its entry once and claims a slot with a compare-and-swap; entries never move and live as long as the
// table, so the returned pointer may be kept (a batch keeps it for its checks).
//
// Thread safety: Find, ForEach, size and the counters are safe for concurrent use from many threads
// without external synchronisation. Two threads racing to add names when one slot is left under the cap
// may both see it taken: one of those names then counts one decision under "other" and gets its own
// entry on a later lookup if room is left.
#ifndef RINGLIMIT_NODE_METRICS_NAME_COUNTERS_H_
#define RINGLIMIT_NODE_METRICS_NAME_COUNTERS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace ringlimit::node {

// Decision counters of one policy, limit name or rule.
struct DecisionCounters {
  std::atomic<uint64_t> allowed{0};
  std::atomic<uint64_t> denied{0};
  std::atomic<uint64_t> shadow_denied{0};  // admitted only because the limit is in shadow mode
};

class NameCounters {
 public:
  // The label value the overflow is rendered under.
  static constexpr std::string_view kOverflowName = "other";

  // `cap`: names with counters of their own (0: every name counts under the overflow).
  explicit NameCounters(size_t cap);
  ~NameCounters();
  NameCounters(const NameCounters&) = delete;
  NameCounters& operator=(const NameCounters&) = delete;

  // The counters of `name` (never null; the overflow's once the cap is reached). Valid for the table's
  // life.
  [[nodiscard]] DecisionCounters* Find(std::string_view name);

  // Calls `fn` for every name with counters of its own (in no particular order), then once for the
  // overflow with kOverflowName.
  void ForEach(const std::function<void(std::string_view name, const DecisionCounters&)>& fn) const;

  // Names with counters of their own (at most cap()).
  [[nodiscard]] size_t size() const { return size_.load(std::memory_order_relaxed); }
  [[nodiscard]] size_t cap() const { return cap_; }

 private:
  struct Entry {
    explicit Entry(std::string_view name_in) : name(name_in) {}
    const std::string name;
    DecisionCounters counters;
  };

  // Constant after construction.
  const size_t cap_;
  const size_t mask_;                             // slots - 1 (slots: a power of two >= 2 * cap_)
  std::unique_ptr<std::atomic<Entry*>[]> slots_;  // null, or an Entry owned by the table

  std::atomic<size_t> size_{0};  // entries claimed (briefly over by one while a racing insert backs out)
  DecisionCounters overflow_;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_METRICS_NAME_COUNTERS_H_
