#include "bench/replication/bench_load.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <utility>

#include "tests/support/http_client.h"

namespace ringlimit::bench {

using Clock = std::chrono::steady_clock;

double LoadTotals::PercentileUs(double p) const {
  if (latencies_us.empty()) return 0;
  const size_t index = std::min(latencies_us.size() - 1, static_cast<size_t>(p * latencies_us.size()));
  return latencies_us[index];
}

void LoadTotals::Merge(const LoadTotals& other) {
  seconds += other.seconds;
  allowed += other.allowed;
  denied += other.denied;
  failed += other.failed;
  transport_errors += other.transport_errors;
  latencies_us.insert(latencies_us.end(), other.latencies_us.begin(), other.latencies_us.end());
  std::sort(latencies_us.begin(), latencies_us.end());
  auto add = [](std::vector<uint64_t>& to, const std::vector<uint64_t>& from) {
    if (to.size() < from.size()) to.resize(from.size());
    for (size_t k = 0; k < from.size(); ++k) to[k] += from[k];
  };
  add(admitted_per_key, other.admitted_per_key);
  add(denied_per_key, other.denied_per_key);
  for (const auto& [owner, counts] : other.admitted_after_mark) add(admitted_after_mark[owner], counts);
  regressions.insert(regressions.end(), other.regressions.begin(), other.regressions.end());
  admissions_after_mark.insert(admissions_after_mark.end(), other.admissions_after_mark.begin(),
                               other.admissions_after_mark.end());
}

// What one worker thread counted; read by Stop after the thread was joined.
struct Load::Worker {
  LoadTotals totals;
};

Load::Load(LoadSpec spec) : spec_(std::move(spec)), key_denied_(new std::atomic<bool>[spec_.keys]) {
  min_remaining_.reset(new std::atomic<int64_t>[spec_.keys]);
  for (size_t k = 0; k < spec_.keys; ++k) {
    key_denied_[k].store(false);
    min_remaining_[k].store(std::numeric_limits<int64_t>::max());
  }
  for (int c = 0; c < spec_.connections; ++c) {
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->totals.admitted_per_key.resize(spec_.keys);
    workers_.back()->totals.denied_per_key.resize(spec_.keys);
  }
  for (int c = 0; c < spec_.connections; ++c) {
    threads_.emplace_back([this, c] { Run(*workers_[c], static_cast<size_t>(c)); });
  }
}

Load::~Load() {
  if (!stopped_) (void)Stop();
}

void Load::StartMeasuring() {
  start_ = Clock::now();
  measuring_.store(true);
}

LoadTotals Load::Stop() {
  const bool was_measuring = measuring_.exchange(false);
  const double seconds = was_measuring ? std::chrono::duration<double>(Clock::now() - start_).count() : 0;
  stopping_.store(true);
  for (auto& t : threads_) t.join();
  threads_.clear();
  stopped_ = true;
  LoadTotals totals;
  for (const auto& w : workers_) totals.Merge(w->totals);
  totals.seconds = seconds;
  return totals;
}

void Load::Run(Worker& worker, size_t index) {
  std::mt19937_64 rng(0x9e3779b97f4a7c15ull * (index + 1));
  size_t port_index = index % spec_.ports.size();
  auto client = std::make_unique<testing::HttpClient>(spec_.ports[port_index], spec_.timeout);
  LoadTotals& t = worker.totals;
  while (!stopping_.load(std::memory_order_relaxed)) {
    size_t key = 0;
    const std::string target = spec_.next(rng, &key);
    const auto sent = Clock::now();
    auto response = client->Get(target);
    const bool measuring = measuring_.load(std::memory_order_relaxed);
    if (!response) {
      if (measuring) ++t.transport_errors;
      // The node is gone (or stuck): go on with the next one, as a client with a node list would.
      port_index = (port_index + 1) % spec_.ports.size();
      client = std::make_unique<testing::HttpClient>(spec_.ports[port_index], spec_.timeout);
      continue;
    }
    if (!measuring) continue;
    const int status = response->result_int();
    if (status == 200 || status == 429) {
      const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent).count();
      t.latencies_us.push_back(static_cast<uint32_t>(us));
    }
    if ((status == 200 || status == 429) && key < spec_.keys) TrackRemaining(t, key, *response);
    if (status == 200) {
      ++t.allowed;
      allowed_.fetch_add(1, std::memory_order_relaxed);
      if (key < t.admitted_per_key.size()) ++t.admitted_per_key[key];
      if (marked_.load(std::memory_order_relaxed) && key < spec_.keys) {
        auto& counts = t.admitted_after_mark[std::string(response->base()["RateLimit-Owner"])];
        counts.resize(spec_.keys);
        ++counts[key];
      }
    } else if (status == 429) {
      ++t.denied;
      if (key < t.denied_per_key.size()) {
        ++t.denied_per_key[key];
        if (!key_denied_[key].exchange(true, std::memory_order_relaxed)) keys_denied_.fetch_add(1);
      }
    } else {
      ++t.failed;
    }
  }
}

void Load::TrackRemaining(LoadTotals& t, size_t key, const testing::ClientResponse& response) {
  const auto header = response.base()["X-RateLimit-Remaining"];
  if (header.empty()) return;
  const int64_t remaining = std::strtoll(std::string(header).c_str(), nullptr, 10);
  std::atomic<int64_t>& low = min_remaining_[key];
  int64_t seen = low.load(std::memory_order_relaxed);
  if (marked_.load(std::memory_order_relaxed) && response.result_int() == 200) {
    t.admissions_after_mark.push_back({key, remaining, std::string(response.base()["RateLimit-Owner"])});
  }
  if (marked_.load(std::memory_order_relaxed) && seen != std::numeric_limits<int64_t>::max() &&
      remaining > seen + spec_.connections) {
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - mark_time_).count();
    t.regressions.push_back({ms, key, seen, remaining, std::string(response.base()["RateLimit-Owner"])});
    low.store(remaining, std::memory_order_relaxed);  // report each jump once
    return;
  }
  while (remaining < seen && !low.compare_exchange_weak(seen, remaining, std::memory_order_relaxed)) {
  }
}

namespace {

// Calls `sample(value)` for every sample line of metric `name`.
template <class F>
bool ForEachSample(std::string_view body, std::string_view name, F sample) {
  bool found = false;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find('\n', pos);
    if (end == std::string_view::npos) end = body.size();
    const std::string_view line = body.substr(pos, end - pos);
    pos = end + 1;
    if (line.size() <= name.size() || line.substr(0, name.size()) != name) continue;
    const char next = line[name.size()];
    if (next != ' ' && next != '{') continue;
    const size_t space = line.rfind(' ');
    sample(std::strtod(std::string(line.substr(space + 1)).c_str(), nullptr));
    found = true;
  }
  return found;
}

}  // namespace

std::optional<double> MetricSum(std::string_view body, std::string_view name) {
  double sum = 0;
  if (!ForEachSample(body, name, [&](double v) { sum += v; })) return std::nullopt;
  return sum;
}

std::optional<double> MetricMax(std::string_view body, std::string_view name) {
  std::optional<double> max;
  ForEachSample(body, name, [&](double v) { max = max ? std::max(*max, v) : v; });
  return max;
}

std::optional<std::string> FetchBody(uint16_t port, const std::string& target,
                                     std::chrono::milliseconds timeout) {
  testing::HttpClient client(port, timeout);
  auto response = client.Get(target);
  if (!response || response->result_int() != 200) return std::nullopt;
  return std::move(response->body());
}

}  // namespace ringlimit::bench
