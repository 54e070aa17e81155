// nemesis: a ringlimit cluster of real ringlimitd processes under concurrent clients for N minutes while
// a seeded schedule injects random faults, recording every decision (issue 13, "A nemesis run").
//
//   build/release/bench/nemesis/nemesis --minutes 2 --seed 1
//   build/release/bench/nemesis/nemesis --minutes 30 --seed 7 --record decisions.csv
//
// Fault classes (each picked uniformly among those this machine supports, or those --classes names):
//   kill       SIGKILL a node, wait until the others declare it dead, start it again (same id, peer port)
//   pause      SIGSTOP a node for 1-4 s, then SIGCONT
//   partition  cut a random minority from the rest (both directions, network namespaces) for 3-8 s, heal
//   skew       kill a node and restart it under libfaketime, its wall clock +-1 h; one node at a time: while
//              one is skewed, the next skew fault gives it its right clock back the same way. Verified:
//              another node measures the restarted node's clock at the offset injected (GET /v1/cluster),
//              else the fault does not count.
//   add        start one more node (up to --max-nodes)
//   remove     a node leaves gracefully (POST /v1/cluster/leave) down to --nodes - 1 members
// Between faults the cluster runs fault-free for 2-5 s; after each fault it is given a bounded time to
// converge.
//
// Clients: --clients threads, each checking a random key of the current generation (--keys keys, token
// bucket, --limit per day: nothing refills during a run) through a random running node. Every fault starts a
// new generation of keys, so each fault hits keys with their budget left (two deciders splitting a live
// budget show as rollbacks or over-admissions), and the keys of earlier generations, spent, keep being
// checked by nobody -- a lost count on them shows only within their generation. Every decision is labelled
// with the fault class in progress or, between faults, the last one before ("none" before the first fault).
//
// The report, per class: faults injected, checks, over-admissions (an admission beyond a key's limit counts
// to the label of its answer), rollbacks (an admitted answer whose remaining an earlier admitted answer of
// the key already gave: with cost 1 and nothing refilling, an exact counter gives each value once, whatever
// the order concurrent answers are recorded in), failed requests, the answered share (answered checks, 200
// allowed or denied, among those expected answered; the lowest entry node's share), the keys meeting their
// floor, and the admissions on live keys during the faults themselves.
//   expected answered: every check but those the fault may refuse, each with its reason -- sent to a node
//     being killed, paused, restarted or leaving; under --failure-mode closed, sent during a partition to the
//     cut-off minority, or to the majority for a key with two of its three holders cut off until the majority
//     declared them dead. A node whose clock is skewed decides nothing but passes its checks on (issue 35
//     item 4): its checks are expected answered once it has restarted; at least one must have been sent to
//     it, and none answered 503 clock_offset (the code is gone).
//   refused: under --failure-mode closed, every check sent to a cut-off minority once all of it had stopped
//     deciding (polled during the cut) and answered before the heal.
//   floor: per key, admitted >= min(limit, answered) - failed checks that may have been charged - slack
//     (nothing refills, every check costs 1: until the key is spent every answered check is admitted). The
//     slack is 0 for keys whose generation saw no node go away or stop answering (none, add). Otherwise a
//     forwarded check whose answer was lost with the node that charged it is retried at the key's next
//     holder and charged there again, since the dedup cache is per node (docs/architecture.md, Known
//     limits): the slack is the key's answered checks that may have been retried so -- those answered no
//     sooner than the forward timeout after they were sent (an attempt cut off by a partition or a pause
//     is given up only then) -- and at least 1 (a killed node's connection fails at once, so its retry is
//     not slow). Seen: one key 19 of 20 in the remove class in 2 of about 10 runs (2026-11-27); two keys
//     of a partition 2 under their floor with a slack of 1 in 1 of about 10 runs of seed 1 (2026-12-07).
// The run fails (exit 3) when a class of --exact over-admitted or rolled back (more often than --max-lost-for
// allows: in the default mode a killed owner takes its admissions not yet replicated with it, and its
// successor gives their remaining values again -- a rollback each, an over-admission each once the key is
// spent), when a share is below --min-answered (default 0.99) at an entry node, when a key is below its
// floor, or when fewer faults of a class were injected than --min-faults asks; it fails at once (exit 4) when
// a class named in --exact, --min-faults or --classes cannot run here.
//
// Partitions need root (network namespaces, nftables: tests/support/netns.h); skew needs libfaketime.
// Without them those classes are left out (printed), unless --exact, --min-faults or --classes names them.
// scripts/test runs 2 minutes of it with --replication sync --failure-mode closed, asserting the classes
// promised exact there (--exact) and at least one fault of each class (--min-faults); its mutation stage
// runs short ones against the deliberate bugs of node/forward/mutation.h, expecting them to fail
// (CMakeLists.txt).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/cluster/cluster_harness.h"
#include "tests/cluster/cluster_test_util.h"
#include "tests/gray/gray_scenarios.h"
#include "tests/support/faketime.h"
#include "tests/support/netns.h"

namespace {

using namespace ringlimit::testing;
using namespace ringlimit::testing::gray;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kAdminToken[] = "nemesis-secret";
constexpr milliseconds kRecoverBound{30'000};
constexpr milliseconds kDeadBound{15'000};
constexpr const char* kClasses[] = {"kill", "pause", "partition", "skew", "add", "remove"};

struct Flags {
  double minutes = 2;
  uint64_t seed = 1;
  size_t nodes = 5;
  size_t max_nodes = 7;
  int clients = 4;
  int keys = 500;
  uint64_t limit = 20;
  std::string record;
  std::set<std::string> classes;  // the fault classes the schedule draws from; empty: every one (kClasses)
  std::set<std::string> exact;    // classes promised exact: any over-admission or rollback fails the run
  std::map<std::string, int> min_faults;    // class -> faults the run must inject at least
  std::map<std::string, int> max_lost_for;  // class of --exact -> over-admissions, and rollbacks, allowed
  double min_answered = kAnsweredShare;     // per class and entry node, among checks expected answered
  std::map<std::string, double> min_answered_for;  // class -> its own threshold instead of min_answered
};

// The reason a failed check gives, for the report: its error code and the last clause of its message (no
// key names), or the transport error.
std::string FailureReason(const Decision& d) {
  if (d.status == 0) return "transport: " + d.error.substr(0, 60);
  const auto message = d.error.find("\"message\":\"");
  std::string text = message == std::string::npos ? d.error : d.error.substr(message + 11);
  if (const auto end = text.find("\"}"); end != std::string::npos) text.resize(end);
  if (const auto clause = text.rfind(": "); clause != std::string::npos) text = text.substr(clause + 2);
  return std::to_string(d.status) + " " + d.code + ": " + text.substr(0, 90);
}

// The nodes' --forward-timeout-ms: `args`' or the node's default (ForwarderOptions::timeout,
// node/forward/forwarder.h).
int64_t ForwardTimeoutMs(const std::vector<std::string>& args) {
  int64_t ms = 500;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--forward-timeout-ms" && i + 1 < args.size()) ms = std::atoll(args[i + 1].c_str());
    if (args[i].rfind("--forward-timeout-ms=", 0) == 0) ms = std::atoll(args[i].c_str() + 21);
  }
  return ms;
}

// A fault as it happened, for the checker: when, which nodes it hit, what the cluster saw.
struct FaultWindow {
  std::string fault;
  int generation = 0;
  int64_t start_ms = 0;
  int64_t end_ms = 0;                                     // once recovered (converged) after it
  std::set<std::string> hit;                              // nodes killed, paused, restarted or leaving
  std::set<std::string> isolated;                         // a partition's cut-off side
  std::optional<int64_t> dead_ms;                         // when the majority saw every isolated node dead
  std::optional<int64_t> fenced_ms;                       // when every isolated node had stopped deciding
  int64_t healed_ms = 0;                                  // when the cut was lifted
  std::shared_ptr<const ringlimit::ring::RingView> ring;  // the ring when the partition began
};

// When a node ran with a skewed clock.
struct SkewSpan {
  std::string id;
  int64_t from_ms = 0;
  int64_t to_ms = INT64_MAX;
};

// Where the clients send their checks: the running nodes, republished by the nemesis after each step.
// Thread safety: all methods are safe for concurrent use.
class Targets {
 public:
  struct Target {
    std::string id;
    std::string host;
    uint16_t port = 0;
  };
  void Publish(std::vector<Target> targets) {
    std::lock_guard lock(mutex_);
    targets_ = std::move(targets);
  }
  std::vector<Target> Get() const {
    std::lock_guard lock(mutex_);
    return targets_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Target> targets_;  // guarded by mutex_
};

class Nemesis {
 public:
  explicit Nemesis(Flags flags) : flags_(std::move(flags)), random_(flags_.seed) {}

  int Run() {
    for (const std::string& name : flags_.classes) {
      if (std::find(std::begin(kClasses), std::end(kClasses), name) == std::end(kClasses)) {
        std::printf("FAIL: --classes names %s, which is not a fault class\n", name.c_str());
        return 4;
      }
    }
    // A class --classes leaves out is not set up at all: without partition, no network namespaces (no root).
    if (Drawn("partition")) {
      if (auto why = NetnsFabric::Unsupported()) {
        if (Requested("partition")) {
          std::printf(
              "FAIL: partition is asked for (--exact, --min-faults or --classes) but cannot run: %s\n",
              why->c_str());
          return 4;
        }
        std::printf("partition: left out (%s)\n", why->c_str());
      } else {
        auto fabric = NetnsFabric::Create(flags_.max_nodes);
        if (!fabric) {
          std::fprintf(stderr, "network namespaces: %s\n", fabric.error().c_str());
          return 1;
        }
        fabric_ = std::move(*fabric);
        classes_.push_back("partition");
      }
    }
    for (const char* name : {"kill", "pause", "add", "remove"}) {
      if (Drawn(name)) classes_.push_back(name);
    }
    if (Drawn("skew")) {
      if (!FaketimeEnv("+0").empty()) {
        classes_.push_back("skew");
      } else if (Requested("skew")) {
        std::printf(
            "FAIL: skew is asked for (--exact, --min-faults or --classes) but libfaketime is not "
            "installed\n");
        return 4;
      } else {
        std::printf("skew: left out (libfaketime is not installed)\n");
      }
    }
    for (const auto& [name, count] : flags_.min_faults) {
      if (count > 0 && std::find(classes_.begin(), classes_.end(), name) == classes_.end()) {
        std::printf("FAIL: --min-faults names %s, which is not a fault class of this run\n", name.c_str());
        return 4;
      }
    }

    ClusterOptions options;
    options.nodes = static_cast<int>(flags_.nodes);
    options.args = BaseNodeArgs();
    options.args.insert(options.args.end(), {"--admin-token", kAdminToken});
    options.placement = Placement(fabric_.get(), env_);
    auto cluster = Cluster::Start(std::move(options));
    if (!cluster) {
      std::fprintf(stderr, "cluster did not start: %s\n", cluster.error().c_str());
      return 1;
    }
    cluster_ = std::move(*cluster);
    Publish();

    recorder_.SetPhase("none");
    std::vector<std::thread> clients;
    for (int c = 0; c < flags_.clients; ++c) {
      clients.emplace_back([this, c] { Client(flags_.seed * 1000 + static_cast<uint64_t>(c)); });
    }
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double, std::ratio<60>>(flags_.minutes));
    while (Clock::now() < end) {
      Hold(milliseconds(Uniform(2000, 5000)));
      if (Clock::now() >= end) break;
      const std::string fault = NextFault();
      recorder_.SetPhase(fault);
      FaultWindow window;
      window.fault = fault;
      window.generation = generation_.fetch_add(1) + 1;  // fresh keys from now on
      window.start_ms = recorder_.NowMs();
      window_ = &window;
      if (Inject(fault)) ++injected_[fault];
      Recover();
      window.end_ms = recorder_.NowMs();
      window_ = nullptr;
      windows_.push_back(std::move(window));
      // Decisions until the next fault still count to this one: a counter lost during it shows when its key
      // admits again later.
    }
    stop_ = true;
    for (auto& t : clients) t.join();
    for (size_t i : paused_) (void)cluster_->node(i).Signal(SIGCONT);
    for (SkewSpan& span : skews_) span.to_ms = std::min(span.to_ms, recorder_.NowMs());
    const bool kept = Report();
    cluster_.reset();  // before the fabric: the nodes leave their namespaces first
    return kept ? 0 : 3;
  }

 private:
  int Uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(random_); }

  // Whether the schedule may draw `fault` (every class unless --classes names some).
  bool Drawn(const std::string& fault) const {
    return flags_.classes.empty() || flags_.classes.count(fault) != 0;
  }

  // Whether the run asks for `fault`: it then fails at once if the class cannot run here.
  bool Requested(const std::string& fault) const {
    auto min = flags_.min_faults.find(fault);
    return flags_.exact.count(fault) != 0 || flags_.classes.count(fault) != 0 ||
           (min != flags_.min_faults.end() && min->second > 0);
  }

  // The next fault: one of the classes still short of --min-faults while any is (an attempt that could not
  // inject, e.g. add at --max-nodes, does not count), else any class.
  std::string NextFault() {
    std::vector<std::string> short_of;
    for (const std::string& c : classes_) {
      auto min = flags_.min_faults.find(c);
      if (min != flags_.min_faults.end() && injected_[c] < min->second) short_of.push_back(c);
    }
    const auto& pool = short_of.empty() ? classes_ : short_of;
    return pool[Uniform(0, static_cast<int>(pool.size()) - 1)];
  }

  // Marks node i as hit by the fault in progress (its checks may fail meanwhile).
  void Hit(size_t i) {
    if (window_ != nullptr) window_->hit.insert(cluster_->id(i));
  }

  static void Hold(milliseconds period) {
    const auto until = Clock::now() + period;
    (void)WaitFor("the schedule's period", period + milliseconds(1000),
                  [&](std::string*) { return Clock::now() >= until; });
  }

  // Tells the clients the running nodes, less the paused ones and those about to be faulted (hidden_).
  void Publish() {
    std::vector<Targets::Target> targets;
    for (size_t i : cluster_->Running()) {
      if (paused_.count(i) == 0 && hidden_.count(i) == 0) {
        targets.push_back({cluster_->id(i), cluster_->host(i), cluster_->http_port(i)});
      }
    }
    targets_.Publish(std::move(targets));
  }

  // Clients stop picking node i (checks already sent to it stay in flight): the nemesis is about to stop it.
  void Hide(size_t i) {
    hidden_.insert(i);
    Publish();
  }
  void Show(size_t i) {
    hidden_.erase(i);
    Publish();
  }

  void Client(uint64_t seed) {
    std::mt19937_64 random(seed);
    std::map<std::string, std::unique_ptr<HttpClient>> connections;  // by "host:port"
    while (!stop_) {
      const auto targets = targets_.Get();
      if (targets.empty()) continue;
      const auto& target = targets[random() % targets.size()];
      auto& client = connections[target.host + ":" + std::to_string(target.port)];
      if (!client) client = std::make_unique<HttpClient>(target.host, target.port, milliseconds(5000));
      const std::string key = "nemesis-" + std::to_string(generation_.load()) + "-" +
                              std::to_string(random() % static_cast<uint64_t>(flags_.keys));
      const int64_t sent_ms = recorder_.NowMs();
      Decision d = CheckOnce(*client, target.id, key, flags_.limit);
      d.sent_ms = sent_ms;
      recorder_.Add(std::move(d));
    }
  }

  // A running node (not paused), or nullopt.
  std::optional<size_t> PickRunning() {
    std::vector<size_t> candidates;
    for (size_t i : cluster_->Running()) {
      if (paused_.count(i) == 0 && hidden_.count(i) == 0) candidates.push_back(i);
    }
    if (candidates.empty()) return std::nullopt;
    return candidates[Uniform(0, static_cast<int>(candidates.size()) - 1)];
  }

  void Note(const std::string& fault, const std::string& text) {
    std::printf("[%7.1f s] %s: %s\n", static_cast<double>(recorder_.NowMs()) / 1000, fault.c_str(),
                text.c_str());
    std::fflush(stdout);
  }

  // Kills node i, waits until the others see it dead, starts it again (with env_'s environment).
  bool KillAndRestart(const std::string& fault, size_t i) {
    Hit(i);
    Hide(i);
    if (auto killed = cluster_->Kill(i); !killed) {
      Note(fault, "kill " + cluster_->id(i) + " failed: " + killed.error());
      Show(i);
      return false;
    }
    (void)cluster_->WaitSeenAs(i, {"dead"}, true, kDeadBound);
    auto restarted = cluster_->Restart(i);
    Show(i);
    if (!restarted) {
      Note(fault, "restart " + cluster_->id(i) + " failed: " + restarted.error().substr(0, 300));
      return false;
    }
    return true;
  }

  bool Inject(const std::string& fault) {
    if (fault == "kill") {
      auto i = PickRunning();
      if (!i) return false;
      Note(fault, cluster_->id(*i));
      return KillAndRestart(fault, *i);
    }
    if (fault == "pause") {
      auto i = PickRunning();
      if (!i) return false;
      const int period = Uniform(1000, 4000);
      Note(fault, cluster_->id(*i) + " for " + std::to_string(period) + " ms");
      Hit(*i);
      Hide(*i);
      if (!cluster_->node(*i).Signal(SIGSTOP)) {
        Show(*i);
        return false;
      }
      paused_.insert(*i);
      hidden_.erase(*i);
      Hold(milliseconds(period));
      (void)cluster_->node(*i).Signal(SIGCONT);
      paused_.erase(*i);
      Publish();
      return true;
    }
    if (fault == "partition") {
      auto running = cluster_->Running();
      std::shuffle(running.begin(), running.end(), random_);
      const size_t minority = static_cast<size_t>(Uniform(1, static_cast<int>((running.size() - 1) / 2)));
      std::vector<size_t> side(running.begin(), running.begin() + static_cast<long>(minority));
      const int period = Uniform(3000, 8000);
      std::string ids;
      for (size_t i : side) ids += cluster_->id(i) + " ";
      Note(fault, ids + "cut off for " + std::to_string(period) + " ms");
      const std::vector<size_t> majority(running.begin() + static_cast<long>(minority), running.end());
      if (auto view = FetchClusterView(cluster_->host(majority[0]), cluster_->http_port(majority[0]))) {
        window_->ring = RingOfAlive(*view);
      }
      for (size_t i : side) window_->isolated.insert(cluster_->id(i));
      if (auto cut = fabric_->Isolate(side); !cut) {
        Note(fault, cut.error());
        return false;
      }
      // Held for the period, polling when the majority sees the whole minority dead and when the whole
      // minority stops deciding (its quorum fence under closed).
      const auto until = Clock::now() + milliseconds(period);
      (void)WaitFor("the partition's period", milliseconds(period + 5000), [&](std::string*) {
        if (Clock::now() >= until) return true;
        if (!window_->fenced_ms) {
          bool fenced = true;
          for (size_t i : side) {
            auto view = FetchClusterView(cluster_->host(i), cluster_->http_port(i));
            fenced = fenced && view && !view->deciding;
          }
          if (fenced) window_->fenced_ms = recorder_.NowMs();
        }
        if (window_->dead_ms) return false;
        for (size_t j : majority) {
          auto view = FetchClusterView(cluster_->host(j), cluster_->http_port(j));
          if (!view) return false;
          for (size_t i : side) {
            const MemberView* member = view->Find(cluster_->id(i));
            if (member != nullptr && member->state != "dead" && member->state != "left") return false;
          }
        }
        window_->dead_ms = recorder_.NowMs();
        return false;
      });
      if (!window_->dead_ms) Note(fault, "the majority did not see the minority dead within the cut");
      window_->healed_ms = recorder_.NowMs();
      if (auto healed = fabric_->HealAll(); !healed) Note(fault, healed.error());
      // Healed, the minority rejoins (it was declared dead): its checks may fail until it has recovered.
      for (size_t i : side) Hit(i);
      return true;
    }
    if (fault == "skew") {
      // One skewed node at a time: while one is, the fault gives it its right clock back. (Two nodes skewed
      // the opposite ways made right-clocked nodes refuse too -- "more than half of them beyond" -- in a run
      // of 2026-11-27: outside what the max-offset rule promises, ring/clock_offset.h.)
      std::optional<size_t> i;
      for (size_t j : cluster_->Running()) {
        if (env_->count(cluster_->id(j)) != 0 && paused_.count(j) == 0) i = j;
      }
      if (!i) i = PickRunning();
      if (!i) return false;
      const std::string id = cluster_->id(*i);
      const bool skewing = env_->count(id) == 0;
      double offset_ms = 0;
      if (!skewing) {
        env_->erase(id);
        Note(fault, id + " back to the right clock");
      } else {
        const bool ahead = Uniform(0, 1) == 0;
        offset_ms = ahead ? 3'600'000 : -3'600'000;
        (*env_)[id] = FaketimeEnv(ahead ? "+1h" : "-1h");
        Note(fault, id + " restarted with its clock " + (ahead ? "+1h" : "-1h"));
      }
      const int64_t killed_ms = recorder_.NowMs();
      if (!KillAndRestart(fault, *i)) return false;
      // The fault, verified: another node measures the restarted node's clock at the offset injected.
      auto measured = WaitFor(id + "'s clock measured", kDeadBound, [&](std::string* last) {
        for (size_t j : cluster_->Running()) {
          if (j == *i || paused_.count(j) != 0 || env_->count(cluster_->id(j)) != 0) continue;
          auto view = FetchClusterView(cluster_->host(j), cluster_->http_port(j));
          const MemberView* member = view ? view->Find(id) : nullptr;
          if (member == nullptr || !member->clock_offset_ms) continue;
          *last = cluster_->id(j) + " measures " + std::to_string(*member->clock_offset_ms) + " ms";
          return std::abs(*member->clock_offset_ms - offset_ms) < 1000;
        }
        return false;
      });
      if (!measured) {
        Note(fault, "not counted: " + measured.error().substr(0, 300));
        return false;
      }
      if (skewing) {
        skews_.push_back({.id = id, .from_ms = killed_ms});
      } else {
        for (SkewSpan& span : skews_) {
          if (span.id == id) span.to_ms = std::min(span.to_ms, recorder_.NowMs());
        }
      }
      return true;
    }
    if (fault == "add") {
      if (cluster_->size() >= flags_.max_nodes) return false;
      auto added = cluster_->AddNode();
      if (!added) {
        Note(fault, "failed: " + added.error().substr(0, 300));
        return false;
      }
      Note(fault, cluster_->id(*added));
      Hit(*added);  // joining: its checks may fail until it has converged
      Publish();
      return true;
    }
    if (fault == "remove") {
      if (cluster_->Running().size() + 1 <= flags_.nodes) return false;
      auto i = PickRunning();
      if (!i) return false;
      Note(fault, cluster_->id(*i) + " leaves");
      Hit(*i);
      Hide(*i);
      HttpClient client(cluster_->host(*i), cluster_->http_port(*i), milliseconds(10'000));
      auto left =
          client.Post("/v1/cluster/leave", "", {{"Authorization", std::string("Bearer ") + kAdminToken}});
      if (!left || left->result_int() / 100 != 2) {
        Note(fault, "leave refused");
        Show(*i);
        return false;
      }
      (void)cluster_->node(*i).WaitExit(milliseconds(30'000));
      if (cluster_->node(*i).running()) (void)cluster_->Kill(*i);
      Show(*i);  // no longer running: Publish leaves it out
      return true;
    }
    return false;
  }

  void Recover() {
    if (auto converged = cluster_->WaitConverged(kRecoverBound); !converged) {
      Note("recovery", "did not converge within 30 s");
    }
    Publish();
  }

  struct ClassFigures {
    int64_t checks = 0, over = 0, rollbacks = 0, failed = 0;
    int64_t expected = 0, answered = 0, may_refuse = 0;
    int64_t live_admitted = 0;  // admitted during the fault itself, on the keys it started with
    int64_t must_refuse = 0, answered_must_refuse = 0;            // MustRefuse, and of those answered
    std::map<std::string, std::pair<int64_t, int64_t>> by_entry;  // entry -> (answered, expected)
    std::set<std::string> why;
    std::map<std::string, int64_t> failures;  // expected answered but failed: FailureReason -> count
    // The lowest answered share among its entry nodes (1 when nothing was expected answered).
    [[nodiscard]] double min_share(std::string* entry = nullptr) const {
      double low = 1.0;
      for (const auto& [id, counts] : by_entry) {
        if (counts.second == 0) continue;
        const double share = static_cast<double>(counts.first) / static_cast<double>(counts.second);
        if (share < low) {
          low = share;
          if (entry != nullptr) *entry = id;
        }
      }
      return low;
    }
  };

  struct KeyCounts {
    std::string fault;  // the class of the generation's fault ("none" for generation 0)
    int64_t admitted = 0, answered = 0, failed_maybe_charged = 0;
    int64_t slow = 0;              // answered checks that may have been retried at another node (see "floor")
    std::set<uint64_t> remaining;  // values admitted answers gave
  };

  // Why check `d` may be refused, or "" when it must be answered (see the header).
  // Whether `d` must be refused: sent to a partition's cut-off minority under closed once all of it had
  // stopped deciding, and answered before the heal.
  bool MustRefuse(const Decision& d, bool closed) const {
    if (!closed) return false;
    for (const FaultWindow& w : windows_) {
      if (w.isolated.count(d.entry) != 0 && w.fenced_ms && d.sent_ms >= *w.fenced_ms &&
          d.at_ms < w.healed_ms) {
        return true;
      }
    }
    return false;
  }

  std::string MayRefuse(const Decision& d, bool closed) const {
    for (const FaultWindow& w : windows_) {
      if (d.at_ms < w.start_ms || d.sent_ms > w.end_ms) continue;
      if (closed && w.isolated.count(d.entry) != 0) return "entry node in the cut-off minority (closed)";
      if (w.hit.count(d.entry) != 0)
        return "entry node hit by the " + w.fault + " (killed, paused, restarted, joining or leaving)";
      if (!closed || w.isolated.empty()) continue;
      if (w.ring && (!w.dead_ms || d.sent_ms < *w.dead_ms)) {
        int cut = 0;
        for (const std::string& holder : PreferenceOf(*w.ring, d.key, 3)) cut += w.isolated.count(holder);
        if (cut >= 2) return "key's holders' majority cut off, not yet declared dead (closed)";
      }
    }
    return "";
  }

  // Whether `d` entered a node while its clock was skewed.
  bool AtSkewedNode(const Decision& d) const {
    for (const SkewSpan& span : skews_) {
      if (span.id == d.entry && d.at_ms >= span.from_ms && d.sent_ms <= span.to_ms) return true;
    }
    return false;
  }

  // Prints the table; false when a check of the run failed (see the header).
  bool Report() {
    const auto decisions = recorder_.Snapshot();
    const bool closed = ClosedMode(BaseNodeArgs());
    const int64_t forward_timeout_ms = ForwardTimeoutMs(BaseNodeArgs());
    std::map<std::string, ClassFigures> by_class;
    std::map<std::string, KeyCounts> keys;
    std::map<int, const FaultWindow*> by_generation;
    for (const FaultWindow& w : windows_) by_generation[w.generation] = &w;
    int64_t skewed_checks = 0, skewed_expected = 0, skewed_answered = 0, skewed_clock_offset = 0;
    for (const auto& d : decisions) {
      auto& f = by_class[d.phase];
      ++f.checks;
      KeyCounts& k = keys[d.key];
      const int generation = std::atoi(d.key.c_str() + std::strlen("nemesis-"));
      const FaultWindow* w = by_generation.count(generation) != 0 ? by_generation[generation] : nullptr;
      k.fault = w != nullptr ? w->fault : "none";
      const std::string why = MayRefuse(d, closed);
      if (AtSkewedNode(d)) {
        ++skewed_checks;
        skewed_clock_offset += d.code == "clock_offset" ? 1 : 0;
        if (why.empty()) {
          ++skewed_expected;
          skewed_answered += d.failed() ? 0 : 1;
        }
      }
      if (why.empty()) {
        ++f.expected;
        auto& entry = f.by_entry[d.entry];
        ++entry.second;
        if (!d.failed()) {
          ++f.answered;
          ++entry.first;
        } else {
          ++f.failures[FailureReason(d)];
        }
      } else {
        ++f.may_refuse;
        f.why.insert(why);
        if (MustRefuse(d, closed)) {
          ++f.must_refuse;
          if (!d.failed()) ++f.answered_must_refuse;
        }
      }
      if (d.failed()) {
        ++f.failed;
        ++k.failed_maybe_charged;
        continue;
      }
      ++k.answered;
      if (d.at_ms - d.sent_ms >= forward_timeout_ms) ++k.slow;
      if (!d.allowed) continue;
      if (++k.admitted > static_cast<int64_t>(flags_.limit)) ++f.over;
      if (!k.remaining.insert(d.remaining).second) ++f.rollbacks;
      if (w != nullptr && d.sent_ms >= w->start_ms && d.at_ms <= w->end_ms) ++f.live_admitted;
    }
    std::map<std::string, std::pair<int64_t, int64_t>>
        floors;  // class of the keys' generation -> (met, keys)
    std::vector<std::string> below_floor;
    for (const auto& [key, k] : keys) {
      const int64_t slack =
          k.fault == "none" || k.fault == "add" ? 0 : std::max<int64_t>(1, k.slow);  // see "floor" above
      const int64_t floor =
          std::max<int64_t>(0, std::min<int64_t>(static_cast<int64_t>(flags_.limit), k.answered) -
                                   k.failed_maybe_charged - slack);
      auto& [met, total] = floors[k.fault];
      ++total;
      if (k.admitted >= floor) {
        ++met;
      } else if (below_floor.size() < 10) {
        below_floor.push_back(
            key + " (" + k.fault + "): admitted " + std::to_string(k.admitted) + " < floor " +
            std::to_string(floor) + " (answered " + std::to_string(k.answered) + ", failed " +
            std::to_string(k.failed_maybe_charged) + ", slack " + std::to_string(slack) + ")");
      }
    }
    std::printf(
        "\nnemesis: %.1f min, seed %llu, %zu nodes (up to %zu), %d clients, %d keys x %llu per day per "
        "fault, %s mode\n",
        flags_.minutes, static_cast<unsigned long long>(flags_.seed), flags_.nodes, flags_.max_nodes,
        flags_.clients, flags_.keys, static_cast<unsigned long long>(flags_.limit),
        closed ? "closed" : "default");
    std::printf("| %-9s | %6s | %8s | %4s | %9s | %6s | %8s | %8s | %11s | %12s |\n", "fault", "faults",
                "checks", "over", "rollbacks", "failed", "answered", "lowest", "floor met", "live admits");
    std::printf(
        "|-----------|--------|----------|------|-----------|--------|----------|----------|-------------|"
        "--------------|\n");
    ClassFigures total;
    std::pair<int64_t, int64_t> total_floor;
    bool kept = true;
    std::vector<std::string> failures;
    for (const auto& [name, f] : by_class) {
      std::string lowest_entry;
      const double lowest = f.min_share(&lowest_entry);
      const double share =
          f.expected == 0 ? 1.0 : static_cast<double>(f.answered) / static_cast<double>(f.expected);
      const auto keys_met = floors[name];
      std::printf(
          "| %-9s | %6d | %8lld | %4lld | %9lld | %6lld | %7.3f%% | %7.3f%% | %5lld/%-5lld | %12lld |\n",
          name.c_str(), injected_.count(name) ? injected_[name] : 0, static_cast<long long>(f.checks),
          static_cast<long long>(f.over), static_cast<long long>(f.rollbacks),
          static_cast<long long>(f.failed), 100 * share, 100 * lowest, static_cast<long long>(keys_met.first),
          static_cast<long long>(keys_met.second), static_cast<long long>(f.live_admitted));
      total.checks += f.checks;
      total.over += f.over;
      total.rollbacks += f.rollbacks;
      total.failed += f.failed;
      total.expected += f.expected;
      total.answered += f.answered;
      total.live_admitted += f.live_admitted;
      total_floor.first += keys_met.first;
      total_floor.second += keys_met.second;
      const auto own = flags_.min_answered_for.find(name);
      const double min_answered = own != flags_.min_answered_for.end() ? own->second : flags_.min_answered;
      if (lowest < min_answered) {
        failures.push_back(name + ": " + lowest_entry + " answered " +
                           std::to_string(f.by_entry.at(lowest_entry).first) + " of " +
                           std::to_string(f.by_entry.at(lowest_entry).second) +
                           " checks expected answered (< " + std::to_string(min_answered) + ")");
      }
    }
    std::printf("| %-9s | %6s | %8lld | %4lld | %9lld | %6lld | %7.3f%% | %8s | %5lld/%-5lld | %12lld |\n",
                "total", "", static_cast<long long>(total.checks), static_cast<long long>(total.over),
                static_cast<long long>(total.rollbacks), static_cast<long long>(total.failed),
                total.expected == 0
                    ? 100.0
                    : 100.0 * static_cast<double>(total.answered) / static_cast<double>(total.expected),
                "", static_cast<long long>(total_floor.first), static_cast<long long>(total_floor.second),
                static_cast<long long>(total.live_admitted));
    std::printf(
        "answered = share of the checks expected answered that were (200); lowest = the lowest entry node's; "
        "floor met = keys (by the class of their generation) admitting at least min(limit, answered) - "
        "failed - slack (slack: the checks answered no sooner than the forward timeout, at least 1, in the "
        "classes a node goes away in); live admits = admitted during the fault on the keys it started "
        "with\n");
    for (const auto& [name, f] : by_class) {
      for (const std::string& why : f.why)
        std::printf("left out of %s's share: %s\n", name.c_str(), why.c_str());
      for (const auto& [reason, count] : f.failures) {
        std::printf("expected answered, failed in %s: %lld x %s\n", name.c_str(),
                    static_cast<long long>(count), reason.c_str());
      }
    }
    std::printf("checks entering skewed nodes: %lld, of them expected answered %lld, answered %lld\n",
                static_cast<long long>(skewed_checks), static_cast<long long>(skewed_expected),
                static_cast<long long>(skewed_answered));
    for (const auto& [name, f] : by_class) {
      if (f.must_refuse == 0) continue;
      std::printf("%s: %lld checks sent to a fenced cut-off minority, %lld of them answered\n", name.c_str(),
                  static_cast<long long>(f.must_refuse), static_cast<long long>(f.answered_must_refuse));
      if (f.answered_must_refuse != 0) {
        failures.push_back(name + ": " + std::to_string(f.answered_must_refuse) +
                           " checks answered by a cut-off minority whose quorum fence held (closed)");
      }
    }
    // A skewed node passes its checks on (issue 35 item 4): they count in the answered shares above; the
    // skew must have been tried on some, and the code a skewed node used to refuse with is gone.
    if (!skews_.empty() && skewed_expected == 0) {
      failures.push_back("skew: no check was sent to a skewed node after it restarted");
    }
    if (skewed_clock_offset != 0) {
      failures.push_back("skew: " + std::to_string(skewed_clock_offset) +
                         " checks at a skewed node answered 503 clock_offset");
    }
    for (const std::string& name : flags_.exact) {
      const ClassFigures& f = by_class[name];
      const auto allowed = flags_.max_lost_for.find(name);
      const int max_lost = allowed == flags_.max_lost_for.end() ? 0 : allowed->second;
      if (f.over <= max_lost && f.rollbacks <= max_lost) continue;
      failures.push_back(
          name + " is promised exact: " + std::to_string(f.over) + " over-admissions, " +
          std::to_string(f.rollbacks) + " rollbacks" +
          (max_lost > 0 ? " (--max-lost-for allows " + std::to_string(max_lost) + " of each)" : ""));
    }
    for (const auto& [name, count] : flags_.min_faults) {
      if (injected_[name] < count) {
        failures.push_back(name + ": " + std::to_string(injected_[name]) +
                           " faults injected, --min-faults asks " + std::to_string(count));
      }
    }
    for (const std::string& below : below_floor) failures.push_back("below the floor: " + below);
    for (const std::string& failure : failures) std::printf("FAIL: %s\n", failure.c_str());
    kept = failures.empty();
    if (!flags_.record.empty()) {
      std::ofstream out(flags_.record);
      out << "sent_ms,at_ms,fault,key,entry,status,code,allowed,remaining,owner\n";
      for (const auto& d : decisions) {
        out << d.sent_ms << ',' << d.at_ms << ',' << d.phase << ',' << d.key << ',' << d.entry << ','
            << d.status << ',' << d.code << ',' << (d.allowed ? 1 : 0) << ',' << d.remaining << ',' << d.owner
            << '\n';
      }
    }
    return kept;
  }

  Flags flags_;
  std::mt19937_64 random_;
  std::vector<std::string> classes_;
  std::shared_ptr<NodeEnvironments> env_ = std::make_shared<NodeEnvironments>();
  std::map<std::string, int> injected_;
  std::atomic<int> generation_{0};    // the clients' key generation: a new one at every fault
  FaultWindow* window_ = nullptr;     // the fault in progress (driver thread only)
  std::vector<FaultWindow> windows_;  // every fault, in order
  std::vector<SkewSpan> skews_;
  std::set<size_t> paused_;
  std::set<size_t> hidden_;  // running, not offered to the clients (see Hide)
  Recorder recorder_;
  Targets targets_;
  std::atomic<bool> stop_{false};
  // The fabric outlives the cluster (Run resets the cluster first).
  std::unique_ptr<NetnsFabric> fabric_;
  std::unique_ptr<Cluster> cluster_;
};

// Parses "CLASS=VALUE,..." into `out` (each value through `parse`); false, with a message, on a pair
// without '='.
template <class T>
bool ParsePairs(const std::string& flag, const char* value, std::map<std::string, T>& out,
                T (*parse)(const char*)) {
  std::istringstream pairs(value);
  for (std::string pair; std::getline(pairs, pair, ',');) {
    const auto eq = pair.find('=');
    if (eq == std::string::npos) {
      std::cerr << flag << ": expected CLASS=VALUE,..., got " << pair << '\n';
      return false;
    }
    out[pair.substr(0, eq)] = parse(pair.c_str() + eq + 1);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    if (arg == "--help" || arg == "-h" || value == nullptr) {
      std::cout
          << "usage: nemesis [--minutes N] [--seed S] [--nodes 5] [--max-nodes 7] [--clients 4] "
             "[--keys 500]\n"
             "               [--limit 20] [--record FILE.csv] [--exact CLASS,CLASS...]\n"
             "               [--min-faults CLASS=N,...] [--min-answered 0.99] [--classes CLASS,...]\n"
             "               [--max-lost-for CLASS=N,...] [--min-answered-for CLASS=SHARE,...]\n"
             "--classes: the fault classes the schedule draws from (default: every one this machine\n"
             "supports); one that cannot run here fails at once (exit 4).\n"
             "--exact: fault classes promised exact (e.g. none,pause,add,remove): an over-admission or a\n"
             "rollback labelled with one of them fails the run (exit 3).\n"
             "--min-faults: faults of each class the run must inject (the schedule picks the classes short "
             "of\n"
             "it first); fewer fails the run (exit 3). A class of --exact or --min-faults that cannot run "
             "here\n"
             "(partition without root, skew without libfaketime) fails at once (exit 4).\n"
             "--max-lost-for CLASS=N,...: admissions a class of --exact may lose with a killed node "
             "(default\n"
             "0): it may over-admit N times and roll back N times.\n"
             "--min-answered: the answered share each entry node must reach per class (exit 3);\n"
             "--min-answered-for CLASS=SHARE,...: another share for some classes.\n"
             "Node flags: RINGLIMIT_GRAY_NODE_FLAGS.\n";
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
    ++i;
    if (arg == "--minutes") {
      flags.minutes = std::atof(value);
    } else if (arg == "--seed") {
      flags.seed = std::strtoull(value, nullptr, 10);
    } else if (arg == "--nodes") {
      flags.nodes = std::strtoul(value, nullptr, 10);
    } else if (arg == "--max-nodes") {
      flags.max_nodes = std::strtoul(value, nullptr, 10);
    } else if (arg == "--clients") {
      flags.clients = std::atoi(value);
    } else if (arg == "--keys") {
      flags.keys = std::atoi(value);
    } else if (arg == "--limit") {
      flags.limit = std::strtoull(value, nullptr, 10);
    } else if (arg == "--record") {
      flags.record = value;
    } else if (arg == "--min-faults") {
      if (!ParsePairs<int>(arg, value, flags.min_faults, [](const char* v) { return std::atoi(v); }))
        return 2;
    } else if (arg == "--max-lost-for") {
      if (!ParsePairs<int>(arg, value, flags.max_lost_for, [](const char* v) { return std::atoi(v); }))
        return 2;
    } else if (arg == "--min-answered") {
      flags.min_answered = std::atof(value);
    } else if (arg == "--min-answered-for") {
      if (!ParsePairs<double>(arg, value, flags.min_answered_for,
                              [](const char* v) { return std::atof(v); })) {
        return 2;
      }
    } else if (arg == "--exact" || arg == "--classes") {
      std::istringstream names(value);
      for (std::string name; std::getline(names, name, ',');) {
        if (!name.empty()) (arg == "--exact" ? flags.exact : flags.classes).insert(name);
      }
    } else {
      std::cerr << "unknown flag " << arg << '\n';
      return 2;
    }
  }
  if (flags.nodes < 3 || flags.max_nodes < flags.nodes || flags.clients < 1 || flags.keys < 1 ||
      flags.limit < 1) {
    std::cerr << "need --nodes >= 3, --max-nodes >= --nodes, and positive --clients, --keys, --limit\n";
    return 2;
  }
  return Nemesis(std::move(flags)).Run();
}
