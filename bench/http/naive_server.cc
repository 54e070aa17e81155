// naive_http_server: the "naive Beast" baseline of bench/http/run.sh (issue 14). The least an HTTP/1.1
// server on Boost.Beast can do per request: one io_context on one thread, keep-alive connections, each
// read with async_read and answered "200 ok" with async_write -- no rate limiter, no routing, no timeouts.
// Its server CPU per request is the floor the HTTP layer alone costs; ringlimitd's is that plus a decision.
//
//   naive_http_server [--port N]    # listens on 127.0.0.1:N (default 0: a free port)
//
// Once listening it prints the port on stdout, one line, so a script can start it on port 0 and read the
// port back. SIGINT or SIGTERM stops it (exit 0).
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

namespace ringlimit::bench {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// One client connection: read a request, answer it, and read the next, until the client closes the
// connection, asks to close it, or an error occurs. Owned by the handler in flight (shared_from_this).
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  explicit Connection(tcp::socket socket) : socket_(std::move(socket)) {}

  void Start() { Read(); }

 private:
  void Read() {
    request_ = {};
    http::async_read(socket_, buffer_, request_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec) return Close();  // http::error::end_of_stream when the client closed between requests
    response_ = {};
    response_.result(http::status::ok);
    response_.version(request_.version());
    response_.keep_alive(request_.keep_alive());
    response_.set(http::field::content_type, "text/plain");
    response_.body() = "ok";
    response_.prepare_payload();
    http::async_write(socket_, response_,
                      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWrite(ec); });
  }

  void OnWrite(beast::error_code ec) {
    if (ec || !response_.keep_alive()) return Close();
    Read();
  }

  void Close() {
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
  }

  tcp::socket socket_;
  beast::flat_buffer buffer_;  // bytes read past the current request stay here for the next one
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;  // must outlive async_write
};

// Accepts connections on 127.0.0.1:port forever and starts a Connection for each.
class Listener {
 public:
  Listener(asio::io_context& io, unsigned short port)
      : acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), port)) {}

  unsigned short port() const { return acceptor_.local_endpoint().port(); }

  void Accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted) return;  // acceptor closed: stopping
      if (!ec) {
        socket.set_option(tcp::no_delay(true), ec);
        std::make_shared<Connection>(std::move(socket))->Start();
      }
      Accept();
    });
  }

 private:
  tcp::acceptor acceptor_;
};

int Usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--port N]   (N in 0..65535; 0 = a free port)\n", argv0);
  return 2;
}

int Main(int argc, char** argv) {
  unsigned long port = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--port") != 0 || i + 1 >= argc) return Usage(argv[0]);
    char* end = nullptr;
    port = std::strtoul(argv[++i], &end, 10);
    if (*argv[i] == '\0' || *end != '\0' || port > 65535) return Usage(argv[0]);
  }

  asio::io_context io(1);  // one thread: no locking inside Asio
  Listener listener(io, static_cast<unsigned short>(port));
  listener.Accept();
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&io](beast::error_code, int) { io.stop(); });

  std::printf("%u\n", static_cast<unsigned>(listener.port()));
  std::fflush(stdout);
  io.run();
  return 0;
}

}  // namespace
}  // namespace ringlimit::bench

int main(int argc, char** argv) {
  try {
    return ringlimit::bench::Main(argc, argv);
  } catch (const std::exception& e) {  // e.g. the port is taken
    std::fprintf(stderr, "naive_http_server: %s\n", e.what());
    return 1;
  }
}
