// cluster_bench: a single ringlimitd versus a 3-node cluster, in one run, on this machine.
//
// Starts real ringlimitd processes (the harness of tests/cluster) and drives them over HTTP with a
// closed-loop load generator (one thread, `--connections` keep-alive connections, each with one
// request in flight: GET /v1/check for a uniformly random key out of `--keys`, limits high enough
// that every check is admitted). Phases:
//   single      1 node, every check local
//   cluster     3 nodes, connections spread over all nodes, random keys (about 2/3 forwarded)
//   local       3 nodes, every check sent to its key's owner (no forwarding)
//   forwarded   3 nodes, every check sent to a node that does not own its key
// For each phase it prints checks/s, latency p50/p99/p99.9, the share of checks that were forwarded
// (the RateLimit-Owner header against the node the check was sent to) and the servers' CPU time per
// check: the utime+stime deltas of every node process (/proc/<pid>/stat) over the measured interval,
// divided by the checks answered in it. "forwarded / local" is the CPU ratio issue 14 targets (<= 1.5x);
// "ring-aware" compares a node reached only with the checks it owns (the "local" phase) to a single node.
//
//   cluster_bench [--seconds=S] [--warmup=S] [--connections=C] [--keys=K] [--threads=T]
#include <unistd.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "ring/ring_view.h"
#include "ring/token.h"
#include "tests/cluster/cluster_harness.h"

namespace ringlimit::bench {
namespace {

namespace net = boost::asio;
using net::ip::tcp;
using Clock = std::chrono::steady_clock;
using testing::Cluster;

struct Options {
  int seconds = 8;       // measured interval per phase
  int warmup = 2;        // unmeasured lead-in per phase (connections, caches, peer channels)
  int connections = 16;  // closed-loop connections in total, spread over the target nodes
  int keys = 100'000;    // key space, uniformly random
  int threads = 1;       // --threads of every node
};

// One node as the load generator targets it.
struct Target {
  std::string id;
  uint16_t port = 0;
  pid_t pid = 0;
};

// The key a connection to target `node` sends next.
using KeyPicker = std::function<const std::string&(size_t node, std::mt19937_64& rng)>;

struct PhaseResult {
  std::string name;
  double seconds = 0;
  uint64_t checks = 0;
  uint64_t errors = 0;     // transport errors and statuses other than 200/429
  uint64_t forwarded = 0;  // answered by an owner other than the node it was sent to
  uint64_t cpu_ticks = 0;  // utime + stime of all node processes over the interval
  std::vector<uint32_t> latencies_us;

  double Percentile(double p) const {
    if (latencies_us.empty()) return 0;
    return latencies_us[std::min(latencies_us.size() - 1, static_cast<size_t>(p * latencies_us.size()))];
  }
  double CpuUsPerCheck() const {
    return checks == 0 ? 0 : cpu_ticks * 1e6 / static_cast<double>(sysconf(_SC_CLK_TCK)) / checks;
  }
};

// utime + stime of `pid` in clock ticks (fields 14 and 15 of /proc/<pid>/stat).
uint64_t CpuTicks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = stat.rfind(')');  // the command name may contain spaces
  if (paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return utime + stime;
}

uint64_t TotalCpuTicks(const std::vector<Target>& targets) {
  uint64_t total = 0;
  for (const auto& t : targets) total += CpuTicks(t.pid);
  return total;
}

// Shared state of one phase; everything runs on one io_context thread.
struct Phase {
  const std::vector<Target>* targets;
  KeyPicker pick;
  bool measuring = false;
  bool stopping = false;
  PhaseResult result;
};

// A keep-alive connection with one request in flight at a time.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(net::io_context& io, Phase& phase, size_t node, uint64_t seed)
      : socket_(io), phase_(phase), node_(node), rng_(seed) {}

  void Start() {
    const tcp::endpoint endpoint(net::ip::make_address("127.0.0.1"), (*phase_.targets)[node_].port);
    socket_.async_connect(endpoint, [self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return self->Fail();
      self->Send();
    });
  }

 private:
  void Send() {
    if (phase_.stopping) return;
    const std::string& key = phase_.pick(node_, rng_);
    request_.clear();
    request_.append("GET /v1/check?key=")
        .append(key)
        .append(
            "&name=bench&algorithm=token_bucket&limit=1000000000&window_ms=60000 HTTP/1.1\r\n"
            "Host: 127.0.0.1\r\n\r\n");
    counted_ = phase_.measuring;
    sent_ = Clock::now();
    net::async_write(socket_, net::buffer(request_),
                     [self = shared_from_this()](boost::system::error_code ec, size_t) {
                       if (ec) return self->Fail();
                       self->have_ = 0;
                       self->Read();
                     });
  }

  void Read() {
    if (have_ == buffer_.size()) return Fail();
    socket_.async_read_some(net::buffer(buffer_.data() + have_, buffer_.size() - have_),
                            [self = shared_from_this()](boost::system::error_code ec, size_t n) {
                              if (ec) return self->Fail();
                              self->have_ += n;
                              self->OnData();
                            });
  }

  // Parses what arrived; reads on until one whole response is there.
  void OnData() {
    const std::string_view data(buffer_.data(), have_);
    const size_t header_end = data.find("\r\n\r\n");
    if (header_end == std::string_view::npos) return Read();
    const std::string_view head = data.substr(0, header_end);
    const size_t length = HeaderNumber(head, "content-length:");
    if (have_ < header_end + 4 + length) return Read();
    const int status = head.size() > 12 ? std::atoi(std::string(head.substr(9, 3)).c_str()) : 0;
    if (counted_ && phase_.measuring) {
      PhaseResult& r = phase_.result;
      if (status == 200 || status == 429) {
        ++r.checks;
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent_);
        r.latencies_us.push_back(static_cast<uint32_t>(us.count()));
        if (HeaderValue(head, "ratelimit-owner:") != (*phase_.targets)[node_].id) ++r.forwarded;
      } else {
        ++r.errors;
      }
    }
    Send();
  }

  // The value of header `name` (lower case, with the colon), trimmed; "" if absent.
  static std::string_view HeaderValue(std::string_view head, std::string_view name) {
    for (size_t pos = head.find("\r\n"); pos != std::string_view::npos; pos = head.find("\r\n", pos + 2)) {
      const std::string_view line = head.substr(pos + 2, head.find("\r\n", pos + 2) - (pos + 2));
      if (line.size() < name.size()) continue;
      bool match = true;
      for (size_t i = 0; i < name.size() && match; ++i) match = std::tolower(line[i]) == name[i];
      if (!match) continue;
      std::string_view value = line.substr(name.size());
      while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      return value;
    }
    return {};
  }
  static size_t HeaderNumber(std::string_view head, std::string_view name) {
    const std::string_view value = HeaderValue(head, name);
    return value.empty() ? 0 : std::strtoull(std::string(value).c_str(), nullptr, 10);
  }

  void Fail() {
    if (phase_.measuring) ++phase_.result.errors;
    boost::system::error_code ignored;
    socket_.close(ignored);
  }

  tcp::socket socket_;
  Phase& phase_;
  const size_t node_;
  std::mt19937_64 rng_;
  std::string request_;
  std::array<char, 16384> buffer_;
  size_t have_ = 0;
  bool counted_ = false;
  Clock::time_point sent_;
};

PhaseResult RunPhase(const std::string& name, const std::vector<Target>& targets, KeyPicker pick,
                     const Options& options) {
  net::io_context io(1);
  Phase phase;
  phase.targets = &targets;
  phase.pick = std::move(pick);
  phase.result.name = name;
  for (int c = 0; c < options.connections; ++c) {
    std::make_shared<Connection>(io, phase, c % targets.size(), 0x9e3779b97f4a7c15ull * (c + 1))->Start();
  }
  uint64_t cpu_start = 0;
  Clock::time_point start;
  net::steady_timer warmup(io, std::chrono::seconds(options.warmup));
  net::steady_timer end(io);
  warmup.async_wait([&](boost::system::error_code) {
    cpu_start = TotalCpuTicks(targets);
    start = Clock::now();
    phase.measuring = true;
    end.expires_after(std::chrono::seconds(options.seconds));
    end.async_wait([&](boost::system::error_code) {
      phase.measuring = false;
      phase.stopping = true;
      phase.result.cpu_ticks = TotalCpuTicks(targets) - cpu_start;
      phase.result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    });
  });
  io.run();
  std::sort(phase.result.latencies_us.begin(), phase.result.latencies_us.end());
  return std::move(phase.result);
}

void Print(const PhaseResult& r) {
  std::printf("%-10s %10.0f %9.0f %9.0f %9.0f %10.1f%% %12.1f %7llu\n", r.name.c_str(), r.checks / r.seconds,
              r.Percentile(0.50), r.Percentile(0.99), r.Percentile(0.999),
              r.checks == 0 ? 0.0 : 100.0 * r.forwarded / r.checks, r.CpuUsPerCheck(),
              static_cast<unsigned long long>(r.errors));
}

std::vector<Target> TargetsOf(Cluster& cluster) {
  std::vector<Target> targets;
  for (size_t i = 0; i < cluster.size(); ++i) {
    targets.push_back({cluster.id(i), cluster.http_port(i), cluster.node(i).pid()});
  }
  return targets;
}

int Main(const Options& options) {
  std::vector<std::string> keys;
  for (int k = 0; k < options.keys; ++k) keys.push_back("user:" + std::to_string(k));
  std::uniform_int_distribution<size_t> any(0, keys.size() - 1);
  auto uniform = [&](size_t, std::mt19937_64& rng) -> const std::string& { return keys[any(rng)]; };
  const std::vector<std::string> node_args = {"--threads", std::to_string(options.threads), "--log-level",
                                              "warn"};

  std::printf(
      "cluster_bench: %d connections, %d keys, %d s measured (+%d s warm-up) per phase, "
      "--threads %d per node, %ld CPUs\n\n",
      options.connections, options.keys, options.seconds, options.warmup, options.threads,
      sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("%-10s %10s %9s %9s %9s %11s %12s %7s\n", "phase", "checks/s", "p50 us", "p99 us", "p99.9 us",
              "forwarded", "CPU us/chk", "errors");
  std::vector<PhaseResult> results;
  {
    auto single = Cluster::Start({.nodes = 1, .args = node_args});
    if (!single) {
      std::fprintf(stderr, "cannot start a node: %s\n", single.error().c_str());
      return 1;
    }
    results.push_back(RunPhase("single", TargetsOf(**single), uniform, options));
    Print(results.back());
  }
  auto started = Cluster::Start({.nodes = 3, .args = node_args});
  if (!started) {
    std::fprintf(stderr, "cannot start the cluster: %s\n", started.error().c_str());
    return 1;
  }
  Cluster& cluster = **started;
  const auto targets = TargetsOf(cluster);
  results.push_back(RunPhase("cluster", targets, uniform, options));
  Print(results.back());

  // Owner-aware key pools: the keys each node owns, and the keys it does not.
  auto view = testing::FetchClusterView(cluster.http_port(0));
  if (!view) {
    std::fprintf(stderr, "%s\n", view.error().c_str());
    return 1;
  }
  std::vector<ring::RingMember> members;
  for (const auto& m : view->members) members.push_back({m.id, m.vnodes});
  auto ring = ring::RingView::Create(1, members).value_or(nullptr);
  std::vector<std::vector<std::string>> owned(targets.size()), not_owned(targets.size());
  for (const auto& key : keys) {
    const std::string owner = ring->Owner(ring::RingToken(key))->id;
    for (size_t i = 0; i < targets.size(); ++i)
      (owner == targets[i].id ? owned : not_owned)[i].push_back(key);
  }
  auto from = [](const std::vector<std::vector<std::string>>& pools) {
    return [&pools](size_t node, std::mt19937_64& rng) -> const std::string& {
      return pools[node][std::uniform_int_distribution<size_t>(0, pools[node].size() - 1)(rng)];
    };
  };
  results.push_back(RunPhase("local", targets, from(owned), options));
  Print(results.back());
  results.push_back(RunPhase("forwarded", targets, from(not_owned), options));
  Print(results.back());

  const PhaseResult& single = results[0];
  const PhaseResult& mixed = results[1];
  const PhaseResult& local = results[2];
  const PhaseResult& forwarded = results[3];
  std::printf("\ncluster / single throughput:            %.2fx\n",
              (mixed.checks / mixed.seconds) / (single.checks / single.seconds));
  std::printf("CPU per check, forwarded / local (3 nodes): %.2fx   (target <= 1.5x)\n",
              forwarded.CpuUsPerCheck() / local.CpuUsPerCheck());
  std::printf("CPU per check, forwarded / single node:     %.2fx\n",
              forwarded.CpuUsPerCheck() / single.CpuUsPerCheck());
  // A ring-aware client sends every check to its key's owner: the "local" phase. Per node of the cluster
  // and per CPU second it serves single / local (CPU per check) of what a single node serves; the
  // throughput per node is shown too, but with three nodes and the load generator sharing this machine's
  // CPUs it says little about a cluster with a core per node.
  std::printf("ring-aware, checks per CPU second, a node / single node: %.2fx   (target >= 0.9x)\n",
              single.CpuUsPerCheck() / local.CpuUsPerCheck());
  std::printf("ring-aware, checks/s per node / single node:           %.2fx   (CPUs shared)\n",
              (local.checks / local.seconds / static_cast<double>(targets.size())) /
                  (single.checks / single.seconds));
  std::printf("p99: single %.0f us, cluster %.0f us   (target <= 2000 us)\n", single.Percentile(0.99),
              mixed.Percentile(0.99));
  return 0;
}

}  // namespace
}  // namespace ringlimit::bench

int main(int argc, char** argv) {
  ringlimit::bench::Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&](std::string_view flag, int* out) {
      if (arg.substr(0, flag.size()) != flag) return false;
      *out = std::atoi(std::string(arg.substr(flag.size())).c_str());
      return true;
    };
    if (!value("--seconds=", &options.seconds) && !value("--warmup=", &options.warmup) &&
        !value("--connections=", &options.connections) && !value("--keys=", &options.keys) &&
        !value("--threads=", &options.threads)) {
      std::fprintf(stderr,
                   "usage: cluster_bench [--seconds=S] [--warmup=S] [--connections=C] [--keys=K] "
                   "[--threads=T]\n");
      return 2;
    }
  }
  if (options.seconds < 1 || options.warmup < 0 || options.connections < 1 || options.keys < 10 ||
      options.threads < 1) {
    std::fprintf(stderr, "cluster_bench: every flag must be positive\n");
    return 2;
  }
  return ringlimit::bench::Main(options);
}
