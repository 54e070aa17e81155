// Policies: the named, server-side limits (`--policies FILE`, JSON; format in docs/api.md).
//
// A policy maps a name ("api") to one or more limits charged all-or-nothing, with per-tier and per-key
// overrides. A PolicySet is immutable once built; Policies holds the current one and swaps it
// atomically on Reload, so requests in flight keep the set they started with and stored states are
// never dropped (states are keyed by name, and the names do not change with the file).
//
// Thread safety: Policies is safe for concurrent use from many threads without external
// synchronisation. Current() takes no lock while the set is unchanged: the set is a
// Published<PolicySet>, read through a per-thread cache at one atomic load (plus the shared_ptr's
// reference count); the first read on each thread after a reload takes the writer mutex once.
#ifndef RINGLIMIT_NODE_SERVICE_POLICIES_H_
#define RINGLIMIT_NODE_SERVICE_POLICIES_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/published.h"
#include "base/status.h"
#include "limiter/limiter.h"

namespace ringlimit::node {

// One limit of a policy. `state_name` is the name its state is stored under: the policy's name for a
// policy with one unnamed limit, else "<policy>/<limit name>". Tier and key overrides keep the names,
// so an entity that changes tier keeps its counters.
struct PolicyLimit {
  std::string state_name;
  limiter::LimitSpec spec;
};
using LimitList = std::vector<PolicyLimit>;

struct Policy {
  std::string name;
  LimitList limits;                                     // the default limits
  std::map<std::string, LimitList, std::less<>> tiers;  // tier name -> limits
  std::map<std::string, LimitList, std::less<>> keys;   // entity key -> limits (wins over tiers)

  // The limits in force for `key` requesting `tier` (empty = none): key override, else tier override,
  // else the defaults. An unknown tier gets the defaults.
  [[nodiscard]] const LimitList& Resolve(std::string_view key, std::string_view tier) const;
};

class PolicySet {
 public:
  // Parses and validates a policy file's text. Error: InvalidArgument whose message starts with the
  // offending field as a path ("policies.api.limits[1].window_ms: must be ...").
  [[nodiscard]] static Result<std::shared_ptr<const PolicySet>> Parse(std::string_view json);

  // nullptr when no policy has that name.
  [[nodiscard]] const Policy* Find(std::string_view name) const;

  // The policy whose states a state named `state_name` would be (the policy's own name, or "<policy>/..."),
  // or nullptr. Inline checks and Gubernator items may not use such a name: a caller could otherwise read,
  // replace or reset (RESET_REMAINING) a policy's counters without naming the policy.
  [[nodiscard]] const Policy* Owning(std::string_view state_name) const;
  [[nodiscard]] size_t size() const { return policies_.size(); }

 private:
  std::map<std::string, Policy, std::less<>> policies_;
};

class Policies {
 public:
  // Starts with an empty set; `path` (may be empty: no file) is read by Reload.
  explicit Policies(std::string path = "");
  Policies(const Policies&) = delete;
  Policies& operator=(const Policies&) = delete;

  // Reads and validates the file, then swaps it in. On failure the current set stays in force and
  // the error is returned: IOError ("<path>: cannot open the policy file"), or Parse's InvalidArgument.
  // With an empty path: OK, nothing changes. Call at start-up and on SIGHUP.
  [[nodiscard]] Status Reload();

  // Same from text (tests, embedding).
  [[nodiscard]] Status LoadJson(std::string_view json);

  // The set in force (never null). Callers keep the pointer for the duration of one request. A
  // Reload or LoadJson that has returned is seen by every later call, on every thread.
  [[nodiscard]] std::shared_ptr<const PolicySet> Current() const { return set_.Current(); }

  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  const std::string path_;  // constant after construction

  // Thread-safe. Holds an empty set from construction on.
  Published<PolicySet> set_;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_POLICIES_H_
