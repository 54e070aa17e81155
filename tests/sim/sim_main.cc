// ringlimit_sim: runs the deterministic simulator's fault classes over many seeds, or one seed.
//
//   ringlimit_sim --seeds 500                  every class, seeds 1..500
//   ringlimit_sim --seeds 500 --class crash    one class
//   ringlimit_sim --seed 42 --class crash --trace   one seed: its schedule, verdicts and event trace
//
// Per class it prints the seeds run, seeds/s, checks, over-admissions (sum and the largest of one key),
// rollbacks, unanswered checks and PASS / FAIL (asserted classes) or REPORTED (report-only classes:
// how many seeds would have been exact). The first failing seed of each class is printed to stderr with
// its trace. Exit status: 1 when an asserted class failed, else 0 (report-only classes never fail it).
#include <spdlog/spdlog.h>

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
  bool trace = false;
};

int Usage(const char* why) {
  std::fprintf(stderr,
               "ringlimit_sim: %s\nusage: ringlimit_sim [--seeds N] [--first-seed S] [--seed S] "
               "[--class NAME] [--trace]\n",
               why);
  return 2;
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
    } else if ((a == "--seeds" || a == "--seed" || a == "--first-seed") && has_value) {
      const std::optional<uint64_t> v = Number(argv[++i]);
      if (!v.has_value()) return Usage("not a number");
      if (a == "--seeds") args.seeds = *v;
      if (a == "--seed") args.seed = *v;
      if (a == "--first-seed") args.first_seed = *v;
    } else if (a == "--class" && has_value) {
      args.fault_class = argv[++i];
      if (ringlimit::sim::FindClass(*args.fault_class) == nullptr) return Usage("unknown class");
    } else {
      return Usage("unknown argument");
    }
  }

  std::vector<const FaultClass*> classes;
  for (const FaultClass& c : Classes()) {
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

  std::printf("%-13s %-8s %6s %8s %8s %9s %8s %9s %10s  %s\n", "class", "promise", "seeds", "seeds/s",
              "checks", "over-adm", "max-over", "rollback", "unanswered", "result");
  bool failed = false;
  double total_seconds = 0;
  uint64_t total_seeds = 0;
  for (const FaultClass* c : classes) {
    uint64_t checks = 0, over = 0, max_over = 0, rollbacks = 0, unanswered = 0, holds = 0, failing = 0;
    std::optional<RunResult> first_failure;
    const auto t0 = std::chrono::steady_clock::now();  // the runner's own speed, not the simulation's
    for (uint64_t s = args.first_seed; s < args.first_seed + args.seeds; ++s) {
      RunResult r = ringlimit::sim::RunSeed(c->name, s);
      checks += r.verdict.checks;
      over += r.verdict.over_admitted;
      max_over = std::max(max_over, r.verdict.max_over);
      rollbacks += r.verdict.rollbacks;
      unanswered += r.verdict.unanswered;
      holds += r.ok ? 1 : 0;
      if (ringlimit::sim::Fails(r)) {
        ++failing;
        if (!first_failure.has_value()) first_failure = std::move(r);
      }
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_seconds += seconds;
    total_seeds += args.seeds;
    std::string result;
    if (c->promise == Promise::kReport) {
      result = "REPORTED (" + std::to_string(holds) + "/" + std::to_string(args.seeds) + " exact)";
      if (failing > 0) result += ", FAIL: " + std::to_string(failing) + " seeds lost checks or spun";
    } else {
      result = failing == 0 ? "PASS" : "FAIL (" + std::to_string(failing) + " seeds)";
    }
    std::printf("%-13s %-8s %6llu %8.1f %8llu %9llu %8llu %9llu %10llu  %s\n", std::string(c->name).c_str(),
                std::string(ringlimit::sim::PromiseName(c->promise)).c_str(),
                static_cast<unsigned long long>(args.seeds), seconds > 0 ? args.seeds / seconds : 0.0,
                static_cast<unsigned long long>(checks), static_cast<unsigned long long>(over),
                static_cast<unsigned long long>(max_over), static_cast<unsigned long long>(rollbacks),
                static_cast<unsigned long long>(unanswered), result.c_str());
    std::fflush(stdout);
    if (first_failure.has_value()) {
      // Report-only classes print their lost checks or spins, but do not fail the run (sim_test asserts
      // their liveness on its seeds).
      if (c->promise != Promise::kReport) failed = true;
      ringlimit::sim::PrintRun(*first_failure, std::cerr);
    }
  }
  std::printf("total: %llu seeds in %.1f s (%.1f seeds/s)\n", static_cast<unsigned long long>(total_seeds),
              total_seconds, total_seconds > 0 ? total_seeds / total_seconds : 0.0);
  return failed ? 1 : 0;
}
