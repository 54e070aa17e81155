#include "tests/sim/scenario.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>
#include <utility>

#include "ring/token.h"
#include "tests/sim/sim_cluster.h"

namespace ringlimit::sim {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr size_t kInitialNodes = 5;
constexpr size_t kKeys = 3;
constexpr uint64_t kExtraChecks = 15;  // per key, beyond its limit
constexpr milliseconds kLoadWindow{6'000};
constexpr milliseconds kFormDeadline{30'000};
constexpr milliseconds kSettle{8'000};           // after the load window and the heal
constexpr milliseconds kAnswerDeadline{40'000};  // more, while checks are unanswered

const std::vector<FaultClass> kClasses = {
    {"none", Promise::kExact, "a steady cluster: exact"},
    {"lossy", Promise::kReport,
     "2% drop, 2% duplicate, 0.2-20 ms latency (reordering): timeouts fail over as a suspected owner does"},
    {"crash", Promise::kBounded,
     "kill -9 of a key owner, async replication: <= limit + its admissions in the last replication interval"},
    {"crash_sync", Promise::kExact, "kill -9 of a key owner, sync replication: exact"},
    {"restart", Promise::kBounded,
     "kill -9, restart on its disk after it was declared dead: the crash bound, nothing more"},
    {"join", Promise::kExact, "a node joins under load: exact"},
    {"leave", Promise::kExact, "a node leaves gracefully under load: exact"},
    {"quick_joins", Promise::kReport, "two nodes join within 100 ms (known limit)"},
    {"move_twice", Promise::kReport,
     "slow network, a second join while the first handoff runs: a range moves twice (known limit)"},
    {"fast_restart", Promise::kReport,
     "kill -9 and restart before the failure detector notices (known limit)"},
    {"pause", Promise::kReport, "a key owner stopped past failure detection, then resumed"},
    {"partition", Promise::kReport, "a minority cut off, then healed"},
    {"half_cut", Promise::kReport, "one direction of one link cut, then restored"},
    {"skew", Promise::kExact, "one node's wall clock 1 h ahead: exact"},
    {"pause_closed", Promise::kExact,
     "pause, with --replication sync --failure-mode closed: exact (admissions need every later holder)"},
    {"partition_closed", Promise::kExact, "partition, with sync + closed: exact (the minority answers 503)"},
    {"half_cut_closed", Promise::kExact, "half_cut, with sync + closed: exact"},
};

// The fault of a class: "pause_closed" injects what "pause" does, in another mode.
std::string_view FaultOf(std::string_view name) {
  constexpr std::string_view kClosed = "_closed";
  if (name.size() > kClosed.size() && name.substr(name.size() - kClosed.size()) == kClosed)
    return name.substr(0, name.size() - kClosed.size());
  return name;
}

std::string At(MonoTime t) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "t=%.3fs", std::chrono::duration<double>(t).count());
  return buf;
}

MonoTime Ms(uint64_t ms) { return std::chrono::duration_cast<MonoTime>(milliseconds(ms)); }

// One run: the cluster, the schedule, and the bookkeeping of the faults the bounds need.
class Run {
 public:
  Run(const FaultClass& fault_class, uint64_t seed, bool trace)
      : class_(fault_class), seed_(seed), cluster_(seed, Options(fault_class), Keys(seed)) {
    cluster_.world().set_tracing(trace);
  }

  RunResult Go() {
    RunResult result;
    result.fault_class = std::string(class_.name);
    result.seed = seed_;
    result.promise = class_.promise;
    result.formed = Form();
    if (result.formed) {
      Load();
      Faults();
      World& w = cluster_.world();
      w.RunUntil(load_end_ + kSettle);
      const MonoTime deadline = w.now() + kAnswerDeadline;
      while (w.now() < deadline && Unanswered() > 0 && w.RunUntil(w.now() + milliseconds(500))) {
      }
    }
    result.spinning = cluster_.world().spinning();
    result.verdict = cluster_.checker().Judge(Bounds());
    const Verdict& v = result.verdict;
    result.ok = result.formed && !result.spinning.has_value() && v.unanswered == 0 && v.beyond_bound == 0 &&
                (class_.promise == Promise::kBounded || v.rollbacks == 0);
    for (const CheckRecord& c : cluster_.checker().checks()) {
      if (c.outcome == Outcome::kPending) result.unanswered.push_back(c);
    }
    result.trace_hash = cluster_.world().trace_hash();
    result.events = cluster_.world().events_run();
    result.sim_seconds = std::chrono::duration<double>(cluster_.world().now()).count();
    result.schedule = std::move(schedule_);
    result.trace = cluster_.world().records();
    return result;
  }

 private:
  static SimOptions Options(const FaultClass& c) {
    SimOptions o;
    o.slots = kInitialNodes + 2;
    if (c.name == "crash_sync") o.replication.mode = replication::ReplicationMode::kSync;
    if (FaultOf(c.name) != c.name) {  // node.cc under --replication sync --failure-mode closed
      o.closed = true;
      o.replication.mode = replication::ReplicationMode::kSync;
      o.replication.ack_all = true;
    }
    return o;
  }

  static std::vector<SimKey> Keys(uint64_t seed) {
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ULL);
    std::vector<SimKey> keys;
    for (size_t k = 0; k < kKeys; ++k) {
      SimKey key;
      key.key = "key-" + std::to_string(seed) + "-" + std::to_string(k);
      key.spec.limit = 20 + rng() % 31;
      if (k % 2 == 0) {  // fixed_window, one day: no refill within a run
        key.spec.algorithm = limiter::Algorithm::kFixedWindow;
        key.spec.window = 24LL * 3600 * limiter::kSecond;
      } else {  // token_bucket refilling limit per year: under one unit per week
        key.spec.algorithm = limiter::Algorithm::kTokenBucket;
        key.spec.window = limiter::kMaxWindow;
      }
      keys.push_back(std::move(key));
    }
    return keys;
  }

  void Note(const std::string& what) {
    schedule_.push_back(At(cluster_.world().now()) + " " + what);
    cluster_.world().Trace(-1, TraceKind::kFault, what);
  }

  // Starts n1 alone and the others one at a time, each through a random earlier node, and waits until
  // the cluster settled (rings agree, no handoff in progress).
  bool Form() {
    World& w = cluster_.world();
    cluster_.Start(0, {});
    for (size_t i = 1; i < kInitialNodes; ++i) {
      if (!w.RunUntil(w.now() + milliseconds(600))) return false;
      cluster_.Start(static_cast<int>(i), {static_cast<int>(w.Uniform(0, i - 1))});
    }
    const MonoTime deadline = w.now() + kFormDeadline;
    while (!cluster_.Settled()) {
      if (w.now() >= deadline || !w.RunUntil(w.now() + milliseconds(100))) return false;
    }
    load_start_ = w.now();
    load_end_ = load_start_ + kLoadWindow;
    return true;
  }

  // Each key gets limit + kExtraChecks checks at uniform times of the load window, at random entry nodes
  // among the slots a client knows (the initial nodes and the joiners).
  void Load() {
    World& w = cluster_.world();
    const uint64_t window = static_cast<uint64_t>(kLoadWindow.count());
    const uint64_t slots = cluster_.size();
    for (size_t k = 0; k < cluster_.checker().keys().size(); ++k) {
      const uint64_t n = cluster_.checker().keys()[k].spec.limit + kExtraChecks;
      for (uint64_t i = 0; i < n; ++i) {
        const MonoTime at = load_start_ + Ms(w.Uniform(0, window));
        const int entry = static_cast<int>(w.Uniform(0, slots - 1));
        w.At(at, [this, k, entry] { cluster_.ClientCheck(k, entry); });
      }
    }
  }

  // A running initial node that owns at least one of the keys (the interesting victim), chosen by the seed.
  int PickOwner() {
    World& w = cluster_.world();
    const size_t k = w.Uniform(0, kKeys - 1);
    const SimNode* n1 = cluster_.node(0);
    const auto& ring = n1->ring();
    const int owner = cluster_.SlotOf(ring->Owner(ring::RingToken(cluster_.checker().keys()[k].key))->id);
    return owner >= 0 ? owner : 1;
  }

  int PickOther(int except) {
    World& w = cluster_.world();
    int other = except;
    while (other == except) other = static_cast<int>(w.Uniform(0, kInitialNodes - 1));
    return other;
  }

  // The class's faults, at seed-chosen instants of the load window; everything healed by its end.
  void Faults() {
    World& w = cluster_.world();
    const std::string_view name = FaultOf(class_.name);
    auto at = [&](uint64_t lo_ms, uint64_t hi_ms) { return load_start_ + Ms(w.Uniform(lo_ms, hi_ms)); };
    if (name == "lossy") {
      w.At(load_start_, [this] {
        Note("network: 2% drop, 2% duplicate, 0.2-20 ms latency");
        cluster_.network().drop = 0.02;
        cluster_.network().duplicate = 0.02;
        cluster_.network().max_latency = milliseconds(20);
      });
      w.At(load_end_, [this] {
        Note("network: healed");
        cluster_.network() = NetworkOptions{};
      });
    } else if (name == "crash" || name == "crash_sync" || name == "restart" || name == "fast_restart") {
      const MonoTime crash_at = at(1'000, 4'000);
      w.At(crash_at, [this, name] {
        victim_ = PickOwner();
        crashed_at_ = cluster_.world().now();
        Note("crash " + SimCluster::IdOf(victim_));
        cluster_.Crash(victim_);
        if (name == "crash" || name == "crash_sync") return;
        const uint64_t delay =
            name == "restart" ? cluster_.world().Uniform(4'000, 6'000) : cluster_.world().Uniform(100, 500);
        cluster_.world().At(cluster_.world().now() + Ms(delay), [this] {
          Note("restart " + SimCluster::IdOf(victim_) + " on its disk");
          cluster_.Start(victim_, {PickOther(victim_)});
        });
      });
    } else if (name == "join") {
      w.At(at(1'000, 3'000), [this] {
        Note("join n6");
        cluster_.Start(5, {static_cast<int>(cluster_.world().Uniform(0, kInitialNodes - 1))});
      });
    } else if (name == "quick_joins" || name == "move_twice") {
      const bool slow = name == "move_twice";
      const MonoTime first = at(1'000, 2'000);
      if (slow) {
        w.At(first - milliseconds(500), [this] {
          Note("network: 20-60 ms latency");
          cluster_.network().min_latency = milliseconds(20);
          cluster_.network().max_latency = milliseconds(60);
        });
        w.At(load_end_, [this] {
          Note("network: healed");
          cluster_.network() = NetworkOptions{};
        });
      }
      const MonoTime second = first + (slow ? Ms(w.Uniform(200, 400)) : Ms(w.Uniform(0, 100)));
      w.At(first, [this] {
        Note("join n6");
        cluster_.Start(5, {static_cast<int>(cluster_.world().Uniform(0, kInitialNodes - 1))});
      });
      w.At(second, [this] {
        Note("join n7");
        cluster_.Start(6, {static_cast<int>(cluster_.world().Uniform(0, kInitialNodes - 1))});
      });
    } else if (name == "leave") {
      w.At(at(1'000, 3'000), [this] {
        const int who = static_cast<int>(cluster_.world().Uniform(0, kInitialNodes - 1));
        Note("leave " + SimCluster::IdOf(who));
        cluster_.Leave(who);
      });
    } else if (name == "pause") {
      const MonoTime from = at(1'000, 2'000);
      const MonoTime until = from + Ms(w.Uniform(3'000, 4'000));
      w.At(from, [this] {
        victim_ = PickOwner();
        Note("pause " + SimCluster::IdOf(victim_));
        cluster_.Pause(victim_);
      });
      w.At(until, [this] {
        Note("resume " + SimCluster::IdOf(victim_));
        cluster_.Resume(victim_);
      });
    } else if (name == "partition") {
      const MonoTime from = at(1'000, 2'000);
      const MonoTime until = from + Ms(w.Uniform(3'000, 4'000));
      w.At(from, [this] {
        const int a = PickOwner();
        side_ = {a};
        if (cluster_.world().Chance(0.5)) side_.push_back(PickOther(a));
        std::string who;
        for (int s : side_) who += " " + SimCluster::IdOf(s);
        Note("partition:" + who + " cut off");
        cluster_.Partition(side_, true);
      });
      w.At(until, [this] {
        Note("partition healed");
        cluster_.HealLinks();
      });
    } else if (name == "half_cut") {
      const MonoTime from = at(1'000, 2'000);
      const MonoTime until = from + Ms(w.Uniform(3'000, 4'000));
      w.At(from, [this] {
        const int a = PickOwner();
        const int b = PickOther(a);
        Note("cut " + SimCluster::IdOf(b) + "->" + SimCluster::IdOf(a) + " only");
        cluster_.Cut(b, a, true);
      });
      w.At(until, [this] {
        Note("link restored");
        cluster_.HealLinks();
      });
    } else if (name == "skew") {
      const int who = static_cast<int>(w.Uniform(0, kInitialNodes - 1));
      Note(SimCluster::IdOf(who) + " clock +1 h");
      cluster_.SetSkew(who, std::chrono::hours(1));
    }
  }

  // The over-admission each key may show: for a crash (async), what the victim admitted in the last
  // replication interval before it (2 intervals + a network latency, to be safe); exact elsewhere.
  std::vector<uint64_t> Bounds() const {
    std::vector<uint64_t> bounds(kKeys, 0);
    if (class_.promise != Promise::kBounded || victim_ < 0) return bounds;
    const SimOptions& o = cluster_.options();
    const MonoTime window = 2 * std::chrono::duration_cast<MonoTime>(o.replication.interval) +
                            std::chrono::duration_cast<MonoTime>(o.network.max_latency);
    for (const DecisionRecord& d : cluster_.checker().decisions()) {
      if (d.node == victim_ && d.allowed && d.at <= crashed_at_ && d.at + window >= crashed_at_)
        ++bounds[d.key];
    }
    return bounds;
  }

  uint64_t Unanswered() {
    uint64_t n = 0;
    for (const CheckRecord& c : cluster_.checker().checks()) n += c.outcome == Outcome::kPending ? 1 : 0;
    return n;
  }

  const FaultClass& class_;
  const uint64_t seed_;
  SimCluster cluster_;
  MonoTime load_start_{};
  MonoTime load_end_{};
  int victim_ = -1;
  MonoTime crashed_at_{};
  std::vector<int> side_;
  std::vector<std::string> schedule_;
};

}  // namespace

const std::vector<FaultClass>& Classes() { return kClasses; }

const FaultClass* FindClass(std::string_view name) {
  for (const FaultClass& c : kClasses) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string_view PromiseName(Promise promise) {
  switch (promise) {
    case Promise::kExact:
      return "exact";
    case Promise::kBounded:
      return "bounded";
    case Promise::kReport:
      return "report";
  }
  return "?";
}

RunResult RunSeed(std::string_view fault_class, uint64_t seed, bool trace) {
  Run run(*FindClass(fault_class), seed, trace);
  return run.Go();
}

bool Fails(const RunResult& r) {
  if (r.promise != Promise::kReport) return !r.ok;
  return !r.formed || r.spinning.has_value() || r.verdict.unanswered > 0;
}

void PrintRun(const RunResult& result, std::ostream& out, size_t max_lines) {
  const Verdict& v = result.verdict;
  out << "=== class " << result.fault_class << " seed " << result.seed << " (" << PromiseName(result.promise)
      << "): " << (result.ok ? "holds" : "DOES NOT HOLD") << "\n";
  out << "reproduce: ringlimit_sim --class " << result.fault_class << " --seed " << result.seed
      << " --trace\n";
  if (result.spinning.has_value()) {
    out << "SPIN: simulated time stopped at " << At(*result.spinning) << ": more than " << World::kSpinLimit
        << " events in a row at one instant (a timer re-armed in the past: a busy loop on a real node)\n";
  }
  if (!result.formed) out << "the cluster did not form and settle before the load\n";
  out << "checks " << v.checks << ", unanswered " << v.unanswered << ", over-admitted " << v.over_admitted
      << " (beyond bound " << v.beyond_bound << "), rollbacks " << v.rollbacks << "\n";
  for (const CheckRecord& c : result.unanswered) {
    out << "unanswered: check #" << c.id << " of key " << c.key << ", sent to " << SimCluster::IdOf(c.entry)
        << " at " << At(c.sent) << "\n";
  }
  out << "schedule:\n";
  for (const std::string& s : result.schedule) out << "  " << s << "\n";
  for (size_t k = 0; k < v.keys.size(); ++k) {
    const KeyVerdict& kv = v.keys[k];
    out << "  key " << k << ": limit " << kv.limit << ", admitted " << kv.admitted << ", bound +" << kv.bound
        << ", rollbacks " << kv.rollbacks << "\n";
  }
  RunResult traced = result.trace.empty() ? RunSeed(result.fault_class, result.seed, true) : result;
  if (traced.trace_hash != result.trace_hash) out << "WARNING: the traced run differs (trace hash)\n";
  const std::optional<size_t> bad = v.first_bad_key;
  std::string key_text;
  std::optional<size_t> key = bad;
  if (!key.has_value() && !result.unanswered.empty()) key = result.unanswered.front().key;
  if (key.has_value()) key_text = "key-" + std::to_string(result.seed) + "-" + std::to_string(*key);
  // The checks of that key, by id, to find their answers (which name the check only).
  std::set<std::string> check_tags;
  for (const TraceRecord& r : traced.trace) {
    if (r.kind == TraceKind::kCheck && !key_text.empty() && r.text.find(key_text) != std::string::npos) {
      const size_t hash = r.text.find('#');
      const size_t space = r.text.find(' ', hash);
      check_tags.insert(r.text.substr(hash, space - hash) + " ");
    }
  }
  std::vector<const TraceRecord*> lines;
  for (const TraceRecord& r : traced.trace) {
    bool keep = r.kind == TraceKind::kFault || r.kind == TraceKind::kRing;
    if (r.kind == TraceKind::kMember) keep = r.text.find(" alive") == std::string::npos || !key.has_value();
    if (r.kind == TraceKind::kCheck) {
      keep = false;
      for (const std::string& tag : check_tags) keep = keep || r.text.find(tag) != std::string::npos;
    }
    if (keep) lines.push_back(&r);
  }
  const size_t first = lines.size() > max_lines ? lines.size() - max_lines : 0;
  out << "trace (" << lines.size() - first << " of " << lines.size() << " records"
      << (key_text.empty() ? "" : ", the checks of " + key_text) << "):\n";
  for (size_t i = first; i < lines.size(); ++i) {
    const TraceRecord& r = *lines[i];
    out << "  " << At(r.at) << " " << r.text << "\n";
  }
}

}  // namespace ringlimit::sim
