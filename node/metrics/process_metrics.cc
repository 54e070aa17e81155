#include "node/metrics/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include "node/metrics/metrics.h"

namespace ringlimit::node {
namespace {

void Family(std::string* out, std::string_view name, std::string_view type, std::string_view help) {
  AppendFamilyHeader(out, name, type, help);
}

void Value(std::string* out, std::string_view name, double value) { AppendSample(out, name, "", value); }

// The fields of /proc/self/stat after the command name (field 3, the state, is [0]).
std::vector<std::string> StatFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return {};
  const size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return {};
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string field; rest >> field;) fields.push_back(field);
  return fields;
}

// Seconds since the epoch at boot (/proc/stat btime), or -1.
double BootTime() {
  std::ifstream in("/proc/stat");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("btime ")) return std::stod(line.substr(6));
  }
  return -1;
}

}  // namespace

void AppendProcessMetrics(std::string* out) {
  Family(out, "ringlimit_build_info", "gauge", "Always 1; the labels say which build runs.");
  out->append("ringlimit_build_info{version=\"" RINGLIMIT_VERSION "\"} 1\n");

  const std::vector<std::string> stat = StatFields();
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  // Fields (man 5 proc), counted from the state (field 3) as [0]: utime 14, stime 15, starttime 22,
  // vsize 23, rss 24.
  if (stat.size() > 21 && ticks > 0) {
    Family(out, "process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.");
    Value(out, "process_cpu_seconds_total", (std::stod(stat[11]) + std::stod(stat[12])) / ticks);
    Family(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
    Value(out, "process_virtual_memory_bytes", std::stod(stat[20]));
    Family(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    Value(out, "process_resident_memory_bytes", std::stod(stat[21]) * page);
    if (const double boot = BootTime(); boot >= 0) {
      Family(out, "process_start_time_seconds", "gauge",
             "Start time of the process since the epoch, in seconds.");
      Value(out, "process_start_time_seconds", boot + std::stod(stat[19]) / ticks);
    }
  }
  std::error_code ec;
  size_t fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  if (!ec) {
    Family(out, "process_open_fds", "gauge", "Open file descriptors.");
    Value(out, "process_open_fds", static_cast<double>(fds));
  }
  if (rlimit nofile{}; getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    Family(out, "process_max_fds", "gauge", "The open file descriptor limit (soft RLIMIT_NOFILE).");
    Value(out, "process_max_fds", static_cast<double>(nofile.rlim_cur));
  }
}

}  // namespace ringlimit::node
