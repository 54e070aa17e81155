#include "client/node_pool.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace ringlimit::client {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

Result<std::pair<std::string, uint16_t>> SplitAddress(const std::string& address) {
  auto bad = [&address](const char* why) {
    return Error{.kind = Error::Kind::kInvalidArgument,
                 .code = "bad_address",
                 .message = "\"" + address + "\": " + why + " (expected HOST:PORT)"};
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("no host or port");
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) {
    return bad("bad port");
  }
  const unsigned long p = std::stoul(port);
  if (p == 0 || p > 65535) return bad("port out of range");
  return std::pair{host, static_cast<uint16_t>(p)};
}

// Each connection runs on its own strand: with several I/O threads, the stream's timeout handler and an
// operation's completion must not run at the same time (beast::tcp_stream is not thread-safe).
struct NodePool::Connection {
  explicit Connection(asio::io_context& io) : stream(asio::make_strand(io)) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
};

// One request/response on one connection; owns itself through shared_from_this while in flight.
class NodePool::Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<NodePool> pool, HttpRequest request, std::chrono::milliseconds timeout,
           Handler handler)
      : pool_(std::move(pool)),
        request_(std::move(request)),
        timeout_(timeout),
        handler_(std::move(handler)) {
    request_.set(http::field::host, pool_->address_);
    request_.keep_alive(true);
    request_.prepare_payload();
  }

  void Start() {
    conn_ = pool_->TakeIdle();
    reused_ = conn_ != nullptr;
    if (reused_) return Write();
    Connect();
  }

 private:
  void Connect() {
    conn_ = std::make_unique<Connection>(pool_->io_);
    conn_->stream.expires_after(timeout_);
    conn_->stream.async_connect(pool_->endpoints_,
                                [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
                                  if (ec) return self->Fail(ec, "connect");
                                  self->Write();
                                });
  }

  void Write() {
    conn_->stream.expires_after(timeout_);
    http::async_write(conn_->stream, request_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->Fail(ec, "write");
      self->Read();
    });
  }

  void Read() {
    response_ = {};
    http::async_read(conn_->stream, conn_->buffer, response_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->Fail(ec, "read");
                       self->Done();
                     });
  }

  void Done() {
    const bool keep = response_.keep_alive();
    conn_->stream.expires_never();
    if (keep) pool_->GiveBack(std::move(conn_));
    conn_.reset();
    Handler h = std::move(handler_);
    h(std::move(response_));
  }

  void Fail(beast::error_code ec, const char* what) {
    conn_.reset();
    // A kept-alive connection the server closed meanwhile fails at once on write or first read: the
    // server did not see the request, so one fresh attempt is safe.
    if (reused_ && ec != beast::error::timeout) {
      reused_ = false;
      return Connect();
    }
    Error e{.kind = ec == beast::error::timeout ? Error::Kind::kTimeout : Error::Kind::kConnect,
            .code = ec == beast::error::timeout ? "timeout" : "connection_failed",
            .message = std::string(what) + ": " + ec.message(),
            .node = pool_->address_};
    Handler h = std::move(handler_);
    h(std::move(e));
  }

  std::shared_ptr<NodePool> pool_;
  HttpRequest request_;
  HttpResponse response_;
  std::chrono::milliseconds timeout_;
  Handler handler_;
  std::unique_ptr<Connection> conn_;
  bool reused_ = false;
};

Result<std::shared_ptr<NodePool>> NodePool::Create(asio::io_context& io, std::string address,
                                                   size_t max_idle) {
  auto split = SplitAddress(address);
  if (!split) return split.error();
  boost::system::error_code ec;
  tcp::resolver resolver(io);
  auto results = resolver.resolve(split->first, std::to_string(split->second), ec);
  if (ec || results.empty()) {
    return Error{.kind = Error::Kind::kConnect,
                 .code = "resolve_failed",
                 .message = "cannot resolve " + split->first + ": " + ec.message(),
                 .node = address};
  }
  std::vector<tcp::endpoint> eps;
  for (const auto& r : results) eps.push_back(r.endpoint());
  return std::shared_ptr<NodePool>(new NodePool(io, std::move(address), std::move(eps), max_idle));
}

NodePool::NodePool(asio::io_context& io, std::string address, std::vector<tcp::endpoint> eps, size_t max_idle)
    : io_(io), address_(std::move(address)), endpoints_(std::move(eps)), max_idle_(max_idle) {}

NodePool::~NodePool() = default;

void NodePool::AsyncSend(HttpRequest request, std::chrono::milliseconds timeout, Handler handler) {
  std::make_shared<Exchange>(shared_from_this(), std::move(request), timeout, std::move(handler))->Start();
}

std::unique_ptr<NodePool::Connection> NodePool::TakeIdle() {
  std::lock_guard lock(mutex_);
  if (idle_.empty()) return nullptr;
  auto c = std::move(idle_.back());
  idle_.pop_back();
  return c;
}

void NodePool::GiveBack(std::unique_ptr<Connection> c) {
  std::lock_guard lock(mutex_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(c));
}

void NodePool::CloseIdle() {
  std::vector<std::unique_ptr<Connection>> closing;
  {
    std::lock_guard lock(mutex_);
    closing.swap(idle_);
  }
}

size_t NodePool::TEST_idle() const {
  std::lock_guard lock(mutex_);
  return idle_.size();
}

}  // namespace ringlimit::client
