#include "bench/cluster/callgrind.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>
#include <utility>

namespace ringlimit::bench {
namespace {

namespace fs = std::filesystem;
using testing::Result;

// `text` as one word for /bin/sh.
std::string ShellQuote(std::string_view text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The allocator's entry points as callgrind names them (glibc's malloc under its public names; operator new
// calls malloc, so it is not one of them).
constexpr std::array<std::string_view, 8> kAllocators = {
    "malloc", "calloc", "realloc", "memalign", "aligned_alloc", "posix_memalign", "valloc", "pvalloc"};

// `name` without callgrind's recursion suffix ("malloc'2") and GCC's clone suffixes
// ("_mid_memalign.constprop.0").
std::string_view BaseName(std::string_view name) {
  return name.substr(0, std::min(name.find('\''), name.find('.')));
}

bool IsAllocatorEntry(std::string_view name) {
  return std::find(kAllocators.begin(), kAllocators.end(), BaseName(name)) != kAllocators.end();
}

// An entry point or one of glibc's inner functions (_int_malloc, _mid_memalign, __libc_malloc, tcache_init):
// their calls into an entry point are part of one allocation, already counted at its entry.
bool IsAllocatorInternal(std::string_view name) {
  const std::string_view base = BaseName(name);
  return IsAllocatorEntry(base) || base.starts_with("_int_") || base.starts_with("_mid_memalign") ||
         base.starts_with("__libc_") || base.starts_with("tcache_") || base.starts_with("malloc_");
}

}  // namespace

std::vector<std::string> NodeCommand(const std::string& binary, const fs::path& callgrind_out) {
  std::vector<std::string> command;
  if (!callgrind_out.empty()) {
    // --vgdb=yes is valgrind's default: callgrind_control needs it. Counts are per process (all threads).
    // --fair-sched=yes: valgrind runs one thread at a time, and with its default lock a node's thread
    // woken by a message could wait long for its turn (closed-loop forwarded checks ran 3-10x slower in
    // the first tries). --collect-systime=yes adds the count of system calls (sysCount; the sysTime beside
    // it is wall time, not used).
    command = {"valgrind",
               "--tool=callgrind",
               "--instr-atstart=no",
               "--vgdb=yes",
               "--fair-sched=yes",
               "--collect-systime=yes",
               "--callgrind-out-file=" + callgrind_out.string()};
  }
  if (binary.empty()) return command;
  // The harness appends its own ringlimitd and the node's flags: a shell drops the former ($1) and execs
  // `binary` in its place, so the pid stays the node's.
  std::string script = "shift; exec";
  for (const auto& word : command) script += " " + ShellQuote(word);
  script += " " + ShellQuote(binary) + " \"$@\"";
  return {"/bin/sh", "-c", script, "ringlimitd"};
}

Result<CallgrindCounts> CallgrindTotals(const fs::path& file) {
  std::ifstream in(file);
  if (!in) return "cannot read " + file.string();
  std::vector<std::string> events;
  std::map<std::string, std::string, std::less<>> names;  // function ids "(N)" -> names (name compression)
  bool in_clock = false;                                  // the current function is a clock_gettime
  bool in_allocator = false;                              // the current function is part of the allocator
  bool calls_allocator = false;                           // the current callee (cfn=) is an entry of it
  bool call_line = false;                                 // the next cost line is a call's, not self cost
  uint64_t clock_syscalls = 0;
  uint64_t allocations = 0;
  // "fn=(N) name" or "fn=(N)": the function's name.
  auto name_of = [&](std::string_view spec) -> const std::string& {
    const size_t space = spec.find(' ');
    const std::string id(spec.substr(0, space));
    if (space != std::string_view::npos) names[id] = std::string(spec.substr(space + 1));
    return names[id];
  };
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("fn=")) {
      const std::string& name = name_of(std::string_view(line).substr(3));
      in_clock = name.find("clock_gettime") != std::string::npos;
      in_allocator = IsAllocatorInternal(name);
    } else if (line.starts_with("cfn=")) {
      calls_allocator = IsAllocatorEntry(name_of(std::string_view(line).substr(4)));
    } else if (line.starts_with("calls=")) {
      call_line = true;
      // "calls=<count> <target position>": a call from outside the allocator into it is one allocation.
      if (calls_allocator && !in_allocator) allocations += std::strtoull(line.c_str() + 6, nullptr, 10);
    } else if (!line.empty() && (std::isdigit(static_cast<unsigned char>(line[0])) || line[0] == '+' ||
                                 line[0] == '-' || line[0] == '*')) {
      // A cost line: a position (the source line), then the events in order.
      if (std::exchange(call_line, false) || !in_clock) continue;
      std::istringstream words(line);
      std::string position;
      words >> position;
      for (size_t i = 0; i < events.size(); ++i) {
        uint64_t value = 0;
        if (!(words >> value)) break;
        if (events[i] == "sysCount") clock_syscalls += value;
      }
    } else {
      std::istringstream words(line);
      std::string head;
      words >> head;
      if (head == "events:") {
        events.clear();
        for (std::string event; words >> event;) events.push_back(event);
      } else if (head == "totals:") {
        CallgrindCounts counts;
        for (size_t i = 0; i < events.size(); ++i) {
          uint64_t value = 0;
          if (!(words >> value)) break;  // trailing zero events may be left out
          if (events[i] == "Ir") counts.instructions = value;
          if (events[i] == "sysCount") counts.syscalls = value;
        }
        counts.syscalls -= std::min(counts.syscalls, clock_syscalls);
        // totals: is the last line, after every calls= line
        counts.allocations = allocations;
        return counts;
      }
    }
  }
  return "no totals: line in " + file.string();
}

CallgrindNodes::~CallgrindNodes() {
  for (const Node& node : nodes_) {
    std::error_code ignored;
    fs::remove(node.out, ignored);
    fs::remove(node.out.string() + ".control", ignored);
  }
}

void CallgrindNodes::Add(pid_t pid, std::string name, fs::path callgrind_out) {
  nodes_.push_back({pid, std::move(name), std::move(callgrind_out), 0});
}

Result<void> CallgrindNodes::ControlAll(const std::vector<std::string>& args) {
  struct Call {
    pid_t child = -1;
    fs::path output;
  };
  std::vector<Call> calls;
  std::string error;
  for (const Node& node : nodes_) {
    Call call;
    call.output = node.out.string() + ".control";
    std::vector<std::string> words = {"callgrind_control"};
    words.insert(words.end(), args.begin(), args.end());
    words.push_back(std::to_string(node.pid));
    std::vector<char*> argv;
    for (auto& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, call.output.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    const int spawned =
        posix_spawnp(&call.child, "callgrind_control", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) {
      error += std::string("callgrind_control: ") + std::strerror(spawned) + "\n";
      continue;
    }
    calls.push_back(std::move(call));
  }
  for (const Call& call : calls) {
    int status = 0;
    while (waitpid(call.child, &status, 0) < 0 && errno == EINTR) {
    }
    // callgrind_control exits 0 even when it reached no process; its answer says whether it did.
    const std::string output = ReadAll(call.output);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || output.find("OK.") == std::string::npos ||
        output.find("Error") != std::string::npos) {
      error += output.empty() ? "callgrind_control failed without output\n" : output;
    }
  }
  if (!error.empty()) return error;
  return {};
}

Result<std::vector<CallgrindCounts>> CallgrindNodes::Dump(const std::string& label) {
  if (auto dumped = ControlAll({"-d"}); !dumped) return dumped.error();
  std::vector<CallgrindCounts> totals;
  for (Node& node : nodes_) {
    const fs::path dump = node.out.string() + "." + std::to_string(++node.dumps);
    const fs::path named = node.out.parent_path() / (label + "." + node.name + ".callgrind");
    std::error_code ec;
    fs::rename(dump, named, ec);
    if (ec) return "cannot move " + dump.string() + " to " + named.string() + ": " + ec.message();
    auto total = CallgrindTotals(named);
    if (!total) return total.error();
    totals.push_back(*total);
  }
  return totals;
}

}  // namespace ringlimit::bench
