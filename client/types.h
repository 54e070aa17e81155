// Requests and answers of the ringlimit HTTP API (docs/api.md) as plain C++ values.
//
// Optional fields left empty are not sent, so the server's defaults apply. All types are plain values:
// copyable, no hidden state, safe to use from any thread as long as each object is not written
// concurrently.
#ifndef RINGLIMIT_CLIENT_TYPES_H_
#define RINGLIMIT_CLIENT_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ringlimit::client {

// One check: either a named policy (`policy`, optional `tier`) or inline limit parameters.
struct Check {
  std::string key{};  // entity key, required (1..1024 bytes)
  uint64_t cost = 1;  // units to charge; 0 = peek

  // Named policy mode.
  std::optional<std::string> policy{};
  std::optional<std::string> tier{};

  // Inline mode (see docs/api.md "Limit parameters" for meaning and defaults).
  std::optional<std::string> name{};       // server default "default"
  std::optional<std::string> algorithm{};  // fixed_window, sliding_log, ..., gcra
  std::optional<uint64_t> limit{};
  std::optional<uint64_t> window_ms{};
  std::optional<uint64_t> burst{};
  std::optional<uint64_t> buckets{};
  std::optional<uint64_t> max_delay_ms{};
  std::optional<std::string> mode{};  // hard, soft, shadow, dynamic
  std::optional<uint64_t> soft_pct{};
  std::optional<uint64_t> dynamic_limit{};
  std::optional<bool> count_denied{};
};

// The decision of one limit (a policy check yields one per limit of the policy).
struct CheckResult {
  std::string key{};
  std::string name{};
  bool allowed = false;
  uint64_t limit = 0;
  uint64_t remaining = 0;
  int64_t reset_ms = 0;
  int64_t retry_after_ms = 0;  // -1: never (the cost exceeds what the limit can admit)
  int64_t delay_ms = 0;
  std::string mode{};
  bool would_deny = false;
  std::string owner{};    // id of the node that decided ("" from nodes without a cluster)
  std::string sent_to{};  // client side: address of the node the request went to
};

struct CheckResponse {
  bool allowed = false;                // every result allowed
  std::vector<CheckResult> results{};  // request order; a policy check's results are consecutive
};

// GET /v1/check: the decision as status code and headers only (what a reverse proxy sees).
struct GetDecision {
  int http_status = 0;  // 200 allowed; 429 (or deny_status) denied
  bool allowed = false;
  std::string owner{};  // RateLimit-Owner header, if present
};

// One stored state of an entity (GET /v1/keys/{key}).
struct KeyState {
  std::string name{};
  std::string algorithm{};
  uint64_t limit = 0;
  uint64_t window_ms = 0;
  uint64_t remaining = 0;
  int64_t reset_ms = 0;
  uint64_t version = 0;
  std::string mode{};
};

struct KeyInfo {
  std::string key{};
  std::vector<KeyState> states{};
};

// One member as GET /v1/cluster lists it.
struct Member {
  std::string id{};
  std::string http_address{};
  std::string peer_address{};
  std::string state{};  // joining, alive, suspect, dead, leaving, left
  uint32_t vnodes = 0;
  uint64_t incarnation = 0;
  double share = 0;
};

struct ClusterInfo {
  std::string node_id{};  // the node that answered
  uint64_t ring_version = 0;
  std::vector<Member> members{};  // sorted by id
};

}  // namespace ringlimit::client

#endif  // RINGLIMIT_CLIENT_TYPES_H_
