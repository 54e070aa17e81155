#include "node/service/api_json.h"

#include <boost/json.hpp>
#include <charconv>
#include <cmath>

#include "node/service/json_writer.h"

namespace ringlimit::node {

namespace json = boost::json;

namespace {

ApiError Invalid(std::string_view field, std::string_view what) {
  std::string message;
  message.reserve(field.size() + what.size() + 2);
  message.append(field).append(": ").append(what);
  return ApiError{ErrorKind::kInvalidField, std::move(message)};
}

std::optional<ApiError> ParseDecimal(std::string_view s, std::string_view field, uint64_t* out) {
  if (s.empty()) return Invalid(field, "must be a non-negative integer");
  if (s.size() <= 19) {  // the usual number: at most 19 digits cannot overflow
    uint64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return Invalid(field, "must be a non-negative integer");
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    *out = v;
    return std::nullopt;
  }
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return Invalid(field,
                   ec == std::errc::result_out_of_range ? "is too large" : "must be a non-negative integer");
  }
  return std::nullopt;
}

std::optional<ApiError> ParseBoolText(std::string_view s, std::string_view field, bool* out) {
  if (s == "true" || s == "1") {
    *out = true;
  } else if (s == "false" || s == "0") {
    *out = false;
  } else {
    return Invalid(field, "must be true or false");
  }
  return std::nullopt;
}

// Reads a uint into a proto setter.
template <typename Setter>
std::optional<ApiError> SetUint(const json::value& v, std::string_view field, uint64_t max, Setter set) {
  uint64_t x = 0;
  if (auto error = ReadUint(v, field, false, &x)) return error;
  if (x > max) return Invalid(field, "is too large");
  set(x);
  return std::nullopt;
}

}  // namespace

ApiError Prefixed(std::string_view prefix, ApiError error) {
  error.message.insert(0, prefix);
  return error;
}

std::optional<ApiError> ParseJsonBody(std::string_view body, json::value* out) {
  boost::system::error_code ec;
  json::parse_options options;
  options.max_depth = 32;
  *out = json::parse(body, ec, out->storage(), options);
  if (ec) {
    std::string message = "request body is not valid JSON: ";
    message += ec.message();
    return ApiError{ErrorKind::kBadJson, std::move(message)};
  }
  return std::nullopt;
}

std::optional<ApiError> ReadUint(const json::value& v, std::string_view field, bool allow_string,
                                 uint64_t* out) {
  switch (v.kind()) {
    case json::kind::uint64:
      *out = v.get_uint64();
      return std::nullopt;
    case json::kind::int64:
      if (v.get_int64() < 0) return Invalid(field, "must not be negative");
      *out = static_cast<uint64_t>(v.get_int64());
      return std::nullopt;
    case json::kind::double_: {
      const double d = v.get_double();
      if (d < 0) return Invalid(field, "must not be negative");
      if (d >= 18446744073709551616.0) return Invalid(field, "is too large");
      if (std::floor(d) != d) return Invalid(field, "must be an integer");
      *out = static_cast<uint64_t>(d);
      return std::nullopt;
    }
    case json::kind::string:
      if (allow_string) {
        std::string_view s = v.get_string();
        if (!s.empty() && s[0] == '-') return Invalid(field, "must not be negative");
        return ParseDecimal(s, field, out);
      }
      [[fallthrough]];
    default:
      return Invalid(field, "must be a non-negative integer");
  }
}

std::optional<ApiError> ReadInt(const json::value& v, std::string_view field, bool allow_string,
                                int64_t* out) {
  switch (v.kind()) {
    case json::kind::int64:
      *out = v.get_int64();
      return std::nullopt;
    case json::kind::uint64:
      if (v.get_uint64() > static_cast<uint64_t>(INT64_MAX)) return Invalid(field, "is too large");
      *out = static_cast<int64_t>(v.get_uint64());
      return std::nullopt;
    case json::kind::double_: {
      const double d = v.get_double();
      if (std::floor(d) != d) return Invalid(field, "must be an integer");
      if (d >= 9223372036854775807.0 || d < -9223372036854775807.0) return Invalid(field, "is out of range");
      *out = static_cast<int64_t>(d);
      return std::nullopt;
    }
    case json::kind::string:
      if (allow_string) {
        std::string_view s = v.get_string();
        auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
        if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
          return Invalid(field, "must be an integer");
        }
        return std::nullopt;
      }
      [[fallthrough]];
    default:
      return Invalid(field, "must be an integer");
  }
}

std::optional<ApiError> ReadString(const json::value& v, std::string_view field, std::string_view* out) {
  if (!v.is_string()) return Invalid(field, "must be a string");
  *out = v.get_string();
  return std::nullopt;
}

std::optional<ApiError> CheckFromJson(const json::object& object, bool allow_target, api::Check* check) {
  std::string_view s;
  for (const auto& [json_key, value] : object) {
    const std::string_view key = json_key;
    std::optional<ApiError> error;
    if (allow_target && key == "key") {
      if (!(error = ReadString(value, key, &s))) check->set_key(s.data(), s.size());
    } else if (key == "name") {
      if (!(error = ReadString(value, key, &s))) check->set_name(s.data(), s.size());
    } else if (allow_target && key == "policy") {
      if (!(error = ReadString(value, key, &s))) check->set_policy(s.data(), s.size());
    } else if (allow_target && key == "tier") {
      if (!(error = ReadString(value, key, &s))) check->set_tier(s.data(), s.size());
    } else if (allow_target && key == "cost") {
      error = SetUint(value, key, limiter::kMaxCost, [&](uint64_t x) { check->set_cost(x); });
    } else if (key == "algorithm") {
      if (!(error = ReadString(value, key, &s))) check->set_algorithm(s.data(), s.size());
    } else if (key == "limit") {
      error = SetUint(value, key, UINT64_MAX, [&](uint64_t x) { check->set_limit(x); });
    } else if (key == "window_ms") {
      error = SetUint(value, key, UINT64_MAX, [&](uint64_t x) { check->set_window_ms(x); });
    } else if (key == "burst") {
      error = SetUint(value, key, UINT64_MAX, [&](uint64_t x) { check->set_burst(x); });
    } else if (key == "buckets") {
      error =
          SetUint(value, key, UINT32_MAX, [&](uint64_t x) { check->set_buckets(static_cast<uint32_t>(x)); });
    } else if (key == "max_delay_ms") {
      error = SetUint(value, key, UINT64_MAX, [&](uint64_t x) { check->set_max_delay_ms(x); });
    } else if (key == "mode") {
      if (!(error = ReadString(value, key, &s))) check->set_mode(s.data(), s.size());
    } else if (key == "soft_pct") {
      error =
          SetUint(value, key, UINT32_MAX, [&](uint64_t x) { check->set_soft_pct(static_cast<uint32_t>(x)); });
    } else if (key == "dynamic_limit") {
      error = SetUint(value, key, UINT64_MAX, [&](uint64_t x) { check->set_dynamic_limit(x); });
    } else if (key == "count_denied") {
      if (!value.is_bool()) {
        error = Invalid(key, "must be true or false");
      } else {
        check->set_count_denied(value.get_bool());
      }
    } else {
      std::string field;
      AppendJsonString(&field, key);
      error = Invalid(field, "unknown field");
    }
    if (error) return error;
  }
  return std::nullopt;
}

std::optional<ApiError> CheckFromQuery(std::string_view query, CheckFields* check, unsigned* deny_status) {
  *deny_status = 0;
  std::optional<ApiError> error;
  // A value percent-decoded into ForEachQueryParam's buffer is kept in check->decoded.
  auto keep = [&](std::string_view value) -> std::string_view {
    if (value.empty() ||
        (value.data() >= query.data() && value.data() + value.size() <= query.data() + query.size())) {
      return value;
    }
    return check->decoded.emplace_front(value);
  };
  const bool well_formed = ForEachQueryParam(query, [&](std::string_view key, std::string_view value) {
    uint64_t x = 0;
    auto uint_param = [&](uint64_t max, auto set) {
      if (!(error = ParseDecimal(value, key, &x))) {
        if (x > max) {
          error = Invalid(key, "is too large");
        } else {
          set(x);
        }
      }
    };
    if (key == "key") {
      check->key = keep(value);
    } else if (key == "name") {
      check->name = keep(value);
    } else if (key == "policy") {
      check->policy = keep(value);
    } else if (key == "tier") {
      check->tier = keep(value);
    } else if (key == "cost") {
      uint_param(limiter::kMaxCost, [&](uint64_t v) { check->cost = v; });
    } else if (key == "algorithm") {
      check->algorithm = keep(value);
    } else if (key == "limit") {
      uint_param(UINT64_MAX, [&](uint64_t v) { check->limit = v; });
    } else if (key == "window_ms") {
      uint_param(UINT64_MAX, [&](uint64_t v) { check->window_ms = v; });
    } else if (key == "burst") {
      uint_param(UINT64_MAX, [&](uint64_t v) { check->burst = v; });
    } else if (key == "buckets") {
      uint_param(UINT32_MAX, [&](uint64_t v) { check->buckets = static_cast<uint32_t>(v); });
    } else if (key == "max_delay_ms") {
      uint_param(UINT64_MAX, [&](uint64_t v) { check->max_delay_ms = v; });
    } else if (key == "mode") {
      check->mode = keep(value);
    } else if (key == "soft_pct") {
      uint_param(UINT32_MAX, [&](uint64_t v) { check->soft_pct = static_cast<uint32_t>(v); });
    } else if (key == "dynamic_limit") {
      uint_param(UINT64_MAX, [&](uint64_t v) { check->dynamic_limit = v; });
    } else if (key == "count_denied") {
      bool b = false;
      if (!(error = ParseBoolText(value, key, &b))) check->count_denied = b;
    } else if (key == "deny_status") {
      uint_param(599, [&](uint64_t v) { *deny_status = static_cast<unsigned>(v); });
      if (!error && (*deny_status < 400 || *deny_status > 499)) error = Invalid(key, "must be a 4xx status");
    }
    return !error;
  });
  if (error) return error;
  if (!well_formed) return ApiError{ErrorKind::kInvalidField, "query: malformed percent-encoding"};
  return std::nullopt;
}

CheckFields FieldsOf(const api::Check& c) {
  CheckFields f;
  f.key = c.key();
  f.name = c.name();
  f.policy = c.policy();
  f.tier = c.tier();
  f.algorithm = c.algorithm();
  f.mode = c.mode();
  if (c.has_cost()) f.cost = c.cost();
  if (c.has_limit()) f.limit = c.limit();
  if (c.has_window_ms()) f.window_ms = c.window_ms();
  if (c.has_burst()) f.burst = c.burst();
  if (c.has_buckets()) f.buckets = c.buckets();
  if (c.has_max_delay_ms()) f.max_delay_ms = c.max_delay_ms();
  if (c.has_soft_pct()) f.soft_pct = c.soft_pct();
  if (c.has_dynamic_limit()) f.dynamic_limit = c.dynamic_limit();
  if (c.has_count_denied()) f.count_denied = c.count_denied();
  return f;
}

bool PercentDecode(std::string_view in, std::string* out) {
  out->clear();
  out->reserve(in.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size()) return false;
    const int hi = hex(in[i + 1]);
    const int lo = hex(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

std::optional<ApiError> ApplyLimitFields(const CheckFields& c, limiter::LimitSpec* spec) {
  if (!c.algorithm.empty()) {
    auto algorithm = limiter::ParseAlgorithm(c.algorithm);
    if (!algorithm) {
      return Invalid(
          "algorithm",
          "unknown algorithm (expected fixed_window, anchored_window, sliding_log, sliding_window, "
          "sliding_window_approx, token_bucket, leaky_bucket or gcra)");
    }
    spec->algorithm = *algorithm;
  }
  if (!c.mode.empty()) {
    auto mode = limiter::ParseMode(c.mode);
    if (!mode) return Invalid("mode", "unknown mode (expected hard, soft, shadow or dynamic)");
    spec->mode = *mode;
  }
  // Durations arrive in ms; bound them before multiplying so the product cannot overflow.
  constexpr uint64_t kMaxMs = static_cast<uint64_t>(limiter::kMaxWindow / limiter::kMillisecond);
  if (c.window_ms) {
    if (*c.window_ms > kMaxMs) return Invalid("window_ms", "must be at most 31622400000 (366 days)");
    spec->window = static_cast<limiter::DurationNs>(*c.window_ms) * limiter::kMillisecond;
  }
  if (c.max_delay_ms) {
    if (*c.max_delay_ms > kMaxMs) return Invalid("max_delay_ms", "must be at most 31622400000 (366 days)");
    spec->max_delay = static_cast<limiter::DurationNs>(*c.max_delay_ms) * limiter::kMillisecond;
  }
  if (c.limit) spec->limit = *c.limit;
  if (c.burst) spec->burst = *c.burst;
  if (c.buckets) spec->buckets = *c.buckets;
  if (c.soft_pct) spec->soft_pct = *c.soft_pct;
  if (c.dynamic_limit) spec->dynamic_limit = *c.dynamic_limit;
  if (c.count_denied) spec->count_denied = *c.count_denied;
  if (auto invalid = limiter::Validate(*spec)) {
    std::string_view field = invalid->field;
    if (field == "window") field = "window_ms";
    if (field == "max_delay") field = "max_delay_ms";
    return Invalid(field, invalid->message);
  }
  return std::nullopt;
}

std::optional<ApiError> ApplyLimitFields(const api::Check& check, limiter::LimitSpec* spec) {
  return ApplyLimitFields(FieldsOf(check), spec);
}

}  // namespace ringlimit::node
