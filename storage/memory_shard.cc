#include "storage/memory_shard.h"

#include <algorithm>
#include <boost/container/small_vector.hpp>
#include <cstring>
#include <limits>
#include <utility>

#include "limiter/merge_pair.h"
#include "storage/key_codec.h"

namespace ringlimit::storage {
namespace {

constexpr uint32_t kNil = std::numeric_limits<uint32_t>::max();
constexpr uint32_t kChunkBits = 10;
constexpr uint32_t kChunkSize = 1u << kChunkBits;
// Cells per chunk of the group forms' slab (MemoryShard::CellAt): 32 KiB a chunk.
constexpr uint32_t kCellChunkBits = 10;
constexpr uint32_t kCellChunkSize = 1u << kCellChunkBits;

// Entry::meta: version in the high 48 bits, then the key's size byte (kHeapKey: on the heap), then the
// flags byte.
constexpr uint64_t kKeyShift = 8;
constexpr uint64_t kHeapKey = 0xff;
constexpr size_t kInlineKey = 16;  // bytes of key held in the entry itself
// Spare states kept for reuse, per shard, and the most memory one may hold to be kept.
constexpr size_t kSpareStates = 16;
constexpr size_t kSpareStateBytes = 1024;

bool SmallState(const limiter::MergeState& s) { return limiter::HeapBytes(s) <= kSpareStateBytes; }

// What the allocator adds to a heap block of `bytes` (glibc: an 8-byte header, 16-byte rounding, 32 bytes
// at least), so that the accounting follows the resident size.
size_t HeapBlock(size_t bytes) { return std::max<size_t>(32, (bytes + 8 + 15) & ~size_t{15}); }

// What one state costs beyond its slab entry (counted with its chunk): a slot of the hash set of heads
// with its share of free slots and group metadata (key_bytes_bench measures 6-10 bytes at 1 M keys).
constexpr size_t kEntryOverhead = 12;

// A heap MergeState: the object and every vector with room, each a heap block.
size_t HeapStateBytes(const limiter::MergeState& s) {
  size_t bytes = HeapBlock(sizeof(limiter::MergeState));
  auto vector = [&](size_t capacity, size_t size) {
    bytes += capacity == 0 ? 0 : HeapBlock(capacity * size);
  };
  vector(s.base.included.capacity(), sizeof(limiter::Included));
  vector(s.contributions.capacity(), sizeof(limiter::Contribution));
  vector(s.grants.records.capacity(), sizeof(limiter::GrantRecord));
  for (const limiter::Contribution& c : s.contributions) {
    vector(c.cells.capacity(), sizeof(limiter::Cell));
    vector(c.stamps.capacity(), sizeof(limiter::TimeNs));
  }
  return bytes;
}
// An interned (name, spec): its SlotInfo, its key in slot_ids_ and the name twice.
size_t SlotBytes(std::string_view name) { return 64 + sizeof(limiter::LimitSpec) + 2 * (name.size() + 64); }

constexpr uint64_t kDirty = 1;   // newer than disk (write-back), in dirty_
constexpr uint64_t kOnDisk = 2;  // a row may exist on disk (write-back): dropping it leaves a delete
constexpr uint64_t kHead = 4;    // the first entry of its entity's chain (in heads_): counted once per key
constexpr uint64_t kPair = 8;    // the state is in the pair form: half in `packed`, half in a pair cell
constexpr uint64_t kTrio = 16;   // the state is in the trio form: a third in `packed`, the rest in two cells
constexpr uint64_t kVersionMax = (uint64_t{1} << 48) - 1;

uint64_t Version(uint64_t meta) { return meta >> 16; }

// The version of a state changed by Update at `now`: a hybrid logical clock, so a state recreated after
// an idle drop, an erase or a restart still gets a version above the ones it had before (replicas keep
// the newest by version). Milliseconds since the epoch shifted by 4 (16 changes per ms before the
// logical part runs ahead of the clock); clamped to the 48 bits of Entry::meta (enough until ~2500).
uint64_t NextVersion(uint64_t old_version, limiter::TimeNs now) {
  uint64_t clock =
      now <= 0 ? 0 : std::min<uint64_t>(static_cast<uint64_t>(now / 1'000'000), kVersionMax >> 4);
  return std::min(std::max(old_version + 1, clock << 4), kVersionMax);
}
uint64_t Flags(uint64_t meta) { return meta & 0xff; }
// `low`: the key byte and the flags (kept as they are when the version changes).
uint64_t Meta(uint64_t version, uint64_t low) {
  return (std::min(version, kVersionMax) << 16) | (low & 0xffff);
}

template <typename T>
void Append(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// Fixed-size spec fields first, then the name: unambiguous.
std::string SlotKey(std::string_view name, const limiter::LimitSpec& s) {
  std::string key;
  key.reserve(64 + name.size());
  Append(key, static_cast<uint8_t>(s.algorithm));
  Append(key, s.limit);
  Append(key, s.window);
  Append(key, s.burst);
  Append(key, s.buckets);
  Append(key, s.max_delay);
  Append(key, static_cast<uint8_t>(s.mode));
  Append(key, s.soft_pct);
  Append(key, s.dynamic_limit);
  Append(key, static_cast<uint8_t>(s.count_denied));
  key.append(name);
  return key;
}

const StoredState* FindLoaded(const Loaded& loaded, std::string_view name) {
  if (!loaded.valid) return nullptr;
  for (const auto& s : loaded.states) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

}  // namespace

// 80 bytes. The entity key is in `key` when it fits (its size in meta), else `key` holds a pointer to a heap
// block of its size (uint32) and its bytes. The state is, in this order of preference: packed in `packed`
// (limiter::PackState: one contributor, packed.word[0] != 0, the contributor as a tag of this shard); in
// a group form (limiter::PackGroup, tags of this shard): the pair form (kPair in meta, two contributors)
// or the trio form (kTrio, three), its first 32 bytes in `packed` and the rest in the 32-byte cell whose
// index is the high half of packed.word[3] (a trio: and in the cell whose index is the high half of that
// cell's word 3); or, with packed.word[0] == 0, packed.word[1] is a pointer to a heap MergeState (null: the
// empty state). Owned by the shard: Free releases the key, the cells and the heap state.
struct MemoryShard::Entry {
  char key[kInlineKey] = {};
  ring::Token token = 0;  // ring::RingToken(entity), as the caller computed it: never hashed again here
  uint64_t meta = 0;
  uint32_t slot = kNil;
  uint32_t lru_prev = kNil;
  uint32_t lru_next = kNil;  // also the free-list link
  uint32_t entity_next = kNil;
  limiter::PackedState packed;
};

namespace {

std::string_view KeyOf(const MemoryShard::Entry& e) {
  const uint64_t size = (e.meta >> kKeyShift) & 0xff;
  if (size != kHeapKey) return std::string_view(e.key, size);
  const char* block;
  std::memcpy(&block, e.key, sizeof(block));
  uint32_t heap_size;
  std::memcpy(&heap_size, block, sizeof(heap_size));
  return std::string_view(block + sizeof(heap_size), heap_size);
}

// Sets the key of a fresh entry (meta's key byte was 0).
void SetKey(MemoryShard::Entry& e, std::string_view key) {
  if (key.size() <= kInlineKey) {
    std::memcpy(e.key, key.data(), key.size());
    e.meta |= uint64_t{key.size()} << kKeyShift;
    return;
  }
  const auto size = static_cast<uint32_t>(std::min<size_t>(key.size(), UINT32_MAX));
  char* block = static_cast<char*>(std::malloc(sizeof(size) + size));
  if (block == nullptr) throw std::bad_alloc();
  std::memcpy(block, &size, sizeof(size));
  std::memcpy(block + sizeof(size), key.data(), size);
  std::memcpy(e.key, &block, sizeof(block));
  e.meta |= kHeapKey << kKeyShift;
}

// The bytes the key takes on the heap (0 when in the entry).
size_t KeyHeapBytes(const MemoryShard::Entry& e) {
  return ((e.meta >> kKeyShift) & 0xff) == kHeapKey ? HeapBlock(sizeof(uint32_t) + KeyOf(e).size()) : 0;
}

void FreeKey(MemoryShard::Entry& e) {
  if (((e.meta >> kKeyShift) & 0xff) == kHeapKey) {
    char* block;
    std::memcpy(&block, e.key, sizeof(block));
    std::free(block);
  }
  e.meta &= ~(uint64_t{0xff} << kKeyShift);
}

// The contributors of the entry's group form: 2 (pair), 3 (trio), 0 (not in a group form).
size_t GroupOf(const MemoryShard::Entry& e) {
  return (e.meta & kPair) != 0 ? 2 : (e.meta & kTrio) != 0 ? 3 : 0;
}
constexpr uint64_t GroupFlag(size_t n) { return n == 2 ? kPair : kTrio; }
uint32_t CellIndex(const MemoryShard::Entry& e) { return static_cast<uint32_t>(e.packed.word[3] >> 32); }

limiter::MergeState* HeapOf(const MemoryShard::Entry& e) {
  return e.packed.word[0] != 0 || GroupOf(e) != 0 ? nullptr
                                                  : reinterpret_cast<limiter::MergeState*>(e.packed.word[1]);
}

void SetHeap(MemoryShard::Entry& e, limiter::MergeState* state) {
  e.packed = limiter::PackedState{};
  e.packed.word[1] = reinterpret_cast<uint64_t>(state);
}

const limiter::MergeState kEmptyState;

}  // namespace

struct MemoryShard::SlotInfo {
  std::string name;
  limiter::LimitSpec spec;
  uint32_t refs = 0;
};

// The set of entity heads hashes and compares entries by their entity key; the hash is the ring token,
// stored in the entry (a rehash reads it, it does not hash the key again) and precomputed in an
// EntityKey lookup.
struct MemoryShard::EntityHash {
  using is_transparent = void;
  const MemoryShard* shard;
  size_t operator()(uint32_t index) const { return shard->At(index).token; }
  size_t operator()(const EntityKey& key) const { return key.token; }
};

struct MemoryShard::EntityEq {
  using is_transparent = void;
  const MemoryShard* shard;
  bool operator()(uint32_t a, uint32_t b) const { return a == b; }
  bool operator()(const EntityKey& k, uint32_t i) const { return KeyOf(shard->At(i)) == k.entity; }
  bool operator()(uint32_t i, const EntityKey& k) const { return KeyOf(shard->At(i)) == k.entity; }
};

MemoryShard::MemoryShard(const MemoryStoreOptions& options, size_t capacity, size_t byte_capacity)
    : options_(options),
      capacity_(capacity),
      byte_capacity_(byte_capacity),
      free_head_(kNil),
      lru_head_(kNil),
      lru_tail_(kNil),
      heads_(std::make_unique<boost::unordered_flat_set<uint32_t, EntityHash, EntityEq>>(0, EntityHash{this},
                                                                                         EntityEq{this})) {
  static_assert(sizeof(Entry) == 80, "keep the entry small");
}

MemoryShard::~MemoryShard() {
  for (uint32_t index = 0; index < fresh_; ++index) {
    Entry& e = At(index);
    if (e.slot == kNil) continue;
    FreeKey(e);
    delete HeapOf(e);
  }
}

MemoryShard::Entry& MemoryShard::At(uint32_t index) const {
  return chunks_[index >> kChunkBits][index & (kChunkSize - 1)];
}

uint32_t MemoryShard::Allocate() {
  if (free_head_ != kNil) {
    uint32_t index = free_head_;
    free_head_ = At(index).lru_next;
    At(index) = Entry{};
    return index;
  }
  if (fresh_ == chunks_.size() * kChunkSize) {
    chunks_.push_back(std::make_unique<Entry[]>(kChunkSize));
    accounted_.push_back(std::make_unique<uint32_t[]>(kChunkSize));
    bytes_.fetch_add(kChunkSize * (sizeof(Entry) + sizeof(uint32_t)), std::memory_order_relaxed);
  }
  return fresh_++;
}

MemoryShard::Cell& MemoryShard::CellAt(uint32_t index) const {
  return cell_chunks_[index >> kCellChunkBits][index & (kCellChunkSize - 1)];
}

uint32_t MemoryShard::AllocateCell() {
  if (cell_free_ != kNil) {
    const uint32_t index = cell_free_;
    cell_free_ = static_cast<uint32_t>(CellAt(index)[0]);
    return index;
  }
  if (cell_fresh_ == cell_chunks_.size() * kCellChunkSize) {
    cell_chunks_.push_back(std::make_unique<Cell[]>(kCellChunkSize));
    bytes_.fetch_add(kCellChunkSize * sizeof(Cell), std::memory_order_relaxed);
  }
  return cell_fresh_++;
}

void MemoryShard::ReleaseCell(uint32_t index) {
  CellAt(index)[0] = cell_free_;
  cell_free_ = index;
}

void MemoryShard::ReleaseHeap(Entry& e) {
  if (const size_t group = GroupOf(e); group != 0) {  // the cells go to the free list
    const uint32_t first = CellIndex(e);
    if (group == 3) ReleaseCell(static_cast<uint32_t>(CellAt(first)[3] >> 32));
    ReleaseCell(first);
    e.meta &= ~(kPair | kTrio);
    e.packed = limiter::PackedState{};
    return;
  }
  std::unique_ptr<limiter::MergeState> state(HeapOf(e));
  SetHeap(e, nullptr);
  if (state != nullptr && spare_states_.size() < kSpareStates && SmallState(*state)) {
    spare_states_.push_back(std::move(state));
  }
}

void MemoryShard::Free(uint32_t index) {
  Entry& e = At(index);
  FreeKey(e);
  ReleaseHeap(e);
  e.slot = kNil;
  e.lru_next = free_head_;
  free_head_ = index;
}

uint32_t& MemoryShard::Accounted(uint32_t index) const {
  return accounted_[index >> kChunkBits][index & (kChunkSize - 1)];
}

void MemoryShard::Account(uint32_t index) {
  const Entry& e = At(index);
  const limiter::MergeState* heap = HeapOf(e);
  size_t bytes = kEntryOverhead + (heap != nullptr ? HeapStateBytes(*heap) : 0) + KeyHeapBytes(e);
  bytes = std::min<size_t>(bytes, std::numeric_limits<uint32_t>::max());
  uint32_t& accounted = Accounted(index);
  bytes_.fetch_add(bytes - accounted, std::memory_order_relaxed);  // (unsigned: wraps to a subtraction)
  accounted = static_cast<uint32_t>(bytes);
}

bool MemoryShard::TagOf(limiter::ContributorId id, uint16_t& tag) {
  if (last_tag_ < tag_ids_.size() && tag_ids_[last_tag_] == id) {
    tag = last_tag_;
    return true;
  }
  auto it = tags_.find(id);
  if (it == tags_.end()) {
    if (tag_ids_.size() > UINT16_MAX) return false;  // every tag taken: the state stays on the heap
    it = tags_.emplace(id, static_cast<uint16_t>(tag_ids_.size())).first;
    tag_ids_.push_back(id);
  }
  tag = last_tag_ = it->second;
  return true;
}

const limiter::MergeState& MemoryShard::StateOf(uint32_t index, limiter::MergeState& scratch) const {
  const Entry& e = At(index);
  if (const size_t group = GroupOf(e); group != 0) {
    if (group == 2) {
      UnpackGroupOf<2>(e, scratch);
    } else {
      UnpackGroupOf<3>(e, scratch);
    }
    return scratch;
  }
  if (e.packed.word[0] == 0) {
    const limiter::MergeState* heap = HeapOf(e);
    return heap != nullptr ? *heap : kEmptyState;
  }
  limiter::UnpackState(slots_[e.slot].spec, e.packed, tag_ids_[limiter::PackedTag(e.packed)], scratch);
  return scratch;
}

void MemoryShard::Keep(uint32_t index, const limiter::MergeState& state) {
  Entry& e = At(index);
  const limiter::LimitSpec& spec = slots_[e.slot].spec;
  const limiter::ContributorId id = limiter::PackCandidate(state);
  limiter::PackedState packed;
  uint16_t tag = 0;
  if (id != 0 && TagOf(id, tag) && limiter::PackState(spec, state, tag, packed)) {
    if (e.packed.word[0] == 0 || GroupOf(e) != 0) ReleaseHeap(e);  // (`state` may be the heap object)
    e.packed = packed;
  } else if (KeepGroup<2>(e, spec, state) || KeepGroup<3>(e, spec, state)) {
    // (in a group form)
  } else if (state.algorithm == limiter::Algorithm{} && state == kEmptyState) {
    ReleaseHeap(e);
  } else {
    if (GroupOf(e) != 0) ReleaseHeap(e);  // the group cell goes (`state` is a scratch copy, never in it)
    limiter::MergeState* heap = HeapOf(e);
    if (heap == nullptr) {  // promoted: a heap object, a spare one when there is one
      if (spare_states_.empty()) {
        heap = new limiter::MergeState();
      } else {
        heap = spare_states_.back().release();
        spare_states_.pop_back();
      }
      SetHeap(e, heap);
    }
    if (heap != &state) *heap = state;
  }
  Account(index);
}

template <size_t N>
void MemoryShard::UnpackGroupOf(const Entry& e, limiter::MergeState& scratch) const {
  limiter::PackedGroup<N> group;
  std::copy(std::begin(e.packed.word), std::end(e.packed.word), group.word);
  const Cell& first = CellAt(CellIndex(e));
  std::copy(first.begin(), first.end(), group.word + 4);
  if constexpr (N == 3) {
    const Cell& second = CellAt(static_cast<uint32_t>(first[3] >> 32));
    std::copy(second.begin(), second.end(), group.word + 8);
  }
  const std::array<uint16_t, N> tags = limiter::GroupTags(group);
  std::array<limiter::ContributorId, N> ids{};
  for (size_t i = 0; i < N; ++i) ids[i] = tag_ids_[tags[i]];
  limiter::UnpackGroup(slots_[e.slot].spec, group, ids, scratch);
}

template <size_t N>
bool MemoryShard::KeepGroup(Entry& e, const limiter::LimitSpec& spec, const limiter::MergeState& state) {
  std::array<limiter::ContributorId, N> ids{};
  std::array<uint16_t, N> tags{};
  limiter::PackedGroup<N> group;
  if (!limiter::GroupCandidates(spec, state, ids)) return false;
  for (size_t i = 0; i < N; ++i) {
    if (!TagOf(ids[i], tags[i])) return false;
  }
  if (!limiter::PackGroup(spec, state, tags, group)) return false;
  // The cells: kept from the entry's group form (a pair becoming a trio keeps its cell and takes a second;
  // a trio becoming a pair gives its second back), taken from the free list for the rest.
  const size_t had = GroupOf(e);
  uint32_t first = 0, second = kNil;
  if (had != 0) {
    first = CellIndex(e);
    if (had == 3) second = static_cast<uint32_t>(CellAt(first)[3] >> 32);
  } else {
    if (e.packed.word[0] == 0) ReleaseHeap(e);  // (`state` may be the heap object: packed first)
    first = AllocateCell();
  }
  if (N == 3 && second == kNil) second = AllocateCell();
  if (N == 2 && second != kNil) ReleaseCell(second);
  e.meta = (e.meta & ~(kPair | kTrio)) | GroupFlag(N);
  std::copy(group.word, group.word + 4, e.packed.word);
  e.packed.word[3] |= uint64_t{first} << 32;
  Cell& cell = CellAt(first);
  std::copy(group.word + 4, group.word + 8, cell.begin());
  if constexpr (N == 3) {
    cell[3] |= uint64_t{second} << 32;
    std::copy(group.word + 8, group.word + 12, CellAt(second).begin());
  }
  return true;
}

uint32_t MemoryShard::FindHead(EntityKey key) const {
  auto it = heads_->find(key);
  return it == heads_->end() ? kNil : *it;
}

uint32_t MemoryShard::FindInChain(uint32_t head, std::string_view name) const {
  for (uint32_t i = head; i != kNil; i = At(i).entity_next) {
    if (slots_[At(i).slot].name == name) return i;
  }
  return kNil;
}

uint32_t MemoryShard::Intern(std::string_view name, const limiter::LimitSpec& spec) {
  if (last_interned_ != kNil) {
    SlotInfo& last = slots_[last_interned_];
    if (last.refs > 0 && last.name == name && last.spec == spec) {
      ++last.refs;
      return last_interned_;
    }
  }
  std::string key = SlotKey(name, spec);
  auto it = slot_ids_.find(key);
  if (it != slot_ids_.end()) {
    ++slots_[it->second].refs;
    last_interned_ = it->second;
    return it->second;
  }
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  slots_[slot] = SlotInfo{std::string(name), spec, 1};
  slot_ids_.emplace(std::move(key), slot);
  bytes_.fetch_add(SlotBytes(name), std::memory_order_relaxed);
  last_interned_ = slot;
  return slot;
}

void MemoryShard::Release(uint32_t slot) {
  SlotInfo& info = slots_[slot];
  if (--info.refs > 0) return;
  slot_ids_.erase(SlotKey(info.name, info.spec));
  bytes_.fetch_sub(SlotBytes(info.name), std::memory_order_relaxed);
  info.name = std::string();
  free_slots_.push_back(slot);
}

void MemoryShard::LruUnlink(uint32_t index) {
  Entry& e = At(index);
  if (e.lru_prev != kNil)
    At(e.lru_prev).lru_next = e.lru_next;
  else
    lru_head_ = e.lru_next;
  if (e.lru_next != kNil)
    At(e.lru_next).lru_prev = e.lru_prev;
  else
    lru_tail_ = e.lru_prev;
  e.lru_prev = e.lru_next = kNil;
}

void MemoryShard::LruPushFront(uint32_t index) {
  Entry& e = At(index);
  e.lru_prev = kNil;
  e.lru_next = lru_head_;
  if (lru_head_ != kNil) At(lru_head_).lru_prev = index;
  lru_head_ = index;
  if (lru_tail_ == kNil) lru_tail_ = index;
}

uint32_t MemoryShard::Insert(EntityKey key, std::string_view name, const limiter::LimitSpec& spec,
                             uint64_t version, const limiter::MergeState& state, bool on_disk) {
  uint32_t index = Allocate();
  Entry& e = At(index);
  e.meta = Meta(version, on_disk ? kOnDisk : 0);
  SetKey(e, key.entity);
  e.token = key.token;
  e.slot = Intern(name, spec);
  uint32_t head = FindHead(key);
  if (head == kNil) {
    heads_->insert(index);
    e.meta |= kHead;
  } else {  // second in the chain: the head (and so the set) stays as it is
    e.entity_next = At(head).entity_next;
    At(head).entity_next = index;
  }
  LruPushFront(index);
  ++inserts_;
  keys_.fetch_add(1, std::memory_order_relaxed);
  Accounted(index) = 0;
  Keep(index, state);
  return index;
}

void MemoryShard::Drop(uint32_t index, DropReason reason) {
  Entry& e = At(index);
  const ring::Token token = e.token;
  EntityKey key{KeyOf(e), token};
  if (options_.write_back && reason != DropReason::kEvicted && (Flags(e.meta) & kOnDisk)) {
    const std::string& name = slots_[e.slot].name;
    tombs_.try_emplace(EncodeRowKey(token, key.entity, name), Tomb{std::string(key.entity), token, name});
  }
  if (dirty_.erase(index) > 0) dirty_count_.fetch_sub(1, std::memory_order_relaxed);
  uint32_t head = FindHead(key);
  if (head == index) {
    heads_->erase(index);
    if (e.entity_next != kNil) {
      heads_->insert(e.entity_next);
      At(e.entity_next).meta |= kHead;
    }
  } else {
    uint32_t prev = head;
    while (At(prev).entity_next != index) prev = At(prev).entity_next;
    At(prev).entity_next = e.entity_next;
  }
  LruUnlink(index);
  Release(e.slot);
  Free(index);
  const uint32_t bytes = std::exchange(Accounted(index), 0);
  bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  released_ += bytes;
  keys_.fetch_sub(1, std::memory_order_relaxed);
  if (reason == DropReason::kIdle) idle_drops_.fetch_add(1, std::memory_order_relaxed);
  if (reason == DropReason::kEvicted) evictions_.fetch_add(1, std::memory_order_relaxed);
}

void MemoryShard::Changed(uint32_t index, uint64_t version) {
  Entry& e = At(index);
  e.meta = Meta(version, e.meta);
  MarkDirty(index);
}

void MemoryShard::MarkDirty(uint32_t index) {
  if (!options_.write_back) return;
  Entry& e = At(index);
  if (Flags(e.meta) & kDirty) return;
  e.meta |= kDirty;
  dirty_.insert(index);
  dirty_count_.fetch_add(1, std::memory_order_relaxed);
}

StoredState MemoryShard::Copy(uint32_t index) const {
  StoredState out;
  CopyInto(index, out);
  return out;
}

void MemoryShard::CopyInto(uint32_t index, StoredState& out) const {
  const Entry& e = At(index);
  out.name = slots_[e.slot].name;
  out.spec = slots_[e.slot].spec;
  if (const limiter::MergeState& state = StateOf(index, out.state); &state != &out.state) {
    out.state = state;  // (packed and pair-packed states are unpacked into it)
  }
  out.version = Version(e.meta);
}

bool MemoryShard::Tombstoned(EntityKey key, std::string_view name) const {
  return !tombs_.empty() && tombs_.contains(EncodeRowKey(key.token, key.entity, name));
}

std::optional<NeedLoad> MemoryShard::Resolve(EntityKey key, std::span<const std::string_view> names,
                                             const Loaded& loaded, std::span<uint32_t> indices) {
  uint32_t head = FindHead(key);
  NeedLoad need;
  bool must_load = false;
  for (size_t i = 0; i < names.size(); ++i) {
    indices[i] = FindInChain(head, names[i]);
    if (indices[i] != kNil || options_.loader == nullptr || Tombstoned(key, names[i])) continue;
    need.names.push_back(names[i]);
    bool asked = false;
    for (const auto& a : loaded.asked) asked |= a == names[i];
    must_load |= !loaded.valid || loaded.epoch != epoch_ || !asked;
  }
  if (must_load) {  // reload every missing name at the current epoch
    need.epoch = epoch_;
    return need;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (indices[i] != kNil || options_.loader == nullptr || Tombstoned(key, names[i])) continue;
    if (const StoredState* s = FindLoaded(loaded, names[i])) {
      indices[i] = Insert(key, s->name, s->spec, s->version, s->state, /*on_disk=*/true);
    }
  }
  return std::nullopt;
}

MemoryShard::Outcome MemoryShard::Update(EntityKey key, std::span<const Slot> slots, limiter::TimeNs now,
                                         const std::function<void(std::span<limiter::MergeState* const>)>& fn,
                                         const Loaded& loaded, bool want_changes) {
  const size_t n = slots.size();
  boost::container::small_vector<std::string_view, 4> names(n);
  for (size_t i = 0; i < n; ++i) names[i] = slots[i].name;
  boost::container::small_vector<uint32_t, 4> indices(n, kNil);
  // States not in memory yet (and a name given twice: the later slot works on a copy and wins).
  boost::container::small_vector<limiter::MergeState, 4> fresh(n);
  boost::container::small_vector<limiter::MergeState*, 4> pointers(n);
  boost::container::small_vector<uint64_t, 4> before(n);
  Outcome outcome;

  std::lock_guard lock(mutex_);
  outcome.need = Resolve(key, names, loaded, indices);
  if (outcome.need) return outcome;
  if (scratch_.size() < n) scratch_.resize(n);  // (before any pointer into it is taken)
  for (size_t i = 0; i < n; ++i) {
    pointers[i] = &fresh[i];
    if (indices[i] == kNil) {
      // A new state is charged in a spare one's storage, else in this shard's scratch state (whose vectors
      // keep their room): no allocation when it is kept below.
      if (!spare_states_.empty()) {
        limiter::Clear(*spare_states_.back());
        std::swap(fresh[i], *spare_states_.back());
      } else {
        limiter::Clear(scratch_[i]);
        pointers[i] = &scratch_[i];
      }
      continue;
    }
    bool repeated = false;
    for (size_t j = 0; j < i; ++j) repeated |= indices[j] == indices[i];
    if (repeated) {
      fresh[i] = StateOf(indices[i], scratch_[i]);
    } else if (limiter::MergeState* heap = HeapOf(At(indices[i])); heap != nullptr) {
      pointers[i] = heap;  // charged in place: no copy on the request path
    } else {
      // Packed (or empty): charged unpacked in this shard's scratch state, whose vectors keep their room.
      pointers[i] = &scratch_[i];
      if (&StateOf(indices[i], scratch_[i]) != &scratch_[i]) limiter::Clear(scratch_[i]);
    }
    before[i] = limiter::ChangeDigest(*pointers[i]);
  }
  fn(std::span<limiter::MergeState* const>(pointers.data(), n));

  for (size_t i = 0; i < n; ++i) {
    uint32_t index = indices[i];
    const limiter::LimitSpec& spec = *slots[i].spec;
    bool changed = index == kNil || limiter::ChangeDigest(*pointers[i]) != before[i];
    if (index == kNil) {
      if (pointers[i]->algorithm == limiter::Algorithm{}) continue;  // nothing to keep
      // The same name twice in one call: the later slot's state wins, in one entry.
      index = FindInChain(FindHead(key), slots[i].name);
    }
    if (index == kNil) {
      index = Insert(key, slots[i].name, spec, 0, kEmptyState, /*on_disk=*/false);
      if (Tombstoned(key, slots[i].name)) At(index).meta |= kOnDisk;  // the old row is not deleted yet
      changed = true;
    } else {
      LruUnlink(index);
      LruPushFront(index);
      if (slots_[At(index).slot].spec != spec) {
        uint32_t old = At(index).slot;
        At(index).slot = Intern(slots[i].name, spec);
        Release(old);
        changed = true;
      }
    }
    if (!changed) continue;  // (what ChangeDigest does not see is not kept: nothing CheckMerged does)
    limiter::Collect(spec, *pointers[i]);
    Keep(index, *pointers[i]);  // packed again, promoted to the heap, or compacted back
    Changed(index, NextVersion(Version(At(index).meta), now));
    if (want_changes) outcome.changed.push_back({std::string(slots[i].name), Version(At(index).meta)});
  }
  outcome.pressure = Trim(now);
  outcome.released = std::exchange(released_, 0);
  return outcome;
}

MemoryShard::ApplyOutcome MemoryShard::Absorb(EntityKey key, const StoredState& state, const Loaded& loaded) {
  ApplyOutcome outcome;
  std::string_view name = state.name;
  uint32_t index = kNil;
  std::lock_guard lock(mutex_);
  outcome.need =
      Resolve(key, std::span<const std::string_view>(&name, 1), loaded, std::span<uint32_t>(&index, 1));
  if (outcome.need) return outcome;
  limiter::MergeState& scratch = Scratch(0);
  if (index == kNil) {
    scratch = state.state;
    limiter::Collect(state.spec, scratch);
    index = Insert(key, state.name, state.spec, state.version, scratch, /*on_disk=*/Tombstoned(key, name));
    MarkDirty(index);
  } else {
    Entry& e = At(index);
    limiter::MergeState* heap = HeapOf(e);
    limiter::MergeState& stored = heap != nullptr ? *heap : scratch;
    if (heap == nullptr && &StateOf(index, scratch) != &scratch) limiter::Clear(scratch);
    // The spec the state was last updated with stays, unless this copy held nothing under it.
    const bool adopt_spec =
        stored.algorithm == limiter::Algorithm{} || stored.algorithm != slots_[e.slot].spec.algorithm;
    if (!limiter::MergeInto(stored, state.state)) return outcome;  // nothing new in it
    if (adopt_spec) {
      uint32_t old_slot = e.slot;
      e.slot = Intern(state.name, state.spec);
      Release(old_slot);
    }
    limiter::Collect(slots_[e.slot].spec, stored);
    Keep(index, stored);
    Changed(index, std::max(Version(e.meta) + 1, state.version));
    LruUnlink(index);
    LruPushFront(index);
  }
  outcome.applied = true;
  outcome.pressure = Trim(std::numeric_limits<limiter::TimeNs>::min());
  outcome.released = std::exchange(released_, 0);
  return outcome;
}

uint64_t MemoryShard::Epoch() {
  std::lock_guard lock(mutex_);
  return epoch_;
}

std::optional<std::vector<StoredState>> MemoryShard::Get(EntityKey key, const Loaded& on_disk) {
  std::vector<StoredState> out;
  if (!GetInto(key, on_disk, out)) return std::nullopt;
  return out;
}

bool MemoryShard::GetInto(EntityKey key, const Loaded& on_disk, std::vector<StoredState>& out) {
  std::lock_guard lock(mutex_);
  if (on_disk.valid) {
    if (on_disk.epoch != epoch_) return false;
    for (const StoredState& s : on_disk.states) {
      if (FindInChain(FindHead(key), s.name) == kNil && !Tombstoned(key, s.name)) {
        Insert(key, s.name, s.spec, s.version, s.state, true);
      }
    }
  }
  size_t n = 0;
  for (uint32_t i = FindHead(key); i != kNil; i = At(i).entity_next) ++n;
  out.resize(n);
  n = 0;
  for (uint32_t i = FindHead(key); i != kNil; i = At(i).entity_next) CopyInto(i, out[n++]);
  std::sort(out.begin(), out.end(),
            [](const StoredState& a, const StoredState& b) { return a.name < b.name; });
  Trim(std::numeric_limits<limiter::TimeNs>::min());
  return true;
}

std::optional<std::vector<std::string>> MemoryShard::Erase(EntityKey key,
                                                           std::optional<std::string_view> name,
                                                           const Loaded& on_disk) {
  std::vector<std::string> removed;
  std::lock_guard lock(mutex_);
  if (on_disk.valid && on_disk.epoch != epoch_) return std::nullopt;
  for (uint32_t i = FindHead(key); i != kNil;) {
    uint32_t next = At(i).entity_next;
    const std::string& n = slots_[At(i).slot].name;
    if (!name || n == *name) {
      removed.push_back(n);
      At(i).meta |= kOnDisk;  // conservatively: a flush may be writing it right now
      Drop(i, DropReason::kErased);
    }
    i = next;
  }
  if (on_disk.valid) {
    for (const StoredState& s : on_disk.states) {
      if (name && s.name != *name) continue;
      std::string row = EncodeRowKey(key.token, key.entity, s.name);
      if (tombs_.contains(row)) continue;
      tombs_.emplace(std::move(row), Tomb{std::string(key.entity), key.token, s.name});
      if (std::find(removed.begin(), removed.end(), s.name) == removed.end()) removed.push_back(s.name);
    }
  }
  return removed;
}

bool MemoryShard::Trim(limiter::TimeNs now) {
  // The state just charged (the head) stays even when the charge left it idle (a limit that refills
  // within nanoseconds): dropping it would only create it again on the key's next check.
  SweepLocked(now, options_.sweep_per_update, /*spare_head=*/true);
  if (capacity_ == 0 && byte_capacity_ == 0) return false;
  // The bounds: evict least recently used (clean, in write-back mode) states. The most recently used
  // stays, even alone over the byte bound: it was just charged.
  constexpr int kMaxDirtySkipped = 16;
  int skipped = 0;
  uint32_t index = lru_tail_;
  while (OverBound() && index != kNil && index != lru_head_) {
    uint32_t prev = At(index).lru_prev;
    if (Flags(At(index).meta) & kDirty) {
      if (++skipped > kMaxDirtySkipped) return true;
    } else {
      Drop(index, DropReason::kEvicted);
    }
    index = prev;
  }
  return OverBound();
}

size_t MemoryShard::SweepIdle(limiter::TimeNs now, size_t max) {
  std::lock_guard lock(mutex_);
  return SweepLocked(now, max);
}

size_t MemoryShard::SweepLocked(limiter::TimeNs now, size_t max, bool spare_head) {
  // From the least recently used end. A dirty idle state may go too: it is equivalent to no state
  // (a row on disk gets a pending delete).
  size_t dropped = 0;
  uint32_t index = lru_tail_;
  for (size_t k = 0; k < max && index != kNil && !(spare_head && index == lru_head_); ++k) {
    const Entry& e = At(index);
    const uint32_t prev = e.lru_prev;
    const limiter::LimitSpec& spec = slots_[e.slot].spec;
    // (At the earliest instant only an empty state is idle: no need to materialise the others. A packed
    // state is never empty, and is judged without unpacking it.)
    const bool judge = now != std::numeric_limits<limiter::TimeNs>::min();
    const limiter::MergeState* heap = HeapOf(e);
    bool idle;
    if (GroupOf(e) != 0) {
      idle = judge && limiter::MergedIdleAt(spec, StateOf(index, sweep_scratch_)) <= now;
    } else if (e.packed.word[0] != 0) {
      idle = judge && limiter::PackedIdleBy(spec, e.packed, tag_ids_[limiter::PackedTag(e.packed)],
                                            sweep_scratch_, now);
    } else {
      idle = heap == nullptr || heap->algorithm == limiter::Algorithm{} ||
             (judge && limiter::MergedIdleAt(spec, *heap) <= now);
    }
    if (idle) {
      Drop(index, DropReason::kIdle);
      ++dropped;
    }
    index = prev;
  }
  return dropped;
}

void MemoryShard::ScanChunk(ring::Token first, ring::Token last, ScanCursor& cursor,
                            std::vector<EntityState>& out) {
  std::lock_guard lock(mutex_);
  if (!cursor.started) {
    cursor.started = true;
    cursor.inserts = inserts_;
  }
  size_t copied = 0;
  uint32_t index = cursor.next;
  const uint32_t stop = index + std::min(kScanChunkVisits, fresh_ - std::min(index, fresh_));
  for (; index < stop && copied < kScanChunkStates; ++index) {
    const Entry& e = At(index);
    if (e.slot == kNil || e.token < first || e.token > last) continue;  // free, or out of the range
    out.push_back({std::string(KeyOf(e)), e.token, Copy(index)});
    ++copied;
  }
  cursor.next = index;
  if (index >= fresh_) {
    cursor.done = true;
    cursor.may_repeat = inserts_ != cursor.inserts;
  }
}

uint64_t MemoryShard::CountChunk(ring::Token first, ring::Token last, ScanCursor& cursor) {
  std::lock_guard lock(mutex_);
  cursor.started = true;
  uint64_t keys = 0;
  uint32_t index = cursor.next;
  const uint32_t stop = index + std::min(kCountChunkVisits, fresh_ - std::min(index, fresh_));
  for (; index < stop; ++index) {
    const Entry& e = At(index);
    if (e.slot != kNil && (Flags(e.meta) & kHead) != 0 && e.token >= first && e.token <= last) ++keys;
  }
  cursor.next = index;
  if (index >= fresh_) cursor.done = true;
  return keys;
}

void MemoryShard::AddBreakdown(MemoryBreakdown& out) const {
  std::lock_guard lock(mutex_);
  out.slab_bytes += chunks_.size() * kChunkSize * (sizeof(Entry) + sizeof(uint32_t)) +
                    cell_chunks_.size() * kCellChunkSize * sizeof(Cell);
  // boost::unordered_flat_set: a slot per element and 16 bytes of metadata per group of 15 slots.
  const size_t slots = heads_->bucket_count();
  out.index_bytes += slots * sizeof(uint32_t) + (slots / 15 + 1) * 16;
  for (uint32_t index = 0; index < fresh_; ++index) {
    const Entry& e = At(index);
    if (e.slot == kNil) continue;
    ++out.states;
    const size_t group = GroupOf(e);
    out.entry_bytes += sizeof(Entry) + sizeof(uint32_t) + (group == 0 ? 0 : (group - 1) * sizeof(Cell));
    out.pair_states += group == 2 ? 1 : 0;
    out.trio_states += group == 3 ? 1 : 0;
    if (KeyHeapBytes(e) > 0) {
      out.key_heap_bytes += sizeof(uint32_t) + KeyOf(e).size();
      ++out.heap_blocks;
    }
    if (const limiter::MergeState* heap = HeapOf(e); heap != nullptr) {
      ++out.state_objects;
      out.state_object_bytes += sizeof(limiter::MergeState);
      out.state_vector_bytes += limiter::HeapBytes(*heap);
      out.heap_blocks += 1 + (heap->base.included.capacity() > 0) + (heap->contributions.capacity() > 0);
      for (const limiter::Contribution& c : heap->contributions) {
        out.heap_blocks += (c.cells.capacity() > 0) + (c.stamps.capacity() > 0);
      }
    }
  }
}

void MemoryShard::PendingDeletes(ring::Token first, ring::Token last, std::vector<std::string>& out) {
  std::lock_guard lock(mutex_);
  for (const auto& [row, tomb] : tombs_) {
    if (tomb.token >= first && tomb.token <= last) out.push_back(row);
  }
}

void MemoryShard::CollectDirty(std::vector<DirtyRecord>& out) {
  std::lock_guard lock(mutex_);
  for (const auto& [row, tomb] : tombs_) {
    DirtyRecord r;
    r.entity = tomb.entity;
    r.token = tomb.token;
    r.erase = true;
    r.state.name = tomb.name;
    out.push_back(std::move(r));
  }
  for (uint32_t index : dirty_) {
    DirtyRecord r;
    r.entity = KeyOf(At(index));
    r.token = At(index).token;
    r.state = Copy(index);
    r.expiry = limiter::MergedIdleAt(r.state.spec, r.state.state);
    out.push_back(std::move(r));
  }
}

void MemoryShard::AckFlushed(std::span<const DirtyRecord> records, bool ok) {
  if (!ok) return;  // everything stays dirty (and pending) for the next flush
  std::lock_guard lock(mutex_);
  for (const DirtyRecord& r : records) {
    EntityKey key{r.entity, r.token};
    if (r.erase) {
      if (tombs_.erase(EncodeRowKey(r.token, r.entity, r.state.name)) > 0) ++epoch_;
      continue;
    }
    uint32_t index = FindInChain(FindHead(key), r.state.name);
    if (index == kNil) {
      // Dropped (erased, discarded, idle) after it was collected: the row this batch just wrote is
      // stale. (Dirty states are never evicted, so this is not an eviction.) The next batch deletes it.
      std::string row = EncodeRowKey(r.token, r.entity, r.state.name);
      tombs_.try_emplace(std::move(row), Tomb{r.entity, r.token, r.state.name});
      continue;
    }
    Entry& e = At(index);
    e.meta |= kOnDisk;
    if (Version(e.meta) != r.state.version || !(Flags(e.meta) & kDirty)) continue;
    // Same version is not enough: a state recreated within the same millisecond can reuse a version.
    if (!(StateOf(index, sweep_scratch_) == r.state.state) || slots_[e.slot].spec != r.state.spec) continue;
    e.meta &= ~kDirty;
    dirty_.erase(index);
    dirty_count_.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace ringlimit::storage
