// The HTTP face of the service's errors (node/service/api_error.h): the one place that maps an error kind
// to an HTTP status, and the one error body of every HTTP answer.
//
// Thread safety: pure functions.
#ifndef RINGLIMIT_NODE_HTTP_HTTP_ERROR_H_
#define RINGLIMIT_NODE_HTTP_HTTP_ERROR_H_

#include <boost/beast/http/status.hpp>
#include <string_view>

#include "node/http/handler.h"
#include "node/http/http_error.h"
#include "node/service/api_error.h"

namespace ringlimit::node {

// The HTTP status of an error kind.
[[nodiscard]] boost::beast::http::status StatusOf(ErrorKind kind);

// The one error body of the whole HTTP API: {"error":{"code":"<code>","message":"<message>"}} with
// Content-Type application/json. Used by handlers and by the transport (413, 431, 408, 503).
[[nodiscard]] HttpResponse ErrorResponse(boost::beast::http::status status, std::string_view code,
                                         std::string_view message);

// The JSON error response for `error` (ErrorResponse with StatusOf/CodeOf).
[[nodiscard]] HttpResponse ToResponse(const ApiError& error);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_HTTP_HTTP_ERROR_H_
