// Headroom: the dynamic-mode signals set through PUT /v1/headroom. A signal says how much spare
// capacity (0..1) the protected system has for one policy (or inline limit name); it expires after
// its TTL, after which the headroom is 0 again (dynamic limits then behave like hard ones).
//
// Thread safety: safe for concurrent use without external synchronisation. Get (once per check whose
// limit is in dynamic mode) takes no lock: the set of names is an immutable index published through
// Published, and each name's signal is a cell read with a sequence counter. Set serialises on a
// writer mutex; it republishes the index only when it adds (or purges) a name.
#ifndef RINGLIMIT_NODE_SERVICE_HEADROOM_H_
#define RINGLIMIT_NODE_SERVICE_HEADROOM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "base/published.h"
#include "limiter/limiter.h"

namespace ringlimit::node {

class Headroom {
 public:
  // At most `max_entries` distinct names are remembered (expired ones are purged first).
  explicit Headroom(size_t max_entries = 10'000) : max_entries_(max_entries) {}
  Headroom(const Headroom&) = delete;
  Headroom& operator=(const Headroom&) = delete;

  // Sets `name`'s headroom (REQUIRES: 0 <= value <= 1) until `expires_at`. Returns false when the
  // table is full of live signals for other names. A Get that starts after Set returns sees the new
  // signal; a Get concurrent with it sees the old or the new one, whole.
  [[nodiscard]] bool Set(std::string_view name, double value, limiter::TimeNs expires_at,
                         limiter::TimeNs now);

  // The live headroom of `name` at `now`; 0 when unset or expired.
  [[nodiscard]] double Get(std::string_view name, limiter::TimeNs now) const;

 private:
  // One name's signal, rewritten in place by Set. A writer makes `sequence` odd, writes both fields and
  // makes it even again; a reader retries until it has read both fields between two equal, even reads
  // of `sequence` (a seqlock made of acquire/release atomics only).
  struct Cell {
    std::atomic<uint64_t> sequence{0};
    std::atomic<double> value{0.};
    std::atomic<limiter::TimeNs> expires_at{0};
  };
  // Name -> cell. Immutable once published; cells live as long as any index that holds them.
  using Index = std::map<std::string, std::shared_ptr<Cell>, std::less<>>;

  // REQUIRES: write_mutex_ held (one writer per cell at a time).
  static void Write(Cell& cell, double value, limiter::TimeNs expires_at);

  const size_t max_entries_;  // constant after construction

  Published<Index> index_;  // thread-safe; published under write_mutex_

  std::mutex write_mutex_;  // serialises Set (cell writes and index republishing)
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_HEADROOM_H_
