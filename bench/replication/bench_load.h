// Closed-loop HTTP load for replication_bench, and small readers of a node's /metrics and /v1/cluster.
//
// Load runs `connections` threads, each with one blocking keep-alive HttpClient (tests/support) and one
// request in flight at a time: GET <target> where the target comes from LoadSpec::next. Connection c
// talks to ports[c % ports.size()] first; after a transport error (the node died) it moves on to the next
// port of the list, as a client with a list of nodes would. Responses are counted only while measuring.
//
//   Load load({.ports = ports, .connections = 12, .next = next});
//   load.StartMeasuring();
//   ...                       // sleep, kill a node, poll load.allowed()
//   LoadTotals totals = load.Stop();
//
// Thread safety: Load's methods are called from one thread (the one that built it); allowed() may be
// polled concurrently with the workers. The free functions are thread-safe.
#ifndef RINGLIMIT_BENCH_REPLICATION_BENCH_LOAD_H_
#define RINGLIMIT_BENCH_REPLICATION_BENCH_LOAD_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "tests/support/http_client.h"

namespace ringlimit::bench {

struct LoadSpec {
  // HTTP ports on 127.0.0.1. REQUIRES: not empty.
  std::vector<uint16_t> ports;
  // Threads, one connection and one request in flight each. REQUIRES: >= 1.
  int connections = 12;
  // The next request target ("/v1/check?..."); sets *key to the key's index in [0, keys) when keys > 0.
  std::function<std::string(std::mt19937_64& rng, size_t* key)> next;
  // Number of keys counted per key (LoadTotals::admitted_per_key); 0: no per-key counts.
  size_t keys = 0;
  // Per-request timeout (connect, write, read each). Default: 10 s.
  std::chrono::milliseconds timeout{10'000};
};

// A key's X-RateLimit-Remaining rising above the lowest value seen for it by more than the connections
// (answers may arrive out of order by that much): a counter went back, e.g. a node decided from a stale copy.
struct Regression {
  double ms_after_mark = 0;  // when (Load::Mark is 0)
  size_t key = 0;
  int64_t from = 0;  // lowest remaining seen before
  int64_t to = 0;    // the remaining answered
  std::string node;  // RateLimit-Owner of that answer
};

struct LoadTotals {
  double seconds = 0;                      // measured interval
  uint64_t allowed = 0;                    // 200
  uint64_t denied = 0;                     // 429
  uint64_t failed = 0;                     // any other status
  uint64_t transport_errors = 0;           // no answer (connection refused or reset, timeout)
  std::vector<uint32_t> latencies_us;      // of every 200/429, sorted
  std::vector<uint64_t> admitted_per_key;  // 200s per key (LoadSpec::keys entries)
  std::vector<uint64_t> denied_per_key;    // 429s per key
  // After Load::Mark: 200s per deciding node (the RateLimit-Owner header), per key.
  std::map<std::string, std::vector<uint64_t>> admitted_after_mark;
  // After Load::Mark, in the order found per connection (per-key tracking only).
  std::vector<Regression> regressions;
  // After Load::Mark: every 200 as (key, X-RateLimit-Remaining, RateLimit-Owner). A correct single decider
  // never answers two admissions of a key with the same remaining.
  struct Admission {
    size_t key;
    int64_t remaining;
    std::string node;
    bool operator<(const Admission& o) const {
      return key != o.key ? key < o.key : remaining != o.remaining ? remaining < o.remaining : node < o.node;
    }
  };
  std::vector<Admission> admissions_after_mark;

  [[nodiscard]] uint64_t answered() const { return allowed + denied; }
  [[nodiscard]] double Rate() const { return seconds > 0 ? answered() / seconds : 0; }
  // Latency quantile p in [0, 1], in microseconds (0 without samples).
  [[nodiscard]] double PercentileUs(double p) const;
  // Adds `other` (latencies are merged and sorted again).
  void Merge(const LoadTotals& other);
};

class Load {
 public:
  explicit Load(LoadSpec spec);
  ~Load();  // stops the workers if Stop was not called
  Load(const Load&) = delete;
  Load& operator=(const Load&) = delete;

  void StartMeasuring();
  // From now on, 200s are also counted per deciding node and key (LoadTotals::admitted_after_mark).
  void Mark() {
    mark_time_ = std::chrono::steady_clock::now();
    marked_.store(true);
  }
  // Stops the workers (each finishes its request in flight) and returns what was measured.
  [[nodiscard]] LoadTotals Stop();
  // 200s counted so far (while measuring).
  [[nodiscard]] uint64_t allowed() const { return allowed_.load(std::memory_order_relaxed); }
  // Keys (of LoadSpec::keys) that got at least one 429 so far (while measuring).
  [[nodiscard]] size_t keys_denied() const { return keys_denied_.load(std::memory_order_relaxed); }

 private:
  struct Worker;
  void Run(Worker& worker, size_t index);
  void TrackRemaining(LoadTotals& t, size_t key, const testing::ClientResponse& response);

  LoadSpec spec_;
  std::atomic<bool> measuring_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> marked_{false};
  std::atomic<uint64_t> allowed_{0};
  std::atomic<size_t> keys_denied_{0};
  std::unique_ptr<std::atomic<bool>[]> key_denied_;        // LoadSpec::keys flags
  std::unique_ptr<std::atomic<int64_t>[]> min_remaining_;  // per key, lowest X-RateLimit-Remaining seen
  std::chrono::steady_clock::time_point mark_time_;
  std::chrono::steady_clock::time_point start_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

// The sum of every sample of metric `name` (all label sets) in a Prometheus text body; nullopt when
// the body has none.
[[nodiscard]] std::optional<double> MetricSum(std::string_view body, std::string_view name);

// The max of every sample of metric `name`; nullopt when absent.
[[nodiscard]] std::optional<double> MetricMax(std::string_view body, std::string_view name);

// GET `target` from 127.0.0.1:port: the body of a 200, nullopt otherwise.
[[nodiscard]] std::optional<std::string> FetchBody(
    uint16_t port, const std::string& target, std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace ringlimit::bench

#endif  // RINGLIMIT_BENCH_REPLICATION_BENCH_LOAD_H_
