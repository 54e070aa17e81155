// The pair form of a two-contributor merged state (merge_pair.h).
//
// Layout: one stream of 480 bits over word[0..2], the low half of word[3] and word[4..7], fields in this
// order, each little-endian within the stream:
//   both     tag of ids[0] (16), tag of ids[1] (16)
//   buckets  base.stamp (64), base level as whole x window + frac (64), newest - base.stamp's ms (32),
//            then per contributor (ascending id): has a record (1), base.stamp - version (40),
//            version - epoch (40), consumed (31), last - version's ms (32)            = 480 bits
//            implied: base.at = newest; every base entry is its contributor's record as Rebase writes it
//            (a tombstone's `last` is the one its `expires` implies); records have no cells or stamps.
//   windows  base.stamp (64), newest - the newer version's ms (32), anchored_window: the two window starts
//            s0 <= s1 the records' cells have (64 each; one start: twice), then per record: version -
//            base.stamp (48, signed), the counts of its cells s0 and s1 (anchored_window) or k and k - 1 (the
//            others), 32 bits each, 0: no such cell                           fixed, approx 352; anchored 480
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

// The stream's segments: (word, bits) in order.
constexpr int kSegmentWord[] = {0, 1, 2, 3, 4, 5, 6, 7};
constexpr int kSegmentBits[] = {64, 64, 64, 32, 64, 64, 64, 64};

// Sequential writer and reader of the 480-bit stream.
class Bits {
 public:
  explicit Bits(uint64_t* words) : words_(words) {}
  void Put(uint64_t value, int bits) {
    value &= Low(bits);
    while (bits > 0) {
      const int take = std::min(bits, kSegmentBits[segment_] - offset_);
      words_[kSegmentWord[segment_]] |= (value & Low(take)) << offset_;
      value = take == 64 ? 0 : value >> take;
      Advance(take);
      bits -= take;
    }
  }
  uint64_t Get(int bits) {
    uint64_t value = 0;
    int done = 0;
    while (done < bits) {
      const int take = std::min(bits - done, kSegmentBits[segment_] - offset_);
      value |= ((words_[kSegmentWord[segment_]] >> offset_) & Low(take)) << done;
      Advance(take);
      done += take;
    }
    return value;
  }

 private:
  void Advance(int take) {
    offset_ += take;
    if (offset_ == kSegmentBits[segment_]) {
      offset_ = 0;
      ++segment_;
    }
  }
  uint64_t* words_;
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

bool PackBuckets(const LimitSpec& spec, const MergeState& m, std::array<uint16_t, 2> tags, PackedPair& out) {
  const MergeBase& b = m.base;
  if (b.at != m.newest || b.included.size() != 2 || m.contributions.size() > 2 ||
      (m.contributions.size() == 2 && m.contributions[0].id >= m.contributions[1].id)) {
    return false;
  }
  const auto window = static_cast<uint64_t>(spec.window);
  if (b.level_whole < 0 || b.level_frac < 0 || static_cast<uint64_t>(b.level_frac) >= window) return false;
  const u128 level = static_cast<u128>(b.level_whole) * window + static_cast<uint64_t>(b.level_frac);
  if (level > std::numeric_limits<uint64_t>::max()) return false;
  uint64_t newest = 0;
  if (!InstantDelta(m.newest, b.stamp, newest)) return false;
  Bits bits(out.word);
  bits.Put(tags[0], 16);
  bits.Put(tags[1], 16);
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

bool PackWindows(const LimitSpec& spec, const MergeState& m, std::array<uint16_t, 2> tags, PackedPair& out) {
  const MergeBase& b = m.base;
  const DurationNs width = CellWidth(spec);
  const bool anchored = spec.algorithm == Algorithm::kAnchoredWindow;
  if (b.level_whole != 0 || b.level_frac != 0 || b.at != 0 || !b.included.empty() || b.stamp == 0 ||
      m.contributions.size() != 2) {
    return false;
  }
  const Hlc newer = std::max(m.contributions[0].version, m.contributions[1].version);
  uint64_t newest = 0;
  if (!InstantDelta(m.newest, newer, newest)) return false;
  Bits bits(out.word);
  bits.Put(tags[0], 16);
  bits.Put(tags[1], 16);
  bits.Put(b.stamp, 64);
  bits.Put(newest, 32);
  const int64_t k = FloorDiv(m.newest, width);
  // anchored_window: the (at most two) windows the records' cells start, ascending (one: twice).
  std::array<int64_t, 2> starts{};
  if (anchored) {
    size_t n = 0;
    for (const Contribution& c : m.contributions) {
      for (const Cell& cell : c.cells) {
        if (n > 0 && std::find(starts.begin(), starts.begin() + static_cast<std::ptrdiff_t>(n), cell.index) !=
                         starts.begin() + static_cast<std::ptrdiff_t>(n)) {
          continue;
        }
        if (n == 2) return false;
        starts[n++] = cell.index;
      }
    }
    if (n == 1) starts[1] = starts[0];
    if (starts[0] > starts[1]) std::swap(starts[0], starts[1]);
    bits.Put(static_cast<uint64_t>(starts[0]), 64);
    bits.Put(static_cast<uint64_t>(starts[1]), 64);
  }
  for (const Contribution& c : m.contributions) {
    uint64_t version = 0;
    if (c.version == 0 || c.width != width || !c.stamps.empty() || c.epoch != 0 || c.consumed != 0 ||
        c.last != 0 || c.cells.empty() || c.cells.size() > 2 || !SignedDelta48(c.version, b.stamp, version) ||
        (c.cells.size() == 2 && c.cells[0].index >= c.cells[1].index)) {
      return false;
    }
    bits.Put(version, 48);
    for (const Cell& cell : c.cells) {
      if (cell.count == 0 || cell.count > Low(32)) return false;
    }
    if (anchored) {
      // The count of each start (0: no cell). With one start, the second's count stays 0.
      uint64_t first = 0, second = 0;
      for (const Cell& cell : c.cells) {
        (cell.index == starts[0] ? first : second) = cell.count;
      }
      bits.Put(first, 32);
      bits.Put(second, 32);
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

}  // namespace

bool PairCandidates(const LimitSpec& spec, const MergeState& state, std::array<ContributorId, 2>& ids) {
  if (IsBucket(spec.algorithm)) {
    // Every contributor has a base entry in a state the pair form accepts.
    if (state.base.included.size() != 2 || state.contributions.size() > 2) return false;
    ids = {state.base.included[0].id, state.base.included[1].id};
  } else {
    if (state.contributions.size() != 2) return false;
    ids = {state.contributions[0].id, state.contributions[1].id};
  }
  return ids[0] < ids[1];
}

bool PackPair(const LimitSpec& spec, const MergeState& state, std::array<uint16_t, 2> tags, PackedPair& out) {
  std::array<ContributorId, 2> ids{};
  if (state.algorithm != spec.algorithm || !NoGrants(state) || !PairCandidates(spec, state, ids))
    return false;
  out = PackedPair{};
  if (IsBucket(spec.algorithm)) return PackBuckets(spec, state, tags, out);
  if (spec.algorithm == Algorithm::kFixedWindow || spec.algorithm == Algorithm::kAnchoredWindow ||
      spec.algorithm == Algorithm::kSlidingWindowApprox) {
    // Records ascending by id, each contributor once (PairCandidates): as MergeInto keeps them.
    return PackWindows(spec, state, tags, out);
  }
  return false;  // sliding_window, sliding_log: the full form
}

void UnpackPair(const LimitSpec& spec, const PackedPair& packed, std::array<ContributorId, 2> ids,
                MergeState& out) {
  PackedPair words = packed;
  words.word[3] &= Low(32);
  Bits bits(words.word);
  (void)bits.Get(32);  // the tags
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
    if (b.included.size() != 2) b.included.resize(2);
    std::array<Contribution, 2> members;
    std::array<bool, 2> present{};
    size_t records = 0;
    for (size_t i = 0; i < 2; ++i) {
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
    for (size_t i = 0; i < 2; ++i) {
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
  std::array<int64_t, 2> starts{};
  if (anchored) {
    starts[0] = static_cast<int64_t>(bits.Get(64));
    starts[1] = static_cast<int64_t>(bits.Get(64));
  }
  if (out.contributions.size() != 2) out.contributions.resize(2);
  std::array<Hlc, 2> versions{};
  std::array<uint64_t, 4> counts{};  // per record: anchored, of starts[0] and [1]; else of cells k, k - 1
  for (size_t i = 0; i < 2; ++i) {
    versions[i] = FromSignedDelta48(bits.Get(48), b.stamp);
    counts[2 * i] = bits.Get(32);
    counts[2 * i + 1] = bits.Get(32);
  }
  out.newest = InstantFrom(newest, std::max(versions[0], versions[1]));
  const int64_t k = FloorDiv(out.newest, width);
  for (size_t i = 0; i < 2; ++i) {
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
      if (counts[2 * i] != 0) c.cells.push_back({starts[0], counts[2 * i]});
      if (counts[2 * i + 1] != 0) c.cells.push_back({starts[1], counts[2 * i + 1]});
      continue;
    }
    if (counts[2 * i + 1] != 0) c.cells.push_back({k - 1, counts[2 * i + 1]});
    if (counts[2 * i] != 0) c.cells.push_back({k, counts[2 * i]});
  }
}

}  // namespace ringlimit::limiter
