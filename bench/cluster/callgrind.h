// Callgrind instruction counts of ringlimitd processes, for cluster_bench --callgrind.
//
// Each node runs under `valgrind --tool=callgrind --instr-atstart=no` (NodeCommand builds the harness's
// wrapper for it), so nothing is counted until the bench calls Start; Stop turns instrumentation off
// again and Dump writes the counts since the last dump to a file of their own and returns its totals
// (the `totals:` line: instructions and system calls; and the heap allocations, counted from its `calls=`
// lines). A dump resets the process's counters, so one node can be measured over several phases. Everything
// goes through callgrind_control (valgrind's gdbserver, vgdb), which reaches a process even when it is
// blocked in epoll_wait; each call takes about a second, so the bench calls it only while its load is paused.
//
// Thread safety: none; call from one thread.
#ifndef RINGLIMIT_BENCH_CLUSTER_CALLGRIND_H_
#define RINGLIMIT_BENCH_CLUSTER_CALLGRIND_H_

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/node_process.h"

namespace ringlimit::bench {

// The harness's wrapper (NodeProcessOptions::wrapper) that runs the node as asked:
// - `binary`: a ringlimitd to run instead of the one the harness was built with (empty: that one);
// - `callgrind_out`: run it under callgrind, counts written to this file (empty: no valgrind).
// The wrapper execs the node in place (same pid). Empty when neither is asked.
[[nodiscard]] std::vector<std::string> NodeCommand(const std::string& binary,
                                                   const std::filesystem::path& callgrind_out);

// What one process did between two dumps.
struct CallgrindCounts {
  uint64_t instructions = 0;  // Ir: user-space instructions executed (kernel work is not counted)
  // sysCount: system calls made (their kernel work is what Ir misses), without clock_gettime: natively a
  // vDSO call that enters no kernel, under valgrind (no vDSO) a system call, and half of them.
  uint64_t syscalls = 0;
  // Heap allocations: calls into malloc, calloc, realloc or the aligned allocators (kAllocators in
  // callgrind.cc) from a function outside them. operator new goes through malloc and is counted there, once;
  // the allocator's own inner calls (malloc -> _int_malloc, realloc -> malloc) are not counted.
  uint64_t allocations = 0;

  CallgrindCounts& operator+=(const CallgrindCounts& other) {
    instructions += other.instructions;
    syscalls += other.syscalls;
    allocations += other.allocations;
    return *this;
  }
};

// The counts of a callgrind out file: its `totals:` (the events of NodeCommand: Ir, sysCount, sysTime) and
// the allocations of its `calls=` lines, or an error.
[[nodiscard]] testing::Result<CallgrindCounts> CallgrindTotals(const std::filesystem::path& file);

// The processes started with NodeCommand(…, callgrind_out) and their dumps.
class CallgrindNodes {
 public:
  CallgrindNodes() = default;
  CallgrindNodes(const CallgrindNodes&) = delete;
  CallgrindNodes& operator=(const CallgrindNodes&) = delete;
  // Removes each node's out file (empty: callgrind writes it at exit, and the harness SIGKILLs the nodes)
  // and callgrind_control's answers; the dumps stay. Destroy it after the nodes.
  ~CallgrindNodes();

  // Registers the process `pid` started with `callgrind_out`; `name` labels its dumps.
  void Add(pid_t pid, std::string name, std::filesystem::path callgrind_out);

  // Instrumentation on (Start) or off (Stop) in every registered process, in parallel.
  [[nodiscard]] testing::Result<void> Start() { return ControlAll({"-i", "on"}); }
  [[nodiscard]] testing::Result<void> Stop() { return ControlAll({"-i", "off"}); }

  // Dumps every process's counts since its last dump, moves each dump to
  // <its out file's directory>/<label>.<name>.callgrind, and returns the counts per process, in the
  // order of Add.
  [[nodiscard]] testing::Result<std::vector<CallgrindCounts>> Dump(const std::string& label);

 private:
  struct Node {
    pid_t pid = 0;
    std::string name;
    std::filesystem::path out;  // callgrind's --callgrind-out-file; its dumps are out.1, out.2, ...
    int dumps = 0;
  };
  // Runs `callgrind_control <args> <pid>` for every node at once; fails unless each one succeeds.
  testing::Result<void> ControlAll(const std::vector<std::string>& args);

  std::vector<Node> nodes_;
};

}  // namespace ringlimit::bench

#endif  // RINGLIMIT_BENCH_CLUSTER_CALLGRIND_H_
