#include "tests/sim/scale.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>

#include "ring/membership_wire.h"
#include "ring/ring_view.h"
#include "ring/token.h"
#include "tests/sim/world.h"

namespace ringlimit::sim {
namespace {

using std::chrono::nanoseconds;

// The nodes' wall clocks (ns since the Unix epoch) at simulated time 0: November 2026. Messages carry it
// (wall_ns) and incarnations start from it (wall-clock ms, as cluster.cc), so their varints are real-sized.
constexpr int64_t kWallEpochNs = 1'795'000'000'000'000'000;
constexpr uint8_t kUnknown = 0xff;  // a view_ cell: the observer does not know the subject

std::string IdOf(size_t slot) { return "n" + std::to_string(slot + 1); }
std::string AddressOf(size_t slot) { return "sim/" + IdOf(slot); }

// The slot of "n<k>" (an id) or "sim/n<k>" (an address); -1 when it is neither.
int SlotOf(std::string_view name, size_t slots) {
  if (name.starts_with("sim/")) name.remove_prefix(4);
  if (!name.starts_with("n")) return -1;
  size_t k = 0;
  const auto [end, ec] = std::from_chars(name.data() + 1, name.data() + name.size(), k);
  if (ec != std::errc() || end != name.data() + name.size() || k == 0 || k > slots) return -1;
  return static_cast<int>(k - 1);
}

// CPU seconds of this process so far (what a phase cost the simulator; the machine may be shared, so its
// wall time says less).
double CpuSeconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

uint64_t MembersHash(const std::vector<ring::RingMember>& members) {
  uint64_t h = 1469598103934665603ULL;
  for (const ring::RingMember& m : members) {
    h = (h ^ ring::RingToken(m.id)) * 1099511628211ULL;
    h = (h ^ ring::RingToken(m.address)) * 1099511628211ULL;
    h = (h ^ m.vnodes) * 1099511628211ULL;
  }
  return h;
}

// What a phase waits for. Every live observer must hold every live subject in the state named here.
enum class Expect : uint8_t {
  kAllAlive,     // every live member alive
  kCrashedDead,  // the crashed member dead (the live ones are not looked at)
  kSidesDead,    // every live member of the other side dead
};

class ScaleCluster {
 public:
  ScaleCluster(const ScaleOptions& options, size_t slots)
      : options_(options),
        world_(options.seed, slots),
        slots_(slots),
        nodes_(slots),
        view_(slots * slots, kUnknown),
        side_(slots, 0) {}

  World& world() { return world_; }
  size_t slots() const { return slots_; }
  bool live(size_t slot) const {
    return nodes_[slot].membership != nullptr && world_.up(static_cast<int>(slot));
  }
  const ring::Membership& membership(size_t slot) const { return *nodes_[slot].membership; }

  uint64_t bytes() const { return bytes_; }
  uint64_t messages() const { return messages_; }
  uint64_t full_state() const { return full_state_; }
  uint64_t ring_changes() const { return ring_changes_; }
  uint64_t id_conflicts() const { return id_conflicts_; }
  size_t live_count() const {
    size_t n = 0;
    for (size_t s = 0; s < slots_; ++s) n += live(s) ? 1 : 0;
    return n;
  }

  void Start(size_t slot, std::vector<std::string> seeds) {
    Node& node = nodes_[slot];
    node.life = world_.StartLife(static_cast<int>(slot));
    ring::MembershipOptions membership_options = options_.membership;
    membership_options.random_seed = world_.Uniform(1, UINT64_MAX);
    ring::MemberInfo self;
    self.id = IdOf(slot);
    self.http_address = "http/" + self.id;
    self.peer_address = AddressOf(slot);
    self.vnodes = options_.vnodes;
    self.incarnation = static_cast<uint64_t>(WallNs() / 1'000'000);  // wall-clock ms, as cluster.cc
    node.membership = std::make_unique<ring::Membership>(membership_options, self);
    Process(slot, node.membership->Start(world_.now(), seeds));
    // Ticks every probe_interval / 4, as cluster.cc, at a random phase.
    const nanoseconds every = TickEvery();
    world_.Schedule(world_.now() + nanoseconds(world_.Uniform(0, static_cast<uint64_t>(every.count()))),
                    static_cast<int>(slot), node.life, [this, slot] { Tick(slot); });
  }

  void Crash(size_t slot) { world_.StopLife(static_cast<int>(slot)); }

  // Sides of a partition: messages between slots of different sides are lost. All 0: no partition.
  void SetSides(std::vector<int> sides) { side_ = std::move(sides); }
  int side(size_t slot) const { return side_[slot]; }

  // Whether every live observer holds every live subject as `expect` says (`crashed`: kCrashedDead's).
  bool Agreed(Expect expect, size_t crashed) const {
    for (size_t o = 0; o < slots_; ++o) {
      if (!live(o)) continue;
      const uint8_t* row = &view_[o * slots_];
      if (expect == Expect::kCrashedDead) {
        if (row[crashed] != static_cast<uint8_t>(ring::MemberState::kDead)) return false;
        continue;
      }
      for (size_t s = 0; s < slots_; ++s) {
        if (!live(s)) continue;
        const bool other_side = side_[s] != side_[o];
        const ring::MemberState want =
            expect == Expect::kSidesDead && other_side ? ring::MemberState::kDead : ring::MemberState::kAlive;
        if (row[s] != static_cast<uint8_t>(want)) return false;
      }
    }
    return true;
  }

  // Whether every live node's ring members are the live members of its side (the ring it should publish).
  bool RingsAgreed() {
    std::vector<uint64_t> expected(slots_ + 1, 0);
    std::vector<int> sides;
    for (size_t s = 0; s < slots_; ++s) {
      if (live(s) && std::find(sides.begin(), sides.end(), side_[s]) == sides.end())
        sides.push_back(side_[s]);
    }
    for (int side : sides) expected[static_cast<size_t>(side)] = MembersHash(ExpectedRing(side));
    for (size_t s = 0; s < slots_; ++s) {
      if (!live(s)) continue;
      Node& node = nodes_[s];
      if (node.ring_dirty) {
        node.ring_hash = MembersHash(node.membership->RingMembers());
        node.ring_dirty = false;
      }
      if (node.ring_hash != expected[static_cast<size_t>(side_[s])]) return false;
    }
    return true;
  }

  // The ring the live members of `side` should hold: themselves, sorted by id as RingMembers sorts.
  std::vector<ring::RingMember> ExpectedRing(int side) const {
    std::vector<ring::RingMember> ring;
    for (size_t s = 0; s < slots_; ++s) {
      if (live(s) && side_[s] == side)
        ring.push_back(ring::RingMember{IdOf(s), options_.vnodes, AddressOf(s)});
    }
    std::sort(ring.begin(), ring.end(),
              [](const ring::RingMember& a, const ring::RingMember& b) { return a.id < b.id; });
    return ring;
  }

  // Checks what Agreed read from the events against every live node's Members(): "" when they match.
  std::string ConfirmWithTables() const {
    for (size_t o = 0; o < slots_; ++o) {
      if (!live(o)) continue;
      std::vector<uint8_t> row(slots_, kUnknown);
      for (const ring::MemberInfo& m : nodes_[o].membership->Members()) {
        const int s = SlotOf(m.id, slots_);
        if (s < 0) return IdOf(o) + " holds an unknown member " + m.id;
        row[static_cast<size_t>(s)] = static_cast<uint8_t>(m.state);
      }
      for (size_t s = 0; s < slots_; ++s) {
        if (row[s] != view_[o * slots_ + s]) {
          return IdOf(o) + "'s table holds " + IdOf(s) + " as " + StateName(row[s]) + ", its events said " +
                 StateName(view_[o * slots_ + s]);
        }
      }
    }
    return "";
  }

  bool AnyPendingGossip() const {
    for (size_t s = 0; s < slots_; ++s) {
      if (live(s) && nodes_[s].membership->HasPendingGossip()) return true;
    }
    return false;
  }

 private:
  struct Node {
    std::unique_ptr<ring::Membership> membership;
    uint64_t life = 0;
    bool ring_dirty = true;
    uint64_t ring_hash = 0;
  };

  static std::string StateName(uint8_t state) {
    return state == kUnknown ? "unknown"
                             : std::string(ring::MemberStateName(static_cast<ring::MemberState>(state)));
  }

  int64_t WallNs() const { return kWallEpochNs + world_.now().count(); }
  nanoseconds TickEvery() const {
    return std::max<nanoseconds>(options_.membership.probe_interval / 4, std::chrono::milliseconds(1));
  }

  void Tick(size_t slot) {
    Process(slot, nodes_[slot].membership->Tick(world_.now()));
    world_.Schedule(world_.now() + TickEvery(), static_cast<int>(slot), nodes_[slot].life,
                    [this, slot] { Tick(slot); });
  }

  // As cluster.cc Process: stamp, encode and send every message; note the events and ring changes.
  void Process(size_t slot, ring::MembershipOutput out) {
    for (ring::Outgoing& outgoing : out.messages) {
      outgoing.message.wall_ns = WallNs();
      Send(slot, outgoing);
    }
    for (const ring::MemberEvent& event : out.events) {
      world_.Hash(static_cast<uint64_t>(event.kind), event.member.incarnation);
      const int subject = SlotOf(event.member.id, slots_);
      if (subject < 0) continue;
      view_[slot * slots_ + static_cast<size_t>(subject)] = event.kind == ring::MemberEventKind::kForgotten
                                                                ? kUnknown
                                                                : static_cast<uint8_t>(event.member.state);
    }
    id_conflicts_ += out.id_conflicts.size();
    if (out.ring_changed) {
      ++ring_changes_;
      nodes_[slot].ring_dirty = true;
    }
  }

  void Send(size_t from, const ring::Outgoing& outgoing) {
    ring::WireMessage wire = ring::EncodeMembershipMessage(outgoing.message);
    bytes_ += wire.payload.size();
    ++messages_;
    if (outgoing.message.full_state) ++full_state_;
    const int to = SlotOf(outgoing.to_address, slots_);
    world_.Hash(from, static_cast<uint64_t>(to) << 32 | wire.payload.size());
    if (to < 0 || !live(static_cast<size_t>(to))) return;       // nobody there
    if (side_[from] != side_[static_cast<size_t>(to)]) return;  // cut
    const auto latency = world_.Uniform(static_cast<uint64_t>(nanoseconds(options_.min_latency).count()),
                                        static_cast<uint64_t>(nanoseconds(options_.max_latency).count()));
    const size_t slot = static_cast<size_t>(to);
    world_.Schedule(
        world_.now() + nanoseconds(latency), to, nodes_[slot].life, [this, slot, wire = std::move(wire)] {
          // The cut is judged when sent: a message in flight when a cut starts or heals arrives.
          std::optional<ring::Message> message = ring::DecodeMembershipMessage(wire.method, wire.payload);
          if (message) Process(slot, nodes_[slot].membership->Receive(world_.now(), *message));
        });
  }

  const ScaleOptions& options_;
  World world_;
  size_t slots_;
  std::vector<Node> nodes_;
  std::vector<uint8_t> view_;  // view_[observer * slots_ + subject]: the state observer holds subject in
  std::vector<int> side_;
  uint64_t bytes_ = 0;
  uint64_t messages_ = 0;
  uint64_t full_state_ = 0;
  uint64_t ring_changes_ = 0;
  uint64_t id_conflicts_ = 0;
};

// Runs `cluster` until `expect` holds and the rings agree (checked every check_interval), at most `limit`
// after `since`. Fills the report's times (from `since`) and counters (from the call).
PhaseReport WaitFor(ScaleCluster& cluster, const ScaleOptions& options, std::string name, Expect expect,
                    size_t crashed, MonoTime since, nanoseconds limit) {
  PhaseReport phase;
  phase.name = std::move(name);
  const double cpu = CpuSeconds();
  const uint64_t bytes = cluster.bytes();
  const uint64_t messages = cluster.messages();
  const uint64_t ring_changes = cluster.ring_changes();
  World& world = cluster.world();
  std::optional<nanoseconds> agreed;
  std::optional<nanoseconds> rings;
  while (world.now() - since < limit) {
    if (!world.RunUntil(world.now() + options.check_interval)) {
      phase.detail = "the simulated clock stopped advancing";
      break;
    }
    if (!agreed && cluster.Agreed(expect, crashed)) agreed = world.now() - since;
    if (!rings && expect != Expect::kCrashedDead && cluster.RingsAgreed()) rings = world.now() - since;
    if (!rings && expect == Expect::kCrashedDead && agreed && cluster.RingsAgreed())
      rings = world.now() - since;
    if (agreed && rings) break;
  }
  phase.bytes = cluster.bytes() - bytes;
  phase.messages = cluster.messages() - messages;
  phase.ring_changes = cluster.ring_changes() - ring_changes;
  phase.cpu_s = CpuSeconds() - cpu;
  if (!agreed || !rings) {
    if (phase.detail.empty())
      phase.detail = std::string(agreed ? "rings" : "members") + " did not agree in time";
    return phase;
  }
  phase.agreement = *agreed;
  phase.ring_agreement = *rings;
  phase.detail = cluster.ConfirmWithTables();
  phase.converged = phase.detail.empty();
  return phase;
}

PhaseReport Noted(const ScaleOptions& options, PhaseReport phase) {
  if (options.progress) {
    std::fprintf(stderr, "%s: %s after %.2f s\n", phase.name.c_str(), phase.converged ? "agreed" : "FAILED",
                 std::chrono::duration<double>(phase.agreement).count());
  }
  return phase;
}

}  // namespace

const PhaseReport* ScaleReport::phase(const std::string& name) const {
  for (const PhaseReport& p : phases) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

ScaleReport RunScale(const ScaleOptions& options) {
  ScaleReport report;
  report.nodes = options.nodes;
  report.death_target = options.membership.suspicion_timeout + 10 * options.membership.probe_interval;
  const size_t slots = options.nodes + 1;  // the last slot is the join phase's newcomer
  ScaleCluster cluster(options, slots);
  World& world = cluster.world();

  // 1. Bootstrap: n1 alone, the others join through it, 1 ms apart.
  const double bootstrap_cpu = CpuSeconds();
  cluster.Start(0, {});
  for (size_t s = 1; s < options.nodes; ++s) {
    world.At(world.now() + std::chrono::milliseconds(s), [&cluster, s] { cluster.Start(s, {AddressOf(0)}); });
  }
  while (world.now() < MonoTime(options.bootstrap_limit)) {
    if (!world.RunUntil(world.now() + std::chrono::seconds(1))) break;
    if (options.progress &&
        world.now().count() % std::chrono::nanoseconds(std::chrono::seconds(30)).count() == 0) {
      std::fprintf(stderr, "bootstrap: %.0f s simulated, %s, gossip %s\n",
                   std::chrono::duration<double>(world.now()).count(),
                   cluster.Agreed(Expect::kAllAlive, 0) ? "all alive everywhere" : "not all alive everywhere",
                   cluster.AnyPendingGossip() ? "pending" : "drained");
    }
    if (world.now() > MonoTime(std::chrono::milliseconds(options.nodes)) &&
        cluster.live_count() == options.nodes && cluster.Agreed(Expect::kAllAlive, 0) &&
        !cluster.AnyPendingGossip()) {
      report.bootstrapped = true;
      break;
    }
  }
  report.bootstrap = world.now();
  report.bootstrap_cpu_s = CpuSeconds() - bootstrap_cpu;
  if (!report.bootstrapped) return report;

  // 2. Steady state: at least three anti-entropy exchanges per node.
  const nanoseconds window = std::max<nanoseconds>(
      options.steady_window, 3 * ring::SyncIntervalFor(options.membership, options.nodes));
  const uint64_t bytes = cluster.bytes();
  const uint64_t messages = cluster.messages();
  const uint64_t full_state = cluster.full_state();
  const double steady_cpu = CpuSeconds();
  world.RunUntil(world.now() + window);
  report.steady_cpu_s = CpuSeconds() - steady_cpu;
  const double node_seconds =
      static_cast<double>(options.nodes) * std::chrono::duration<double>(window).count();
  report.steady_window = window;
  report.steady_bytes_per_node_s = static_cast<double>(cluster.bytes() - bytes) / node_seconds;
  report.steady_messages_per_node_s = static_cast<double>(cluster.messages() - messages) / node_seconds;
  report.full_state_per_node_s = static_cast<double>(cluster.full_state() - full_state) / node_seconds;

  if (options.progress) {
    std::fprintf(stderr, "steady: %.0f B/node/s over %.0f s\n", report.steady_bytes_per_node_s,
                 std::chrono::duration<double>(window).count());
  }
  if (!options.steady_only) {
    const nanoseconds limit = options.phase_limit;
    // 3. Join: the newcomer's seed is one random member.
    const size_t newcomer = options.nodes;
    const size_t seed = world.Uniform(0, options.nodes - 1);
    MonoTime since = world.now();
    cluster.Start(newcomer, {AddressOf(seed)});
    report.phases.push_back(
        Noted(options, WaitFor(cluster, options, "join", Expect::kAllAlive, 0, since, limit)));
    report.phases.back().detail +=
        report.phases.back().converged ? IdOf(newcomer) + " through " + IdOf(seed) : "";

    // 4. Crash: a random member other than the newcomer.
    const size_t crashed = world.Uniform(0, options.nodes - 1);
    since = world.now();
    cluster.Crash(crashed);
    report.phases.push_back(
        Noted(options, WaitFor(cluster, options, "crash", Expect::kCrashedDead, crashed, since, limit)));
    if (report.phases.back().converged) report.phases.back().detail = IdOf(crashed) + " crashed";

    // 5. Partition: two random halves of the live members, until each holds the other dead; then heal.
    std::vector<size_t> live;
    for (size_t s = 0; s < slots; ++s) {
      if (cluster.live(s)) live.push_back(s);
    }
    std::shuffle(live.begin(), live.end(), world.rng());
    std::vector<int> sides(slots, 0);
    for (size_t i = 0; i < live.size() / 2; ++i) sides[live[i]] = 1;
    since = world.now();
    cluster.SetSides(sides);
    report.phases.push_back(
        Noted(options, WaitFor(cluster, options, "partition", Expect::kSidesDead, 0, since, limit)));
    if (report.phases.back().converged) {
      report.phases.back().detail = std::to_string(live.size() / 2) + " + " +
                                    std::to_string(live.size() - live.size() / 2) + " members";
      since = world.now();
      cluster.SetSides(std::vector<int>(slots, 0));
      report.phases.push_back(
          Noted(options, WaitFor(cluster, options, "heal", Expect::kAllAlive, 0, since, limit)));
    }
  }
  report.id_conflicts = cluster.id_conflicts();
  for (size_t s = 0; s < slots; ++s) {
    if (cluster.live(s)) {
      report.ring = cluster.membership(s).RingMembers();
      break;
    }
  }
  report.events = world.events_run();
  report.trace_hash = world.trace_hash();
  report.simulated = world.now();
  return report;
}

}  // namespace ringlimit::sim
