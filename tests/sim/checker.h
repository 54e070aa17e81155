// Checker: records every client check of a simulated run -- where it entered, every time a node decided
// (charged) it, and the answer the client got -- and judges the run's invariants:
//  - admission: per key, the checks answered "allowed" are at most limit (+ a bound where the product
//    promises only a bound; the keys' windows are long enough that nothing refills during a run);
//  - rollback: in the order the answered decisions were made, a key's `remaining` never rises;
//  - liveness: every check is answered by the end.
//
// Thread safety: none needed (one simulation thread).
#ifndef RINGLIMIT_TESTS_SIM_CHECKER_H_
#define RINGLIMIT_TESTS_SIM_CHECKER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "limiter/limiter.h"
#include "tests/sim/world.h"

namespace ringlimit::sim {

struct SimKey {
  std::string key;
  limiter::LimitSpec spec;
};

enum class Outcome : uint8_t {
  kPending = 0,
  kAllowed = 1,
  kDenied = 2,
  kRefused = 3,      // the entry node held no ring yet (HTTP 503)
  kUnavailable = 4,  // the entry node was down (connection refused)
  kLost = 5,         // the entry node crashed or exited before answering (connection lost)
};

// One time a node charged a check.
struct DecisionRecord {
  uint64_t id = 0;  // unique, in the order decisions were made
  uint64_t check = 0;
  size_t key = 0;
  int node = -1;
  MonoTime at{};
  bool allowed = false;
  uint64_t remaining = 0;
};

struct CheckRecord {
  uint64_t id = 0;
  size_t key = 0;
  int entry = -1;
  MonoTime sent{};
  MonoTime answered{};
  Outcome outcome = Outcome::kPending;
  uint64_t decision = 0;  // the DecisionRecord the answer came from (0: none)
};

// Per key: what the run did.
struct KeyVerdict {
  uint64_t limit = 0;
  uint64_t admitted = 0;   // answered "allowed"
  uint64_t bound = 0;      // extra admissions the class tolerates (0: exact)
  uint64_t rollbacks = 0;  // answered decisions whose remaining rose above the previous one's
};

struct Verdict {
  std::vector<KeyVerdict> keys;
  uint64_t checks = 0;
  uint64_t unanswered = 0;
  uint64_t over_admitted = 0;  // sum over keys of max(0, admitted - limit)
  uint64_t max_over = 0;       // largest admitted - limit of one key
  uint64_t beyond_bound = 0;   // sum over keys of max(0, admitted - limit - bound)
  uint64_t rollbacks = 0;
  std::optional<size_t> first_bad_key;  // the first key over its bound or rolled back
};

class Checker {
 public:
  explicit Checker(std::vector<SimKey> keys) : keys_(std::move(keys)) {}

  [[nodiscard]] const std::vector<SimKey>& keys() const { return keys_; }

  // A client sends a check of key `key` to node `entry`. Returns its id (>= 1).
  uint64_t Sent(size_t key, int entry, MonoTime at);
  // Node `node` charged check `check`. Returns the decision id (>= 1).
  uint64_t Decided(uint64_t check, int node, MonoTime at, const limiter::Decision& decision);
  // The client got its answer (`decision`: the DecisionRecord it came from, 0 if none). Later answers of
  // the same check are ignored (the first one reached the client).
  void Answered(uint64_t check, MonoTime at, Outcome outcome, uint64_t decision);

  [[nodiscard]] const CheckRecord& check(uint64_t id) const { return checks_[id - 1]; }
  [[nodiscard]] const DecisionRecord& decision(uint64_t id) const { return decisions_[id - 1]; }
  [[nodiscard]] const std::vector<CheckRecord>& checks() const { return checks_; }
  [[nodiscard]] const std::vector<DecisionRecord>& decisions() const { return decisions_; }

  // Judges the run; `bounds[k]` is the tolerated over-admission of key k (empty: exact everywhere).
  [[nodiscard]] Verdict Judge(const std::vector<uint64_t>& bounds) const;

 private:
  std::vector<SimKey> keys_;
  std::vector<CheckRecord> checks_;
  std::vector<DecisionRecord> decisions_;
};

[[nodiscard]] const char* OutcomeName(Outcome outcome);

}  // namespace ringlimit::sim

#endif  // RINGLIMIT_TESTS_SIM_CHECKER_H_
