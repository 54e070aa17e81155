// The load generator of cluster_bench (see cluster_bench.cc): keep-alive HTTP connections to the nodes, each
// with one GET /v1/check in flight at a time, in a closed loop (each answer sends the next request) or paced
// at a fixed rate; pausable with nothing in flight (for --callgrind's measured intervals).
//
// Thread safety: none; a Phase and its connections run on one io_context thread.
#ifndef RINGLIMIT_BENCH_CLUSTER_LOAD_H_
#define RINGLIMIT_BENCH_CLUSTER_LOAD_H_

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/cluster/callgrind.h"

namespace ringlimit::bench {

using Clock = std::chrono::steady_clock;

// One node as the load generator targets it.
struct Target {
  std::string id;
  uint16_t port = 0;
  pid_t pid = 0;
};

// The key a connection to target `node` sends next.
using KeyPicker = std::function<const std::string&(size_t node, std::mt19937_64& rng)>;

struct PhaseResult {
  std::string name;
  double seconds = 0;
  uint64_t checks = 0;
  uint64_t errors = 0;      // transport errors and statuses other than 200/429
  std::string first_error;  // the first error: "<status> <body>" or "connection failed"
  uint64_t forwarded = 0;   // answered by an owner other than the node it was sent to
  uint64_t late = 0;        // --rate: requests sent after their due time (the nodes did not keep up)
  bool quiet = true;        // --callgrind: the nodes were quiet when instrumentation went on and off
  uint64_t cpu_ticks = 0;   // utime + stime of all node processes over the interval
  uint64_t sys_ticks = 0;   // ... of which stime: in the kernel (system calls, the loopback's TCP, wake-ups)
  uint64_t switches = 0;    // context switches of all node threads over the interval (CPU-time mode)
  std::vector<uint32_t> latencies_us;
  std::vector<CallgrindCounts> node_counts;  // --callgrind: per node (order of the targets), all rounds
  // --callgrind: all nodes' instructions / the checks answered, per round.
  std::vector<double> round_instructions_per_check;
  std::string failure;  // why the phase could not be measured ("" if it was)
  // Hot phases (quota grants): the nodes' ringlimit_grants_checks_total at the end, decided from a slice
  // here, and at the owner.
  uint64_t slice_checks = 0;
  uint64_t owner_checks = 0;

  // --callgrind: the median of the rounds' instructions per check.
  double InstructionsPerCheck() const {
    if (round_instructions_per_check.empty()) return 0;
    std::vector<double> sorted = round_instructions_per_check;
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  }
  // --callgrind: (largest - smallest) / median of the rounds' instructions per check.
  double RoundSpread() const {
    if (round_instructions_per_check.empty() || InstructionsPerCheck() == 0) return 0;
    const auto [low, high] =
        std::minmax_element(round_instructions_per_check.begin(), round_instructions_per_check.end());
    return (*high - *low) / InstructionsPerCheck();
  }
  // --callgrind: all nodes' counts over all rounds.
  CallgrindCounts TotalCounts() const {
    CallgrindCounts total;
    for (const auto& counts : node_counts) total += counts;
    return total;
  }

  double Percentile(double p) const {
    if (latencies_us.empty()) return 0;
    return latencies_us[std::min(latencies_us.size() - 1, static_cast<size_t>(p * latencies_us.size()))];
  }
  double CpuUsPerCheck() const {
    return checks == 0 ? 0 : cpu_ticks * 1e6 / static_cast<double>(sysconf(_SC_CLK_TCK)) / checks;
  }
  // The kernel's share of CPU time (0 to 1).
  double SysShare() const { return cpu_ticks == 0 ? 0 : sys_ticks / static_cast<double>(cpu_ticks); }
  double SwitchesPerCheck() const { return checks == 0 ? 0 : switches / static_cast<double>(checks); }
};

// What the node processes used, read from /proc: CPU time in clock ticks and context switches.
struct ProcessCounters {
  uint64_t user_ticks = 0;  // utime (field 14 of /proc/<pid>/stat)
  uint64_t sys_ticks = 0;   // stime (field 15)
  // voluntary + involuntary context switches of every thread (/proc/<pid>/task/*/status)
  uint64_t switches = 0;

  [[nodiscard]] uint64_t cpu_ticks() const { return user_ticks + sys_ticks; }
  ProcessCounters& operator+=(const ProcessCounters& o) {
    user_ticks += o.user_ticks;
    sys_ticks += o.sys_ticks;
    switches += o.switches;
    return *this;
  }
  // Over an interval: this (at its end) less `start`.
  void AddSince(const ProcessCounters& start, PhaseResult& r) const {
    r.cpu_ticks += cpu_ticks() - start.cpu_ticks();
    r.sys_ticks += sys_ticks - start.sys_ticks;
    r.switches += switches - start.switches;
  }
};
// The counters of `pid` (zeros for what cannot be read), and of all the targets' processes.
ProcessCounters ReadCounters(pid_t pid);
ProcessCounters TotalCounters(const std::vector<Target>& targets);

class Connection;

// Shared state of one phase; everything runs on one io_context thread.
struct Phase {
  const std::vector<Target>* targets;
  KeyPicker pick;
  bool measuring = false;
  bool stopping = false;
  PhaseResult result;

  // Pausing (--callgrind): while `paused`, a connection whose answer arrived parks instead of sending;
  // once every live one is parked (nothing in flight), `on_quiet` runs once.
  bool paused = false;
  size_t live = 0;  // connections not failed
  std::vector<std::shared_ptr<Connection>> parked;
  std::function<void()> on_quiet;

  // Pacing (--rate): while measuring, connection i sends its n-th request at
  // pace_origin + (i + n * connections) / rate seconds, or at once when its answer came later than that.
  double rate = 0;  // checks per second over all connections; 0: closed loop, every answer sends the next
  Clock::time_point pace_origin;

  void Pause(std::function<void()> then) {
    paused = true;
    on_quiet = std::move(then);
    CheckQuiet();
  }
  void Resume();
  void Park(std::shared_ptr<Connection> connection) {
    parked.push_back(std::move(connection));
    CheckQuiet();
  }
  void CheckQuiet() {
    if (!paused || !on_quiet || parked.size() < live) return;
    auto then = std::move(on_quiet);
    on_quiet = nullptr;
    then();
  }
};

// Starts connection number `slot` of `connections` to target `node` of `phase` (its keys drawn with
// `seed`); it lives as long as requests are pending or it is parked.
void StartConnection(boost::asio::io_context& io, Phase& phase, size_t slot, size_t connections, size_t node,
                     uint64_t seed);

}  // namespace ringlimit::bench

#endif  // RINGLIMIT_BENCH_CLUSTER_LOAD_H_
