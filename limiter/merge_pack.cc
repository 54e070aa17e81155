// The packed form of a one-contributor merged state (merge.h "The packed form").
//
// Layout (four little words; word[0] is the record's version in both):
//   buckets  word[1] = tag << 48 | (version - epoch)        word[2] = level * window + level_frac
//            word[3] = (newest - version's ms in ns) << 32 | (base.stamp - version) << 31 | consumed
//            implied: base.at = record.last = newest, base.included = the record (as Rebase writes it),
//            no cells or stamps. (A first check stamps the base one above the record: CheckMerged
//            adopts the empty state with a base at the stamp, then rebases above it.)
//   windows  word[1] = tag << 48 | (version - base.stamp)   word[2] = (newest - version's ms) << 32 | n
//            word[3] = anchored_window: the one cell's index (its window's start), n its count;
//                      the others: the count of cell k - 1, n the count of cell k = floor(newest / width)
//                      (0: no such cell)
//            implied: width = the spec's cell width, an empty base level, no base entries.
#include <algorithm>
#include <limits>

#include "limiter/arith.h"
#include "limiter/judge.h"
#include "limiter/merge.h"
#include "limiter/merge_internal.h"

namespace ringlimit::limiter {
namespace {

using internal::CellWidth;
using internal::ExpiresOf;
using internal::FloorDiv;
using internal::GapWithin;
using internal::i128;
using internal::InstantDelta;
using internal::InstantFrom;
using internal::IsBucket;
using internal::u128;

constexpr uint64_t kLow48 = (uint64_t{1} << 48) - 1;
constexpr uint64_t kLow32 = (uint64_t{1} << 32) - 1;
constexpr uint64_t kLow31 = (uint64_t{1} << 31) - 1;

bool PackBucket(const LimitSpec& spec, const MergeState& m, const Contribution& c, uint16_t tag,
                PackedState& out) {
  const MergeBase& b = m.base;
  uint64_t epoch_gap = 0, delta = 0;
  if (c.width != 0 || !c.cells.empty() || !c.stamps.empty() || c.epoch == 0 || c.consumed > kLow31 ||
      c.last != m.newest || b.stamp < c.version || b.stamp - c.version > 1 || b.at != m.newest ||
      b.included.size() != 1 || !GapWithin(c.version, c.epoch, 48, epoch_gap) ||
      !InstantDelta(m.newest, c.version, delta)) {
    return false;
  }
  if (!(b.included[0] == Included{c.id, c.version, c.epoch, c.consumed, ExpiresOf(spec, c)})) return false;
  const auto window = static_cast<uint64_t>(spec.window);
  if (b.level_whole < 0 || b.level_frac < 0 || static_cast<uint64_t>(b.level_frac) >= window) return false;
  const u128 level = static_cast<u128>(b.level_whole) * window + static_cast<uint64_t>(b.level_frac);
  if (level > std::numeric_limits<uint64_t>::max()) return false;
  out.word[0] = c.version;
  out.word[1] = uint64_t{tag} << 48 | epoch_gap;
  out.word[2] = static_cast<uint64_t>(level);
  out.word[3] = delta << 32 | (b.stamp - c.version) << 31 | c.consumed;
  return true;
}

bool PackWindow(const LimitSpec& spec, const MergeState& m, const Contribution& c, uint16_t tag,
                PackedState& out) {
  const MergeBase& b = m.base;
  const DurationNs width = CellWidth(spec);
  uint64_t base_gap = 0, delta = 0;
  if (c.width != width || !c.stamps.empty() || c.epoch != 0 || c.consumed != 0 || c.last != 0 ||
      b.level_whole != 0 || b.level_frac != 0 || b.at != 0 || !b.included.empty() || b.stamp == 0 ||
      c.cells.empty() || c.cells.size() > 2 || !GapWithin(c.version, b.stamp, 48, base_gap) ||
      !InstantDelta(m.newest, c.version, delta)) {
    return false;
  }
  uint64_t current = 0, other = 0;
  if (spec.algorithm == Algorithm::kAnchoredWindow) {
    if (c.cells.size() != 1) return false;
    current = c.cells[0].count;
    other = static_cast<uint64_t>(c.cells[0].index);
  } else {
    const int64_t k = FloorDiv(m.newest, width);
    const Cell& last = c.cells.back();
    if (last.index == k) {
      current = last.count;
    } else if (c.cells.size() == 1 && last.index == static_cast<i128>(k) - 1) {
      other = last.count;
    } else {
      return false;
    }
    if (c.cells.size() == 2) {
      if (c.cells[0].index != static_cast<i128>(k) - 1) return false;
      other = c.cells[0].count;
    }
    if ((current == 0 && last.index == k) || (other == 0 && last.index != k) ||
        (c.cells.size() == 2 && other == 0)) {
      return false;  // a cell of count 0 (never recorded, but keep the round trip exact)
    }
  }
  if (current > kLow32 || (spec.algorithm == Algorithm::kAnchoredWindow && current == 0)) return false;
  out.word[0] = c.version;
  out.word[1] = uint64_t{tag} << 48 | base_gap;
  out.word[2] = delta << 32 | current;
  out.word[3] = other;
  return true;
}

}  // namespace

bool PackState(const LimitSpec& spec, const MergeState& state, uint16_t tag, PackedState& out) {
  if (state.algorithm != spec.algorithm || state.contributions.size() != 1 ||
      state.contributions[0].version == 0 || spec.algorithm == Algorithm::kSlidingLog ||
      !state.grants.records.empty() || state.grants.floor != GrantLedger{}.floor) {
    return false;  // (a state with grants keeps its ledger: it stays in the heap form)
  }
  const Contribution& c = state.contributions[0];
  return IsBucket(spec.algorithm) ? PackBucket(spec, state, c, tag, out)
                                  : PackWindow(spec, state, c, tag, out);
}

void UnpackState(const LimitSpec& spec, const PackedState& packed, ContributorId contributor,
                 MergeState& out) {
  const Hlc version = packed.word[0];
  out.algorithm = spec.algorithm;
  out.grants = GrantLedger{};  // (never packed with grants: PackState refuses them)
  if (out.contributions.size() != 1) {
    out.contributions.resize(1);
  }
  Contribution& c = out.contributions[0];
  c.id = contributor;
  c.version = version;
  c.stamps.clear();
  c.cells.clear();
  MergeBase& b = out.base;
  if (IsBucket(spec.algorithm)) {
    out.newest = InstantFrom(packed.word[3] >> 32, version);
    c.width = 0;
    c.epoch = version - (packed.word[1] & kLow48);
    c.consumed = packed.word[3] & kLow31;
    c.last = out.newest;
    const auto window = static_cast<uint64_t>(spec.window);
    b.stamp = version + ((packed.word[3] >> 31) & 1);
    b.level_whole = static_cast<int64_t>(packed.word[2] / window);
    b.level_frac = static_cast<int64_t>(packed.word[2] % window);
    b.at = out.newest;
    if (b.included.size() != 1) {
      b.included.resize(1);
    }
    b.included[0] = {c.id, c.version, c.epoch, c.consumed, ExpiresOf(spec, c)};
    return;
  }
  b.included.clear();
  out.newest = InstantFrom(packed.word[2] >> 32, version);
  c.width = CellWidth(spec);
  c.epoch = 0;
  c.consumed = 0;
  c.last = 0;
  b.stamp = version - (packed.word[1] & kLow48);
  b.level_whole = 0;
  b.level_frac = 0;
  b.at = 0;
  const uint64_t current = packed.word[2] & kLow32;
  if (spec.algorithm == Algorithm::kAnchoredWindow) {
    c.cells.push_back({static_cast<int64_t>(packed.word[3]), current});
    return;
  }
  const int64_t k = FloorDiv(out.newest, c.width);
  if (packed.word[3] != 0) c.cells.push_back({k - 1, packed.word[3]});
  if (current != 0) c.cells.push_back({k, current});
}

TimeNs PackedIdleAt(const LimitSpec& spec, const PackedState& packed, ContributorId contributor,
                    MergeState& scratch) {
  const Hlc version = packed.word[0];
  if (IsBucket(spec.algorithm)) {
    // One record, absorbed whole by the base (Unabsorbed is 0): the base level at its instant.
    return internal::BucketIdleAt(spec, packed.word[2], InstantFrom(packed.word[3] >> 32, version));
  }
  if (spec.algorithm == Algorithm::kSlidingWindow) {
    UnpackState(spec, packed, contributor, scratch);
    return MergedIdleAt(spec, scratch);
  }
  // What MaterializeWindow / MaterializeAnchored make of the one record.
  State plain;
  plain.algorithm = spec.algorithm;
  plain.word[0] = InstantFrom(packed.word[2] >> 32, version);
  const uint64_t current = packed.word[2] & kLow32;
  if (spec.algorithm == Algorithm::kAnchoredWindow) {
    const auto start = static_cast<int64_t>(packed.word[3]);
    if (start <= plain.word[0] && static_cast<i128>(plain.word[0]) - start < spec.window) {
      plain.word[1] = static_cast<int64_t>(current);
      plain.word[2] = start;
    }
  } else {
    plain.word[1] = static_cast<int64_t>(current);
    if (spec.algorithm == Algorithm::kSlidingWindowApprox) {
      plain.word[2] = static_cast<int64_t>(std::min<uint64_t>(packed.word[3], INT64_MAX));
    }
  }
  return internal::IdleAtWith(spec, plain, internal::ComputeCapacities(spec, 0.));
}

bool PackedIdleBy(const LimitSpec& spec, const PackedState& packed, ContributorId contributor,
                  MergeState& scratch, TimeNs now) {
  if (IsBucket(spec.algorithm)) {
    // A bucket is back to empty no earlier than its level takes to drain from its instant (a debt above
    // its maximum drains first, then the maximum: longer still).
    const i128 at = InstantFrom(packed.word[3] >> 32, packed.word[0]);
    const uint64_t level = packed.word[2];
    // (Clamped as the idle instant is, to the last representable one.)
    if (now < std::min<i128>(at + static_cast<i128>(level / spec.limit + (level % spec.limit != 0 ? 1 : 0)),
                             std::numeric_limits<TimeNs>::max())) {
      return false;
    }
  } else if ((packed.word[2] & kLow32) != 0) {
    // Units in the cell of the newest instant count at least until that cell ends (anchored_window: a
    // cell counts while its window, started at or before the newest instant, runs).
    const TimeNs newest = InstantFrom(packed.word[2] >> 32, packed.word[0]);
    i128 end = std::numeric_limits<int64_t>::min();
    if (spec.algorithm != Algorithm::kAnchoredWindow) {
      const DurationNs width = CellWidth(spec);
      end = (static_cast<i128>(FloorDiv(newest, width)) + 1) * width;
    } else if (const auto start = static_cast<int64_t>(packed.word[3]);
               start <= newest && static_cast<i128>(newest) - start < spec.window) {
      end = static_cast<i128>(start) + spec.window;
    }
    if (now < std::min<i128>(end, std::numeric_limits<TimeNs>::max())) {
      return false;
    }
  }
  return PackedIdleAt(spec, packed, contributor, scratch) <= now;
}

}  // namespace ringlimit::limiter
