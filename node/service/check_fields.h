// CheckFields: one check as the API describes it (proto/api.proto's api.Check), as plain views and optional
// numbers -- what CheckBatch::Add reads. The GET query fills it in place (CheckFromQuery: no protobuf
// message, no arena); the JSON and protobuf forms convert into it (FieldsOf, api_json.h).
//
// Thread safety: a plain value. Its views point into the request, or into `decoded` for values that had to be
// percent-decoded, and live as long as those.
#ifndef RINGLIMIT_NODE_SERVICE_CHECK_FIELDS_H_
#define RINGLIMIT_NODE_SERVICE_CHECK_FIELDS_H_

#include <cstdint>
#include <forward_list>
#include <optional>
#include <string>
#include <string_view>

namespace ringlimit::node {

struct CheckFields {
  std::string_view key;
  std::string_view name;
  std::string_view policy;
  std::string_view tier;
  std::string_view algorithm;
  std::string_view mode;
  std::optional<uint64_t> cost;
  std::optional<uint64_t> limit;
  std::optional<uint64_t> window_ms;
  std::optional<uint64_t> burst;
  std::optional<uint32_t> buckets;
  std::optional<uint64_t> max_delay_ms;
  std::optional<uint32_t> soft_pct;
  std::optional<uint64_t> dynamic_limit;
  std::optional<bool> count_denied;

  // Storage for values that are not views of the request as it arrived (percent-decoded ones). Strings in
  // list nodes: their addresses survive a move of the whole.
  std::forward_list<std::string> decoded;

  // Whether any inline limit parameter is given (they cannot be combined with a policy).
  [[nodiscard]] bool HasLimitFields() const {
    return !algorithm.empty() || limit || window_ms || burst || buckets || max_delay_ms || !mode.empty() ||
           soft_pct || dynamic_limit || count_denied;
  }
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_CHECK_FIELDS_H_
