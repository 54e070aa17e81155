// Headroom: the dynamic-mode signals set through PUT /v1/headroom. A signal says how much spare
// capacity (0..1) the protected system has for one policy (or inline limit name); it expires after
// its TTL, after which the headroom is 0 again (dynamic limits then behave like hard ones).
//
// Thread safety: safe for concurrent use without external synchronisation. Reads take a shared
// lock and only happen for checks whose limit is in dynamic mode.
#ifndef RINGLIMIT_NODE_API_HEADROOM_H_
#define RINGLIMIT_NODE_API_HEADROOM_H_

#include <cstddef>
#include <map>
#include <shared_mutex>
#include <string>
#include <string_view>

#include "limiter/limiter.h"

namespace ringlimit::node {

class Headroom {
 public:
  // At most `max_entries` distinct names are remembered (expired ones are purged first).
  explicit Headroom(size_t max_entries = 10'000) : max_entries_(max_entries) {}
  Headroom(const Headroom&) = delete;
  Headroom& operator=(const Headroom&) = delete;

  // Sets `name`'s headroom (REQUIRES: 0 <= value <= 1) until `expires_at`. Returns false when the
  // table is full of live signals for other names.
  [[nodiscard]] bool Set(std::string_view name, double value, limiter::TimeNs expires_at,
                         limiter::TimeNs now);

  // The live headroom of `name` at `now`; 0 when unset or expired.
  [[nodiscard]] double Get(std::string_view name, limiter::TimeNs now) const;

 private:
  struct Signal {
    double value = 0;
    limiter::TimeNs expires_at = 0;
  };

  const size_t max_entries_;  // constant after construction

  // Protected by mutex_.
  mutable std::shared_mutex mutex_;
  std::map<std::string, Signal, std::less<>> signals_;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_HEADROOM_H_
