#include "node/api/check_json.h"

#include <simdjson.h>

#include <array>
#include <cstdint>
#include <string>

#include "limiter/limiter.h"

namespace ringlimit::node {

namespace ondemand = simdjson::ondemand;

namespace {

// The fields of an api.Check object (as CheckFieldFromJson reads them), by how their value is read.
enum class Field : uint8_t {
  kKey,
  kName,
  kPolicy,
  kTier,
  kAlgorithm,
  kMode,  // strings
  kCost,
  kLimit,
  kWindowMs,
  kBurst,
  kBuckets,
  kMaxDelayMs,
  kSoftPct,
  kDynamicLimit,  // unsigned integers
  kCountDenied,   // true or false
  kCount
};

constexpr std::array<std::string_view, static_cast<size_t>(Field::kCount)> kFieldNames = {
    "key",       "name",  "policy",  "tier",         "algorithm", "mode",          "cost",        "limit",
    "window_ms", "burst", "buckets", "max_delay_ms", "soft_pct",  "dynamic_limit", "count_denied"};

bool FieldOf(std::string_view key, Field* field) {
  for (size_t i = 0; i < kFieldNames.size(); ++i) {
    if (kFieldNames[i] == key) {
      *field = static_cast<Field>(i);
      return true;
    }
  }
  return false;
}

// Sets `field` of `check` from `value`; false when CheckFieldFromJson would refuse it (a wrong type, a
// negative, fractional or too large number) or when it is a number the DOM could read otherwise (any
// non-integer literal: Boost.JSON 1.81 and simdjson may round a decimal differently).
bool SetField(Field field, ondemand::value& value, api::Check* check) {
  if (field <= Field::kMode) {
    std::string_view s;
    if (value.get_string().get(s)) return false;
    switch (field) {
      case Field::kKey:
        check->set_key(s.data(), s.size());
        break;
      case Field::kName:
        check->set_name(s.data(), s.size());
        break;
      case Field::kPolicy:
        check->set_policy(s.data(), s.size());
        break;
      case Field::kTier:
        check->set_tier(s.data(), s.size());
        break;
      case Field::kAlgorithm:
        check->set_algorithm(s.data(), s.size());
        break;
      default:
        check->set_mode(s.data(), s.size());
        break;
    }
    return true;
  }
  if (field == Field::kCountDenied) {
    bool b = false;
    if (value.get_bool().get(b)) return false;
    check->set_count_denied(b);
    return true;
  }
  uint64_t x = 0;
  if (value.get_uint64().get(x)) return false;  // (a literal such as 1.0, 1e3 or -0 included)
  switch (field) {
    case Field::kCost:
      if (x > limiter::kMaxCost) return false;
      check->set_cost(x);
      break;
    case Field::kLimit:
      check->set_limit(x);
      break;
    case Field::kWindowMs:
      check->set_window_ms(x);
      break;
    case Field::kBurst:
      check->set_burst(x);
      break;
    case Field::kBuckets:
      if (x > UINT32_MAX) return false;
      check->set_buckets(static_cast<uint32_t>(x));
      break;
    case Field::kMaxDelayMs:
      check->set_max_delay_ms(x);
      break;
    case Field::kSoftPct:
      if (x > UINT32_MAX) return false;
      check->set_soft_pct(static_cast<uint32_t>(x));
      break;
    default:
      check->set_dynamic_limit(x);
      break;
  }
  return true;
}

bool ReadCheck(ondemand::object& object, api::Check* check) {
  uint32_t seen = 0;  // one bit per Field: a key given twice is declined
  for (auto member : object) {
    std::string_view key;
    Field field{};
    if (member.unescaped_key().get(key) || !FieldOf(key, &field)) return false;
    const uint32_t bit = 1u << static_cast<unsigned>(field);
    if ((seen & bit) != 0) return false;
    seen |= bit;
    ondemand::value value;
    if (member.value().get(value) || !SetField(field, value, check)) return false;
  }
  return true;
}

bool ReadChecksArray(ondemand::array& array, size_t max_checks, google::protobuf::Arena* arena,
                     std::vector<api::Check*>* checks) {
  for (auto element : array) {
    ondemand::object object;
    if (checks->size() == max_checks || element.get_object().get(object)) return false;
    api::Check* check = google::protobuf::Arena::CreateMessage<api::Check>(arena);
    checks->push_back(check);
    if (!ReadCheck(object, check)) return false;
  }
  return !checks->empty();
}

}  // namespace

bool ReadChecksStreaming(std::string_view body, size_t max_checks, google::protobuf::Arena* arena,
                         std::vector<api::Check*>* checks) {
  checks->clear();
  // simdjson reads SIMDJSON_PADDING bytes past the end: the body is copied into a padded buffer, one per
  // thread (a memcpy, next to parsing it); the parser keeps its buffers between requests as well.
  thread_local std::string padded;
  thread_local ondemand::parser parser;
  padded.assign(body.data(), body.size());
  padded.resize(body.size() + simdjson::SIMDJSON_PADDING);
  ondemand::document document;
  ondemand::object root;
  if (parser.iterate(padded.data(), body.size(), padded.size()).get(document) ||
      document.get_object().get(root)) {
    return false;
  }
  bool had_checks = false;
  for (auto member : root) {
    std::string_view key;
    ondemand::array array;
    if (member.unescaped_key().get(key) || key != "checks" || had_checks) return false;
    had_checks = true;
    if (member.value().get_array().get(array) || !ReadChecksArray(array, max_checks, arena, checks))
      return false;
  }
  // Nothing after the root object (simdjson 3.0 has no document::at_end: past the end has no location).
  return had_checks && document.current_location().error() == simdjson::OUT_OF_BOUNDS;
}

}  // namespace ringlimit::node
