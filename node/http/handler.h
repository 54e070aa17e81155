// RequestHandler: the seam between the HTTP transport (node/server/, which knows sockets) and the
// HTTP adapters (node/api/, which knows no sockets and is testable without a server), and the HTTP
// message types they share (node/gubernator's JSON gateway too).
//
// Thread safety: Handle may be called concurrently from any number of threads.
#ifndef RINGLIMIT_NODE_HTTP_HANDLER_H_
#define RINGLIMIT_NODE_HTTP_HANDLER_H_

#include <boost/beast/http.hpp>
#include <functional>
#include <string_view>

#include "node/http/response_fields.h"
#include "node/http/wire.h"

namespace ringlimit::node {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
// Responses keep their fields in ResponseFields (one buffer, no per-field allocation); the transport
// writes them out itself (node/server/session.cc), so Beast's serializer never sees them.
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body, ResponseFields>;

// Appends `response` as HTTP/1.1 bytes (WireResponse, wire.h): the status line, its fields, then the framing
// the transport owns -- Content-Length from the body and `Connection: close` when `close` -- and the body
// unless `head`. Its own Content-Length, Transfer-Encoding and Connection fields are not written: every
// response is a Content-Length body on an HTTP/1.1 connection (no chunking). What node/server/session.cc
// writes for every response.
void AppendHttpResponse(const HttpResponse& response, bool head, bool close, std::string& out);

// Completion for one request. Called exactly once, possibly on another thread (the cluster issue
// forwards checks to their owner and answers when the owner does). It must not block.
using Respond = std::function<void(HttpResponse&&)>;

// Completes a request answered in place later (AnswerLater): with the whole response's bytes (WireResponse,
// keep-alive: the transport adds `Connection: close` itself when the connection ends with it) and its status.
// Called exactly once, possibly on another thread. It must not block.
using WireRespond = std::function<void(std::string&& bytes, unsigned status)>;

// What a transport that can take an in-place answer later hands to AnswerInPlace.
class AnswerLater {
 public:
  virtual ~AnswerLater() = default;
  // Takes the request to answer later: its answer goes out, in its turn on the connection, when the returned
  // completion is called. At most once per AnswerInPlace call, which then returns kAnsweredLater.
  virtual WireRespond Take() = 0;
};

class RequestHandler {
 public:
  // What AnswerInPlace returns when it took the request to answer later (AnswerLater::Take).
  static constexpr unsigned kAnsweredLater = 1;

  virtual ~RequestHandler() = default;

  // Handles one complete request. The response's version and keep-alive are set by the transport.
  virtual void Handle(HttpRequest&& request, Respond respond) = 0;

  // Offered first every request without a body whose head the transport read in one pass, when the
  // response can go out at once (nothing ahead of it on the connection): answers it in place -- the whole
  // response appended to `out` (WireResponse, keep-alive) -- and returns its status; or, when `later` is not
  // null, takes it to answer later in the same form (later->Take(), nothing appended) and returns
  // kAnsweredLater; or returns 0 having appended and changed nothing, and the request goes to Handle. For the
  // requests worth answering without the general message types (GET /v1/check: decided here, or forwarded to
  // the node that decides it). Default: 0.
  virtual unsigned AnswerInPlace(const RequestHead& head, std::string& out, AnswerLater* later) {
    (void)head;
    (void)out;
    (void)later;
    return 0;
  }
  // Answered at once or not at all.
  unsigned AnswerInPlace(const RequestHead& head, std::string& out) {
    return AnswerInPlace(head, out, nullptr);
  }
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_HTTP_HANDLER_H_
