// Test helpers for node/peer tests: an io_context on worker threads, a condition poll with a
// deadline, a synchronous call wrapper, and a raw TCP socket to send arbitrary bytes to a server.
//
// Thread safety: IoThreads and CallSync are safe from the test thread; RawSocket is single-threaded.
#ifndef RINGLIMIT_NODE_PEER_PEER_TEST_UTIL_H_
#define RINGLIMIT_NODE_PEER_PEER_TEST_UTIL_H_

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "node/peer/framed_connection.h"
#include "node/peer/peer_client.h"
#include "transport.pb.h"

namespace ringlimit::peer::testing {

// Runs an io_context on `threads` threads until destroyed.
class IoThreads {
 public:
  explicit IoThreads(int threads = 2) : guard_(io_.get_executor()) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { io_.run(); });
  }
  // Lets the work left (closing connections) finish, for up to 5 s, then stops.
  ~IoThreads() {
    guard_.reset();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!io_.stopped() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    io_.stop();
    for (auto& t : threads_) t.join();
  }
  boost::asio::io_context& io() { return io_; }

 private:
  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_;
  std::vector<std::thread> threads_;
};

// Polls `condition` until it holds or `timeout` passes; returns its last value.
inline bool WaitFor(const std::function<bool()>& condition,
                    std::chrono::milliseconds timeout = std::chrono::milliseconds(10'000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return condition();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Calls and waits for the result (at most 10 s, then a kTimeout result of its own).
inline PeerResult CallSync(PeerClient& client, const std::string& peer, uint32_t method, std::string payload,
                           CallOptions options = {}) {
  auto promise = std::make_shared<std::promise<PeerResult>>();
  auto future = promise->get_future();
  client.Call(
      peer, method, std::move(payload), [promise](PeerResult r) { promise->set_value(std::move(r)); },
      options);
  if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    return PeerResult::Error(PeerErrorKind::kTimeout, "CallSync: no callback within 10 s");
  }
  return future.get();
}

inline std::string Address(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

// A blocking TCP socket with a receive timeout, speaking raw bytes or frames.
class RawSocket {
 public:
  explicit RawSocket(uint16_t port) : socket_(io_) {
    socket_.connect({boost::asio::ip::make_address("127.0.0.1"), port});
    timeval tv{.tv_sec = 5, .tv_usec = 0};
    setsockopt(socket_.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }

  void WriteBytes(const std::string& bytes) {
    boost::system::error_code ignored;
    boost::asio::write(socket_, boost::asio::buffer(bytes), ignored);
  }
  void WriteFrame(const transport::Frame& frame) {
    std::string bytes;
    internal::AppendFrame(frame, bytes);
    WriteBytes(bytes);
  }
  // The next frame, or nullopt on EOF/error/timeout.
  std::optional<transport::Frame> ReadFrame() {
    unsigned char header[4];
    boost::system::error_code ec;
    boost::asio::read(socket_, boost::asio::buffer(header), ec);
    if (ec) return std::nullopt;
    const uint32_t length = (uint32_t{header[0]} << 24) | (uint32_t{header[1]} << 16) |
                            (uint32_t{header[2]} << 8) | uint32_t{header[3]};
    std::string body(length, '\0');
    boost::asio::read(socket_, boost::asio::buffer(body), ec);
    transport::Frame frame;
    if (ec || !frame.ParseFromString(body)) return std::nullopt;
    return frame;
  }
  // True when the server closed the connection (EOF or reset) within the receive timeout, after
  // discarding whatever it still sent.
  bool ClosedByPeer() {
    char buffer[4096];
    for (;;) {
      boost::system::error_code ec;
      socket_.read_some(boost::asio::buffer(buffer), ec);
      if (ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset) return true;
      if (ec) return false;  // timeout
    }
  }

 private:
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
};

}  // namespace ringlimit::peer::testing

#endif  // RINGLIMIT_NODE_PEER_PEER_TEST_UTIL_H_
