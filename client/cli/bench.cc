#include "client/cli/bench.h"

#include <algorithm>
#include <atomic>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <ostream>
#include <random>
#include <thread>

#include "client/cli/json_out.h"
#include "client/cli/key_chooser.h"
#include "client/client.h"
#include "client/histogram.h"

namespace ringlimit::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Shared by the issuing code and the completion handlers (client I/O threads).
class Load {
 public:
  Load(client::Client& client, const BenchOptions& options)
      : client_(client),
        options_(options),
        chooser_(options.keys, options.distribution, options.zipf_s),
        start_(Clock::now()),
        stop_at_(start_ + options.duration) {}

  // Whether another request may be sent (count or time left). Reserves it when true.
  bool Reserve() {
    if (options_.requests > 0) return issued_.fetch_add(1) < options_.requests;
    issued_.fetch_add(1);
    return Clock::now() < stop_at_;
  }

  // Sends one request; `scheduled` is when it should have gone (open loop) or now (closed loop).
  // `then` runs after its completion was recorded.
  void Send(Clock::time_point scheduled, std::function<void()> then) {
    in_flight_.fetch_add(1);
    thread_local std::mt19937_64 rng(options_.seed ^
                                     std::hash<std::thread::id>()(std::this_thread::get_id()));
    std::vector<client::Check> checks;
    const int n = options_.method == BenchMethod::kGet ? 1 : options_.batch;
    for (int i = 0; i < n; ++i) {
      client::Check c = MakeCheck(rng);
      // The same limit twice for one key in one request is a 400: merge repeats (Zipf draws them often).
      auto same =
          std::find_if(checks.begin(), checks.end(), [&c](const client::Check& o) { return o.key == c.key; });
      if (same != checks.end()) {
        same->cost += c.cost;
      } else {
        checks.push_back(std::move(c));
      }
    }
    auto done = [this, scheduled, then = std::move(then)](bool ok, uint64_t allowed, uint64_t denied,
                                                          std::string error) {
      const auto now = Clock::now();
      if (ok) {
        latency_.Record(static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(now - scheduled).count()));
        allowed_.fetch_add(allowed, std::memory_order_relaxed);
        denied_.fetch_add(denied, std::memory_order_relaxed);
      } else {
        if (errors_.fetch_add(1) == 0) {
          std::lock_guard lock(mutex_);
          first_error_ = std::move(error);
        }
      }
      completed_.fetch_add(1, std::memory_order_relaxed);
      last_completion_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(now - start_).count());
      if (then) then();
      if (in_flight_.fetch_sub(1) == 1) {
        std::lock_guard lock(mutex_);
        idle_.notify_all();
      }
    };
    if (options_.method == BenchMethod::kGet) {
      client_.AsyncCheckGet(std::move(checks.front()), [done](client::Result<client::GetDecision> r) {
        if (!r) return done(false, 0, 0, r.error().ToString());
        done(true, r->allowed ? 1 : 0, r->allowed ? 0 : 1, "");
      });
      return;
    }
    client_.AsyncCheck(std::move(checks), [done](client::Result<client::CheckResponse> r) {
      if (!r) return done(false, 0, 0, r.error().ToString());
      // One decision per result (a policy check yields one per limit).
      uint64_t allowed = 0;
      for (const auto& result : r->results) allowed += result.allowed ? 1 : 0;
      done(true, allowed, r->results.size() - allowed, "");
    });
  }

  void WaitIdle() {
    std::unique_lock lock(mutex_);
    idle_.wait_for(lock, std::chrono::seconds(30), [this] { return in_flight_.load() == 0; });
  }

  [[nodiscard]] int in_flight() const { return in_flight_.load(); }

  [[nodiscard]] std::string ProgressLine() const {
    const double t = std::chrono::duration<double>(Clock::now() - start_).count();
    const uint64_t done = completed_.load();
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "\r[%6.1fs] %10llu req %9.0f req/s  allowed %llu  denied %llu  errors %llu  p99 %.3f ms   ",
                  t, static_cast<unsigned long long>(done), t > 0 ? done / t : 0.0,
                  static_cast<unsigned long long>(allowed_.load()),
                  static_cast<unsigned long long>(denied_.load()),
                  static_cast<unsigned long long>(errors_.load()), latency_.Percentile(99) / 1e6);
    return buf;
  }

  [[nodiscard]] BenchReport Report() const {
    BenchReport r;
    r.seconds = static_cast<double>(last_completion_ns_.load()) / 1e9;
    r.requests = completed_.load();
    r.allowed = allowed_.load();
    r.denied = denied_.load();
    r.checks = r.allowed + r.denied;
    r.errors = errors_.load();
    {
      std::lock_guard lock(mutex_);
      r.first_error = first_error_;
    }
    static constexpr double kEdgesMs[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 1000};
    uint64_t below = 0;
    for (double edge : kEdgesMs) {
      const uint64_t at_most = latency_.CountAtMost(static_cast<uint64_t>(edge * 1e6));
      r.histogram.emplace_back(edge, at_most - below);
      below = at_most;
    }
    r.histogram.emplace_back(0, latency_.count() - below);
    r.p50_ns = latency_.Percentile(50);
    r.p90_ns = latency_.Percentile(90);
    r.p99_ns = latency_.Percentile(99);
    r.p999_ns = latency_.Percentile(99.9);
    r.max_ns = latency_.max();
    r.mean_ns = latency_.mean();
    return r;
  }

  [[nodiscard]] Clock::time_point start() const { return start_; }

 private:
  client::Check MakeCheck(std::mt19937_64& rng) const {
    const uint64_t k = chooser_.Next(rng);
    client::Check c;
    c.key = options_.key_prefix + std::to_string(k);
    c.cost = options_.costs[options_.costs.size() == 1 ? 0 : rng() % options_.costs.size()];
    if (!options_.policy.empty()) {
      c.policy = options_.policy;
      return c;
    }
    c.algorithm = options_.algorithms[k % options_.algorithms.size()];
    c.limit = options_.limit;
    c.window_ms = options_.window_ms;
    return c;
  }

  client::Client& client_;
  const BenchOptions& options_;
  const KeyChooser chooser_;
  const Clock::time_point start_;
  const Clock::time_point stop_at_;

  std::atomic<uint64_t> issued_{0};
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> allowed_{0};
  std::atomic<uint64_t> denied_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<int64_t> last_completion_ns_{0};
  std::atomic<int> in_flight_{0};
  client::LatencyHistogram latency_;

  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::string first_error_;  // protected by mutex_
};

// Closed loop: each completion sends the next request while there is budget.
void Chain(Load& load) {
  if (!load.Reserve()) return;
  load.Send(Clock::now(), [&load] { Chain(load); });
}

}  // namespace

BenchReport RunBench(client::Client& client, const BenchOptions& options, std::ostream& progress) {
  Load load(client, options);
  std::atomic<bool> finished{false};
  std::thread reporter;
  if (options.progress_interval.count() > 0) {
    reporter = std::thread([&] {
      auto next = Clock::now() + options.progress_interval;
      while (!finished.load()) {
        std::this_thread::sleep_until(std::min(next, Clock::now() + std::chrono::milliseconds(50)));
        if (Clock::now() < next) continue;
        next += options.progress_interval;
        progress << load.ProgressLine() << std::flush;
      }
    });
  }

  if (options.rate <= 0) {
    for (int i = 0; i < options.concurrency; ++i) Chain(load);
  } else {
    const auto period = std::chrono::duration<double>(1.0 / options.rate);
    for (uint64_t i = 0;; ++i) {
      const auto scheduled =
          load.start() + std::chrono::duration_cast<Clock::duration>(period * static_cast<double>(i));
      std::this_thread::sleep_until(scheduled);
      // At the cap the schedule slips; latency still counts from `scheduled`.
      while (load.in_flight() >= options.concurrency)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      if (!load.Reserve()) break;
      load.Send(scheduled, nullptr);
    }
  }
  // Closed loop: the chains end themselves when the budget is spent; wait for them.
  while (true) {
    load.WaitIdle();
    if (load.in_flight() == 0) break;
  }
  finished.store(true);
  if (reporter.joinable()) reporter.join();
  if (options.progress_interval.count() > 0) progress << load.ProgressLine() << "\n";
  return load.Report();
}

std::string FormatReport(const BenchReport& r) {
  char buf[1024];
  std::snprintf(
      buf, sizeof(buf),
      "requests   %llu in %.2f s = %.0f req/s (%llu checks, %.0f checks/s)\n"
      "decisions  allowed %llu, denied %llu\n"
      "errors     %llu%s%s\n"
      "latency    p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  p99.9 %.3f ms  max %.3f ms  mean %.3f ms\n",
      static_cast<unsigned long long>(r.requests), r.seconds, r.requests_per_second(),
      static_cast<unsigned long long>(r.checks), r.seconds > 0 ? r.checks / r.seconds : 0.0,
      static_cast<unsigned long long>(r.allowed), static_cast<unsigned long long>(r.denied),
      static_cast<unsigned long long>(r.errors),
      r.first_error.empty() ? "" : " (first: ", r.first_error.empty() ? "" : (r.first_error + ")").c_str(),
      r.p50_ns / 1e6, r.p90_ns / 1e6, r.p99_ns / 1e6, r.p999_ns / 1e6, r.max_ns / 1e6, r.mean_ns / 1e6);
  std::string out = buf;
  uint64_t most = 1;
  for (const auto& [edge, count] : r.histogram) most = std::max(most, count);
  out += "histogram\n";
  double previous = 0;
  for (const auto& [edge, count] : r.histogram) {
    char label[64];
    if (edge > 0) {
      std::snprintf(label, sizeof(label), "%7g - %-7g ms", previous, edge);
    } else {
      std::snprintf(label, sizeof(label), "    > %-9g ms", previous);
    }
    previous = edge;
    if (count == 0) continue;
    char line[160];
    std::snprintf(line, sizeof(line), "  %s %10llu  %s\n", label, static_cast<unsigned long long>(count),
                  std::string(static_cast<size_t>(40 * count / most), '#').c_str());
    out += line;
  }
  return out;
}

std::string ReportJson(const BenchReport& r) {
  boost::json::object o;
  o["seconds"] = r.seconds;
  o["requests"] = r.requests;
  o["requests_per_second"] = r.requests_per_second();
  o["checks"] = r.checks;
  o["allowed"] = r.allowed;
  o["denied"] = r.denied;
  o["errors"] = r.errors;
  o["first_error"] = r.first_error;
  o["p50_ms"] = r.p50_ns / 1e6;
  o["p90_ms"] = r.p90_ns / 1e6;
  o["p99_ms"] = r.p99_ns / 1e6;
  o["p999_ms"] = r.p999_ns / 1e6;
  o["max_ms"] = r.max_ns / 1e6;
  o["mean_ms"] = r.mean_ns / 1e6;
  boost::json::array histogram;
  for (const auto& [edge, count] : r.histogram) {
    boost::json::object bucket;
    if (edge > 0) {
      bucket["le_ms"] = edge;
    } else {
      bucket["le_ms"] = "+Inf";
    }
    bucket["count"] = count;
    histogram.push_back(std::move(bucket));
  }
  o["histogram"] = std::move(histogram);
  return ToJson(o);
}

}  // namespace ringlimit::cli
