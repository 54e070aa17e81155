// The check family: POST /v1/check (JSON batch) and GET /v1/check (query string + rate-limit headers).
//
// Thread safety: stateless functions over the thread-safe CheckService.
#ifndef RINGLIMIT_NODE_API_CHECK_HANDLERS_H_
#define RINGLIMIT_NODE_API_CHECK_HANDLERS_H_

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "node/http/handler.h"

namespace ringlimit::node {

struct CheckService;
class CheckRouter;
struct ApiOptions;

// POST /v1/check: {"checks":[...]} -> 200 {"allowed":..,"results":[...]}, or a 4xx error.
[[nodiscard]] HttpResponse HandleCheckPost(const CheckService& context, const HttpRequest& request);

// GET /v1/check?<query>: 200 when allowed, 429 (or ?deny_status=4xx) when denied, with the
// RateLimit-Policy / RateLimit / X-RateLimit-* / Retry-After headers.
[[nodiscard]] HttpResponse HandleCheckGet(const CheckService& context, const HttpRequest& request,
                                          std::string_view query);

// GET /v1/check?<query> answered in place (RequestHandler::AnswerInPlace): when the check is valid and
// decided before the call returns (no router, or its key decided here: CheckBatch::RunHere), the whole
// response -- the bytes HandleCheckGet's response goes out as -- is appended to `out` and its status
// returned; otherwise 0, nothing appended and nothing charged (HandleCheckGet then answers it, errors
// included).
// With `auth`, GET /v1/auth's answer instead (AuthAnswer's bytes for the same check).
// With `later`, a valid check that is not decided before the call returns -- a key another node decides,
// forwarded through the router; a decision that waits for replicas -- is taken to answer later
// (AnswerLater::Take; RequestHandler::kAnsweredLater returned): routed as HandleCheckRouted routes it, and
// answered in the same bytes HandleCheckGet's response (or AuthAnswer's) goes out as, counted in metrics
// (its latency from `start`) when it is.
[[nodiscard]] unsigned AnswerCheckGetInPlace(const CheckService& context, const RequestHead& head,
                                             std::string_view query, bool auth, std::string& out,
                                             AnswerLater* later = nullptr,
                                             std::chrono::steady_clock::time_point start = {});

// POST (is_get false) or GET /v1/check with the checks of keys other nodes own forwarded through
// `router`. Calls `respond` exactly once: at once for a bad request or when every key is local, else
// when the last forwarded key is decided (on whichever thread that is).
void HandleCheckRouted(const CheckService& context, CheckRouter& router, const HttpRequest& request,
                       std::string_view query, bool is_get, std::function<void(HttpResponse&&)> respond);

// GET /v1/auth?<query> (forward-auth for proxies: nginx auth_request, Traefik, ...): the check of GET
// /v1/check, answered only 200 (allowed) or ApiOptions::auth_deny_status (denied; also a bad request, with
// the reason in X-RateLimit-Error), with the same RateLimit headers; 503 stays 503 (the proxy's own
// fail-open or fail-closed rule). AuthHasKey says whether the request names a key (query or key header);
// without one, AuthWithoutKey answers per ApiOptions::auth_allow_without_key. AuthAnswer turns the
// GET /v1/check response into the /v1/auth one.
[[nodiscard]] bool AuthHasKey(const CheckService& context, const HttpRequest& request,
                              std::string_view query);
[[nodiscard]] HttpResponse AuthAnswer(const ApiOptions& options, HttpResponse&& check);
[[nodiscard]] HttpResponse AuthWithoutKey(const ApiOptions& options);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_CHECK_HANDLERS_H_
