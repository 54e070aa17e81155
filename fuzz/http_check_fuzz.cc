// Fuzz target: the HTTP request -> check path. The input is what a client writes on a connection: one
// or more pipelined HTTP/1.1 requests, read by Boost.Beast's request parser with the transport's limits
// (node/server/http_server.h: 16 KiB of headers, 1 MiB of body) and handed, as node/server/session.cc
// does, to a real ApiHandler (api_harness.h): routing, the query-string and JSON decoders, policies, the
// limiter and the store, all of one node.
//
// Invariants: no crash or sanitizer report; every request is answered exactly once, never 5xx; every
// 4xx and every JSON body is well-formed JSON (ApiHarness::CheckResponse); a request without a body is
// offered to ApiHandler::AnswerInPlace first, and what it answers is one whole HTTP response.
#include "node/server/beast_http.h"  // (first: see there)
// The rest.
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "fuzz/api_harness.h"

namespace {

namespace http = boost::beast::http;

// At most this many requests of one input reach the handler (inputs stay fast; a few already let one
// request change what the next one sees).
constexpr int kMaxRequests = 8;

// The transport answers these itself, before the handler sees them (session.cc: a transfer or content
// coding it cannot undo).
bool TransportRefuses(const ringlimit::node::HttpRequest& request) {
  if (auto te = request.find(http::field::transfer_encoding);
      te != request.end() && !boost::beast::iequals(te->value(), "chunked")) {
    return true;
  }
  auto ce = request.find(http::field::content_encoding);
  return ce != request.end() && !ce->value().empty() && !boost::beast::iequals(ce->value(), "identity");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ringlimit::fuzz::ApiHarness harness;
  boost::asio::const_buffer rest(data, size);
  for (int i = 0; i < kMaxRequests; ++i) {
    std::optional<http::request_parser<http::string_body>> parser;
    parser.emplace();
    parser->header_limit(16 << 10);
    parser->body_limit(1 << 20);
    parser->eager(true);
    boost::beast::error_code ec;
    while (rest.size() > 0 && !parser->is_done()) {
      const size_t used = parser->put(rest, ec);
      rest += used;
      if (ec == http::error::need_more) {
        ec = {};
        if (used == 0) break;  // the rest is an incomplete message
        continue;
      }
      if (ec) return 0;  // malformed: the transport answers 400 and closes
    }
    if (!parser->is_done()) {
      if (!parser->got_some()) return 0;
      parser->put_eof(ec);  // the connection ends: a message without a length may end here
      if (ec || !parser->is_done()) return 0;
    }
    ringlimit::node::HttpRequest request = parser->release();
    if (TransportRefuses(request)) continue;
    // A request without a body is offered to the in-place answer first (session.cc, AnswerInPlace).
    if (request.body().empty() && harness.AnswerInPlace(request)) continue;
    (void)harness.Send(std::move(request));
  }
  return 0;
}
