#include "node/api/keys_handlers.h"

#include "node/http/http_error.h"
#include "node/service/api_error.h"
#include "node/service/api_json.h"
#include "node/service/check_service.h"
#include "node/service/json_writer.h"
#include "storage/state_store.h"

namespace ringlimit::node {

namespace http = boost::beast::http;

namespace {

int64_t CeilMs(limiter::DurationNs d) { return d <= 0 ? 0 : (d - 1) / limiter::kMillisecond + 1; }

// Percent-decodes the key of a /v1/keys/ path into *key and validates it.
std::optional<ApiError> DecodeKey(const CheckService& context, std::string_view encoded, std::string* key) {
  if (!PercentDecode(encoded, key))
    return ApiError{ErrorKind::kInvalidField, "key: malformed percent-encoding"};
  if (key->empty()) return ApiError{ErrorKind::kInvalidField, "key: required in the path (/v1/keys/{key})"};
  if (key->size() > context.options.max_key_bytes) {
    return ApiError{ErrorKind::kInvalidField,
                    "key: longer than " + std::to_string(context.options.max_key_bytes) + " bytes"};
  }
  if (!IsValidUtf8(*key)) return ApiError{ErrorKind::kInvalidField, "key: not valid UTF-8"};
  return std::nullopt;
}

HttpResponse Json(std::string body) {
  HttpResponse response{http::status::ok, 11};
  response.set(http::field::content_type, "application/json");
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

}  // namespace

HttpResponse HandleKeysGet(const CheckService& context, std::string_view encoded_key) {
  std::string key;
  if (auto error = DecodeKey(context, encoded_key, &key)) return ToResponse(*error);
  const limiter::TimeNs now = context.clock();
  std::vector<storage::StoredState> states = context.store.Get(key);
  // KeyResponse / KeyState of proto/api.proto.
  std::string body;
  JsonWriter w(&body);
  w.BeginObject();
  w.Field("key", key);
  w.Key("states");
  w.BeginArray();
  for (const storage::StoredState& s : states) {
    const limiter::Decision d = limiter::PeekMerged(s.spec, s.state, limiter::Request{.cost = 0, .now = now});
    w.BeginObject();
    w.Field("name", s.name);
    w.Field("algorithm", limiter::AlgorithmName(s.spec.algorithm));
    w.FieldUint("limit", s.spec.limit);
    w.FieldInt("window_ms", s.spec.window / limiter::kMillisecond);
    w.FieldUint("remaining", d.remaining);
    w.FieldInt("reset_ms", CeilMs(d.reset_after));
    w.FieldUint("version", s.version);
    w.Field("mode", limiter::ModeName(s.spec.mode));
    uint32_t unsettled = 0;
    for (const limiter::GrantRecord& g : s.state.grants.records) unsettled += g.settled ? 0 : 1;
    w.FieldUint("grant_units_out", limiter::GrantsOut(s.spec, s.state, now));
    w.FieldUint("grants_unsettled", unsettled);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Json(std::move(body));
}

HttpResponse HandleKeysDelete(const CheckService& context, std::string_view encoded_key,
                              std::string_view query) {
  std::string key;
  if (auto error = DecodeKey(context, encoded_key, &key)) return ToResponse(*error);
  std::optional<std::string> name;
  bool empty_name = false;
  const bool well_formed = ForEachQueryParam(query, [&](std::string_view param, std::string_view value) {
    if (param == "name") {
      name = std::string(value);
      empty_name = value.empty();
    }
    return true;
  });
  if (!well_formed) return ToResponse({ErrorKind::kInvalidField, "query: malformed percent-encoding"});
  if (empty_name) return ToResponse({ErrorKind::kInvalidField, "name: must not be empty"});
  const size_t removed = context.store.Erase(
      key, name ? std::optional<std::string_view>(*name) : std::optional<std::string_view>());
  // ResetResponse of proto/api.proto.
  std::string body;
  JsonWriter w(&body);
  w.BeginObject();
  w.Field("key", key);
  w.FieldUint("removed", removed);
  w.EndObject();
  return Json(std::move(body));
}

}  // namespace ringlimit::node
