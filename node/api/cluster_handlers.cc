#include "node/api/cluster_handlers.h"

#include <string>

#include "node/http/http_error.h"
#include "node/service/api_error.h"
#include "node/service/api_json.h"
#include "node/service/check_service.h"
#include "node/service/json_writer.h"

namespace ringlimit::node {

namespace http = boost::beast::http;

namespace {

HttpResponse Json(http::status status, std::string body) {
  HttpResponse response{status, 11};
  response.set(http::field::content_type, "application/json");
  response.body() = std::move(body);
  response.prepare_payload();
  return response;
}

// 16 lowercase hex digits.
std::string Hex16(uint64_t v) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<size_t>(i)] = kDigits[v & 0xf];
  return out;
}

HttpResponse NoCluster() { return ToResponse({ErrorKind::kNotFound, "this node does not run a cluster"}); }

}  // namespace

HttpResponse HandleClusterGet(const CheckService& context) {
  if (context.cluster == nullptr) return NoCluster();
  const ClusterView view = context.cluster->Describe();
  std::string body;
  body.reserve(128 + view.members.size() * 200);
  JsonWriter w(&body);
  w.BeginObject();
  w.Field("node_id", view.node_id);
  w.FieldUint("ring_version", view.ring_version);
  w.Field("ring_fingerprint", Hex16(view.ring_fingerprint));
  w.Key("members");
  w.BeginArray();
  for (const ClusterMemberView& m : view.members) {
    w.BeginObject();
    w.Field("id", m.id);
    w.Field("http_address", m.http_address);
    w.Field("peer_address", m.peer_address);
    w.Field("state", m.state);
    w.FieldUint("vnodes", m.vnodes);
    w.FieldUint("incarnation", m.incarnation);
    w.FieldDouble("share", m.share);
    if (m.clock_offset_ms) w.FieldDouble("clock_offset_ms", *m.clock_offset_ms);
    if (m.clock_uncertainty_ms) w.FieldDouble("clock_uncertainty_ms", *m.clock_uncertainty_ms);
    w.EndObject();
  }
  w.EndArray();
  w.FieldBool("clock_ok", view.clock.ok);
  w.Key("clock");
  w.BeginObject();
  w.Field("state", view.clock.state);
  w.FieldDouble("offset_ms", view.clock.offset_ms);
  w.FieldDouble("max_offset_ms", view.clock.max_offset_ms);
  w.Field("reason", view.clock.reason);
  w.EndObject();
  if (!view.replication_mode.empty()) {
    w.Key("replication");
    w.BeginObject();
    w.Field("mode", view.replication_mode);
    w.FieldUint("replicas", view.replicas);
    w.FieldUint("pending_keys", view.replication_pending_keys);
    w.EndObject();
  }
  w.Key("fence");
  w.BeginObject();
  w.FieldBool("deciding", view.fence.deciding);
  w.Field("reason", view.fence.reason);
  w.Field("detail", view.fence.detail);
  w.FieldBool("paused", view.fence.paused);
  w.Field("minority", view.fence.minority);
  w.EndObject();
  w.Key("handoffs_done");
  w.BeginObject();
  w.FieldUint("completed", view.handoff_totals.completed);
  w.FieldUint("failed", view.handoff_totals.failed);
  w.FieldUint("keys", view.handoff_totals.keys);
  w.FieldUint("incoming_completed", view.handoff_totals.incoming_completed);
  w.FieldUint("rereplicated_keys", view.handoff_totals.rereplicated_keys);
  w.EndObject();
  w.Key("handoffs");
  w.BeginArray();
  for (const ClusterHandoffView& h : view.handoffs) {
    w.BeginObject();
    w.Field("direction", h.direction);
    w.Field("peer", h.peer);
    w.FieldUint("ranges", h.ranges);
    w.FieldDouble("share", h.share);
    w.FieldUint("keys", h.keys);
    w.FieldUint("keys_total", h.keys_total);
    w.FieldUint("keys_left", h.keys_left);
    w.FieldUint("bytes", h.bytes);
    w.FieldUint("windows_done", h.windows_done);
    w.FieldUint("windows_total", h.windows_total);
    w.FieldDouble("done", h.done);
    w.Field("phase", h.phase);
    w.FieldDouble("seconds", h.seconds);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Json(http::status::ok, std::move(body));
}

HttpResponse HandleRingGet(const CheckService& context, std::string_view query) {
  if (context.cluster == nullptr) return NoCluster();
  std::string key;
  bool has_key = false;
  const bool well_formed = ForEachQueryParam(query, [&](std::string_view name, std::string_view value) {
    if (name == "key") {
      key.assign(value);
      has_key = true;
    }
    return true;
  });
  if (!well_formed) return ToResponse({ErrorKind::kInvalidField, "query: malformed percent-escape"});
  if (!has_key || key.empty()) return ToResponse({ErrorKind::kInvalidField, "key: required (?key=K)"});
  if (key.size() > context.options.max_key_bytes) {
    return ToResponse({ErrorKind::kInvalidField,
                       "key: longer than " + std::to_string(context.options.max_key_bytes) + " bytes"});
  }
  if (!IsValidUtf8(key)) return ToResponse({ErrorKind::kInvalidField, "key: not valid UTF-8"});
  const KeyPlacementView placement = context.cluster->Place(key);
  std::string body;
  JsonWriter w(&body);
  w.BeginObject();
  w.Field("key", key);
  w.Field("token", std::to_string(placement.token));
  w.Field("owner", placement.owner);
  w.Key("preference_list");
  w.BeginArray();
  for (const ClusterMemberView& m : placement.preference_list) {
    w.BeginObject();
    w.Field("id", m.id);
    w.Field("http_address", m.http_address);
    w.Field("state", m.state);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Json(http::status::ok, std::move(body));
}

HttpResponse HandleRingArcs(const CheckService& context) {
  if (context.cluster == nullptr) return NoCluster();
  const std::vector<RingArcView> arcs = context.cluster->RingArcs();
  std::string body;
  body.reserve(32 + arcs.size() * 48);
  JsonWriter w(&body);
  w.BeginObject();
  w.Key("arcs");
  w.BeginArray();
  for (const RingArcView& arc : arcs) {
    w.BeginObject();
    w.Field("owner", arc.owner);
    w.FieldDouble("from", arc.from);
    w.FieldDouble("to", arc.to);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Json(http::status::ok, std::move(body));
}

HttpResponse HandleGrants(const CheckService& context) {
  if (context.cluster == nullptr) return NoCluster();
  constexpr size_t kMaxHotKeys = 100;
  const HotKeysView view = context.cluster->HotKeys(kMaxHotKeys);
  std::string body;
  JsonWriter w(&body);
  w.BeginObject();
  w.Field("node_id", context.router != nullptr ? std::string_view(context.router->self_id()) : "");
  w.Field("grants", view.enabled ? "on" : "off");
  w.Key("lent");
  w.BeginArray();
  for (const HotKeysView::Lent& l : view.lent) {
    w.BeginObject();
    w.Field("key", l.key);
    w.Field("name", l.name);
    w.FieldUint("units_out", l.units_out);
    w.FieldUint("grants", l.grants);
    w.Key("holders");
    w.BeginArray();
    for (const std::string& holder : l.holders) w.String(holder);
    w.EndArray();
    w.FieldBool("recalled", l.recalled);
    w.EndObject();
  }
  w.EndArray();
  w.Key("held");
  w.BeginArray();
  for (const HotKeysView::Held& h : view.held) {
    w.BeginObject();
    w.Field("key", h.key);
    w.Field("name", h.name);
    w.Field("owner", h.owner);
    w.FieldUint("units_left", h.units_left);
    w.FieldUint("slices", h.slices);
    w.FieldDouble("expires_in_ms", h.expires_in_ms);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Json(http::status::ok, std::move(body));
}

HttpResponse HandleClusterLeave(const CheckService& context) {
  if (context.cluster == nullptr) return NoCluster();
  context.cluster->Leave();
  std::string body;
  JsonWriter w(&body);
  w.BeginObject();
  w.Field("node_id", context.router != nullptr ? std::string_view(context.router->self_id()) : "");
  w.Field("state", "leaving");
  w.EndObject();
  return Json(http::status::accepted, std::move(body));
}

}  // namespace ringlimit::node
