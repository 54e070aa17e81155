// ringlimit_sim: runs the deterministic simulator's fault classes over many seeds, or one seed.
//
//   ringlimit_sim --seeds 500                  every class, seeds 1..500
//   ringlimit_sim --seeds 500 --class crash    one class
//   ringlimit_sim --seeds 50 --skip pause_closed,partition_closed   every class but those
//   ringlimit_sim --seed 42 --class crash --trace   one seed: its schedule, verdicts and event trace
//   ringlimit_sim --seeds 20 --class pause --min-exact 19   also fail when fewer than 19 seeds of a class
//                                                     that is not asserted exact were exact (the mutation
//                                                     tests of node/forward/mutation.h use it)
//
// Per class it prints the seeds run, seeds/s, checks, over-admissions (sum and the largest of one key),
// rollbacks, unanswered checks, the checks short of the floor (checker.h), the answered share of each
// phase (before, during and after the faults: over every seed, and the lowest of one entry node of one
// seed), the share of the keys' budgets left when the first fault came ("budget": live budgets, so that
// two deciders splitting one show), and PASS / FAIL: every rule
// the class asserts (scenario.h), over-admissions and rollbacks only where its promise says. Report-only
// classes also print how many seeds had none. The first failing seed of each class is printed to stderr
// with its trace. Exit status: 1 when a class failed, else 0.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tests/sim/scenario.h"

namespace {

using ringlimit::sim::Classes;
using ringlimit::sim::FaultClass;
using ringlimit::sim::Promise;
using ringlimit::sim::RunResult;

struct Args {
  uint64_t seeds = 20;
  uint64_t first_seed = 1;
  std::optional<uint64_t> seed;
  std::optional<std::string> fault_class;
  std::vector<std::string> skip;      // classes not run
  std::optional<uint64_t> min_exact;  // fail a class with fewer exact seeds than this
  bool trace = false;
};

int Usage(const char* why) {
  std::fprintf(stderr,
               "ringlimit_sim: %s\nusage: ringlimit_sim [--seeds N] [--first-seed S] [--seed S] "
               "[--class NAME] [--skip NAME,...] [--min-exact N] [--trace]\n",
               why);
  return 2;
}

// "99.87% >=95.2" -- the share of counted checks answered over every seed, and the lowest of one
// (phase, entry node) cell of one seed.
std::string Share(const ringlimit::sim::ShareCount& s, uint32_t min_bp) {
  if (s.counted == 0) return "-";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.2f%% >=%.1f", 100.0 * static_cast<double>(s.answered) / s.counted,
                min_bp / 100.0);
  return buf;
}

std::optional<uint64_t> Number(const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0') return std::nullopt;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::off);
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--trace") {
      args.trace = true;
    } else if ((a == "--seeds" || a == "--seed" || a == "--first-seed" || a == "--min-exact") && has_value) {
      const std::optional<uint64_t> v = Number(argv[++i]);
      if (!v.has_value()) return Usage("not a number");
      if (a == "--min-exact") args.min_exact = *v;
      if (a == "--seeds") args.seeds = *v;
      if (a == "--seed") args.seed = *v;
      if (a == "--first-seed") args.first_seed = *v;
    } else if (a == "--skip" && has_value) {
      std::string_view list = argv[++i];
      while (!list.empty()) {
        const size_t comma = std::min(list.find(','), list.size());
        args.skip.emplace_back(list.substr(0, comma));
        if (ringlimit::sim::FindClass(args.skip.back()) == nullptr) return Usage("unknown class");
        list.remove_prefix(std::min(comma + 1, list.size()));
      }
    } else if (a == "--class" && has_value) {
      args.fault_class = argv[++i];
      if (ringlimit::sim::FindClass(*args.fault_class) == nullptr) return Usage("unknown class");
    } else {
      return Usage("unknown argument");
    }
  }

  std::vector<const FaultClass*> classes;
  for (const FaultClass& c : Classes()) {
    if (std::find(args.skip.begin(), args.skip.end(), c.name) != args.skip.end()) continue;
    if (!args.fault_class.has_value() || c.name == *args.fault_class) classes.push_back(&c);
  }

  if (args.seed.has_value()) {
    bool failed = false;
    for (const FaultClass* c : classes) {
      const RunResult r = ringlimit::sim::RunSeed(c->name, *args.seed, args.trace);
      if (args.trace || ringlimit::sim::Fails(r)) {
        ringlimit::sim::PrintRun(r, std::cout, args.trace ? 100'000 : 300);
      } else {
        std::printf("%-13s seed %llu: %s (hash %016llx, %llu events, %.1f s simulated)\n",
                    std::string(c->name).c_str(), static_cast<unsigned long long>(*args.seed),
                    r.ok ? "holds" : "does not hold", static_cast<unsigned long long>(r.trace_hash),
                    static_cast<unsigned long long>(r.events), r.sim_seconds);
      }
      failed = failed || ringlimit::sim::Fails(r);
    }
    return failed ? 1 : 0;
  }

  std::printf("%-16s %-8s %6s %7s %7s %8s %8s %8s %5s %5s %21s %21s %21s %7s %14s  %s\n", "class", "promise",
              "seeds", "seeds/s", "checks", "over-adm", "max-over", "rollback", "unans", "floor",
              "answered before", "answered during", "answered after", "budget", "max wait(seed)", "result");
  bool failed = false;
  double total_seconds = 0;
  uint64_t total_seeds = 0;
  for (const FaultClass* c : classes) {
    ringlimit::sim::Tally tally;
    std::optional<RunResult> first_failure;
    std::vector<uint64_t> over_seeds;                  // the first seeds with an over-admission
    std::vector<uint64_t> not_exact;                   // the first seeds with an over-admission or a rollback
    const auto t0 = std::chrono::steady_clock::now();  // the runner's own speed, not the simulation's
    for (uint64_t s = args.first_seed; s < args.first_seed + args.seeds; ++s) {
      RunResult r = ringlimit::sim::RunSeed(c->name, s);
      tally.Add(r);
      if (!r.exact && not_exact.size() < 5) not_exact.push_back(s);
      if (r.verdict.over_admitted > 0 && over_seeds.size() < 3) over_seeds.push_back(s);
      if (ringlimit::sim::Fails(r) && !first_failure.has_value()) first_failure = std::move(r);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_seconds += seconds;
    total_seeds += args.seeds;
    const std::vector<std::string> share_failures = tally.Failures(c->name);
    const bool too_few_exact = args.min_exact.has_value() && tally.exact < *args.min_exact;
    std::string result = tally.failing == 0 && share_failures.empty() && !too_few_exact
                             ? "PASS"
                             : "FAIL (" + std::to_string(tally.failing) + " seeds" +
                                   (share_failures.empty() ? "" : ", answered share or wait over the seeds") +
                                   (too_few_exact ? ", fewer exact than --min-exact" : "") + ")";
    if (c->promise != Promise::kExact) {
      result += ", counts: " + std::to_string(tally.exact) + "/" + std::to_string(args.seeds) + " exact";
      for (size_t i = 0; i < not_exact.size(); ++i)
        result += (i == 0 ? " (not: " : ", ") + std::to_string(not_exact[i]);
      if (!not_exact.empty()) result += tally.exact + not_exact.size() < args.seeds ? ", ...)" : ")";
      for (size_t i = 0; i < over_seeds.size(); ++i)
        result += (i == 0 ? "; over: " : ", ") + std::to_string(over_seeds[i]);
    }
    std::string shares[ringlimit::sim::kPhases];
    for (size_t p = 0; p < ringlimit::sim::kPhases; ++p)
      shares[p] = Share(tally.share[p], tally.min_share_bp[p]);
    const std::string live =
        tally.budget == 0 ? "-"
                          : std::to_string(100 * (tally.budget - tally.budget_spent) / tally.budget) + "%";
    char wait[32];
    std::snprintf(wait, sizeof(wait), "%lld ms (%llu)",
                  static_cast<long long>(
                      std::chrono::duration_cast<std::chrono::milliseconds>(tally.longest_wait).count()),
                  static_cast<unsigned long long>(tally.longest_wait_seed));
    std::printf(
        "%-16s %-8s %6llu %7.1f %7llu %8llu %8llu %8llu %5llu %5llu %21s %21s %21s %7s %14s  %s\n",
        std::string(c->name).c_str(), std::string(ringlimit::sim::PromiseName(c->promise)).c_str(),
        static_cast<unsigned long long>(args.seeds), seconds > 0 ? args.seeds / seconds : 0.0,
        static_cast<unsigned long long>(tally.checks), static_cast<unsigned long long>(tally.over_admitted),
        static_cast<unsigned long long>(tally.max_over), static_cast<unsigned long long>(tally.rollbacks),
        static_cast<unsigned long long>(tally.unanswered),
        static_cast<unsigned long long>(tally.short_of_floor), shares[0].c_str(), shares[1].c_str(),
        shares[2].c_str(), live.c_str(), wait, result.c_str());
    if (tally.grants_made > 0) {
      std::printf(
          "%-16s grants: %llu made (%.1f per run, fewest %llu), %llu settled (%llu reclaimed), %llu "
          "recalled; %llu of %llu admissions from slices; floor allowance for slices' unused units %llu\n",
          "", static_cast<unsigned long long>(tally.grants_made),
          static_cast<double>(tally.grants_made) / static_cast<double>(args.seeds),
          static_cast<unsigned long long>(tally.fewest_grants),
          static_cast<unsigned long long>(tally.grants_settled),
          static_cast<unsigned long long>(tally.grants_reclaimed),
          static_cast<unsigned long long>(tally.grants_recalled),
          static_cast<unsigned long long>(tally.from_slices), static_cast<unsigned long long>(tally.admitted),
          static_cast<unsigned long long>(tally.grant_slack));
    }
    std::fflush(stdout);
    for (const std::string& f : share_failures) std::fprintf(stderr, "FAILED: %s\n", f.c_str());
    if (!share_failures.empty() || too_few_exact) failed = true;
    if (first_failure.has_value()) {
      failed = true;
      ringlimit::sim::PrintRun(*first_failure, std::cerr);
    }
  }
  std::printf("total: %llu seeds in %.1f s (%.1f seeds/s)\n", static_cast<unsigned long long>(total_seeds),
              total_seconds, total_seconds > 0 ? total_seeds / total_seconds : 0.0);
  return failed ? 1 : 0;
}
