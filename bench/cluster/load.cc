#include "bench/cluster/load.h"

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

namespace ringlimit::bench {

namespace net = boost::asio;
using net::ip::tcp;

ProcessCounters ReadCounters(pid_t pid) {
  ProcessCounters c;
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream in(dir + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = stat.rfind(')');  // the command name may contain spaces
  if (paren == std::string::npos) return c;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) c.user_ticks = std::stoull(field);
    if (i == 15) c.sys_ticks = std::stoull(field);
  }
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(dir + "/task", ec)) {
    std::ifstream status(task.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      for (std::string_view name : {"voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"}) {
        if (line.rfind(name, 0) == 0) c.switches += std::strtoull(line.c_str() + name.size(), nullptr, 10);
      }
    }
  }
  return c;
}

ProcessCounters TotalCounters(const std::vector<Target>& targets) {
  ProcessCounters total;
  for (const auto& t : targets) total += ReadCounters(t.pid);
  return total;
}

// A keep-alive connection with one request in flight at a time.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(net::io_context& io, Phase& phase, size_t slot, size_t connections, size_t node, uint64_t seed)
      : socket_(io),
        pace_(io),
        phase_(phase),
        slot_(slot),
        connections_(connections),
        node_(node),
        seed_(seed),
        rng_(seed) {}

  void Start() {
    ++phase_.live;
    const tcp::endpoint endpoint(net::ip::make_address("127.0.0.1"), (*phase_.targets)[node_].port);
    socket_.async_connect(endpoint, [self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return self->Fail();
      self->Send();
    });
  }

  // Sends the next request (or parks, while the phase is paused).
  void Send() {
    if (phase_.stopping) return;
    if (phase_.paused) return Park();
    if (phase_.rate > 0 && phase_.measuring) {
      const auto due = phase_.pace_origin +
                       std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>((slot_ + paced_ * connections_) / phase_.rate));
      ++paced_;
      if (due > Clock::now()) {
        pace_.expires_at(due);
        pace_.async_wait([self = shared_from_this()](boost::system::error_code) { self->SendNow(); });
        return;
      }
      if (paced_ > 1) ++phase_.result.late;
    }
    SendNow();
  }

 private:
  // Pacing and the key sequence start over when the phase resumes: every run measures the same checks.
  void Park() {
    paced_ = 0;
    rng_.seed(seed_);
    phase_.Park(shared_from_this());
  }

  void SendNow() {
    if (phase_.stopping) return;
    if (phase_.paused) return Park();
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
        if (r.errors++ == 0)
          r.first_error = std::to_string(status) + " " + std::string(data.substr(header_end + 4, length));
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
    if (phase_.measuring && phase_.result.errors++ == 0) phase_.result.first_error = "connection failed";
    boost::system::error_code ignored;
    socket_.close(ignored);
    --phase_.live;
    phase_.CheckQuiet();
  }

  tcp::socket socket_;
  net::steady_timer pace_;
  Phase& phase_;
  const size_t slot_;         // this connection's number
  const size_t connections_;  // of the phase
  uint64_t paced_ = 0;        // requests sent since pacing began
  const size_t node_;
  const uint64_t seed_;
  std::mt19937_64 rng_;
  std::string request_;
  std::array<char, 16384> buffer_;
  size_t have_ = 0;
  bool counted_ = false;
  Clock::time_point sent_;
};

void Phase::Resume() {
  paused = false;
  pace_origin = Clock::now();
  auto waiting = std::move(parked);
  parked.clear();
  for (auto& connection : waiting) connection->Send();
}

void StartConnection(net::io_context& io, Phase& phase, size_t slot, size_t connections, size_t node,
                     uint64_t seed) {
  std::make_shared<Connection>(io, phase, slot, connections, node, seed)->Start();
}

}  // namespace ringlimit::bench
