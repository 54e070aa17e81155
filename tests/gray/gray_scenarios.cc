#include "tests/gray/gray_scenarios.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <boost/json/parse.hpp>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <utility>

#include "tests/cluster/cluster_harness.h"
#include "tests/cluster/cluster_test_util.h"
#include "tests/support/faketime.h"
#include "tests/support/netns.h"

namespace ringlimit::testing::gray {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr int64_t kWindowMs = 86'400'000;  // a day: no refill worth a token during a run
constexpr char kAlgorithm[] = "token_bucket";
// Bounds of the harness's waits (a loaded 2-core machine).
constexpr milliseconds kDeadBound{15'000};
constexpr milliseconds kSettleBound{30'000};
constexpr milliseconds kRequestTimeout{5'000};
constexpr char kAftermath[] = "aftermath";  // the phase of the checks after the faults healed
// How far the offset another node measures may be from the one injected: the estimate's uncertainty is half
// a round trip (ring/clock_offset.h), well under a second on one host even loaded.
constexpr milliseconds kSkewTolerance{1000};

// A scenario's failure to set up or drive the cluster (not a measurement).
template <class T>
Result<T> Error(std::string message) {
  return Result<T>(boost::system::in_place_error, std::move(message));
}

std::vector<std::string> Split(const char* text) {
  std::vector<std::string> out;
  std::istringstream in(text == nullptr ? "" : text);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

// A cluster for one scenario: N nodes on loopback, or each in its own network namespace; some of them
// under libfaketime. Owns the recorder every check goes to.
class Bed {
 public:
  // How the cluster is made. Fields are set one by one (Setup(n) then assignments), not designated.
  struct Setup {
    explicit Setup(size_t n, bool in_namespaces = false) : nodes(n), netns(in_namespaces) {}
    size_t nodes = 3;
    bool netns = false;
    milliseconds suspicion{1000};
    std::vector<std::string> extra_args;  // appended to BaseNodeArgs for every node
    NodeEnvironments env;                 // node id -> environment (skew)
  };

  static Result<std::unique_ptr<Bed>> Start(Setup setup, const ScenarioOptions& options) {
    std::unique_ptr<Bed> bed(new Bed());
    bed->logs_on_error_ = options.logs_on_error;
    if (setup.netns) {
      auto fabric = NetnsFabric::Create(setup.nodes);
      if (!fabric) return Error<std::unique_ptr<Bed>>(fabric.error());
      bed->fabric_ = std::move(*fabric);
    }
    ClusterOptions cluster_options;
    cluster_options.nodes = static_cast<int>(setup.nodes);
    cluster_options.args = BaseNodeArgs(setup.suspicion);
    cluster_options.args.insert(cluster_options.args.end(), setup.extra_args.begin(), setup.extra_args.end());
    cluster_options.args.insert(cluster_options.args.end(), options.node_args.begin(),
                                options.node_args.end());
    cluster_options.placement =
        Placement(bed->fabric_.get(), std::make_shared<const NodeEnvironments>(std::move(setup.env)));
    auto cluster = Cluster::Start(std::move(cluster_options));
    if (!cluster) return Error<std::unique_ptr<Bed>>("cluster did not start: " + cluster.error());
    bed->cluster_ = std::move(*cluster);
    return bed;
  }

  ~Bed() {
    // Paused nodes would keep their namespace busy; resume before the cluster kills them.
    for (size_t i : paused_) (void)cluster_->node(i).Signal(SIGCONT);
    cluster_.reset();  // before the fabric: nodes leave their namespaces first
  }

  Cluster& cluster() { return *cluster_; }
  NetnsFabric* fabric() { return fabric_.get(); }
  Recorder& recorder() { return recorder_; }
  size_t size() const { return cluster_->size(); }
  const std::string& id(size_t i) const { return cluster_->id(i); }
  void Note(const std::string& text) { note_ += (note_.empty() ? "" : "; ") + text; }

  // Every running, unpaused node's non-zero counters among `names` (metric name prefixes), as
  // "n1 name value, ...": why decisions went unacknowledged, for the report of a failed check.
  std::string Counters(const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < size(); ++i) {
      if (paused_.count(i) != 0 || !cluster_->node(i).running()) continue;
      HttpClient client(cluster_->host(i), cluster_->http_port(i), kRequestTimeout);
      auto metrics = client.Get("/metrics");
      if (!metrics) continue;
      std::istringstream lines(metrics->body());
      for (std::string line; std::getline(lines, line);) {
        const bool wanted = std::any_of(names.begin(), names.end(),
                                        [&](const std::string& n) { return line.rfind(n, 0) == 0; });
        if (wanted && line.size() > 2 && line.substr(line.size() - 2) != " 0") {
          out += (out.empty() ? "" : ", ") + id(i) + " " + line;
        }
      }
    }
    return out;
  }
  const std::string& note() const { return note_; }

  // Index of node `id` (as /v1/ring names it).
  size_t IndexOf(const std::string& id) const { return cluster_->IndexOf(id).value_or(0); }

  // The preference list (indexes, owner first) of `key`, asked from node `via`.
  Result<std::vector<size_t>> Preference(const std::string& key, size_t via = 0) {
    auto ring = FetchRing(cluster_->host(via), cluster_->http_port(via), key);
    if (!ring) return Error<std::vector<size_t>>(ring.error());
    std::vector<size_t> out;
    for (const auto& id : ring->preference_list) out.push_back(IndexOf(id));
    return out;
  }

  // A key and its preference list (node indexes, owner first).
  struct KeyAt {
    std::string key;
    std::vector<size_t> preference;
  };

  // The first key "<prefix><n>" whose preference list satisfies `fits` (nullptr: any key).
  Result<KeyAt> FindKey(const std::string& prefix,
                        const std::function<bool(const std::vector<size_t>&)>& fits = nullptr) {
    for (int n = 0; n < 2000; ++n) {
      const std::string key = prefix + std::to_string(n);
      auto preference = Preference(key);
      if (!preference) return Error<KeyAt>(preference.error());
      if (!fits || fits(*preference)) {
        return Result<KeyAt>(boost::system::in_place_value, KeyAt{key, std::move(*preference)});
      }
    }
    return Error<KeyAt>("no key with prefix " + prefix + " fits");
  }

  // One check of `key` (limit, one-day token bucket, `cost`) through node i, recorded (cost 0: a peek,
  // returned but not recorded).
  Decision Check(HttpClient& client, size_t i, const std::string& key, uint64_t limit, uint64_t cost = 1) {
    const int64_t sent_ms = recorder_.NowMs();
    Decision d = CheckOnce(client, id(i), key, limit, cost);
    d.sent_ms = sent_ms;
    if (cost > 0) recorder_.Add(d);
    return d;
  }

  // `count` checks of `key` through node i, one after the other.
  void Checks(size_t i, const std::string& key, uint64_t limit, int count) {
    HttpClient client(cluster_->host(i), cluster_->http_port(i), kRequestTimeout);
    for (int c = 0; c < count; ++c) (void)Check(client, i, key, limit);
  }

  Result<void> Pause(size_t i) {
    if (auto sent = cluster_->node(i).Signal(SIGSTOP); !sent) return sent;
    paused_.insert(i);
    return {};
  }
  Result<void> Resume(size_t i) {
    if (auto sent = cluster_->node(i).Signal(SIGCONT); !sent) return sent;
    paused_.erase(i);
    return {};
  }

  // Waits until every node of `observers` sees node i dead (or no longer lists it).
  // On a timeout the error also carries every observer's failure-detector counters (a post-mortem).
  Result<milliseconds> WaitDead(size_t i, const std::vector<size_t>& observers) {
    auto waited = WaitFor(id(i) + " declared dead", kDeadBound,
                          [&](std::string* last) { return SeenDeadByAll(i, observers, last); });
    if (waited) return waited;
    std::string error = waited.error();
    for (size_t j : observers) {
      HttpClient client(cluster_->host(j), cluster_->http_port(j), kRequestTimeout);
      auto metrics = client.Get("/metrics");
      if (!metrics) continue;
      std::istringstream lines(metrics->body());
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("ringlimit_membership_", 0) == 0) error += "\n  " + id(j) + ": " + line;
      }
    }
    return Error<milliseconds>(error);
  }

  // Whether every node of `observers` sees node i dead (or no longer lists it) now; if not, why in `last`.
  bool SeenDeadByAll(size_t i, const std::vector<size_t>& observers, std::string* last = nullptr) {
    for (size_t j : observers) {
      auto view = FetchClusterView(cluster_->host(j), cluster_->http_port(j));
      if (!view) {
        if (last != nullptr) *last = id(j) + ": " + view.error();
        return false;
      }
      const MemberView* member = view->Find(id(i));
      if (member != nullptr && member->state != "dead" && member->state != "left") {
        if (last != nullptr) *last = id(j) + " sees " + id(i) + " " + member->state;
        return false;
      }
    }
    return true;
  }

  // Whether any node of `observers` sees node i as dead now.
  bool SeenDead(size_t i, const std::vector<size_t>& observers) {
    for (size_t j : observers) {
      auto view = FetchClusterView(cluster_->host(j), cluster_->http_port(j));
      if (!view) continue;
      const MemberView* member = view->Find(id(i));
      if (member != nullptr && member->state == "dead") return true;
    }
    return false;
  }

  // After the faults and before the aftermath: settles (bounded), peeks `key` at `owner` and returns what
  // it was charged (limit - remaining) minus what was answered as admitted so far; nullopt (and a note)
  // when the peek fails.
  std::optional<int64_t> ChargedExtra(size_t owner, const std::string& key, uint64_t limit) {
    for (size_t i : std::set<size_t>(paused_)) (void)Resume(i);
    (void)cluster_->WaitConverged(kSettleBound);
    (void)cluster_->WaitDecidingAndShipped(kSettleBound, never_deciding_);  // the owner answers the peek
    HttpClient client(cluster_->host(owner), cluster_->http_port(owner), kRequestTimeout);
    const Decision peek = Check(client, owner, key, limit, 0);
    if (peek.failed()) {
      Note("the owner's peek failed: " + peek.error);
      return std::nullopt;
    }
    const auto so_far = Figure(recorder_.Snapshot(), key, limit);
    return static_cast<int64_t>(limit - peek.remaining) - so_far.admitted;
  }

  // The aftermath (see the header): resume, heal, settle (bounded), then `limit` checks of every key
  // round-robin through the running nodes.
  void Aftermath(const std::vector<std::pair<std::string, uint64_t>>& keys) {
    for (size_t i : std::set<size_t>(paused_)) (void)Resume(i);
    if (fabric_) {
      if (auto healed = fabric_->HealAll(); !healed) Note("heal failed: " + healed.error());
    }
    recorder_.SetPhase("settling");
    // The first line of a wait's failure (what it last saw; the logs follow it).
    const auto first_line = [](const std::string& error) { return error.substr(0, error.find('\n')); };
    if (auto converged = cluster_->WaitConverged(kSettleBound); !converged) {
      Note("did not converge after the faults: " + first_line(converged.error()));
    } else if (auto settled = cluster_->WaitHandoffsDone(kSettleBound); !settled) {
      Note("handoffs still running after the faults: " + first_line(settled.error()));
    } else if (auto deciding = cluster_->WaitDecidingAndShipped(kSettleBound, never_deciding_); !deciding) {
      // A resumed node's pause fence (its keys' next holders decide for it meanwhile) is part of the
      // fault; so is what the deciders have not shipped yet (asynchronous replication).
      Note("a node still fenced, or changes not shipped, after the faults: " + first_line(deciding.error()));
    } else {
      Note("settled after the faults: converged in " + std::to_string(converged->count()) +
           " ms, handoffs done in " + std::to_string(settled->count()) + " ms, deciding and shipped in " +
           std::to_string(deciding->count()) + " ms");
    }
    recorder_.SetPhase(kAftermath);
    const auto running = cluster_->Running();
    std::vector<std::unique_ptr<HttpClient>> clients;
    for (size_t i : running) {
      clients.push_back(
          std::make_unique<HttpClient>(cluster_->host(i), cluster_->http_port(i), kRequestTimeout));
    }
    for (const auto& [key, limit] : keys) {
      for (uint64_t c = 0; c < limit; ++c) {
        const size_t k = c % running.size();
        (void)Check(*clients[k], running[k], key, limit);
      }
    }
  }

  // Holds a fault for `period`: returns once it has passed (a deadline-driven wait).
  static void Hold(milliseconds period) {
    const auto until = Clock::now() + period;
    (void)WaitFor("the fault's period", period + milliseconds(1000),
                  [&](std::string*) { return Clock::now() >= until; });
  }

  std::string Logs() const { return logs_on_error_ ? "\n" + cluster_->Logs() : ""; }

  // Node i decides nothing for the whole scenario (a skewed clock): settling does not wait for it to.
  void NeverDeciding(size_t i) { never_deciding_.push_back(i); }

  // Waits (bounded) until every node of `observers` measures node i's clock about `injected_ms` away and
  // node i judges its own clock skewed; returns what was measured, whether or not it got there (the
  // scenario's assertions judge it).
  SkewFigures WaitSkewSeen(size_t i, double injected_ms, const std::vector<size_t>& observers) {
    SkewFigures skew;
    skew.node = id(i);
    skew.injected_ms = injected_ms;
    auto seen = WaitFor(id(i) + "'s clock measured", kSettleBound, [&](std::string* last) {
      bool done = true;
      for (size_t j : observers) {
        auto view = FetchClusterView(cluster_->host(j), cluster_->http_port(j));
        const MemberView* member = view ? view->Find(id(i)) : nullptr;
        if (member == nullptr || !member->clock_offset_ms) {
          *last = id(j) + " has no estimate of " + id(i) + "'s clock";
          done = false;
          continue;
        }
        skew.seen_ms[id(j)] = *member->clock_offset_ms;
        if (std::abs(*member->clock_offset_ms - injected_ms) > kSkewTolerance.count()) {
          *last =
              id(j) + " sees " + id(i) + "'s clock " + std::to_string(*member->clock_offset_ms) + " ms away";
          done = false;
        }
      }
      auto own = FetchClusterView(cluster_->host(i), cluster_->http_port(i));
      skew.own_state = own ? own->clock_state : "(" + own.error() + ")";
      skew.own_deciding = own ? own->deciding : true;
      skew.own_fence_reason = own ? own->fence_reason : "";
      if (skew.own_state != "skewed") {
        *last = id(i) + "'s clock is " + skew.own_state;
        done = false;
      }
      return done;
    });
    if (!seen) Note(seen.error());
    HttpClient client(cluster_->host(i), cluster_->http_port(i), kRequestTimeout);
    if (auto readyz = client.Get("/readyz")) {
      skew.readyz_status = readyz->result_int();
      skew.readyz_body = readyz->body();
    } else {
      skew.readyz_body = readyz.error().message();
    }
    return skew;
  }

 private:
  Bed() = default;

  bool logs_on_error_ = true;
  std::string note_;
  std::vector<size_t> never_deciding_;
  std::set<size_t> paused_;
  Recorder recorder_;
  // The fabric outlives the cluster (the destructor resets the cluster first).
  std::unique_ptr<NetnsFabric> fabric_;
  std::unique_ptr<Cluster> cluster_;
};

// Client threads checking `keys` through `nodes` round-robin, one check after the other per thread, until
// stopped. Thread safety: drive from one thread.
class Load {
 public:
  Load(Bed& bed, std::vector<size_t> nodes, std::vector<std::pair<std::string, uint64_t>> keys)
      : bed_(bed), keys_(std::move(keys)) {
    for (size_t i : nodes) {
      threads_.emplace_back([this, i, host = bed_.cluster().host(i), port = bed_.cluster().http_port(i)] {
        HttpClient client(host, port, kRequestTimeout);
        for (size_t n = 0; !stop_.load(); ++n) {
          const auto& [key, limit] = keys_[n % keys_.size()];
          (void)bed_.Check(client, i, key, limit);
        }
      });
    }
  }
  ~Load() { Stop(); }
  Load(const Load&) = delete;
  Load& operator=(const Load&) = delete;

  void Stop() {
    stop_ = true;
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

 private:
  Bed& bed_;
  const std::vector<std::pair<std::string, uint64_t>> keys_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// What a scenario expects of one check: nullopt when it must be answered, else the expectation and why.
using ExpectFn = std::function<std::optional<std::pair<Expect, std::string>>(const Decision&)>;

// The figures of the run so far; `expect` (nullptr: every check expected answered) set on each decision.
ScenarioResult Summarize(const std::string& name, Bed& bed,
                         const std::vector<std::pair<std::string, uint64_t>>& keys,
                         const ExpectFn& expect = nullptr) {
  ScenarioResult result;
  result.name = name;
  result.decisions = bed.recorder().Snapshot();
  for (Decision& d : result.decisions) {
    if (!expect) break;
    if (auto e = expect(d)) std::tie(d.expect, d.why) = *e;
  }
  for (const auto& [key, limit] : keys) {
    KeyFigures f = Figure(result.decisions, key, limit);
    result.checks += f.checks;
    result.admitted += f.admitted;
    result.limit += f.limit;
    result.over += f.over();
    result.failed += f.failed;
    result.rollbacks += f.rollbacks;
    result.healed_over += f.healed_over();
    result.keys.push_back(std::move(f));
  }
  result.shares = Shares(result.decisions);
  if (result.failed > 0) {
    const std::string counters =
        bed.Counters({"ringlimit_replication_sync_timeouts_total", "ringlimit_replication_newer_copies_total",
                      "ringlimit_replication_unacked_total", "ringlimit_unacked_decisions_total",
                      "ringlimit_forward_copy_waits_total", "ringlimit_replication_relayed_batches_total"});
    if (!counters.empty()) bed.Note("counters after the failures: " + counters);
  }
  result.note = bed.note();
  return result;
}

std::vector<size_t> Others(size_t n, const std::set<size_t>& except) {
  std::vector<size_t> out;
  for (size_t i = 0; i < n; ++i) {
    if (except.count(i) == 0) out.push_back(i);
  }
  return out;
}

// 3 nodes, failure detection ~4 s, forward timeout 300 ms: a pause of a second or two times forwards out
// without anyone being declared dead.
Bed::Setup SlowDetection() {
  Bed::Setup setup(3);
  setup.suspicion = milliseconds(4000);
  setup.extra_args = {"--forward-timeout-ms", "300"};
  return setup;
}

// 3 nodes, node `id` started with `env`.
Bed::Setup Skewed(size_t nodes, const std::string& id, std::vector<std::string> env) {
  Bed::Setup setup(nodes);
  setup.env[id] = std::move(env);
  return setup;
}

#define GRAY_TRY(expr)                                               \
  do {                                                               \
    if (auto gray_done = (expr); !gray_done) {                       \
      return Error<ScenarioResult>(gray_done.error() + bed->Logs()); \
    }                                                                \
  } while (false)

// --- The scenarios (issue 13, "Tests") ---

// 3 nodes, limit 30: 15 checks through the owner; the owner paused until the others declare it dead; 15
// through another node; the owner resumed; 15 more through it.
Result<ScenarioResult> OwnerPausedPastDetection(const ScenarioOptions& options) {
  auto started = Bed::Start(Bed::Setup(3), options);
  if (!started) return Error<ScenarioResult>(started.error());
  auto& bed = *started;
  constexpr uint64_t kLimit = 30;
  auto found = bed->FindKey("paused-");
  GRAY_TRY(found);
  const std::string key = found->key;
  const std::vector<size_t> preference = found->preference;
  const size_t owner = preference[0];
  const size_t other = (owner + 1) % 3;
  bed->recorder().SetPhase("before");
  bed->Checks(owner, key, kLimit, 15);
  GRAY_TRY(bed->Pause(owner));
  GRAY_TRY(bed->WaitDead(owner, Others(3, {owner})));
  bed->recorder().SetPhase("owner dead");
  bed->Checks(other, key, kLimit, 15);
  GRAY_TRY(bed->Resume(owner));
  bed->recorder().SetPhase("resumed");
  bed->Checks(owner, key, kLimit, 15);
  bed->Aftermath({{key, kLimit}});
  return Summarize("owner paused past failure detection", *bed, {{key, kLimit}});
}

// 3 nodes, limit 30, failure detection ~4 s, forward timeout 300 ms: 10 checks through a non-owner; the
// owner paused for 1.5 s while clients keep checking through both non-owners; resumed; 10 checks through
// the owner and 10 through a non-owner. What the owner was charged for the checks before it resumed is
// compared with what was answered (charged_extra: the forwards that timed out still reach it).
Result<ScenarioResult> OwnerPausedWithinDetection(const ScenarioOptions& options) {
  auto started = Bed::Start(SlowDetection(), options);
  if (!started) return Error<ScenarioResult>(started.error());
  auto& bed = *started;
  constexpr uint64_t kLimit = 30;
  auto found = bed->FindKey("brief-");
  GRAY_TRY(found);
  const std::string key = found->key;
  const std::vector<size_t> preference = found->preference;
  const size_t owner = preference[0];
  const auto others = Others(3, {owner});
  bed->recorder().SetPhase("before");
  bed->Checks(others[0], key, kLimit, 10);
  GRAY_TRY(bed->Pause(owner));
  bed->recorder().SetPhase("owner paused");
  {
    Load load(*bed, others, {{key, kLimit}});
    Bed::Hold(milliseconds(1500));
    if (bed->SeenDead(owner, others)) bed->Note("the owner was declared dead during the pause");
    GRAY_TRY(bed->Resume(owner));
  }
  const auto charged_extra = bed->ChargedExtra(owner, key, kLimit);
  bed->recorder().SetPhase("resumed");
  bed->Checks(owner, key, kLimit, 10);
  bed->Checks(others[0], key, kLimit, 10);
  bed->Aftermath({{key, kLimit}});
  auto result = Summarize("owner paused within failure detection", *bed, {{key, kLimit}});
  result.charged_extra = charged_extra;
  return result;
}

// 5 nodes, 3 copies, limit 20: the key exhausted through its owner; its first two holders paused for
// 2 s while a node holding no copy keeps getting checks for it.
Result<ScenarioResult> TwoHoldersStalled(const ScenarioOptions& options) {
  auto started = Bed::Start(Bed::Setup(5), options);
  if (!started) return Error<ScenarioResult>(started.error());
  auto& bed = *started;
  constexpr uint64_t kLimit = 20;
  auto found = bed->FindKey("stall-");
  GRAY_TRY(found);
  const std::string key = found->key;
  const std::vector<size_t> preference = found->preference;
  if (preference.size() < 3) return Error<ScenarioResult>("preference list shorter than 3");
  const std::set<size_t> holders(preference.begin(), preference.begin() + 3);
  const size_t entry = Others(5, holders)[0];
  bed->recorder().SetPhase("exhaust");
  bed->Checks(preference[0], key, kLimit, static_cast<int>(kLimit) + 5);
  GRAY_TRY(bed->Pause(preference[0]));
  GRAY_TRY(bed->Pause(preference[1]));
  bed->recorder().SetPhase("two holders paused");
  {
    Load load(*bed, {entry}, {{key, kLimit}});
    Bed::Hold(milliseconds(2000));
    GRAY_TRY(bed->Resume(preference[0]));
    GRAY_TRY(bed->Resume(preference[1]));
  }
  bed->Aftermath({{key, kLimit}});
  return Summarize("two of three holders stalled (5 nodes)", *bed, {{key, kLimit}});
}

// Whether a TCP connection from namespace `from` of `fabric` to `host`:`port` is answered within a second
// (curl run in the namespace; HTTP GET /healthz).
bool Reaches(const NetnsFabric& fabric, size_t from, const std::string& host, uint16_t port) {
  const std::string status =
      CurlStatusFrom(fabric.name(from), "http://" + host + ":" + std::to_string(port) + "/healthz", 1);
  return !status.empty() && status != "000";
}

// What a partition scenario cuts: the nodes clients check through, the side cut off from the rest (empty
// when no node is cut off from a majority), and the links that must be dead (from, to).
struct CutPlan {
  std::vector<size_t> entries;
  std::vector<size_t> isolated;
  std::vector<std::pair<size_t, size_t>> dead_links;
};

// When the cut's effects were first seen (ms since the scenario started), polled while it is held.
struct CutTimes {
  std::optional<int64_t> declared_dead_ms;  // every other node sees every isolated node dead
  std::optional<int64_t> fenced_ms;         // every isolated node decides nothing (quorum fence, closed)
};

// A partition scenario: `nodes` in network namespaces, one key of limit 40 ("<prefix><n>"); `cut` cuts
// links given the key's preference list and says what it cut; the cut is verified (every link it cut
// refuses a connection), held for `period` under that load (while its effects are polled), then healed
// (the aftermath). `expect` says which checks may or must be refused, given the key's preference list, the
// plan and when the effects were seen (nullptr: every check expected answered).
struct CutScenario {
  std::string name;
  size_t nodes = 3;
  std::string prefix;
  std::string phase;
  milliseconds period{5000};
  std::function<Result<CutPlan>(NetnsFabric& fabric, const std::vector<size_t>& preference)> cut;
  // Exhaust the key before the cut (its limit in checks through a node holding no copy of it).
  bool exhaust_first = false;
  std::function<ExpectFn(Bed& bed, const CutPlan& plan, const CutTimes& times)> expect;
};

// Holds the cut of `plan` for `period`, polling when the other nodes see the isolated side dead and when the
// isolated side stops deciding.
CutTimes HoldCut(Bed& bed, const CutPlan& plan, milliseconds period) {
  CutTimes times;
  const auto until = Clock::now() + period;
  const auto others = Others(bed.size(), std::set<size_t>(plan.isolated.begin(), plan.isolated.end()));
  (void)WaitFor("the cut's period", period + milliseconds(5000), [&](std::string*) {
    if (Clock::now() >= until) return true;
    if (plan.isolated.empty()) return false;
    if (!times.declared_dead_ms) {
      bool all = true;
      for (size_t i : plan.isolated) all = all && bed.SeenDeadByAll(i, others);
      if (all) times.declared_dead_ms = bed.recorder().NowMs();
    }
    if (!times.fenced_ms) {
      bool all = true;
      for (size_t i : plan.isolated) {
        auto view = FetchClusterView(bed.cluster().host(i), bed.cluster().http_port(i));
        all = all && view && !view->deciding;
      }
      if (all) times.fenced_ms = bed.recorder().NowMs();
    }
    return false;
  });
  return times;
}

Result<ScenarioResult> RunCut(const CutScenario& scenario, const ScenarioOptions& options) {
  auto started = Bed::Start(Bed::Setup(scenario.nodes, true), options);
  if (!started) return Error<ScenarioResult>(started.error());
  auto& bed = *started;
  constexpr uint64_t kLimit = 40;
  auto found = bed->FindKey(scenario.prefix);
  GRAY_TRY(found);
  const std::string key = found->key;
  if (scenario.exhaust_first) {
    const std::set<size_t> holders(found->preference.begin(), found->preference.begin() + 3);
    bed->recorder().SetPhase("before");
    bed->Checks(Others(scenario.nodes, holders).front(), key, kLimit, static_cast<int>(kLimit));
  }
  auto plan = scenario.cut(*bed->fabric(), found->preference);
  GRAY_TRY(plan);
  std::vector<std::string> unverified;
  for (const auto& [from, to] : plan->dead_links) {
    if (Reaches(*bed->fabric(), from, bed->cluster().host(to), bed->cluster().http_port(to))) {
      unverified.push_back("the cut " + bed->id(from) + "->" + bed->id(to) + " lets connections through");
    }
  }
  bed->recorder().SetPhase(scenario.phase);
  CutTimes times;
  {
    Load load(*bed, plan->entries, {{key, kLimit}});
    times = HoldCut(*bed, *plan, scenario.period);
  }
  if (!plan->isolated.empty() && !times.declared_dead_ms) {
    unverified.push_back("the isolated side was not seen dead by the others within the cut");
  }
  const bool closed = ClosedMode(BaseNodeArgs()) || ClosedMode(options.node_args);
  if (closed && !plan->isolated.empty() && plan->isolated.size() * 2 < scenario.nodes && !times.fenced_ms) {
    unverified.push_back("the isolated minority never stopped deciding (closed mode's quorum fence)");
  }
  bed->Aftermath({{key, kLimit}});
  ScenarioResult result = Summarize(scenario.name, *bed, {{key, kLimit}},
                                    scenario.expect ? scenario.expect(*bed, *plan, times) : nullptr);
  result.unverified = std::move(unverified);
  if (times.declared_dead_ms) result.marks["isolated side declared dead"] = *times.declared_dead_ms;
  if (times.fenced_ms) result.marks["isolated side fenced"] = *times.fenced_ms;
  std::set<std::string> holders;
  for (size_t i : found->preference) holders.insert(bed->cluster().id(i));
  result.without_copy = 0;
  for (const Decision& d : result.decisions) {
    if (d.key == key && d.allowed && !d.owner.empty() && holders.count(d.owner) == 0) ++*result.without_copy;
  }
  return result;
}

// 3 nodes, limit 40: the owner A and the next holder B cut from each other (both directions) for 5 s, both
// still reaching C, while clients check through all three.
Result<ScenarioResult> PartialPartition(const ScenarioOptions& options) {
  return RunCut(
      {.name = "partial partition (A-B cut, both reach C)",
       .nodes = 3,
       .prefix = "partial-",
       .phase = "A-B cut",
       .period = milliseconds(5000),
       .cut = [](NetnsFabric& fabric, const std::vector<size_t>& p) -> Result<CutPlan> {
         if (auto cut = fabric.CutBoth(p[0], p[1]); !cut) return Error<CutPlan>(cut.error());
         return CutPlan{.entries = {0, 1, 2}, .isolated = {}, .dead_links = {{p[0], p[1]}, {p[1], p[0]}}};
       },
       .exhaust_first = false,
       .expect = nullptr},
      options);
}

// 3 nodes, limit 40: a half-cut link -- every packet from B (the next holder) to the owner A dropped, A's
// to B still delivered, both reaching C -- for 5 s, clients checking through B and C (B's checks must
// reach A some other way: through C).
Result<ScenarioResult> HalfCutLink(const ScenarioOptions& options) {
  return RunCut({.name = "half-cut link (B->A dropped, A->B works)",
                 .nodes = 3,
                 .prefix = "halfcut-",
                 .phase = "B->A cut",
                 .period = milliseconds(5000),
                 .cut = [](NetnsFabric& fabric, const std::vector<size_t>& p) -> Result<CutPlan> {
                   if (auto cut = fabric.Cut(p[1], p[0]); !cut) return Error<CutPlan>(cut.error());
                   return CutPlan{.entries = Others(3, {p[0]}), .isolated = {}, .dead_links = {{p[1], p[0]}}};
                 },
                 .exhaust_first = false,
                 .expect = nullptr},
                options);
}

// 5 nodes, limit 40: the owner and the next holder cut from the other three for 10 s, then healed,
// clients checking through all five. Under --failure-mode closed the minority side decides nothing once its
// quorum fence holds (its checks sent after that must be refused; before, they may be), and the majority
// side may refuse the key until it has declared the two dead (until then two of the key's three holders,
// its holders' majority, are out of reach); everything else must be answered.
Result<ScenarioResult> IsolatedMinority(const ScenarioOptions& options) {
  const bool closed = ClosedMode(BaseNodeArgs()) || ClosedMode(options.node_args);
  return RunCut(
      {.name = "isolated minority 10 s, healed (5 nodes)",
       .nodes = 5,
       .prefix = "minority-",
       .phase = "minority isolated",
       .period = milliseconds(10'000),
       .cut = [](NetnsFabric& fabric, const std::vector<size_t>& p) -> Result<CutPlan> {
         if (auto cut = fabric.Isolate({p[0], p[1]}); !cut) return Error<CutPlan>(cut.error());
         return CutPlan{.entries = {0, 1, 2, 3, 4}, .isolated = {p[0], p[1]}, .dead_links = {{p[0], p[2]}}};
       },
       .expect = [closed](Bed& bed, const CutPlan& plan, const CutTimes& times) -> ExpectFn {
         if (!closed) return nullptr;
         std::set<std::string> minority;
         for (size_t i : plan.isolated) minority.insert(bed.id(i));
         return [minority, times](const Decision& d) -> std::optional<std::pair<Expect, std::string>> {
           if (d.phase != "minority isolated") return std::nullopt;
           if (minority.count(d.entry) != 0) {
             if (times.fenced_ms && d.sent_ms >= *times.fenced_ms) {
               return std::make_pair(Expect::kRefused, "minority side, quorum fence on (closed)");
             }
             return std::make_pair(Expect::kMayRefuse, "minority side, before its quorum fence");
           }
           if (!times.declared_dead_ms || d.sent_ms < *times.declared_dead_ms) {
             return std::make_pair(Expect::kMayRefuse, "majority side, the key's holders' majority cut off");
           }
           return std::nullopt;
         };
       }},
      options);
}

// 7 nodes, limit 40, exhausted first: every holder of the key (its 3 copies) cut off from the other four
// for 8 s, clients checking through those four. The four declare the holders dead and become the key's
// new holders, without its copy: they must not decide it from nothing (closed: every check refused until a
// holder with the copy is back), and after healing the key stays refused.
Result<ScenarioResult> HoldersCutOff(const ScenarioOptions& options) {
  const bool closed = ClosedMode(BaseNodeArgs()) || ClosedMode(options.node_args);
  return RunCut(
      {.name = "every holder cut off 8 s, healed (7 nodes)",
       .nodes = 7,
       .prefix = "holders-",
       .phase = "holders cut off",
       .period = milliseconds(8'000),
       .cut = [](NetnsFabric& fabric, const std::vector<size_t>& p) -> Result<CutPlan> {
         if (auto cut = fabric.Isolate({p[0], p[1], p[2]}); !cut) return Error<CutPlan>(cut.error());
         const auto others = Others(7, {p[0], p[1], p[2]});
         return CutPlan{.entries = others, .isolated = {p[0], p[1], p[2]}, .dead_links = {{p[0], others[0]}}};
       },
       .exhaust_first = true,
       .expect = [closed](Bed&, const CutPlan&, const CutTimes&) -> ExpectFn {
         if (!closed) return nullptr;
         return [](const Decision& d) -> std::optional<std::pair<Expect, std::string>> {
           if (d.phase != "holders cut off") return std::nullopt;
           return std::make_pair(Expect::kRefused, "no holder with the key's copy reachable (closed)");
         };
       }},
      options);
}

// 4 nodes, n3's wall clock `offset` (`offset_ms`) away (libfaketime). The fault is verified first: n1, n2
// and n4 measure n3's clock that far away, n3 judges its own clock skewed, says so (GET /v1/cluster "fence":
// deciding false, reason clock_offset) and stays ready (GET /readyz 200) (SkewFigures; the test asserts
// them). A skewed node steps back, not out (issue 35 item 4): it decides nothing -- no answer may name it
// as the owner -- but takes checks and passes each on to the key's other holders, as a non-holder does;
// forwarded checks it would decide it declines, so their sender goes on to the next holder. So every
// check, at n3 too, is expected answered. Key 1: owner n1, n3 the next holder: 10 checks through n1 and
// 10 through n3; n1 paused until declared dead (n3 then owns key 1, its next holder decides): 15 through
// n3, 5 through n4; n1 resumed: 10 through n1, 10 through n3. Key 2, owned by n3: 15 checks through n3,
// 10 through n1, 10 through n2. Limit 30 each; the aftermath checks both round robin, n3 included. Four
// nodes, not three: with n1 dead, n2 measuring only n3's clock could not tell which of the two is wrong
// and would step back too (ring/clock_offset.h: two nodes cannot single out the skewed one).
Result<ScenarioResult> ClockSkew(const std::string& offset, double offset_ms,
                                 const ScenarioOptions& options) {
  auto env = FaketimeEnv(offset);
  auto started = Bed::Start(Skewed(4, "n3", env), options);
  if (!started) return Error<ScenarioResult>(started.error());
  auto& bed = *started;
  constexpr uint64_t kLimit = 30;
  constexpr size_t kSkewed = 2;
  bed->NeverDeciding(kSkewed);
  SkewFigures skew = bed->WaitSkewSeen(kSkewed, offset_ms, {0, 1, 3});
  auto found1 = bed->FindKey("skew-a-", [](const std::vector<size_t>& p) { return p[0] == 0 && p[1] == 2; });
  GRAY_TRY(found1);
  auto found2 = bed->FindKey("skew-b-", [](const std::vector<size_t>& p) { return p[0] == 2; });
  GRAY_TRY(found2);
  const std::string key1 = found1->key;
  const std::string key2 = found2->key;
  const std::vector<std::pair<std::string, uint64_t>> keys = {{key1, kLimit}, {key2, kLimit}};
  bed->recorder().SetPhase("before");
  bed->Checks(0, key1, kLimit, 10);
  bed->Checks(kSkewed, key1, kLimit, 10);
  bed->Checks(kSkewed, key2, kLimit, 15);
  bed->Checks(0, key2, kLimit, 10);
  bed->Checks(1, key2, kLimit, 10);
  GRAY_TRY(bed->Pause(0));
  GRAY_TRY(bed->WaitDead(0, {1, 2, 3}));
  bed->recorder().SetPhase("n1 dead");
  bed->Checks(kSkewed, key1, kLimit, 15);
  bed->Checks(3, key1, kLimit, 5);
  GRAY_TRY(bed->Resume(0));
  bed->recorder().SetPhase("resumed");
  bed->Checks(0, key1, kLimit, 10);
  bed->Checks(kSkewed, key1, kLimit, 10);
  bed->Aftermath(keys);
  auto result = Summarize("one node's clock " + offset + " (successor of a paused owner)", *bed, keys);
  result.skew = std::move(skew);
  return result;
}

// 3 nodes, limit 30, failure detection ~4 s, forward timeout 300 ms: 20 checks through a non-owner; at
// every fourth the owner is paused for 800 ms so the forward times out and is retried at the next holder,
// and the owner, resumed, still finds the first attempt in its socket. At the end the owner's remaining
// (a peek) says what was charged.
Result<ScenarioResult> ForwardRetried(const ScenarioOptions& options) {
  auto started = Bed::Start(SlowDetection(), options);
  if (!started) return Error<ScenarioResult>(started.error());
  auto& bed = *started;
  constexpr uint64_t kLimit = 30;
  auto found = bed->FindKey("retry-");
  GRAY_TRY(found);
  const std::string key = found->key;
  const std::vector<size_t> preference = found->preference;
  const size_t owner = preference[0];
  const size_t entry = Others(3, {owner})[0];
  HttpClient client(bed->cluster().host(entry), bed->cluster().http_port(entry), kRequestTimeout);
  for (int c = 0; c < 20; ++c) {
    if (c % 4 != 3) {
      bed->recorder().SetPhase("steady");
      (void)bed->Check(client, entry, key, kLimit);
      continue;
    }
    bed->recorder().SetPhase("owner stalled");
    const auto resume_at = Clock::now() + milliseconds(800);
    GRAY_TRY(bed->Pause(owner));
    (void)bed->Check(client, entry, key, kLimit);
    Bed::Hold(std::chrono::duration_cast<milliseconds>(
        std::max(resume_at - Clock::now(), Clock::duration::zero())));
    GRAY_TRY(bed->Resume(owner));
  }
  if (bed->SeenDead(owner, Others(3, {owner}))) bed->Note("the owner was declared dead during a stall");
  const auto charged_extra = bed->ChargedExtra(owner, key, kLimit);
  bed->Aftermath({{key, kLimit}});
  auto result = Summarize("forwarded check retried after a timeout", *bed, {{key, kLimit}});
  result.charged_extra = charged_extra;
  return result;
}

}  // namespace

Decision CheckOnce(HttpClient& client, const std::string& entry, const std::string& key, uint64_t limit,
                   uint64_t cost) {
  Decision d;
  d.key = key;
  d.entry = entry;
  auto outcome = PostCheck(
      client, key, CheckSpec{.algorithm = kAlgorithm, .limit = limit, .window_ms = kWindowMs, .cost = cost});
  if (!outcome) {
    d.error = outcome.error();
    return d;
  }
  d.status = outcome->status;
  d.allowed = outcome->allowed;
  d.remaining = outcome->remaining;
  d.owner = outcome->owner;
  if (d.status != 200) {
    d.error = outcome->body;
    boost::system::error_code ec;
    const boost::json::value body = boost::json::parse(outcome->body, ec);
    if (!ec && body.is_object()) {
      if (const auto* error = body.as_object().if_contains("error")) d.code = StringField(*error, "code");
    }
  }
  return d;
}

std::function<NodePlacement(const std::string& id)> Placement(const NetnsFabric* fabric,
                                                              std::shared_ptr<const NodeEnvironments> env) {
  return [fabric, env = std::move(env)](const std::string& id) {
    NodePlacement placement;
    const size_t index = std::stoul(id.substr(1)) - 1;
    if (fabric != nullptr && index < fabric->size()) {
      placement.address = fabric->address(index);
      placement.wrapper = fabric->Wrapper(index);
    }
    if (env) {
      if (auto it = env->find(id); it != env->end()) placement.env = it->second;
    }
    return placement;
  };
}

void Recorder::Add(Decision decision) {
  decision.at_ms = NowMs();
  std::lock_guard lock(mutex_);
  decision.phase = phase_;
  decisions_.push_back(std::move(decision));
}

void Recorder::SetPhase(std::string phase) {
  std::lock_guard lock(mutex_);
  phase_ = std::move(phase);
}

std::vector<Decision> Recorder::Snapshot() const {
  std::lock_guard lock(mutex_);
  return decisions_;
}

int64_t Recorder::NowMs() const {
  return std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start_).count();
}

KeyFigures Figure(const std::vector<Decision>& decisions, const std::string& key, uint64_t limit) {
  KeyFigures f;
  f.key = key;
  f.limit = limit;
  std::set<uint64_t> answered;  // remaining values admitted answers gave
  for (const auto& d : decisions) {
    if (d.key != key) continue;
    ++f.checks;
    if (d.failed()) {
      ++f.failed;
      if (d.expect != Expect::kRefused) ++f.failed_maybe_charged;
      continue;
    }
    ++f.answered;
    if (!d.allowed) continue;
    ++f.admitted;
    if (d.phase == kAftermath) ++f.admitted_after_heal;
    if (!answered.insert(d.remaining).second) ++f.rollbacks;
  }
  return f;
}

std::vector<EntryShare> Shares(const std::vector<Decision>& decisions) {
  std::vector<EntryShare> out;
  std::map<std::pair<std::string, std::string>, size_t> index;  // (phase, entry) -> position in out
  for (const Decision& d : decisions) {
    auto [it, added] = index.try_emplace({d.phase, d.entry}, out.size());
    if (added) {
      out.emplace_back();
      out.back().phase = d.phase;
      out.back().entry = d.entry;
    }
    EntryShare& s = out[it->second];
    ++s.checks;
    switch (d.expect) {
      case Expect::kAnswered:
        ++s.expected;
        if (!d.failed()) ++s.answered;
        break;
      case Expect::kMayRefuse:
        ++s.may_refuse;
        s.why.insert(d.why);
        break;
      case Expect::kRefused:
        ++s.must_refuse;
        if (d.failed()) ++s.refused;
        s.why.insert(d.why);
        break;
    }
  }
  return out;
}

std::vector<std::string> AvailabilityFailures(const std::vector<EntryShare>& shares,
                                              const std::vector<KeyFigures>& keys, double min_share) {
  std::vector<std::string> out;
  for (const EntryShare& s : shares) {
    if (s.share() < min_share) {
      out.push_back("phase \"" + s.phase + "\" at " + s.entry + ": answered " + std::to_string(s.answered) +
                    " of " + std::to_string(s.expected) + " expected answered (share " +
                    std::to_string(s.share()) + " < " + std::to_string(min_share) + ")");
    }
    if (s.refused != s.must_refuse) {
      out.push_back("phase \"" + s.phase + "\" at " + s.entry + ": " +
                    std::to_string(s.must_refuse - s.refused) + " of " + std::to_string(s.must_refuse) +
                    " checks expected refused were answered");
    }
  }
  for (const KeyFigures& k : keys) {
    if (k.admitted < k.floor()) {
      out.push_back(k.key + ": admitted " + std::to_string(k.admitted) + " < floor " +
                    std::to_string(k.floor()) + " (min(limit " + std::to_string(k.limit) + ", answered " +
                    std::to_string(k.answered) + ") - failed checks that may have been charged " +
                    std::to_string(k.failed_maybe_charged) + ")");
    }
  }
  return out;
}

std::string DescribeShares(const std::vector<EntryShare>& shares) {
  std::string out = "answered share (phase, entry: answered/expected, left out, refused/expected refused):\n";
  for (const EntryShare& s : shares) {
    out += "  " + s.phase + ", " + s.entry + ": " + std::to_string(s.answered) + "/" +
           std::to_string(s.expected) + ", " + std::to_string(s.may_refuse) + ", " +
           std::to_string(s.refused) + "/" + std::to_string(s.must_refuse);
    for (const std::string& why : s.why) out += " [" + why + "]";
    out += "\n";
  }
  return out;
}

bool ClosedMode(const std::vector<std::string>& args) {
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--failure-mode" && args[i + 1] == "closed") return true;
  }
  for (const std::string& arg : args) {
    if (arg == "--failure-mode=closed") return true;
  }
  return false;
}

std::vector<std::string> BaseNodeArgs(milliseconds suspicion) {
  std::vector<std::string> args = {
      "--threads",          "2",  "--probe-interval-ms",    "100",
      "--probe-timeout-ms", "50", "--suspicion-timeout-ms", std::to_string(suspicion.count())};
  for (auto& flag : Split(getenv("RINGLIMIT_GRAY_NODE_FLAGS"))) args.push_back(std::move(flag));
  return args;
}

const std::vector<std::string>& ScenarioNames() {
  static const std::vector<std::string> names = {"owner_paused_past_detection",
                                                 "owner_paused_within_detection",
                                                 "two_holders_stalled",
                                                 "partial_partition",
                                                 "half_cut_link",
                                                 "isolated_minority",
                                                 "holders_cut_off",
                                                 "clock_skew_plus_1h",
                                                 "clock_skew_minus_1h",
                                                 "clock_skew_plus_1d",
                                                 "forward_retried"};
  return names;
}

std::optional<std::string> Unsupported(const std::string& name) {
  if (name == "partial_partition" || name == "half_cut_link" || name == "isolated_minority" ||
      name == "holders_cut_off") {
    return NetnsFabric::Unsupported();
  }
  if (name.rfind("clock_skew", 0) == 0 && FaketimeEnv("+0").empty()) {
    return std::string("libfaketime is not installed (apt-get install faketime; scripts/bootstrap)");
  }
  return std::nullopt;
}

std::optional<std::string> RequiredButUnsupported(const std::string& name) {
  auto why = Unsupported(name);
  const char* required = std::getenv("RINGLIMIT_REQUIRE_ROOT_SCENARIOS");
  if (!why || required == nullptr || std::string(required) != "1") return std::nullopt;
  return "scenario " + name + " cannot run here: " + *why +
         ". RINGLIMIT_REQUIRE_ROOT_SCENARIOS=1 (set by scripts/test) requires every gray scenario: run as "
         "root "
         "with ip, nft and libfaketime (scripts/bootstrap), or unset it to skip";
}

Result<ScenarioResult> RunScenario(const std::string& name, const ScenarioOptions& options) {
  if (name == "owner_paused_past_detection") return OwnerPausedPastDetection(options);
  if (name == "owner_paused_within_detection") return OwnerPausedWithinDetection(options);
  if (name == "two_holders_stalled") return TwoHoldersStalled(options);
  if (name == "partial_partition") return PartialPartition(options);
  if (name == "half_cut_link") return HalfCutLink(options);
  if (name == "isolated_minority") return IsolatedMinority(options);
  if (name == "holders_cut_off") return HoldersCutOff(options);
  if (name == "clock_skew_plus_1h") return ClockSkew("+1h", 3'600'000, options);
  if (name == "clock_skew_minus_1h") return ClockSkew("-1h", -3'600'000, options);
  if (name == "clock_skew_plus_1d") return ClockSkew("+1d", 86'400'000, options);
  if (name == "forward_retried") return ForwardRetried(options);
  return Error<ScenarioResult>("unknown scenario " + name);
}

}  // namespace ringlimit::testing::gray
