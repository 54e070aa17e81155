#include "node/metrics/metrics.h"

#include <algorithm>
#include <mutex>

namespace ringlimit::node {

namespace {

constexpr size_t kEndpoints = static_cast<size_t>(Endpoint::kCount);

void AppendUint(std::string* out, uint64_t v) { out->append(std::to_string(v)); }

// Prometheus label values escape backslash, double quote and newline.
void AppendLabelValue(std::string* out, std::string_view v) {
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out->push_back('\\');
      out->push_back(c);
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
}

void AppendSeconds(std::string* out, int64_t ns) {
  char buf[32];
  const int n = snprintf(buf, sizeof buf, "%.9g", static_cast<double>(ns) / 1e9);
  out->append(buf, static_cast<size_t>(n));
}

}  // namespace

void AppendFamilyHeader(std::string* out, std::string_view name, std::string_view type,
                        std::string_view help) {
  out->append("# HELP ").append(name).append(" ").append(help).append("\n# TYPE ").append(name);
  out->append(" ").append(type).push_back('\n');
}

namespace {

void AppendSampleStart(std::string* out, std::string_view name, std::string_view labels) {
  out->append(name);
  if (!labels.empty()) out->append("{").append(labels).append("}");
  out->push_back(' ');
}

}  // namespace

void AppendSample(std::string* out, std::string_view name, std::string_view labels, int64_t value) {
  AppendSampleStart(out, name, labels);
  out->append(std::to_string(value)).push_back('\n');
}

void AppendSample(std::string* out, std::string_view name, std::string_view labels, double value) {
  AppendSampleStart(out, name, labels);
  char buf[32];
  const int n = snprintf(buf, sizeof buf, "%.17g", value);
  out->append(buf, static_cast<size_t>(n)).push_back('\n');
}

void AppendSamplesBy(std::string* out, std::string_view name, std::string_view label,
                     std::initializer_list<std::pair<const char*, uint64_t>> samples) {
  std::string labels;
  for (const auto& [value, count] : samples) {
    labels.assign(label).append("=\"").append(value).push_back('"');
    AppendSample(out, name, labels, static_cast<int64_t>(count));
  }
}

void AppendStorageMetrics(std::string* out, const storage::DurabilityStats& stats) {
  AppendFamilyHeader(out, "ringlimit_storage_persistent", "gauge",
                     "1 when counters are written back to RocksDB (--data-dir), 0 when memory-only.");
  AppendSample(out, "ringlimit_storage_persistent", "", int64_t{stats.persistent ? 1 : 0});
  if (!stats.persistent) return;
  const auto counter = [out](std::string_view name, std::string_view help, uint64_t value) {
    AppendFamilyHeader(out, name, "counter", help);
    AppendSample(out, name, "", static_cast<int64_t>(value));
  };
  AppendFamilyHeader(out, "ringlimit_storage_dirty_keys", "gauge",
                     "States changed in memory and not yet written to RocksDB.");
  AppendSample(out, "ringlimit_storage_dirty_keys", "", static_cast<int64_t>(stats.dirty));
  counter("ringlimit_storage_flushes_total", "Batches of dirty states written to RocksDB.", stats.flushes);
  counter("ringlimit_storage_flush_errors_total",
          "Batch writes to RocksDB that failed (the states stay dirty and are retried at the next flush).",
          stats.write_errors);
  counter("ringlimit_storage_written_states_total", "States written to RocksDB by successful batches.",
          stats.flushed_states);
  counter("ringlimit_storage_deleted_rows_total", "RocksDB rows deleted (idle or erased states).",
          stats.deleted_rows);
  counter("ringlimit_storage_loads_total", "States read back from RocksDB on a memory miss.", stats.loads);
  counter("ringlimit_storage_load_skips_total",
          "Memory misses answered without reading RocksDB: every row they could find had expired.",
          stats.load_skips);
  counter("ringlimit_storage_load_errors_total", "Failed reads from RocksDB (the state served as new).",
          stats.load_errors);
  AppendFamilyHeader(out, "ringlimit_storage_flush_duration_seconds", "histogram",
                     "Time a flush pass with something to write took, from collecting the dirty states to "
                     "their acknowledgement (failed passes included).");
  AppendHistogramSeries(out, "ringlimit_storage_flush_duration_seconds", "", storage::kFlushBoundsNs,
                        stats.flush_buckets, stats.flush_sum_ns, stats.flush_count);
  AppendFamilyHeader(out, "ringlimit_storage_last_flush_success_timestamp_seconds", "gauge",
                     "Unix time the last flush pass ended with nothing left unwritten (0: none yet).");
  AppendSample(out, "ringlimit_storage_last_flush_success_timestamp_seconds", "",
               static_cast<double>(stats.last_flush_success_unix_ns) / 1e9);
  // RocksDB's figures; one it did not answer is left out.
  struct Figure {
    std::string_view name, type, help;
    int64_t value;
  };
  const storage::RocksDbFigures& r = stats.rocksdb;
  const Figure figures[] = {
      {"ringlimit_rocksdb_user_bytes_written_total", "counter",
       "Bytes of keys and values written to RocksDB since the node started.", r.user_bytes_written},
      {"ringlimit_rocksdb_wal_bytes_written_total", "counter",
       "Bytes written to RocksDB's write-ahead log since the node started.", r.wal_bytes_written},
      {"ringlimit_rocksdb_pending_compaction_bytes", "gauge",
       "Bytes RocksDB estimates compaction must rewrite; growing without bound means compaction lags the "
       "writes (RocksDB then slows, and finally stops, writes).",
       r.pending_compaction_bytes},
      {"ringlimit_rocksdb_running_compactions", "gauge", "Compactions running now.", r.running_compactions},
      {"ringlimit_rocksdb_write_stall_slowdowns_total", "counter",
       "Times RocksDB slowed writes down since the node started (too many memtables, L0 files or pending "
       "compaction bytes).",
       r.stall_slowdowns},
      {"ringlimit_rocksdb_write_stall_stops_total", "counter",
       "Times RocksDB stopped writes since the node started.", r.stall_stops},
      {"ringlimit_rocksdb_write_stopped", "gauge", "1 while RocksDB stops writes.", r.write_stopped},
      {"ringlimit_rocksdb_delayed_write_rate_bytes", "gauge",
       "Bytes per second RocksDB holds writes to while it slows them down (0: not slowed).",
       r.delayed_write_rate},
      {"ringlimit_rocksdb_live_sst_bytes", "gauge", "Size of RocksDB's live SST files.", r.live_sst_bytes},
      {"ringlimit_rocksdb_memtable_bytes", "gauge", "Size of RocksDB's memtables.", r.memtable_bytes},
      {"ringlimit_rocksdb_estimated_keys", "gauge", "Rows in RocksDB, as RocksDB estimates them.",
       r.estimated_keys},
      {"ringlimit_rocksdb_background_errors_total", "counter",
       "Errors of RocksDB's background work (flushes, compactions) since the node started.",
       r.background_errors},
  };
  for (const Figure& f : figures) {
    if (f.value < 0) continue;
    AppendFamilyHeader(out, f.name, f.type, f.help);
    AppendSample(out, f.name, "", f.value);
  }
}

void DurationHistogram::Observe(std::chrono::nanoseconds latency) {
  const int64_t ns = std::max<int64_t>(0, latency.count());
  const auto bucket = static_cast<size_t>(
      std::lower_bound(kLatencyBoundsNs.begin(), kLatencyBoundsNs.end(), ns) - kLatencyBoundsNs.begin());
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

std::array<uint64_t, DurationHistogram::kBuckets> DurationHistogram::Buckets() const {
  std::array<uint64_t, kBuckets> out{};
  for (size_t b = 0; b < kBuckets; ++b) out[b] = buckets_[b].load(std::memory_order_relaxed);
  return out;
}

void AppendHistogramSeries(std::string* out, std::string_view name, std::string_view labels,
                           std::span<const int64_t> bounds_ns, std::span<const uint64_t> buckets,
                           int64_t sum_ns, uint64_t count) {
  const std::string_view comma = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t b = 0; b <= bounds_ns.size() && b < buckets.size(); ++b) {
    cumulative += buckets[b];
    out->append(name).append("_bucket{").append(labels).append(comma).append("le=\"");
    if (b == bounds_ns.size()) {
      out->append("+Inf");
    } else {
      AppendSeconds(out, bounds_ns[b]);
    }
    out->append("\"} ");
    AppendUint(out, cumulative);
    out->push_back('\n');
  }
  const auto braced = [&](std::string_view suffix) {
    out->append(name).append(suffix);
    if (!labels.empty()) out->append("{").append(labels).append("}");
    out->push_back(' ');
  };
  braced("_sum");
  AppendSeconds(out, sum_ns);
  out->push_back('\n');
  braced("_count");
  AppendUint(out, count);
  out->push_back('\n');
}

void DurationHistogram::Append(std::string* out, std::string_view name, std::string_view labels) const {
  const std::array<uint64_t, kBuckets> buckets = Buckets();
  AppendHistogramSeries(out, name, labels, kLatencyBoundsNs, buckets,
                        static_cast<int64_t>(sum_ns_.load(std::memory_order_relaxed)),
                        count_.load(std::memory_order_relaxed));
}

std::string_view EndpointName(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kCheckGet:
      return "check_get";
    case Endpoint::kCheckPost:
      return "check_post";
    case Endpoint::kKeysGet:
      return "keys_get";
    case Endpoint::kKeysDelete:
      return "keys_delete";
    case Endpoint::kGetRateLimits:
      return "get_rate_limits";
    case Endpoint::kHeadroom:
      return "headroom";
    case Endpoint::kHealthz:
      return "healthz";
    case Endpoint::kGubernatorHealth:
      return "gubernator_health";
    case Endpoint::kReadyz:
      return "readyz";
    case Endpoint::kMetrics:
      return "metrics";
    case Endpoint::kCluster:
      return "cluster";
    case Endpoint::kRing:
      return "ring";
    case Endpoint::kClusterLeave:
      return "cluster_leave";
    case Endpoint::kStats:
      return "stats";
    case Endpoint::kConsole:
      return "console";
    case Endpoint::kAuth:
      return "auth";
    case Endpoint::kOther:
      return "other";
    case Endpoint::kTransport:
    case Endpoint::kCount:
      break;
  }
  return "transport";
}

Metrics::Metrics(size_t max_metric_names)
    : requests_(new std::atomic<uint64_t>[kEndpoints * kStatuses]),
      names_(max_metric_names),
      rls_rules_(max_metric_names) {
  for (size_t i = 0; i < kEndpoints * kStatuses; ++i) requests_[i].store(0, std::memory_order_relaxed);
}

void Metrics::CountRequest(Endpoint endpoint, unsigned status) {
  if (status >= kStatuses || status < 100) status = 0;
  const size_t e = std::min(static_cast<size_t>(endpoint), kEndpoints - 1);
  requests_[e * kStatuses + status].fetch_add(1, std::memory_order_relaxed);
}

uint64_t Metrics::TEST_Requests(Endpoint endpoint, unsigned status) const {
  return requests_[static_cast<size_t>(endpoint) * kStatuses + status].load(std::memory_order_relaxed);
}

void Metrics::CountRequest(Endpoint endpoint, unsigned status, std::chrono::nanoseconds latency) {
  CountRequest(endpoint, status);
  endpoint_latency_[std::min(static_cast<size_t>(endpoint), kEndpoints - 1)].Observe(latency);
}

void Metrics::ObserveLatency(std::chrono::nanoseconds latency) { latency_.Observe(latency); }

DecisionCounters* Metrics::ForPolicy(std::string_view policy) {
  {
    // The per-check path: no lock, no reference count (the map is not kept past the lookup).
    const std::shared_ptr<const CounterMap>& map = policies_.Cached();
    if (map != nullptr) {
      auto it = map->find(policy);
      if (it != map->end()) return it->second;
    }
  }
  std::lock_guard lock(new_policy_mutex_);
  const std::shared_ptr<const CounterMap> current = policies_.Load();
  if (current != nullptr) {
    auto it = current->find(policy);
    if (it != current->end()) return it->second;  // added meanwhile by another thread
  }
  auto next = current != nullptr ? std::make_shared<CounterMap>(*current) : std::make_shared<CounterMap>();
  DecisionCounters* counters = &counters_.emplace_back();
  next->emplace(std::string(policy), counters);
  policies_.Publish(std::move(next));
  return counters;
}

std::string_view ConfigFileName(ConfigFile file) {
  switch (file) {
    case ConfigFile::kPolicies:
      return "policies";
    case ConfigFile::kRlsConfig:
      return "rls_config";
    case ConfigFile::kCount:
      break;
  }
  return "other";
}

void Metrics::CountConfigReload(ConfigFile file, bool ok, int64_t unix_ns) {
  const auto f = static_cast<size_t>(file);
  if (f >= kConfigFiles) return;
  config_reloads_[f * 2 + (ok ? 1 : 0)].fetch_add(1, std::memory_order_relaxed);
  config_last_ok_[f].store(ok, std::memory_order_relaxed);
  if (ok) config_last_success_ns_[f].store(unix_ns, std::memory_order_relaxed);
}

uint64_t Metrics::TEST_ConfigReloads(ConfigFile file, bool ok) const {
  return config_reloads_[static_cast<size_t>(file) * 2 + (ok ? 1 : 0)].load(std::memory_order_relaxed);
}

void Metrics::AppendConfigReloads(std::string* out) const {
  AppendFamilyHeader(out, "ringlimit_config_reloads_total", "counter",
                     "Loads of a configuration file (at start, on SIGHUP, --rls-config also when it changes) "
                     "by file and result; a failed one keeps the previous content in force.");
  std::string labels;
  const auto file_labels = [&labels](size_t f) {
    labels = "file=\"";
    labels.append(ConfigFileName(static_cast<ConfigFile>(f))).push_back('"');
    return std::string_view(labels);
  };
  const auto loaded = [this](size_t f) {
    return config_reloads_[f * 2].load(std::memory_order_relaxed) +
               config_reloads_[f * 2 + 1].load(std::memory_order_relaxed) >
           0;
  };
  for (size_t f = 0; f < kConfigFiles; ++f) {
    if (!loaded(f)) continue;
    for (int ok = 1; ok >= 0; --ok) {
      file_labels(f);
      labels.append(ok ? ",result=\"success\"" : ",result=\"failure\"");
      AppendSample(out, "ringlimit_config_reloads_total", labels,
                   static_cast<int64_t>(
                       config_reloads_[f * 2 + static_cast<size_t>(ok)].load(std::memory_order_relaxed)));
    }
  }
  AppendFamilyHeader(out, "ringlimit_config_last_reload_success_timestamp_seconds", "gauge",
                     "Unix time the file was last loaded successfully.");
  for (size_t f = 0; f < kConfigFiles; ++f) {
    if (!loaded(f)) continue;
    AppendSample(out, "ringlimit_config_last_reload_success_timestamp_seconds", file_labels(f),
                 static_cast<double>(config_last_success_ns_[f].load(std::memory_order_relaxed)) / 1e9);
  }
  AppendFamilyHeader(out, "ringlimit_config_last_reload_successful", "gauge",
                     "1 when the file's last load succeeded, 0 when it was refused (the previous content "
                     "is in force).");
  for (size_t f = 0; f < kConfigFiles; ++f) {
    if (!loaded(f)) continue;
    AppendSample(out, "ringlimit_config_last_reload_successful", file_labels(f),
                 int64_t{config_last_ok_[f].load(std::memory_order_relaxed) ? 1 : 0});
  }
}

std::string_view GrpcMethodName(GrpcMethod method) {
  switch (method) {
    case GrpcMethod::kShouldRateLimit:
      return "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    case GrpcMethod::kGetRateLimits:
      return "pb.gubernator.V1/GetRateLimits";
    case GrpcMethod::kHealthCheck:
      return "pb.gubernator.V1/HealthCheck";
    case GrpcMethod::kCount:
      break;
  }
  return "other";
}

std::string_view GrpcResultName(GrpcResult result) {
  switch (result) {
    case GrpcResult::kOk:
      return "ok";
    case GrpcResult::kOverLimit:
      return "over_limit";
    case GrpcResult::kInvalidArgument:
      return "invalid_argument";
    case GrpcResult::kUnavailable:
      return "unavailable";
    case GrpcResult::kInternal:
      return "internal";
    case GrpcResult::kCount:
      break;
  }
  return "other";
}

void Metrics::CountGrpc(GrpcMethod method, GrpcResult result, std::chrono::nanoseconds latency) {
  const auto m = static_cast<size_t>(method);
  const auto r = static_cast<size_t>(result);
  if (m >= static_cast<size_t>(GrpcMethod::kCount) || r >= static_cast<size_t>(GrpcResult::kCount)) return;
  grpc_requests_[m * static_cast<size_t>(GrpcResult::kCount) + r].fetch_add(1, std::memory_order_relaxed);
  grpc_latency_[m].Observe(latency);
}

uint64_t Metrics::TEST_Grpc(GrpcMethod method, GrpcResult result) const {
  return grpc_requests_[static_cast<size_t>(method) * static_cast<size_t>(GrpcResult::kCount) +
                        static_cast<size_t>(result)]
      .load(std::memory_order_relaxed);
}

namespace {

// Adds `from` into `into`.
void AddCounters(const DecisionCounters& from, std::array<uint64_t, 3>* into) {
  (*into)[0] += from.allowed.load(std::memory_order_relaxed);
  (*into)[1] += from.denied.load(std::memory_order_relaxed);
  (*into)[2] += from.shadow_denied.load(std::memory_order_relaxed);
}

constexpr std::array<std::string_view, 3> kOutcomes = {"allowed", "denied", "shadow_denied"};

}  // namespace

void Metrics::AppendNameDecisions(std::string* out) const {
  struct Family {
    const NameCounters& table;
    std::string_view name, label, help;
  };
  const Family families[] = {
      {names_, "ringlimit_limit_decisions_total", "name",
       "Decisions of inline limits (checks without a policy, Gubernator items) by limit name and outcome; "
       "the first --max-metric-names names have series of their own, later ones count as name=\"other\"."},
      {rls_rules_, "ringlimit_rls_decisions_total", "rule",
       "Decisions of Envoy's rate limit service by descriptor rule (domain.key_value..., request values "
       "with detailed_metric or value_to_metric) and outcome; capped as ringlimit_limit_decisions_total."},
  };
  std::string labels;
  for (const Family& f : families) {
    AppendFamilyHeader(out, f.name, "counter", f.help);
    f.table.ForEach([&](std::string_view name, const DecisionCounters& c) {
      std::array<uint64_t, 3> n{};
      AddCounters(c, &n);
      for (size_t o = 0; o < kOutcomes.size(); ++o) {
        labels.assign(f.label).append("=\"");
        AppendLabelValue(&labels, name);
        labels.append("\",outcome=\"").append(kOutcomes[o]).push_back('"');
        AppendSample(out, f.name, labels, static_cast<int64_t>(n[o]));
      }
    });
  }
  AppendFamilyHeader(out, "ringlimit_metric_names", "gauge",
                     "Names with series of their own in a capped family, and the cap (--max-metric-names): "
                     "at the cap, new names count as \"other\".");
  AppendSample(out, "ringlimit_metric_names", "family=\"limit_decisions\"",
               static_cast<int64_t>(names_.size()));
  AppendSample(out, "ringlimit_metric_names", "family=\"rls_decisions\"",
               static_cast<int64_t>(rls_rules_.size()));
  AppendFamilyHeader(out, "ringlimit_metric_names_cap", "gauge", "--max-metric-names.");
  AppendSample(out, "ringlimit_metric_names_cap", "", static_cast<int64_t>(names_.cap()));
}

Metrics::Summary Metrics::Summarize() const {
  Summary out;
  std::array<uint64_t, 3> inline_totals{};
  const auto add = [&inline_totals](std::string_view, const DecisionCounters& c) {
    AddCounters(c, &inline_totals);
  };
  names_.ForEach(add);
  rls_rules_.ForEach(add);
  out.allowed += inline_totals[0];
  out.denied += inline_totals[1];
  if (const std::shared_ptr<const CounterMap> policies = policies_.Load(); policies != nullptr) {
    for (const auto& [name, counters] : *policies) {
      out.allowed += counters->allowed.load(std::memory_order_relaxed);
      out.denied += counters->denied.load(std::memory_order_relaxed);
    }
  }
  out.latency = latency_.Buckets();
  return out;
}

std::string Metrics::Render(const storage::StoreStats& store) const {
  std::string out;
  out.reserve(4096);

  AppendFamilyHeader(&out, "ringlimit_http_requests_total", "counter",
                     "HTTP responses by endpoint and status.");
  for (size_t e = 0; e < kEndpoints; ++e) {
    for (unsigned s = 0; s < kStatuses; ++s) {
      const uint64_t n = requests_[e * kStatuses + s].load(std::memory_order_relaxed);
      if (n == 0) continue;
      out.append("ringlimit_http_requests_total{endpoint=\"");
      out.append(EndpointName(static_cast<Endpoint>(e)));
      out.append("\",status=\"");
      AppendUint(&out, s);
      out.append("\"} ");
      AppendUint(&out, n);
      out.push_back('\n');
    }
  }

  AppendFamilyHeader(&out, "ringlimit_grpc_requests_total", "counter", "gRPC calls by method and result.");
  for (size_t m = 0; m < static_cast<size_t>(GrpcMethod::kCount); ++m) {
    for (size_t r = 0; r < static_cast<size_t>(GrpcResult::kCount); ++r) {
      const uint64_t n =
          grpc_requests_[m * static_cast<size_t>(GrpcResult::kCount) + r].load(std::memory_order_relaxed);
      if (n == 0) continue;
      out.append("ringlimit_grpc_requests_total{method=\"");
      out.append(GrpcMethodName(static_cast<GrpcMethod>(m)));
      out.append("\",result=\"");
      out.append(GrpcResultName(static_cast<GrpcResult>(r)));
      out.append("\"} ");
      AppendUint(&out, n);
      out.push_back('\n');
    }
  }
  AppendFamilyHeader(&out, "ringlimit_grpc_duration_seconds", "histogram",
                     "Time from a gRPC call's arrival to its answer, by method.");
  for (size_t m = 0; m < static_cast<size_t>(GrpcMethod::kCount); ++m) {
    const std::string labels = "method=\"" + std::string(GrpcMethodName(static_cast<GrpcMethod>(m))) + "\"";
    grpc_latency_[m].Append(&out, "ringlimit_grpc_duration_seconds", labels);
  }

  AppendFamilyHeader(&out, "ringlimit_decisions_total", "counter",
                     "Limit decisions by policy (\"_inline\" for inline limits) and outcome.");
  // Inline limits and RLS rules are counted per name (AppendNameDecisions); their sum is "_inline".
  std::array<uint64_t, 3> inline_totals{};
  const auto add = [&inline_totals](std::string_view, const DecisionCounters& c) {
    AddCounters(c, &inline_totals);
  };
  names_.ForEach(add);
  rls_rules_.ForEach(add);
  std::string labels;
  const auto append_policy = [&](std::string_view policy, const std::array<uint64_t, 3>& n) {
    for (size_t o = 0; o < kOutcomes.size(); ++o) {
      labels.assign("policy=\"");
      AppendLabelValue(&labels, policy);
      labels.append("\",outcome=\"").append(kOutcomes[o]).push_back('"');
      AppendSample(&out, "ringlimit_decisions_total", labels, static_cast<int64_t>(n[o]));
    }
  };
  if (const std::shared_ptr<const CounterMap> policies = policies_.Load(); policies != nullptr) {
    for (const auto& [name, counters] : *policies) {
      if (name.empty()) {
        AddCounters(*counters, &inline_totals);
        continue;
      }
      std::array<uint64_t, 3> n{};
      AddCounters(*counters, &n);
      append_policy(name, n);
    }
  }
  append_policy("_inline", inline_totals);
  AppendNameDecisions(&out);

  AppendConfigReloads(&out);

  AppendFamilyHeader(&out, "ringlimit_request_duration_seconds", "histogram",
                     "Time from a complete request to its response.");
  latency_.Append(&out, "ringlimit_request_duration_seconds", "");
  AppendFamilyHeader(
      &out, "ringlimit_http_request_duration_seconds", "histogram",
      "Time the API took from a complete request to its response, by endpoint (forwarding to the key's owner "
      "and waiting for replication included); endpoints not used yet are left out.");
  for (size_t e = 0; e < kEndpoints; ++e) {
    if (endpoint_latency_[e].count() == 0) continue;
    const std::string labels = "endpoint=\"" + std::string(EndpointName(static_cast<Endpoint>(e))) + "\"";
    endpoint_latency_[e].Append(&out, "ringlimit_http_request_duration_seconds", labels);
  }

  AppendFamilyHeader(&out, "ringlimit_keys", "gauge", "States held in the memory tier.");
  AppendSample(&out, "ringlimit_keys", "", static_cast<int64_t>(store.keys));
  AppendFamilyHeader(&out, "ringlimit_state_bytes", "gauge",
                     "Memory the states in the memory tier take, as accounted against --max-memory.");
  AppendSample(&out, "ringlimit_state_bytes", "", static_cast<int64_t>(store.bytes));
  AppendFamilyHeader(&out, "ringlimit_evictions_total", "counter",
                     "States evicted by the memory bounds (--max-keys, --max-memory).");
  AppendSample(&out, "ringlimit_evictions_total", "", static_cast<int64_t>(store.evictions));
  AppendFamilyHeader(&out, "ringlimit_idle_drops_total", "counter",
                     "States dropped because they were back to their initial value.");
  AppendSample(&out, "ringlimit_idle_drops_total", "", static_cast<int64_t>(store.idle_drops));
  return out;
}

}  // namespace ringlimit::node
