// DedupCache: the deciding node's memory of recent forwarded checks, by request id, so that a check sent
// again (its first answer was lost or late) is answered with the first decision instead of being charged
// twice (idempotent forwarding; see docs/architecture.md, "Forwarding").
//
//   switch (DedupCache::Lookup found = cache.Begin(id, now, waiter); found.outcome) {
//     case DedupCache::Outcome::kNew:      decide, then cache.Finish(id, answer) -- or Abandon(id)
//     case DedupCache::Outcome::kDone:     reply found.answer (the first decision)
//     case DedupCache::Outcome::kWaiting:  nothing: `waiter` gets the first decision when it is made
//   }
//
// An id seen first begins "in progress"; Finish stores the answer (the encoded ForwardCheckResponse) and
// hands it to every retry that arrived meanwhile; Abandon (the first attempt was refused, nothing was
// charged) forgets the id and tells those retries nullopt (refuse them: the sender goes on). An entry
// lives `ttl` from its Begin (counted in whole ms), or until it is replaced (see Layout).
//
// Layout: a fixed table of `capacity` slots (rounded up to a multiple of 8; allocated once, its pages
// touched as they are used), in buckets of 8 slots. An id may live in 16 slots: those of the two buckets
// its hash chooses. A new id takes a free one, else replaces the oldest finished entry of the 16, else
// the oldest in-progress one (whose waiting retries are refused). An expired entry answers nothing; it is
// dropped when its id is looked up again or when it is the entry a new id replaces (its waiting retries
// are refused then).
// So the guarantee is: a retry arriving within `ttl` of the first attempt is never charged again unless
// its entry was replaced, which takes about `capacity` newer ids. In a model of this policy (400,000 ids
// through a full default table; the figures are in the commit that introduced it), no entry was
// replaced before 0.41 x capacity newer ids had arrived, 99.9 % lasted 0.60 x, the median 0.98 x. At F
// forwarded checks per second served: min(ttl, 0.41 * capacity / F), 1.3 s at 20,000/s.
//
// No clock: `now` comes from the caller (a steady clock), so tests drive it.
//
// Thread safety: every method is safe for concurrent use, and the common path takes no lock:
//   - Begin of a new id, Begin of an id already finished, Finish and Abandon of an id nobody waits for,
//     and eviction or expiry of such an entry use only atomic loads, stores and compare-and-swaps on the
//     slot's words (a seqlock-style state word per slot: a reader copies the id and answer and checks the
//     state did not change). Two Begins of one id racing for two slots are settled by CAS (the lower slot
//     wins), so exactly one of them gets kNew. A Begin spins (yielding) only while another Begin of the
//     same id is between claiming its slot and settling it, or while all 16 slots it may use are being
//     claimed or finished -- a few atomic operations each.
//   - The rare paths lock one of `shards` side mutexes, held only for a std::map operation: a retry
//     registering as a waiter (kWaiting), and a Finish / Abandon / eviction / expiry of an entry with
//     waiters; an answer longer than 184 bytes (kInlineAnswerBytes) is also kept there, so Finish and a
//     retry's Begin of such an id lock it (it is remembered like any other). Nothing else is locked.
// Waiters are called on the thread of the Finish / Abandon / Begin that completes them, with no lock
// held; each waiter is called exactly once.
#ifndef RINGLIMIT_NODE_FORWARD_DEDUP_CACHE_H_
#define RINGLIMIT_NODE_FORWARD_DEDUP_CACHE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

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
  // Ids remembered at most, rounded up to a multiple of 8 (one bucket of `capacity` slots when smaller);
  // a new id whose 16 candidate slots are all taken replaces the oldest (see above). REQUIRES: >= shards.
  // Default: 65536 (216 bytes each, allocated at construction and touched as used: 14.2 MB when full).
  size_t capacity = 65'536;

  // --- Affects performance ---
  // Side mutexes of the rare paths (waiting retries, answers over 184 bytes). REQUIRES: 1..1024.
  // Default: 16.
  size_t shards = 16;
};

struct DedupStats {
  uint64_t inserted = 0;   // first attempts remembered
  uint64_t hits = 0;       // retries answered with a finished first decision
  uint64_t waits = 0;      // retries that arrived while the first attempt was in progress
  uint64_t abandoned = 0;  // first attempts that charged nothing (forgotten; their retries refused)
  uint64_t evicted = 0;    // ids dropped because their bucket was full, before their ttl
  uint64_t expired = 0;    // ids dropped at the end of their ttl (when a Begin passed their bucket)
  uint64_t size = 0;       // ids held now (expired ones included until dropped); O(capacity) to count
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
  struct Side;   // one of the side mutexes and what it guards (dedup_cache.cc)
  struct Slot;   // where one slot's words are
  struct View;   // a consistent read of a slot's state and id
  struct Place;  // where an id may live: its two buckets

  // The slot's words: its state (phase, waiters and side-answer bits, tag, generation), begin time, id and
  // inline answer. Every access goes through std::atomic_ref (see dedup_cache.cc, "Words").
  Slot SlotAt(size_t bucket, size_t way) const;
  Side& SideOf(const Slot& slot) const;
  Place PlaceOf(RequestId id) const;

  // Reads `slot` consistently; frees it first when its entry has expired at `now_ns` (its waiters are
  // appended to `orphans`). The id is read only when the slot's tag is `tag`.
  View Examine(const Slot& slot, uint64_t tag, int64_t now_ns, std::vector<Waiter>& orphans);
  // Frees `slot`, seen expired in `seen`; false when it changed meanwhile.
  bool Expire(const Slot& slot, uint64_t seen, std::vector<Waiter>& orphans);
  // Claims `slot`, seen in `seen` (free, or the entry it replaces), for `id`; true when this Begin won it
  // (kNew), false when it must look again (lost the slot, or another Begin of `id` won).
  bool Claim(const Slot& slot, uint64_t seen, RequestId id, const Place& place, int64_t now_ns,
             std::vector<Waiter>& orphans);
  // Registers `waiter` on the in-progress entry seen in `seen`; false (waiter untouched) when it changed.
  bool Wait(const Slot& slot, uint64_t seen, Waiter& waiter);
  // Copies the finished answer of the entry seen in `seen`; false when it changed meanwhile.
  bool ReadAnswer(const Slot& slot, uint64_t seen, std::string& answer);
  // The slot's entry, last seen in `seen`, ended (CAS done): hand its waiters to `orphans`, drop its
  // side answer. Locks only when `seen` says there is something on the side.
  void Retire(const Slot& slot, uint64_t seen, std::vector<Waiter>& orphans);
  // The in-progress slot of `id`, with its state, or false.
  bool FindInProgress(RequestId id, Slot& slot, uint64_t& seen);

  // Constant after construction.
  const DedupOptions options_;
  const int64_t ttl_ns_;
  const size_t ways_;     // slots used per bucket: kWays, or capacity when smaller
  const size_t buckets_;  // >= 1
  // The slots' words (calloc'd: zero is a free slot; pages are touched as used). Buckets of 24 words:
  // 8 states (one cache line), then 8 (id.hi, id.lo); then per slot 24 answer words (216 bytes a slot).
  void* memory_ = nullptr;
  uint64_t* bucket_words_ = nullptr;
  uint64_t* answer_words_ = nullptr;
  std::vector<std::unique_ptr<Side>> sides_;

  std::atomic<uint64_t> inserted_{0}, hits_{0}, waits_{0}, abandoned_{0}, evicted_{0}, expired_{0};
};

// OK when every REQUIRES of `options` holds, else InvalidArgument saying what is wrong.
[[nodiscard]] Status Validate(const DedupOptions& options);

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_FORWARD_DEDUP_CACHE_H_
