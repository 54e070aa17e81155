// The group forms of a merged state with N = 2 (pair) or 3 (trio) contributors (merge_pair.h).
//
// Layout: one stream over the words but the high halves of word[3] and, in a trio, word[7] (the caller's):
// 480 bits for a pair, 704 for a trio; fields in this order, each little-endian within the stream:
//   all      the tag of each ids[i] (16 each)
//   buckets  base.stamp (64), base level as whole x window + frac (64), newest - base.stamp's ms (32),
//            then per contributor (ascending id): has a record (1), base.stamp - version (40),
//            version - epoch (40), consumed (31), last - version's ms (32)      = pair 480, trio 640 bits
//            implied: base.at = newest; every base entry is its contributor's record as Rebase writes it
//            (a tombstone's `last` is the one its `expires` implies); records have no cells or stamps.
//   windows  base.stamp (64), newest - the newest version's ms (32), anchored_window: the N window starts
//            s0 <= s1 (<= s2) the records' cells have (fewer: the last repeated; pair: 64 bits each, trio: s0
//            in 64, s1 - s0 and s2 - s0 in 32), then per record: version - base.stamp (48, signed), the
//            counts of its cells s0 ... (anchored_window, N) or k and k - 1 (the others), 32 bits each, 0: no
//            such cell            pair: fixed, approx, sliding 352, anchored 480; trio 480, 704
//            implied: the spec's cell width, an empty base level, no base entries.
#include "limiter/merge_pair.h"

#include <algorithm>
#include <limits>

#include "limiter/arith.h"
#include "limiter/merge_internal.h"

namespace ringlimit::limiter {
namespace {

using internal::CeilDiv;
using internal::CellWidth;
using internal::ExpiresOf;
using internal::FloorDiv;
using internal::GapWithin;
using internal::i128;
using internal::InstantDelta;
using internal::InstantFrom;
using internal::IsBucket;
using internal::u128;

constexpr uint64_t Low(int bits) { return bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }

// Sequential writer and reader of the stream of a group of N: its segments are the words, of 64 bits but
// the low 32 of word 3 and (trio) of word 7, whose high halves are the storage tier's. Never past its end:
// the layouts above fit (the static_assert below).
class Bits {
 public:
  Bits(uint64_t* words, size_t n) : words_(words), trio_(n == 3) {}
  void Put(uint64_t value, int bits) {
    value &= Low(bits);
    while (bits > 0) {
      const int take = std::min(bits, SegmentBits(segment_) - offset_);
      words_[segment_] |= (value & Low(take)) << offset_;
      value = take == 64 ? 0 : value >> take;
      Advance(take);
      bits -= take;
    }
  }
  uint64_t Get(int bits) {
    uint64_t value = 0;
    int done = 0;
    while (done < bits) {
      const int take = std::min(bits - done, SegmentBits(segment_) - offset_);
      value |= ((words_[segment_] >> offset_) & Low(take)) << done;
      Advance(take);
      done += take;
    }
    return value;
  }

 private:
  int SegmentBits(int word) const { return word == 3 || (trio_ && word == 7) ? 32 : 64; }
  void Advance(int take) {
    offset_ += take;
    if (offset_ == SegmentBits(segment_)) {
      offset_ = 0;
      ++segment_;
    }
  }
  uint64_t* words_;
  bool trio_;
  int segment_ = 0;
  int offset_ = 0;
};

// `value - anchor` as 48 bits of two's complement, when it fits (a window's records may predate its base:
// the base is the newer copy's, whose stamp is its first charge's).
bool SignedDelta48(uint64_t value, uint64_t anchor, uint64_t& out) {
  const i128 delta = static_cast<i128>(value) - static_cast<i128>(anchor);
  if (delta < -(i128{1} << 47) || delta >= (i128{1} << 47)) return false;
  out = static_cast<uint64_t>(static_cast<int64_t>(delta)) & Low(48);
  return true;
}

uint64_t FromSignedDelta48(uint64_t bits, uint64_t anchor) {
  const auto delta = static_cast<int64_t>(bits << 16) >> 16;  // sign-extended
  return static_cast<uint64_t>(static_cast<i128>(anchor) + delta);
}

bool NoGrants(const MergeState& s) {
  return s.grants.records.empty() && s.grants.floor == GrantLedger{}.floor;
}

const Contribution* FindRecord(const MergeState& s, ContributorId id) {
  for (const Contribution& c : s.contributions) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

// A bucket contributor: its record, or (a tombstone) the record its base entry stands for.
struct Member {
  bool present = false;
  Contribution record;  // cells and stamps empty
};

// The record a bucket base entry stands for when Collect dropped it: `last` as its `expires` implies.
bool TombstoneRecord(const LimitSpec& spec, const Included& inc, Contribution& out) {
  out = Contribution{};
  out.id = inc.id;
  out.version = inc.version;
  out.epoch = inc.epoch;
  out.consumed = inc.consumed;
  const u128 drain =
      CeilDiv(static_cast<u128>(inc.consumed) * static_cast<uint64_t>(spec.window), spec.limit);
  const i128 last = static_cast<i128>(inc.expires) - static_cast<i128>(drain);
  if (drain > static_cast<u128>(std::numeric_limits<int64_t>::max()) ||
      last < std::numeric_limits<TimeNs>::min()) {
    return false;
  }
  out.last = static_cast<TimeNs>(last);
  return ExpiresOf(spec, out) == inc.expires;
}

// Ids strictly ascending.
template <typename Range, typename IdOf>
bool Ascending(const Range& items, IdOf id_of) {
  for (size_t i = 1; i < items.size(); ++i) {
    if (id_of(items[i - 1]) >= id_of(items[i])) return false;
  }
  return true;
}

template <size_t N>
bool PackBuckets(const LimitSpec& spec, const MergeState& m, const std::array<uint16_t, N>& tags,
                 PackedGroup<N>& out) {
  const MergeBase& b = m.base;
  if (b.at != m.newest || b.included.size() != N || m.contributions.size() > N ||
      !Ascending(m.contributions, [](const Contribution& c) { return c.id; })) {
    return false;
  }
  const auto window = static_cast<uint64_t>(spec.window);
  if (b.level_whole < 0 || b.level_frac < 0 || static_cast<uint64_t>(b.level_frac) >= window) return false;
  const u128 level = static_cast<u128>(b.level_whole) * window + static_cast<uint64_t>(b.level_frac);
  if (level > std::numeric_limits<uint64_t>::max()) return false;
  uint64_t newest = 0;
  if (!InstantDelta(m.newest, b.stamp, newest)) return false;
  Bits bits(out.word, N);
  for (uint16_t tag : tags) bits.Put(tag, 16);
  bits.Put(b.stamp, 64);
  bits.Put(static_cast<uint64_t>(level), 64);
  bits.Put(newest, 32);
  size_t records = 0;
  for (const Included& inc : b.included) {
    Member member;
    if (const Contribution* c = FindRecord(m, inc.id); c != nullptr) {
      if (c->width != 0 || !c->cells.empty() || !c->stamps.empty() ||
          !(inc == Included{c->id, c->version, c->epoch, c->consumed, ExpiresOf(spec, *c)})) {
        return false;  // a record the base has not absorbed as it is (or not a bucket's): the full form
      }
      member.present = true;
      member.record = *c;
      ++records;
    } else if (!TombstoneRecord(spec, inc, member.record)) {
      return false;
    }
    const Contribution& c = member.record;
    uint64_t version = 0, epoch = 0, last = 0;
    if (!GapWithin(b.stamp, c.version, 40, version) || !GapWithin(c.version, c.epoch, 40, epoch) ||
        c.consumed > Low(31) || !InstantDelta(c.last, c.version, last)) {
      return false;
    }
    bits.Put(member.present ? 1 : 0, 1);
    bits.Put(version, 40);
    bits.Put(epoch, 40);
    bits.Put(c.consumed, 31);
    bits.Put(last, 32);
  }
  return records == m.contributions.size();  // (no record without its base entry)
}

template <size_t N>
bool PackWindows(const LimitSpec& spec, const MergeState& m, const std::array<uint16_t, N>& tags,
                 PackedGroup<N>& out) {
  const MergeBase& b = m.base;
  const DurationNs width = CellWidth(spec);
  const bool anchored = spec.algorithm == Algorithm::kAnchoredWindow;
  if (b.level_whole != 0 || b.level_frac != 0 || b.at != 0 || !b.included.empty() || b.stamp == 0 ||
      m.contributions.size() != N) {
    return false;
  }
  Hlc newer = 0;
  for (const Contribution& c : m.contributions) newer = std::max(newer, c.version);
  uint64_t newest = 0;
  if (!InstantDelta(m.newest, newer, newest)) return false;
  Bits bits(out.word, N);
  for (uint16_t tag : tags) bits.Put(tag, 16);
  bits.Put(b.stamp, 64);
  bits.Put(newest, 32);
  const int64_t k = FloorDiv(m.newest, width);
  // anchored_window: the (at most N) windows the records' cells start, ascending (fewer: the last repeated).
  std::array<int64_t, N> starts{};
  if (anchored) {
    size_t n = 0;
    for (const Contribution& c : m.contributions) {
      for (const Cell& cell : c.cells) {
        if (n > 0 && std::find(starts.begin(), starts.begin() + static_cast<std::ptrdiff_t>(n), cell.index) !=
                         starts.begin() + static_cast<std::ptrdiff_t>(n)) {
          continue;
        }
        if (n == N) return false;
        starts[n++] = cell.index;
      }
    }
    if (n == 0) return false;
    std::sort(starts.begin(), starts.begin() + static_cast<std::ptrdiff_t>(n));
    for (size_t j = n; j < N; ++j) starts[j] = starts[n - 1];
    bits.Put(static_cast<uint64_t>(starts[0]), 64);
    for (size_t j = 1; j < N; ++j) {
      if constexpr (N == 2) {
        bits.Put(static_cast<uint64_t>(starts[j]), 64);
      } else {
        const i128 delta = static_cast<i128>(starts[j]) - starts[0];
        if (delta >= (i128{1} << 32)) return false;
        bits.Put(static_cast<uint64_t>(delta), 32);
      }
    }
  }
  for (const Contribution& c : m.contributions) {
    uint64_t version = 0;
    if (c.version == 0 || c.width != width || !c.stamps.empty() || c.epoch != 0 || c.consumed != 0 ||
        c.last != 0 || c.cells.empty() || c.cells.size() > (anchored ? N : 2) ||
        !SignedDelta48(c.version, b.stamp, version) ||
        !Ascending(c.cells, [](const Cell& x) { return x.index; })) {
      return false;
    }
    bits.Put(version, 48);
    for (const Cell& cell : c.cells) {
      if (cell.count == 0 || cell.count > Low(32)) return false;
    }
    if (anchored) {
      // The count of each start (0: no cell); a repeated start's count stays 0.
      std::array<uint64_t, N> counts{};
      for (const Cell& cell : c.cells) {
        counts[static_cast<size_t>(std::find(starts.begin(), starts.end(), cell.index) - starts.begin())] =
            cell.count;
      }
      for (uint64_t count : counts) bits.Put(count, 32);
      continue;
    }
    uint64_t current = 0, previous = 0;
    for (const Cell& cell : c.cells) {  // (ascending: k - 1 before k)
      if (cell.index == k) {
        current = cell.count;
      } else if (static_cast<i128>(cell.index) == static_cast<i128>(k) - 1 && current == 0) {
        previous = cell.count;
      } else {
        return false;
      }
    }
    if (c.cells.size() == 2 && (current == 0 || previous == 0)) return false;
    bits.Put(current, 32);
    bits.Put(previous, 32);
  }
  return true;
}

// The stream's bits, and what the largest layout (above) takes: it must fit.
constexpr int StreamBits(size_t n) { return static_cast<int>(64 * 4 * n - 32 * (n - 1)); }
constexpr int LayoutBits(size_t n) {
  const int n_bits = static_cast<int>(n);
  const int buckets = 16 * n_bits + 160 + 144 * n_bits;
  const int anchored =
      16 * n_bits + 96 + (n == 2 ? 128 : 64 + 32 * (n_bits - 1)) + n_bits * (48 + 32 * n_bits);
  return std::max(buckets, anchored);
}
static_assert(LayoutBits(2) <= StreamBits(2) && LayoutBits(3) <= StreamBits(3));

}  // namespace

template <size_t N>
bool GroupCandidates(const LimitSpec& spec, const MergeState& state, std::array<ContributorId, N>& ids) {
  if (IsBucket(spec.algorithm)) {
    // Every contributor has a base entry in a state the group form accepts.
    if (state.base.included.size() != N || state.contributions.size() > N) return false;
    for (size_t i = 0; i < N; ++i) ids[i] = state.base.included[i].id;
  } else {
    if (state.contributions.size() != N) return false;
    for (size_t i = 0; i < N; ++i) ids[i] = state.contributions[i].id;
  }
  return Ascending(ids, [](ContributorId id) { return id; });
}

template <size_t N>
bool PackGroup(const LimitSpec& spec, const MergeState& state, const std::array<uint16_t, N>& tags,
               PackedGroup<N>& out) {
  std::array<ContributorId, N> ids{};
  if (state.algorithm != spec.algorithm || !NoGrants(state) || !GroupCandidates(spec, state, ids)) {
    return false;
  }
  out = PackedGroup<N>{};
  if (IsBucket(spec.algorithm)) return PackBuckets(spec, state, tags, out);
  if (spec.algorithm == Algorithm::kFixedWindow || spec.algorithm == Algorithm::kAnchoredWindow ||
      spec.algorithm == Algorithm::kSlidingWindowApprox || spec.algorithm == Algorithm::kSlidingWindow) {
    // Records ascending by id, each contributor once (GroupCandidates): as MergeInto keeps them.
    return PackWindows(spec, state, tags, out);
  }
  return false;  // sliding_log: the full form
}

template <size_t N>
void UnpackGroup(const LimitSpec& spec, const PackedGroup<N>& packed, const std::array<ContributorId, N>& ids,
                 MergeState& out) {
  PackedGroup<N> words = packed;
  words.word[3] &= Low(32);
  if constexpr (N == 3) words.word[7] &= Low(32);
  Bits bits(words.word, N);
  (void)bits.Get(16 * static_cast<int>(N));  // the tags
  out.algorithm = spec.algorithm;
  out.grants = GrantLedger{};
  MergeBase& b = out.base;
  b.stamp = bits.Get(64);
  if (IsBucket(spec.algorithm)) {
    const uint64_t level = bits.Get(64);
    const auto window = static_cast<uint64_t>(spec.window);
    b.level_whole = static_cast<int64_t>(level / window);
    b.level_frac = static_cast<int64_t>(level % window);
    out.newest = InstantFrom(bits.Get(32), b.stamp);
    b.at = out.newest;
    if (b.included.size() != N) b.included.resize(N);
    std::array<Contribution, N> members;
    std::array<bool, N> present{};
    size_t records = 0;
    for (size_t i = 0; i < N; ++i) {
      Contribution& c = members[i];
      present[i] = bits.Get(1) != 0;
      records += present[i] ? 1 : 0;
      c.id = ids[i];
      c.version = b.stamp - bits.Get(40);
      c.epoch = c.version - bits.Get(40);
      c.consumed = bits.Get(31);
      c.last = InstantFrom(bits.Get(32), c.version);
      b.included[i] = {c.id, c.version, c.epoch, c.consumed, ExpiresOf(spec, c)};
    }
    if (out.contributions.size() != records) out.contributions.resize(records);
    size_t next = 0;
    for (size_t i = 0; i < N; ++i) {
      if (!present[i]) continue;
      Contribution& c = out.contributions[next++];
      c.cells.clear();
      c.stamps.clear();
      c.id = members[i].id;
      c.version = members[i].version;
      c.width = 0;
      c.epoch = members[i].epoch;
      c.consumed = members[i].consumed;
      c.last = members[i].last;
    }
    return;
  }
  const DurationNs width = CellWidth(spec);
  b.level_whole = 0;
  b.level_frac = 0;
  b.at = 0;
  b.included.clear();
  const uint64_t newest = bits.Get(32);
  const bool anchored = spec.algorithm == Algorithm::kAnchoredWindow;
  std::array<int64_t, N> starts{};
  if (anchored) {
    starts[0] = static_cast<int64_t>(bits.Get(64));
    for (size_t j = 1; j < N; ++j) {
      starts[j] = N == 2 ? static_cast<int64_t>(bits.Get(64))
                         : static_cast<int64_t>(static_cast<uint64_t>(starts[0]) + bits.Get(32));
    }
  }
  if (out.contributions.size() != N) out.contributions.resize(N);
  // Per record: its version, and the counts of its cells: anchored_window, of each start; else of cells k
  // and k - 1.
  constexpr size_t kCounts = N;  // (>= 2)
  std::array<Hlc, N> versions{};
  std::array<uint64_t, kCounts * N> counts{};
  Hlc newer = 0;
  for (size_t i = 0; i < N; ++i) {
    versions[i] = FromSignedDelta48(bits.Get(48), b.stamp);
    newer = std::max(newer, versions[i]);
    const size_t fields = anchored ? N : 2;
    for (size_t f = 0; f < fields; ++f) counts[kCounts * i + f] = bits.Get(32);
  }
  out.newest = InstantFrom(newest, newer);
  const int64_t k = FloorDiv(out.newest, width);
  for (size_t i = 0; i < N; ++i) {
    Contribution& c = out.contributions[i];
    c.id = ids[i];
    c.version = versions[i];
    c.width = width;
    c.epoch = 0;
    c.consumed = 0;
    c.last = 0;
    c.stamps.clear();
    c.cells.clear();
    if (anchored) {
      for (size_t j = 0; j < N; ++j) {
        if (counts[kCounts * i + j] != 0) c.cells.push_back({starts[j], counts[kCounts * i + j]});
      }
      continue;
    }
    if (counts[kCounts * i + 1] != 0) c.cells.push_back({k - 1, counts[kCounts * i + 1]});
    if (counts[kCounts * i] != 0) c.cells.push_back({k, counts[kCounts * i]});
  }
}

template bool GroupCandidates<2>(const LimitSpec&, const MergeState&, std::array<ContributorId, 2>&);
template bool GroupCandidates<3>(const LimitSpec&, const MergeState&, std::array<ContributorId, 3>&);
template bool PackGroup<2>(const LimitSpec&, const MergeState&, const std::array<uint16_t, 2>&,
                           PackedGroup<2>&);
template bool PackGroup<3>(const LimitSpec&, const MergeState&, const std::array<uint16_t, 3>&,
                           PackedGroup<3>&);
template void UnpackGroup<2>(const LimitSpec&, const PackedGroup<2>&, const std::array<ContributorId, 2>&,
                             MergeState&);
template void UnpackGroup<3>(const LimitSpec&, const PackedGroup<3>&, const std::array<ContributorId, 3>&,
                             MergeState&);

}  // namespace ringlimit::limiter
