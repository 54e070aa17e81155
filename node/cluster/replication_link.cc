#include "node/cluster/replication_link.h"

#include "node/cluster/cluster.h"
#include "node/peer/peer_client.h"
#include "node/peer/peer_server.h"
#include "replication/handoff.h"
#include "replication/replicator.h"

namespace ringlimit::cluster {

const std::string& ReplicationLink::self_id() const { return cluster_.self_id(); }

std::shared_ptr<const ring::RingView> ReplicationLink::ring() const { return cluster_.ring().Current(); }

bool ReplicationLink::Reachable(std::string_view id) const {
  if (id == cluster_.self_id()) return false;
  const std::shared_ptr<const ClusterSnapshot> snapshot = cluster_.Snapshot();
  const ring::MemberInfo* info = snapshot->Find(id);
  if (info == nullptr || info->peer_address.empty()) return false;
  return info->state == ring::MemberState::kAlive || info->state == ring::MemberState::kSuspect ||
         info->state == ring::MemberState::kLeaving;
}

void ReplicationLink::Send(std::string_view id, peer::Method method, std::string payload,
                           std::chrono::milliseconds timeout, Reply reply) {
  std::string address;
  {
    const std::shared_ptr<const ClusterSnapshot> snapshot = cluster_.Snapshot();
    if (const ring::MemberInfo* info = snapshot->Find(id); info != nullptr) address = info->peer_address;
  }
  if (address.empty() || id == cluster_.self_id()) {
    reply(std::nullopt);
    return;
  }
  cluster_.client().Call(
      address, static_cast<uint32_t>(method), std::move(payload),
      [reply = std::move(reply)](peer::PeerResult result) {
        if (!result.ok()) {
          reply(std::nullopt);
          return;
        }
        reply(std::string(result.payload()));
      },
      peer::CallOptions{.timeout = timeout});
}

void RegisterReplicationHandlers(Cluster& cluster, replication::Replicator& replicator,
                                 replication::HandoffManager& handoff) {
  cluster.server().Register(peer::METHOD_STATE_UPDATE,
                            [&replicator](std::string payload, peer::PeerResponder responder) {
                              if (auto ack = replicator.HandleStateUpdate(payload)) {
                                responder.Reply(std::move(*ack));
                              } else {
                                responder.Fail("malformed StateUpdateBatch");
                              }
                            });
  cluster.server().Register(peer::METHOD_HANDOFF_DONE,
                            [&handoff](std::string payload, peer::PeerResponder responder) {
                              // Answered from the handoff's executor once the ranges are released.
                              handoff.HandleHandoffDone(payload, [responder](std::optional<std::string> ack) {
                                if (ack.has_value()) {
                                  responder.Reply(std::move(*ack));
                                } else {
                                  responder.Fail("malformed HandoffDone");
                                }
                              });
                            });
}

}  // namespace ringlimit::cluster
