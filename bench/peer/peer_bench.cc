// peer_bench: request/response throughput of the peer transport over loopback with coalescing off
// (one message per frame and per write) versus on: natural batching only (messages queued during a
// write share the next one, written at the end of the event-loop turn: the default since the transport
// batches per turn), a 200 us window (a request written at once when no other answer is outstanding),
// and the 200 us window applied to every message -- all in one run. One server
// thread, one client thread, a closed loop keeping `--window` requests in flight. Prints messages/s, process
// CPU per message, messages per frame and latency percentiles, plus ratios against the "off" baseline.
//
//   peer_bench [--messages=N] [--window=W] [--payload=BYTES] [--latency-messages=N]
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "node/peer/peer_client.h"
#include "node/peer/peer_server.h"

namespace ringlimit::peer {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kEcho = 1;

struct Mode {
  const char* name;
  size_t max_messages;  // 1 = coalescing off
  std::chrono::microseconds delay;
  bool flush_when_idle;
};

struct Figures {
  double messages_per_s = 0;
  double cpu_us_per_message = 0;
  double messages_per_frame = 0;
  double p50_us = 0, p99_us = 0;
  int errors = 0;
};

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

class Runner {
 public:
  Runner(const Mode& mode, size_t payload_bytes) : payload_(payload_bytes, 'p') {
    PeerServerOptions server_options;
    server_options.framing.coalesce_max_messages = mode.max_messages;
    server_ = std::make_unique<PeerServer>(server_io_, server_options);
    server_->Register(kEcho, [](std::string payload, PeerResponder r) { r.Reply(std::move(payload)); });
    if (!server_->Start().ok()) std::abort();
    PeerClientOptions client_options;
    client_options.framing.coalesce_max_messages = mode.max_messages;
    client_options.framing.coalesce_delay = mode.delay;
    client_options.flush_when_idle = mode.flush_when_idle;
    client_options.max_queued_per_peer = 1 << 20;
    client_options.default_timeout = std::chrono::seconds(30);
    client_ = std::make_unique<PeerClient>(client_io_, client_options);
    peer_ = "127.0.0.1:" + std::to_string(server_->port());
    server_thread_ = std::thread([this] { server_io_.run(); });
    client_thread_ = std::thread([this] { client_io_.run(); });
  }

  ~Runner() {
    client_->Stop();
    server_->Stop();
    client_guard_.reset();
    server_guard_.reset();
    client_io_.stop();
    server_io_.stop();
    client_thread_.join();
    server_thread_.join();
  }

  Figures Run(size_t messages, size_t window) {
    RunLoop(std::min<size_t>(messages / 10 + 1, 2000), window);  // warm-up: connect, allocate
    const PeerStats before = client_->Stats();
    const double cpu0 = CpuSeconds();
    const auto t0 = Clock::now();
    RunLoop(messages, window);
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu = CpuSeconds() - cpu0;
    const PeerStats after = client_->Stats();
    Figures f;
    f.messages_per_s = double(messages) / wall;
    f.cpu_us_per_message = cpu * 1e6 / double(messages);
    f.messages_per_frame = double(after.messages_out - before.messages_out) /
                           double(std::max<uint64_t>(1, after.frames_out - before.frames_out));
    std::sort(latencies_.begin(), latencies_.end());
    f.p50_us = double(latencies_[latencies_.size() / 2]) / 1e3;
    f.p99_us = double(latencies_[latencies_.size() * 99 / 100]) / 1e3;
    f.errors = errors_.load();
    return f;
  }

 private:
  // Keeps `window` calls in flight until `total` have completed; records each call's latency.
  void RunLoop(size_t total, size_t window) {
    total_ = total;
    issued_.store(0);
    completed_.store(0);
    errors_.store(0);
    latencies_.assign(total, 0);
    for (size_t i = 0; i < std::min(window, total); ++i) Issue();
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return completed_.load() == total_; });
  }

  void Issue() {
    const size_t index = issued_.fetch_add(1);
    if (index >= total_) return;
    const auto start = Clock::now();
    client_->Call(peer_, kEcho, payload_, [this, index, start](PeerResult result) {
      latencies_[index] = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
      if (!result.ok()) errors_.fetch_add(1);
      Issue();
      if (completed_.fetch_add(1) + 1 == total_) {
        std::lock_guard lock(mu_);
        cv_.notify_all();
      }
    });
  }

  boost::asio::io_context server_io_, client_io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> server_guard_{
      server_io_.get_executor()};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> client_guard_{
      client_io_.get_executor()};
  std::string payload_;
  std::unique_ptr<PeerServer> server_;
  std::unique_ptr<PeerClient> client_;
  std::string peer_;
  std::thread server_thread_, client_thread_;

  size_t total_ = 0;
  std::atomic<size_t> issued_{0}, completed_{0};
  std::atomic<int> errors_{0};
  std::vector<int64_t> latencies_;  // ns; each slot written by one callback
  std::mutex mu_;
  std::condition_variable cv_;
};

size_t Flag(int argc, char** argv, std::string_view name, size_t fallback) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.starts_with("--") && arg.substr(2).starts_with(name) && arg.size() > name.size() + 3 &&
        arg[name.size() + 2] == '=') {
      return std::strtoull(arg.data() + name.size() + 3, nullptr, 10);
    }
  }
  return fallback;
}

void PrintTable(const char* title, const std::vector<Mode>& modes, const std::vector<Figures>& figures) {
  std::printf("\n%s\n", title);
  std::printf("%-22s %12s %10s %10s %10s %10s %8s %10s %10s\n", "mode", "msgs/s", "cpu_us/msg", "msgs/frame",
              "p50_us", "p99_us", "errors", "x msgs/s", "x cpu/msg");
  for (size_t i = 0; i < modes.size(); ++i) {
    const Figures& f = figures[i];
    std::printf("%-22s %12.0f %10.2f %10.1f %10.1f %10.1f %8d %10.2f %10.2f\n", modes[i].name,
                f.messages_per_s, f.cpu_us_per_message, f.messages_per_frame, f.p50_us, f.p99_us, f.errors,
                f.messages_per_s / figures[0].messages_per_s,
                f.cpu_us_per_message / figures[0].cpu_us_per_message);
  }
}

int Main(int argc, char** argv) {
  const size_t messages = Flag(argc, argv, "messages", 300'000);
  const size_t window = Flag(argc, argv, "window", 256);
  const size_t payload = Flag(argc, argv, "payload", 64);
  const size_t latency_messages = Flag(argc, argv, "latency-messages", 5'000);
  const std::vector<Mode> modes = {
      {"off (1 msg/frame)", 1, std::chrono::microseconds(0), false},
      {"on, end of turn (default)", 1024, std::chrono::microseconds(0), false},
      {"on, 200us", 1024, std::chrono::microseconds(200), true},
      {"on, 200us, always wait", 1024, std::chrono::microseconds(200), false},
  };
  std::printf("peer_bench: loopback, 1 server thread + 1 client thread, %zu-byte payload, echo handler\n",
              payload);
  std::printf("x columns: ratio against 'off' measured in this run\n");
  std::vector<Figures> loaded, idle;
  for (const Mode& mode : modes) loaded.push_back(Runner(mode, payload).Run(messages, window));
  for (const Mode& mode : modes) idle.push_back(Runner(mode, payload).Run(latency_messages, 1));
  PrintTable(
      ("Throughput: " + std::to_string(messages) + " requests, " + std::to_string(window) + " in flight")
          .c_str(),
      modes, loaded);
  PrintTable(("Latency at low load: " + std::to_string(latency_messages) + " requests, 1 in flight").c_str(),
             modes, idle);
  return 0;
}

}  // namespace
}  // namespace ringlimit::peer

int main(int argc, char** argv) { return ringlimit::peer::Main(argc, argv); }
