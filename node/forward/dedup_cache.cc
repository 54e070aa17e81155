#include "node/forward/dedup_cache.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

namespace ringlimit::cluster {

// Words. Every shared word is a plain uint64_t accessed only through std::atomic_ref, so the table can come
// from calloc (zero pages, touched as used) and ThreadSanitizer sees every access as atomic. The state word
// is the slot's seqlock: a writer changes the other words only while it owns the slot (claimed, or
// finishing) and publishes them by a later change of the state; a reader loads the state, the words
// (acquire), then the state again, and uses what it read only when the state is the same entry's.
//
// State word: bits 0-2 the phase, bit 3 "has waiters" (in the side map), bit 4 "answer on the side",
// bits 5-15 a tag (hash bits of the id: most slots of other ids are skipped without reading their id),
// bits 16-31 the generation (bumped at every claim: a slot's entry is (slot, generation); a reader would
// be fooled only if the slot were claimed 65,536 times between its two loads), bits 32-63 the time of
// the entry's Begin in ms modulo 2^32 (so a Begin chooses what to replace, and sees what has expired,
// from the bucket's one line of states).
//
//   kEmpty --Claim--> kClaimed --id written--> kClaiming --won--> kInProgress --Finish--> kFinishing
//     ^                                           |  (lost, or killed: kLost)      |                |
//     +---------------------- free ---------------+         Abandon, expiry, <-----+  answer written
//     ^                                                     eviction                                v
//     +-------------------------------- expiry, eviction (a Claim of another id) <----------- kDone
//
// Only the Claim path writes kClaimed / kClaiming slots (another Begin of the same id may turn kClaiming
// into kLost); only the Finish that won kFinishing writes a kFinishing slot. Eviction and expiry take only
// kInProgress and kDone slots, by CAS of the state they saw.
namespace {

constexpr size_t kWays = 8;                 // slots per bucket
constexpr size_t kBucketWords = 3 * kWays;  // states, then (id.hi, id.lo) per slot
constexpr size_t kAnswerWords = 24;         // size, then 184 bytes
constexpr size_t kInlineAnswerBytes = (kAnswerWords - 1) * 8;

enum Phase : uint64_t {
  kEmpty = 0,
  kClaimed = 1,     // taken by a Begin writing its id: no id to read yet
  kClaiming = 2,    // id written; the Begin checks that no other Begin of the id is ahead
  kInProgress = 3,  // the first attempt is being decided
  kFinishing = 4,   // its Finish is writing the answer
  kDone = 5,        // the answer is readable
  kLost = 6,        // a claim another Begin of the same id beat: its Begin frees it
};
constexpr uint64_t kPhaseMask = 7;
constexpr uint64_t kWaitersBit = 1u << 3;
constexpr uint64_t kSideAnswerBit = 1u << 4;
constexpr int kTagShift = 5;
constexpr uint64_t kTagMask = 0x7ffu << kTagShift;
constexpr int kGenShift = 16;
constexpr uint64_t kGenMask = 0xffff;
constexpr int kBegunShift = 32;

uint64_t PhaseOf(uint64_t state) { return state & kPhaseMask; }
uint64_t GenOf(uint64_t state) { return (state >> kGenShift) & kGenMask; }
uint32_t BegunOf(uint64_t state) { return static_cast<uint32_t>(state >> kBegunShift); }
uint64_t MakeState(uint64_t phase, uint64_t tag, uint64_t gen, uint32_t begun_ms = 0) {
  return phase | tag | ((gen & kGenMask) << kGenShift) | (uint64_t{begun_ms} << kBegunShift);
}
// A steady time in ms, modulo 2^32 (49 days): ages are differences modulo 2^32.
uint32_t MsOf(int64_t now_ns) { return static_cast<uint32_t>(static_cast<uint64_t>(now_ns / 1'000'000)); }
uint32_t AgeMs(uint64_t state, uint32_t now_ms) { return now_ms - BegunOf(state); }
bool HasId(uint64_t state) {
  const uint64_t phase = PhaseOf(state);
  return phase >= kClaiming && phase <= kDone;
}
// The same entry (a waiter may have set its bit meanwhile): what was read with `before` still holds.
bool SameEntry(uint64_t before, uint64_t after) { return (before | kWaitersBit) == (after | kWaitersBit); }

std::atomic_ref<uint64_t> Ref(uint64_t& word) { return std::atomic_ref<uint64_t>(word); }
uint64_t Load(uint64_t& word) { return Ref(word).load(std::memory_order_acquire); }
void Store(uint64_t& word, uint64_t value) { Ref(word).store(value, std::memory_order_release); }

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}
uint64_t HashOf(RequestId id) { return Mix(id.lo ^ (id.hi * 0x9e3779b97f4a7c15ULL)); }
// A uniform index below n from a uniform 64-bit hash, without a division.
size_t Below(uint64_t hash, size_t n) {
  return static_cast<size_t>((static_cast<unsigned __int128>(hash) * n) >> 64);
}

}  // namespace

// One slot: its bucket's words (the kWays states, in one cache line, then each slot's id.hi and id.lo) and
// its number (for its answer words and its side-map keys).
struct DedupCache::Slot {
  uint64_t* bucket = nullptr;
  size_t way = 0;
  size_t index = 0;  // bucket * kWays + way

  uint64_t& state() const { return bucket[way]; }
  uint64_t& hi() const { return bucket[kWays + 2 * way]; }
  uint64_t& lo() const { return bucket[kWays + 2 * way + 1]; }
};

// Where an id may live: the slots of its two buckets (one when they coincide or the table has one).
struct DedupCache::Place {
  size_t buckets[2] = {0, 0};
  size_t count = 1;  // distinct buckets
  uint64_t tag = 0;
};

struct DedupCache::Side {
  using Key = std::pair<size_t, uint64_t>;  // (slot index, generation): one entry

  // State below is protected by mutex.
  std::mutex mutex;
  std::map<Key, std::vector<Waiter>> waiters;  // of in-progress entries whose state has kWaitersBit
  std::map<Key, std::string> answers;          // of finished entries whose state has kSideAnswerBit
};

struct DedupCache::View {
  uint64_t state = 0;  // kEmpty after Examine freed an expired entry
  RequestId id;        // when HasId(state) and the tag matched
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
    : options_(options),
      ttl_ns_(std::chrono::duration_cast<MonoTime>(options.ttl).count()),
      ways_(std::clamp<size_t>(options.capacity, 1, kWays)),
      buckets_(std::max<size_t>(1, (options.capacity + kWays - 1) / kWays)) {
  const size_t bucket_bytes = buckets_ * kBucketWords * sizeof(uint64_t);
  const size_t answer_bytes = buckets_ * kWays * kAnswerWords * sizeof(uint64_t);
  memory_ = std::calloc(1, bucket_bytes + answer_bytes + 64);
  if (memory_ == nullptr) throw std::bad_alloc();
  // Cache-line aligned: a bucket's states share one line.
  const uintptr_t aligned = (reinterpret_cast<uintptr_t>(memory_) + 63) & ~uintptr_t{63};
  bucket_words_ = reinterpret_cast<uint64_t*>(aligned);
  answer_words_ = bucket_words_ + buckets_ * kBucketWords;
  sides_.reserve(options_.shards);
  for (size_t i = 0; i < options_.shards; ++i) sides_.push_back(std::make_unique<Side>());
}

DedupCache::~DedupCache() { std::free(memory_); }

inline DedupCache::Slot DedupCache::SlotAt(size_t bucket, size_t way) const {
  return Slot{.bucket = bucket_words_ + bucket * kBucketWords, .way = way, .index = bucket * kWays + way};
}

DedupCache::Side& DedupCache::SideOf(const Slot& slot) const { return *sides_[slot.index % sides_.size()]; }

inline DedupCache::Place DedupCache::PlaceOf(RequestId id) const {
  const uint64_t hash = HashOf(id);
  Place place;
  place.tag = (hash & 0x7ff) << kTagShift;
  place.buckets[0] = Below(hash, buckets_);
  place.buckets[1] = Below(Mix(hash + 0x9e3779b97f4a7c15ULL), buckets_);
  place.count = place.buckets[1] == place.buckets[0] ? 1 : 2;
  return place;
}

[[gnu::always_inline]] inline DedupCache::View DedupCache::Examine(const Slot& slot, uint64_t tag,
                                                                   int64_t now_ns,
                                                                   std::vector<Waiter>& orphans) {
  for (;;) {
    View view;
    view.state = Load(slot.state());
    if (!HasId(view.state)) return view;
    if ((view.state & kTagMask) == tag) view.id = RequestId{Load(slot.hi()), Load(slot.lo())};
    const uint64_t again = Load(slot.state());
    if (!SameEntry(view.state, again)) continue;
    view.state = again;
    const uint64_t phase = PhaseOf(view.state);
    if ((phase != kInProgress && phase != kDone) ||
        int64_t{AgeMs(view.state, MsOf(now_ns))} * 1'000'000 < ttl_ns_)
      return view;
    if (!Expire(slot, view.state, orphans)) continue;  // it changed meanwhile: look again
    view.state = MakeState(kEmpty, 0, GenOf(view.state));
    return view;
  }
}

bool DedupCache::Expire(const Slot& slot, uint64_t seen, std::vector<Waiter>& orphans) {
  if (!Ref(slot.state()).compare_exchange_strong(seen, MakeState(kEmpty, 0, GenOf(seen)))) return false;
  expired_.fetch_add(1, std::memory_order_relaxed);
  Retire(slot, seen, orphans);
  return true;
}

void DedupCache::Retire(const Slot& slot, uint64_t seen, std::vector<Waiter>& orphans) {
  if ((seen & (kWaitersBit | kSideAnswerBit)) == 0) return;
  Side& side = SideOf(slot);
  const Side::Key key{slot.index, GenOf(seen)};
  std::lock_guard lock(side.mutex);
  if ((seen & kWaitersBit) != 0) {
    auto it = side.waiters.find(key);
    if (it != side.waiters.end()) {
      for (Waiter& waiter : it->second) orphans.push_back(std::move(waiter));
      side.waiters.erase(it);
    }
  }
  if ((seen & kSideAnswerBit) != 0) side.answers.erase(key);
}

bool DedupCache::Claim(const Slot& slot, uint64_t seen, RequestId id, const Place& place, int64_t now_ns,
                       std::vector<Waiter>& orphans) {
  const uint64_t tag = place.tag;
  const uint64_t gen = GenOf(seen) + 1;
  uint64_t expected = seen;
  if (!Ref(slot.state()).compare_exchange_strong(expected, MakeState(kClaimed, 0, gen))) return false;
  if (PhaseOf(seen) != kEmpty) {  // replaces the oldest entry of a full bucket pair
    evicted_.fetch_add(1, std::memory_order_relaxed);
    Retire(slot, seen, orphans);
  }
  Store(slot.hi(), id.hi);
  Store(slot.lo(), id.lo);
  const uint64_t claiming = MakeState(kClaiming, tag, gen, MsOf(now_ns));
  Ref(slot.state()).store(claiming);  // seq_cst: ordered before the loads below

  // Another Begin of `id` may be claiming another candidate slot right now. Each publishes its claim, then
  // looks at the others' (all sequentially consistent): of two claims, at least one sees the other. A
  // claim loses to any settled entry of the id and to a claim in a lower slot; it kills (kClaiming ->
  // kLost, by CAS) a claim it sees in a higher slot, and wins only by its own CAS kClaiming ->
  // kInProgress. If two claims both won, the one in the lower slot saw the other still claiming (the other
  // missed it, so looked before it was published) and killed it, or saw it settled and lost: so at most
  // one wins; the claim in the lowest slot loses only to a settled entry, so a Begin that lost finds a
  // winner or settled entry when it looks again.
  bool lost = false;
  for (size_t b = 0; b < place.count && !lost; ++b) {
    uint64_t* const words = bucket_words_ + place.buckets[b] * kBucketWords;
    for (size_t w = 0; w < ways_ && !lost; ++w) {
      if ((Ref(words[w]).load() & kTagMask) != tag || (words == slot.bucket && w == slot.way)) continue;
      const Slot other = SlotAt(place.buckets[b], w);
      for (;;) {
        uint64_t s = Ref(other.state()).load();
        if (!HasId(s) || (s & kTagMask) != tag) break;
        const RequestId other_id{Load(other.hi()), Load(other.lo())};
        if (!SameEntry(s, Load(other.state()))) continue;
        if (!(other_id == id)) break;
        if (PhaseOf(s) == kClaiming && other.index > slot.index) {
          if (Ref(other.state()).compare_exchange_strong(s, MakeState(kLost, tag, GenOf(s), BegunOf(s))))
            break;
          continue;  // it settled meanwhile: look again
        }
        lost = true;
        break;
      }
    }
  }
  expected = claiming;
  if (!lost && Ref(slot.state()).compare_exchange_strong(expected, (claiming & ~kPhaseMask) | kInProgress))
    return true;
  Store(slot.state(), MakeState(kEmpty, 0, gen));  // lost or killed: nobody else writes this slot now
  return false;
}

bool DedupCache::Wait(const Slot& slot, uint64_t seen, Waiter& waiter) {
  // The entry's end (Finish, Abandon, eviction, expiry) changes its state by CAS or fetch_add, and takes
  // the side mutex when the state it replaced had kWaitersBit: the bit is set here, with the mutex held
  // until the waiter is stored, so the end either sees the bit and then the waiter, or comes first and
  // this CAS fails.
  Side& side = SideOf(slot);
  std::lock_guard lock(side.mutex);
  uint64_t expected = seen;
  if (!Ref(slot.state()).compare_exchange_strong(expected, seen | kWaitersBit)) return false;
  side.waiters[Side::Key{slot.index, GenOf(seen)}].push_back(std::move(waiter));
  return true;
}

bool DedupCache::ReadAnswer(const Slot& slot, uint64_t seen, std::string& answer) {
  if ((seen & kSideAnswerBit) != 0) {
    Side& side = SideOf(slot);
    std::lock_guard lock(side.mutex);
    auto it = side.answers.find(Side::Key{slot.index, GenOf(seen)});
    if (it == side.answers.end()) return false;  // replaced meanwhile
    answer = it->second;
    return true;
  }
  uint64_t* words = answer_words_ + slot.index * kAnswerWords;
  const uint64_t size = Load(words[0]);
  if (size > kInlineAnswerBytes) return false;  // torn by a new entry's writer
  uint64_t copy[kAnswerWords - 1];
  for (size_t w = 0; w * 8 < size; ++w) copy[w] = Load(words[1 + w]);
  if (!SameEntry(seen, Load(slot.state()))) return false;
  answer.assign(reinterpret_cast<const char*>(copy), size);
  return true;
}

DedupCache::Lookup DedupCache::Begin(RequestId id, MonoTime now, Waiter waiter) {
  const Place place = PlaceOf(id);
  const int64_t now_ns = now.count();
  const uint32_t now_ms = MsOf(now_ns);
  std::vector<Waiter> orphans;
  Lookup found;
  for (;;) {
    // The id's entry, if any; else the slot to take: a free one, else the oldest finished, else the oldest
    // in progress (an expired one is the oldest). Only slots with the id's tag are read in full; for the
    // others the state word says all.
    Slot victim;
    uint64_t victim_state = 0;
    int victim_rank = 0;      // 3 free, 2 finished, 1 in progress
    uint32_t victim_age = 0;  // ms
    bool settling = false;    // another Begin of the id is claiming a slot
    bool answered = false, changed = false;
    for (size_t b = 0; b < place.count && !answered && !changed; ++b) {
      uint64_t* const words = bucket_words_ + place.buckets[b] * kBucketWords;
      for (size_t w = 0; w < ways_ && !answered && !changed; ++w) {
        uint64_t state = Load(words[w]);
        if ((state & kTagMask) == place.tag && HasId(state)) {
          const Slot slot = SlotAt(place.buckets[b], w);
          const View view = Examine(slot, place.tag, now_ns, orphans);
          if (HasId(view.state) && view.id == id) {
            const uint64_t phase = PhaseOf(view.state);
            if (phase == kClaiming) {
              settling = true;
            } else if (phase == kDone) {
              answered = ReadAnswer(slot, view.state, found.answer);
              changed = !answered;
              if (answered) {
                found.outcome = Outcome::kDone;
                hits_.fetch_add(1, std::memory_order_relaxed);
              }
            } else {  // in progress or finishing
              answered = Wait(slot, view.state, waiter);
              changed = !answered;
              if (answered) {
                found.outcome = Outcome::kWaiting;
                waits_.fetch_add(1, std::memory_order_relaxed);
              }
            }
            continue;
          }
          state = view.state;
        }
        const uint32_t age = AgeMs(state, now_ms);
        const uint64_t phase = PhaseOf(state);
        const int rank = phase == kEmpty ? 3 : phase == kDone ? 2 : phase == kInProgress ? 1 : 0;
        if (rank > victim_rank || (rank == victim_rank && rank < 3 && rank > 0 && age > victim_age)) {
          victim = SlotAt(place.buckets[b], w);
          victim_state = state;
          victim_rank = rank;
          victim_age = age;
        }
      }
    }
    if (answered) break;
    if (changed) continue;
    if (settling || victim_rank == 0) {  // a few atomic operations away from settled
      std::this_thread::yield();
      continue;
    }
    if (victim_rank < 3 &&
        int64_t{victim_age} * 1'000'000 >= ttl_ns_) {  // replacing an expired entry: expire it
      if (!Expire(victim, victim_state, orphans)) continue;
      victim_state = MakeState(kEmpty, 0, GenOf(victim_state));
    }
    if (Claim(victim, victim_state, id, place, now_ns, orphans)) {
      found.outcome = Outcome::kNew;
      inserted_.fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  for (Waiter& orphan : orphans) orphan(std::nullopt);
  return found;
}

bool DedupCache::FindInProgress(RequestId id, Slot& slot, uint64_t& seen) {
  const Place place = PlaceOf(id);
  for (size_t b = 0; b < place.count; ++b) {
    uint64_t* const words = bucket_words_ + place.buckets[b] * kBucketWords;
    for (size_t w = 0; w < ways_; ++w) {
      if ((Load(words[w]) & (kTagMask | kPhaseMask)) != (place.tag | kInProgress)) continue;
      slot = SlotAt(place.buckets[b], w);
      for (;;) {
        seen = Load(slot.state());
        if (PhaseOf(seen) != kInProgress || (seen & kTagMask) != place.tag) break;
        const RequestId slot_id{Load(slot.hi()), Load(slot.lo())};
        if (!SameEntry(seen, Load(slot.state()))) continue;
        if (slot_id == id) return true;
        break;
      }
    }
  }
  return false;
}

void DedupCache::Finish(RequestId id, std::string answer) {
  Slot slot;
  uint64_t seen = 0;
  for (;;) {
    if (!FindInProgress(id, slot, seen)) return;  // finished already, abandoned, evicted or expired
    const uint64_t finishing = (seen & ~kPhaseMask) | kFinishing;
    if (Ref(slot.state()).compare_exchange_strong(seen, finishing)) break;
  }
  // This slot is ours until kDone: nobody else writes a finishing slot.
  const bool on_side = answer.size() > kInlineAnswerBytes;
  if (on_side) {
    Side& side = SideOf(slot);
    std::lock_guard lock(side.mutex);
    side.answers[Side::Key{slot.index, GenOf(seen)}] = answer;
  } else {
    uint64_t copy[kAnswerWords - 1] = {};
    std::memcpy(copy, answer.data(), answer.size());
    uint64_t* words = answer_words_ + slot.index * kAnswerWords;
    Store(words[0], answer.size());
    for (size_t w = 0; w * 8 < answer.size(); ++w) Store(words[1 + w], copy[w]);
  }
  // fetch_add keeps a kWaitersBit set meanwhile: kFinishing + 1 == kDone.
  const uint64_t before = Ref(slot.state()).fetch_add((kDone - kFinishing) | (on_side ? kSideAnswerBit : 0));
  if ((before & kWaitersBit) == 0) return;
  std::vector<Waiter> waiters;
  Retire(slot, before & ~kSideAnswerBit, waiters);
  for (Waiter& waiter : waiters) waiter(answer);
}

void DedupCache::Abandon(RequestId id) {
  Slot slot;
  uint64_t seen = 0;
  for (;;) {
    if (!FindInProgress(id, slot, seen)) return;
    if (Ref(slot.state()).compare_exchange_strong(seen, MakeState(kEmpty, 0, GenOf(seen)))) break;
  }
  abandoned_.fetch_add(1, std::memory_order_relaxed);
  std::vector<Waiter> waiters;
  Retire(slot, seen, waiters);
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
  for (size_t b = 0; b < buckets_; ++b) {
    for (size_t w = 0; w < ways_; ++w) {
      const uint64_t phase = PhaseOf(Load(SlotAt(b, w).state()));
      if (phase >= kInProgress && phase <= kDone) ++s.size;
    }
  }
  return s;
}

}  // namespace ringlimit::cluster
