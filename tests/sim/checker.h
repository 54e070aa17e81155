// Checker: records every client check of a simulated run -- where it entered, every time a node decided
// (charged) it, and the answer the client got -- and judges the run. A run passes only when every rule
// its class asserts holds (JudgeOptions says which); none can pass vacuously, since refusing or denying
// checks fails the last two:
//  - admission: per key and reset epoch, the checks answered "allowed" are at most limit (+ a bound where
//    the product promises only a bound; the keys' windows are long enough that nothing refills during a
//    run);
//  - rollback: in the order the answered decisions were made, a key's `remaining` never rises within an
//    epoch;
//  - liveness: every check is answered by the end;
//  - floor (no unjustified denial): per key and epoch,
//      admitted >= min(limit, answered) - wasted
//    where `answered` counts the epoch's checks answered allowed or denied and `wasted` counts the epoch's
//    admitting charges whose check did not reach its client as "allowed" (a retry charged again after
//    its first answer was lost, an admission answered 503 because a majority of its holders did not
//    acknowledge it, a check lost with its entry node). Why it is sound: every copy of a key only ever holds
//    charges that were made, so a node denies only once at least `limit` admitting charges of the epoch
//    exist, i.e. admitted + wasted >= limit; and with no denial, admitted = answered. It needs no knowledge
//    of which nodes were reachable, and slack 0. A cluster denying everything fails it; one refusing
//    everything fails the answered share. In particular, a key whose checks were all sent and answered
//    while the cluster was healthy admits exactly min(limit, those checks): wasted is then 0 but for
//    admissions answered 503 (the acknowledgement rule of the closed mode: the charge stays). So the
//    `healthy waste` -- admitting charges, beyond the one the client saw, of checks answered allowed or
//    denied before the first fault -- must be 0: a check is charged once while the cluster is healthy.
//    With quota grants (docs/limiter.md "Quota grants"), a denial may also be justified by slices out:
//    a decider denies only once the admitting charges plus the units its copy counts for grants reach the
//    limit, and a grant counts whole until settled (wholly when reclaimed), so every unit of it its holder
//    never used may stand in for an admission. The floor then also subtracts `grant_slack`: the never-used
//    units of the grants lent before the epoch's last answered denial (Lent, Settled, DecidedFromSlice;
//    a grant its holder never reported is charged its holder's admissions from slices not attributed to a
//    reported grant). Without an answered denial no slack is needed (admitted = answered).
//    A reset (Reset) starts a new epoch: the charges decided after it count from zero. Charges of a
//    decider that had not seen the reset yet count in the new epoch (as merge.h's ResetMerged counts
//    them); the bound and the floor then hold per epoch.
//  - answered share: per phase (before the first fault; from it to the heal; after the heal) and per
//    entry node, the checks answered allowed or denied -- not refused (503), not lost, not left pending
//    -- among the checks that count, at least JudgeOptions::answered_bp basis points (99 %: with fewer
//    than 100 checks in a cell that is every one). A check sent before the faults but answered after they
//    began counts in the fault phase. Checks entering a node whose clock is off count like any other: it
//    decides nothing but passes them on (issue 35 item 4). Excluded (an Excuse, counted per reason): checks
//    entering a node that is down, exited or draining (unavailable) or that crashed holding them (lost); a
//    node not joined yet (503 not_ready: its readiness probe keeps a load balancer's clients away; that every
//    node ends up routing is asserted by the run); under --failure-mode closed, a node cut
//    off from a majority of the running nodes (503 unavailable by design) and a check whose key's
//    holders (its preference list on the entry node's ring) are in majority out of the entry node's
//    reach (down, paused or cut either way). The run sets these when the check is sent (SetExcuse),
//    from what the simulator knows at that instant.
//
// Thread safety: none needed (one simulation thread).
#ifndef RINGLIMIT_TESTS_SIM_CHECKER_H_
#define RINGLIMIT_TESTS_SIM_CHECKER_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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
  kRefused = 3,      // 503: the entry node held no ring yet, refused to decide, or an admission not acked
  kUnavailable = 4,  // the entry node was down (connection refused)
  kLost = 5,         // the entry node crashed or exited before answering (connection lost)
};

// Why a check does not count towards the answered share (see the header comment).
enum class Excuse : uint8_t {
  kNone = 0,
  kEntryDown = 1,           // unavailable or lost: the entry node was down, exited, draining or crashed
  kEntryNotReady = 2,       // the entry node had not joined (503 not_ready)
  kEntryMinority = 3,       // closed: the entry node was cut off from a majority (503 unavailable)
  kHoldersUnreachable = 4,  // closed: a majority of the key's holders was out of the entry node's reach
};
inline constexpr size_t kExcuses = 5;

// When a check was sent, relative to the run's faults.
enum class Phase : uint8_t { kBefore = 0, kDuring = 1, kAfter = 2 };
inline constexpr size_t kPhases = 3;

// One time a node charged a check.
struct DecisionRecord {
  uint64_t id = 0;  // unique, in the order decisions were made
  uint64_t check = 0;
  size_t key = 0;
  int node = -1;
  MonoTime at{};
  bool allowed = false;
  uint64_t remaining = 0;
  uint32_t epoch = 0;  // resets of the key before this decision
  bool slice = false;  // admitted by a holder from a quota grant's slice (DecidedFromSlice)
};

// One quota grant of a run (docs/limiter.md "Quota grants"), as its owner recorded it in the key's row.
struct GrantEvent {
  uint64_t id = 0;  // the grant id
  size_t key = 0;
  int owner = -1;   // the slot that lent it
  int holder = -1;  // the slot it was lent to (-1: unknown)
  MonoTime lent{};
  uint64_t units = 0;
  std::optional<MonoTime> settled;        // its first settle at an owner
  int settled_by = -1;                    // the slot that settled it first
  bool reclaimed = false;                 // that first settle was a reclaim (counted wholly used)
  std::optional<MonoTime> recalled;       // its owner's first recall of it (sent)
  std::optional<uint64_t> reported_used;  // what its holder's Release said it used (the largest seen)
};

struct CheckRecord {
  uint64_t id = 0;
  size_t key = 0;
  int entry = -1;
  MonoTime sent{};
  MonoTime answered{};
  Outcome outcome = Outcome::kPending;
  uint64_t decision = 0;  // the DecisionRecord the answer came from (0: none)
  Excuse excuse = Excuse::kNone;
};

// What the run asserts (the rest is measured and reported).
struct JudgeOptions {
  // Per key: the tolerated over-admission (empty: exact everywhere). Used when `admission`.
  std::vector<uint64_t> bounds;
  bool admission = true;  // admitted <= limit + bound per key and epoch
  bool rollbacks = true;  // no rollback of `remaining`
  bool floor = true;      // no unjustified denial, and no wasted charge while healthy
  bool liveness = true;   // every check answered by the end
  // The least answered share of every (phase, entry node) cell, in basis points (10000: every check).
  std::array<uint32_t, kPhases> answered_bp{9900, 9900, 9900};
};

// Per key: what the run did.
struct KeyVerdict {
  uint64_t limit = 0;
  uint64_t admitted = 0;               // answered "allowed", all epochs
  uint64_t bound = 0;                  // extra admissions the class tolerates per epoch (0: exact)
  uint64_t rollbacks = 0;              // answered decisions whose remaining rose above the previous one's
  uint64_t over = 0;                   // sum over epochs of max(0, admitted - limit)
  uint64_t answered = 0;               // answered allowed or denied, all epochs
  uint64_t wasted = 0;                 // admitting charges not seen "allowed" by their client
  uint64_t floor = 0;                  // sum over epochs of max(0, min(limit, answered) - wasted)
  uint64_t short_of_floor = 0;         // sum over epochs of max(0, floor - admitted)
  uint64_t charged_before_faults = 0;  // admitting charges before the first fault (live budget measure)
  uint64_t from_slices = 0;            // of `admitted`, decided by a holder from a quota grant's slice
  uint64_t grant_slack = 0;            // sum over epochs of the floor's allowance for slices (see above)
  uint64_t grants_recalled = 0;        // grants of the key an owner recalled
};

// Checks in one cell of the answered share.
struct ShareCount {
  uint64_t counted = 0;   // not excused
  uint64_t answered = 0;  // of those, answered allowed or denied
};

struct Verdict {
  std::vector<KeyVerdict> keys;
  uint64_t checks = 0;
  uint64_t unanswered = 0;
  uint64_t over_admitted = 0;  // sum over keys of their `over`
  uint64_t max_over = 0;       // largest `over` of one key
  uint64_t beyond_bound = 0;   // sum over keys and epochs of max(0, admitted - limit - bound)
  uint64_t rollbacks = 0;
  uint64_t short_of_floor = 0;  // sum over keys of short_of_floor
  uint64_t healthy_waste = 0;   // more charges than answers of checks decided before the first fault
  // Quota grants: made (recorded in a row), settled (released or reclaimed), checks admitted from slices,
  // and the floor's allowance for slices (KeyVerdict::grant_slack), summed over keys.
  uint64_t grants_made = 0;
  uint64_t grants_settled = 0;
  uint64_t grants_reclaimed = 0;
  uint64_t grants_recalled = 0;  // recalled by an owner (GrantEvent::recalled)
  uint64_t from_slices = 0;
  uint64_t grant_slack = 0;
  // Keys with budget left when the first fault came (charged_before_faults < limit); all keys when
  // the run had no fault.
  uint64_t live_keys_at_faults = 0;
  std::array<ShareCount, kPhases> share{};                      // every entry node
  std::vector<std::array<ShareCount, kPhases>> share_by_entry;  // per entry node
  std::array<uint64_t, kExcuses> excused{};                     // checks excused, per reason
  // The lowest share of a (phase, entry) cell, in basis points (10000 when none counted).
  std::array<uint32_t, kPhases> min_share_bp{10000, 10000, 10000};
  std::optional<size_t> first_bad_key;  // the first key over its bound, rolled back or short of its floor
  // The longest a check waited for an answer that counts (allowed or denied; measured, not asserted),
  // and which check that was (0: none answered).
  MonoTime longest_wait{};
  uint64_t longest_wait_check = 0;
  // Every rule the options assert that the run broke, one line each (empty: the run holds).
  std::vector<std::string> failures;

  [[nodiscard]] bool ok() const { return failures.empty(); }
  // No over-admission and no rollback at all (what the report-only classes are measured against).
  [[nodiscard]] bool exact() const { return over_admitted == 0 && rollbacks == 0; }
};

class Checker {
 public:
  explicit Checker(std::vector<SimKey> keys) : keys_(std::move(keys)), resets_(keys_.size()) {}

  [[nodiscard]] const std::vector<SimKey>& keys() const { return keys_; }

  // A client sends a check of key `key` to node `entry`. Returns its id (>= 1).
  uint64_t Sent(size_t key, int entry, MonoTime at);
  // Why check `check` does not count towards the answered share (set when it is sent).
  void SetExcuse(uint64_t check, Excuse excuse) { checks_[check - 1].excuse = excuse; }
  // Node `node` charged check `check`. Returns the decision id (>= 1).
  uint64_t Decided(uint64_t check, int node, MonoTime at, const limiter::Decision& decision);
  // Node `node` admitted check `check` from a slice it holds (a quota grant). Returns the decision id.
  uint64_t DecidedFromSlice(uint64_t check, int node, MonoTime at);
  // Node `owner` recorded grant `id` of `units` of key `key` for `holder` in the key's row.
  void Lent(size_t key, uint64_t id, int owner, int holder, MonoTime at, uint64_t units);
  // Node `node`, owning key `key`, was asked for a slice of it (GrantRows::Lend), and lent or refused.
  void Asked(size_t key, int node, MonoTime at, bool lent) { asks_.push_back({key, node, at, lent}); }
  struct Ask {
    size_t key = 0;
    int node = -1;
    MonoTime at{};
    bool lent = false;
  };
  [[nodiscard]] const std::vector<Ask>& asks() const { return asks_; }
  // Node `node` settled grant `id` in its copy of the row: `used` from its holder's Release, nullopt
  // reclaimed.
  void Settled(uint64_t id, int node, MonoTime at, std::optional<uint64_t> used);
  // An owner sent a recall of grant `id` to its holder.
  void Recalled(uint64_t id, MonoTime at);
  // The first instant after `after` at which node `node` had admitted more checks of `key` from slices
  // (since `after`) than the units of the grants lent to it since `after`: a holder deciding from a slice
  // it held before `after` (a pause). nullopt: never.
  [[nodiscard]] std::optional<MonoTime> SliceUseBeyondLent(int node, size_t key, MonoTime after) const;
  // The index of the key named `key`, or nullopt.
  [[nodiscard]] std::optional<size_t> KeyIndex(std::string_view key) const;
  [[nodiscard]] const std::vector<GrantEvent>& grants() const { return grants_; }
  // The client got its answer (`decision`: the DecisionRecord it came from, 0 if none). Later answers of
  // the same check are ignored (the first one reached the client).
  void Answered(uint64_t check, MonoTime at, Outcome outcome, uint64_t decision);
  // Key `key` was reset (an admin reset at its decider) now: the decisions made from now on are of a
  // new epoch.
  void Reset(size_t key, MonoTime at);
  // The run's faults began at `first` and were healed at `healed` (nullopt: never, the fault stays).
  // Without a call the run had no fault: every check is of the phase before.
  void SetFaults(MonoTime first, std::optional<MonoTime> healed);

  [[nodiscard]] const CheckRecord& check(uint64_t id) const { return checks_[id - 1]; }
  [[nodiscard]] const DecisionRecord& decision(uint64_t id) const { return decisions_[id - 1]; }
  [[nodiscard]] const std::vector<CheckRecord>& checks() const { return checks_; }
  [[nodiscard]] const std::vector<DecisionRecord>& decisions() const { return decisions_; }
  [[nodiscard]] Phase PhaseOf(const CheckRecord& check) const;

  [[nodiscard]] Verdict Judge(const JudgeOptions& options) const;

 private:
  std::vector<SimKey> keys_;
  std::vector<CheckRecord> checks_;
  std::vector<DecisionRecord> decisions_;
  std::vector<GrantEvent> grants_;  // in the order they were lent
  std::vector<Ask> asks_;
  std::vector<std::vector<MonoTime>> resets_;  // per key, in order
  std::optional<MonoTime> first_fault_;
  std::optional<MonoTime> healed_;
};

[[nodiscard]] const char* OutcomeName(Outcome outcome);
[[nodiscard]] const char* ExcuseName(Excuse excuse);
[[nodiscard]] const char* PhaseName(Phase phase);

}  // namespace ringlimit::sim

#endif  // RINGLIMIT_TESTS_SIM_CHECKER_H_
