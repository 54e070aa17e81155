// ringlimit_scale --nodes N [--seed S] [--baseline M] [--steady-s S] [--vnodes V] [--wall-limit-s S]
//                 [--rss-limit-gib G] [--progress 1]
//
// The membership at N nodes on the deterministic simulator (tests/sim/scale.h): prints the time until every
// member agrees after a join, a crash and a partition heal, the gossip bytes per node per second in steady
// state, the wall time and the peak RSS, each next to its target. Exit status 0 when every target is met,
// 1 when one is not, 2 on a usage error.
//
// Targets (issue 32, item 7):
//  - every phase converges (join, crash, partition, heal);
//  - a crashed member is dead at every live member within suspicion_timeout + 10 probe periods;
//  - steady-state gossip bytes per node per second at N nodes <= 2 x those at --baseline M nodes (default:
//    100 when N > 100; 0 skips the comparison). The baseline is simulated in the same run (steady state
//    only);
//  - the run (the baseline included) within --wall-limit-s (default 600) and --rss-limit-gib (default 24).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ring/ring_view.h"
#include "tests/sim/scale.h"

namespace {

using ringlimit::sim::PhaseReport;
using ringlimit::sim::RunScale;
using ringlimit::sim::ScaleOptions;
using ringlimit::sim::ScaleReport;

double Seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

bool ParseNumber(const char* text, uint64_t& out) {
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0') return false;
  out = value;
  return true;
}

int Usage() {
  std::fprintf(stderr,
               "usage: ringlimit_scale --nodes N [--seed S] [--baseline M] [--steady-s S] [--vnodes V]\n"
               "                       [--wall-limit-s S] [--rss-limit-gib G] [--progress 1]\n");
  return 2;
}

const char* Verdict(bool ok) { return ok ? "ok" : "FAILED"; }

double PeakRssGib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / (1024.0 * 1024.0);  // ru_maxrss is in KiB on Linux
}

// User + system CPU seconds of this process (on a shared machine the wall time also counts the waits).
double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

}  // namespace

int main(int argc, char** argv) {
  const auto started = std::chrono::steady_clock::now();
  ScaleOptions options;
  uint64_t baseline = 0;
  bool baseline_given = false;
  uint64_t wall_limit_s = 600;
  uint64_t rss_limit_gib = 24;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    uint64_t value = 0;
    if (i + 1 >= argc || !ParseNumber(argv[i + 1], value)) return Usage();
    ++i;
    if (flag == "--nodes") {
      options.nodes = value;
    } else if (flag == "--seed") {
      options.seed = value;
    } else if (flag == "--baseline") {
      baseline = value;
      baseline_given = true;
    } else if (flag == "--steady-s") {
      options.steady_window = std::chrono::seconds(value);
    } else if (flag == "--vnodes") {
      options.vnodes = static_cast<uint32_t>(value);
    } else if (flag == "--wall-limit-s") {
      wall_limit_s = value;
    } else if (flag == "--rss-limit-gib") {
      rss_limit_gib = value;
    } else if (flag == "--progress") {
      options.progress = value != 0;
    } else {
      return Usage();
    }
  }
  if (options.nodes < 4 || options.vnodes < 1 || options.vnodes > ringlimit::ring::kMaxVnodes) return Usage();
  if (!baseline_given) baseline = options.nodes > 100 ? 100 : 0;
  if (baseline != 0 && baseline < 4) return Usage();

  const auto& m = options.membership;
  std::printf(
      "ringlimit_scale: %zu nodes, seed %llu; probe %lld ms, suspicion %lld ms, sync %lld ms (%lld ms at "
      "this size), piggyback %u, vnodes %u\n",
      options.nodes, static_cast<unsigned long long>(options.seed),
      static_cast<long long>(m.probe_interval.count()), static_cast<long long>(m.suspicion_timeout.count()),
      static_cast<long long>(m.sync_interval.count()),
      static_cast<long long>(ringlimit::ring::SyncIntervalFor(m, options.nodes).count()), m.max_piggyback,
      options.vnodes);
  std::fflush(stdout);

  bool ok = true;
  const ScaleReport report = RunScale(options);
  std::printf(
      "bootstrap   %s: %.1f s simulated until every node held every other alive and no gossip was left "
      "(CPU %.1f s)\n",
      report.bootstrapped ? "done" : "FAILED", Seconds(report.bootstrap), report.bootstrap_cpu_s);
  ok = ok && report.bootstrapped;
  if (report.bootstrapped) {
    std::printf(
        "steady      %.0f B/node/s, %.2f messages/node/s, %.4f full-state pings/node/s, over %.0f s (CPU "
        "%.1f s)\n",
        report.steady_bytes_per_node_s, report.steady_messages_per_node_s, report.full_state_per_node_s,
        Seconds(report.steady_window), report.steady_cpu_s);
  }
  for (const PhaseReport& p : report.phases) {
    std::printf(
        "%-11s %s: members agreed after %.2f s, rings after %.2f s; %.1f MB in %llu messages, %llu ring "
        "changes (%s%sCPU %.1f s)\n",
        p.name.c_str(), p.converged ? "done" : "FAILED", Seconds(p.agreement), Seconds(p.ring_agreement),
        static_cast<double>(p.bytes) / 1e6, static_cast<unsigned long long>(p.messages),
        static_cast<unsigned long long>(p.ring_changes), p.detail.c_str(), p.detail.empty() ? "" : "; ",
        p.cpu_s);
    ok = ok && p.converged;
  }
  if (!report.phases.empty() && report.phases.size() < 4) {
    std::printf("phases      FAILED: %zu of 4 ran\n", report.phases.size());
    ok = false;
  }
  if (const PhaseReport* crash = report.phase("crash"); crash != nullptr) {
    const bool met = crash->converged && crash->agreement <= report.death_target;
    std::printf("target      death known everywhere %.2f s <= suspicion + 10 probe periods %.2f s: %s\n",
                Seconds(crash->agreement), Seconds(report.death_target), Verdict(met));
    ok = ok && met;
  }
  if (report.id_conflicts != 0) {
    std::printf("id          FAILED: %llu id conflicts\n",
                static_cast<unsigned long long>(report.id_conflicts));
    ok = false;
  }
  if (!report.ring.empty()) {
    // The fastest of 5 builds: the machine may be shared.
    double ms = 0;
    bool built = true;
    for (int i = 0; i < 5; ++i) {
      const auto before = std::chrono::steady_clock::now();
      built = built && ringlimit::ring::RingView::Create(1, report.ring).ok();
      const double took =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - before).count();
      ms = i == 0 ? took : std::min(ms, took);
    }
    std::printf("ring view   RingView::Create of %zu members x %u vnodes: %.1f ms (fastest of 5)%s\n",
                report.ring.size(), options.vnodes, ms, built ? "" : " (FAILED)");
    ok = ok && built;
  }
  std::fflush(stdout);

  if (baseline != 0 && report.bootstrapped) {
    ScaleOptions base = options;
    base.nodes = baseline;
    base.steady_only = true;
    const ScaleReport b = RunScale(base);
    const double ratio =
        b.steady_bytes_per_node_s > 0 ? report.steady_bytes_per_node_s / b.steady_bytes_per_node_s : 0;
    const bool met = b.bootstrapped && ratio <= 2.0;
    std::printf("baseline    %zu nodes: %.0f B/node/s, %.2f messages/node/s over %.0f s\n", b.nodes,
                b.steady_bytes_per_node_s, b.steady_messages_per_node_s, Seconds(b.steady_window));
    std::printf("target      gossip bytes per node per second at %zu nodes <= 2 x at %zu: %.2f x: %s\n",
                options.nodes, b.nodes, ratio, Verdict(met));
    ok = ok && met;
  }

  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const double rss = PeakRssGib();
  const bool wall_met = wall < static_cast<double>(wall_limit_s);
  const bool rss_met = rss < static_cast<double>(rss_limit_gib);
  std::printf("target      wall time %.1f s (CPU %.1f s) < %llu s: %s\n", wall, CpuSeconds(),
              static_cast<unsigned long long>(wall_limit_s), Verdict(wall_met));
  std::printf("target      peak RSS %.2f GiB < %llu GiB: %s\n", rss,
              static_cast<unsigned long long>(rss_limit_gib), Verdict(rss_met));
  std::printf("simulated   %.1f s, %llu events, trace hash %016llx\n", Seconds(report.simulated),
              static_cast<unsigned long long>(report.events),
              static_cast<unsigned long long>(report.trace_hash));
  ok = ok && wall_met && rss_met;
  std::printf("result      %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
