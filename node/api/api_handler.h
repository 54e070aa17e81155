// ApiHandler: the HTTP API of a ringlimit node (docs/api.md) as a RequestHandler -- routing, admin
// authentication and the endpoint families, with no sockets -- over the node's CheckService
// (node/service/check_service.h). Other adapters may serve routes on the same port (AddRoute).
//
// Thread safety: Handle and HandleNow may be called concurrently from any number of threads.
// Lifetime: the service must outlive the ApiHandler. Handle calls `respond` synchronously, before
// returning, unless the service has a CheckRouter and a check names a key another node owns: then
// `respond` runs when the owner has answered, on the thread that received the answer.
#ifndef RINGLIMIT_NODE_API_API_HANDLER_H_
#define RINGLIMIT_NODE_API_API_HANDLER_H_

#include <vector>

#include "node/http/handler.h"
#include "node/http/route.h"
#include "node/service/check_service.h"

namespace ringlimit::node {

class ApiHandler final : public RequestHandler {
 public:
  explicit ApiHandler(CheckService& service);
  ApiHandler(const ApiHandler&) = delete;
  ApiHandler& operator=(const ApiHandler&) = delete;

  void Handle(HttpRequest&& request, Respond respond) override;

  // GET /v1/check or /v1/auth decided here at once (its key decided by this node): answered in place
  // (AnswerCheckGetInPlace); with `later`, one forwarded to the node that decides it (or waiting for
  // replicas) too, answered when it is decided. Counted as Handle counts it. Everything else, and every
  // error, is Handle's: 0.
  using RequestHandler::AnswerInPlace;
  unsigned AnswerInPlace(const RequestHead& head, std::string& out, AnswerLater* later) override;

  // The same, returning the response (tests, benchmarks). Decides every check locally (no forwarding).
  [[nodiscard]] HttpResponse HandleNow(const HttpRequest& request);

  // Serves `route` beside the API's own endpoints (which win on the same path). REQUIRES: called before
  // the first Handle.
  void AddRoute(HttpRoute route);

 private:
  CheckService& service_;
  std::vector<HttpRoute> routes_;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_API_HANDLER_H_
