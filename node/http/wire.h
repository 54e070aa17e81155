// The HTTP/1.1 wire form the transport and the hot handlers share: a request head as the transport read it
// (RequestHead, handed to RequestHandler::AnswerInPlace before any HttpRequest is built) and a response
// written straight into a connection's output buffer (WireResponse). node/server/session.cc writes every
// HttpResponse through WireResponse too, so a response answered in place and one answered through Handle are
// the same bytes.
//
// Thread safety: plain values.
#ifndef RINGLIMIT_NODE_HTTP_WIRE_H_
#define RINGLIMIT_NODE_HTTP_WIRE_H_

#include <ostream>  // (first: Boost 1.81's core string_view, which verb.hpp includes, needs it declared)
// The rest.
#include <boost/beast/http/verb.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "node/service/json_writer.h"

namespace ringlimit::node {

// A request without a body, its head read whole by the transport (node/server/request_head.h): the views
// point into the connection's input buffer and are valid during the call they are handed to.
struct RequestHead {
  boost::beast::http::verb method = boost::beast::http::verb::unknown;
  std::string_view target;
  // The header fields as they arrived, `name: value CRLF` each (already checked by the transport's parser:
  // token names, ASCII values, no obs-fold).
  std::string_view fields;

  // The value of the first field named `name` (ASCII case-insensitive), without the whitespace around it;
  // nullopt when there is none.
  [[nodiscard]] std::optional<std::string_view> Field(std::string_view name) const;

  // Calls fn(name, value) for each field in order, the value without the whitespace around it.
  template <class Fn>
  void ForEachField(Fn&& fn) const {
    std::string_view rest = fields;
    while (!rest.empty()) {
      const size_t eol = rest.find("\r\n");
      const std::string_view line = rest.substr(0, eol);
      rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 2);
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
      fn(line.substr(0, colon), value);
    }
  }
};

// One response appended to `out`: the status line at construction, then Field()s in order, then Finish()
// with the framing this server owns -- Content-Length from the body (none for 1xx, 204 and 304, which have
// none), `Connection: close` when asked -- the empty line and the body. `out` holds the response once
// Finish has returned (an Appender writes it: node/service/json_writer.h).
class WireResponse {
 public:
  // `reason` empty: the status's standard phrase. `expect`: the room made for the response up front (it grows
  // past it when it must).
  WireResponse(std::string& out, unsigned status, std::string_view reason = {}, size_t expect = 512);

  void Field(std::string_view name, std::string_view value) {
    out_.Put(name);
    out_.Put(": ");
    out_.Put(value);
    out_.Put("\r\n");
  }
  void Field(std::string_view name, int64_t value) {
    out_.Put(name);
    out_.Put(": ");
    out_.Int(value);
    out_.Put("\r\n");
  }
  // Fields already in wire form ("Name: value\r\n" each).
  void Fields(std::string_view block) { out_.Put(block); }

  // The framing, the empty line and `body` (left out when `head`: a HEAD answer says the length of the body
  // it leaves out). Last.
  void Finish(std::string_view body, bool head = false, bool close = false);

 private:
  Appender out_;
  unsigned status_;
};

// `response`, a whole keep-alive response WireResponse wrote (not for a HEAD request), appended to `out`;
// with `close`, with `Connection: close` where Finish(close = true) puts it, so the bytes are the ones a
// closing WireResponse would have written.
void AppendWireResponse(std::string_view response, bool close, std::string& out);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_HTTP_WIRE_H_
