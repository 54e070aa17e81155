#include "tests/sim/checker.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

namespace ringlimit::sim {

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kPending:
      return "pending";
    case Outcome::kAllowed:
      return "allowed";
    case Outcome::kDenied:
      return "denied";
    case Outcome::kRefused:
      return "refused";
    case Outcome::kUnavailable:
      return "unavailable";
    case Outcome::kLost:
      return "lost";
  }
  return "?";
}

const char* ExcuseName(Excuse excuse) {
  static constexpr const char* kNames[kExcuses] = {"none", "entry down", "entry not joined",
                                                   "entry in a minority", "holders' majority unreachable"};
  const auto i = static_cast<size_t>(excuse);
  return i < kExcuses ? kNames[i] : "?";
}

const char* PhaseName(Phase phase) {
  static constexpr const char* kNames[kPhases] = {"before faults", "during faults", "after the heal"};
  const auto i = static_cast<size_t>(phase);
  return i < kPhases ? kNames[i] : "?";
}

uint64_t Checker::Sent(size_t key, int entry, MonoTime at) {
  CheckRecord r;
  r.id = checks_.size() + 1;
  r.key = key;
  r.entry = entry;
  r.sent = at;
  checks_.push_back(r);
  return r.id;
}

uint64_t Checker::Decided(uint64_t check, int node, MonoTime at, const limiter::Decision& decision) {
  DecisionRecord d;
  d.id = decisions_.size() + 1;
  d.check = check;
  d.key = checks_[check - 1].key;
  d.node = node;
  d.at = at;
  d.allowed = decision.allowed;
  d.remaining = decision.remaining;
  d.epoch = static_cast<uint32_t>(resets_[d.key].size());
  decisions_.push_back(d);
  return d.id;
}

uint64_t Checker::DecidedFromSlice(uint64_t check, int node, MonoTime at) {
  limiter::Decision d;
  d.allowed = true;
  const uint64_t id = Decided(check, node, at, d);
  decisions_.back().slice = true;
  return id;
}

void Checker::Lent(size_t key, uint64_t id, int owner, int holder, MonoTime at, uint64_t units) {
  GrantEvent g;
  g.id = id;
  g.key = key;
  g.owner = owner;
  g.holder = holder;
  g.lent = at;
  g.units = units;
  grants_.push_back(g);
}

void Checker::Settled(uint64_t id, int node, MonoTime at, std::optional<uint64_t> used) {
  for (auto it = grants_.rbegin(); it != grants_.rend(); ++it) {
    if (it->id != id) continue;
    if (!it->settled.has_value()) {
      it->settled = at;
      it->settled_by = node;
      it->reclaimed = !used.has_value();
    }
    if (used.has_value()) it->reported_used = std::max(it->reported_used.value_or(0), *used);
    return;
  }
}

void Checker::Recalled(uint64_t id, MonoTime at) {
  for (auto it = grants_.rbegin(); it != grants_.rend(); ++it) {
    if (it->id != id) continue;
    if (!it->recalled.has_value()) it->recalled = at;
    return;
  }
}

std::optional<MonoTime> Checker::SliceUseBeyondLent(int node, size_t key, MonoTime after) const {
  std::vector<std::pair<MonoTime, int64_t>> events;  // (instant, +units lent / -1 admitted)
  for (const GrantEvent& g : grants_) {
    if (g.holder == node && g.key == key && g.lent > after)
      events.emplace_back(g.lent, static_cast<int64_t>(g.units));
  }
  for (const DecisionRecord& d : decisions_) {
    if (d.slice && d.node == node && d.key == key && d.at > after) events.emplace_back(d.at, -1);
  }
  // At one instant, a lend before the admissions (the reply cannot precede it, but it does no harm).
  std::stable_sort(events.begin(), events.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  });
  int64_t left = 0;
  for (const auto& [at, units] : events) {
    left += units;
    if (left < 0) return at;
  }
  return std::nullopt;
}

std::optional<size_t> Checker::KeyIndex(std::string_view key) const {
  for (size_t k = 0; k < keys_.size(); ++k) {
    if (keys_[k].key == key) return k;
  }
  return std::nullopt;
}

void Checker::Answered(uint64_t check, MonoTime at, Outcome outcome, uint64_t decision) {
  CheckRecord& r = checks_[check - 1];
  if (r.outcome != Outcome::kPending) return;
  r.outcome = outcome;
  r.answered = at;
  r.decision = decision;
}

void Checker::Reset(size_t key, MonoTime at) { resets_[key].push_back(at); }

void Checker::SetFaults(MonoTime first, std::optional<MonoTime> healed) {
  first_fault_ = first;
  healed_ = healed;
}

Phase Checker::PhaseOf(const CheckRecord& c) const {
  if (!first_fault_.has_value() || (c.outcome != Outcome::kPending && c.answered < *first_fault_)) {
    return Phase::kBefore;
  }
  if (healed_.has_value() && c.sent >= *healed_) return Phase::kAfter;
  return Phase::kDuring;
}

namespace {

bool Answers(Outcome outcome) { return outcome == Outcome::kAllowed || outcome == Outcome::kDenied; }

std::string Percent(uint64_t part, uint64_t whole) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%llu/%llu (%.1f %%)", static_cast<unsigned long long>(part),
                static_cast<unsigned long long>(whole), whole == 0 ? 100.0 : 100.0 * part / whole);
  return buf;
}

// One key's checks and charges between two resets.
struct Epoch {
  uint64_t admitted = 0;
  uint64_t answered = 0;
  uint64_t wasted = 0;
  std::optional<MonoTime> last_denial;  // the latest decision instant of an answered denial,
  int denied_by = -1;                   // and its decider
  uint64_t grant_slack = 0;
};

// Sets each epoch's grant_slack (checker.h, the floor): the units of the grants lent before its last
// answered denial that their holders never used. A grant's holder that reported it (a Release) used what
// it said; the unreported grants of one holder shared what it admitted from slices beyond its reported
// grants, of which those lent after the denial took at most their units.
void GrantSlack(const std::vector<GrantEvent>& grants, const std::vector<DecisionRecord>& decisions,
                const std::vector<std::vector<MonoTime>>& resets, std::vector<std::vector<Epoch>>& epochs) {
  struct Holder {
    uint64_t from_slices = 0;  // admitted from slices
    uint64_t reported = 0;     // the reported grants' used units
    uint64_t before = 0;       // units of unreported grants lent up to the last denial
    uint64_t after = 0;        // and after it
  };
  // By (key, epoch, holder slot).
  std::map<std::tuple<size_t, size_t, int>, Holder> holders;
  for (const DecisionRecord& d : decisions) {
    if (d.slice) ++holders[{d.key, d.epoch, d.node}].from_slices;
  }
  for (const GrantEvent& g : grants) {
    const std::vector<MonoTime>& r = resets[g.key];
    const auto epoch = static_cast<size_t>(std::upper_bound(r.begin(), r.end(), g.lent) - r.begin());
    Epoch& e = epochs[g.key][epoch];
    if (!e.last_denial.has_value()) continue;
    const bool before = g.lent <= *e.last_denial;
    // Released at the denying node before the denial: its copy counted only the used units.
    const bool returned =
        g.settled.has_value() && !g.reclaimed && g.settled_by == e.denied_by && *g.settled <= *e.last_denial;
    Holder& h = holders[{g.key, epoch, g.holder}];
    if (g.reported_used.has_value()) {
      h.reported += *g.reported_used;
      if (before && !returned) e.grant_slack += g.units - std::min(g.units, *g.reported_used);
    } else {
      (before ? h.before : h.after) += g.units;
    }
  }
  for (const auto& [where, h] : holders) {
    const auto& [key, epoch, slot] = where;
    const uint64_t unattributed = h.from_slices > h.reported ? h.from_slices - h.reported : 0;
    const uint64_t used_before = unattributed > h.after ? unattributed - h.after : 0;
    epochs[key][epoch].grant_slack += h.before - std::min(h.before, used_before);
  }
}

}  // namespace

Verdict Checker::Judge(const JudgeOptions& options) const {
  Verdict v;
  v.keys.resize(keys_.size());
  std::vector<std::vector<Epoch>> epochs(keys_.size());
  int entries = 0;
  for (size_t k = 0; k < keys_.size(); ++k) {
    v.keys[k].limit = keys_[k].spec.limit;
    v.keys[k].bound = k < options.bounds.size() ? options.bounds[k] : 0;
    epochs[k].resize(resets_[k].size() + 1);
  }
  for (const CheckRecord& c : checks_) entries = std::max(entries, c.entry + 1);
  v.share_by_entry.resize(static_cast<size_t>(entries));

  std::vector<bool> seen_allowed(decisions_.size() + 1, false);  // by decision id
  std::vector<uint64_t> answered_decisions;
  for (const CheckRecord& c : checks_) {
    ++v.checks;
    KeyVerdict& kv = v.keys[c.key];
    if (c.outcome == Outcome::kPending) ++v.unanswered;
    if (Answers(c.outcome)) {
      size_t epoch = 0;
      if (c.decision != 0) {
        epoch = decisions_[c.decision - 1].epoch;
        answered_decisions.push_back(c.decision);
      } else {
        const std::vector<MonoTime>& r = resets_[c.key];
        epoch = static_cast<size_t>(std::upper_bound(r.begin(), r.end(), c.answered) - r.begin());
      }
      ++kv.answered;
      ++epochs[c.key][epoch].answered;
      if (c.outcome == Outcome::kDenied && c.decision != 0) {
        Epoch& e = epochs[c.key][epoch];
        const DecisionRecord& d = decisions_[c.decision - 1];
        if (!e.last_denial.has_value() || d.at >= *e.last_denial) {
          e.last_denial = d.at;
          e.denied_by = d.node;
        }
      }
      if (c.answered - c.sent > v.longest_wait) {
        v.longest_wait = c.answered - c.sent;
        v.longest_wait_check = c.id;
      }
      if (c.outcome == Outcome::kAllowed) {
        ++kv.admitted;
        ++epochs[c.key][epoch].admitted;
        if (c.decision != 0) seen_allowed[c.decision] = true;
        if (c.decision != 0 && decisions_[c.decision - 1].slice) ++kv.from_slices;
      }
    }
    // The answered share.
    Excuse excuse = c.excuse;
    if (excuse == Excuse::kNone && (c.outcome == Outcome::kUnavailable || c.outcome == Outcome::kLost)) {
      excuse = Excuse::kEntryDown;
    }
    if (excuse != Excuse::kNone) {
      ++v.excused[static_cast<size_t>(excuse)];
      continue;
    }
    const size_t phase = static_cast<size_t>(PhaseOf(c));
    for (ShareCount* cell : {&v.share[phase], &v.share_by_entry[static_cast<size_t>(c.entry)][phase]}) {
      ++cell->counted;
      if (Answers(c.outcome)) ++cell->answered;
    }
  }

  // Admitting charges the clients did not see as admissions; charges before the faults.
  for (const DecisionRecord& d : decisions_) {
    if (first_fault_.has_value() && d.allowed && d.at < *first_fault_) ++v.keys[d.key].charged_before_faults;
    if (!d.allowed || seen_allowed[d.id]) continue;
    ++v.keys[d.key].wasted;
    ++epochs[d.key][d.epoch].wasted;
    const CheckRecord& c = checks_[d.check - 1];
    if (Answers(c.outcome) && PhaseOf(c) == Phase::kBefore) ++v.healthy_waste;
  }

  // Rollbacks: the answered decisions of each key in the order they were made, within an epoch.
  std::sort(answered_decisions.begin(), answered_decisions.end());
  struct Last {
    uint32_t epoch = 0;
    std::optional<uint64_t> remaining;
  };
  std::vector<Last> last(keys_.size());
  for (uint64_t id : answered_decisions) {
    const DecisionRecord& d = decisions_[id - 1];
    if (d.slice) continue;  // a holder's slice says nothing of the key's remaining
    Last& l = last[d.key];
    if (l.epoch != d.epoch) l = Last{d.epoch, std::nullopt};
    if (l.remaining.has_value() && d.remaining > *l.remaining) ++v.keys[d.key].rollbacks;
    l.remaining = d.remaining;
  }

  GrantSlack(grants_, decisions_, resets_, epochs);
  for (const GrantEvent& g : grants_) {
    ++v.grants_made;
    v.grants_settled += g.settled.has_value() ? 1 : 0;
    v.grants_reclaimed += g.settled.has_value() && g.reclaimed ? 1 : 0;
    v.grants_recalled += g.recalled.has_value() ? 1 : 0;
    if (g.key < v.keys.size()) v.keys[g.key].grants_recalled += g.recalled.has_value() ? 1 : 0;
  }

  uint64_t beyond_bound = 0;
  for (size_t k = 0; k < v.keys.size(); ++k) {
    KeyVerdict& kv = v.keys[k];
    uint64_t beyond = 0;
    for (const Epoch& e : epochs[k]) {
      const uint64_t over = e.admitted > kv.limit ? e.admitted - kv.limit : 0;
      kv.over += over;
      beyond += over > kv.bound ? over - kv.bound : 0;
      const uint64_t ideal = std::min(kv.limit, e.answered);
      const uint64_t excused = e.wasted + e.grant_slack;
      const uint64_t floor = ideal > excused ? ideal - excused : 0;
      kv.grant_slack += e.grant_slack;
      kv.floor += floor;
      kv.short_of_floor += floor > e.admitted ? floor - e.admitted : 0;
    }
    v.over_admitted += kv.over;
    v.max_over = std::max(v.max_over, kv.over);
    beyond_bound += beyond;
    v.rollbacks += kv.rollbacks;
    v.short_of_floor += kv.short_of_floor;
    v.from_slices += kv.from_slices;
    v.grant_slack += kv.grant_slack;
    v.live_keys_at_faults += kv.charged_before_faults < kv.limit ? 1 : 0;
    const bool bad = (options.admission && beyond > 0) || (options.rollbacks && kv.rollbacks > 0) ||
                     (options.floor && kv.short_of_floor > 0);
    if (!v.first_bad_key.has_value() && bad) v.first_bad_key = k;
    const std::string name = "key " + std::to_string(k) + " (limit " + std::to_string(kv.limit) + ")";
    if (options.admission && beyond > 0) {
      v.failures.push_back(name + ": admitted " + std::to_string(kv.admitted) + ", " +
                           std::to_string(beyond) + " beyond limit + bound " + std::to_string(kv.bound));
    }
    if (options.rollbacks && kv.rollbacks > 0) {
      v.failures.push_back(name + ": " + std::to_string(kv.rollbacks) + " rollbacks of remaining");
    }
    if (options.floor && kv.short_of_floor > 0) {
      v.failures.push_back(name + ": admitted " + std::to_string(kv.admitted) + ", short of its floor " +
                           std::to_string(kv.floor) + " (answered " + std::to_string(kv.answered) +
                           ", wasted charges " + std::to_string(kv.wasted) + ", slices' unused units " +
                           std::to_string(kv.grant_slack) + "): denied with budget left");
    }
  }
  v.beyond_bound = beyond_bound;
  if (options.floor && v.healthy_waste > 0) {
    v.failures.push_back(std::to_string(v.healthy_waste) +
                         " admitting charges not seen by their clients while the cluster was healthy");
  }
  if (options.liveness && v.unanswered > 0) {
    v.failures.push_back(std::to_string(v.unanswered) + " checks never answered");
  }
  for (size_t e = 0; e < v.share_by_entry.size(); ++e) {
    for (size_t p = 0; p < kPhases; ++p) {
      const ShareCount& cell = v.share_by_entry[e][p];
      if (cell.counted == 0) continue;
      v.min_share_bp[p] =
          std::min(v.min_share_bp[p], static_cast<uint32_t>(cell.answered * 10000 / cell.counted));
      if (cell.answered * 10000 < cell.counted * options.answered_bp[p]) {
        v.failures.push_back("answered share " + std::string(PhaseName(static_cast<Phase>(p))) + " at n" +
                             std::to_string(e + 1) + ": " + Percent(cell.answered, cell.counted) + " < " +
                             std::to_string(options.answered_bp[p] / 100.0).substr(0, 5) + " %");
      }
    }
  }
  return v;
}

}  // namespace ringlimit::sim
