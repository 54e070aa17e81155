// Issue 15's benchmark: what a decision costs the server over gRPC, next to the HTTP check path, measured
// on one ringlimitd in one run.
//
// One ringlimitd (--threads 1 --grpc-listen, an RLS config with one hot rule) pinned to CPU --server-cpu
// (taskset); the load generator runs on --client-cpu with --inflight calls outstanding, each answered call
// replaced at once (closed loop), for --seconds per row after a 1 s warm-up:
//   http GET /v1/check            Beast keep-alive connections, one check per request
//   grpc ShouldRateLimit x1       Envoy's RLS, one descriptor per call
//   grpc ShouldRateLimit x5       five descriptors (five keys) per call
//   grpc GetRateLimits x1         Gubernator's V1, one item per call
// Every row admits (limits far above the load). Server CPU = utime + stime of the ringlimitd process from
// /proc/PID/stat around the row, divided by the decisions made; decisions/s per core = 1 / that. The
// ratio is a row's decisions per core over the HTTP row's; target (issue 15): ShouldRateLimit x1 >= 0.8.
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gubernator/gubernator.grpc.pb.h"
#include "tests/support/node_process.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace rlsv3 = envoy::service::ratelimit::v3;
namespace gpb = ::pb::gubernator;
using Clock = std::chrono::steady_clock;

struct Options {
  double seconds = 5;
  int inflight = 32;
  int server_cpu = 1;
  int client_cpu = 0;
  std::vector<std::string> server_env;  // --server-env=K=V (e.g. the gperftools profiler's)
  std::string only;                     // --only=grpc|http: one kind of row
};

// utime + stime of `pid`, in seconds.
double CpuSeconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15; ++i) {
    rest >> field;
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

void PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

// Closed-loop HTTP load: `inflight` keep-alive connections, each sending the next request when the
// previous answer is read. Returns the answers counted while `counting`.
class HttpLoad {
 public:
  HttpLoad(uint16_t port, std::string target, int connections) : target_(std::move(target)) {
    for (int i = 0; i < connections; ++i) conns_.push_back(std::make_unique<Conn>(io_));
    asio::ip::tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), port);
    for (auto& c : conns_) {
      c->socket.connect(endpoint);
      c->socket.set_option(asio::ip::tcp::no_delay(true));
      c->request = {http::verb::get, target_, 11};
      c->request.set(http::field::host, "127.0.0.1");
      Send(*c);
    }
  }

  // Runs the load until `stop`; counts answers while `count` is set.
  void Run(const std::atomic<bool>& stop) {
    while (!stop.load()) io_.run_for(std::chrono::milliseconds(50));
  }

  std::atomic<bool> counting{false};
  std::atomic<uint64_t> answered{0};
  std::atomic<uint64_t> failed{0};

 private:
  struct Conn {
    explicit Conn(asio::io_context& io) : socket(io) {}
    asio::ip::tcp::socket socket;
    beast::flat_buffer buffer;
    http::request<http::empty_body> request;
    http::response<http::string_body> response;
  };

  void Send(Conn& c) {
    http::async_write(c.socket, c.request, [this, &c](beast::error_code ec, size_t) {
      if (ec) return;
      c.response = {};
      http::async_read(c.socket, c.buffer, c.response, [this, &c](beast::error_code rec, size_t) {
        if (rec) return;
        if (counting.load(std::memory_order_relaxed)) {
          (c.response.result_int() == 200 ? answered : failed).fetch_add(1, std::memory_order_relaxed);
        }
        Send(c);
      });
    });
  }

  asio::io_context io_;
  std::string target_;
  std::vector<std::unique_ptr<Conn>> conns_;
};

// Closed-loop gRPC load on one completion queue: `inflight` calls outstanding, each replaced when it
// completes. Call makes one call's reader; Ok judges an answer.
template <typename Request, typename Response>
class GrpcLoad {
 public:
  using Start = std::function<std::unique_ptr<grpc::ClientAsyncResponseReader<Response>>(
      grpc::ClientContext*, const Request&, grpc::CompletionQueue*)>;

  GrpcLoad(Request request, Start start, std::function<bool(const Response&)> ok, int inflight)
      : request_(std::move(request)), start_(std::move(start)), ok_(std::move(ok)), calls_(inflight) {}

  void Run(const std::atomic<bool>& stop) {
    for (auto& c : calls_) Issue(c);
    int outstanding = static_cast<int>(calls_.size());
    void* tag = nullptr;
    bool ok = false;
    while (outstanding > 0 && cq_.Next(&tag, &ok)) {
      Call& c = *static_cast<Call*>(tag);
      if (counting.load(std::memory_order_relaxed)) {
        (ok && c.status.ok() && ok_(c.response) ? answered : failed).fetch_add(1, std::memory_order_relaxed);
      }
      if (stop.load()) {
        --outstanding;
        continue;
      }
      Issue(c);
    }
    cq_.Shutdown();
    while (cq_.Next(&tag, &ok)) {
    }
  }

  std::atomic<bool> counting{false};
  std::atomic<uint64_t> answered{0};
  std::atomic<uint64_t> failed{0};

 private:
  struct Call {
    std::unique_ptr<grpc::ClientContext> context;
    Response response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader;
  };

  void Issue(Call& c) {
    c.context = std::make_unique<grpc::ClientContext>();
    c.response.Clear();
    c.reader = start_(c.context.get(), request_, &cq_);
    c.reader->StartCall();
    c.reader->Finish(&c.response, &c.status, &c);
  }

  Request request_;
  Start start_;
  std::function<bool(const Response&)> ok_;
  grpc::CompletionQueue cq_;
  std::vector<Call> calls_;
};

struct Row {
  std::string name;
  int decisions_per_call = 1;
  uint64_t calls = 0;
  uint64_t failed = 0;
  double seconds = 0;
  double cpu = 0;  // server CPU seconds over the row
};

// Runs `load` for warm-up + the measured time, reading the server's CPU around the measured part.
template <typename Load>
Row Measure(const std::string& name, int decisions_per_call, Load& load, pid_t server, const Options& o) {
  std::atomic<bool> stop{false};
  std::thread runner([&] {
    PinTo(o.client_cpu);
    load.Run(stop);
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));  // warm-up: a duration, not a synchronisation
  const double cpu0 = CpuSeconds(server);
  const auto t0 = Clock::now();
  load.counting = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));  // the measured interval
  load.counting = false;
  const auto t1 = Clock::now();
  const double cpu1 = CpuSeconds(server);
  stop = true;
  runner.join();
  Row row;
  row.name = name;
  row.decisions_per_call = decisions_per_call;
  row.calls = load.answered.load();
  row.failed = load.failed.load();
  row.seconds = std::chrono::duration<double>(t1 - t0).count();
  row.cpu = cpu1 - cpu0;
  return row;
}

rlsv3::RateLimitRequest RlsRequest(int descriptors) {
  rlsv3::RateLimitRequest request;
  request.set_domain("bench");
  for (int d = 0; d < descriptors; ++d) {
    auto* entry = request.add_descriptors()->add_entries();
    entry->set_key("client");
    entry->set_value("c" + std::to_string(d));
  }
  return request;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const std::string prefix = std::string(flag) + "=";
      return arg.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("--seconds")) {
      o.seconds = std::atof(v);
    } else if (const char* v2 = value("--inflight")) {
      o.inflight = std::atoi(v2);
    } else if (const char* v3 = value("--server-cpu")) {
      o.server_cpu = std::atoi(v3);
    } else if (const char* v4 = value("--client-cpu")) {
      o.client_cpu = std::atoi(v4);
    } else if (const char* v5 = value("--server-env")) {
      o.server_env.emplace_back(v5);
    } else if (const char* v6 = value("--only")) {
      o.only = v6;
    } else {
      std::cout
          << "usage: grpc_bench [--seconds=5] [--inflight=32] [--server-cpu=1] [--client-cpu=0]\n"
             "Server CPU per decision over gRPC (Envoy RLS x1, x5; Gubernator V1) vs HTTP GET /v1/check,\n"
             "one ringlimitd --threads 1 pinned to --server-cpu, the load on --client-cpu.\n";
      return arg == "--help" ? 0 : 2;
    }
  }
  if (o.seconds <= 0 || o.inflight <= 0) {
    std::cerr << "--seconds and --inflight must be positive\n";
    return 2;
  }

  const std::string config_path = "/tmp/grpc_bench_" + std::to_string(getpid()) + ".yaml";
  {
    std::ofstream config(config_path);
    config
        << "domain: bench\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: "
           "4000000000}\n";
  }
  ringlimit::testing::NodeProcessOptions options;
  options.args = {"--threads",    "1",         "--grpc-listen", "127.0.0.1:0",
                  "--rls-config", config_path, "--log-level",   "warn"};
  options.env = o.server_env;  // no taskset wrapper: a profiler's timer would outlive its exec
  auto node = ringlimit::testing::NodeProcess::Start(std::move(options));
  std::remove(config_path.c_str());
  if (!node) {
    std::cerr << "cannot start ringlimitd: " << node.error() << "\n";
    return 1;
  }
  const pid_t server = (*node)->pid();
  // Every thread of the server onto its CPU (threads it starts later inherit the mask).
  const std::string pin =
      "taskset -a -p -c " + std::to_string(o.server_cpu) + " " + std::to_string(server) + " >/dev/null";
  if (std::system(pin.c_str()) != 0) std::cerr << "warning: could not pin the server: " << pin << "\n";
  const uint16_t grpc_port = *(*node)->port("grpc_port");
  PinTo(o.client_cpu);

  std::vector<Row> rows;
  if (o.only != "grpc") {
    HttpLoad load((*node)->http_port(),
                  "/v1/check?key=hot&algorithm=fixed_window&limit=1000000000&window_ms=1000", o.inflight);
    rows.push_back(Measure("http GET /v1/check", 1, load, server, o));
  }
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port), grpc::InsecureChannelCredentials());
  auto rls = rlsv3::RateLimitService::NewStub(channel);
  auto rls_ok = [](const rlsv3::RateLimitResponse& r) {
    return r.overall_code() == rlsv3::RateLimitResponse::OK;
  };
  auto rls_start = [&](grpc::ClientContext* c, const rlsv3::RateLimitRequest& r, grpc::CompletionQueue* cq) {
    return rls->PrepareAsyncShouldRateLimit(c, r, cq);
  };
  for (int descriptors : {1, 5}) {
    if (o.only == "http") break;
    GrpcLoad<rlsv3::RateLimitRequest, rlsv3::RateLimitResponse> load(RlsRequest(descriptors), rls_start,
                                                                     rls_ok, o.inflight);
    rows.push_back(
        Measure("grpc ShouldRateLimit x" + std::to_string(descriptors), descriptors, load, server, o));
  }
  if (o.only != "http") {
    auto v1 = gpb::V1::NewStub(channel);
    gpb::GetRateLimitsReq request;
    auto* item = request.add_requests();
    item->set_name("bench");
    item->set_unique_key("hot");
    item->set_hits(1);
    item->set_limit(1'000'000'000);
    item->set_duration(1000);
    GrpcLoad<gpb::GetRateLimitsReq, gpb::GetRateLimitsResp> load(
        request,
        [&](grpc::ClientContext* c, const gpb::GetRateLimitsReq& r, grpc::CompletionQueue* cq) {
          return v1->PrepareAsyncGetRateLimits(c, r, cq);
        },
        [](const gpb::GetRateLimitsResp& r) {
          return r.responses_size() == 1 && r.responses(0).status() == gpb::UNDER_LIMIT;
        },
        o.inflight);
    rows.push_back(Measure("grpc GetRateLimits x1", 1, load, server, o));
  }

  std::printf(
      "== gRPC vs HTTP: server CPU per decision, ringlimitd --threads 1 on CPU %d, %d calls in flight, "
      "%.0f s per row ==\n",
      o.server_cpu, o.inflight, o.seconds);
  std::printf("%-24s %10s %12s %9s %12s %16s %8s\n", "row", "calls/s", "decisions/s", "failed", "server CPU",
              "decisions/s/core", "vs http");
  double http_per_core = 0;
  double rls1_ratio = 0;
  for (const Row& r : rows) {
    const double decisions = static_cast<double>(r.calls) * r.decisions_per_call;
    const double per_core = r.cpu > 0 ? decisions / r.cpu : 0;
    if (r.name.rfind("http", 0) == 0) http_per_core = per_core;
    const double ratio = http_per_core > 0 ? per_core / http_per_core : 0;
    if (r.name == "grpc ShouldRateLimit x1") rls1_ratio = ratio;
    std::printf("%-24s %10.0f %12.0f %9llu %11.0f%% %16.0f %7.2fx\n", r.name.c_str(),
                static_cast<double>(r.calls) / r.seconds, decisions / r.seconds,
                static_cast<unsigned long long>(r.failed), 100.0 * r.cpu / r.seconds, per_core, ratio);
  }
  if (o.only.empty()) {
    std::printf("ShouldRateLimit x1 decisions per core / HTTP's: %.2fx (target >= 0.80x: %s)\n", rls1_ratio,
                rls1_ratio >= 0.8 ? "met" : "NOT met");
  }
  // A clean stop, so that a profiler in --server-env writes its profile.
  if ((*node)->Signal(SIGTERM)) (void)(*node)->WaitExit();
  return 0;
}
