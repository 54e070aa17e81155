// GrantPlanner (grant_planner.h): quota grants' holder and owner decisions.
#include "node/grants/grant_planner.h"

#include <algorithm>
#include <cmath>

namespace ringlimit::cluster {
namespace {

using std::chrono::nanoseconds;

constexpr double kNanosPerSecond = 1e9;

}  // namespace

Status Validate(const GrantOptions& o) {
  if (!(o.threshold > 0)) return Status::InvalidArgument("threshold must be > 0");
  if (o.term <= nanoseconds::zero()) return Status::InvalidArgument("term must be > 0");
  if (o.margin <= nanoseconds::zero() || o.margin > o.term)
    return Status::InvalidArgument("margin must be in (0, term]");
  if (!(o.reserve_pct >= 0 && o.reserve_pct <= 100))
    return Status::InvalidArgument("reserve_pct must be in [0, 100]");
  if (!(o.max_share > 0 && o.max_share <= 1)) return Status::InvalidArgument("max_share must be in (0, 1]");
  if (!(o.recall_cover >= 0)) return Status::InvalidArgument("recall_cover must be >= 0");
  if (o.min_slice < 1) return Status::InvalidArgument("min_slice must be >= 1");
  if (o.refused_backoff < nanoseconds::zero()) return Status::InvalidArgument("refused_backoff must be >= 0");
  if (o.idle_release <= nanoseconds::zero()) return Status::InvalidArgument("idle_release must be > 0");
  if (o.incarnation == 0) return Status::InvalidArgument("incarnation must be != 0");
  return Status::OK();
}

GrantPlanner::GrantPlanner(GrantOptions options) : options_(std::move(options)) {}

uint64_t GrantPlanner::Reserve(const KeyBudget& budget) const {
  const auto c = static_cast<long double>(budget.capacity);
  return std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(c * options_.reserve_pct / 100.0L)));
}

uint64_t GrantPlanner::SliceSize(uint64_t want, const KeyBudget& budget) const {
  if (!budget.lends || budget.term_cap <= nanoseconds::zero() || budget.capacity == 0) {
    return 0;
  }
  const uint64_t reserve = Reserve(budget);
  if (budget.effective >= budget.capacity || budget.capacity - budget.effective <= reserve) {
    return 0;
  }
  const uint64_t avail = budget.capacity - budget.effective - reserve;
  const auto share = static_cast<uint64_t>(static_cast<long double>(avail) * options_.max_share);
  // What is left after the slice covers twice the cover of the slices out (KeyBudget):
  // A - g >= 2 k (out + g), g <= (A - 2 k out) / (1 + 2 k).
  const long double k = options_.recall_cover;
  const long double spare = static_cast<long double>(avail) - 2 * k * static_cast<long double>(budget.out);
  const uint64_t covered = spare > 0 ? static_cast<uint64_t>(spare / (1 + 2 * k)) : 0;
  const uint64_t g = std::min({want, share, covered});
  return g < options_.min_slice ? 0 : g;
}

bool GrantPlanner::NearLimit(const KeyBudget& budget) const {
  if (!budget.lends || budget.capacity == 0) return true;
  const uint64_t reserve = Reserve(budget);
  if (budget.effective >= budget.capacity || budget.capacity - budget.effective <= reserve) return true;
  const uint64_t avail = budget.capacity - budget.effective - reserve;
  return static_cast<long double>(avail) < options_.recall_cover * static_cast<long double>(budget.out) ||
         static_cast<long double>(avail) * options_.max_share < static_cast<long double>(options_.min_slice);
}

std::vector<std::string> GrantPlanner::Watched() const {
  std::vector<std::string> keys;
  for (const auto& [grant, l] : lent_) {
    if (!l.holder.empty() && !l.recalled) keys.push_back(l.key);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

std::set<std::string, std::less<>> GrantPlanner::LentKeys() const {
  std::set<std::string, std::less<>> keys;
  for (const auto& [grant, l] : lent_) keys.insert(l.key);
  return keys;
}

uint64_t GrantPlanner::LocalUnits(MonoTime now, std::string_view key) const {
  auto it = held_.find(key);
  if (it == held_.end() || now < fenced_until_) {
    return 0;
  }
  uint64_t units = 0;
  for (const Slice& s : it->second.slices) {
    if (now < s.expires) units += s.units - s.used;
  }
  return units;
}

std::vector<GrantPlanner::LentKey> GrantPlanner::LentSummary() const {
  std::map<std::string_view, LentKey> by_key;
  for (const auto& [grant, l] : lent_) {
    LentKey& k = by_key[l.key];
    if (k.grants == 0) {
      k.key = l.key;
      k.recalled = true;
    }
    k.units += l.units;
    ++k.grants;
    k.recalled = k.recalled && l.recalled;
    if (!l.holder.empty() && std::find(k.holders.begin(), k.holders.end(), l.holder) == k.holders.end()) {
      k.holders.push_back(l.holder);
    }
  }
  std::vector<LentKey> out;
  out.reserve(by_key.size());
  for (auto& [key, k] : by_key) {
    std::sort(k.holders.begin(), k.holders.end());
    out.push_back(std::move(k));
  }
  return out;
}

std::vector<GrantPlanner::HeldKey> GrantPlanner::HeldSummary(MonoTime now) const {
  std::vector<HeldKey> out;
  if (now < fenced_until_) return out;
  for (const auto& [key, h] : held_) {
    HeldKey k;
    for (const Slice& s : h.slices) {
      if (now >= s.expires) continue;
      k.units_left += s.units - s.used;
      ++k.slices;
      k.expires_in = std::max(k.expires_in, s.expires - now);
    }
    if (k.slices == 0) continue;
    k.key = key;
    out.push_back(std::move(k));
  }
  return out;
}

// --- Holder ------------------------------------------------------------------------------------

void GrantPlanner::ReleaseSlice(std::string_view key, const Slice& s, ReleaseWhy why, GrantActions& out) {
  out.releases.push_back({std::string(key), s.grant, s.used, why});
  stats_.released_units += s.units - s.used;
  --stats_.slices_held;
}

void GrantPlanner::Expire(MonoTime now, std::string_view key, Held& h, GrantActions& out) {
  std::erase_if(h.slices, [&](const Slice& s) {
    if (options_.release_spent && s.used >= s.units) {  // nothing left to decide from: room for the next
      ReleaseSlice(key, s, ReleaseWhy::kSpent, out);
      return true;
    }
    if (now >= s.expires) {
      ReleaseSlice(key, s, ReleaseWhy::kExpired, out);
      return true;
    }
    if (now - s.last_use >= options_.idle_release) {
      ReleaseSlice(key, s, ReleaseWhy::kIdle, out);
      return true;
    }
    return false;
  });
}

void GrantPlanner::MaybeRequest(MonoTime now, std::string_view key, Held& h, double rate, GrantActions& out) {
  if (h.pending || now < h.no_request_before || h.slices.size() >= kMaxSlices) {
    return;
  }
  if (!h.slices.empty()) {  // ask for the next slice when three quarters of the newest are gone
    const Slice& s = h.slices.back();
    const bool units_low = s.used >= s.units - s.units / 4;
    const bool term_low = now >= s.expires - options_.term / 4;
    if (!units_low && !term_low) return;
  }
  const double seconds = static_cast<double>(options_.term.count()) / kNanosPerSecond;
  const auto want = std::max<uint64_t>(options_.min_slice, static_cast<uint64_t>(std::ceil(rate * seconds)));
  h.pending = Pending{next_request_++, now};
  out.requests.push_back({std::string(key), h.pending->request, want, options_.term});
  ++stats_.requests;
}

void GrantPlanner::ForgetIfEmpty(MonoTime now, std::map<std::string, Held, std::less<>>::iterator it) {
  if (it->second.slices.empty() && !it->second.pending && it->second.no_request_before <= now) {
    held_.erase(it);
  }
}

GrantActions GrantPlanner::Check(MonoTime now, std::string_view key, uint64_t cost, double rate, bool lends) {
  GrantActions out;
  auto it = held_.find(key);
  if (now < fenced_until_) {
    out.forward = true;
    return out;
  }
  if (it == held_.end() && (!lends || rate < options_.threshold)) {
    out.forward = true;  // not a hot key here: the common path, nothing kept
    return out;
  }
  if (it == held_.end()) {
    it = held_.emplace(std::string(key), Held{}).first;
  }
  Held& h = it->second;
  Expire(now, key, h, out);
  if (cost > 0) {  // a peek (cost 0) needs the owner's figures
    for (Slice& s : h.slices) {
      if (cost <= s.units - s.used) {
        s.used += cost;
        s.last_use = now;
        out.local = s.grant;
        ++stats_.local_checks;
        break;
      }
    }
  }
  if (!out.local) {
    out.forward = true;
    ++stats_.forwarded_checks;
  } else if (options_.release_spent) {
    Expire(now, key, h, out);  // releases the slice this check used up
  }
  if (lends && rate >= options_.threshold) {
    MaybeRequest(now, key, h, rate, out);
  }
  ForgetIfEmpty(now, it);
  if (!out.requests.empty() || !out.releases.empty()) Done(out);
  return out;
}

GrantActions GrantPlanner::GrantReplied(MonoTime now, std::string_view key, uint64_t request, GrantId grant,
                                        uint64_t units, nanoseconds term) {
  GrantActions out;
  auto it = held_.find(key);
  const bool ours = it != held_.end() && it->second.pending && it->second.pending->request == request;
  if (!ours) {
    // A reply nobody waits for (late, or a request forgotten at a fence): give it back unused.
    if (units > 0) out.releases.push_back({std::string(key), grant, 0, ReleaseWhy::kLate});
    stats_.released_units += units;
    Done(out);
    return out;
  }
  Held& h = it->second;
  const MonoTime expires = h.pending->sent + std::min(term, options_.term);
  h.pending.reset();
  if (units == 0) {
    h.no_request_before = now + options_.refused_backoff;
  } else if (expires <= now || now < fenced_until_ || h.slices.size() >= kMaxSlices) {
    out.releases.push_back({std::string(key), grant, 0, ReleaseWhy::kLate});
    stats_.released_units += units;
  } else {
    h.slices.push_back({grant, units, 0, expires, now});
    ++stats_.slices_held;
  }
  ForgetIfEmpty(now, it);
  Done(out);
  return out;
}

GrantActions GrantPlanner::GrantRefused(MonoTime now, std::string_view key, uint64_t request) {
  GrantActions out;
  auto it = held_.find(key);
  if (it != held_.end() && it->second.pending && it->second.pending->request == request) {
    it->second.pending.reset();
    it->second.no_request_before = now + options_.refused_backoff;
  }
  Done(out);
  return out;
}

GrantActions GrantPlanner::RecallReceived(MonoTime now, std::string_view key, GrantId grant) {
  GrantActions out;
  auto it = held_.find(key);
  if (it == held_.end()) {
    Done(out);  // released already: the owner has (or will have) that Release
    return out;
  }
  std::erase_if(it->second.slices, [&](const Slice& s) {
    if (s.grant != grant) return false;
    ReleaseSlice(key, s, ReleaseWhy::kRecalled, out);
    return true;
  });
  it->second.no_request_before = now + options_.refused_backoff;
  Done(out);
  return out;
}

void GrantPlanner::ReleaseAll(MonoTime until, ReleaseWhy why, GrantActions& out) {
  fenced_until_ = std::max(fenced_until_, until);
  for (auto it = held_.begin(); it != held_.end();) {
    for (const Slice& s : it->second.slices) {
      ReleaseSlice(it->first, s, why, out);
    }
    it = held_.erase(it);  // requests in flight are forgotten: their replies are released as late
  }
}

GrantActions GrantPlanner::Fence(MonoTime now, MonoTime until) {
  GrantActions out;
  ReleaseAll(until, ReleaseWhy::kFenced, out);
  (void)now;
  Done(out);
  return out;
}

GrantActions GrantPlanner::Retire(MonoTime now) {
  GrantActions out;
  ReleaseAll(MonoTime::max(), ReleaseWhy::kLeaving, out);
  (void)now;
  Done(out);
  return out;
}

// --- Owner -------------------------------------------------------------------------------------

void GrantPlanner::RecallIf(std::string_view key, const std::function<bool(const Lent&)>& stale,
                            GrantActions& out) {
  for (auto& [grant, l] : lent_) {
    if (l.key == key && !l.holder.empty() && !l.recalled && stale(l)) {
      out.recalls.push_back({l.holder, l.key, grant});
      l.recalled = true;
      ++stats_.recalls;
    }
  }
}

void GrantPlanner::RecallKey(std::string_view key, GrantActions& out) {
  for (auto& [grant, l] : lent_) {
    if (l.key == key && !l.holder.empty()) {
      out.recalls.push_back({l.holder, l.key, grant});
      l.recalled = true;
      ++stats_.recalls;
    }
  }
}

GrantActions GrantPlanner::GrantRequested(MonoTime now, std::string_view from, std::string_view key,
                                          uint64_t request, uint64_t want, nanoseconds term,
                                          const KeyBudget& budget) {
  GrantActions out;
  if (budget.generation != 0) {  // slices lent before a reset or a policy change: called back
    RecallIf(
        key, [&](const Lent& l) { return l.generation != 0 && l.generation != budget.generation; }, out);
  }
  const uint64_t units = SliceSize(want, budget);
  if (units == 0) {
    out.refusals.push_back({std::string(from), std::string(key), request});
    ++stats_.grants_refused;
    Done(out);
    return out;
  }
  nanoseconds t = std::min(options_.term, budget.term_cap);
  if (term > nanoseconds::zero()) t = std::min(t, term);
  const GrantId grant = static_cast<GrantId>(options_.incarnation) << 32 | next_sequence_++;
  lent_[grant] =
      Lent{std::string(key), std::string(from), units, now + t + options_.margin, false, budget.generation};
  out.lends.push_back({std::string(from), std::string(key), request, grant, units, t});
  ++stats_.grants_made;
  stats_.units_out += units;
  Done(out);
  return out;
}

GrantActions GrantPlanner::ReleaseReceived(MonoTime now, std::string_view key, GrantId grant, uint64_t used) {
  GrantActions out;
  out.settles.push_back({std::string(key), grant, used});  // the ledger settles once, whatever comes twice
  if (auto it = lent_.find(grant); it != lent_.end()) {
    stats_.units_out -= it->second.units;
    ++stats_.grants_released;
    lent_.erase(it);
  }
  Settled(now, grant);
  Done(out);
  return out;
}

GrantActions GrantPlanner::OwnerChecked(MonoTime now, std::string_view key, const KeyBudget& budget) {
  GrantActions out;
  // What is left no longer covers the slices out: they hold the key's last lendable units; call them back
  // so that what their holders do not use is decided here. Or the key was reset or its limits changed.
  const bool near = NearLimit(budget);
  RecallIf(
      key,
      [&](const Lent& l) {
        return near || (budget.generation != 0 && l.generation != 0 && l.generation != budget.generation);
      },
      out);
  (void)now;
  Done(out);
  return out;
}

GrantActions GrantPlanner::Recall(MonoTime now, std::string_view key) {
  GrantActions out;
  RecallKey(key, out);
  (void)now;
  Done(out);
  return out;
}

GrantActions GrantPlanner::Adopt(MonoTime now, std::string_view key, const std::vector<GrantId>& grants) {
  GrantActions out;
  for (GrantId g : grants) {
    if (auto it = settled_.find(g); it != settled_.end() && now < it->second) continue;
    Lent adopted{std::string(key), std::string(), 0, now + options_.term + options_.margin, false, 0};
    if (lent_.try_emplace(g, std::move(adopted)).second) ++stats_.grants_adopted;
  }
  Done(out);
  return out;
}

// --- Both --------------------------------------------------------------------------------------

GrantActions GrantPlanner::Timer(MonoTime now) {
  GrantActions out;
  for (auto it = held_.begin(); it != held_.end();) {
    Held& h = it->second;
    Expire(now, it->first, h, out);
    if (h.pending && now >= h.pending->sent + options_.term) {  // never answered: forget it
      h.pending.reset();
      h.no_request_before = now + options_.refused_backoff;
    }
    auto next = std::next(it);
    ForgetIfEmpty(now, it);
    it = next;
  }
  for (auto it = lent_.begin(); it != lent_.end();) {
    if (now >= it->second.reclaim_at) {
      out.settles.push_back({it->second.key, it->first, std::nullopt});
      stats_.units_out -= it->second.units;
      ++stats_.grants_expired;
      Settled(now, it->first);
      it = lent_.erase(it);
    } else {
      ++it;
    }
  }
  Done(out);
  return out;
}

void GrantPlanner::Settled(MonoTime now, GrantId grant) {
  // Forget what is past (in the order settled: every entry lives term + margin), so the map holds only
  // the grants settled within the last term + margin.
  while (!settled_order_.empty() && now >= settled_order_.front().first) {
    if (auto it = settled_.find(settled_order_.front().second);
        it != settled_.end() && it->second == settled_order_.front().first) {
      settled_.erase(it);
    }
    settled_order_.pop_front();
  }
  const MonoTime until = now + options_.term + options_.margin;
  settled_[grant] = until;
  settled_order_.emplace_back(until, grant);
}

void GrantPlanner::Done(GrantActions& out) {
  std::optional<MonoTime> wake;
  auto at = [&](MonoTime t) { wake = wake ? std::min(*wake, t) : t; };
  for (const auto& [key, h] : held_) {
    for (const Slice& s : h.slices) {
      at(std::min(s.expires, s.last_use + options_.idle_release));
    }
    if (h.pending) at(h.pending->sent + options_.term);
  }
  for (const auto& [grant, l] : lent_) {
    at(l.reclaim_at);
  }
  out.wake_at = wake;
}

}  // namespace ringlimit::cluster
