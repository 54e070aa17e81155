#include "client/ring_routes.h"

#include "ring/membership.h"
#include "ring/ring_view.h"
#include "ring/token.h"

namespace ringlimit::client {

Result<std::shared_ptr<const RingRoutes>> RingRoutes::Build(const ClusterInfo& info) {
  std::vector<ring::RingMember> members;
  std::map<std::string, std::string, std::less<>> http;
  for (const Member& m : info.members) {
    auto state = ring::ParseMemberState(m.state);
    if (!state || !ring::IsInRing(*state)) continue;
    if (m.http_address.empty()) {
      return Error{.kind = Error::Kind::kProtocol,
                   .code = "bad_cluster",
                   .message = "member " + m.id + " has no http_address"};
    }
    members.push_back(ring::RingMember{m.id, m.vnodes, m.peer_address});
    http[m.id] = m.http_address;
  }
  if (members.empty()) {
    return Error{.kind = Error::Kind::kProtocol,
                 .code = "bad_cluster",
                 .message = "node " + info.node_id + " reports no member on the ring"};
  }
  auto built = ring::RingView::Create(info.ring_version, std::move(members));
  if (!built.ok()) {
    return Error{.kind = Error::Kind::kProtocol, .code = "bad_cluster", .message = built.status().message()};
  }
  return std::shared_ptr<const RingRoutes>(
      new RingRoutes(std::move(built).value(), std::move(http), info.ring_version));
}

RingRoutes::RingRoutes(std::shared_ptr<const ring::RingView> view,
                       std::map<std::string, std::string, std::less<>> http, uint64_t ring_version)
    : view_(std::move(view)), http_(std::move(http)), ring_version_(ring_version) {}

RingRoutes::~RingRoutes() = default;

std::vector<Route> RingRoutes::PreferenceList(std::string_view key, size_t n) const {
  std::vector<Route> out;
  for (const ring::RingMember* m : view_->PreferenceList(ring::RingToken(key), n)) {
    out.push_back(Route{m->id, http_.find(m->id)->second});
  }
  return out;
}

Route RingRoutes::Owner(std::string_view key) const {
  const ring::RingMember* m = view_->Owner(ring::RingToken(key));
  return Route{m->id, http_.find(m->id)->second};
}

uint64_t RingRoutes::fingerprint() const { return view_->fingerprint(); }

std::vector<Route> RingRoutes::Members() const {
  std::vector<Route> out;
  for (const auto& [id, address] : http_) out.push_back(Route{id, address});
  return out;
}

bool RingRoutes::Contains(std::string_view id) const { return view_->Find(id) != nullptr; }

}  // namespace ringlimit::client
