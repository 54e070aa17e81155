#include "node/cluster/cluster_forward_host.h"

#include <random>

#include "node/cluster/cluster.h"
#include "node/forward/forwarder.h"
#include "node/grants/grant_driver.h"
#include "node/peer/peer_client.h"
#include "node/peer/peer_server.h"

namespace ringlimit::cluster {

void ClusterForwardHost::RegisterHandler(Forwarder& forwarder) {
  cluster_.server().Register(
      peer::METHOD_FORWARD_CHECK, [&forwarder](std::string payload, peer::PeerResponder responder) {
        forwarder.Serve(std::move(payload), [responder = std::move(responder)](peer::PeerResult result) {
          if (result.ok()) {
            responder.Reply(result.TakePayload());
          } else {
            responder.Fail(result.status().message());
          }
        });
      });
}

void ClusterForwardHost::RegisterGrantHandlers(GrantDriver& grants) {
  for (peer::Method method :
       {peer::METHOD_GRANT_REQUEST, peer::METHOD_GRANT_RELEASE, peer::METHOD_GRANT_RECALL}) {
    cluster_.server().Register(method, [&grants, method](std::string payload, peer::PeerResponder responder) {
      grants.Serve(method, std::move(payload), [responder = std::move(responder)](peer::PeerResult result) {
        if (result.ok()) {
          responder.Reply(result.TakePayload());
        } else {
          responder.Fail(result.status().message());
        }
      });
    });
  }
}

const std::string& ClusterForwardHost::self_id() const { return cluster_.self_id(); }

uint32_t ClusterForwardHost::replicas() const { return cluster_.options().replicas; }

const replication::RoutingTable& ClusterForwardHost::routing() const { return cluster_.routing().Current(); }

bool ClusterForwardHost::Paused() const { return cluster_.Paused(); }

Status ClusterForwardHost::ClockRefusal() const { return cluster_.ClockRefusal(); }

bool ClusterForwardHost::ClockSkewed() const { return cluster_.ClockSkewed(); }

Status ClusterForwardHost::MinorityRefusal() const { return cluster_.MinorityRefusal(); }

std::optional<ring::OffsetEstimate> ClusterForwardHost::ClockOffsetOf(std::string_view member) const {
  return cluster_.ClockOffsetOf(member);
}

int64_t ClusterForwardHost::WallNowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::chrono::nanoseconds ClusterForwardHost::SteadyNow() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch());
}

uint64_t ClusterForwardHost::Random() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ static_cast<uint64_t>(device());
}

void ClusterForwardHost::Call(const std::string& address, peer::Method method, std::string payload,
                              std::chrono::milliseconds timeout, CallDone done) {
  cluster_.client().Call(address, method, std::move(payload), std::move(done),
                         peer::CallOptions{.timeout = timeout});
}

void ClusterForwardHost::After(std::chrono::nanoseconds delay, std::function<void()> fn) {
  cluster_.After(delay, std::move(fn));
}

}  // namespace ringlimit::cluster
