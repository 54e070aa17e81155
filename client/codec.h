// JSON and URL encoding of the ringlimit HTTP API for the client (docs/api.md). Pure functions, no I/O.
//
// Decoders validate the documented shape: a missing or wrongly typed required field is an
// Error::Kind::kProtocol naming the field. Unknown fields are ignored (newer servers may add some).
//
// Thread safety: all functions are thread-safe (no shared state).
#ifndef RINGLIMIT_CLIENT_CODEC_H_
#define RINGLIMIT_CLIENT_CODEC_H_

#include <string>
#include <string_view>
#include <vector>

#include "client/error.h"
#include "client/types.h"

namespace ringlimit::client {

// {"checks":[...]} for POST /v1/check.
[[nodiscard]] std::string EncodeChecks(const std::vector<Check>& checks);

// "/v1/check?key=...&..." for GET /v1/check (values percent-encoded).
[[nodiscard]] std::string CheckTarget(const Check& check);

// Percent-encodes everything except RFC 3986 unreserved characters.
[[nodiscard]] std::string PercentEncode(std::string_view s);

[[nodiscard]] Result<CheckResponse> DecodeCheckResponse(std::string_view body);
[[nodiscard]] Result<KeyInfo> DecodeKeyInfo(std::string_view body);
[[nodiscard]] Result<ClusterInfo> DecodeClusterInfo(std::string_view body);
// The "removed" count of a DELETE /v1/keys answer.
[[nodiscard]] Result<uint64_t> DecodeRemoved(std::string_view body);

// The Error for a non-2xx answer: kServer with the body's error.code and error.message when the body
// is the documented error JSON, else a generic code ("http_<status>") and the start of the body.
[[nodiscard]] Error ErrorFromResponse(int http_status, std::string_view body, std::string node);

}  // namespace ringlimit::client

#endif  // RINGLIMIT_CLIENT_CODEC_H_
