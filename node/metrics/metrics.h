// Metrics: the node's counters, rendered in the Prometheus text exposition format at GET /metrics.
// Atomic counters only; no external library.
//
// Thread safety: every method is safe for concurrent use from many threads without external
// synchronisation. Counting never blocks: counters are relaxed atomics, and the per-policy table is an
// immutable map published through Published (one atomic load per lookup; a writer mutex only the
// first time a policy name is seen).
#ifndef RINGLIMIT_NODE_METRICS_METRICS_H_
#define RINGLIMIT_NODE_METRICS_METRICS_H_

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "base/published.h"
#include "node/metrics/name_counters.h"
#include "storage/state_store.h"
#include "storage/store.h"

namespace ringlimit::node {

// The API endpoints, as counted in ringlimit_http_requests_total{endpoint=...}.
enum class Endpoint : uint8_t {
  kCheckGet,
  kCheckPost,
  kKeysGet,
  kKeysDelete,
  kGetRateLimits,
  kHeadroom,
  kHealthz,
  kGubernatorHealth,  // GET /v1/HealthCheck, GET /v1/LiveCheck
  kReadyz,
  kMetrics,
  kCluster,       // GET /v1/cluster
  kRing,          // GET /v1/ring
  kClusterLeave,  // POST /v1/cluster/leave
  kStats,         // GET /v1/stats
  kConsole,       // GET /ui
  kAuth,          // GET /v1/auth
  kOther,         // unknown paths, wrong methods
  kTransport,     // errors the transport answers itself (408, 413, 431, 503)
  kCount,
};
[[nodiscard]] std::string_view EndpointName(Endpoint endpoint);

// The gRPC methods, as counted in ringlimit_grpc_requests_total{method=...}.
enum class GrpcMethod : uint8_t {
  kShouldRateLimit,  // envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
  kGetRateLimits,    // pb.gubernator.V1/GetRateLimits
  kHealthCheck,      // pb.gubernator.V1/HealthCheck
  kCount,
};
[[nodiscard]] std::string_view GrpcMethodName(GrpcMethod method);

// How a gRPC call ended, as counted in ringlimit_grpc_requests_total{result=...}.
enum class GrpcResult : uint8_t {
  kOk,               // answered, nothing over the limit
  kOverLimit,        // answered, OVER_LIMIT
  kInvalidArgument,  // gRPC status INVALID_ARGUMENT
  kUnavailable,      // gRPC status UNAVAILABLE (not joined, clock offset, no holder answered)
  kInternal,         // gRPC status INTERNAL
  kCount,
};
[[nodiscard]] std::string_view GrpcResultName(GrpcResult result);

// The files a node reads at start and reloads (SIGHUP; --rls-config also when it changes), as counted in
// ringlimit_config_reloads_total{file=...}.
enum class ConfigFile : uint8_t {
  kPolicies,   // --policies
  kRlsConfig,  // --rls-config
  kCount,
};
[[nodiscard]] std::string_view ConfigFileName(ConfigFile file);

// Upper bounds of every latency histogram's buckets, in nanoseconds (the +Inf bucket is implicit).
inline constexpr std::array<int64_t, 14> kLatencyBoundsNs = {
    25'000,    50'000,     100'000,    250'000,     500'000,     1'000'000,     2'500'000,
    5'000'000, 10'000'000, 25'000'000, 100'000'000, 250'000'000, 1'000'000'000, 10'000'000'000};

// Appends one histogram's series in the Prometheus text format -- `name`_bucket per bound of `bounds_ns`
// (cumulative, then +Inf), `name`_sum (seconds) and `name`_count -- each with `labels` ("" or
// `key="value",...`). `buckets` holds one count per bucket (not cumulative), bounds_ns.size() + 1 of them.
void AppendHistogramSeries(std::string* out, std::string_view name, std::string_view labels,
                           std::span<const int64_t> bounds_ns, std::span<const uint64_t> buckets,
                           int64_t sum_ns, uint64_t count);

// Appends `# HELP name help` and `# TYPE name type` (`type`: counter, gauge, histogram).
void AppendFamilyHeader(std::string* out, std::string_view name, std::string_view type,
                        std::string_view help);
// Appends one sample line, `name{labels} value` (`labels` "" or `key="value",...`).
void AppendSample(std::string* out, std::string_view name, std::string_view labels, int64_t value);
void AppendSample(std::string* out, std::string_view name, std::string_view labels, double value);
// Appends one sample per value of one label: `name{label="value"} count` for each (value, count) pair.
void AppendSamplesBy(std::string* out, std::string_view name, std::string_view label,
                     std::initializer_list<std::pair<const char*, uint64_t>> samples);

// Appends the write-back tier's families (ringlimit_storage_*, ringlimit_rocksdb_*) from `stats`; for a
// memory-only store only ringlimit_storage_persistent 0.
void AppendStorageMetrics(std::string* out, const storage::DurabilityStats& stats);

// A latency histogram over kLatencyBoundsNs, safe for concurrent use (relaxed atomics).
class DurationHistogram {
 public:
  static constexpr size_t kBuckets = kLatencyBoundsNs.size() + 1;  // the last one is +Inf

  void Observe(std::chrono::nanoseconds latency);
  // Appends its series in the Prometheus text format -- `name`_bucket per bound (cumulative, then +Inf),
  // `name`_sum and `name`_count -- each with `labels` ("" or `key="value",...`). No HELP/TYPE lines.
  void Append(std::string* out, std::string_view name, std::string_view labels) const;
  [[nodiscard]] uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  // The bucket counts, each on its own (not cumulative).
  [[nodiscard]] std::array<uint64_t, kBuckets> Buckets() const;

 private:
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

class Metrics {
 public:
  // Names (inline limits; RLS rules) with series of their own, by default (--max-metric-names).
  static constexpr size_t kDefaultMaxMetricNames = 100;

  // `max_metric_names`: the cap of ringlimit_limit_decisions_total's and ringlimit_rls_decisions_total's
  // names each (NameCounters).
  explicit Metrics(size_t max_metric_names = kDefaultMaxMetricNames);
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // One HTTP response with `status` (100..599; others are counted as 0) answered for `endpoint`; with
  // `latency`, the time the handler took from the complete request to the response, observed in
  // ringlimit_http_request_duration_seconds{endpoint}.
  void CountRequest(Endpoint endpoint, unsigned status);
  void CountRequest(Endpoint endpoint, unsigned status, std::chrono::nanoseconds latency);

  // The transport calls this for every response it writes: the time from the complete request to
  // the response being ready.
  void ObserveLatency(std::chrono::nanoseconds latency);

  // The transport calls this for responses it produced itself (408, 413, 431, 503, 400 on a
  // malformed request line); handler responses are counted by the handler.
  void CountTransportError(unsigned status) { CountRequest(Endpoint::kTransport, status); }

  // One gRPC call of `method` ended with `result` after `latency`.
  void CountGrpc(GrpcMethod method, GrpcResult result, std::chrono::nanoseconds latency);

  // A load of `file` ended, at Unix time `unix_ns`: `ok`, or refused (the previous content stays in
  // force). Files never loaded (no such flag) have no series.
  void CountConfigReload(ConfigFile file, bool ok, int64_t unix_ns);

  // The counters of `policy`. The pointer stays valid for the Metrics' life.
  [[nodiscard]] DecisionCounters* ForPolicy(std::string_view policy);

  // The counters of the inline limit `name` (checks without a policy, Gubernator items), or the overflow's
  // once --max-metric-names names have their own. No lock, no allocation once the name is known. Their
  // sum, with the RLS rules', is the policy "_inline" of ringlimit_decisions_total.
  [[nodiscard]] DecisionCounters* ForName(std::string_view name) { return names_.Find(name); }
  // The counters of an RLS descriptor rule (its series name, rls::RlsConfig::Match), capped as ForName.
  [[nodiscard]] DecisionCounters* ForRlsRule(std::string_view rule) { return rls_rules_.Find(rule); }

  // The whole exposition text; `store` supplies keys held and evictions.
  [[nodiscard]] std::string Render(const storage::StoreStats& store) const;

  // Upper bounds of the latency histogram buckets, in nanoseconds (the +Inf bucket is implicit).
  static constexpr std::array<int64_t, 14> kLatencyBoundsNs = node::kLatencyBoundsNs;

  // Totals for the console's stats (GET /v1/stats): decisions over every policy, and the HTTP latency
  // histogram's bucket counts (per bucket, not cumulative; kLatencyBoundsNs, then +Inf).
  struct Summary {
    uint64_t allowed = 0;
    uint64_t denied = 0;
    std::array<uint64_t, kLatencyBoundsNs.size() + 1> latency{};
  };
  [[nodiscard]] Summary Summarize() const;

  // Test hooks.
  [[nodiscard]] uint64_t TEST_Requests(Endpoint endpoint, unsigned status) const;
  [[nodiscard]] uint64_t TEST_Grpc(GrpcMethod method, GrpcResult result) const;
  [[nodiscard]] uint64_t TEST_ConfigReloads(ConfigFile file, bool ok) const;

 private:
  static constexpr unsigned kStatuses = 600;

  void AppendConfigReloads(std::string* out) const;
  void AppendNameDecisions(std::string* out) const;

  // Constant after construction (the arrays themselves; their elements are atomics).
  std::unique_ptr<std::atomic<uint64_t>[]> requests_;  // [endpoint * kStatuses + status]
  DurationHistogram latency_;                          // every HTTP response, as the transport sees it
  std::array<DurationHistogram, static_cast<size_t>(Endpoint::kCount)> endpoint_latency_;
  std::array<std::atomic<uint64_t>,
             static_cast<size_t>(GrpcMethod::kCount) * static_cast<size_t>(GrpcResult::kCount)>
      grpc_requests_{};
  std::array<DurationHistogram, static_cast<size_t>(GrpcMethod::kCount)> grpc_latency_;
  static constexpr size_t kConfigFiles = static_cast<size_t>(ConfigFile::kCount);
  std::array<std::atomic<uint64_t>, kConfigFiles * 2> config_reloads_{};  // [file * 2 + ok]
  std::array<std::atomic<int64_t>, kConfigFiles> config_last_success_ns_{};
  std::array<std::atomic<bool>, kConfigFiles> config_last_ok_{};

  // Policy name -> its counters (in counters_). Immutable once published; replaced by a copy with one
  // more name when a new name is seen. A thread may keep reading a map of a dead Metrics from its cache
  // entry, never the counters it points to (base/published.h: entries are keyed by instance).
  using CounterMap = std::map<std::string, DecisionCounters*, std::less<>>;
  Published<CounterMap> policies_;

  // Inline limit names and RLS rules, each table capped at its own max_metric_names.
  NameCounters names_;
  NameCounters rls_rules_;

  // Serialises adding a name to policies_ (read-copy-publish). Protected by new_policy_mutex_:
  std::mutex new_policy_mutex_;
  std::deque<DecisionCounters> counters_;  // elements never move nor die before the Metrics
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_METRICS_METRICS_H_
