// DedupCache: the deciding node's memory of recent forwarded checks, by request id, so that a check sent
// again (its first answer was lost or late) is answered with the first decision instead of being charged
// twice (idempotent forwarding; see docs/architecture.md, "Forwarding").
//
//   switch (DedupCache::Lookup found = cache.Begin(id, now, waiter); found.outcome) {
//     case DedupCache::Outcome::kNew:      decide, then cache.Finish(id, now, answer) -- or Abandon(id)
//     case DedupCache::Outcome::kDone:     reply found.answer (the first decision)
//     case DedupCache::Outcome::kWaiting:  nothing: `waiter` gets the first decision when it is made
//   }
//
// An id seen first begins "in progress"; Finish stores the answer (the encoded ForwardCheckResponse) and
// hands it to every retry that arrived meanwhile; Abandon (the first attempt was refused, nothing was
// charged) forgets the id and tells those retries nullopt (refuse them: the sender goes on). An entry
// lives `ttl` from its Begin, or until its shard is full and it is the oldest one there (FIFO eviction).
// So the guarantee is: a retry arriving within min(ttl, capacity / rate of forwarded checks) of the first
// attempt is never charged again.
//
// No clock: `now` comes from the caller (a steady clock), so tests drive it.
//
// Thread safety: every method is safe for concurrent use. The ids are spread over `shards` shards, each
// with its own mutex held only for a hash-map operation; waiters are called after it is released, on the
// thread of the Finish / Abandon / Begin that completes them.
#ifndef RINGLIMIT_NODE_CLUSTER_DEDUP_CACHE_H_
#define RINGLIMIT_NODE_CLUSTER_DEDUP_CACHE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "limiter/status.h"

namespace ringlimit::cluster {

// A forwarded check's id: set by the entry node, unchanged through every hop and retry
// (peer.ForwardedCheck.request_id_hi/lo). {0, 0} means none (a sender without idempotent forwarding).
struct RequestId {
  uint64_t hi = 0;  // the entry node's random per-process nonce
  uint64_t lo = 0;  // the entry node's counter

  [[nodiscard]] bool empty() const { return hi == 0 && lo == 0; }
  bool operator==(const RequestId&) const = default;
};

struct DedupOptions {
  // --- Affects behaviour ---
  // How long an id is remembered after its first attempt arrived. It must cover the sender's retries:
  // (1 + ForwarderOptions::timeout_retries) * ForwarderOptions::timeout. REQUIRES: > 0. Default: 5 s.
  std::chrono::milliseconds ttl{5'000};
  // Ids remembered at most (over all shards); the oldest of a full shard is evicted. REQUIRES: >= shards.
  // Default: 65536 (about 225 bytes each with a typical answer: ~15 MB when full, see bench/forward).
  size_t capacity = 65'536;

  // --- Affects performance ---
  // Independently locked parts. REQUIRES: 1..1024. Default: 16.
  size_t shards = 16;
};

struct DedupStats {
  uint64_t inserted = 0;   // first attempts remembered
  uint64_t hits = 0;       // retries answered with a finished first decision
  uint64_t waits = 0;      // retries that arrived while the first attempt was in progress
  uint64_t abandoned = 0;  // first attempts that charged nothing (forgotten; their retries refused)
  uint64_t evicted = 0;    // ids dropped because their shard was full, before their ttl
  uint64_t expired = 0;    // ids dropped at the end of their ttl
  uint64_t size = 0;       // ids remembered now
};

class DedupCache {
 public:
  using MonoTime = std::chrono::nanoseconds;  // on the caller's steady clock
  // Gets the first attempt's answer, or nullopt when it charged nothing (Abandon) or was evicted.
  using Waiter = std::function<void(std::optional<std::string> answer)>;

  enum class Outcome : uint8_t {
    kNew = 0,      // first time: the caller decides, then calls Finish or Abandon
    kDone = 1,     // answered before: Lookup::answer is the first answer
    kWaiting = 2,  // the first attempt is in progress: the waiter will be called
  };
  struct Lookup {
    Outcome outcome = Outcome::kNew;
    std::string answer;  // kDone only
  };

  // REQUIRES: options valid (Validate).
  explicit DedupCache(DedupOptions options);
  ~DedupCache();

  DedupCache(const DedupCache&) = delete;
  DedupCache& operator=(const DedupCache&) = delete;

  // Looks `id` up; see Outcome. `waiter` is kept only for kWaiting. REQUIRES: !id.empty().
  [[nodiscard]] Lookup Begin(RequestId id, MonoTime now, Waiter waiter);
  // The first attempt of `id` is answered with `answer`: remember it, and hand it to the waiting retries.
  void Finish(RequestId id, std::string answer);
  // The first attempt of `id` charged nothing: forget it, refuse the waiting retries (nullopt).
  void Abandon(RequestId id);

  [[nodiscard]] DedupStats stats() const;

 private:
  struct Shard;
  Shard& ShardOf(RequestId id);
  // Drops, from the front of `shard`'s FIFO, what has expired at `now` and what exceeds its capacity.
  // REQUIRES: shard.mutex held. Waiters of dropped in-progress entries are appended to `orphans`.
  void Trim(Shard& shard, MonoTime now, std::vector<Waiter>& orphans);

  // Constant after construction.
  const DedupOptions options_;
  const size_t shard_capacity_;
  std::vector<std::unique_ptr<Shard>> shards_;

  std::atomic<uint64_t> inserted_{0}, hits_{0}, waits_{0}, abandoned_{0}, evicted_{0}, expired_{0};
};

// OK when every REQUIRES of `options` holds, else InvalidArgument saying what is wrong.
[[nodiscard]] Status Validate(const DedupOptions& options);

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_CLUSTER_DEDUP_CACHE_H_
