// replication_bench: the issue-6 benchmark, in one run, on this machine, with real ringlimitd processes
// (the tests/cluster harness) on 127.0.0.1.
//
//  (a) throughput   3 nodes with --replicas 1, --replicas 3 --replication async and --replicas 3
//                   --replication sync, all three clusters up at once; the same closed-loop load (GET
//                   /v1/check, uniform keys, connections spread over all nodes, every check admitted)
//                   driven at each cluster in turn, `rounds` times (interleaved, so a change in the
//                   machine's load hits every configuration alike). Prints checks/s, p50/p99/p99.9 and
//                   the ratios against --replicas 1. Targets: async >= 0.80x throughput; sync p99 <= +1 ms.
//  (b) handoff      2 nodes, `handoff-keys` keys loaded with POST /v1/check (1000 checks per request,
//                   fixed windows of a day so no state expires), then a 3rd node starts: time until every
//                   node shows it alive, until no node shows a handoff in progress while the new node holds
//                   the keys it owns (ringlimit_keys), and until it holds every key whose preference list
//                   contains it (owned + replicas). Target: <= 10 s.
//  (c) crash        3 nodes, --replicas 3, per mode (async, sync): `crash-keys` keys owned by n2 with a
//                   fixed-window limit of `crash-limit` per day; clients on every node (a client whose node
//                   dies moves on to the next node); n2 is killed with SIGKILL once half the total limit
//                   is admitted; the load goes on until every node sees n2 dead, plus `crash-tail-ms`.
//                   Prints admitted - limit (per key, summed) as a % of the limit. Target: sync 0; async
//                   bounded by what the owner admitted in its last replication interval.
//
// Sizes: flags `--name=value`, or environment variables REPLICATION_BENCH_<NAME> (flags win); `--quick`
// (or REPLICATION_BENCH_QUICK=1) shrinks every size for a CI-like run. `--help` lists them.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench/replication/bench_load.h"
#include "ring/ring_view.h"
#include "ring/token.h"
#include "tests/cluster/cluster_harness.h"

namespace ringlimit::bench {
namespace {

namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using testing::Cluster;

struct Options {
  // (a)
  int seconds = 4;       // measured seconds per configuration per round
  int warmup = 1;        // unmeasured lead-in per configuration per round
  int rounds = 3;        // interleaved rounds over the three configurations
  int connections = 12;  // closed-loop connections (threads), spread over the nodes; (a) and (c)
  int keys = 100'000;    // (a) key space, uniform
  int threads = 1;       // --threads of every node
  int interval_ms = 0;   // --replication-interval-ms of every node (0: the node's default)
  // (b)
  int handoff_keys = 1'000'000;
  int handoff_replicas = 3;
  int handoff_timeout_s = 120;
  // (c)
  int crash_keys = 20;
  int crash_limit = 5000;
  int crash_tail_ms = 2000;
  int crash_runs = 1;  // runs per mode (each on a fresh cluster)
  std::string parts = "throughput,handoff,crash";
  std::string crash_modes = "async,sync";
};

bool Has(const std::string& list, std::string_view item) {
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    if (std::string_view(list).substr(pos, comma - pos) == item) return true;
    pos = comma + 1;
  }
  return false;
}

std::vector<std::string> NodeArgs(const Options& o) {
  std::vector<std::string> args = {"--threads", std::to_string(o.threads), "--log-level", "warn"};
  if (o.interval_ms > 0)
    args.insert(args.end(), {"--replication-interval-ms", std::to_string(o.interval_ms)});
  return args;
}

std::vector<uint16_t> PortsOf(Cluster& cluster) {
  std::vector<uint16_t> ports;
  for (size_t i : cluster.Running()) ports.push_back(cluster.http_port(i));
  return ports;
}

// The node's GET /v1/cluster as JSON (null on failure).
json::value ClusterJson(uint16_t port) {
  auto body = FetchBody(port, "/v1/cluster");
  if (!body) return nullptr;
  boost::system::error_code ec;
  json::value v = json::parse(*body, ec);
  return ec ? json::value(nullptr) : v;
}

// "async 3" from /v1/cluster's "replication" object; nullopt when the node has none (no replication yet).
std::optional<std::string> ReplicationOf(uint16_t port) {
  const json::value v = ClusterJson(port);
  const auto* obj = v.if_object();
  const json::value* r = obj ? obj->if_contains("replication") : nullptr;
  if (r == nullptr || !r->is_object()) return std::nullopt;
  return testing::StringField(*r, "mode") + " R=" + json::serialize(r->as_object().at("replicas"));
}

std::shared_ptr<const ring::RingView> RingOf(const std::vector<ring::RingMember>& members) {
  return ring::RingView::Create(1, members).value_or(nullptr);
}

std::vector<ring::RingMember> MembersOf(uint16_t port) {
  std::vector<ring::RingMember> members;
  if (auto view = testing::FetchClusterView(port)) {
    for (const auto& m : view->members) {
      if (m.state == "alive") members.push_back({m.id, m.vnodes});
    }
  }
  return members;
}

void Sleep(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Sum (or max) of a metric over the given nodes; -1 when no node reports it.
double SumMetric(const std::vector<uint16_t>& ports, std::string_view name, bool max = false) {
  std::optional<double> total;
  for (uint16_t port : ports) {
    auto body = FetchBody(port, "/metrics");
    if (!body) continue;
    auto v = max ? MetricMax(*body, name) : MetricSum(*body, name);
    if (v) total = total ? (max ? std::max(*total, *v) : *total + *v) : *v;
  }
  return total.value_or(-1);
}

// Waits until, for 500 ms in a row, no node's /v1/cluster lists a handoff in progress and no node has
// replication pending (the joins of a fresh cluster hand ranges over, and a handoff may be listed only a
// moment after the ring changed). Returns the time waited, or nullopt after `timeout`.
std::optional<double> WaitSettled(Cluster& cluster, std::chrono::seconds timeout) {
  const auto start = Clock::now();
  const auto ports = PortsOf(cluster);
  std::optional<Clock::time_point> quiet_since;
  while (Clock::now() - start < timeout) {
    size_t handoffs = 0;
    for (uint16_t port : ports) {
      const json::value v = ClusterJson(port);
      const auto* obj = v.if_object();
      const json::value* h = obj ? obj->if_contains("handoffs") : nullptr;
      handoffs += h && h->is_array() ? h->as_array().size() : 0;
    }
    if (handoffs != 0 || SumMetric(ports, "ringlimit_replication_pending_keys") > 0) {
      quiet_since.reset();
    } else if (!quiet_since) {
      quiet_since = Clock::now();
    } else if (Clock::now() - *quiet_since >= std::chrono::milliseconds(500)) {
      return Ms(*quiet_since - start);
    }
    Sleep(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

// `value` x `scale` in `format`, or "-" for a metric no node exports (SumMetric's -1).
std::string Figure(double value, double scale, const char* format) {
  if (value < 0) return "-";
  char text[32];
  std::snprintf(text, sizeof text, format, value * scale);
  return text;
}

// ---------------------------------------------------------------------------------------------- (a)

struct Config {
  std::string name;
  std::vector<std::string> args;
  std::unique_ptr<Cluster> cluster;
  std::string note;  // why it did not run, or what the nodes report
  LoadTotals totals;
};

int Throughput(const Options& o) {
  std::printf(
      "== (a) throughput: 3 nodes, %d connections over all nodes, %d uniform keys, %d x %d s per "
      "configuration (+%d s warm-up each), --threads %d ==\n",
      o.connections, o.keys, o.rounds, o.seconds, o.warmup, o.threads);
  std::vector<Config> configs;
  configs.push_back({"replicas 1", {"--replicas", "1"}, nullptr, "", {}});
  configs.push_back({"3 async", {"--replicas", "3", "--replication", "async"}, nullptr, "", {}});
  configs.push_back({"3 sync", {"--replicas", "3", "--replication", "sync"}, nullptr, "", {}});
  for (auto& c : configs) {
    auto args = NodeArgs(o);
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto started = Cluster::Start({.nodes = 3, .args = args});
    if (!started) {
      const std::string& e = started.error();
      c.note = "not run: " + e.substr(0, e.find('\n'));
      continue;
    }
    c.cluster = std::move(*started);
    if (!WaitSettled(*c.cluster, std::chrono::seconds(60))) c.note = "(handoffs not settled in 60 s) ";
    c.note += ReplicationOf(c.cluster->http_port(0)).value_or("no \"replication\" in /v1/cluster");
  }
  std::vector<std::string> keys;
  for (int k = 0; k < o.keys; ++k) keys.push_back("u:" + std::to_string(k));
  auto next = [&keys](std::mt19937_64& rng, size_t*) {
    const auto& key = keys[std::uniform_int_distribution<size_t>(0, keys.size() - 1)(rng)];
    return "/v1/check?key=" + key + "&name=rb&algorithm=token_bucket&limit=1000000000&window_ms=60000";
  };
  for (int round = 0; round < o.rounds; ++round) {
    for (auto& c : configs) {
      if (!c.cluster) continue;
      Load load({.ports = PortsOf(*c.cluster), .connections = o.connections, .next = next});
      Sleep(std::chrono::seconds(o.warmup));
      load.StartMeasuring();
      Sleep(std::chrono::seconds(o.seconds));
      c.totals.Merge(load.Stop());
    }
  }
  const LoadTotals* base = configs[0].cluster ? &configs[0].totals : nullptr;
  std::printf("%-11s %10s %8s %8s %9s %7s %9s %10s  %s\n", "config", "checks/s", "p50 ms", "p99 ms",
              "p99.9 ms", "errors", "vs R=1", "p99 +ms", "nodes report");
  for (const auto& c : configs) {
    if (!c.cluster) {
      std::printf("%-11s %s\n", c.name.c_str(), c.note.c_str());
      continue;
    }
    const LoadTotals& t = c.totals;
    std::printf("%-11s %10.0f %8.2f %8.2f %9.2f %7llu %8.2fx %+10.2f  %s\n", c.name.c_str(), t.Rate(),
                t.PercentileUs(0.5) / 1e3, t.PercentileUs(0.99) / 1e3, t.PercentileUs(0.999) / 1e3,
                static_cast<unsigned long long>(t.failed + t.transport_errors),
                base ? t.Rate() / base->Rate() : 0,
                base ? (t.PercentileUs(0.99) - base->PercentileUs(0.99)) / 1e3 : 0, c.note.c_str());
  }
  std::printf("%-11s %12s %12s %10s %10s %10s %12s\n", "replication", "sent", "acked", "failures",
              "sync waits", "sync t/o", "max lag ms");
  for (const auto& c : configs) {
    if (!c.cluster) continue;
    const auto ports = PortsOf(*c.cluster);
    std::printf("%-11s", c.name.c_str());
    for (const char* name :
         {"ringlimit_replication_updates_sent_total", "ringlimit_replication_updates_acked_total",
          "ringlimit_replication_send_failures_total", "ringlimit_replication_sync_waits_total",
          "ringlimit_replication_sync_timeouts_total"}) {
      std::printf(" %*s", std::string_view(name).find("updates") != std::string_view::npos ? 12 : 10,
                  Figure(SumMetric(ports, name), 1, "%.0f").c_str());
    }
    std::printf(" %12s\n",
                Figure(SumMetric(ports, "ringlimit_replication_max_lag_seconds", true), 1e3, "%.2f").c_str());
  }
  std::printf("(-: the nodes do not export the metric)\n");
  if (base && configs[1].cluster) {
    const double ratio = configs[1].totals.Rate() / base->Rate();
    std::printf("async throughput / replicas 1: %.2fx  (target >= 0.80x: %s)\n", ratio,
                ratio >= 0.8 ? "met" : "NOT met");
  }
  if (base && configs[2].cluster) {
    const double added = (configs[2].totals.PercentileUs(0.99) - base->PercentileUs(0.99)) / 1e3;
    std::printf("sync p99 - replicas 1 p99: %+.2f ms  (target <= +1 ms: %s)\n", added,
                added <= 1.0 ? "met" : "NOT met");
  }
  std::printf("\n");
  return 0;
}

// ---------------------------------------------------------------------------------------------- (b)

// Loads `n` keys "h:<i>" through POST /v1/check, 1000 checks per request, from 4 threads over `ports`.
// Returns the number of requests that failed.
uint64_t Populate(const std::vector<uint16_t>& ports, int n) {
  constexpr int kBatch = 1000;
  std::atomic<int> next_batch{0};
  std::atomic<uint64_t> failed{0};
  const int batches = (n + kBatch - 1) / kBatch;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      testing::HttpClient client(ports[t % ports.size()], std::chrono::seconds(30));
      for (int b = next_batch++; b < batches; b = next_batch++) {
        std::string body = "{\"checks\":[";
        for (int k = b * kBatch; k < std::min(n, (b + 1) * kBatch); ++k) {
          if (k != b * kBatch) body += ',';
          body +=
              "{\"key\":\"h:" + std::to_string(k) +
              "\",\"name\":\"hb\",\"algorithm\":\"fixed_window\",\"limit\":1000000,\"window_ms\":86400000}";
        }
        body += "]}";
        auto response = client.Post("/v1/check", std::move(body));
        if (!response || response->result_int() != 200) ++failed;
      }
    });
  }
  for (auto& t : threads) t.join();
  return failed.load();
}

// What the poll of (b) saw on every node.
struct HandoffPoll {
  bool ring_has_new = true;    // every node lists the new node alive
  bool handoffs_shown = true;  // every node has a "handoffs" array
  size_t handoffs = 0;         // handoffs in progress over all nodes
  uint64_t new_keys = 0;       // ringlimit_keys of the new node
};

HandoffPoll PollHandoff(Cluster& cluster, size_t new_index) {
  HandoffPoll p;
  for (size_t i : cluster.Running()) {
    const json::value v = ClusterJson(cluster.http_port(i));
    const auto* obj = v.if_object();
    bool alive = false;
    if (obj && obj->contains("members")) {
      for (const auto& m : obj->at("members").as_array()) {
        alive |= testing::StringField(m, "id") == cluster.id(new_index) &&
                 testing::StringField(m, "state") == "alive";
      }
    }
    p.ring_has_new &= alive;
    const json::value* h = obj ? obj->if_contains("handoffs") : nullptr;
    if (h && h->is_array()) {
      p.handoffs += h->as_array().size();
    } else {
      p.handoffs_shown = false;
    }
  }
  auto body = FetchBody(cluster.http_port(new_index), "/metrics");
  p.new_keys = body ? static_cast<uint64_t>(MetricSum(*body, "ringlimit_keys").value_or(0)) : 0;
  return p;
}

// The first handoff warnings of the nodes' logs (--log-level warn), if any.
void PrintHandoffLogs(Cluster& cluster) {
  int shown = 0;
  for (size_t i = 0; i < cluster.size(); ++i) {
    const std::string log = cluster.node(i).Log();
    for (size_t pos = 0; pos < log.size() && shown < 12;) {
      size_t end = log.find('\n', pos);
      if (end == std::string::npos) end = log.size();
      const std::string_view line = std::string_view(log).substr(pos, end - pos);
      if (line.find("handoff") != std::string_view::npos) {
        std::printf("  %s: %.*s\n", cluster.id(i).c_str(), static_cast<int>(line.size()), line.data());
        ++shown;
      }
      pos = end + 1;
    }
  }
}

int Handoff(const Options& o) {
  const int r = o.handoff_replicas;
  std::printf("== (b) handoff on join: 2 nodes, --replicas %d (async), %d keys, then a 3rd node ==\n", r,
              o.handoff_keys);
  auto args = NodeArgs(o);
  args.insert(args.end(), {"--replicas", std::to_string(r), "--max-keys", "0"});
  auto started = Cluster::Start({.nodes = 2, .args = args});
  if (!started) {
    std::printf("not run: %s\n\n", started.error().c_str());
    return 1;
  }
  Cluster& cluster = **started;
  (void)WaitSettled(cluster, std::chrono::seconds(60));
  std::printf("nodes report: %s\n",
              ReplicationOf(cluster.http_port(0)).value_or("no \"replication\" in /v1/cluster").c_str());
  const auto ports = PortsOf(cluster);
  auto t0 = Clock::now();
  const uint64_t failed = Populate(ports, o.handoff_keys);
  const double populate_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("loaded %d keys in %.1f s (%.0f checks/s), %llu failed requests\n", o.handoff_keys, populate_s,
              o.handoff_keys / populate_s, static_cast<unsigned long long>(failed));
  // Wait until both nodes hold what they should (owner + replicas) and nothing is pending.
  const double expected_total = static_cast<double>(o.handoff_keys) * std::min(r, 2);
  t0 = Clock::now();
  double held = 0, pending = 0;
  while (Clock::now() - t0 < std::chrono::seconds(o.handoff_timeout_s)) {
    held = SumMetric(ports, "ringlimit_keys");
    pending = SumMetric(ports, "ringlimit_replication_pending_keys");
    if (held >= expected_total && pending <= 0) break;
    Sleep(std::chrono::milliseconds(100));
  }
  std::printf("settled after %.1f s: ringlimit_keys %.0f over both nodes (expected %.0f), pending %.0f\n",
              std::chrono::duration<double>(Clock::now() - t0).count(), held, expected_total, pending);

  // The ring once the 3rd node is in, computed here: the keys it will own, and those it will hold.
  std::vector<ring::RingMember> members = MembersOf(cluster.http_port(0));
  const uint32_t vnodes = members.empty() ? ring::kDefaultVnodes : members[0].vnodes;
  const std::string new_id = "n" + std::to_string(cluster.size() + 1);
  members.push_back({new_id, vnodes});
  auto ring = RingOf(members);
  uint64_t owned = 0, held_expected = 0;
  for (int k = 0; k < o.handoff_keys; ++k) {
    const auto list = ring->PreferenceList(ring::RingToken("h:" + std::to_string(k)), r);
    owned += list[0]->id == new_id;
    held_expected += std::any_of(list.begin(), list.end(), [&](const auto* m) { return m->id == new_id; });
  }

  t0 = Clock::now();
  auto added = cluster.AddNode();
  if (!added) {
    std::printf("cannot add a node: %s\n\n", added.error().c_str());
    return 1;
  }
  const double ready_ms = Ms(Clock::now() - t0);
  std::optional<double> ring_ms, handoff_ms, copies_ms;
  size_t peak_handoffs = 0;
  HandoffPoll last;
  while (Clock::now() - t0 < std::chrono::seconds(o.handoff_timeout_s) && !(handoff_ms && copies_ms)) {
    last = PollHandoff(cluster, *added);
    const double now = Ms(Clock::now() - t0);
    peak_handoffs = std::max(peak_handoffs, last.handoffs);
    if (!ring_ms && last.ring_has_new) ring_ms = now;
    if (!handoff_ms && ring_ms && last.handoffs == 0 && last.new_keys >= owned) handoff_ms = now;
    if (!copies_ms && ring_ms && last.new_keys >= held_expected) copies_ms = now;
    Sleep(std::chrono::milliseconds(20));
  }
  auto ms = [](const std::optional<double>& v) {
    return v ? std::to_string(static_cast<int64_t>(*v)) + " ms" : std::string("not reached");
  };
  const auto all = PortsOf(cluster);
  std::printf("new node %s: ready %.0f ms after start; every node sees it alive: %s\n", new_id.c_str(),
              ready_ms, ms(ring_ms).c_str());
  std::printf(
      "handoff done (no handoff in progress on any node%s, new node holds >= its %llu owned keys): %s"
      "  (target <= 10000 ms: %s)\n",
      last.handoffs_shown ? "" : " - NOT SHOWN: no \"handoffs\" in /v1/cluster",
      static_cast<unsigned long long>(owned), ms(handoff_ms).c_str(),
      handoff_ms && *handoff_ms <= 10'000 ? "met" : "NOT met");
  std::printf("copies restored (new node holds the %llu keys whose preference list has it): %s\n",
              static_cast<unsigned long long>(held_expected), ms(copies_ms).c_str());
  std::printf(
      "new node ringlimit_keys %llu; peak handoffs shown %zu; ringlimit_handoff_keys_total %s, "
      "handoffs failed %s, rereplicated %s\n",
      static_cast<unsigned long long>(last.new_keys), peak_handoffs,
      Figure(SumMetric(all, "ringlimit_handoff_keys_total"), 1, "%.0f").c_str(),
      Figure(SumMetric(all, "ringlimit_handoffs_total{result=\"failed\"}"), 1, "%.0f").c_str(),
      Figure(SumMetric(all, "ringlimit_rereplicated_keys_total"), 1, "%.0f").c_str());
  PrintHandoffLogs(cluster);
  std::printf("\n");
  return 0;
}

// ---------------------------------------------------------------------------------------------- (c)

// Why some keys ended below their limit: each key saw a 429 after the crash (the crash comes at half the
// limit, so none saw one before), i.e. the nodes counted the limit as used; units charged by n2 for
// requests in flight at the crash (answer lost, or retried by the forwarding node) are never seen admitted.
std::string Left(uint64_t under, bool exhausted, int connections) {
  if (!exhausted) return "keys NOT exhausted: raise --crash-tail-ms";
  if (under == 0) return "";
  return std::to_string(under) + " units never seen admitted" +
         (under <= static_cast<uint64_t>(connections) ? " (<= requests in flight)"
                                                      : " (> requests in flight!)");
}

void Crash(const Options& o, const std::string& mode) {
  const int64_t limit = o.crash_limit;
  const uint64_t total_limit = static_cast<uint64_t>(limit) * o.crash_keys;
  auto args = NodeArgs(o);
  args.insert(args.end(), {"--replicas", "3", "--replication", mode});
  auto started = Cluster::Start({.nodes = 3, .args = args});
  if (!started) {
    const std::string& e = started.error();
    std::printf("%-6s not run: %s\n", mode.c_str(), e.substr(0, e.find('\n')).c_str());
    return;
  }
  Cluster& cluster = **started;
  constexpr size_t kVictim = 1;
  // The joins of the fresh cluster hand ranges over: start once that is done, so the figure is the crash's.
  const std::optional<double> settled = WaitSettled(cluster, std::chrono::seconds(60));
  auto ring = RingOf(MembersOf(cluster.http_port(0)));
  if (!ring || ring->Find(cluster.id(kVictim)) == nullptr) {
    std::printf("%-6s not run: no ring with n2 from n1's /v1/cluster\n", mode.c_str());
    return;
  }
  std::vector<std::string> keys;
  for (int i = 0; static_cast<int>(keys.size()) < o.crash_keys; ++i) {
    std::string key = "c:" + mode + ":" + std::to_string(i);
    if (ring->Owner(ring::RingToken(key))->id == cluster.id(kVictim)) keys.push_back(std::move(key));
  }
  const std::string query =
      "&name=crash&algorithm=fixed_window&limit=" + std::to_string(limit) + "&window_ms=86400000";
  auto next = [&](std::mt19937_64& rng, size_t* key) {
    *key = std::uniform_int_distribution<size_t>(0, keys.size() - 1)(rng);
    return "/v1/check?key=" + keys[*key] + query;
  };
  const auto day = std::time(nullptr) / 86400;
  Load load({.ports = PortsOf(cluster), .connections = o.connections, .next = next, .keys = keys.size()});
  load.StartMeasuring();
  const auto t0 = Clock::now();
  // Samples of (time, admitted) for the admission rate just before the crash.
  std::vector<std::pair<Clock::time_point, uint64_t>> samples;
  while (load.allowed() < total_limit / 2 && Clock::now() - t0 < std::chrono::seconds(300)) {
    samples.emplace_back(Clock::now(), load.allowed());
    Sleep(std::chrono::milliseconds(5));
  }
  const auto crash = Clock::now();
  const uint64_t at_crash = load.allowed();
  double rate = 0;
  for (const auto& [when, count] : samples) {
    if (crash - when <= std::chrono::milliseconds(500)) {
      rate = (at_crash - count) / std::chrono::duration<double>(crash - when).count();
      break;
    }
  }
  // The owner's own view of its replication just before it dies: what a crash can lose.
  const auto victim_metrics = FetchBody(cluster.http_port(kVictim), "/metrics", std::chrono::seconds(1));
  auto victim = [&](std::string_view name) {
    return victim_metrics ? MetricSum(*victim_metrics, name).value_or(-1) : -1;
  };
  const double lag_s = victim("ringlimit_replication_lag_seconds");
  const double max_lag_s = victim("ringlimit_replication_max_lag_seconds");
  const double pending = victim("ringlimit_replication_pending_keys");
  load.Mark();
  auto killed = cluster.Kill(kVictim);
  auto dead = cluster.WaitSeenAs(kVictim, {"dead", "left"}, true, std::chrono::seconds(60));
  const double failover_ms = Ms(Clock::now() - crash);
  const uint64_t at_dead = load.allowed();
  // Go on until every key was refused at least once (its limit used up, as the nodes count it), and for
  // crash-tail-ms at least; 120 s at most.
  const auto failover = Clock::now();
  while (Clock::now() - failover < std::chrono::milliseconds(o.crash_tail_ms) ||
         (load.keys_denied() < keys.size() && Clock::now() - failover < std::chrono::seconds(120))) {
    Sleep(std::chrono::milliseconds(10));
  }
  LoadTotals t = load.Stop();
  std::sort(t.regressions.begin(), t.regressions.end(),
            [](const Regression& a, const Regression& b) { return a.ms_after_mark < b.ms_after_mark; });
  uint64_t over = 0, under = 0, max_over = 0;
  const bool exhausted =
      std::all_of(t.denied_per_key.begin(), t.denied_per_key.end(), [](uint64_t d) { return d > 0; });
  for (uint64_t a : t.admitted_per_key) {
    over += a > static_cast<uint64_t>(limit) ? a - limit : 0;
    under += a < static_cast<uint64_t>(limit) ? limit - a : 0;
    max_over = std::max<uint64_t>(max_over, a > static_cast<uint64_t>(limit) ? a - limit : 0);
  }
  std::printf("%-6s %10llu %10llu %9.3f%% %9.2f%% %9.0f %9.1f %8.0f %7llu %7llu %9.1f  %s%s%s\n",
              mode.c_str(), static_cast<unsigned long long>(t.allowed),
              static_cast<unsigned long long>(total_limit), 100.0 * over / total_limit,
              100.0 * max_over / limit, rate, rate * (o.interval_ms > 0 ? o.interval_ms : 2) / 1e3,
              failover_ms, static_cast<unsigned long long>(t.failed),
              static_cast<unsigned long long>(t.transport_errors), t.seconds, killed ? "" : "kill failed; ",
              dead ? "" : "n2 never seen dead; ", Left(under, exhausted, o.connections).c_str());
  // Who decided after the crash: one node per key, unless two nodes took over the same key.
  std::string deciders;
  std::vector<int> nodes_per_key(keys.size());
  for (const auto& [owner, counts] : t.admitted_after_mark) {
    uint64_t sum = 0, with = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
      sum += counts[k];
      with += counts[k] > 0;
      if (owner != cluster.id(kVictim)) nodes_per_key[k] += counts[k] > 0;
    }
    deciders += " " + (owner.empty() ? std::string("?") : owner) + " " + std::to_string(sum) + " (" +
                std::to_string(with) + " keys)";
  }
  std::printf(
      "       n2 just before the SIGKILL: replication lag of the last batch %s ms (max %s ms), pending keys "
      "%s"
      " -> adm/s x lag = %s checks\n",
      Figure(lag_s, 1e3, "%.1f").c_str(), Figure(max_lag_s, 1e3, "%.1f").c_str(),
      Figure(pending, 1, "%.0f").c_str(), Figure(lag_s < 0 ? -1 : rate * lag_s, 1, "%.0f").c_str());
  std::printf("       counter went back (X-RateLimit-Remaining rose by > %d for a key): %zu times",
              o.connections, t.regressions.size());
  for (size_t i = 0; i < t.regressions.size() && i < 3; ++i) {
    const Regression& g = t.regressions[i];
    std::printf("%s %s %lld -> %lld at +%.0f ms (%s)", i == 0 ? ":" : ";", keys[g.key].c_str(),
                static_cast<long long>(g.from), static_cast<long long>(g.to), g.ms_after_mark,
                g.node.c_str());
  }
  std::printf("\n");
  // Admissions answered with a remaining already answered for that key: by the same node (its charge was not
  // kept) or by another one (two deciders from the same count).
  auto adm = t.admissions_after_mark;
  std::sort(adm.begin(), adm.end());
  std::map<std::string, uint64_t> same_node, other_node;
  for (size_t i = 1; i < adm.size(); ++i) {
    const auto& prev = adm[i - 1];
    if (prev.key != adm[i].key || prev.remaining != adm[i].remaining) continue;
    (prev.node == adm[i].node ? same_node : other_node)[adm[i].node]++;
  }
  std::string repeats;
  for (const auto& [node, n] : same_node) repeats += " " + node + " " + std::to_string(n) + " (same node)";
  for (const auto& [node, n] : other_node)
    repeats += " " + node + " " + std::to_string(n) + " (after another node)";
  std::printf(
      "       admissions repeating a remaining already answered for the key:%s (of %zu with the header)\n",
      repeats.empty() ? " none" : repeats.c_str(), adm.size());
  std::printf("       cluster settled (no handoff, nothing pending) %s before the load\n",
              settled ? (std::to_string(static_cast<int64_t>(*settled)) + " ms").c_str() : "NOT within 60 s");
  std::printf("       admitted: %llu before the SIGKILL, %llu until every node saw n2 dead, %llu after\n",
              static_cast<unsigned long long>(at_crash), static_cast<unsigned long long>(at_dead - at_crash),
              static_cast<unsigned long long>(t.allowed - at_dead));
  std::printf(
      "       admitted from the SIGKILL on, by deciding node:%s; keys admitted by 2+ surviving nodes: %lld\n",
      deciders.c_str(),
      static_cast<long long>(
          std::count_if(nodes_per_key.begin(), nodes_per_key.end(), [](int n) { return n > 1; })));
  if (std::time(nullptr) / 86400 != day) std::printf("       (the day window rolled over during the run)\n");
}

int CrashAll(const Options& o) {
  std::printf(
      "== (c) owner crash under load: 3 nodes, --replicas 3, %d keys owned by n2, fixed window of a "
      "day, limit %d each, %d connections over all nodes, SIGKILL n2 at half the limit ==\n",
      o.crash_keys, o.crash_limit, o.connections);
  std::printf("%-6s %10s %10s %10s %10s %9s %9s %8s %7s %7s %9s\n", "mode", "admitted", "limit", "over %",
              "worst key", "adm/s", "bound*", "fail ms", "failed", "no-ans", "seconds");
  for (const std::string mode : {"async", "sync"}) {
    for (int run = 0; run < o.crash_runs && Has(o.crash_modes, mode); ++run) Crash(o, mode);
  }
  std::printf(
      "over %%: sum over keys of max(0, admitted - limit) / sum of limits; worst key: as %% of its limit\n"
      "bound*: admission rate before the crash x replication interval (checks the owner may admit\n"
      "before a batch ships); fail ms: SIGKILL until every node sees n2 dead; failed: non-200/429\n"
      "answers; no-ans: requests without an answer (in flight on n2 at the crash, or timed out)\n\n");
  return 0;
}

// ---------------------------------------------------------------------------------------------- flags

struct IntFlag {
  const char* name;
  int* value;
  int min;
};

std::vector<IntFlag> IntFlags(Options& o) {
  return {{"seconds", &o.seconds, 1},
          {"warmup", &o.warmup, 0},
          {"rounds", &o.rounds, 1},
          {"connections", &o.connections, 1},
          {"keys", &o.keys, 1},
          {"threads", &o.threads, 1},
          {"interval-ms", &o.interval_ms, 0},
          {"handoff-keys", &o.handoff_keys, 1},
          {"handoff-replicas", &o.handoff_replicas, 1},
          {"handoff-timeout-s", &o.handoff_timeout_s, 1},
          {"crash-keys", &o.crash_keys, 1},
          {"crash-limit", &o.crash_limit, 2},
          {"crash-tail-ms", &o.crash_tail_ms, 0},
          {"crash-runs", &o.crash_runs, 1}};
}

std::string EnvName(std::string_view flag) {
  std::string name = "REPLICATION_BENCH_";
  for (char c : flag) name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

void Quick(Options& o) {
  o.seconds = 2;
  o.warmup = 1;
  o.rounds = 1;
  o.keys = 10'000;
  o.handoff_keys = 100'000;
  o.crash_keys = 10;
  o.crash_limit = 1000;
  o.handoff_timeout_s = 30;
}

// Sets `name` to `value`; false if unknown or invalid.
bool Set(Options& o, std::string_view name, const std::string& value) {
  if (name == "parts") return o.parts = value, true;
  if (name == "crash-modes") return o.crash_modes = value, true;
  for (const auto& f : IntFlags(o)) {
    if (name != f.name) continue;
    char* end = nullptr;
    const long v = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < f.min || v > 100'000'000) return false;
    *f.value = static_cast<int>(v);
    return true;
  }
  return false;
}

void Usage(Options& o) {
  std::fprintf(stderr,
               "usage: replication_bench [--quick] [--parts=throughput,handoff,crash] "
               "[--crash-modes=async,sync]");
  for (const auto& f : IntFlags(o)) std::fprintf(stderr, " [--%s=%d]", f.name, *f.value);
  std::fprintf(stderr, "\nevery flag can also be set as REPLICATION_BENCH_<NAME> (e.g. %s=100000)\n",
               EnvName("handoff-keys").c_str());
}

}  // namespace
}  // namespace ringlimit::bench

int main(int argc, char** argv) {
  using namespace ringlimit::bench;
  Options o;
  const char* quick = std::getenv("REPLICATION_BENCH_QUICK");
  bool want_quick = quick != nullptr && std::string_view(quick) == "1";
  for (int i = 1; i < argc; ++i) want_quick |= std::string_view(argv[i]) == "--quick";
  if (want_quick) Quick(o);
  std::vector<std::string> names = {"parts", "crash-modes"};
  for (const auto& f : IntFlags(o)) names.push_back(f.name);
  for (const auto& name : names) {
    const char* env = std::getenv(EnvName(name).c_str());
    if (env != nullptr && !Set(o, name, env)) {
      std::fprintf(stderr, "replication_bench: bad %s=%s\n", EnvName(name).c_str(), env);
      return 2;
    }
  }
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") continue;
    const size_t eq = arg.find('=');
    if (arg.substr(0, 2) != "--" || eq == std::string_view::npos ||
        !Set(o, arg.substr(2, eq - 2), std::string(arg.substr(eq + 1)))) {
      if (arg != "--help") std::fprintf(stderr, "replication_bench: bad argument %s\n", argv[i]);
      Usage(o);
      return 2;
    }
  }
  std::printf("replication_bench: %ld CPUs; load average at start: ", sysconf(_SC_NPROCESSORS_ONLN));
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char line[128] = {};
    if (std::fgets(line, sizeof line, f)) std::fputs(line, stdout);
    std::fclose(f);
  }
  std::printf("\n");
  if (Has(o.parts, "throughput")) Throughput(o);
  if (Has(o.parts, "handoff")) Handoff(o);
  if (Has(o.parts, "crash")) CrashAll(o);
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char line[128] = {};
    if (std::fgets(line, sizeof line, f)) std::printf("load average at end: %s", line);
    std::fclose(f);
  }
  return 0;
}
