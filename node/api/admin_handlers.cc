#include "node/api/admin_handlers.h"

#include <boost/json.hpp>
#include <cmath>

#include "node/http/http_error.h"
#include "node/metrics/metrics.h"
#include "node/metrics/process_metrics.h"
#include "node/service/api_json.h"
#include "node/service/check_service.h"
#include "node/service/json_writer.h"
#include "storage/state_store.h"

namespace ringlimit::node {

namespace http = boost::beast::http;
namespace json = boost::json;

namespace {

HttpResponse Text(http::status status, std::string_view content_type, std::string body) {
  HttpResponse response{status, 11};
  response.set(http::field::content_type, content_type);
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

HttpResponse StatusJson(std::string_view status) {
  std::string body;
  JsonWriter w(&body);
  w.BeginObject();
  w.Field("status", status);
  w.EndObject();
  return Text(http::status::ok, "application/json", std::move(body));
}

}  // namespace

HttpResponse HandleHeadroomPut(CheckService& context, const HttpRequest& request) {
  json::value root;
  if (auto error = ParseJsonBody(request.body(), &root)) return ToResponse(*error);
  if (!root.is_object()) return ToResponse({ErrorKind::kInvalidField, "body: must be a JSON object"});
  // HeadroomRequest of proto/api.proto.
  api::HeadroomRequest parsed;
  bool has_headroom = false;
  for (const auto& [json_key, value] : root.get_object()) {
    const std::string_view key = json_key;
    if (key == "policy") {
      std::string_view s;
      if (auto error = ReadString(value, key, &s)) return ToResponse(*error);
      parsed.set_policy(s.data(), s.size());
    } else if (key == "headroom") {
      if (!value.is_number())
        return ToResponse({ErrorKind::kInvalidField, "headroom: must be a number in [0, 1]"});
      parsed.set_headroom(value.to_number<double>());
      has_headroom = true;
    } else if (key == "ttl_ms") {
      uint64_t ttl = 0;
      if (auto error = ReadUint(value, key, false, &ttl)) return ToResponse(*error);
      parsed.set_ttl_ms(ttl);
    } else {
      std::string message;
      AppendJsonString(&message, key);
      return ToResponse({ErrorKind::kInvalidField, message + ": unknown field"});
    }
  }
  if (parsed.policy().empty() || parsed.policy().size() > context.options.max_name_bytes) {
    return ToResponse({ErrorKind::kInvalidField, "policy: required, a policy or inline limit name"});
  }
  if (!has_headroom || !std::isfinite(parsed.headroom()) || parsed.headroom() < 0 || parsed.headroom() > 1) {
    return ToResponse({ErrorKind::kInvalidField, "headroom: required, a number in [0, 1]"});
  }
  constexpr uint64_t kMaxTtlMs = 7ULL * 24 * 3600 * 1000;
  const uint64_t ttl_ms =
      parsed.has_ttl_ms() ? parsed.ttl_ms() : static_cast<uint64_t>(context.options.headroom_ttl.count());
  if (ttl_ms == 0 || ttl_ms > kMaxTtlMs) {
    return ToResponse({ErrorKind::kInvalidField, "ttl_ms: must be between 1 and 604800000 (7 days)"});
  }
  const limiter::TimeNs now = context.clock();
  const limiter::TimeNs expires_at = now + static_cast<limiter::TimeNs>(ttl_ms) * limiter::kMillisecond;
  if (!context.headroom.Set(parsed.policy(), parsed.headroom(), expires_at, now)) {
    return ToResponse({ErrorKind::kInvalidField, "policy: too many live headroom signals"});
  }
  // HeadroomResponse of proto/api.proto.
  std::string body;
  JsonWriter w(&body);
  w.BeginObject();
  w.Field("policy", parsed.policy());
  w.FieldDouble("headroom", parsed.headroom());
  w.FieldInt("expires_in_ms", static_cast<int64_t>(ttl_ms));
  w.EndObject();
  return Text(http::status::ok, "application/json", std::move(body));
}

HttpResponse HandleHealthz() { return StatusJson("ok"); }

HttpResponse HandleStats(const CheckService& context) {
  const Metrics::Summary summary = context.metrics.Summarize();
  std::string body;
  JsonWriter w(&body);
  w.BeginObject();
  w.Field("node_id", context.router != nullptr ? std::string_view(context.router->self_id()) : "");
  w.FieldUint("keys", context.store.Stats().keys);
  w.Key("decisions");
  w.BeginObject();
  w.FieldUint("allowed", summary.allowed);
  w.FieldUint("denied", summary.denied);
  w.EndObject();
  w.Key("latency");
  w.BeginObject();
  w.Key("bounds_ms");
  w.BeginArray();
  for (int64_t bound : Metrics::kLatencyBoundsNs) w.Double(static_cast<double>(bound) / 1e6);
  w.EndArray();
  w.Key("counts");
  w.BeginArray();
  for (uint64_t count : summary.latency) w.Uint(count);
  w.EndArray();
  w.EndObject();
  w.EndObject();
  return Text(http::status::ok, "application/json", std::move(body));
}

HttpResponse HandleReadyz(const CheckService& context) {
  if (!context.ready.load(std::memory_order_acquire)) {
    return ToResponse({ErrorKind::kNotReady, "the node is not ready to serve (starting or draining)"});
  }
  if (context.cluster == nullptr) return StatusJson("ready");
  if (!context.cluster->ready()) {
    return ToResponse({ErrorKind::kNotReady, "the node has not joined the cluster (or is leaving)"});
  }
  // Ready: it takes checks. Whether it decides them itself is said, not a reason to send clients away --
  // a node that steps back (paused, clock off) passes its checks on to their keys' other holders.
  const ClusterFenceView fence = context.cluster->Fence();
  std::string body;
  JsonWriter w(&body);
  w.BeginObject();
  w.Field("status", "ready");
  w.FieldBool("deciding", fence.deciding);
  if (!fence.deciding) {
    w.Field("reason", fence.reason);
    w.Field("detail", fence.detail);
  }
  w.EndObject();
  return Text(http::status::ok, "application/json", std::move(body));
}

HttpResponse HandleMetrics(const CheckService& context) {
  std::string text = context.metrics.Render(context.store.Stats());
  if (context.cluster != nullptr) context.cluster->AppendMetrics(&text);
  if (context.node_metrics) context.node_metrics(&text);
  AppendProcessMetrics(&text);
  return Text(http::status::ok, "text/plain; version=0.0.4; charset=utf-8", std::move(text));
}

}  // namespace ringlimit::node
