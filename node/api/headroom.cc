#include "node/api/headroom.h"

#include <mutex>

namespace ringlimit::node {

bool Headroom::Set(std::string_view name, double value, limiter::TimeNs expires_at, limiter::TimeNs now) {
  std::unique_lock lock(mutex_);
  auto it = signals_.find(name);
  if (it == signals_.end()) {
    if (signals_.size() >= max_entries_)
      std::erase_if(signals_, [&](const auto& e) { return e.second.expires_at <= now; });
    if (signals_.size() >= max_entries_) return false;
    it = signals_.emplace(std::string(name), Signal{}).first;
  }
  it->second = Signal{value, expires_at};
  return true;
}

double Headroom::Get(std::string_view name, limiter::TimeNs now) const {
  std::shared_lock lock(mutex_);
  auto it = signals_.find(name);
  if (it == signals_.end() || it->second.expires_at <= now) return 0.;
  return it->second.value;
}

}  // namespace ringlimit::node
