#include "tests/sim/checker.h"

#include <algorithm>

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

Verdict Checker::Judge(const std::vector<uint64_t>& bounds) const {
  Verdict v;
  v.keys.resize(keys_.size());
  for (size_t k = 0; k < keys_.size(); ++k) {
    v.keys[k].limit = keys_[k].spec.limit;
    v.keys[k].bound = k < bounds.size() ? bounds[k] : 0;
  }
  std::vector<uint64_t> answered_decisions;
  for (const CheckRecord& c : checks_) {
    ++v.checks;
    if (c.outcome == Outcome::kPending) ++v.unanswered;
    if (c.outcome == Outcome::kAllowed) ++v.keys[c.key].admitted;
    if ((c.outcome == Outcome::kAllowed || c.outcome == Outcome::kDenied) && c.decision != 0)
      answered_decisions.push_back(c.decision);
  }
  // Rollbacks: the answered decisions of each key in the order they were made.
  std::sort(answered_decisions.begin(), answered_decisions.end());
  std::vector<std::optional<uint64_t>> last(keys_.size());
  for (uint64_t id : answered_decisions) {
    const DecisionRecord& d = decisions_[id - 1];
    if (last[d.key].has_value() && d.remaining > *last[d.key]) ++v.keys[d.key].rollbacks;
    last[d.key] = d.remaining;
  }
  for (size_t k = 0; k < v.keys.size(); ++k) {
    const KeyVerdict& kv = v.keys[k];
    const uint64_t over = kv.admitted > kv.limit ? kv.admitted - kv.limit : 0;
    const uint64_t beyond = over > kv.bound ? over - kv.bound : 0;
    v.over_admitted += over;
    v.max_over = std::max(v.max_over, over);
    v.beyond_bound += beyond;
    v.rollbacks += kv.rollbacks;
    if (!v.first_bad_key.has_value() && (beyond > 0 || kv.rollbacks > 0)) v.first_bad_key = k;
  }
  return v;
}

}  // namespace ringlimit::sim
