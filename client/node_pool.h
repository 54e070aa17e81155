// NodePool: asynchronous HTTP/1.1 exchanges with one ringlimit node over a pool of keep-alive
// connections (Boost.Beast).
//
// Each exchange takes an idle connection (or opens a new one), writes the request, reads the response
// and gives the connection back if both sides keep it alive. A reused connection that turns out to have
// been closed by the server (idle timeout) is retried once on a fresh connection, which is safe: the
// server never saw the request. At most `max_idle` idle connections are kept; there is no cap on
// connections in use (the caller bounds its concurrency).
//
// Every exchange completes exactly once, with a response (any status) or an Error of kind kConnect or
// kTimeout, within `timeout` (connect + write + read, per attempt).
//
// Thread safety: AsyncSend may be called from any thread concurrently. Handlers run on a thread of the
// io_context. Lifetime: create with Create() (a shared_ptr); pending exchanges keep the pool alive; the
// io_context must outlive the pool.
#ifndef RINGLIMIT_CLIENT_NODE_POOL_H_
#define RINGLIMIT_CLIENT_NODE_POOL_H_

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client/error.h"

namespace ringlimit::client {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body>;

// Splits "host:port" (IPv6 as "[::1]:7001"). Fails with kInvalidArgument.
[[nodiscard]] Result<std::pair<std::string, uint16_t>> SplitAddress(const std::string& address);

class NodePool : public std::enable_shared_from_this<NodePool> {
 public:
  using Handler = std::function<void(Result<HttpResponse>)>;

  // Resolves `address` ("host:port") now. Fails with kInvalidArgument or kConnect (unresolvable).
  [[nodiscard]] static Result<std::shared_ptr<NodePool>> Create(boost::asio::io_context& io,
                                                                std::string address, size_t max_idle);

  NodePool(const NodePool&) = delete;
  NodePool& operator=(const NodePool&) = delete;
  ~NodePool();

  // Sends `request` (Host, Content-Length and keep-alive are filled in) and calls `handler` once.
  void AsyncSend(HttpRequest request, std::chrono::milliseconds timeout, Handler handler);

  [[nodiscard]] const std::string& address() const { return address_; }

  // Closes the idle connections (e.g. after the node failed). Connections in use finish normally.
  void CloseIdle();

  // Number of idle connections (for tests).
  [[nodiscard]] size_t TEST_idle() const;

 private:
  struct Connection;
  class Exchange;

  NodePool(boost::asio::io_context& io, std::string address, std::vector<boost::asio::ip::tcp::endpoint> eps,
           size_t max_idle);
  std::unique_ptr<Connection> TakeIdle();
  void GiveBack(std::unique_ptr<Connection> c);

  // Constant after construction.
  boost::asio::io_context& io_;
  const std::string address_;
  const std::vector<boost::asio::ip::tcp::endpoint> endpoints_;
  const size_t max_idle_;

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Connection>> idle_;  // protected by mutex_
};

}  // namespace ringlimit::client

#endif  // RINGLIMIT_CLIENT_NODE_POOL_H_
