#include "tests/support/http_client.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

namespace ringlimit::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using boost::system::error_code;

HttpClient::HttpClient(uint16_t port, std::chrono::milliseconds timeout)
    : HttpClient("127.0.0.1", port, timeout) {}

HttpClient::HttpClient(std::string host, uint16_t port, std::chrono::milliseconds timeout)
    : host_(std::move(host)), port_(port), timeout_(timeout), stream_(io_) {}

HttpClient::~HttpClient() { Close(); }

void HttpClient::Run() {
  io_.restart();
  io_.run();
}

boost::system::result<void> HttpClient::Connect() {
  if (connected_) return {};
  Close();
  buffer_.clear();
  error_code result;
  stream_.expires_after(timeout_);
  stream_.async_connect(net::ip::tcp::endpoint(net::ip::make_address_v4(host_), port_),
                        [&](error_code ec) { result = ec; });
  Run();
  if (result) return result;
  error_code ignored;
  stream_.socket().set_option(net::ip::tcp::no_delay(true), ignored);
  connected_ = true;
  return {};
}

void HttpClient::Close() {
  if (stream_.socket().is_open()) {
    error_code ignored;
    stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }
  connected_ = false;
}

boost::system::result<void> HttpClient::SendRaw(std::string_view bytes) {
  if (auto connected = Connect(); !connected) return connected;
  error_code result;
  stream_.expires_after(timeout_);
  net::async_write(stream_, net::buffer(bytes.data(), bytes.size()),
                   [&](error_code ec, size_t) { result = ec; });
  Run();
  if (result) {
    Close();
    return result;
  }
  return {};
}

boost::system::result<ClientResponse> HttpClient::ReadResponse() {
  if (!connected_) return boost::system::error_code(net::error::not_connected);
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  error_code result;
  stream_.expires_after(timeout_);
  http::async_read(stream_, buffer_, parser, [&](error_code ec, size_t) { result = ec; });
  Run();
  if (result) {
    Close();
    return result;
  }
  ClientResponse response = parser.release();
  if (!response.keep_alive()) Close();
  return response;
}

boost::system::result<std::string> HttpClient::ReadUntilClosed() {
  if (!connected_) return boost::system::error_code(net::error::not_connected);
  std::string received(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  buffer_.clear();
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  char chunk[4096];
  while (true) {
    error_code result;
    size_t n = 0;
    stream_.expires_at(deadline);
    stream_.async_read_some(net::buffer(chunk), [&](error_code ec, size_t bytes) {
      result = ec;
      n = bytes;
    });
    Run();
    received.append(chunk, n);
    if (result == net::error::eof || result == net::error::connection_reset) {
      Close();
      return received;
    }
    if (result) {
      Close();
      return result;
    }
  }
}

boost::system::result<ClientResponse> HttpClient::Send(ClientRequest request) {
  request.version(11);
  request.set(http::field::host, host_ + ":" + std::to_string(port_));
  request.prepare_payload();
  // A keep-alive connection the server closed meanwhile fails on first use: reconnect once, before
  // anything of this request could have been processed.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = connected_;
    if (auto connected = Connect(); !connected) return connected.error();
    error_code result;
    stream_.expires_after(timeout_);
    http::async_write(stream_, request, [&](error_code ec, size_t) { result = ec; });
    Run();
    if (result) {
      Close();
      if (reused) continue;
      return result;
    }
    auto response = ReadResponse();
    if (!response && reused &&
        (response.error() == http::error::end_of_stream ||
         response.error() == net::error::connection_reset)) {
      continue;
    }
    return response;
  }
  return boost::system::error_code(net::error::connection_aborted);
}

namespace {

ClientRequest MakeRequest(http::verb verb, std::string_view target, const Headers& headers) {
  ClientRequest request{verb, target, 11};
  for (const auto& [name, value] : headers) request.set(name, value);
  return request;
}

}  // namespace

boost::system::result<ClientResponse> HttpClient::Get(std::string_view target, const Headers& headers) {
  return Send(MakeRequest(http::verb::get, target, headers));
}

boost::system::result<ClientResponse> HttpClient::Delete(std::string_view target, const Headers& headers) {
  return Send(MakeRequest(http::verb::delete_, target, headers));
}

boost::system::result<ClientResponse> HttpClient::Post(std::string_view target, std::string body,
                                                       const Headers& headers,
                                                       std::string_view content_type) {
  ClientRequest request = MakeRequest(http::verb::post, target, headers);
  if (!content_type.empty()) request.set(http::field::content_type, content_type);
  request.body() = std::move(body);
  return Send(std::move(request));
}

boost::system::result<ClientResponse> HttpClient::Put(std::string_view target, std::string body,
                                                      const Headers& headers, std::string_view content_type) {
  ClientRequest request = MakeRequest(http::verb::put, target, headers);
  if (!content_type.empty()) request.set(http::field::content_type, content_type);
  request.body() = std::move(body);
  return Send(std::move(request));
}

}  // namespace ringlimit::testing
