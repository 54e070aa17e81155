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

namespace ringlimit::node {

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
// Responses keep their fields in ResponseFields (one buffer, no per-field allocation); the transport
// writes them out itself (node/server/session.cc), so Beast's serializer never sees them.
using HttpResponse = boost::beast::http::response<boost::beast::http::string_body, ResponseFields>;

// Completion for one request. Called exactly once, possibly on another thread (the cluster issue
// forwards checks to their owner and answers when the owner does). It must not block.
using Respond = std::function<void(HttpResponse&&)>;

class RequestHandler {
 public:
  virtual ~RequestHandler() = default;

  // Handles one complete request. The response's version and keep-alive are set by the transport.
  virtual void Handle(HttpRequest&& request, Respond respond) = 0;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_HTTP_HANDLER_H_
