// HttpRoute: an endpoint another adapter serves over the node's HTTP port (Gubernator's JSON gateway,
// node/gubernator), handed to the HTTP API's router (node/api/api_handler.h, ApiHandler::AddRoute) by the
// code that wires the node (node/server), so that no adapter includes another.
//
// Thread safety: the functions must be safe for concurrent use.
#ifndef RINGLIMIT_NODE_HTTP_ROUTE_H_
#define RINGLIMIT_NODE_HTTP_ROUTE_H_

#include <boost/beast/http/verb.hpp>
#include <functional>
#include <string>

#include "node/http/handler.h"
#include "node/metrics/metrics.h"
#include "node/service/api_error.h"
#include "node/service/cluster_hooks.h"

namespace ringlimit::node {

struct HttpRoute {
  std::string path;                      // the request target's path, matched exactly
  boost::beast::http::verb method{};     // the one method served (GET also answers HEAD)
  Endpoint endpoint = Endpoint::kOther;  // its label in ringlimit_http_requests_total
  // Answers at once, deciding every check here (no router, or `routed` is empty).
  std::function<HttpResponse(const HttpRequest& request)> now;
  // Answers through the router: checks of keys other nodes own are forwarded, `respond` is called once
  // when all are answered (possibly on another thread). Empty: the route never forwards.
  std::function<void(CheckRouter& router, const HttpRequest& request, Respond respond)> routed;
  // The route's error body for a refusal before anything is decided, or an internal error. Empty: the
  // HTTP API's own (node/http/http_error.h ToResponse).
  std::function<HttpResponse(const ApiError& error)> error;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_HTTP_ROUTE_H_
