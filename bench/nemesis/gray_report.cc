// gray_report: runs issue 13's process-level gray-failure scenarios (tests/gray/gray_scenarios.h) on real
// ringlimitd processes and prints, per scenario, the checks sent, what was admitted against the limit,
// the over-admission, failed requests and rollbacks (a key's remaining rising: nothing refills in a
// one-day window), the lowest answered share of an entry node in a phase (among the checks the scenario
// expects answered) and the keys meeting their floor (tests/gray/gray_scenarios.h). It measures; it does
// not judge -- the assertions are tests/gray/gray_test.
//
//   build/release/bench/nemesis/gray_report                          # every scenario (about a minute)
//   build/release/bench/nemesis/gray_report partial_partition        # chosen scenarios
//   build/release/bench/nemesis/gray_report --record decisions.csv   # every decision, one per line
//   RINGLIMIT_GRAY_NODE_FLAGS='--failure-mode closed' build/release/bench/nemesis/gray_report
//
// Partition scenarios need root (network namespaces, nftables); clock skew needs libfaketime. Scenarios
// that cannot run here are listed as skipped. Exit status: 0 if every scenario ran (whatever it measured),
// 1 if one could not be set up, 2 on bad arguments.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tests/gray/gray_scenarios.h"

namespace {

using ringlimit::testing::gray::ScenarioResult;

void PrintRow(const std::string& scenario, const std::string& checks, const std::string& admitted,
              const std::string& limit, const std::string& over, const std::string& failed,
              const std::string& rollbacks, const std::string& extra, const std::string& no_copy,
              const std::string& healed_over, const std::string& answered, const std::string& floor_met) {
  std::printf("| %-56s | %6s | %8s | %5s | %6s | %6s | %9s | %7s | %7s | %11s | %8s | %9s |\n",
              scenario.c_str(), checks.c_str(), admitted.c_str(), limit.c_str(), over.c_str(), failed.c_str(),
              rollbacks.c_str(), extra.c_str(), no_copy.c_str(), healed_over.c_str(), answered.c_str(),
              floor_met.c_str());
}

// The lowest answered share of an entry node in a phase, as a percentage.
std::string LowestShare(const ScenarioResult& r) {
  double lowest = 1.0;
  for (const auto& s : r.shares) lowest = std::min(lowest, s.share());
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * lowest);
  return buf;
}

// Keys meeting their floor, of all keys.
std::string FloorMet(const ScenarioResult& r) {
  size_t met = 0;
  for (const auto& k : r.keys) met += k.admitted >= k.floor() ? 1 : 0;
  return std::to_string(met) + "/" + std::to_string(r.keys.size());
}

void WriteDecisions(std::ofstream& out, const ScenarioResult& r) {
  for (const auto& d : r.decisions) {
    out << '"' << r.name << "\"," << d.at_ms << ',' << d.phase << ',' << d.key << ',' << d.entry << ','
        << d.status << ',' << d.code << ',' << (d.allowed ? 1 : 0) << ',' << d.remaining << ',' << d.owner
        << ',' << d.sent_ms << '\n';
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ringlimit::testing::gray;
  std::vector<std::string> names;
  std::string record;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--record" && i + 1 < argc) {
      record = argv[++i];
    } else if (arg == "--help" || arg == "-h") {
      std::cout << "usage: gray_report [--record FILE.csv] [scenario...]\nscenarios:";
      for (const auto& n : ScenarioNames()) std::cout << ' ' << n;
      std::cout << '\n';
      return 0;
    } else {
      names.push_back(arg);
    }
  }
  if (names.empty()) names = ScenarioNames();
  std::ofstream out;
  if (!record.empty()) {
    out.open(record);
    if (!out) {
      std::cerr << "cannot write " << record << '\n';
      return 2;
    }
    out << "scenario,at_ms,phase,key,entry,status,code,allowed,remaining,owner,sent_ms\n";
  }

  std::vector<std::string> notes;
  int status = 0;
  PrintRow("scenario", "checks", "admitted", "limit", "over", "failed", "rollbacks", "charged", "no copy",
           "healed over", "answered", "floor met");
  PrintRow(std::string(56, '-'), "------", "--------", "-----", "------", "------", "---------", "-------",
           "-------", "-----------", "--------", "---------");
  for (const auto& name : names) {
    if (auto why = Unsupported(name)) {
      PrintRow(name + " (skipped)", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-");
      notes.push_back(name + ": skipped: " + *why);
      continue;
    }
    ScenarioOptions options;
    options.logs_on_error = false;
    auto result = RunScenario(name, options);
    if (!result) {
      PrintRow(name + " (could not run)", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-");
      notes.push_back(name + ": " + result.error());
      status = 1;
      continue;
    }
    const auto& r = *result;
    PrintRow(r.name, std::to_string(r.checks), std::to_string(r.admitted), std::to_string(r.limit),
             std::to_string(r.over), std::to_string(r.failed), std::to_string(r.rollbacks),
             r.charged_extra ? std::to_string(*r.charged_extra) : "-",
             r.without_copy ? std::to_string(*r.without_copy) : "-", std::to_string(r.healed_over),
             LowestShare(r), FloorMet(r));
    std::fflush(stdout);
    if (!r.note.empty()) notes.push_back(r.name + ": " + r.note);
    for (const auto& what : r.unverified) notes.push_back(r.name + ": fault not verified: " + what);
    for (const auto& [what, at] : r.marks)
      notes.push_back(r.name + ": " + what + " at " + std::to_string(at) + " ms");
    if (r.skew) {
      std::string seen;
      for (const auto& [observer, ms] : r.skew->seen_ms)
        seen += " " + observer + " " + std::to_string(ms) + " ms";
      notes.push_back(r.name + ": " + r.skew->node + "'s clock injected " +
                      std::to_string(r.skew->injected_ms) + " ms, measured" + seen + ", judged " +
                      r.skew->own_state + " by itself");
    }
    notes.push_back(r.name + ": " + DescribeShares(r.shares));
    if (out.is_open()) WriteDecisions(out, r);
  }
  std::printf(
      "\nover = admitted beyond the limit, summed per key; charged = checks charged beyond those answered "
      "as admitted (double charges), where measured; no copy = admitted by nodes holding no copy of the key "
      "(the "
      "bound --failure-mode open prints), where measured; healed over = admitted after the faults healed "
      "beyond what the merged count allowed (0 in every mode); answered = the lowest share of checks "
      "answered "
      "among those expected answered, per phase and entry node; floor met = keys admitting at least "
      "min(limit, "
      "answered) less failed checks that may have been charged.\n");
  for (const auto& note : notes) std::printf("note: %s\n", note.c_str());
  return status;
}
