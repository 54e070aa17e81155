// The `ringlimit bench` load generator: drives a Client with checks and measures throughput, decisions
// and latency (client/histogram.h).
//
// Closed loop (rate == 0): `concurrency` requests are always in flight; each completion sends the next.
// Open loop (rate > 0): requests are sent on a fixed schedule (request i at start + i/rate) whatever the
// responses do, with at most `concurrency` in flight; latency is measured from the scheduled time, so a
// stalled server shows up in the percentiles instead of silently slowing the load (coordinated omission).
//
// Thread safety: RunBench blocks its caller; one run per Client at a time.
#ifndef RINGLIMIT_CLIENT_CLI_BENCH_H_
#define RINGLIMIT_CLIENT_CLI_BENCH_H_

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "client/cli/parse.h"

namespace ringlimit::client {
class Client;
}

namespace ringlimit::cli {

struct BenchOptions {
  // Requests in flight (closed loop), or the cap on them (open loop). REQUIRES: >= 1. Default: 64.
  int concurrency = 64;
  // How long to send. Ignored when `requests` > 0. Default: 10 s.
  std::chrono::milliseconds duration{10'000};
  // Number of requests to send (0: run for `duration`). Default: 0.
  uint64_t requests = 0;
  // Open-loop target rate in requests per second (0: closed loop). Default: 0.
  double rate = 0;
  // Distinct keys, their prefix and distribution. Defaults: 10000, "bench:", uniform, s = 1.0.
  uint64_t keys = 10'000;
  std::string key_prefix = "bench:";
  KeyDistribution distribution = KeyDistribution::kUniform;
  double zipf_s = 1.0;
  // Checks per request (POST only). Default: 1.
  int batch = 1;
  // POST /v1/check (JSON) or GET /v1/check (status code only). Default: post.
  BenchMethod method = BenchMethod::kPost;
  // Costs, picked uniformly per check. Default: {1}.
  std::vector<uint64_t> costs = {1};
  // Algorithms, one per key (key index modulo the list), so each key keeps one state. Default: token_bucket.
  std::vector<std::string> algorithms = {"token_bucket"};
  // Inline limit of every check, unless `policy` is set. Defaults: 100 per 1000 ms.
  uint64_t limit = 100;
  uint64_t window_ms = 1000;
  std::string policy{};
  // Live progress line on the progress stream every interval (0: none). Default: 1000 ms.
  std::chrono::milliseconds progress_interval{1000};
  // Seed of the key/cost choices. Default: 1.
  uint64_t seed = 1;
};

struct BenchReport {
  double seconds = 0;     // from the first send to the last completion
  uint64_t requests = 0;  // HTTP requests completed (ok or not)
  uint64_t checks = 0;    // checks decided
  uint64_t allowed = 0;
  uint64_t denied = 0;
  uint64_t errors = 0;        // requests that failed (Error)
  std::string first_error{};  // the first failure's ToString()
  // Latency of successful requests, nanoseconds.
  uint64_t p50_ns = 0, p90_ns = 0, p99_ns = 0, p999_ns = 0, max_ns = 0;
  double mean_ns = 0;
  // Latency histogram of successful requests: {upper edge in ms (the last is +inf, written 0), count in
  // (previous edge, edge]}.
  std::vector<std::pair<double, uint64_t>> histogram;

  [[nodiscard]] double requests_per_second() const { return seconds > 0 ? requests / seconds : 0; }
};

// Runs the load. Progress lines go to `progress` (stderr in the CLI).
[[nodiscard]] BenchReport RunBench(client::Client& client, const BenchOptions& options,
                                   std::ostream& progress);

// Human-readable summary (several lines) and a one-line JSON object.
[[nodiscard]] std::string FormatReport(const BenchReport& report);
[[nodiscard]] std::string ReportJson(const BenchReport& report);

}  // namespace ringlimit::cli

#endif  // RINGLIMIT_CLIENT_CLI_BENCH_H_
