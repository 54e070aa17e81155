#include "tests/sim/checker.h"

#include <algorithm>
#include <cstdio>

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
};

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
      if (c.answered - c.sent > v.longest_wait) {
        v.longest_wait = c.answered - c.sent;
        v.longest_wait_check = c.id;
      }
      if (c.outcome == Outcome::kAllowed) {
        ++kv.admitted;
        ++epochs[c.key][epoch].admitted;
        if (c.decision != 0) seen_allowed[c.decision] = true;
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
    Last& l = last[d.key];
    if (l.epoch != d.epoch) l = Last{d.epoch, std::nullopt};
    if (l.remaining.has_value() && d.remaining > *l.remaining) ++v.keys[d.key].rollbacks;
    l.remaining = d.remaining;
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
      const uint64_t floor = ideal > e.wasted ? ideal - e.wasted : 0;
      kv.floor += floor;
      kv.short_of_floor += floor > e.admitted ? floor - e.admitted : 0;
    }
    v.over_admitted += kv.over;
    v.max_over = std::max(v.max_over, kv.over);
    beyond_bound += beyond;
    v.rollbacks += kv.rollbacks;
    v.short_of_floor += kv.short_of_floor;
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
                           ", wasted charges " + std::to_string(kv.wasted) + "): denied with budget left");
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
