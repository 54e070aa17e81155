#include "node/server/http_server.h"

#include <spdlog/spdlog.h>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <vector>

#include "node/server/session.h"

namespace ringlimit::node {

namespace net = boost::asio;
using boost::system::error_code;
using net::ip::tcp;

struct HttpServer::Shared : ServerShared {};

// Accepts connections, each on a new strand (or the io_context's executor, single_thread), and starts
// a Session for each. Lives while an accept
// or a retry timer is pending.
class HttpServer::Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& io, std::shared_ptr<ServerShared> shared)
      : io_(io),
        shared_(std::move(shared)),
        acceptor_(net::make_strand(io)),
        retry_(acceptor_.get_executor()) {}

  // Errors: IOError with the system's message (address in use, no permission, ...).
  Status Open(const tcp::endpoint& endpoint) {
    error_code ec;
    if (acceptor_.open(endpoint.protocol(), ec); ec) return Status::IOError(ec.message());
    if (acceptor_.set_option(net::socket_base::reuse_address(true), ec); ec)
      return Status::IOError(ec.message());
    if (acceptor_.bind(endpoint, ec); ec) return Status::IOError(ec.message());
    if (acceptor_.listen(net::socket_base::max_listen_connections, ec); ec)
      return Status::IOError(ec.message());
    port_ = acceptor_.local_endpoint(ec).port();
    return ec ? Status::IOError(ec.message()) : Status::OK();
  }

  uint16_t port() const { return port_; }

  void Accept() {
    auto on_accept = [self = shared_from_this()](error_code ec, tcp::socket socket) {
      self->OnAccept(ec, std::move(socket));
    };
    if (shared_->options.single_thread) {
      acceptor_.async_accept(io_.get_executor(), std::move(on_accept));
    } else {
      acceptor_.async_accept(net::make_strand(io_), std::move(on_accept));
    }
  }

  void Stop() {
    net::dispatch(acceptor_.get_executor(), [self = shared_from_this()] {
      self->stopped_ = true;
      error_code ignored;
      self->acceptor_.close(ignored);
      self->retry_.cancel();
    });
  }

 private:
  void OnAccept(error_code ec, tcp::socket socket) {
    if (stopped_ || ec == net::error::operation_aborted) return;
    if (ec) {
      // Typically out of file descriptors: back off briefly rather than spin.
      spdlog::warn("http accept: {}", ec.message());
      retry_.expires_after(std::chrono::milliseconds(50));
      retry_.async_wait([self = shared_from_this()](error_code ec) {
        if (!ec && !self->stopped_) self->Accept();
      });
      return;
    }
    error_code peer_ec;
    const tcp::endpoint peer = socket.remote_endpoint(peer_ec);
    std::string client = peer_ec ? std::string() : peer.address().to_string();
    const size_t per_client_cap = shared_->options.max_connections_per_client != 0
                                      ? shared_->options.max_connections_per_client
                                      : std::max<size_t>(1, shared_->options.max_connections / 2);
    std::shared_ptr<Session> victim;  // the connection idle the longest, closed to make room
    bool over_client_cap = false;
    {
      std::lock_guard lock(shared_->mutex);
      if (!client.empty() && shared_->per_client[client] >= per_client_cap) {
        over_client_cap = true;
      } else if (shared_->connections.load(std::memory_order_relaxed) >= shared_->options.max_connections) {
        int64_t oldest = 0;
        for (const auto& [raw, weak] : shared_->sessions) {
          const int64_t since = raw->idle_since_ns();
          if (since == 0 || (oldest != 0 && since >= oldest)) continue;
          if (auto session = weak.lock()) {
            oldest = since;
            victim = std::move(session);
          }
        }
      }
      if (!over_client_cap && !client.empty()) ++shared_->per_client[client];
    }
    if (victim != nullptr) {
      victim->CloseIfIdle();
      shared_->reclaimed.fetch_add(1, std::memory_order_relaxed);
    }
    const size_t open = shared_->connections.fetch_add(1, std::memory_order_relaxed);
    if (over_client_cap || (open >= shared_->options.max_connections && victim == nullptr)) {
      shared_->connections.fetch_sub(1, std::memory_order_relaxed);
      shared_->rejected.fetch_add(1, std::memory_order_relaxed);
      if (!over_client_cap && !client.empty()) {
        std::lock_guard lock(shared_->mutex);
        if (auto it = shared_->per_client.find(client); it != shared_->per_client.end() && --it->second == 0)
          shared_->per_client.erase(it);
      }
      std::make_shared<Session>(std::move(socket), shared_, /*counted=*/false)->Reject();
    } else {
      auto session = std::make_shared<Session>(std::move(socket), shared_, /*counted=*/true);
      session->SetClient(std::move(client));
      session->Run();
    }
    Accept();
  }

  net::io_context& io_;
  const std::shared_ptr<ServerShared> shared_;
  // Touched only on the acceptor's strand (port_ is written once before accepting starts).
  tcp::acceptor acceptor_;
  net::steady_timer retry_;
  uint16_t port_ = 0;
  bool stopped_ = false;
};

HttpServer::HttpServer(net::io_context& io, ServerOptions options, RequestHandler& handler,
                       RequestObserver observer)
    : io_(io), shared_(std::make_shared<Shared>()) {
  shared_->options = std::move(options);
  shared_->handler = &handler;
  shared_->observer = std::move(observer);
}

HttpServer::~HttpServer() { StopAccepting(); }

Status HttpServer::Start() {
  error_code ec;
  const auto address = net::ip::make_address(shared_->options.address, ec);
  if (ec) return Status::InvalidArgument(ec.message());
  if (!shared_->options.tls_cert_file.empty() || !shared_->options.tls_key_file.empty()) {
    auto tls = std::make_shared<net::ssl::context>(net::ssl::context::tls_server);
    tls->set_options(net::ssl::context::default_workarounds | net::ssl::context::no_sslv2 |
                     net::ssl::context::no_sslv3 | net::ssl::context::no_tlsv1 |
                     net::ssl::context::no_tlsv1_1 | net::ssl::context::single_dh_use);
    if (tls->use_certificate_chain_file(shared_->options.tls_cert_file, ec); ec)
      return Status::InvalidArgument(ec.message());
    if (tls->use_private_key_file(shared_->options.tls_key_file, net::ssl::context::pem, ec); ec)
      return Status::InvalidArgument(ec.message());
    shared_->tls = std::move(tls);
  }
  auto listener = std::make_shared<Listener>(io_, shared_);
  if (Status opened = listener->Open(tcp::endpoint(address, shared_->options.port)); !opened.ok())
    return opened;
  listener_ = std::move(listener);
  listener_->Accept();
  return Status::OK();
}

uint16_t HttpServer::port() const { return listener_ ? listener_->port() : 0; }

void HttpServer::StopAccepting() {
  if (listener_) listener_->Stop();
}

void HttpServer::Drain() {
  shared_->draining = true;
  std::vector<std::shared_ptr<Session>> sessions;
  {
    std::lock_guard lock(shared_->mutex);
    sessions.reserve(shared_->sessions.size());
    for (auto& [raw, weak] : shared_->sessions) {
      if (auto session = weak.lock()) sessions.push_back(std::move(session));
    }
  }
  for (auto& session : sessions) session->Drain();
}

size_t HttpServer::connections() const { return shared_->connections.load(std::memory_order_relaxed); }

uint64_t HttpServer::reclaimed_connections() const {
  return shared_->reclaimed.load(std::memory_order_relaxed);
}

uint64_t HttpServer::rejected_connections() const {
  return shared_->rejected.load(std::memory_order_relaxed);
}

}  // namespace ringlimit::node
