// Quota grants' returned-budget record (grant_ledger.h): counting, settling, the join and GC.
#include "limiter/grant_ledger.h"

#include <algorithm>

#include "limiter/arith.h"
#include "limiter/judge.h"

namespace ringlimit::limiter {
namespace {

using internal::FloorDiv;
using internal::i128;

uint64_t SatAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

std::vector<GrantRecord>::iterator Lower(std::vector<GrantRecord>& records, GrantId id) {
  return std::lower_bound(records.begin(), records.end(), id,
                          [](const GrantRecord& r, GrantId k) { return r.id < k; });
}

// Two copies of one grant: every field by max, `settled` by OR.
GrantRecord Join(const GrantRecord& a, const GrantRecord& b) {
  GrantRecord out = a;
  out.granted = std::max(a.granted, b.granted);
  out.used = std::max(a.used, b.used);
  out.returned = std::max(a.returned, b.returned);
  out.at = std::max(a.at, b.at);
  out.settled = a.settled || b.settled;
  return out;
}

// The newest instant `plain` has seen, when it was written by `spec`'s algorithm.
TimeNs NowOf(const LimitSpec& spec, const State& plain, TimeNs now) {
  return plain.algorithm == spec.algorithm ? std::max(now, plain.word[0]) : now;
}

// anchored_window: the start of the window running at `now`, or nullopt (as AnchoredWindowView).
std::optional<TimeNs> AnchoredStart(const LimitSpec& spec, const State& plain, TimeNs now) {
  if (plain.algorithm != Algorithm::kAnchoredWindow || plain.word[1] <= 0 || plain.word[2] > now ||
      static_cast<i128>(now) - plain.word[2] >= spec.window) {
    return std::nullopt;
  }
  return plain.word[2];
}

}  // namespace

bool Lends(const LimitSpec& spec) {
  if (spec.mode == Mode::kShadow) {
    return false;
  }
  switch (spec.algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra:
    case Algorithm::kFixedWindow:
    case Algorithm::kAnchoredWindow:
      return true;
    case Algorithm::kLeakyBucket:
      return spec.max_delay == 0;
    case Algorithm::kSlidingLog:
    case Algorithm::kSlidingWindow:
    case Algorithm::kSlidingWindowApprox:
      return false;
  }
  return false;
}

uint64_t LendableCapacity(const LimitSpec& spec) { return internal::ComputeCapacities(spec, 0.).base; }

DurationNs GrantTermCap(const LimitSpec& spec, const State& plain, TimeNs now) {
  if (!Lends(spec)) {
    return 0;
  }
  const TimeNs at = NowOf(spec, plain, now);
  switch (spec.algorithm) {
    case Algorithm::kFixedWindow: {
      const i128 end = (static_cast<i128>(FloorDiv(at, spec.window)) + 1) * spec.window;
      return static_cast<DurationNs>(end - at);
    }
    case Algorithm::kAnchoredWindow: {
      const std::optional<TimeNs> start = AnchoredStart(spec, plain, at);
      return start ? static_cast<DurationNs>(static_cast<i128>(*start) + spec.window - at) : 0;
    }
    default:
      return kNever;
  }
}

uint64_t Counted(const GrantRecord& record) {
  return std::max(record.granted - std::min(record.returned, record.granted), record.used);
}

uint64_t Outstanding(const LimitSpec& spec, const GrantLedger& ledger, const State& plain, TimeNs now) {
  const TimeNs at = NowOf(spec, plain, now);
  std::optional<TimeNs> since;  // grants before this instant no longer count
  if (spec.algorithm == Algorithm::kFixedWindow) {
    since = static_cast<TimeNs>(static_cast<i128>(FloorDiv(at, spec.window)) * spec.window);
  } else if (spec.algorithm == Algorithm::kAnchoredWindow) {
    since = AnchoredStart(spec, plain, at);
    if (!since) {
      return 0;
    }
  }
  uint64_t sum = 0;
  for (const GrantRecord& r : ledger.records) {
    if (!r.settled && (!since || r.at >= *since)) {
      sum = SatAdd(sum, Counted(r));
    }
  }
  return sum;
}

const GrantRecord* FindGrant(const GrantLedger& ledger, GrantId id) {
  auto it = std::lower_bound(ledger.records.begin(), ledger.records.end(), id,
                             [](const GrantRecord& r, GrantId k) { return r.id < k; });
  return it != ledger.records.end() && it->id == id ? &*it : nullptr;
}

Status AddGrant(GrantLedger& ledger, GrantId id, uint64_t granted, TimeNs at) {
  if (id == 0 || granted == 0) {
    return Status::InvalidArgument("a grant needs an id and at least one unit");
  }
  if (at < ledger.floor) {
    return Status::InvalidArgument("grant instant below the ledger's floor");
  }
  auto it = Lower(ledger.records, id);
  if (it != ledger.records.end() && it->id == id) {
    return Status::AlreadyExists("grant id already used");
  }
  ledger.records.insert(it, GrantRecord{.id = id, .granted = granted, .at = at});
  return Status::OK();
}

uint64_t SettleGrant(GrantLedger& ledger, GrantId id, std::optional<uint64_t> used) {
  auto it = Lower(ledger.records, id);
  if (it == ledger.records.end() || it->id != id || it->settled) {
    return 0;
  }
  const uint64_t u = std::min(used.value_or(it->granted), it->granted);
  it->used = std::max(it->used, u);
  it->returned = std::max(it->returned, it->granted - it->used);
  it->settled = true;
  return Counted(*it);
}

GrantLedger MergeLedgers(const GrantLedger& a, const GrantLedger& b) {
  GrantLedger out;
  out.floor = std::max(a.floor, b.floor);
  out.records.reserve(a.records.size() + b.records.size());
  size_t i = 0, j = 0;
  while (i < a.records.size() || j < b.records.size()) {
    GrantRecord next;
    if (j == b.records.size() || (i < a.records.size() && a.records[i].id < b.records[j].id)) {
      next = a.records[i++];
    } else if (i == a.records.size() || b.records[j].id < a.records[i].id) {
      next = b.records[j++];
    } else {
      next = Join(a.records[i++], b.records[j++]);
    }
    if (next.at >= out.floor) {
      out.records.push_back(next);
    }
  }
  return out;
}

bool MergeInto(GrantLedger& into, const GrantLedger& from) {
  GrantLedger merged = MergeLedgers(into, from);
  if (merged == into) {
    return false;
  }
  into = std::move(merged);
  return true;
}

void CollectGrants(GrantLedger& ledger, TimeNs horizon) {
  TimeNs floor = horizon;
  for (const GrantRecord& r : ledger.records) {
    if (!r.settled) {
      floor = std::min(floor, r.at);
    }
  }
  ledger.floor = std::max(ledger.floor, floor);
  std::erase_if(ledger.records, [&](const GrantRecord& r) { return r.at < ledger.floor; });
}

}  // namespace ringlimit::limiter
