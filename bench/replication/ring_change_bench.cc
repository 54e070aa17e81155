// ring_change_bench: what a join costs one node that holds many keys (issue 33 item 5). In one process: node
// "a" (a MemoryStore filled with --keys states it holds, its Replicator and HandoffManager on an executor
// thread of their own) and the other members as loopback peers that acknowledge everything without
// storing it. After a first drop on the old ring (every token read once: the start), a member joins; the
// run ends when a has handed off, re-replicated and dropped. Printed per case: the states the
// re-replication and drop scans read (HandoffStats::scanned_states), the process CPU and wall time of the
// ring change, for the scan of the ranges whose holders changed (the default) and for the full scan
// (HandoffOptions::scan_moved_only = false) measured in the same run, and their ratios.
//
// Usage: ring_change_bench [--keys N] [--vnodes V]   (defaults: 1,000,000 keys, 128 vnodes, R = 3)
#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "limiter/limiter.h"
#include "replication/handoff.h"
#include "replication/replicator.h"
#include "replication/testing/executor_thread.h"
#include "replication/testing/loopback_link.h"
#include "ring/ring_view.h"
#include "ring/token.h"
#include "storage/testing/charge.h"

namespace ringlimit::replication {
namespace {

using RingPtr = std::shared_ptr<const ring::RingView>;

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

RingPtr MakeRing(const std::vector<std::string>& ids, uint32_t vnodes, uint64_t version) {
  std::vector<ring::RingMember> members;
  for (const std::string& id : ids) members.push_back({id, vnodes});
  return ring::RingView::Create(version, std::move(members)).value();
}

bool Holds(const ring::RingView& ring, std::string_view id, ring::Token t) {
  for (const ring::RingMember* m : ring.PreferenceList(t, 3)) {
    if (m->id == id) return true;
  }
  return false;
}

struct Figures {
  uint64_t scanned = 0;  // states read by re-replication and drop after the join
  uint64_t rereplicated = 0;
  uint64_t handed_off = 0;
  uint64_t dropped = 0;
  double cpu = 0;   // process CPU seconds of the ring change
  double wall = 0;  // seconds until the drop was over
};

// Waits (polling, up to two minutes) until `done` holds; false if it never did.
template <typename Done>
bool Await(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// One join from `ids` to `ids` + `joining` as node "a" sees it, holding `keys` states.
Figures Join(const std::vector<std::string>& ids, const std::string& joining, size_t keys, uint32_t vnodes,
             bool moved_only) {
  std::vector<std::string> grown = ids;
  grown.push_back(joining);
  const RingPtr before = MakeRing(ids, vnodes, 1);
  const RingPtr after = MakeRing(grown, vnodes, 2);

  testing::LoopbackNetwork net;
  testing::LoopbackMember& a = net.Add("a");
  for (const std::string& id : grown) {
    if (id == "a") continue;
    testing::LoopbackMember& peer = net.Add(id);
    peer.Handle(peer::METHOD_STATE_UPDATE, [](std::string_view) { return std::string(); });
    peer.Handle(peer::METHOD_HANDOFF_DONE, [](std::string_view) { return std::string(); });
  }
  // The keys a holds on `before`, one state each (no observer: filling replicates nothing).
  limiter::LimitSpec spec;
  spec.algorithm = limiter::Algorithm::kFixedWindow;
  spec.limit = 1'000'000;
  spec.window = 3600 * limiter::kSecond;
  const storage::Slot slot{"rps", &spec};
  const limiter::TimeNs now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count();
  size_t filled = 0;
  for (uint64_t i = 0; filled < keys; ++i) {
    const std::string key = "user:" + std::to_string(i);
    if (!Holds(*before, "a", ring::RingToken(key))) continue;
    a.store().Update(key, std::span<const storage::Slot>(&slot, 1), now,
                     [&](std::span<limiter::MergeState* const> states) {
                       storage_testing::ChargeMerged(spec, *states[0], limiter::Request{1, now, 0.});
                     });
    ++filled;
  }

  testing::ExecutorThread exec;
  ReplicatorOptions ropts;
  ropts.replicas = 3;
  Replicator replicator(a.store(), a, exec.executor(), ropts);
  HandoffOptions hopts;
  hopts.replicas = 3;
  hopts.drop_delay = std::chrono::milliseconds(0);
  hopts.scan_moved_only = moved_only;
  HandoffManager handoff(a.store(), a, replicator, exec.executor(), hopts);
  replicator.Start();
  handoff.Start();
  net.SetRing(ids);
  // The start: a on `before` with nothing moving; its first drop reads every state (and drops none).
  handoff.OnRingChanged(before, before);
  if (!Await([&] { return handoff.stats().scanned_states >= keys; })) {
    std::fprintf(stderr, "the first drop did not end\n");
    std::exit(1);
  }
  const HandoffStats start = handoff.stats();

  Figures f;
  const double cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  net.SetRing(grown);
  handoff.OnRingChanged(before, after);
  if (!Await([&] { return handoff.stats().dropped_states > start.dropped_states; })) {
    std::fprintf(stderr, "the join did not end in a drop\n");
    std::exit(1);
  }
  f.cpu = CpuSeconds() - cpu0;
  f.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const HandoffStats end = handoff.stats();
  f.scanned = end.scanned_states - start.scanned_states;
  f.rereplicated = end.rereplicated_keys - start.rereplicated_keys;
  f.handed_off = end.handed_off_keys - start.handed_off_keys;
  f.dropped = end.dropped_states - start.dropped_states;
  handoff.Stop();
  replicator.Stop();
  net.Shutdown();
  return f;
}

void Print(const char* mode, const Figures& f) {
  std::printf(
      "  %-13s read %9llu states  re-replicated %8llu  handed off %8llu  dropped %8llu  CPU %6.3f s  "
      "wall %6.3f s\n",
      mode, static_cast<unsigned long long>(f.scanned), static_cast<unsigned long long>(f.rereplicated),
      static_cast<unsigned long long>(f.handed_off), static_cast<unsigned long long>(f.dropped), f.cpu,
      f.wall);
}

int Main(int argc, char** argv) {
  size_t keys = 1'000'000;
  uint32_t vnodes = ring::kDefaultVnodes;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--keys") == 0) {
      keys = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (std::strcmp(argv[i], "--vnodes") == 0) {
      vnodes = static_cast<uint32_t>(std::strtoul(argv[i + 1], nullptr, 10));
    } else {
      std::fprintf(stderr, "usage: ring_change_bench [--keys N] [--vnodes V]\n");
      return 2;
    }
  }
  std::printf("ring_change_bench: node a holds %zu keys, %u vnodes per member, R = 3\n", keys, vnodes);
  const std::vector<std::vector<std::string>> cases = {{"a", "b", "c"}, {"a", "b", "c", "d"}};
  for (const auto& ids : cases) {
    const std::string joining(1, static_cast<char>('a' + ids.size()));
    std::printf("%zu -> %zu members (%s joins):\n", ids.size(), ids.size() + 1, joining.c_str());
    const Figures moved = Join(ids, joining, keys, vnodes, true);
    Print("moved ranges", moved);
    const Figures full = Join(ids, joining, keys, vnodes, false);
    Print("full scan", full);
    std::printf("  full / moved: states read %.2fx, CPU %.2fx, wall %.2fx\n",
                static_cast<double>(full.scanned) / static_cast<double>(std::max<uint64_t>(moved.scanned, 1)),
                full.cpu / moved.cpu, full.wall / moved.wall);
  }
  return 0;
}

}  // namespace
}  // namespace ringlimit::replication

int main(int argc, char** argv) { return ringlimit::replication::Main(argc, argv); }
