#include "node/forward/routing.h"

#include <algorithm>

namespace ringlimit::cluster {
namespace {

const ring::MemberInfo* FindMember(std::span<const ring::MemberInfo> members, std::string_view id) {
  auto it = std::lower_bound(members.begin(), members.end(), id,
                             [](const ring::MemberInfo& m, std::string_view v) { return m.id < v; });
  return it != members.end() && it->id == id ? &*it : nullptr;
}

}  // namespace

ForwardTargetList ForwardTargets(ring::Token token, std::string_view self,
                                 const std::optional<std::string>& route_override, const ring::RingView* ring,
                                 std::span<const ring::MemberInfo> members, size_t replicas,
                                 uint32_t max_attempts) {
  ForwardTargetList targets;
  targets.reserve(std::max<size_t>(max_attempts, replicas));
  auto add = [&](const std::string& id, bool first) {
    if (targets.size() >= std::max<size_t>(max_attempts, replicas)) return;
    if (std::any_of(targets.begin(), targets.end(), [&](const ForwardTarget& t) { return t.id == id; }))
      return;
    const ring::MemberInfo* info = FindMember(members, id);
    if (id != self && (info == nullptr || info->peer_address.empty() ||
                       (!first && info->state != ring::MemberState::kAlive &&
                        info->state != ring::MemberState::kSuspect))) {
      return;
    }
    targets.push_back(ForwardTarget{id, info != nullptr ? info->peer_address : std::string()});
  };
  if (route_override.has_value()) add(*route_override, true);
  if (ring != nullptr) {
    const size_t r = std::max<size_t>(replicas, max_attempts);
    for (const ring::RingMember* member : ring->PreferenceList(token, r)) add(member->id, targets.empty());
  }
  return targets;
}

bool HoldsKey(ring::Token token, std::string_view self, const std::optional<std::string>& route_override,
              const ring::RingView* ring, size_t replicas) {
  if (route_override.has_value() && *route_override == self) return true;
  if (ring == nullptr) return false;
  for (const ring::RingMember* member : ring->PreferenceList(token, replicas)) {
    if (member->id == self) return true;
  }
  return false;
}

bool PassesOn(uint32_t hops, std::string_view decider, std::string_view self, std::string_view from) {
  return hops < kMaxHops && !decider.empty() && decider != self && decider != from;
}

}  // namespace ringlimit::cluster
