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
// Used by tests/gray/gray_test.cc (asserts admitted <= limit) and by
// bench/nemesis/gray_report (prints the table). Nothing here sleeps for synchronisation: conditions
// are polled with deadlines (WaitFor); a fault is held for its period with a deadline-driven wait.
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
#include <string>
#include <vector>

#include "tests/cluster/cluster_harness.h"
#include "tests/support/http_client.h"
#include "tests/support/node_process.h"

namespace ringlimit::testing {
class NetnsFabric;
}  // namespace ringlimit::testing

namespace ringlimit::testing::gray {

// One answered (or failed) check.
struct Decision {
  int64_t at_ms = 0;  // since the scenario started
  std::string phase;  // the scenario's phase ("before", "paused", "aftermath", ...)
  std::string key;
  std::string entry;  // id of the node the check was sent to
  int status = 0;     // HTTP status; 0 when the request failed in transport
  bool allowed = false;
  uint64_t remaining = 0;
  std::string owner;  // who decided, as the answer says
  std::string error;  // transport error or non-200 body
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
  // Admitted answers whose remaining an earlier admitted answer of the key already gave. A counter that
  // only goes down (cost 1, nothing refills in a day) gives each remaining once, in whatever order
  // concurrent answers are recorded; a repeat means the count went back up (rolled back, or two deciders
  // counted from the same point).
  int64_t rollbacks = 0;
  // Admitted in the aftermath (the checks sent once the faults were over and the cluster had settled).
  int64_t admitted_after_heal = 0;
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
