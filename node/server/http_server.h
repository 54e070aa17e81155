// HttpServer: the HTTP/1.1 transport of ringlimitd (Boost.Beast). It accepts connections, parses
// requests within bounds (timeouts, header and body limits, a connection cap), hands each complete
// request to a RequestHandler and writes the responses back in request order (keep-alive and
// pipelining). It knows sockets and nothing about what a request means.
//
// Thread safety: Start, StopAccepting, Drain and the accessors may be called from any thread. The
// server runs on an io_context the caller owns and runs (any number of threads); every connection
// has its own strand, so its state needs no mutex.
//
// Lifetime: the io_context, the RequestHandler and the RequestObserver must outlive every
// connection, i.e. until the io_context has stopped running. Destroying the HttpServer closes the
// acceptor; connections still open keep the shared bookkeeping alive and finish on their own.
#ifndef RINGLIMIT_NODE_SERVER_HTTP_SERVER_H_
#define RINGLIMIT_NODE_SERVER_HTTP_SERVER_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "node/http/handler.h"

namespace ringlimit::node {

// Told about every response the transport writes. For a handler's response `from_transport` is
// false and `latency` runs from the complete request to the response being ready. For the
// transport's own errors (400 malformed HTTP, 408, 413, 431, 503, 500 if a handler threw)
// `from_transport` is true and `latency` is 0. Called on a connection's strand: it must not block.
using RequestObserver =
    std::function<void(unsigned status, std::chrono::nanoseconds latency, bool from_transport)>;

struct ServerOptions {
  // --- Affects behaviour ---

  // Address to listen on. Default: 127.0.0.1.
  std::string address = "127.0.0.1";
  // TCP port; 0 picks an ephemeral port (see HttpServer::port()). Default: 7001.
  uint16_t port = 7001;

  // At most this many connections are open. A new one beyond it first takes the place of the connection
  // idle the longest (closed, as nginx reclaims keep-alive connections); when none is idle it is answered
  // 503 (JSON) and closed. Default: 10000. REQUIRES: >= 1.
  size_t max_connections = 10'000;
  // At most this many open connections per client address; beyond it 503. 0: half of max_connections
  // (one client never holds every connection). Default: 0.
  size_t max_connections_per_client = 0;

  // TLS: a PEM certificate chain and its private key (both or neither). Set: every connection is TLS
  // (1.2 or 1.3; a client that does not complete the handshake within read_timeout is closed). Start fails
  // when either file cannot be read or they do not match. Default: empty (plain HTTP).
  std::string tls_cert_file;
  std::string tls_key_file;

  // Once a request's first byte arrived, the whole request must arrive within this time, or the
  // client gets 408 and the connection is closed (slow clients). Default: 10000 ms.
  std::chrono::milliseconds read_timeout{10'000};

  // A keep-alive connection with no request in progress is closed after this time. Default: 60000 ms.
  std::chrono::milliseconds idle_timeout{60'000};

  // Request bodies larger than this are answered 413. Default: 1 MiB.
  uint64_t max_body_bytes = 1 << 20;

  // Request lines plus headers larger than this are answered 431. Default: 16 KiB.
  uint32_t max_header_bytes = 16 << 10;

  // A response that cannot be fully written within this time closes the connection. Default: 10000 ms.
  std::chrono::milliseconds write_timeout{10'000};

  // --- Affects performance ---

  // Pipelined requests in flight per connection (read but not yet answered). Reading pauses at this
  // bound until the oldest response is written. Default: 32. REQUIRES: >= 1.
  size_t max_pipelined = 32;

  // The io_context is run by exactly one thread: connections then use its executor as it is, without a
  // strand each (one thread already runs their handlers one at a time; a strand would add two mutex
  // locks and an executor hop per handler). Other threads may still post to the connections.
  // Default: false (a strand per connection).
  bool single_thread = false;
};

class HttpServer {
 public:
  // Does not listen yet; see Start. `observer` may be empty.
  HttpServer(boost::asio::io_context& io, ServerOptions options, RequestHandler& handler,
             RequestObserver observer);
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts accepting. Errors, with the system's message: InvalidArgument (an address
  // that does not parse, a TLS certificate or key that cannot be used), IOError (cannot bind or listen:
  // port in use, no permission).
  [[nodiscard]] Status Start();

  // The bound port (the ephemeral one when options.port was 0). 0 before Start.
  [[nodiscard]] uint16_t port() const;

  // Closes the listening socket: no new connection is accepted. Idempotent.
  void StopAccepting();

  // Graceful shutdown of open connections: each answers the requests it already read, then closes;
  // a connection waiting for a new request closes at once. Call after StopAccepting.
  void Drain();

  // Open connections now.
  [[nodiscard]] size_t connections() const;
  // Idle connections closed to make room for a new one at max_connections, since start.
  [[nodiscard]] uint64_t reclaimed_connections() const;
  // Connections refused with 503 because max_connections were open, since start.
  [[nodiscard]] uint64_t rejected_connections() const;

 private:
  struct Shared;
  class Listener;

  boost::asio::io_context& io_;
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<Listener> listener_;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVER_HTTP_SERVER_H_
