// The JSON mapping of proto/api.proto: Boost.JSON values into the generated structs, and the shared
// field readers. Errors name the offending field (relative to the object handed in; callers prefix
// the path, e.g. "checks[3].").
//
// Thread safety: pure functions.
#ifndef RINGLIMIT_NODE_SERVICE_API_JSON_H_
#define RINGLIMIT_NODE_SERVICE_API_JSON_H_

#include <boost/json/fwd.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "api.pb.h"
#include "limiter/limiter.h"
#include "node/service/api_error.h"
#include "node/service/check_fields.h"

namespace ringlimit::node {

// Parses `body` into `*out` (a value whose memory comes from `*out`'s storage). Errors are kBadJson
// with the parser's reason ("incomplete JSON" for a truncated body, "invalid UTF-8"...).
[[nodiscard]] std::optional<ApiError> ParseJsonBody(std::string_view body, boost::json::value* out);

// Integer field readers. An integer-valued JSON number is accepted; with `allow_string` also a decimal
// string (Protobuf's JSON mapping of 64-bit integers). Errors are kInvalidField naming `field`.
[[nodiscard]] std::optional<ApiError> ReadUint(const boost::json::value& v, std::string_view field,
                                               bool allow_string, uint64_t* out);
[[nodiscard]] std::optional<ApiError> ReadInt(const boost::json::value& v, std::string_view field,
                                              bool allow_string, int64_t* out);
[[nodiscard]] std::optional<ApiError> ReadString(const boost::json::value& v, std::string_view field,
                                                 std::string_view* out);

// Fills `*check` from a JSON object with the fields of api.Check. Unknown fields are errors (a typo
// such as "limt" must not silently change a limit). `allow_target`: whether key/policy/tier/cost are
// accepted (true for checks, false for the limits of a policy file).
[[nodiscard]] std::optional<ApiError> CheckFromJson(const boost::json::object& object, bool allow_target,
                                                    api::Check* check);

// The same fields from a query string (GET /v1/check), into `*check` (default-constructed; its views point
// into `query` or into check->decoded). Unknown parameters are ignored so a proxy may add its own;
// `deny_status` is returned through *deny_status when present (else 0).
[[nodiscard]] std::optional<ApiError> CheckFromQuery(std::string_view query, CheckFields* check,
                                                     unsigned* deny_status);

// The fields of `check` as views into it.
[[nodiscard]] CheckFields FieldsOf(const api::Check& check);

// The limit parameters of `check` applied over `base`, then validated (limiter::Validate). Errors are
// kInvalidField naming the JSON field (window_ms, max_delay_ms, ...).
[[nodiscard]] std::optional<ApiError> ApplyLimitFields(const CheckFields& check, limiter::LimitSpec* spec);
[[nodiscard]] std::optional<ApiError> ApplyLimitFields(const api::Check& check, limiter::LimitSpec* spec);

// Calls fn(name, value) for each name=value pair of a query string, percent-decoded ('+' is kept
// literally). Returns false, after the pairs before it, at the first malformed percent-escape.
// (Boost.URL 1.81's parse_query reads past the end of a view that is not NUL-terminated.)
// fn returns false to stop early.
template <typename Fn>
[[nodiscard]] bool ForEachQueryParam(std::string_view query, Fn&& fn);

// Percent-decodes `in` into *out; false when an escape is malformed.
[[nodiscard]] bool PercentDecode(std::string_view in, std::string* out);

// "checks[3]." + message of `error`.
[[nodiscard]] ApiError Prefixed(std::string_view prefix, ApiError error);

template <typename Fn>
bool ForEachQueryParam(std::string_view query, Fn&& fn) {
  std::string key_buffer;
  std::string value_buffer;
  // One look for an escape in the whole query: most have none, and then no pair is searched for one.
  const bool escaped = query.find('%') != std::string_view::npos;
  while (!query.empty()) {
    const size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::string_view key = pair.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    if (escaped && key.find('%') != std::string_view::npos) {
      if (!PercentDecode(key, &key_buffer)) return false;
      key = key_buffer;
    }
    if (escaped && value.find('%') != std::string_view::npos) {
      if (!PercentDecode(value, &value_buffer)) return false;
      value = value_buffer;
    }
    if (!fn(key, value)) return true;
  }
  return true;
}

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_API_JSON_H_
