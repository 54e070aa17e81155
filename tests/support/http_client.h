// HttpClient: a small blocking HTTP/1.1 client for tests (Boost.Beast), bounded in time.
//
// One keep-alive connection to 127.0.0.1:<port> (or <host>:<port>, an IPv4 address, e.g. a node in a
// network namespace: tests/support/netns.h), opened on first use and reopened after the server
// closed it. Every call returns within the client's timeout: network failures, timeouts (error
// boost::beast::error::timeout) and closed connections are returned as error codes, never thrown.
// Besides well-formed requests it can send raw bytes (malformed or partial requests, pipelines) and
// read responses or the connection's end separately, which is what bad-input tests need.
//
//   ringlimit::testing::HttpClient client(port);
//   auto response = client.Get("/v1/check?key=a&limit=10&window_ms=1000");
//   ASSERT_TRUE(response) << response.error().message();
//   EXPECT_EQ(response->result_int(), 200);
//
// Thread safety: none; use one client per thread (each owns its io_context and connection).
#ifndef RINGLIMIT_TESTS_SUPPORT_HTTP_CLIENT_H_
#define RINGLIMIT_TESTS_SUPPORT_HTTP_CLIENT_H_

#include <boost/asio/io_context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/system/result.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ringlimit::testing {

using ClientRequest = boost::beast::http::request<boost::beast::http::string_body>;
using ClientResponse = boost::beast::http::response<boost::beast::http::string_body>;
using Headers = std::vector<std::pair<std::string, std::string>>;

class HttpClient {
 public:
  // Does not connect yet. `timeout` bounds every call (connect, write and read each).
  explicit HttpClient(uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // The same, to `host` (a dotted IPv4 address) instead of 127.0.0.1.
  HttpClient(std::string host, uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~HttpClient();

  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  HttpClient(HttpClient&&) = delete;

  // Sends `request` (Host and Content-Length are filled in) and reads its response.
  [[nodiscard]] boost::system::result<ClientResponse> Send(ClientRequest request);

  // Shorthands for Send. POST and PUT send `body` with Content-Type `content_type` (none if empty).
  [[nodiscard]] boost::system::result<ClientResponse> Get(std::string_view target,
                                                          const Headers& headers = {});
  [[nodiscard]] boost::system::result<ClientResponse> Delete(std::string_view target,
                                                             const Headers& headers = {});
  [[nodiscard]] boost::system::result<ClientResponse> Post(
      std::string_view target, std::string body, const Headers& headers = {},
      std::string_view content_type = "application/json");
  [[nodiscard]] boost::system::result<ClientResponse> Put(std::string_view target, std::string body,
                                                          const Headers& headers = {},
                                                          std::string_view content_type = "application/json");

  // Connects if needed and writes `bytes` as they are.
  [[nodiscard]] boost::system::result<void> SendRaw(std::string_view bytes);
  // Reads one response (after SendRaw). Bodies up to 64 MiB are accepted.
  [[nodiscard]] boost::system::result<ClientResponse> ReadResponse();
  // Reads until the server closes the connection; returns the bytes received before that.
  // Fails with a timeout if the connection is still open after the client's timeout.
  [[nodiscard]] boost::system::result<std::string> ReadUntilClosed();

  // Opens the connection now (Send and SendRaw do it on demand).
  [[nodiscard]] boost::system::result<void> Connect();
  void Close();
  [[nodiscard]] bool connected() const { return connected_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 private:
  // Runs the io_context until the operation started before it completes.
  void Run();

  const std::string host_;
  const uint16_t port_;
  std::chrono::milliseconds timeout_;
  boost::asio::io_context io_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  bool connected_ = false;
};

}  // namespace ringlimit::testing

#endif  // RINGLIMIT_TESTS_SUPPORT_HTTP_CLIENT_H_
