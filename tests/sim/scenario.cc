#include "tests/sim/scenario.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <set>
#include <span>
#include <tuple>
#include <utility>

#include "limiter/hlc.h"
#include "limiter/merge.h"
#include "ring/token.h"
#include "storage/state_store.h"
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
// The quota-grant classes ("grants..."): a fourth key, hot: this many checks over the load window (150/s,
// some 30/s entering each node), above the lowered threshold below.
constexpr uint64_t kHotChecks = 900;
constexpr double kGrantThreshold = 10;   // checks/s entering a node (product default: 200)
constexpr milliseconds kGrantTerm{500};  // (product default: 1 s); the margin stays 250 ms

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
    {"quick_joins", Promise::kBounded,
     "two nodes join within 100 ms: admitted <= limit (bound 0); rollbacks reported (known limit)"},
    {"move_twice", Promise::kReport,
     "slow network, a second join while the first handoff runs: a range moves twice (known limit)"},
    {"fast_restart", Promise::kReport,
     "kill -9 and restart before the failure detector notices (known limit)"},
    {"pause", Promise::kReport, "a key owner stopped past failure detection, then resumed"},
    {"partition", Promise::kReport, "a minority cut off, then healed"},
    {"half_cut", Promise::kReport, "one direction of one link cut, then restored"},
    {"skew", Promise::kExact, "one node's wall clock 1 h ahead: exact"},
    {"starve", Promise::kReport,
     "CPU starvation: a key owner's events held 0.2-1.5 s at a time, 5-30 ms slices between, for 3-4 s"},
    {"missed_reset", Promise::kReport,
     "a key's holder paused past failure detection while the key is reset at its owner, resumed (merging "
     "its old copy back), then the owner crashed"},
    {"pause_closed", Promise::kExact,
     "pause, with --replication sync --failure-mode closed: exact (admissions need a majority of the "
     "key's holders; a node taking a key over reads a majority of its earlier holders)"},
    {"partition_closed", Promise::kExact,
     "partition, with sync + closed: exact (the minority stops deciding once it suspects the others; "
     "the majority side cannot answer admissions of keys whose earlier holders it cannot read)"},
    {"half_cut_closed", Promise::kExact, "half_cut, with sync + closed: exact"},
    {"starve_closed", Promise::kBounded,
     "starve, with sync + closed: admitted <= limit (bound 0); rollbacks reported (known limit)"},
    {"missed_reset_closed", Promise::kExact, "missed_reset, with sync + closed: exact"},
    {"leave_closed", Promise::kExact, "leave, with sync + closed: exact"},
    {"join_closed", Promise::kExact, "join, with sync + closed: exact"},
    {"crash_closed", Promise::kExact,
     "crash, with sync + closed: exact, and the dead holder's keys keep being answered (a majority of "
     "their holders lives)"},
    {"skew_closed", Promise::kExact,
     "skew, with sync + closed: exact; the skewed node passes its checks on (issue 35 item 4)"},
    {"skew_pause", Promise::kReport,
     "skew and pause at once: one node's clock 1 h ahead (it passes its checks on, relayed when needed) "
     "while a key owner is paused past failure detection, then resumed"},
    {"skew_pause_closed", Promise::kExact, "skew_pause, with sync + closed: exact"},
    {"restart_closed", Promise::kExact, "restart, with sync + closed: exact"},
    {"fast_restart_closed", Promise::kExact, "fast_restart, with sync + closed: exact"},
    {"quick_joins_closed", Promise::kExact, "quick_joins, with sync + closed: exact"},
    {"move_twice_closed", Promise::kExact, "move_twice, with sync + closed: exact"},
    {"lossy_closed", Promise::kExact, "lossy, with sync + closed: exact"},
    // Quota grants (--grants on, threshold lowered to 10 checks/s and the term to 500 ms so that grants
    // happen within the run): a fourth, hot key of 900 checks over the load window through the five initial
    // nodes (~30 checks/s each). Each class fails a run in which no grant was made, none used or none
    // settled, and proves its fault.
    {"grants", Promise::kExact,
     "quota grants, a hot key with a live budget (limit 2 x its checks): grants made, used and all settled "
     "by the end; exact, no denial of the hot key"},
    {"grants_closed", Promise::kExact, "grants, with sync + closed: exact"},
    {"grants_limit", Promise::kExact,
     "quota grants, the hot key's checks 1.5 x its limit: slices shrink near the limit and are recalled "
     "(asserted), all settled; exact, the floor less the slices' unused units"},
    {"grants_limit_closed", Promise::kExact, "grants_limit, with sync + closed: exact"},
    {"grants_holder_crash", Promise::kBounded,
     "grants_limit, kill -9 of a node holding a slice of the hot key: reclaimed, the floor less its unused "
     "units; the crash bound for its own admissions (async)"},
    {"grants_holder_crash_closed", Promise::kExact, "grants_holder_crash, with sync + closed: exact"},
    {"grants_holder_pause", Promise::kReport,
     "grants_limit, a node holding a slice (owning no key when one can) stopped 1-1.6 s, past term + "
     "margin, then resumed: the slice reclaimed meanwhile, nothing decided from it after (asserted); counts "
     "reported as pause's (the resumed node's forwards are refused as given up, and it decides alone)"},
    {"grants_holder_pause_closed", Promise::kExact, "grants_holder_pause, with sync + closed: exact"},
    {"grants_owner_crash", Promise::kBounded,
     "kill -9 of the hot key's owner (limit = its checks) while it has slices out: the holders ask the next "
     "owner and every grant settles (asserted); the crash bound plus the units it lent in the last "
     "replication interval (async)"},
    {"grants_owner_pause", Promise::kReport,
     "kill -STOP of the hot key's owner (limit = its checks) while it has slices out, 3-4 s (past failure "
     "detection), then resumed: every grant settles (asserted); counts reported as pause's"},
    {"grants_owner_pause_closed", Promise::kExact, "grants_owner_pause, with sync + closed: exact"},
    {"grants_join", Promise::kExact, "grants_limit, a node joins under load (the hot key may move): exact"},
    {"grants_join_closed", Promise::kExact, "grants_join, with sync + closed: exact"},
    {"grants_leave", Promise::kExact,
     "grants_limit, a node leaves gracefully under load: it releases its slices first (none reclaimed, "
     "asserted); exact"},
    {"grants_leave_closed", Promise::kExact, "grants_leave, with sync + closed: exact"},
    {"grants_lossy", Promise::kReport, "grants_limit on lossy's network (2% drop and duplicate, reordering)"},
    {"grants_lossy_closed", Promise::kExact, "grants_lossy, with sync + closed: exact"},
    {"grants_owner_crash_closed", Promise::kExact,
     "grants_owner_crash, with sync + closed: exact (the grant records were acknowledged by a majority)"},
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

// Whether a class runs the quota grants.
bool IsGrants(std::string_view name) { return name.starts_with("grants"); }

MonoTime Ms(uint64_t ms) { return std::chrono::duration_cast<MonoTime>(milliseconds(ms)); }

// The name of every key's one limit (as SimNode charges it).
constexpr std::string_view kLimitName = "default";

// One run: the cluster, the schedule, and the bookkeeping of the faults the bounds need.
class Run {
 public:
  Run(const FaultClass& fault_class, uint64_t seed, bool trace)
      : class_(fault_class), seed_(seed), cluster_(seed, Options(fault_class), Keys(seed, fault_class.name)) {
    cluster_.world().set_tracing(trace);
  }

  RunResult Go() {
    RunResult result;
    result.fault_class = std::string(class_.name);
    result.seed = seed_;
    result.promise = class_.promise;
    result.formed = Form();
    World& w = cluster_.world();
    if (result.formed) {
      Load();
      Faults();
      w.RunUntil(load_end_ + kSettle);
      const MonoTime deadline = w.now() + kAnswerDeadline;
      while (w.now() < deadline && Unanswered() > 0 && w.RunUntil(w.now() + milliseconds(500))) {
      }
      // Every node still running routes checks again (a node that never becomes ready would have its
      // checks excused as not joined forever).
      for (int slot : cluster_.Running()) {
        if (!cluster_.node(slot)->routing()) result.not_routing.push_back(slot);
      }
    }
    result.spinning = w.spinning();
    if (first_fault_.has_value()) cluster_.checker().SetFaults(*first_fault_, healed_);
    result.verdict = cluster_.checker().Judge(JudgeOptionsOf());
    result.faults_asked = faults_asked_;
    result.faults_injected = faults_injected_;
    if (IsGrants(class_.name)) GrantFailures(result.verdict);
    const Verdict& v = result.verdict;
    result.ok = result.formed && !result.spinning.has_value() && v.ok() &&
                faults_injected_ >= faults_asked_ && result.not_routing.empty();
    result.exact = v.exact();
    for (const CheckRecord& c : cluster_.checker().checks()) {
      if (c.outcome == Outcome::kPending) result.unanswered.push_back(c);
      if (c.outcome == Outcome::kRefused && c.excuse == Excuse::kNone) result.refused.push_back(c);
    }
    if (v.longest_wait_check != 0) result.longest_wait = cluster_.checker().check(v.longest_wait_check);
    result.trace_hash = w.trace_hash();
    result.events = w.events_run();
    result.sim_seconds = std::chrono::duration<double>(w.now()).count();
    result.schedule = std::move(schedule_);
    for (const SimKey& k : cluster_.checker().keys()) result.keys.push_back(k.key);
    result.trace = w.records();
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
      o.replication.ack_majority = true;
      o.handoff.majority_read = true;
    }
    if (IsGrants(c.name)) {
      o.grants.enabled = true;
      o.grants.planner.threshold = kGrantThreshold;
      o.grants.planner.term = kGrantTerm;
    }
    return o;
  }

  static std::vector<SimKey> Keys(uint64_t seed, std::string_view fault_class) {
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
    if (IsGrants(fault_class)) {  // the hot key: an algorithm that lends, by the seed
      SimKey key;
      key.key = "hot-" + std::to_string(seed);
      // grants: a live budget; grants_owner_crash: as many units as checks (the budget outlives the take-over
      // and the next owner lends); the others: 1.5 checks per unit.
      const std::string_view name = FaultOf(fault_class);
      key.spec.limit = name == "grants"                                               ? 2 * kHotChecks
                       : name == "grants_owner_crash" || name == "grants_owner_pause" ? kHotChecks
                                                                                      : kHotChecks * 2 / 3;
      // Every algorithm that lends, by the seed: the windows over one day, the buckets refilling under one
      // unit per week (gcra with a burst making its capacity the limit).
      constexpr std::array<limiter::Algorithm, 5> kLending = {
          limiter::Algorithm::kFixedWindow, limiter::Algorithm::kTokenBucket, limiter::Algorithm::kGcra,
          limiter::Algorithm::kLeakyBucket, limiter::Algorithm::kAnchoredWindow};
      key.spec.algorithm = kLending[seed % kLending.size()];
      const bool window = key.spec.algorithm == limiter::Algorithm::kFixedWindow ||
                          key.spec.algorithm == limiter::Algorithm::kAnchoredWindow;
      key.spec.window = window ? 24LL * 3600 * limiter::kSecond : limiter::kMaxWindow;
      if (key.spec.algorithm == limiter::Algorithm::kGcra) key.spec.burst = key.spec.limit - 1;
      keys.push_back(std::move(key));
    }
    return keys;
  }

  // What the class asserts: over-admission and rollbacks as its promise says; the floor, liveness and
  // the answered share always.
  JudgeOptions JudgeOptionsOf() const {
    JudgeOptions o;
    o.bounds = Bounds();
    o.admission = class_.promise != Promise::kReport;
    o.rollbacks = class_.promise == Promise::kExact;
    o.answered_bp = AnsweredFloor(class_.name).cell;
    return o;
  }

  void Note(const std::string& what) {
    schedule_.push_back(At(cluster_.world().now()) + " " + what);
    cluster_.world().Trace(-1, TraceKind::kFault, what);
  }

  // Plans one fault of the class at `at`: `apply` injects it and returns whether it could.
  void Plan(MonoTime at, std::function<bool()> apply) {
    ++faults_asked_;
    cluster_.world().At(at, [this, apply = std::move(apply)] {
      if (!apply()) {
        Note("(the fault above was not injected)");
        return;
      }
      ++faults_injected_;
      if (!first_fault_.has_value()) first_fault_ = cluster_.world().now();
    });
  }
  // A heal: the phase after the faults starts at the last one.
  void Healed() { healed_ = cluster_.world().now(); }

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
      const uint64_t n = k == kKeys ? kHotChecks : cluster_.checker().keys()[k].spec.limit + kExtraChecks;
      for (uint64_t i = 0; i < n; ++i) {
        const MonoTime at = load_start_ + Ms(w.Uniform(0, window));
        // The hot key's checks enter the initial nodes only: every one of them sees it at ~30 checks/s.
        const int entry = static_cast<int>(w.Uniform(0, (k == kKeys ? kInitialNodes : slots) - 1));
        w.At(at, [this, k, entry] { ClientCheck(k, entry); });
      }
    }
  }

  void ClientCheck(size_t key, int entry) {
    const Excuse excuse = ExcuseOf(key, entry);
    cluster_.ClientCheck(key, entry);
    Checker& checker = cluster_.checker();
    if (excuse != Excuse::kNone) checker.SetExcuse(checker.checks().back().id, excuse);
  }

  // Whether `to` is within `from`'s reach now: itself, or running, not paused and linked both ways.
  bool Reaches(int from, int to) const {
    if (from == to) return true;
    const SimNode* n = cluster_.node(to);
    const World& w = const_cast<SimCluster&>(cluster_).world();
    return n != nullptr && !n->exited() && w.up(to) && !w.paused(to) && !cluster_.IsCut(from, to) &&
           !cluster_.IsCut(to, from);
  }

  // Why a check of `key` entering `entry` now does not count towards the answered share (checker.h).
  Excuse ExcuseOf(size_t key, int entry) const {
    const SimNode* n = cluster_.node(entry);
    const World& w = const_cast<SimCluster&>(cluster_).world();
    if (n == nullptr || n->exited() || n->draining() || !w.up(entry) || w.paused(entry)) {
      return Excuse::kEntryDown;
    }
    // A node whose clock is off has no excuse: it passes its checks on (issue 35 item 4).
    if (!n->routing()) return Excuse::kEntryNotReady;
    if (!cluster_.options().closed) return Excuse::kNone;
    const std::vector<int> running = cluster_.Running();
    size_t reached = 0;
    for (int slot : running) reached += Reaches(entry, slot) ? 1 : 0;
    if (2 * reached <= running.size()) return Excuse::kEntryMinority;
    const std::shared_ptr<const ring::RingView>& ring = n->ring();
    if (ring == nullptr) return Excuse::kEntryNotReady;
    const auto holders = ring->PreferenceList(ring::RingToken(cluster_.checker().keys()[key].key),
                                              cluster_.options().replication.replicas);
    size_t reachable = 0;
    for (const ring::RingMember* m : holders) {
      const int slot = cluster_.SlotOf(m->id);
      reachable += slot >= 0 && Reaches(entry, slot) ? 1 : 0;
    }
    return 2 * reachable > holders.size() ? Excuse::kNone : Excuse::kHoldersUnreachable;
  }

  // A key and its holders (preference list) on n1's ring, chosen by the seed.
  std::pair<size_t, std::vector<int>> PickKey() {
    World& w = cluster_.world();
    const size_t k = w.Uniform(0, kKeys - 1);
    const auto& ring = cluster_.node(0)->ring();
    std::vector<int> holders;
    for (const ring::RingMember* m : ring->PreferenceList(ring::RingToken(cluster_.checker().keys()[k].key),
                                                          cluster_.options().replication.replicas)) {
      holders.push_back(cluster_.SlotOf(m->id));
    }
    return {k, std::move(holders)};
  }

  // A running initial node that owns at least one of the keys (the interesting victim), chosen by the seed.
  int PickOwner() {
    const int owner = PickKey().second.front();
    return owner >= 0 ? owner : 1;
  }

  int PickOther(int except) {
    World& w = cluster_.world();
    int other = except;
    while (other == except) other = static_cast<int>(w.Uniform(0, kInitialNodes - 1));
    return other;
  }

  bool Running(int slot) const { return cluster_.node(slot) != nullptr && !cluster_.node(slot)->exited(); }

  bool Crash(int slot) {
    Note("crash " + SimCluster::IdOf(slot));
    if (!Running(slot)) return false;
    victim_ = slot;
    crashed_at_ = cluster_.world().now();
    cluster_.Crash(slot);
    return true;
  }

  bool Join(int slot) {
    Note("join " + SimCluster::IdOf(slot));
    if (cluster_.node(slot) != nullptr) return false;
    cluster_.Start(slot, {static_cast<int>(cluster_.world().Uniform(0, kInitialNodes - 1))});
    return cluster_.node(slot) != nullptr;
  }

  bool Pause(int slot) {
    Note("pause " + SimCluster::IdOf(slot));
    if (!Running(slot)) return false;
    cluster_.Pause(slot);
    return true;
  }

  // The class's faults, at seed-chosen instants of the load window; everything healed by its end.
  void Faults() {
    World& w = cluster_.world();
    std::string_view name = FaultOf(class_.name);
    // grants_join, grants_leave, grants_lossy: those faults with the quota grants on.
    for (std::string_view plain : {"join", "leave", "lossy"}) {
      if (name.starts_with("grants_") && name.substr(7) == plain) name = plain;
    }
    auto at = [&](uint64_t lo_ms, uint64_t hi_ms) { return load_start_ + Ms(w.Uniform(lo_ms, hi_ms)); };
    auto heal_network = [this] {
      Note("network: healed");
      cluster_.network() = NetworkOptions{};
      Healed();
    };
    if (name == "lossy") {
      Plan(load_start_, [this] {
        Note("network: 2% drop, 2% duplicate, 0.2-20 ms latency");
        cluster_.network().drop = 0.02;
        cluster_.network().duplicate = 0.02;
        cluster_.network().max_latency = milliseconds(20);
        return true;
      });
      w.At(load_end_, heal_network);
    } else if (name == "crash" || name == "crash_sync" || name == "restart" || name == "fast_restart") {
      const MonoTime crash_at = at(1'000, 4'000);
      const uint64_t delay = name == "restart" ? w.Uniform(4'000, 6'000) : w.Uniform(100, 500);
      Plan(crash_at, [this] { return Crash(PickOwner()); });
      if (name == "restart" || name == "fast_restart") {
        Plan(crash_at + Ms(delay), [this] {
          Note("restart " + SimCluster::IdOf(victim_) + " on its disk");
          if (victim_ < 0 || cluster_.node(victim_) != nullptr) return false;
          cluster_.Start(victim_, {PickOther(victim_)});
          Healed();
          return true;
        });
      }
    } else if (name == "join") {
      Plan(at(1'000, 3'000), [this] { return Join(5); });
    } else if (name == "quick_joins" || name == "move_twice") {
      const bool slow = name == "move_twice";
      const MonoTime first = at(1'000, 2'000);
      if (slow) {
        Plan(first - milliseconds(500), [this] {
          Note("network: 20-60 ms latency");
          cluster_.network().min_latency = milliseconds(20);
          cluster_.network().max_latency = milliseconds(60);
          return true;
        });
        w.At(load_end_, heal_network);
      }
      const MonoTime second = first + (slow ? Ms(w.Uniform(200, 400)) : Ms(w.Uniform(0, 100)));
      Plan(first, [this] { return Join(5); });
      Plan(second, [this] { return Join(6); });
    } else if (name == "leave") {
      Plan(at(1'000, 3'000), [this] {
        const int who = static_cast<int>(cluster_.world().Uniform(0, kInitialNodes - 1));
        Note("leave " + SimCluster::IdOf(who));
        if (!Running(who) || cluster_.node(who)->leaving()) return false;
        victim_ = who;
        left_at_ = cluster_.world().now();
        cluster_.Leave(who);
        return true;
      });
    } else if (name == "pause" || name == "skew_pause") {
      if (name == "skew_pause") {
        Plan(load_start_, [this] {
          const int who = static_cast<int>(cluster_.world().Uniform(0, kInitialNodes - 1));
          Note(SimCluster::IdOf(who) + " clock +1 h");
          cluster_.SetSkew(who, std::chrono::hours(1));
          return true;
        });
      }
      const MonoTime from = at(1'000, 2'000);
      const MonoTime until = from + Ms(w.Uniform(3'000, 4'000));
      Plan(from, [this] {
        victim_ = PickOwner();
        return Pause(victim_);
      });
      w.At(until, [this] {
        Note("resume " + SimCluster::IdOf(victim_));
        cluster_.Resume(victim_);
        Healed();
      });
    } else if (name == "partition") {
      const MonoTime from = at(1'000, 2'000);
      const MonoTime until = from + Ms(w.Uniform(3'000, 4'000));
      Plan(from, [this] {
        const int a = PickOwner();
        side_ = {a};
        if (cluster_.world().Chance(0.5)) side_.push_back(PickOther(a));
        std::string who;
        for (int s : side_) who += " " + SimCluster::IdOf(s);
        Note("partition:" + who + " cut off");
        cluster_.Partition(side_, true);
        return true;
      });
      w.At(until, [this] {
        Note("partition healed");
        cluster_.HealLinks();
        Healed();
      });
    } else if (name == "half_cut") {
      const MonoTime from = at(1'000, 2'000);
      const MonoTime until = from + Ms(w.Uniform(3'000, 4'000));
      Plan(from, [this] {
        const int a = PickOwner();
        const int b = PickOther(a);
        Note("cut " + SimCluster::IdOf(b) + "->" + SimCluster::IdOf(a) + " only");
        cluster_.Cut(b, a, true);
        return true;
      });
      w.At(until, [this] {
        Note("link restored");
        cluster_.HealLinks();
        Healed();
      });
    } else if (name == "skew") {
      Plan(load_start_, [this] {
        const int who = static_cast<int>(cluster_.world().Uniform(0, kInitialNodes - 1));
        Note(SimCluster::IdOf(who) + " clock +1 h");
        cluster_.SetSkew(who, std::chrono::hours(1));
        return true;
      });
    } else if (name == "starve") {
      Starve(at(800, 1'500), Ms(w.Uniform(3'000, 4'000)));
    } else if (name == "missed_reset") {
      MissedReset(at(800, 1'200));
    } else if (name == "grants_holder_crash") {
      Plan(at(1'500, 3'000), [this] {
        const int holder = PickSliceHolder();
        if (holder < 0) Note("no slice of the hot key out");
        return holder >= 0 && Crash(holder);
      });
    } else if (name == "grants_holder_pause") {
      const MonoTime from = at(1'500, 3'000);
      const MonoTime until = from + Ms(w.Uniform(1'000, 1'600));
      Plan(from, [this] {
        const int holder = PickSliceHolder();
        if (holder < 0) {
          Note("no slice of the hot key out");
          return false;
        }
        victim_ = holder;
        paused_at_ = cluster_.world().now();
        return Pause(holder);
      });
      w.At(until, [this] {
        if (victim_ < 0) return;
        Note("resume " + SimCluster::IdOf(victim_));
        cluster_.Resume(victim_);
        resumed_at_ = cluster_.world().now();
        Healed();
      });
    } else if (name == "grants_owner_pause") {
      const MonoTime from = at(1'500, 3'000);
      const MonoTime until = from + Ms(w.Uniform(3'000, 4'000));
      Plan(from, [this] {
        const int owner = HotOwner();
        uint64_t out = 0;
        for (const GrantEvent& g : cluster_.checker().grants()) {
          if (g.owner == owner && !g.settled.has_value()) out += g.units;
        }
        Note(SimCluster::IdOf(owner) + " owns the hot key, " + std::to_string(out) + " units out on grants");
        if (out == 0) return false;
        victim_ = owner;
        paused_at_ = cluster_.world().now();
        return Pause(owner);
      });
      w.At(until, [this] {
        if (victim_ < 0) return;
        Note("resume " + SimCluster::IdOf(victim_));
        cluster_.Resume(victim_);
        Healed();
      });
    } else if (name == "grants_owner_crash") {
      Plan(at(1'500, 3'000), [this] {
        const int owner = HotOwner();
        uint64_t out = 0;
        for (const GrantEvent& g : cluster_.checker().grants()) {
          if (g.owner == owner && !g.settled.has_value()) out += g.units;
        }
        Note(SimCluster::IdOf(owner) + " owns the hot key, " + std::to_string(out) + " units out on grants");
        return out > 0 && Crash(owner);
      });
    }
  }

  // The hot key's owner on n1's ring.
  int HotOwner() const {
    const auto& ring = cluster_.node(0)->ring();
    return cluster_.SlotOf(
        ring->PreferenceList(ring::RingToken(cluster_.checker().keys()[kKeys].key), 1).front()->id);
  }

  // A running node holding an unsettled slice of the hot key now, chosen by the seed among those owning
  // none of the keys when there are some (a paused or crashed owner is other classes' subject); -1: none.
  int PickSliceHolder() {
    std::set<int> owners;
    const auto& ring = cluster_.node(0)->ring();
    for (const SimKey& key : cluster_.checker().keys()) {
      owners.insert(cluster_.SlotOf(ring->PreferenceList(ring::RingToken(key.key), 1).front()->id));
    }
    std::set<int> holders;
    for (const GrantEvent& g : cluster_.checker().grants()) {
      if (g.key == kKeys && !g.settled.has_value() && g.holder >= 0 && Running(g.holder))
        holders.insert(g.holder);
    }
    std::vector<int> preferred;
    for (int h : holders) {
      if (owners.count(h) == 0) preferred.push_back(h);
    }
    if (preferred.empty()) preferred.assign(holders.begin(), holders.end());
    if (preferred.empty()) return -1;
    const int holder = preferred[cluster_.world().Uniform(0, preferred.size() - 1)];
    uint64_t out = 0;
    for (const GrantEvent& g : cluster_.checker().grants()) {
      if (g.key == kKeys && g.holder == holder && !g.settled.has_value()) out += g.units;
    }
    Note(SimCluster::IdOf(holder) + " holds " + std::to_string(out) + " units of the hot key on grants");
    return holder;
  }

  // What a quota-grant class asserts beyond the Checker's rules (added to the verdict's failures): grants
  // were made, used and settled; every grant settled by the end (after an owner crash or pause too: the
  // holders' Releases reach the next owner, GrantDriver sends an unanswered one again, and the node that
  // takes a range over adopts the grants nobody will release); a crashed holder's
  // slice was reclaimed; a paused holder's slices were reclaimed during the pause and it decided nothing
  // from them after (its admissions from slices after the pause never exceed the units lent to it after).
  void GrantFailures(Verdict& v) const {
    const Checker& checker = cluster_.checker();
    const std::string_view name = FaultOf(class_.name);
    if (v.grants_made == 0) v.failures.push_back("grants: no grant was made");
    if (v.from_slices == 0) v.failures.push_back("grants: no check was admitted from a slice");
    if (v.grants_settled == 0) v.failures.push_back("grants: no grant was settled");
    uint64_t unsettled = 0;          // grants never settled
    uint64_t asked_after_crash = 0;  // slices asked of another node than the crashed owner after the crash
    for (const GrantEvent& g : checker.grants()) {
      // Also a grant the paused owner recorded just before it stopped, whose reply its holder stopped
      // waiting for: nobody releases it; the node that takes the key's range over adopts and reclaims it.
      unsettled += g.settled.has_value() ? 0 : 1;
    }
    for (const Checker::Ask& a : checker.asks()) {
      asked_after_crash += a.key == kKeys && a.node != victim_ && a.at > crashed_at_ ? 1 : 0;
    }
    if (unsettled > 0) {
      v.failures.push_back("grants: " + std::to_string(unsettled) + " of " + std::to_string(v.grants_made) +
                           " grants never settled");
    }
    if (name == "grants_owner_crash" && victim_ >= 0 && asked_after_crash == 0) {
      v.failures.push_back("grants: no holder asked the next owner for a slice after the owner crashed");
    }
    if (name == "grants" && v.keys[kKeys].admitted < v.keys[kKeys].answered) {
      v.failures.push_back("grants: the hot key denied " +
                           std::to_string(v.keys[kKeys].answered - v.keys[kKeys].admitted) +
                           " checks with its budget live");
    }
    if (name == "grants_leave" && victim_ >= 0) {  // the leaving node gave its slices back before it went
      for (const GrantEvent& g : checker.grants()) {
        if (g.holder == victim_ && g.lent <= left_at_ && g.reclaimed) {
          v.failures.push_back("grants: grant " + std::to_string(g.id) +
                               " held by the leaving node was reclaimed, not released");
        }
      }
    }
    if (name == "grants_holder_crash" && victim_ >= 0) {
      bool reclaimed = false;
      for (const GrantEvent& g : checker.grants()) {
        reclaimed = reclaimed || (g.holder == victim_ && g.lent <= crashed_at_ && g.reclaimed);
      }
      if (!reclaimed) v.failures.push_back("grants: no slice of the crashed holder was reclaimed");
    }
    if (name == "grants_holder_pause" && victim_ >= 0 && resumed_at_.has_value()) {
      for (const GrantEvent& g : checker.grants()) {
        if (g.holder != victim_ || g.lent > paused_at_) continue;
        if (!g.settled.has_value() || *g.settled > *resumed_at_) {
          v.failures.push_back("grants: grant " + std::to_string(g.id) +
                               " of the paused holder was not settled before it resumed");
        }
      }
      // The victim's admissions from slices after the pause, against the units lent to it since.
      if (const std::optional<MonoTime> at = checker.SliceUseBeyondLent(victim_, kKeys, paused_at_)) {
        v.failures.push_back("grants: the paused holder admitted from a slice at " + At(*at) +
                             " beyond the units lent to it after the pause");
      }
    }
  }

  // CPU starvation of a key owner from `from` for `length`: its events are held for 0.2-1.5 s at a
  // time (World::Hold: a descheduled process -- its timers, the messages and checks addressed to it
  // wait), with 5-30 ms slices of running between.
  void Starve(MonoTime from, MonoTime length) {
    World& w = cluster_.world();
    w.At(from, [this] {
      victim_ = PickOwner();
      Note("starve " + SimCluster::IdOf(victim_) + " of CPU");
    });
    MonoTime t = from;
    while (t < from + length) {
      const MonoTime held = Ms(w.Uniform(200, 1'500));
      Plan(t, [this, held] {
        if (!Running(victim_)) return false;
        cluster_.world().Hold(victim_, cluster_.world().now() + held);
        return true;
      });
      t += held + Ms(w.Uniform(5, 30));
    }
    w.At(t, [this] {
      Note("starvation of " + SimCluster::IdOf(victim_) + " over");
      Healed();
    });
  }

  // A holder of a key that misses the key's reset and merges its old copy back: at `from` one of the
  // key's other holders is paused (one that owns none of the keys when there is one: a paused owner is
  // the pause class's known limit, not this one); 0.2-0.8 s later the key is reset at its owner (an admin
  // reset, as check_engine.cc applies one: limiter::ResetMerged stamped by the owner's clock, replicated
  // as any charge); 2.8-3.2 s after the pause (past failure detection) the holder resumes, is told it was
  // declared dead and takes its ranges back merged with its old copy; 0.5-1 s later the owner crashes, so
  // that the key is decided from the merged copies.
  void MissedReset(MonoTime from) {
    World& w = cluster_.world();
    const MonoTime reset_at = from + Ms(w.Uniform(200, 800));
    const MonoTime resume_at = from + Ms(w.Uniform(2'800, 3'200));
    const MonoTime crash_at = resume_at + Ms(w.Uniform(500, 1'000));
    Plan(from, [this] {
      std::vector<int> holders;
      std::tie(reset_key_, holders) = PickKey();
      if (holders.size() < 2) return false;
      std::set<int> owners;
      const auto& ring = cluster_.node(0)->ring();
      for (const SimKey& key : cluster_.checker().keys()) {
        owners.insert(cluster_.SlotOf(ring->PreferenceList(ring::RingToken(key.key), 1).front()->id));
      }
      reset_owner_ = holders[0];
      reset_holder_ = holders[1];
      for (size_t i = holders.size(); i-- > 1;) {
        if (owners.count(holders[i]) == 0) reset_holder_ = holders[i];
      }
      return Pause(reset_holder_);
    });
    Plan(reset_at, [this] {
      const SimKey& key = cluster_.checker().keys()[reset_key_];
      Note("reset " + key.key + " at " + SimCluster::IdOf(reset_owner_));
      if (reset_owner_ < 0 || !Running(reset_owner_)) return false;
      SimNode& node = *cluster_.node(reset_owner_);
      const storage::Slot slot{kLimitName, &key.spec};
      const limiter::TimeNs now = node.WallNow();
      // Above every stamp the owner issued in this millisecond; ResetMerged also goes above the base's.
      const limiter::Hlc stamp = limiter::MakeHlc(limiter::HlcPhysicalMs(now), limiter::kHlcLogicalMask);
      node.store().Update(key.key, std::span<const storage::Slot>(&slot, 1), now,
                          [&](std::span<limiter::MergeState* const> states) {
                            limiter::ResetMerged(key.spec, *states[0], stamp);
                          });
      cluster_.checker().Reset(reset_key_, cluster_.world().now());
      return true;
    });
    w.At(resume_at, [this] {
      Note("resume " + SimCluster::IdOf(reset_holder_));
      cluster_.Resume(reset_holder_);
      Healed();
    });
    Plan(crash_at, [this] { return Crash(reset_owner_); });
  }

  // The over-admission each key may show: for a crash (async), what the victim admitted in the last
  // replication interval before it (2 intervals + a network latency, to be safe); exact elsewhere.
  std::vector<uint64_t> Bounds() const {
    std::vector<uint64_t> bounds(cluster_.checker().keys().size(), 0);
    if (class_.promise != Promise::kBounded || victim_ < 0) return bounds;
    const SimOptions& o = cluster_.options();
    const MonoTime window = 2 * std::chrono::duration_cast<MonoTime>(o.replication.interval) +
                            std::chrono::duration_cast<MonoTime>(o.network.max_latency);
    for (const DecisionRecord& d : cluster_.checker().decisions()) {
      if (d.node == victim_ && d.allowed && !d.slice && d.at <= crashed_at_ && d.at + window >= crashed_at_)
        ++bounds[d.key];
    }
    // Quota grants: a grant record is a state change of the key's row like an admission; the units the
    // victim lent in that interval may be lost with it while its holders use them.
    for (const GrantEvent& g : cluster_.checker().grants()) {
      if (g.owner == victim_ && g.lent <= crashed_at_ && g.lent + window >= crashed_at_)
        bounds[g.key] += g.units;
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
  MonoTime left_at_{};  // leave, grants_leave: when the victim was told to leave
  std::vector<int> side_;
  MonoTime paused_at_{};                // grants_holder_pause: when the victim was paused,
  std::optional<MonoTime> resumed_at_;  // and resumed
  size_t reset_key_ = 0;                // missed_reset: the key reset,
  int reset_owner_ = -1;                // its owner (on n1's ring before the faults)
  int reset_holder_ = -1;               // and the holder that misses the reset
  std::vector<std::string> schedule_;
  uint64_t faults_asked_ = 0;
  uint64_t faults_injected_ = 0;
  std::optional<MonoTime> first_fault_;
  std::optional<MonoTime> healed_;
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

bool Fails(const RunResult& r) { return !r.ok; }

ShareFloor AnsweredFloor(std::string_view fault_class) {
  // Default mode: 99 % of every cell of every run, and so over the seeds (measured: 100 % in every
  // class and cell over 500 seeds each, 2026-11-27), but one.
  if (FaultOf(fault_class) == fault_class) return ShareFloor{};
  if (fault_class == "skew_closed") {
    // The skewed node passes its checks on (issue 35 item 4): 99 % over the seeds (99.69 %, seeds
    // 1-1000, 2026-11-28), not in every cell -- the refusals of the closed mode come in bursts (below),
    // the lowest cell was 88.2 %.
    ShareFloor f;
    f.cell = {9900, 8000, 9900};
    f.total = {9900, 9900, 9900};
    return f;
  }
  // --replication sync --failure-mode closed, with majority acknowledgement and take-over by majority read
  // (issue 35 items 1-2): the measured shares over seeds 1-1000 (2026-11-28, in the comments; before them,
  // with every later holder's acknowledgement: pause 85.02 % during, half_cut 72.67 %, crash 84.58 %,
  // starve 67.39 %, missed_reset 58.06 %) are asserted a little below, over the seeds only: a run's cells
  // are a few checks each. A crashed, paused or cut-off holder costs nothing any more; an isolated minority
  // holding two of a key's three holders still costs that key on the majority side (its earlier holders
  // cannot be read) until the heal, and the minority side refuses until it sees the others again.
  struct Measured {
    std::string_view name;
    uint32_t during;
    uint32_t after;
  };
  static constexpr Measured kMeasured[] = {
      {"pause_closed", 9900, 9900},         // 100.00 %, 99.98 %
      {"partition_closed", 8800, 5500},     // 91.49 %, 60.00 %
      {"half_cut_closed", 9900, 9900},      // 100.00 %, 100.00 %
      {"starve_closed", 9700, 9900},        // 98.78 %, 99.97 % (1000 of 1000 seeds exact)
      {"missed_reset_closed", 9900, 9900},  // 100.00 %, 99.96 %
      // The leave and the join are the last fault (no "after" phase).
      {"leave_closed", 9900, 0},  // 100.00 %
      {"join_closed", 9900, 0},   // 100.00 %
      {"crash_closed", 9900, 0},  // 100.00 % (84.58 % before)
      // Added with the ExactAvailableTest work (2026-11-28; seeds 1-1000 where it says so, else 1-200):
      {"restart_closed", 9900, 9900},       // 100.00 %, 100.00 % (1000)
      {"fast_restart_closed", 9900, 9900},  // 100.00 %, 99.98 % (1000)
      {"quick_joins_closed", 9900, 0},      // 100.00 % (1000)
      {"move_twice_closed", 9800, 9900},    // 99.70 %, 100.00 % (1000)
      {"lossy_closed", 9800, 9900},         // 99.55 %, 100.00 % (1000; 2 % of messages dropped)
      {"skew_pause_closed", 9800, 9800},    // 99.90 %, 99.91 %
      // Quota grants (2026-11-28, seeds 1-200; "before" 100.00 % in each).
      {"grants_holder_crash_closed", 9900, 0},     // 100.00 %
      {"grants_holder_pause_closed", 9900, 9900},  // 100.00 %, 99.93 %
      {"grants_owner_crash_closed", 9900, 0},      // 100.00 %
      {"grants_owner_pause_closed", 9900, 9800},   // 99.98 %, 99.42 %
      {"grants_join_closed", 9900, 0},             // 100.00 %
      {"grants_leave_closed", 9900, 0},            // 100.00 %
      {"grants_lossy_closed", 9900, 9900},         // 99.76 %, 100.00 %
  };
  ShareFloor f;
  f.cell = {0, 0, 0};
  f.total = {9900, 0, 0};
  for (const Measured& m : kMeasured) {
    if (m.name == fault_class) f.total = {9900, m.during, m.after};
  }
  return f;
}

void Tally::Add(const RunResult& r) {
  const Verdict& v = r.verdict;
  ++seeds;
  failing += Fails(r) ? 1 : 0;
  exact += r.exact ? 1 : 0;
  checks += v.checks;
  over_admitted += v.over_admitted;
  max_over = std::max(max_over, v.max_over);
  rollbacks += v.rollbacks;
  unanswered += v.unanswered;
  short_of_floor += v.short_of_floor;
  faults += r.faults_injected;
  grants_made += v.grants_made;
  grants_settled += v.grants_settled;
  grants_reclaimed += v.grants_reclaimed;
  grants_recalled += v.grants_recalled;
  hot_recalled_seeds += v.keys.size() > kKeys && v.keys[kKeys].grants_recalled > 0 ? 1 : 0;
  from_slices += v.from_slices;
  grant_slack += v.grant_slack;
  fewest_grants = std::min(fewest_grants, v.grants_made);
  for (const KeyVerdict& k : v.keys) admitted += k.admitted;
  if (v.longest_wait > longest_wait) {
    longest_wait = v.longest_wait;
    longest_wait_seed = r.seed;
  }
  if (r.faults_injected > 0) {
    for (const KeyVerdict& k : v.keys) {
      budget += k.limit;
      budget_spent += std::min(k.limit, k.charged_before_faults);
    }
  }
  for (size_t p = 0; p < kPhases; ++p) {
    share[p].counted += v.share[p].counted;
    share[p].answered += v.share[p].answered;
    min_share_bp[p] = std::min(min_share_bp[p], v.min_share_bp[p]);
  }
}

std::optional<MonoTime> WaitBound(std::string_view fault_class) {
  // Membership changes without a pause, a cut or a lossy network: one forward attempt may time out (a
  // crashed holder, 500 ms) and the next is answered. Measured over 300 seeds each (2026-11-28): at most
  // 509 ms; 1,381 ms (quick_joins_closed seed 187) before a switching owner refused a check passed on
  // to it by its new owner instead of sending it back into that node's dedup cache.
  static constexpr std::string_view kBounded[] = {"none",
                                                  "join",
                                                  "leave",
                                                  "quick_joins",
                                                  "restart",
                                                  "crash",
                                                  "crash_sync",
                                                  "join_closed",
                                                  "leave_closed",
                                                  "restart_closed",
                                                  "crash_closed",
                                                  "quick_joins_closed",
                                                  "fast_restart_closed",
                                                  "move_twice_closed"};
  for (std::string_view c : kBounded) {
    if (c == fault_class) return std::chrono::milliseconds(1'000);
  }
  return std::nullopt;
}

std::vector<std::string> Tally::Failures(std::string_view fault_class) const {
  const ShareFloor floor = AnsweredFloor(fault_class);
  std::vector<std::string> out;
  if (const std::optional<MonoTime> bound = WaitBound(fault_class); bound && longest_wait > *bound) {
    out.push_back(
        std::string(fault_class) + ": a check waited " +
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(longest_wait).count()) +
        " ms for its answer (seed " + std::to_string(longest_wait_seed) + "), over the class's " +
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(*bound).count()) + " ms");
  }
  if (seeds < kShareSeeds) return out;
  // grants_limit: the hot key nears its limit with slices out in most runs, and they are called back (in a
  // few the slices out are spent and released before the owner's watch finds the key near its limit).
  if (FaultOf(fault_class) == "grants_limit" && hot_recalled_seeds * 10 < seeds * 9) {
    out.push_back(std::string(fault_class) + ": the hot key's slices were recalled in " +
                  std::to_string(hot_recalled_seeds) + " of " + std::to_string(seeds) + " runs (< 90 %)");
  }
  for (size_t p = 0; p < kPhases; ++p) {
    const ShareCount& s = share[p];
    if (s.answered * 10000 >= s.counted * floor.total[p]) continue;
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s: answered share %s over %llu seeds: %.2f %% < %.2f %%",
                  std::string(fault_class).c_str(), PhaseName(static_cast<Phase>(p)),
                  static_cast<unsigned long long>(seeds), 100.0 * static_cast<double>(s.answered) / s.counted,
                  floor.total[p] / 100.0);
    out.push_back(buf);
  }
  return out;
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
  if (result.faults_injected < result.faults_asked) {
    out << "FAULTS: " << result.faults_injected << " of " << result.faults_asked
        << " planned were injected\n";
  }
  for (int slot : result.not_routing) out << "NOT ROUTING at the end: " << SimCluster::IdOf(slot) << "\n";
  for (const std::string& f : v.failures) out << "FAILED: " << f << "\n";
  out << "checks " << v.checks << ", unanswered " << v.unanswered << ", over-admitted " << v.over_admitted
      << " (beyond bound " << v.beyond_bound << "), rollbacks " << v.rollbacks << ", short of floor "
      << v.short_of_floor << ", wasted while healthy " << v.healthy_waste << "\n";
  if (v.grants_made > 0 || IsGrants(result.fault_class)) {
    out << "grants: made " << v.grants_made << ", settled " << v.grants_settled << " (reclaimed "
        << v.grants_reclaimed << ", recalled " << v.grants_recalled << "), checks admitted from slices "
        << v.from_slices << ", floor allowance for slices' unused units " << v.grant_slack << "\n";
  }
  out << "answered share (counted checks answered allowed or denied; lowest entry node):";
  for (size_t p = 0; p < kPhases; ++p) {
    const ShareCount& s = v.share[p];
    out << " " << PhaseName(static_cast<Phase>(p)) << " " << s.answered << "/" << s.counted << " (lowest "
        << v.min_share_bp[p] / 100.0 << " %);";
  }
  if (v.longest_wait_check != 0) {
    const CheckRecord& c = result.longest_wait;
    out << "\nlongest wait: check #" << c.id << " of key " << c.key << ", sent to "
        << SimCluster::IdOf(c.entry) << " at " << At(c.sent) << ", answered " << OutcomeName(c.outcome)
        << " at " << At(c.answered);
  }
  out << "\nexcused:";
  for (size_t x = 1; x < kExcuses; ++x)
    out << " " << ExcuseName(static_cast<Excuse>(x)) << " " << v.excused[x] << ";";
  out << "\n";
  for (const CheckRecord& c : result.unanswered) {
    out << "unanswered: check #" << c.id << " of key " << c.key << ", sent to " << SimCluster::IdOf(c.entry)
        << " at " << At(c.sent) << "\n";
  }
  for (size_t i = 0; i < result.refused.size() && i < 20; ++i) {
    const CheckRecord& c = result.refused[i];
    out << "refused: check #" << c.id << " of key " << c.key << ", sent to " << SimCluster::IdOf(c.entry)
        << " at " << At(c.sent) << ", answered at " << At(c.answered) << "\n";
  }
  out << "schedule:\n";
  for (const std::string& s : result.schedule) out << "  " << s << "\n";
  for (size_t k = 0; k < v.keys.size(); ++k) {
    const KeyVerdict& kv = v.keys[k];
    out << "  key " << k << ": limit " << kv.limit << ", admitted " << kv.admitted << ", bound +" << kv.bound
        << ", rollbacks " << kv.rollbacks << ", answered " << kv.answered << ", floor " << kv.floor
        << " (wasted charges " << kv.wasted << "), admitting charges before the faults "
        << kv.charged_before_faults;
    if (kv.from_slices > 0 || kv.grant_slack > 0) {
      out << ", admitted from slices " << kv.from_slices << ", slices' unused units " << kv.grant_slack;
    }
    out << "\n";
  }
  RunResult traced = result.trace.empty() ? RunSeed(result.fault_class, result.seed, true) : result;
  if (traced.trace_hash != result.trace_hash) out << "WARNING: the traced run differs (trace hash)\n";
  const std::optional<size_t> bad = v.first_bad_key;
  std::string key_text;
  std::optional<size_t> key = bad;
  if (!key.has_value() && !result.unanswered.empty()) key = result.unanswered.front().key;
  if (!key.has_value() && !result.refused.empty()) key = result.refused.front().key;
  if (!key.has_value() && v.longest_wait_check != 0) key = result.longest_wait.key;  // (a run that holds)
  if (key.has_value() && *key < result.keys.size()) key_text = result.keys[*key];
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
    bool keep =
        r.kind == TraceKind::kFault || r.kind == TraceKind::kRing ||
        (r.kind == TraceKind::kNote &&
         ((!key_text.empty() && r.text.find(key_text) != std::string::npos) ||
          r.text.find(" lends ") != std::string::npos || r.text.find(" settles ") != std::string::npos ||
          r.text.find("grant-release") != std::string::npos));
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
