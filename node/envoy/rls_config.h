// RlsConfig: envoyproxy/ratelimit's YAML configuration (domain + nested descriptors), parsed and
// validated once, and matched against the descriptors of Envoy's ShouldRateLimit requests.
//
//   domain: edge
//   descriptors:
//     - key: remote_address              # no value: one counter per distinct address
//       rate_limit: {unit: minute, requests_per_unit: 10}
//     - key: path
//       value: /login                     # this value only; wins over a key-only rule
//       rate_limit: {unit: second, requests_per_unit: 2}
//       shadow_mode: true                 # decide and count, but always answer OK
//       descriptors: [...]                # nested: matched by the request's next entries
//     - key: file
//       value: /reports/*                 # wildcard: each `*` matches any run of characters
//       share_threshold: true             # every matching value shares one counter
//       rate_limit: {unit: minute, requests_per_unit: 5, name: reports, replaces: [{name: files}]}
//
// As envoyproxy/ratelimit: `rate_limit.unlimited`, `rate_limit.replaces` (a matched limit whose name
// another matched limit of the same request replaces is not applied), `quota_mode` (see RlsRule);
// `detailed_metric` and `value_to_metric` name the rule's series in /metrics (RlsConfig::Match), and
// `metadata` is accepted and has no effect. Beyond it:
// `algorithm` (any of limiter::ParseAlgorithm's names; default fixed_window) next to `unit` in
// rate_limit, and `unlimited: true` at the descriptor level as well. Several domains may share one file
// as YAML documents separated by `---`.
//
// Thread safety: an RlsConfig is immutable once parsed; share it through RlsConfigHolder.
#ifndef RINGLIMIT_NODE_ENVOY_RLS_CONFIG_H_
#define RINGLIMIT_NODE_ENVOY_RLS_CONFIG_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/published.h"
#include "base/status.h"
#include "limiter/limiter.h"

namespace ringlimit::node::rls {

// The units of envoyproxy/ratelimit's rate_limit.unit; the numbers are the RateLimitResponse.RateLimit.Unit
// enumerators of Envoy's rls.proto. As in envoyproxy/ratelimit, a week is 7 days, a month 30 days and a
// year 365 days, and every window starts at a multiple of its length since the Unix epoch.
enum class Unit : uint8_t { kSecond = 1, kMinute = 2, kHour = 3, kDay = 4, kMonth = 5, kYear = 6, kWeek = 7 };

[[nodiscard]] std::optional<Unit> ParseUnit(std::string_view name);  // case-insensitive
[[nodiscard]] limiter::DurationNs UnitDuration(Unit unit);

// A limit: what a matched rule (or a request's override) applies.
struct RlsLimit {
  uint32_t requests_per_unit = 0;  // 0: nothing is ever admitted (spec unused)
  Unit unit = Unit::kSecond;
  std::string name;                   // rate_limit.name; reported as current_limit.name
  std::vector<std::string> replaces;  // rate_limit.replaces[].name: limits this one switches off
  limiter::LimitSpec spec;            // algorithm, limit = requests_per_unit, window = one unit
};

// One node of the descriptor tree.
struct RlsRule {
  std::string key;
  std::optional<std::string> value;  // nullopt: matches any value of `key`
  bool wildcard = false;             // `value` has a `*`: a pattern, each `*` any run of characters
  bool share_threshold = false;      // wildcard only: every matching value counts in one counter
  std::optional<RlsLimit> limit;     // rate_limit; nullopt: none at this level
  bool shadow_mode = false;          // decide and count, answer OK
  // Over its limit, this descriptor makes the request OVER_LIMIT only when every quota_mode
  // descriptor of the request is over (envoyproxy/ratelimit's quota mode).
  bool quota_mode = false;
  bool unlimited = false;         // always OK, nothing counted
  bool detailed_metric = false;   // its series is named with the request's values (Match)
  bool value_to_metric = false;   // this level's part of the series name carries the request's value
  std::vector<RlsRule> children;  // matched against the next entries
};

// What a descriptor's entries matched.
struct RlsMatch {
  const RlsRule* rule = nullptr;  // the rule of the last entry; null: no rule applies (answer OK)
};

// Whether `value` matches `pattern`, in which each `*` matches any run of characters (none included).
[[nodiscard]] bool WildcardMatch(std::string_view pattern, std::string_view value);

class RlsConfig {
 public:
  // Parses YAML text (one or more documents, one domain each). Errors: InvalidArgument naming the
  // place (e.g. "domain edge: descriptors[1].rate_limit.unit: unknown unit 'weeks'").
  [[nodiscard]] static Result<std::shared_ptr<const RlsConfig>> Parse(std::string_view yaml);

  // Reads and parses a file. Errors: IOError when it cannot be read, or Parse's.
  [[nodiscard]] static Result<std::shared_ptr<const RlsConfig>> Load(const std::string& path);

  [[nodiscard]] bool HasDomain(std::string_view domain) const { return domains_.contains(domain); }

  // Walks `entries` (key, value) through `domain`'s tree as envoyproxy/ratelimit does: at each level
  // the rule with the entry's key and value wins, then the first rule (in file order) with the key and
  // a wildcard value matching it, then the rule with the key alone; the walk stops at the first entry
  // that matches nothing. A rule applies only when it matched the last entry and has a rate_limit or is
  // unlimited. Unknown domain: no rule.
  //
  // `counter` (optional) is set to the entries that name the descriptor's counter: `entries`, except
  // that an entry matched by a wildcard rule with share_threshold has the rule's pattern as its value.
  //
  // `metric_name` (optional) is set to the name of the matched rule's series in /metrics, as
  // envoyproxy/ratelimit names its stats: the domain, then per level `.key`, with `_value` for a rule
  // that has a value (its pattern for a wildcard), e.g. `edge.path_/login`. A level whose rule has
  // value_to_metric carries the request's value instead; a matched rule with detailed_metric has every
  // level carry the request's value. Set only when a rule applies.
  [[nodiscard]] RlsMatch Match(std::string_view domain,
                               std::span<const std::pair<std::string_view, std::string_view>> entries,
                               std::vector<std::pair<std::string_view, std::string_view>>* counter = nullptr,
                               std::string* metric_name = nullptr) const;

  // Number of domains (tests, logs).
  [[nodiscard]] size_t domains() const { return domains_.size(); }

 private:
  std::map<std::string, std::vector<RlsRule>, std::less<>> domains_;
};

// The configuration in force, replaced as a whole by Reload. Thread-safe; readers never block writers.
class RlsConfigHolder {
 public:
  // `path` empty: no file (every domain unknown: every descriptor is answered OK).
  explicit RlsConfigHolder(std::string path = "");
  RlsConfigHolder(const RlsConfigHolder&) = delete;
  RlsConfigHolder& operator=(const RlsConfigHolder&) = delete;

  // Reads the file and swaps it in; on failure the current config stays in force and the error is
  // returned. Empty path: OK, nothing changes.
  [[nodiscard]] Status Reload();

  // The config in force (never null). Keep it for the duration of one request.
  [[nodiscard]] std::shared_ptr<const RlsConfig> Current() const { return config_.Current(); }

  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  const std::string path_;  // constant after construction
  Published<RlsConfig> config_;
};

}  // namespace ringlimit::node::rls

#endif  // RINGLIMIT_NODE_ENVOY_RLS_CONFIG_H_
