// ApiError: the one error value of the check service and its adapters, and the one place that names
// error kinds with their stable codes. "Over limit" is a decision, never an ApiError. Each adapter maps
// a kind to its protocol once: HTTP statuses in node/http/http_error.h, gRPC codes in node/envoy and
// node/gubernator (from the code), the peer's CheckStatus in forwarded.cc.
//
// Thread safety: plain values and pure functions.
#ifndef RINGLIMIT_NODE_SERVICE_API_ERROR_H_
#define RINGLIMIT_NODE_SERVICE_API_ERROR_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace ringlimit::node {

enum class ErrorKind : uint8_t {
  kBadJson,               // 400 bad_json: body is not JSON (syntax, truncated, invalid UTF-8)
  kInvalidField,          // 400 invalid_field: a field is missing, has the wrong type or value
  kTooManyChecks,         // 400 too_many_checks: more than ApiOptions::max_checks in one request
  kUnauthorized,          // 401 unauthorized: admin endpoint without the right bearer token
  kNotFound,              // 404 not_found: no such path
  kUnknownPolicy,         // 404 unknown_policy: a check names a policy that is not configured
  kMethodNotAllowed,      // 405 method_not_allowed (the response carries Allow)
  kUnsupportedMediaType,  // 415 unsupported_media_type: POST/PUT body not declared as JSON
  kNotReady,              // 503 not_ready: /readyz before the node is ready, a check before it joined
  kUnavailable,           // 503 unavailable: no holder of a key answered (--failure-mode closed), or the node
                          // is on the minority side (closed) or cannot pass a check on with its clock off
  kInternal,              // 500 internal: a bug; logged
};

struct ApiError {
  ErrorKind kind = ErrorKind::kInternal;
  std::string message;
};

// The stable machine-readable code of an error kind (the `code` of every error body).
[[nodiscard]] std::string_view CodeOf(ErrorKind kind);

// The API error for an internal Status that reaches a handler (storage, peers, options): the one place
// internal error kinds become API kinds, and so protocol statuses. The message is kept, except for the kinds
// that mean a fault on this side (corruption, I/O, internal), which answer 500 "internal error" -- the
// detail belongs in the log, not in a client's response. REQUIRES: !status.ok() (OK maps to kInternal).
//   InvalidArgument, AlreadyExists -> 400 invalid_field      NotFound -> 404 not_found
//   Unavailable, Timeout           -> 503 not_ready          Corruption, IOError, Internal -> 500
[[nodiscard]] ApiError ApiErrorFromStatus(const Status& status);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_API_ERROR_H_
