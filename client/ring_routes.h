// RingRoutes: where each entity key lives, as the cluster's nodes compute it.
//
// Built from one GET /v1/cluster answer: the members the nodes put on the ring (alive, suspect and
// leaving, with their vnodes) go through the same ring::RingView::Build the nodes use, so the client's
// owner of a key is the nodes' owner whenever both saw the same member set. Each member's http_address
// is where the client sends that member's keys.
//
// Thread safety: immutable after Build; share as std::shared_ptr<const RingRoutes> between threads.
#ifndef RINGLIMIT_CLIENT_RING_ROUTES_H_
#define RINGLIMIT_CLIENT_RING_ROUTES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "client/error.h"
#include "client/types.h"

namespace ringlimit::ring {
class RingView;
}

namespace ringlimit::client {

// A member a key can be sent to.
struct Route {
  std::string id{};
  std::string http_address{};
};

class RingRoutes {
 public:
  // Fails with kProtocol if the members cannot form a ring or none is on it.
  [[nodiscard]] static Result<std::shared_ptr<const RingRoutes>> Build(const ClusterInfo& info);

  RingRoutes(const RingRoutes&) = delete;
  RingRoutes& operator=(const RingRoutes&) = delete;
  ~RingRoutes();

  // The owner of `key` followed by the next distinct members clockwise (at most `n`).
  [[nodiscard]] std::vector<Route> PreferenceList(std::string_view key, size_t n) const;
  // The owner of `key`. REQUIRES: the ring is not empty (guaranteed by Build).
  [[nodiscard]] Route Owner(std::string_view key) const;

  // The ring_version reported by the node the view came from (per-node; for display).
  [[nodiscard]] uint64_t ring_version() const { return ring_version_; }
  // A hash of the member set; equal to the nodes' RingView::fingerprint() for the same members.
  [[nodiscard]] uint64_t fingerprint() const;
  // The ring members, sorted by id.
  [[nodiscard]] std::vector<Route> Members() const;
  // Whether `id` owns part of the ring.
  [[nodiscard]] bool Contains(std::string_view id) const;

 private:
  RingRoutes(std::shared_ptr<const ring::RingView> view, std::map<std::string, std::string, std::less<>> http,
             uint64_t ring_version);

  // Constant after construction.
  std::shared_ptr<const ring::RingView> view_;
  std::map<std::string, std::string, std::less<>> http_;  // member id -> http_address
  uint64_t ring_version_;
};

}  // namespace ringlimit::client

#endif  // RINGLIMIT_CLIENT_RING_ROUTES_H_
