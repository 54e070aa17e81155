#include "node/api/api_handler.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>

#include "node/api/admin_handlers.h"
#include "node/api/check_handlers.h"
#include "node/api/cluster_handlers.h"
#include "node/api/console.h"
#include "node/api/keys_handlers.h"
#include "node/http/http_error.h"
#include "node/metrics/metrics.h"
#include "node/service/api_error.h"
#include "node/service/check_engine.h"
#include "node/service/check_service.h"
#include "storage/state_codec.h"

namespace ringlimit::node {

namespace http = boost::beast::http;

namespace {

constexpr std::string_view kKeysPrefix = "/v1/keys/";

HttpResponse MethodNotAllowed(std::string_view allow) {
  HttpResponse response = ToResponse({ErrorKind::kMethodNotAllowed, "use " + std::string(allow)});
  response.set(http::field::allow, allow);
  return response;
}

// POST/PUT bodies must be declared JSON (a missing Content-Type is accepted as JSON). Not asked of
// POST /v1/GetRateLimits: Gubernator's gateway reads its body as JSON whatever the header says, so a
// client sending curl's default `application/x-www-form-urlencoded` works unchanged against ringlimit.
bool IsJsonContentType(const HttpRequest& request) {
  auto it = request.find(http::field::content_type);
  if (it == request.end()) return true;
  std::string_view type = it->value();
  type = type.substr(0, type.find(';'));
  while (!type.empty() && type.back() == ' ') type.remove_suffix(1);
  auto iequals = [](std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(a[i])) != b[i]) return false;
    }
    return true;
  };
  return iequals(type, "application/json") ||
         (type.size() > 5 && iequals(type.substr(type.size() - 5), "+json"));
}

HttpResponse UnsupportedMediaType() {
  return ToResponse(
      {ErrorKind::kUnsupportedMediaType, "the request body must be JSON (Content-Type: application/json)"});
}

// Constant-time comparison, so the token cannot be guessed byte by byte from response times.
bool SameToken(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::optional<ApiError> Authorize(const CheckService& context, const HttpRequest& request) {
  if (context.options.admin_token.empty()) return std::nullopt;
  auto it = request.find(http::field::authorization);
  constexpr std::string_view kBearer = "Bearer ";
  if (it != request.end()) {
    std::string_view value = it->value();
    if (value.size() > kBearer.size() && value.substr(0, kBearer.size()) == kBearer &&
        SameToken(value.substr(kBearer.size()), context.options.admin_token)) {
      return std::nullopt;
    }
  }
  return ApiError{ErrorKind::kUnauthorized, "this endpoint requires Authorization: Bearer <admin token>"};
}

// A read-only answer the console of another member may fetch (GET /ui on node A shows node B's stats).
HttpResponse ReadableAnywhere(HttpResponse response) {
  response.set(http::field::access_control_allow_origin, "*");
  return response;
}

// The route of `routes` serving `path`, or null.
const HttpRoute* FindRoute(const std::vector<HttpRoute>& routes, std::string_view path) {
  for (const HttpRoute& route : routes) {
    if (route.path == path) return &route;
  }
  return nullptr;
}

HttpResponse Route(CheckService& context, const std::vector<HttpRoute>& routes, const HttpRequest& request,
                   Endpoint* endpoint) {
  const std::string_view target = request.target();
  const size_t question = target.find('?');
  const std::string_view path = target.substr(0, question);
  const std::string_view query =
      question == std::string_view::npos ? std::string_view() : target.substr(question + 1);
  // HEAD is answered as GET (the transport leaves the body out) wherever GET only reads -- not on
  // /v1/check, where a GET charges.
  const http::verb method =
      request.method() == http::verb::head && path != "/v1/check" ? http::verb::get : request.method();
  *endpoint = Endpoint::kOther;

  if (path == "/v1/check") {
    if (method == http::verb::get) {
      *endpoint = Endpoint::kCheckGet;
      return HandleCheckGet(context, request, query);
    }
    if (method == http::verb::post) {
      *endpoint = Endpoint::kCheckPost;
      if (!IsJsonContentType(request)) return UnsupportedMediaType();
      return HandleCheckPost(context, request);
    }
    return MethodNotAllowed("GET, POST");
  }
  if (path == "/v1/auth") {
    if (method != http::verb::get) return MethodNotAllowed("GET, HEAD");
    *endpoint = Endpoint::kAuth;
    if (!AuthHasKey(context, request, query)) return AuthWithoutKey(context.options);
    return AuthAnswer(context.options, HandleCheckGet(context, request, query));
  }
  if (path.starts_with(kKeysPrefix)) {
    const std::string_view key = path.substr(kKeysPrefix.size());
    if (method == http::verb::get) {
      *endpoint = Endpoint::kKeysGet;
      return ReadableAnywhere(HandleKeysGet(context, key));
    }
    if (method == http::verb::delete_) {
      *endpoint = Endpoint::kKeysDelete;
      if (auto error = Authorize(context, request)) return ToResponse(*error);
      return HandleKeysDelete(context, key, query);
    }
    return MethodNotAllowed("GET, HEAD, DELETE");
  }
  if (path == "/v1/headroom") {
    if (method != http::verb::put) return MethodNotAllowed("PUT");
    *endpoint = Endpoint::kHeadroom;
    if (auto error = Authorize(context, request)) return ToResponse(*error);
    if (!IsJsonContentType(request)) return UnsupportedMediaType();
    return HandleHeadroomPut(context, request);
  }
  if (path == "/v1/cluster") {
    if (method != http::verb::get) return MethodNotAllowed("GET, HEAD");
    *endpoint = Endpoint::kCluster;
    return ReadableAnywhere(HandleClusterGet(context));
  }
  if (path == "/v1/grants") {
    if (method != http::verb::get) return MethodNotAllowed("GET, HEAD");
    *endpoint = Endpoint::kCluster;
    return ReadableAnywhere(HandleGrants(context));
  }
  if (path == "/v1/ring/arcs") {
    if (method != http::verb::get) return MethodNotAllowed("GET, HEAD");
    *endpoint = Endpoint::kRing;
    return HandleRingArcs(context);
  }
  if (path == "/v1/stats") {
    if (method != http::verb::get) return MethodNotAllowed("GET, HEAD");
    *endpoint = Endpoint::kStats;
    return ReadableAnywhere(HandleStats(context));
  }
  if (path == "/ui" || path == "/ui/") {
    if (method != http::verb::get) return MethodNotAllowed("GET, HEAD");
    *endpoint = Endpoint::kConsole;
    return HandleConsole();
  }
  if (path == "/v1/ring") {
    if (method != http::verb::get) return MethodNotAllowed("GET, HEAD");
    *endpoint = Endpoint::kRing;
    return HandleRingGet(context, query);
  }
  if (path == "/v1/cluster/leave") {
    if (method != http::verb::post) return MethodNotAllowed("POST");
    *endpoint = Endpoint::kClusterLeave;
    if (auto error = Authorize(context, request)) return ToResponse(*error);
    return HandleClusterLeave(context);
  }
  if (path == "/healthz" || path == "/readyz" || path == "/metrics") {
    if (method != http::verb::get) return MethodNotAllowed("GET, HEAD");
    if (path == "/healthz") {
      *endpoint = Endpoint::kHealthz;
      return HandleHealthz();
    }
    if (path == "/readyz") {
      *endpoint = Endpoint::kReadyz;
      return HandleReadyz(context);
    }
    *endpoint = Endpoint::kMetrics;
    return HandleMetrics(context);
  }
  if (const HttpRoute* route = FindRoute(routes, path)) {
    if (method != route->method) {
      const std::string allow(route->method == http::verb::get ? "GET, HEAD"
                                                               : http::to_string(route->method));
      return MethodNotAllowed(allow);
    }
    *endpoint = route->endpoint;
    return route->now(request);
  }
  return ToResponse({ErrorKind::kNotFound, "no such endpoint: " + std::string(path.substr(0, 256))});
}

}  // namespace

ApiHandler::ApiHandler(CheckService& service) : service_(service) {}

void ApiHandler::AddRoute(HttpRoute route) { routes_.push_back(std::move(route)); }

void ApiHandler::Handle(HttpRequest&& request, Respond respond) {
  const auto start = std::chrono::steady_clock::now();
  const auto took = [start] { return std::chrono::steady_clock::now() - start; };
  CheckRouter* router = service_.router;
  const std::string_view target = request.target();
  const std::string_view path = target.substr(0, target.find('?'));
  const http::verb method = request.method();
  const bool auth = path == "/v1/auth" && (method == http::verb::get || method == http::verb::head);
  const bool check =
      auth || (path == "/v1/check" && (method == http::verb::get || method == http::verb::post));
  // Another adapter's route that forwards (Gubernator's GetRateLimits), when the API has none of its own.
  const HttpRoute* extra = check ? nullptr : FindRoute(routes_, path);
  if (extra != nullptr && (!extra->routed || method != extra->method)) extra = nullptr;
  if (router == nullptr || !(check || extra != nullptr) ||
      (method == http::verb::post && extra == nullptr && !IsJsonContentType(request))) {
    respond(HandleNow(request));
    return;
  }
  const bool is_get = method == http::verb::get || auth;
  const Endpoint endpoint = extra != nullptr ? extra->endpoint
                            : auth           ? Endpoint::kAuth
                            : is_get         ? Endpoint::kCheckGet
                                             : Endpoint::kCheckPost;
  Metrics& metrics = service_.metrics;
  // A route of another adapter answers errors in its own form.
  auto error_response = [extra](const ApiError& error) {
    return extra != nullptr && extra->error ? extra->error(error) : ToResponse(error);
  };

  if (std::optional<ApiError> refusal = RefusalOf(*router, "send the check to another node")) {
    HttpResponse response = error_response(*refusal);
    metrics.CountRequest(endpoint, response.result_int(), took());
    respond(std::move(response));
    return;
  }
  // A check that may be forwarded: answered when every owner has.
  const size_t question = target.find('?');
  const std::string_view query =
      question == std::string_view::npos ? std::string_view() : target.substr(question + 1);
  if (auth && !AuthHasKey(service_, request, query)) {
    HttpResponse response = AuthWithoutKey(service_.options);
    metrics.CountRequest(endpoint, response.result_int(), took());
    respond(std::move(response));
    return;
  }
  // Shared so that an exception thrown before anything was forwarded can still answer, once.
  struct Once {
    std::atomic<bool> answered{false};
    Respond respond;
  };
  auto once = std::make_shared<Once>();
  once->respond = std::move(respond);
  auto counted = [&metrics, endpoint, once, auth, options = &service_.options,
                  took](HttpResponse&& response) {
    if (once->answered.exchange(true)) return;
    if (auth) response = AuthAnswer(*options, std::move(response));
    metrics.CountRequest(endpoint, response.result_int(), took());
    once->respond(std::move(response));
  };
  try {
    if (extra != nullptr) {
      extra->routed(*router, request, counted);
    } else {
      HandleCheckRouted(service_, *router, request, query, is_get, counted);
    }
  } catch (const std::exception& e) {
    spdlog::error("api: {} {} failed: {}", std::string_view(request.method_string()), target.substr(0, 256),
                  e.what());
    counted(error_response({ErrorKind::kInternal, "internal error"}));
  }
}

unsigned ApiHandler::AnswerInPlace(const RequestHead& head, std::string& out, AnswerLater* later) {
  if (head.method != http::verb::get) return 0;
  const size_t question = head.target.find('?');
  const std::string_view path = head.target.substr(0, question);
  const bool auth = path == "/v1/auth";
  if (!auth && path != "/v1/check") return 0;
  const auto start = std::chrono::steady_clock::now();
  const std::string_view query =
      question == std::string_view::npos ? std::string_view() : head.target.substr(question + 1);
  const unsigned status = AnswerCheckGetInPlace(service_, head, query, auth, out, later, start);
  if (status != 0 && status != kAnsweredLater) {  // (one answered later is counted when it is answered)
    service_.metrics.CountRequest(auth ? Endpoint::kAuth : Endpoint::kCheckGet, status,
                                  std::chrono::steady_clock::now() - start);
  }
  return status;
}

HttpResponse ApiHandler::HandleNow(const HttpRequest& request) {
  const auto start = std::chrono::steady_clock::now();
  Endpoint endpoint = Endpoint::kOther;
  HttpResponse response;
  try {
    response = Route(service_, routes_, request, &endpoint);
  } catch (const std::exception& e) {
    // A bug or resource exhaustion: answer 500 rather than take the connection (or node) down.
    spdlog::error("api: {} {} failed: {}", std::string_view(request.method_string()),
                  std::string_view(request.target()).substr(0, 256), e.what());
    response = ToResponse({ErrorKind::kInternal, "internal error"});
  }
  service_.metrics.CountRequest(endpoint, response.result_int(), std::chrono::steady_clock::now() - start);
  return response;
}

}  // namespace ringlimit::node
