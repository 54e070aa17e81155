// Mergeable state (merge.h): the join, materialising the plain State, deciding, reset and GC.
// The algorithms' own math stays in their views (dispatch.h); this file only adds up records.
#include "limiter/merge.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <tuple>

#include "limiter/arith.h"
#include "limiter/dispatch.h"
#include "limiter/judge.h"
#include "limiter/merge_internal.h"

namespace ringlimit::limiter {

DurationNs internal::CellWidth(const LimitSpec& spec) {
  if (spec.algorithm == Algorithm::kSlidingWindow) {
    return spec.window / spec.buckets + (spec.window % spec.buckets != 0 ? 1 : 0);
  }
  return spec.window;
}

namespace {

using internal::AsCount;
using internal::Capacities;
using internal::CeilDiv;
using internal::ComputeCapacities;
using internal::FloorDiv;
using internal::i128;
using internal::kMinTime;
using internal::SatTime;
using internal::u128;

enum class Family { kWindow, kLog, kDrain };

Family FamilyOf(Algorithm a) {
  switch (a) {
    case Algorithm::kFixedWindow:
    case Algorithm::kAnchoredWindow:
    case Algorithm::kSlidingWindowApprox:
    case Algorithm::kSlidingWindow:
      return Family::kWindow;
    case Algorithm::kSlidingLog:
      return Family::kLog;
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
    case Algorithm::kGcra:
      break;
  }
  return Family::kDrain;
}

uint64_t SatAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }
u128 SatSub(u128 a, u128 b) { return a > b ? a - b : 0; }

using internal::CellWidth;

// Whether a cell lies before the `live` cells ending with cell `k` (wide arithmetic: instants near the ends
// of the clock's range come from the wire and must not overflow).
bool BehindWindow(int64_t index, int64_t k, int64_t live) {
  return static_cast<i128>(index) <= static_cast<i128>(k) - live;
}

// How many cells, ending with the one that holds the newest instant, still count.
int64_t LiveCells(const LimitSpec& spec) {
  switch (spec.algorithm) {
    case Algorithm::kSlidingWindowApprox:
      return 2;
    case Algorithm::kSlidingWindow:
      return spec.buckets;
    default:
      return 1;
  }
}

// anchored_window: a cell's index is the instant its window started, so a cell is live while fewer than
// `window` nanoseconds have passed since (whatever width it was counted under).
bool AnchoredLive(const LimitSpec& spec, int64_t start, TimeNs at) {
  return start <= at && static_cast<i128>(at) - start < spec.window;
}

size_t SlidingSlot(int64_t bucket, int64_t n) {  // as sliding_window.cc: tail[0] holds the width
  int64_t r = bucket % n;
  return static_cast<size_t>(r < 0 ? r + n : r) + 1;
}

const Included* FindIncluded(const MergeBase& base, ContributorId id) {
  auto it = std::lower_bound(base.included.begin(), base.included.end(), id,
                             [](const Included& e, ContributorId k) { return e.id < k; });
  return it != base.included.end() && it->id == id ? &*it : nullptr;
}

// Window algorithms and sliding_log: a record the base has absorbed no longer counts.
bool Absorbed(const MergeBase& base, const Contribution& c) {
  const Included* inc = FindIncluded(base, c.id);
  return inc != nullptr && inc->version >= c.version;
}

// Buckets: units of `c` that the base does not account for.
uint64_t Unabsorbed(const MergeBase& base, const Contribution& c) {
  const Included* inc = FindIncluded(base, c.id);
  if (inc == nullptr || c.epoch > inc->epoch) {
    return c.consumed;
  }
  if (c.epoch < inc->epoch) {
    return 0;  // an older count the base has moved past
  }
  return c.consumed > inc->consumed ? c.consumed - inc->consumed : 0;
}

// --- The join ---------------------------------------------------------------------------------

// Two records of one contributor. The higher version wins; at equal versions the copies differ only
// by what Collect dropped, so the fuller one (the union) is kept.
Contribution Join(const Contribution& a, const Contribution& b) {
  if (a.version != b.version) {
    return a.version > b.version ? a : b;
  }
  Contribution out = a;
  out.cells.clear();
  size_t i = 0, j = 0;
  while (i < a.cells.size() || j < b.cells.size()) {
    if (j == b.cells.size() || (i < a.cells.size() && a.cells[i].index < b.cells[j].index)) {
      out.cells.push_back(a.cells[i++]);
    } else if (i == a.cells.size() || b.cells[j].index < a.cells[i].index) {
      out.cells.push_back(b.cells[j++]);
    } else {
      out.cells.push_back({a.cells[i].index, std::max(a.cells[i].count, b.cells[j].count)});
      ++i, ++j;
    }
  }
  // Both logs are suffixes of one sequence: the longer holds the other (ties: the larger, to be
  // deterministic on inputs that break the REQUIRES).
  if (b.stamps.size() > a.stamps.size() || (b.stamps.size() == a.stamps.size() && b.stamps > a.stamps)) {
    out.stamps = b.stamps;
  }
  out.width = std::max(a.width, b.width);
  out.epoch = std::max(a.epoch, b.epoch);
  out.consumed = std::max(a.consumed, b.consumed);
  out.last = std::max(a.last, b.last);
  return out;
}

bool BaseLess(const MergeBase& a, const MergeBase& b) {
  auto key = [](const MergeBase& x) { return std::tie(x.stamp, x.level_whole, x.level_frac, x.at); };
  if (key(a) != key(b)) {
    return key(a) < key(b);
  }
  return std::lexicographical_compare(a.included.begin(), a.included.end(), b.included.begin(),
                                      b.included.end(), [](const Included& x, const Included& y) {
                                        return std::tie(x.id, x.version, x.epoch, x.consumed, x.expires) <
                                               std::tie(y.id, y.version, y.epoch, y.consumed, y.expires);
                                      });
}

// --- Materialising ----------------------------------------------------------------------------

struct Materialized {
  State plain;
  // Buckets in debt: the level is shown full until `debt_until`, the instant the merged level
  // drains back to the maximum; decision figures are then relative to `debt_until` and are shifted
  // back by the caller. kMinTime when there is no debt.
  TimeNs debt_until = kMinTime;
  TimeNs drained_at = kMinTime;  // the instant of the merged level (before the debt shift)
};

// Cells of a counted record, added into `fn(index, count)` under the spec's layout. A record
// counted under another width (a parameter change) is carried whole into the newest cell, as the
// plain views carry usage (never minting).
template <class Fn>
void ForEachCell(const Contribution& c, DurationNs width, int64_t newest_cell, Fn&& fn) {
  if (c.width == width) {
    for (const Cell& cell : c.cells) {
      fn(cell.index, cell.count);
    }
    return;
  }
  uint64_t total = 0;
  for (const Cell& cell : c.cells) {
    total = SatAdd(total, cell.count);
  }
  fn(newest_cell, total);
}

// anchored_window: the live cells of every record, added up (windows of different copies that overlap
// are all counted: never less than any copy saw), in the window that started last.
State MaterializeAnchored(const LimitSpec& spec, const MergeState& m) {
  State s;
  s.algorithm = spec.algorithm;
  s.word[0] = m.newest;
  uint64_t count = 0;
  int64_t start = 0;
  for (const Contribution& c : m.contributions) {
    if (Absorbed(m.base, c)) {
      continue;
    }
    for (const Cell& cell : c.cells) {
      if (AnchoredLive(spec, cell.index, m.newest)) {
        start = count == 0 ? cell.index : std::max(start, cell.index);
        count = SatAdd(count, cell.count);
      }
    }
  }
  s.word[1] = static_cast<int64_t>(std::min<uint64_t>(count, INT64_MAX));
  s.word[2] = start;
  return s;
}

State MaterializeWindow(const LimitSpec& spec, const MergeState& m) {
  if (spec.algorithm == Algorithm::kAnchoredWindow) {
    return MaterializeAnchored(spec, m);
  }
  const DurationNs width = CellWidth(spec);
  const int64_t k = FloorDiv(m.newest, width);
  const int64_t live = LiveCells(spec);
  State s;
  s.algorithm = spec.algorithm;
  s.word[0] = m.newest;
  uint64_t cur = 0, prev = 0, total = 0;
  if (spec.algorithm == Algorithm::kSlidingWindow) {
    s.tail.assign(static_cast<size_t>(live) + 1, 0);
    s.tail[0] = width;
  }
  for (const Contribution& c : m.contributions) {
    if (Absorbed(m.base, c)) {
      continue;
    }
    ForEachCell(c, width, k, [&](int64_t index, uint64_t count) {
      if (index > k || BehindWindow(index, k, live)) {
        return;  // expired (or ahead of the newest instant: cannot happen for a valid record)
      }
      total = SatAdd(total, count);
      if (spec.algorithm == Algorithm::kSlidingWindow) {
        int64_t& slot = s.tail[SlidingSlot(index, live)];
        slot = static_cast<int64_t>(std::min<uint64_t>(SatAdd(AsCount(slot), count), INT64_MAX));
      } else if (index == k) {
        cur = SatAdd(cur, count);
      } else {
        prev = SatAdd(prev, count);
      }
    });
  }
  auto word = [](uint64_t v) { return static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX)); };
  if (spec.algorithm == Algorithm::kSlidingWindow) {
    s.word[1] = word(total);
  } else {
    s.word[1] = word(cur);
    s.word[2] = word(prev);  // fixed_window ignores word[2] (0: nothing before)
  }
  return s;
}

State MaterializeLog(const LimitSpec& spec, const MergeState& m) {
  State s;
  s.algorithm = Algorithm::kSlidingLog;
  s.word[2] = m.newest;
  const TimeNs oldest = SatTime(static_cast<i128>(m.newest) - spec.window + 1);
  for (const Contribution& c : m.contributions) {
    if (Absorbed(m.base, c)) {
      continue;
    }
    auto from = std::lower_bound(c.stamps.begin(), c.stamps.end(), oldest);
    auto to = std::upper_bound(from, c.stamps.end(), m.newest);
    const size_t mid = s.tail.size();
    s.tail.insert(s.tail.end(), from, to);
    std::inplace_merge(s.tail.begin(), s.tail.begin() + static_cast<std::ptrdiff_t>(mid), s.tail.end());
  }
  return s;
}

// A bucket at `level` (units x window) at instant `cur`, as the plain State, with the debt above its
// maximum (Materialized).
// `caps`: at headroom 0.
Materialized LevelAt(const LimitSpec& spec, u128 level, TimeNs cur, const Capacities& caps) {
  const auto window = static_cast<uint64_t>(spec.window);
  const uint64_t rate = spec.limit;
  Materialized out;
  const u128 max_level = static_cast<u128>(caps.max) * window + static_cast<u128>(caps.max_delay) * rate;
  out.drained_at = cur;
  if (level > max_level) {
    out.debt_until = SatTime(static_cast<i128>(cur) + static_cast<i128>(CeilDiv(level - max_level, rate)));
    cur = out.debt_until;
    level = max_level;
  }
  const u128 whole = level / window;
  out.plain.algorithm = spec.algorithm;
  out.plain.word[0] = static_cast<int64_t>(whole);
  out.plain.word[1] = static_cast<int64_t>(level - whole * window);
  out.plain.word[2] = cur;
  return out;
}

// MergedIdleAt of what materialised to `mat`; `caps` at headroom 0.
TimeNs IdleOf(const LimitSpec& spec, const Materialized& mat, const Capacities& caps) {
  const TimeNs idle = internal::IdleAtWith(spec, mat.plain, caps);
  if (mat.debt_until == kMinTime || idle == kMinTime) {
    return idle;
  }
  return std::max(idle, mat.debt_until);
}

Materialized MaterializeDrain(const LimitSpec& spec, const MergeState& m) {
  const auto window = static_cast<uint64_t>(spec.window);
  const uint64_t rate = spec.limit;
  // The base level at its instant, then every unabsorbed charge added at its contributor's newest
  // charge instant (no earlier than it happened: never crediting refill it did not earn). A charge
  // older than the replay point adds only what of it would remain by then on its own.
  u128 level = static_cast<u128>(AsCount(m.base.level_whole) & INT64_MAX) * window +
               (AsCount(m.base.level_frac) & INT64_MAX);
  TimeNs cur = m.base.stamp == 0 ? kMinTime : m.base.at;
  struct Extra {
    TimeNs at;
    ContributorId id;
    u128 amount;
  };
  std::vector<Extra> extras;
  for (const Contribution& c : m.contributions) {
    const uint64_t units = Unabsorbed(m.base, c);
    if (units > 0) {
      extras.push_back({c.last, c.id, static_cast<u128>(units) * window});
    }
  }
  std::sort(extras.begin(), extras.end(),
            [](const Extra& a, const Extra& b) { return std::tie(a.at, a.id) < std::tie(b.at, b.id); });
  auto drained = [&](TimeNs from, TimeNs to) {
    return static_cast<u128>(static_cast<i128>(to) - from) * rate;
  };
  for (const Extra& e : extras) {
    if (e.at <= cur) {
      level += SatSub(e.amount, drained(e.at, cur));
    } else {
      level = SatSub(level, cur == kMinTime ? level : drained(cur, e.at));
      cur = e.at;
      level += e.amount;
    }
  }
  if (m.newest > cur) {
    level = SatSub(level, cur == kMinTime ? level : drained(cur, m.newest));
    cur = m.newest;
  }
  return LevelAt(spec, level, cur, ComputeCapacities(spec, 0.));
}

Materialized MaterializeAll(const LimitSpec& spec, const MergeState& m) {
  Materialized out;
  if (m.algorithm != spec.algorithm) {
    return out;  // initial
  }
  switch (FamilyOf(spec.algorithm)) {
    case Family::kWindow:
      out.plain = MaterializeWindow(spec, m);
      break;
    case Family::kLog:
      out.plain = MaterializeLog(spec, m);
      break;
    case Family::kDrain:
      out = MaterializeDrain(spec, m);
      break;
  }
  return out;
}

// --- Recording a charge -----------------------------------------------------------------------

// Units in cell `index` of a plain window State (what the view would start from there).
uint64_t PlainCell(const LimitSpec& spec, const State& s, int64_t index) {
  if (s.algorithm != spec.algorithm) {
    return 0;
  }
  if (spec.algorithm == Algorithm::kAnchoredWindow) {  // index: a window's start
    return s.word[1] > 0 && s.word[2] == index ? AsCount(s.word[1]) : 0;
  }
  const DurationNs width = CellWidth(spec);
  const int64_t k = FloorDiv(s.word[0], width);
  if (spec.algorithm == Algorithm::kSlidingWindow) {
    const int64_t n = spec.buckets;
    if (index > k || index <= k - n || s.tail.size() != static_cast<size_t>(n) + 1) {
      return 0;
    }
    return AsCount(s.tail[SlidingSlot(index, n)]);
  }
  return index == k ? AsCount(s.word[1]) : 0;
}

// Room for one more record in `records`. A key's records grow from one (the deciding node's) to those of
// the few nodes that decided it -- its holders, three by default: the first growth makes room for three at
// once, so a key whose third contributor arrives does not leave the two-record block it grew out of free in
// the heap, a hole no later allocation of the memory tier fills (issue 39: key_bytes_bench's sliding_window
// with 15 cells per contributor had 0.82x its resident set accounted after a third contributor, 0.9x after
// this). A key with one record keeps a block of one.
void MakeRoomForRecord(std::vector<Contribution>& records) {
  if (records.size() == records.capacity() && !records.empty() && records.size() < 3) {
    records.reserve(3);
  }
}

Contribution& RecordOf(MergeState& m, ContributorId id) {
  auto it = std::lower_bound(m.contributions.begin(), m.contributions.end(), id,
                             [](const Contribution& c, ContributorId k) { return c.id < k; });
  if (it == m.contributions.end() || it->id != id) {
    const auto at = it - m.contributions.begin();
    MakeRoomForRecord(m.contributions);
    it = m.contributions.insert(m.contributions.begin() + at, Contribution{});
    it->id = id;
  }
  return *it;
}

void RecordWindow(const LimitSpec& spec, MergeState& m, Contribution& rec, const State& before,
                  const State& after, TimeNs now) {
  const DurationNs width = CellWidth(spec);
  const bool anchored = spec.algorithm == Algorithm::kAnchoredWindow;
  // The cell charged: anchored_window's is the start of the window the view charged in.
  const int64_t k = anchored ? after.word[2] : FloorDiv(now, width);
  if (Absorbed(m.base, rec)) {
    rec.cells.clear();  // a reset took them: start afresh
  }
  if (anchored) {
    rec.width = width;  // a start means the same under any width
    std::erase_if(rec.cells,
                  [&](const Cell& c) { return !AnchoredLive(spec, c.index, now) && c.index != k; });
  } else if (rec.width != width) {  // counted under other parameters: carry the total into this cell
    uint64_t total = 0;
    for (const Cell& c : rec.cells) {
      total = SatAdd(total, c.count);
    }
    rec.cells.clear();
    if (total > 0) {
      rec.cells.push_back({k, total});
    }
    rec.width = width;
  }
  const int64_t live = LiveCells(spec);
  if (!anchored) {
    std::erase_if(rec.cells, [&](const Cell& c) { return BehindWindow(c.index, k, live); });
  }
  auto it = std::lower_bound(rec.cells.begin(), rec.cells.end(), k,
                             [](const Cell& c, int64_t i) { return c.index < i; });
  const uint64_t own = (it != rec.cells.end() && it->index == k) ? it->count : 0;
  const uint64_t before_k = PlainCell(spec, before, k);
  const uint64_t others = before_k > own ? before_k - own : 0;
  const uint64_t after_k = PlainCell(spec, after, k);
  const uint64_t mine = std::max(own, after_k > others ? after_k - others : 0);
  if (mine == 0) {
    return;
  }
  if (it != rec.cells.end() && it->index == k) {
    it->count = mine;
  } else {
    rec.cells.insert(it, Cell{k, mine});
  }
}

void RecordLog(const LimitSpec& spec, MergeState& m, Contribution& rec, const State& before,
               const State& after, TimeNs now, uint64_t store_cap) {
  auto at_now = [&](const State& s) {
    auto r = std::equal_range(s.tail.begin(), s.tail.end(), now);
    return static_cast<uint64_t>(r.second - r.first);
  };
  const uint64_t added = at_now(after) > at_now(before) ? at_now(after) - at_now(before) : 0;
  if (Absorbed(m.base, rec)) {
    rec.stamps.clear();
  }
  const TimeNs oldest = SatTime(static_cast<i128>(now) - spec.window + 1);
  rec.stamps.erase(rec.stamps.begin(), std::lower_bound(rec.stamps.begin(), rec.stamps.end(), oldest));
  rec.stamps.insert(rec.stamps.end(), added, now);
  if (rec.stamps.size() > store_cap) {  // only the newest store_cap of all units can ever count
    rec.stamps.erase(rec.stamps.begin(), rec.stamps.end() - static_cast<std::ptrdiff_t>(store_cap));
  }
}

// When a bucket record has drained entirely (on its own) by the base's instant.
TimeNs DrainedBy(const LimitSpec& spec, const Contribution& c) {
  const u128 amount = static_cast<u128>(c.consumed) * static_cast<uint64_t>(spec.window);
  return SatTime(static_cast<i128>(c.last) + static_cast<i128>(CeilDiv(amount, spec.limit)));
}

}  // namespace

TimeNs internal::ExpiresOf(const LimitSpec& spec, const Contribution& c) {
  switch (FamilyOf(spec.algorithm)) {
    case Family::kWindow: {
      int64_t top = kMinTime / 2;
      for (const Cell& cell : c.cells) {
        top = std::max(top, cell.index);
      }
      if (spec.algorithm == Algorithm::kAnchoredWindow) {
        return SatTime(static_cast<i128>(top) + std::max(c.width, spec.window));
      }
      return SatTime((static_cast<i128>(top) + LiveCells(spec)) * std::max<DurationNs>(c.width, 1));
    }
    case Family::kLog:
      return c.stamps.empty() ? kMinTime : SatTime(static_cast<i128>(c.stamps.back()) + spec.window);
    case Family::kDrain:
      break;
  }
  return DrainedBy(spec, c);
}

namespace {

using internal::ExpiresOf;

// A new base: the given level, absorbing every record as it is now.
void Rebase(const LimitSpec& spec, MergeState& m, Hlc stamp, const State& level) {
  MergeBase base;
  base.stamp = std::max(stamp, m.base.stamp + 1);
  base.level_whole = level.word[0];
  base.level_frac = level.word[1];
  base.at = level.word[2];
  // Buckets: keep the old base's entries of records Collect dropped (tombstones), so that a newer
  // record of the same count arriving later is not counted from zero; at most kMaxContributors in
  // all, the longest drained dropped first. (The new base includes exactly the current records.)
  std::vector<Included> tombstones;
  if (FamilyOf(spec.algorithm) == Family::kDrain) {
    for (const Included& e : m.base.included) {
      auto it = std::lower_bound(m.contributions.begin(), m.contributions.end(), e.id,
                                 [](const Contribution& c, ContributorId k) { return c.id < k; });
      if (it == m.contributions.end() || it->id != e.id) {
        tombstones.push_back(e);
      }
    }
  }
  // The old base's storage is reused (a check rebases every time: no allocation then).
  base.included = std::move(m.base.included);
  base.included.clear();
  base.included.reserve(m.contributions.size());
  for (const Contribution& c : m.contributions) {
    base.included.push_back({c.id, c.version, c.epoch, c.consumed, ExpiresOf(spec, c)});
  }
  if (!tombstones.empty()) {
    const size_t room = kMaxContributors > base.included.size() ? kMaxContributors - base.included.size() : 0;
    if (tombstones.size() > room) {
      std::sort(tombstones.begin(), tombstones.end(), [](const Included& a, const Included& b) {
        return std::tie(b.expires, b.id) < std::tie(a.expires, a.id);
      });
      tombstones.resize(room);
    }
    base.included.insert(base.included.end(), tombstones.begin(), tombstones.end());
    std::sort(base.included.begin(), base.included.end(),
              [](const Included& a, const Included& b) { return a.id < b.id; });
  }
  m.base = std::move(base);
}

// Evaluates `request` on the merged state; with `state`, charges it on behalf of `contributor`
// (CheckMerged). `admitted`: whether the whole request was admitted (CheckAllMerged; null: this
// limit's own verdict decides).
Decision Evaluate(const LimitSpec& spec, MergeState* state, const MergeState& view_of, const Request& request,
                  ContributorId contributor, Hlc stamp, const bool* admitted = nullptr) {
  const Materialized mat = MaterializeAll(spec, view_of);
  const Capacities caps = ComputeCapacities(spec, request.headroom);
  State after;
  uint64_t units = 0;
  TimeNs decided_at = 0;
  Decision d = internal::WithView(spec, mat.plain, request.now, caps, [&](auto& view) {
    const internal::Verdict v = internal::Judge(view, spec.mode, caps, request.cost);
    units = internal::ChargeUnits(v, admitted != nullptr ? *admitted : v.allowed, spec.count_denied,
                                  request.cost);
    Decision out = internal::Decide(view, v, caps, spec.limit, units);
    decided_at = view.Now();
    if (state != nullptr && units > 0) {
      after = mat.plain;
      view.Store(after);
    }
    return out;
  });
  if (mat.debt_until != kMinTime && request.now < mat.debt_until) {
    // The view judged at debt_until (full bucket); report the figures from the real instant.
    const i128 shift = static_cast<i128>(mat.debt_until) - std::max(request.now, mat.drained_at);
    if (!d.allowed && d.retry_after != kNever) {
      d.retry_after = internal::SatDuration(d.retry_after + shift);
    }
    d.reset_after = internal::SatDuration(d.reset_after + shift);
    units = 0;  // a full bucket takes nothing more; its debt is already recorded
  }
  if (state == nullptr || units == 0) {
    return d;
  }
  MergeState& m = *state;
  m.newest = std::max(m.newest, decided_at);
  Contribution& rec = RecordOf(m, contributor);
  const Hlc version = std::max(stamp, rec.version + 1);
  switch (FamilyOf(spec.algorithm)) {
    case Family::kWindow:
      RecordWindow(spec, m, rec, mat.plain, after, decided_at);
      break;
    case Family::kLog:
      RecordLog(spec, m, rec, mat.plain, after, decided_at, caps.max * internal::kCountDeniedFactor);
      break;
    case Family::kDrain:
      if (rec.epoch == 0) {
        rec.epoch = version;
      }
      rec.consumed = SatAdd(rec.consumed, units);
      rec.last = std::max(rec.last, decided_at);
      break;
  }
  rec.version = version;
  if (FamilyOf(spec.algorithm) == Family::kDrain) {
    Rebase(spec, m, stamp, after);  // the next decider starts exactly from this level
  }
  return d;
}

// Another algorithm's copy means nothing under `spec`: start empty, with a base newer than its own.
void Adopt(const LimitSpec& spec, MergeState& state, Hlc stamp) {
  if (state.algorithm != spec.algorithm) {
    const Hlc base = std::max(stamp, state.base.stamp + 1);
    GrantLedger grants = std::move(state.grants);  // slices still out keep counting whatever changed
    Clear(state);
    state.algorithm = spec.algorithm;
    state.base.stamp = base;
    state.grants = std::move(grants);
  }
}

// Grants still out are a retry away from coming back (their term, at most a few seconds): a request that
// fits the capacity but not beside them is told to retry after this long rather than never.
constexpr DurationNs kRetryWhileGrantsOut = 1'000'000'000;

// Evaluate, judging the request as if the grants out of `view_of` were charged too (GrantsOut): refused
// (charging only a count_denied request) when it does not fit beside them; `remaining` reduced by them.
Decision EvaluateGranted(const LimitSpec& spec, MergeState* state, const MergeState& view_of,
                         const Request& request, ContributorId contributor, Hlc stamp,
                         const bool* admitted = nullptr) {
  const uint64_t out = GrantsOut(spec, view_of, request.now);
  if (out == 0) {
    return Evaluate(spec, state, view_of, request, contributor, stamp, admitted);
  }
  bool fits = true;
  DurationNs retry = 0;
  if (request.cost > 0) {
    Request all = request;
    all.cost = SatAdd(request.cost, out);
    const Decision judged = Evaluate(spec, nullptr, view_of, all, 0, 0);
    fits = judged.allowed;
    retry = judged.retry_after == kNever ? kRetryWhileGrantsOut : judged.retry_after;
  }
  const bool refused = false;
  Decision d = Evaluate(spec, state, view_of, request, contributor, stamp, fits ? admitted : &refused);
  if (!fits) {
    d.allowed = false;
    d.would_deny = true;
    d.beyond_limit = false;
    d.delay = 0;
    d.retry_after = std::max<DurationNs>(retry, 1);
  }
  d.remaining = d.remaining > out ? d.remaining - out : 0;
  return d;
}

}  // namespace

void Clear(MergeState& state) {
  std::vector<Included> included = std::move(state.base.included);
  std::vector<Contribution> contributions = std::move(state.contributions);
  included.clear();
  contributions.clear();
  state = MergeState{};
  state.base.included = std::move(included);
  state.contributions = std::move(contributions);
}

size_t HeapBytes(const MergeState& state) {
  size_t bytes = state.base.included.capacity() * sizeof(Included) +
                 state.contributions.capacity() * sizeof(Contribution) +
                 state.grants.records.capacity() * sizeof(GrantRecord);
  for (const Contribution& c : state.contributions) {
    bytes += c.cells.capacity() * sizeof(Cell) + c.stamps.capacity() * sizeof(TimeNs);
  }
  return bytes;
}

MergeState Merge(const MergeState& a, const MergeState& b) {
  MergeState out = a;
  MergeInto(out, b);
  return out;
}

namespace {

// The newest version of contributor `id` that `state` knows: its own record's, or its base's account.
Hlc KnownVersion(const MergeState& state, ContributorId id) {
  Hlc known = 0;
  const auto c = std::lower_bound(state.contributions.begin(), state.contributions.end(), id,
                                  [](const Contribution& r, ContributorId v) { return r.id < v; });
  if (c != state.contributions.end() && c->id == id) known = c->version;
  const auto i = std::lower_bound(state.base.included.begin(), state.base.included.end(), id,
                                  [](const Included& r, ContributorId v) { return r.id < v; });
  if (i != state.base.included.end() && i->id == id) known = std::max(known, i->version);
  return known;
}

}  // namespace

bool HoldsOthersNewer(const MergeState& held, const MergeState& update, ContributorId except) {
  if (held.algorithm == Algorithm{}) return false;
  if (held.algorithm != update.algorithm) return true;
  for (const Contribution& c : held.contributions) {
    if (c.id != except && c.version > KnownVersion(update, c.id)) return true;
  }
  for (const Included& i : held.base.included) {
    if (i.id != except && i.version > KnownVersion(update, i.id)) return true;
  }
  return false;
}

bool MergeInto(MergeState& into, const MergeState& from) {
  // The ledgers join whatever the algorithms: a grant counts until it is settled, even across a reset.
  bool changed = MergeInto(into.grants, from.grants);
  if (from.algorithm == Algorithm{}) {
    return changed;
  }
  if (into.algorithm != from.algorithm) {
    if (into.algorithm == Algorithm{} ||
        std::tie(into.base.stamp, into.algorithm) < std::tie(from.base.stamp, from.algorithm)) {
      GrantLedger grants = std::move(into.grants);
      into = from;
      into.grants = std::move(grants);
      return true;
    }
    return changed;
  }
  if (from.newest > into.newest) {
    into.newest = from.newest;
    changed = true;
  }
  if (BaseLess(into.base, from.base)) {
    into.base = from.base;
    changed = true;
  }
  // Records by id, in place: a replica's copy usually differs by one newer record, which is assigned over
  // the old one (reusing its buffers) rather than rebuilding the list.
  std::vector<Contribution>& x = into.contributions;
  size_t i = 0;
  for (const Contribution& c : from.contributions) {
    while (i < x.size() && x[i].id < c.id) {
      ++i;
    }
    if (i == x.size() || x[i].id != c.id) {
      MakeRoomForRecord(x);
      x.insert(x.begin() + static_cast<std::ptrdiff_t>(i), c);
      changed = true;
    } else if (c.version > x[i].version) {
      x[i] = c;
      changed = true;
    } else if (c.version == x[i].version && !(c == x[i])) {
      Contribution joined = Join(x[i], c);
      if (!(joined == x[i])) {
        x[i] = std::move(joined);
        changed = true;
      }
    }
    ++i;
  }
  return changed;
}

Decision CheckMerged(const LimitSpec& spec, MergeState& state, ContributorId contributor, Hlc stamp,
                     const Request& request) {
  Adopt(spec, state, stamp);
  return EvaluateGranted(spec, &state, state, request, contributor, stamp);
}

Decision PeekMerged(const LimitSpec& spec, const MergeState& state, const Request& request) {
  return EvaluateGranted(spec, nullptr, state, request, 0, 0);
}

uint64_t GrantsOut(const LimitSpec& spec, const MergeState& state, TimeNs now) {
  if (state.grants.records.empty()) {
    return 0;
  }
  return Outstanding(spec, state.grants, MaterializeAll(spec, state).plain, now);
}

Status LendMerged(const LimitSpec& spec, MergeState& state, GrantId id, uint64_t units, TimeNs now) {
  if (state.algorithm != Algorithm{} && state.algorithm != spec.algorithm) {
    return Status::InvalidArgument("grant", "the state was written by another algorithm");
  }
  Status added = AddGrant(state.grants, id, units, now);
  // A state nothing was charged to yet is empty (Algorithm{}), and a store keeps no empty state: it takes
  // the spec's algorithm, so the grant record is kept and counted.
  if (added.ok()) state.algorithm = spec.algorithm;
  return added;
}

uint64_t SettleMerged(const LimitSpec& spec, MergeState& state, GrantId id, std::optional<uint64_t> used,
                      ContributorId contributor, Hlc stamp, TimeNs now) {
  const GrantRecord* record = FindGrant(state.grants, id);
  if (record == nullptr) {
    return 0;
  }
  const TimeNs granted_at = record->at;
  const uint64_t units = SettleGrant(state.grants, id, used);
  if (units == 0 || (state.algorithm != Algorithm{} && state.algorithm != spec.algorithm)) {
    return 0;
  }
  const TimeNs at = std::max(now, state.newest);
  if (spec.algorithm == Algorithm::kFixedWindow &&
      FloorDiv(granted_at, spec.window) != FloorDiv(at, spec.window)) {
    return 0;  // counted in a window that is over: those units no longer count anywhere
  }
  if (spec.algorithm == Algorithm::kAnchoredWindow) {
    const State plain = MaterializeAll(spec, state).plain;
    if (plain.word[1] == 0 || !AnchoredLive(spec, plain.word[2], at) || plain.word[2] > granted_at) {
      return 0;
    }
  }
  Adopt(spec, state, stamp);
  // Admitted by construction: the units were counted (GrantsOut) since the grant, and every decision
  // since left room for them.
  const bool admitted = true;
  const Decision d = Evaluate(spec, &state, state, Request{.cost = units, .now = now, .headroom = 0.},
                              contributor, stamp, &admitted);
  return d.allowed ? units : 0;
}

bool CheckAllMerged(std::span<const LimitSpec* const> specs, std::span<MergeState* const> states,
                    ContributorId contributor, Hlc stamp, const Request& request,
                    std::span<Decision> decisions) {
  // Pass 1: every limit's own verdict, nothing changed.
  bool admitted = true;
  for (size_t i = 0; i < specs.size(); ++i) {
    admitted = admitted && EvaluateGranted(*specs[i], nullptr, *states[i], request, 0, 0).allowed;
  }
  // Pass 2: charge all (admitted) or only the count_denied limits (refused); the figures describe what
  // was actually charged, as CheckAll's.
  for (size_t i = 0; i < specs.size(); ++i) {
    const LimitSpec& spec = *specs[i];
    MergeState& state = *states[i];
    if (!admitted && !spec.count_denied) {
      decisions[i] = EvaluateGranted(spec, nullptr, state, request, 0, 0, &admitted);  // charges nothing
      continue;
    }
    Adopt(spec, state, stamp);
    decisions[i] = EvaluateGranted(spec, &state, state, request, contributor, stamp, &admitted);
  }
  return admitted;
}

namespace {

// MergedIdleAt of a sliding_log state without materialising it (the memory tier's idle sweep judges two
// states on every update; the merged log it would build costs an allocation and a merge of every record's
// stamps): what IdleAtWith says of MaterializeLog's state -- the log of the window ending at the state's
// newest instant, judged there. Empty (or a limit that keeps no stamp): that instant; else its newest stamp
// plus the window.
TimeNs LogIdleAt(const LimitSpec& spec, const MergeState& m) {
  const TimeNs oldest = SatTime(static_cast<i128>(m.newest) - spec.window + 1);
  std::optional<TimeNs> newest_stamp;
  for (const Contribution& c : m.contributions) {
    if (Absorbed(m.base, c)) {
      continue;
    }
    const auto to = std::upper_bound(c.stamps.begin(), c.stamps.end(), m.newest);
    if (to == c.stamps.begin() || *(to - 1) < oldest) {
      continue;
    }
    newest_stamp = std::max(newest_stamp.value_or(kMinTime), *(to - 1));
  }
  if (!newest_stamp || ComputeCapacities(spec, 0.).max * internal::kCountDeniedFactor == 0) {
    return m.newest;
  }
  return SatTime(static_cast<i128>(m.newest) +
                 internal::SatDuration(static_cast<i128>(*newest_stamp) + spec.window - m.newest));
}

}  // namespace

TimeNs MergedIdleAt(const LimitSpec& spec, const MergeState& state) {
  for (const GrantRecord& g : state.grants.records) {
    if (!g.settled) {
      return std::numeric_limits<TimeNs>::max();
    }
  }
  if (state.algorithm != spec.algorithm) {
    return kMinTime;
  }
  if (spec.algorithm == Algorithm::kSlidingLog) {
    return LogIdleAt(spec, state);
  }
  return IdleOf(spec, MaterializeAll(spec, state), ComputeCapacities(spec, 0.));
}

TimeNs internal::BucketIdleAt(const LimitSpec& spec, u128 level, TimeNs at) {
  const Capacities caps = ComputeCapacities(spec, 0.);
  return IdleOf(spec, LevelAt(spec, level, at, caps), caps);
}

MergeState FromPlain(const LimitSpec& spec, const State& plain, ContributorId contributor, Hlc stamp) {
  MergeState m;
  if (plain.algorithm != spec.algorithm) {
    return m;
  }
  m.algorithm = spec.algorithm;
  const Capacities caps = ComputeCapacities(spec, 0.);
  m.newest = internal::WithView(spec, plain, kMinTime, caps, [](auto& view) { return view.Now(); });
  switch (FamilyOf(spec.algorithm)) {
    case Family::kDrain:
      Rebase(spec, m, stamp, plain);
      return m;
    case Family::kLog: {
      Contribution& rec = RecordOf(m, contributor);
      rec.version = stamp;
      rec.stamps.assign(plain.tail.begin(), plain.tail.end());
      std::sort(rec.stamps.begin(), rec.stamps.end());
      return m;
    }
    case Family::kWindow:
      break;
  }
  Contribution& rec = RecordOf(m, contributor);
  rec.version = stamp;
  rec.width = CellWidth(spec);
  if (spec.algorithm == Algorithm::kAnchoredWindow) {
    if (plain.word[1] > 0 && AnchoredLive(spec, plain.word[2], m.newest)) {
      rec.cells.push_back({plain.word[2], AsCount(plain.word[1])});
    } else {
      m.contributions.clear();
    }
    return m;
  }
  const int64_t k = FloorDiv(m.newest, rec.width);
  const int64_t live = LiveCells(spec);
  for (int64_t back = live - 1; back >= 0; --back) {
    const i128 wide = static_cast<i128>(k) - back;
    if (wide < std::numeric_limits<int64_t>::min()) {
      continue;  // before the first representable cell
    }
    const auto index = static_cast<int64_t>(wide);
    uint64_t count = PlainCell(spec, plain, index);
    if (spec.algorithm == Algorithm::kSlidingWindowApprox && index == k - 1) {
      count = AsCount(plain.word[2]);
    }
    if (count > 0) {
      rec.cells.push_back({index, count});
    }
  }
  if (rec.cells.empty()) {
    m.contributions.clear();
  }
  return m;
}

uint64_t ChangeDigest(const MergeState& state) {
  uint64_t sum = 0;
  for (const Contribution& c : state.contributions) {
    sum += c.version;
  }
  // Grants: every field of a record only grows, so a sum weighted per field changes with any of them.
  uint64_t grants = static_cast<uint64_t>(state.grants.floor) * 0xc2b2ae3d27d4eb4fULL;
  for (const GrantRecord& g : state.grants.records) {
    grants += g.id * 0x165667b19e3779f9ULL + g.granted + (g.used << 20) + (g.returned << 40) +
              (g.settled ? 0x8000000000000000ULL : 0);
  }
  // Mixed so that one field's change cannot cancel another's (not a hash: collisions need a change
  // of 2^64 in the version sum).
  return grants ^ sum ^ (state.base.stamp * 0x9e3779b97f4a7c15ULL) ^
         (uint64_t{static_cast<uint8_t>(state.algorithm)} << 56) ^
         (static_cast<uint64_t>(state.contributions.size()) << 48);
}

void ResetMerged(const LimitSpec& spec, MergeState& state, Hlc stamp) {
  if (state.algorithm != spec.algorithm) {
    state = MergeState{};
    state.algorithm = spec.algorithm;
  }
  State empty;
  empty.word[2] = state.newest;
  Rebase(spec, state, stamp, empty);
}

void Collect(const LimitSpec& spec, MergeState& m) {
  if (m.algorithm != spec.algorithm) {
    return;
  }
  const Family family = FamilyOf(spec.algorithm);
  const Capacities caps = ComputeCapacities(spec, 0.);
  const uint64_t store_cap = caps.max * internal::kCountDeniedFactor;
  const TimeNs oldest = SatTime(static_cast<i128>(m.newest) - spec.window + 1);
  auto dead = [&](Contribution& c) -> bool {
    switch (family) {
      case Family::kWindow: {
        if (spec.algorithm == Algorithm::kAnchoredWindow) {
          std::erase_if(c.cells, [&](const Cell& cell) { return !AnchoredLive(spec, cell.index, m.newest); });
          return c.cells.empty();
        }
        const int64_t k = FloorDiv(m.newest, std::max<DurationNs>(c.width, 1));
        const int64_t live = c.width == CellWidth(spec) ? LiveCells(spec) : spec.buckets;
        std::erase_if(c.cells, [&](const Cell& cell) { return BehindWindow(cell.index, k, live); });
        return c.cells.empty();
      }
      case Family::kLog:
        c.stamps.erase(c.stamps.begin(), std::lower_bound(c.stamps.begin(), c.stamps.end(), oldest));
        if (c.stamps.size() > store_cap) {
          c.stamps.erase(c.stamps.begin(), c.stamps.end() - static_cast<std::ptrdiff_t>(store_cap));
        }
        return c.stamps.empty();
      case Family::kDrain:
        break;
    }
    // A bucket record that has drained on its own by the base's instant adds nothing, absorbed or
    // not; drop it with its base entry when that entry is of the same count.
    const Included* inc = FindIncluded(m.base, c.id);
    return m.base.stamp != 0 && DrainedBy(spec, c) <= m.base.at && (inc == nullptr || inc->epoch == c.epoch);
  };
  std::erase_if(m.contributions, dead);
  if (family != Family::kDrain) {
    // Every cell or stamp an entry covers has expired. (A bucket's entries stay as tombstones: a
    // newer record of the same count may still arrive from another copy; Rebase bounds them.)
    std::erase_if(m.base.included, [&](const Included& e) { return e.expires <= m.newest; });
  }
}

State Materialize(const LimitSpec& spec, const MergeState& state) {
  return MaterializeAll(spec, state).plain;
}

}  // namespace ringlimit::limiter
