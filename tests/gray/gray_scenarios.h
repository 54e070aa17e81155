// The gray-failure scenarios of issue 13 at the process level: real ringlimitd clusters on 127.0.0.1 or,
// for partitions, in one network namespace per node (tests/support/netns.h); paused processes
// (SIGSTOP/SIGCONT), cut links, skewed wall clocks (tests/support/faketime.h), forwarded checks that time
// out. Each scenario checks keys with known limits and a one-day token bucket (no refill worth a token
// within a run: 30 per day is one token per 48 minutes) through chosen nodes, records every decision,
// and measures admitted against the limit.
//
// Every scenario ends with an aftermath: the faults are over (processes resumed, links healed), the
// cluster converges, every node decides again (a resumed node's pause fence is over) and has shipped its
// changes (all bounded), then `limit` more checks of each key go round-robin through every running node.
// A key that is exhausted must stay refused, so anything admitted there is over-admission too.
//
// Each scenario verifies the faults it injected (a cut refuses connections, an isolated side is declared
// dead, a skewed clock is measured at its offset: ScenarioResult::unverified, ::skew) and says which checks
// it expects answered and which it may or must see refused, with the reason (Decision::expect, ::why), so
// the answered share (Shares, kAnsweredShare) and the per-key floor (KeyFigures::floor) cannot pass a
// cluster that refuses or denies everything (issue 32).
//
// Used by tests/gray/gray_test.cc (asserts admitted <= limit, the faults, the share and the floor) and by
// bench/nemesis/gray_report (prints the table) and bench/nemesis/nemesis (the share and the floor). Nothing
// here sleeps for synchronisation: conditions are polled with deadlines (WaitFor); a fault is held for its
// period with a deadline-driven wait.
//
// Thread safety: RunScenario may be called from one thread at a time (it starts its own clients).
#ifndef RINGLIMIT_TESTS_GRAY_GRAY_SCENARIOS_H_
#define RINGLIMIT_TESTS_GRAY_GRAY_SCENARIOS_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tests/cluster/cluster_harness.h"
#include "tests/support/http_client.h"
#include "tests/support/node_process.h"

namespace ringlimit::testing {
class NetnsFabric;
}  // namespace ringlimit::testing

namespace ringlimit::testing::gray {

// The share of checks that must be answered (HTTP 200, allowed or denied; not 503, not a transport failure)
// at every live entry node in every phase, among the checks a scenario expects answered (issue 32).
inline constexpr double kAnsweredShare = 0.99;

// What a scenario expects of one check, set when it summarizes its run: answered unless the scenario
// names why it may or must be refused.
enum class Expect : uint8_t {
  kAnswered,   // counts in the answered share
  kMayRefuse,  // left out of the share (the reason in Decision::why): e.g. sent before a fault was detected
  kRefused,    // must not be answered (the reason in Decision::why): e.g. the closed mode's minority side
};

// One answered (or failed) check.
struct Decision {
  int64_t sent_ms = 0;  // since the scenario started: when the check was sent (set by the sender)
  int64_t at_ms = 0;    // since the scenario started: when its answer was recorded
  std::string phase;    // the scenario's phase ("before", "paused", "aftermath", ...)
  std::string key;
  std::string entry;  // id of the node the check was sent to
  int status = 0;     // HTTP status; 0 when the request failed in transport
  bool allowed = false;
  uint64_t remaining = 0;
  std::string owner;  // who decided, as the answer says
  std::string error;  // transport error or non-200 body
  std::string code;   // error.code of a non-200 JSON answer ("clock_offset", "unavailable", ...)
  Expect expect = Expect::kAnswered;
  std::string why;  // the reason of a kMayRefuse or kRefused expectation
  [[nodiscard]] bool failed() const { return status != 200; }
};

// Every decision of a run, appended from any thread, each stamped with the time and the current phase.
// Thread safety: every method is safe for concurrent use.
class Recorder {
 public:
  Recorder() : start_(std::chrono::steady_clock::now()) {}
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Stamps `decision` (at_ms, phase) and keeps it.
  void Add(Decision decision);
  // The phase later decisions are stamped with.
  void SetPhase(std::string phase);
  [[nodiscard]] std::vector<Decision> Snapshot() const;
  [[nodiscard]] int64_t NowMs() const;

 private:
  const std::chrono::steady_clock::time_point start_;
  mutable std::mutex mutex_;
  // Protected by mutex_.
  std::string phase_ = "start";
  std::vector<Decision> decisions_;
};

// Per-key figures from a recorded run.
struct KeyFigures {
  std::string key;
  uint64_t limit = 0;
  int64_t checks = 0;
  int64_t admitted = 0;
  int64_t failed = 0;
  int64_t answered = 0;  // checks answered (200, allowed or denied)
  // Failed checks that may have been charged: every failed check but those expected refused (a fence
  // refuses before charging).
  int64_t failed_maybe_charged = 0;
  // Admitted answers whose remaining an earlier admitted answer of the key already gave. A counter that
  // only goes down (cost 1, nothing refills in a day) gives each remaining once, in whatever order
  // concurrent answers are recorded; a repeat means the count went back up (rolled back, or two deciders
  // counted from the same point).
  int64_t rollbacks = 0;
  // Admitted in the aftermath (the checks sent once the faults were over and the cluster had settled).
  int64_t admitted_after_heal = 0;
  // The fewest admissions an exact or bounded counter can give for what was answered: nothing refills in a
  // day and every check costs 1, so until the key is spent every answered check is admitted -- less one
  // per failed check that may have been charged without its answer arriving. A cluster denying everything
  // it answers fails this floor (admitted >= floor()).
  [[nodiscard]] int64_t floor() const {
    return std::max<int64_t>(0,
                             std::min<int64_t>(static_cast<int64_t>(limit), answered) - failed_maybe_charged);
  }
  [[nodiscard]] int64_t over() const {
    return admitted > static_cast<int64_t>(limit) ? admitted - static_cast<int64_t>(limit) : 0;
  }
  // Aftermath admissions beyond what the merged count allowed: once the sides' copies have merged, a key
  // admits only limit - (everything admitted before), or nothing when that went over. Must be 0 in every
  // mode: what `open` over-admits during a fault is bounded by the fault, never carried past it.
  [[nodiscard]] int64_t healed_over() const {
    const int64_t before = admitted - admitted_after_heal;
    const int64_t allowed = std::max<int64_t>(0, static_cast<int64_t>(limit) - before);
    return std::max<int64_t>(0, admitted_after_heal - allowed);
  }
};

// Figures of `key` (limit `limit`) over `decisions` (in recorded order).
[[nodiscard]] KeyFigures Figure(const std::vector<Decision>& decisions, const std::string& key,
                                uint64_t limit);

// The answered share of one entry node in one phase.
struct EntryShare {
  std::string phase;
  std::string entry;
  int64_t checks = 0;
  int64_t expected = 0;       // expected answered (Expect::kAnswered)
  int64_t answered = 0;       // of those, answered
  int64_t may_refuse = 0;     // left out (Expect::kMayRefuse)
  int64_t must_refuse = 0;    // expected refused (Expect::kRefused)
  int64_t refused = 0;        // of those, refused
  std::set<std::string> why;  // the reasons of the left-out and refused checks
  // answered / expected; 1 when nothing was expected answered.
  [[nodiscard]] double share() const {
    return expected == 0 ? 1.0 : static_cast<double>(answered) / static_cast<double>(expected);
  }
};

// The shares of `decisions` per phase and entry node, in phase order of first appearance.
[[nodiscard]] std::vector<EntryShare> Shares(const std::vector<Decision>& decisions);

// Lines naming every share below `min_share`, every expected refusal that was answered, and every key below
// its floor; empty when all hold.
[[nodiscard]] std::vector<std::string> AvailabilityFailures(const std::vector<EntryShare>& shares,
                                                            const std::vector<KeyFigures>& keys,
                                                            double min_share = kAnsweredShare);

// The shares as a table, one line per phase and entry node.
[[nodiscard]] std::string DescribeShares(const std::vector<EntryShare>& shares);

// The clock fault of a skew scenario, as the cluster measured it.
struct SkewFigures {
  std::string node;        // the skewed node's id
  double injected_ms = 0;  // the libfaketime offset it was started with
  // Its offset as each other node measures it (GET /v1/cluster, members[].clock_offset_ms), by observer;
  // missing when an observer had no estimate within the bound.
  std::map<std::string, double> seen_ms;
  std::string own_state;  // its own "clock": {"state"} ("skewed" once it judged its clock off)
  // Its own GET /v1/cluster "fence": {"deciding", "reason"} and GET /readyz (status and body), read once it
  // judged its clock off: it takes checks (ready) but does not decide them, and says why.
  bool own_deciding = true;
  std::string own_fence_reason;
  int readyz_status = 0;
  std::string readyz_body;
};

// What one scenario measured.
struct ScenarioResult {
  std::string name;
  int64_t checks = 0;
  int64_t admitted = 0;
  uint64_t limit = 0;  // summed over the scenario's keys
  int64_t over = 0;    // summed per key: max(0, admitted - limit)
  int64_t failed = 0;
  int64_t rollbacks = 0;
  int64_t healed_over = 0;  // summed per key: KeyFigures::healed_over()
  // Charged minus admitted (limit - remaining as the owner reports it at the end, minus the checks
  // answered as admitted); > 0 means a check was charged more than once. nullopt when not measured.
  std::optional<int64_t> charged_extra;
  // Admissions decided by a node holding no copy of the key (a fallback under --failure-mode open, which
  // merges back when the holders return): the bound `open` prints. Measured by the partition scenarios.
  std::optional<int64_t> without_copy;
  // The skew scenarios: the offset injected and what the cluster measured.
  std::optional<SkewFigures> skew;
  std::vector<EntryShare> shares;  // Shares(decisions)
  // Faults the scenario injected but could not verify (a cut that let connections through, a minority
  // never declared dead): a scenario that injected no fault must fail.
  std::vector<std::string> unverified;
  // When the faults' effects were seen, ms since the scenario started, by what was seen.
  std::map<std::string, int64_t> marks;
  std::string note;  // what happened that the figures do not say
  std::vector<KeyFigures> keys;
  std::vector<Decision> decisions;  // every decision, for --record
};

struct ScenarioOptions {
  // Extra flags for every node (e.g. {"--failure-mode", "closed"} once issue 13 lands). Default: none.
  std::vector<std::string> node_args;
  // Write each node's log tail into the note when a step fails. Default: true.
  bool logs_on_error = true;
};

// The scenarios, by name, in the order the report prints them.
[[nodiscard]] const std::vector<std::string>& ScenarioNames();

// Why scenario `name` cannot run on this machine (network namespaces or libfaketime missing), or nullopt.
[[nodiscard]] std::optional<std::string> Unsupported(const std::string& name);

// Why scenario `name` cannot run here, when this run must not skip it: the environment sets
// RINGLIMIT_REQUIRE_ROOT_SCENARIOS=1 (scripts/test does; CI runs as root with libfaketime installed);
// nullopt when it can run or may be skipped.
[[nodiscard]] std::optional<std::string> RequiredButUnsupported(const std::string& name);

// Whether `args` (node flags) select --failure-mode closed.
[[nodiscard]] bool ClosedMode(const std::vector<std::string>& args);

// Runs scenario `name` (one of ScenarioNames()). Fails if the harness could not set the scenario up (a
// cluster that did not start or converge); a scenario that ran returns its figures, whatever they are.
[[nodiscard]] Result<ScenarioResult> RunScenario(const std::string& name,
                                                 const ScenarioOptions& options = {});

// One check of `key` (limit `limit`, one-day token bucket, `cost`; 0 peeks) on `client`, connected to the
// node `entry` (its id, kept in the decision). Never fails: a transport error or a non-200 answer is a
// failed Decision.
[[nodiscard]] Decision CheckOnce(HttpClient& client, const std::string& entry, const std::string& key,
                                 uint64_t limit, uint64_t cost = 1);

// Extra environment ("NAME=value") by node id, e.g. FaketimeEnv for a skewed node.
using NodeEnvironments = std::map<std::string, std::vector<std::string>>;

// A ClusterOptions::placement: node "n<i+1>" in namespace i of `fabric` (nullptr: on 127.0.0.1, started
// directly), with the environment `env` holds for its id when it is launched (so changing `env` between a
// kill and a restart restarts a node with another clock). Both must outlive the Cluster.
[[nodiscard]] std::function<NodePlacement(const std::string& id)> Placement(
    const NetnsFabric* fabric, std::shared_ptr<const NodeEnvironments> env);

// The node flags the scenarios start with: short SWIM timings, so a paused node is declared dead in
// about 1.5 s, and anything in RINGLIMIT_GRAY_NODE_FLAGS (split on spaces) appended.
[[nodiscard]] std::vector<std::string> BaseNodeArgs(
    std::chrono::milliseconds suspicion = std::chrono::milliseconds(1000));

}  // namespace ringlimit::testing::gray

#endif  // RINGLIMIT_TESTS_GRAY_GRAY_SCENARIOS_H_
