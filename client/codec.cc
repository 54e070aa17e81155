#include "client/codec.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <cstdio>

namespace ringlimit::client {
namespace json = boost::json;
namespace {

Error ProtocolError(std::string message) {
  return Error{.kind = Error::Kind::kProtocol, .code = "bad_response", .message = std::move(message)};
}

Result<json::value> Parse(std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec) return ProtocolError("response is not JSON: " + ec.message());
  if (!v.is_object()) return ProtocolError("response is not a JSON object");
  return v;
}

// Field readers: each reports the field's path on a type mismatch. `required` fields must be present.
class Reader {
 public:
  Reader(const json::object& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  void Str(std::string_view name, std::string* out, bool required = false) {
    const json::value* v = obj_.if_contains(name);
    if (v == nullptr) return Missing(name, required);
    if (!v->is_string()) return Bad(name, "a string");
    *out = std::string(v->get_string());
  }
  void Bool(std::string_view name, bool* out, bool required = false) {
    const json::value* v = obj_.if_contains(name);
    if (v == nullptr) return Missing(name, required);
    if (!v->is_bool()) return Bad(name, "a boolean");
    *out = v->get_bool();
  }
  template <class Int>
  void Num(std::string_view name, Int* out, bool required = false) {
    const json::value* v = obj_.if_contains(name);
    if (v == nullptr) return Missing(name, required);
    if (v->is_int64()) {
      *out = static_cast<Int>(v->get_int64());
    } else if (v->is_uint64()) {
      *out = static_cast<Int>(v->get_uint64());
    } else if (v->is_double()) {
      *out = static_cast<Int>(v->get_double());
    } else {
      Bad(name, "a number");
    }
  }
  const json::array* Array(std::string_view name) {
    const json::value* v = obj_.if_contains(name);
    if (v == nullptr || !v->is_array()) {
      Bad(name, "an array");
      return nullptr;
    }
    return &v->get_array();
  }
  [[nodiscard]] const std::string& error() const { return error_; }
  [[nodiscard]] bool ok() const { return error_.empty(); }

 private:
  void Missing(std::string_view name, bool required) {
    if (required) Bad(name, "present");
  }
  void Bad(std::string_view name, const char* what) {
    if (error_.empty()) error_ = path_ + std::string(name) + ": expected " + what;
  }

  const json::object& obj_;
  std::string path_;
  std::string error_;
};

std::string Indexed(std::string_view array, size_t i) {
  return std::string(array) + "[" + std::to_string(i) + "].";
}

// Decodes `body` as an object whose array field `array` holds objects: `top` reads the top-level fields,
// `item` one element (with a Reader whose paths name the element).
template <class T, class Top, class Item>
Result<T> DecodeWithArray(std::string_view body, std::string_view array, Top top, Item item) {
  auto v = Parse(body);
  if (!v) return v.error();
  Reader r(v->get_object(), "");
  T out;
  top(r, out);
  const json::array* items = r.Array(array);
  if (!r.ok()) return ProtocolError(r.error());
  for (size_t i = 0; i < items->size(); ++i) {
    if (!(*items)[i].is_object()) return ProtocolError(Indexed(array, i) + ": not an object");
    Reader ri((*items)[i].get_object(), Indexed(array, i));
    item(ri, (*items)[i].get_object(), out);
    if (!ri.ok()) return ProtocolError(ri.error());
  }
  return out;
}

}  // namespace

std::string EncodeChecks(const std::vector<Check>& checks) {
  json::array arr;
  arr.reserve(checks.size());
  for (const Check& c : checks) {
    json::object o;
    o["key"] = c.key;
    o["cost"] = c.cost;
    auto put_str = [&o](const char* name, const std::optional<std::string>& v) {
      if (v) o[name] = *v;
    };
    auto put_num = [&o](const char* name, const std::optional<uint64_t>& v) {
      if (v) o[name] = *v;
    };
    put_str("policy", c.policy);
    put_str("tier", c.tier);
    put_str("name", c.name);
    put_str("algorithm", c.algorithm);
    put_num("limit", c.limit);
    put_num("window_ms", c.window_ms);
    put_num("burst", c.burst);
    put_num("buckets", c.buckets);
    put_num("max_delay_ms", c.max_delay_ms);
    put_str("mode", c.mode);
    put_num("soft_pct", c.soft_pct);
    put_num("dynamic_limit", c.dynamic_limit);
    if (c.count_denied) o["count_denied"] = *c.count_denied;
    arr.emplace_back(std::move(o));
  }
  json::object root;
  root["checks"] = std::move(arr);
  return json::serialize(root);
}

std::string PercentEncode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char ch : s) {
    if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' ||
        ch == '_' || ch == '.' || ch == '~') {
      out.push_back(static_cast<char>(ch));
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", ch);
      out.append(buf, 3);
    }
  }
  return out;
}

std::string CheckTarget(const Check& c) {
  std::string t = "/v1/check?key=" + PercentEncode(c.key) + "&cost=" + std::to_string(c.cost);
  auto put_str = [&t](const char* name, const std::optional<std::string>& v) {
    if (v) t.append("&").append(name).append("=").append(PercentEncode(*v));
  };
  auto put_num = [&t](const char* name, const std::optional<uint64_t>& v) {
    if (v) t.append("&").append(name).append("=").append(std::to_string(*v));
  };
  put_str("policy", c.policy);
  put_str("tier", c.tier);
  put_str("name", c.name);
  put_str("algorithm", c.algorithm);
  put_num("limit", c.limit);
  put_num("window_ms", c.window_ms);
  put_num("burst", c.burst);
  put_num("buckets", c.buckets);
  put_num("max_delay_ms", c.max_delay_ms);
  put_str("mode", c.mode);
  put_num("soft_pct", c.soft_pct);
  put_num("dynamic_limit", c.dynamic_limit);
  if (c.count_denied) t.append("&count_denied=").append(*c.count_denied ? "true" : "false");
  return t;
}

Result<CheckResponse> DecodeCheckResponse(std::string_view body) {
  return DecodeWithArray<CheckResponse>(
      body, "results", [](Reader& r, CheckResponse& out) { r.Bool("allowed", &out.allowed, true); },
      [](Reader& r, const json::object&, CheckResponse& response) {
        CheckResult& out = response.results.emplace_back();
        r.Str("key", &out.key, true);
        r.Str("name", &out.name);
        r.Bool("allowed", &out.allowed, true);
        r.Num("limit", &out.limit);
        r.Num("remaining", &out.remaining);
        r.Num("reset_ms", &out.reset_ms);
        r.Num("retry_after_ms", &out.retry_after_ms);
        r.Num("delay_ms", &out.delay_ms);
        r.Str("mode", &out.mode);
        r.Bool("would_deny", &out.would_deny);
        r.Str("owner", &out.owner);
      });
}

Result<KeyInfo> DecodeKeyInfo(std::string_view body) {
  return DecodeWithArray<KeyInfo>(
      body, "states", [](Reader& r, KeyInfo& out) { r.Str("key", &out.key, true); },
      [](Reader& r, const json::object&, KeyInfo& info) {
        KeyState& s = info.states.emplace_back();
        r.Str("name", &s.name, true);
        r.Str("algorithm", &s.algorithm);
        r.Num("limit", &s.limit);
        r.Num("window_ms", &s.window_ms);
        r.Num("remaining", &s.remaining);
        r.Num("reset_ms", &s.reset_ms);
        r.Num("version", &s.version);
        r.Str("mode", &s.mode);
      });
}

Result<ClusterInfo> DecodeClusterInfo(std::string_view body) {
  return DecodeWithArray<ClusterInfo>(
      body, "members",
      [](Reader& r, ClusterInfo& out) {
        r.Str("node_id", &out.node_id, true);
        r.Num("ring_version", &out.ring_version);
      },
      [](Reader& r, const json::object& obj, ClusterInfo& info) {
        Member& m = info.members.emplace_back();
        r.Str("id", &m.id, true);
        r.Str("http_address", &m.http_address);
        r.Str("peer_address", &m.peer_address);
        r.Str("state", &m.state, true);
        r.Num("vnodes", &m.vnodes);
        r.Num("incarnation", &m.incarnation);
        if (const json::value* share = obj.if_contains("share"); share != nullptr && share->is_number()) {
          m.share = share->to_number<double>();
        }
      });
}

Result<uint64_t> DecodeRemoved(std::string_view body) {
  auto v = Parse(body);
  if (!v) return v.error();
  Reader r(v->get_object(), "");
  uint64_t removed = 0;
  r.Num("removed", &removed, true);
  if (!r.ok()) return ProtocolError(r.error());
  return removed;
}

Error ErrorFromResponse(int http_status, std::string_view body, std::string node) {
  Error e{.kind = Error::Kind::kServer, .http_status = http_status, .node = std::move(node)};
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    if (const json::value* err = v.get_object().if_contains("error"); err != nullptr && err->is_object()) {
      Reader r(err->get_object(), "error.");
      r.Str("code", &e.code);
      r.Str("message", &e.message);
    }
  }
  if (e.code.empty()) e.code = "http_" + std::to_string(http_status);
  if (e.message.empty()) e.message = std::string(body.substr(0, 200));
  return e;
}

}  // namespace ringlimit::client
