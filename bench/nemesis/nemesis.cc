// nemesis: a ringlimit cluster of real ringlimitd processes under concurrent clients for N minutes while
// a seeded schedule injects random faults, recording every decision (issue 13, "A nemesis run").
//
//   build/release/bench/nemesis/nemesis --minutes 2 --seed 1
//   build/release/bench/nemesis/nemesis --minutes 30 --seed 7 --record decisions.csv
//
// Fault classes (each picked uniformly among those this machine supports):
//   kill       SIGKILL a node, wait until the others declare it dead, start it again (same id, peer port)
//   pause      SIGSTOP a node for 1-4 s, then SIGCONT
//   partition  cut a random minority from the rest (both directions, network namespaces) for 3-8 s, heal
//   skew       kill a node and restart it under libfaketime, its wall clock +-1 h (a skewed node gets its
//              right clock back the same way at its next skew fault)
//   add        start one more node (up to --max-nodes)
//   remove     a node leaves gracefully (POST /v1/cluster/leave) down to --nodes - 1 members
// Between faults the cluster runs fault-free for 2-5 s; after each fault it is given a bounded time to
// converge.
//
// Clients: --clients threads, each checking a random key of --keys (token bucket, --limit per day: nothing
// refills during a run) through a random running node. Every decision is labelled with the fault class in
// progress or, between faults, the last one before (a counter lost during a fault shows when its key admits
// again later; "none" before the first fault). The report, per class: faults injected, checks,
// over-admissions (an admission beyond a key's limit counts to the label of its answer), rollbacks (an
// admitted answer whose remaining an earlier admitted answer of the key already gave: with cost 1 and
// nothing refilling, an exact counter gives each value once, whatever the order concurrent answers are
// recorded in) and failed requests.
//
// Partitions need root (network namespaces, nftables: tests/support/netns.h); skew needs libfaketime.
// Without them those classes are left out (printed). scripts/test runs 2 minutes of it with
// --replication sync --failure-mode closed, asserting the classes promised exact there (--exact).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
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

struct Flags {
  double minutes = 2;
  uint64_t seed = 1;
  size_t nodes = 5;
  size_t max_nodes = 7;
  int clients = 4;
  int keys = 500;
  uint64_t limit = 20;
  std::string record;
  std::set<std::string> exact;  // classes promised exact: any over-admission or rollback fails the run
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
    if (auto why = NetnsFabric::Unsupported()) {
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
    classes_.insert(classes_.end(), {"kill", "pause", "add", "remove"});
    if (!FaketimeEnv("+0").empty()) {
      classes_.push_back("skew");
    } else {
      std::printf("skew: left out (libfaketime is not installed)\n");
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
      const std::string fault = classes_[Uniform(0, static_cast<int>(classes_.size()) - 1)];
      recorder_.SetPhase(fault);
      if (Inject(fault)) ++injected_[fault];
      Recover();
      // Decisions until the next fault still count to this one: a counter lost during it shows when its key
      // admits again later.
    }
    stop_ = true;
    for (auto& t : clients) t.join();
    for (size_t i : paused_) (void)cluster_->node(i).Signal(SIGCONT);
    const bool kept = Report();
    cluster_.reset();  // before the fabric: the nodes leave their namespaces first
    return kept ? 0 : 3;
  }

 private:
  int Uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(random_); }

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
      const std::string key = "nemesis-" + std::to_string(random() % static_cast<uint64_t>(flags_.keys));
      recorder_.Add(CheckOnce(*client, target.id, key, flags_.limit));
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
      if (auto cut = fabric_->Isolate(side); !cut) {
        Note(fault, cut.error());
        return false;
      }
      Hold(milliseconds(period));
      if (auto healed = fabric_->HealAll(); !healed) Note(fault, healed.error());
      return true;
    }
    if (fault == "skew") {
      auto i = PickRunning();
      if (!i) return false;
      const std::string id = cluster_->id(*i);
      if (env_->count(id) != 0) {
        env_->erase(id);
        Note(fault, id + " back to the right clock");
      } else {
        const std::string offset = Uniform(0, 1) == 0 ? "+1h" : "-1h";
        (*env_)[id] = FaketimeEnv(offset);
        Note(fault, id + " restarted with its clock " + offset);
      }
      return KillAndRestart(fault, *i);
    }
    if (fault == "add") {
      if (cluster_->size() >= flags_.max_nodes) return false;
      auto added = cluster_->AddNode();
      if (!added) {
        Note(fault, "failed: " + added.error().substr(0, 300));
        return false;
      }
      Note(fault, cluster_->id(*added));
      Publish();
      return true;
    }
    if (fault == "remove") {
      if (cluster_->Running().size() + 1 <= flags_.nodes) return false;
      auto i = PickRunning();
      if (!i) return false;
      Note(fault, cluster_->id(*i) + " leaves");
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
  };

  // Prints the table; false when a class of --exact over-admitted or rolled back.
  bool Report() {
    const auto decisions = recorder_.Snapshot();
    std::map<std::string, ClassFigures> by_class;
    std::map<std::string, int64_t> admitted;
    std::map<std::string, std::set<uint64_t>> answered;  // by key: the remaining values admitted answers gave
    for (const auto& d : decisions) {
      auto& f = by_class[d.phase];
      ++f.checks;
      if (d.failed()) {
        ++f.failed;
        continue;
      }
      if (!d.allowed) continue;
      if (++admitted[d.key] > static_cast<int64_t>(flags_.limit)) ++f.over;
      if (!answered[d.key].insert(d.remaining).second) ++f.rollbacks;
    }
    std::printf("\nnemesis: %.1f min, seed %llu, %zu nodes (up to %zu), %d clients, %d keys x %llu per day\n",
                flags_.minutes, static_cast<unsigned long long>(flags_.seed), flags_.nodes, flags_.max_nodes,
                flags_.clients, flags_.keys, static_cast<unsigned long long>(flags_.limit));
    std::printf("| %-10s | %6s | %8s | %15s | %9s | %6s |\n", "fault", "faults", "checks", "over-admissions",
                "rollbacks", "failed");
    std::printf("|------------|--------|----------|-----------------|-----------|--------|\n");
    ClassFigures total;
    for (const auto& [name, f] : by_class) {
      std::printf("| %-10s | %6d | %8lld | %15lld | %9lld | %6lld |\n", name.c_str(),
                  injected_.count(name) ? injected_[name] : 0, static_cast<long long>(f.checks),
                  static_cast<long long>(f.over), static_cast<long long>(f.rollbacks),
                  static_cast<long long>(f.failed));
      total.checks += f.checks;
      total.over += f.over;
      total.rollbacks += f.rollbacks;
      total.failed += f.failed;
    }
    std::printf("| %-10s | %6s | %8lld | %15lld | %9lld | %6lld |\n", "total", "",
                static_cast<long long>(total.checks), static_cast<long long>(total.over),
                static_cast<long long>(total.rollbacks), static_cast<long long>(total.failed));
    bool kept = true;
    for (const std::string& name : flags_.exact) {
      const ClassFigures& f = by_class[name];
      if (f.over == 0 && f.rollbacks == 0) continue;
      std::printf("FAIL: %s is promised exact: %lld over-admissions, %lld rollbacks\n", name.c_str(),
                  static_cast<long long>(f.over), static_cast<long long>(f.rollbacks));
      kept = false;
    }
    if (!flags_.record.empty()) {
      std::ofstream out(flags_.record);
      out << "at_ms,fault,key,entry,status,allowed,remaining,owner\n";
      for (const auto& d : decisions) {
        out << d.at_ms << ',' << d.phase << ',' << d.key << ',' << d.entry << ',' << d.status << ','
            << (d.allowed ? 1 : 0) << ',' << d.remaining << ',' << d.owner << '\n';
      }
    }
    return kept;
  }

  Flags flags_;
  std::mt19937_64 random_;
  std::vector<std::string> classes_;
  std::shared_ptr<NodeEnvironments> env_ = std::make_shared<NodeEnvironments>();
  std::map<std::string, int> injected_;
  std::set<size_t> paused_;
  std::set<size_t> hidden_;  // running, not offered to the clients (see Hide)
  Recorder recorder_;
  Targets targets_;
  std::atomic<bool> stop_{false};
  // The fabric outlives the cluster (Run resets the cluster first).
  std::unique_ptr<NetnsFabric> fabric_;
  std::unique_ptr<Cluster> cluster_;
};

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
             "--exact: fault classes promised exact (e.g. none,pause,add,remove): an over-admission or a\n"
             "rollback labelled with one of them fails the run (exit 3). Node flags: "
             "RINGLIMIT_GRAY_NODE_FLAGS.\n";
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
    } else if (arg == "--exact") {
      std::istringstream names(value);
      for (std::string name; std::getline(names, name, ',');) {
        if (!name.empty()) flags.exact.insert(name);
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
