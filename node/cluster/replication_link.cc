#include "node/cluster/replication_link.h"

#include "node/cluster/cluster.h"
#include "node/peer/peer_client.h"
#include "node/peer/peer_server.h"
#include "replication/handoff.h"
#include "replication/replicator.h"

namespace ringlimit::cluster {

const std::string& ReplicationLink::self_id() const { return cluster_.self_id(); }

std::shared_ptr<const ring::RingView> ReplicationLink::ring() const { return cluster_.ring().Current(); }

std::shared_ptr<const replication::RouteOverrides> ReplicationLink::overrides() const {
  return cluster_.routing().Current().overrides;
}

bool ReplicationLink::Reachable(std::string_view id) const {
  if (id == cluster_.self_id()) return false;
  const std::shared_ptr<const ClusterSnapshot> snapshot = cluster_.Snapshot();
  const ring::MemberInfo* info = snapshot->Find(id);
  if (info == nullptr || info->peer_address.empty()) return false;
  return info->state == ring::MemberState::kAlive || info->state == ring::MemberState::kSuspect ||
         info->state == ring::MemberState::kLeaving;
}

namespace {

// Sends `payload` to member `id` over `cluster`'s peer client; reply(nullopt) on any failure.
void Call(Cluster& cluster, std::string_view id, peer::Method method, std::string payload,
          std::chrono::milliseconds timeout, replication::ClusterLink::Reply reply) {
  std::string address;
  {
    const std::shared_ptr<const ClusterSnapshot> snapshot = cluster.Snapshot();
    if (const ring::MemberInfo* info = snapshot->Find(id); info != nullptr) address = info->peer_address;
  }
  if (address.empty() || id == cluster.self_id() || timeout.count() <= 0) {
    reply(std::nullopt);
    return;
  }
  cluster.client().Call(
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

// How long a relay waits for the member it passes a batch on to (the sender waits about as long).
constexpr std::chrono::milliseconds kRelayWait{2000};

// An alive member other than this node and `not_this` to relay through, or "".
std::string RelayFor(const Cluster& cluster, std::string_view not_this) {
  const std::shared_ptr<const ClusterSnapshot> snapshot = cluster.Snapshot();
  for (const ring::MemberInfo& m : snapshot->members) {
    if (m.id != cluster.self_id() && m.id != not_this && m.state == ring::MemberState::kAlive &&
        !m.peer_address.empty()) {
      return m.id;
    }
  }
  return {};
}

}  // namespace

void ReplicationLink::Send(std::string_view id, peer::Method method, std::string payload,
                           std::chrono::milliseconds timeout, Reply reply) {
  Call(cluster_, id, method, std::move(payload), timeout, std::move(reply));
}

void ReplicationLink::SendRelayed(std::string_view id, std::string payload, std::chrono::milliseconds direct,
                                  std::chrono::milliseconds timeout, Reply reply) {
  auto kept = std::make_shared<std::string>(payload);  // sent again through the relay if need be
  Call(cluster_, id, peer::METHOD_STATE_UPDATE, std::move(payload), std::min(direct, timeout),
       [&cluster = cluster_, counters = counters_, target = std::string(id), kept, rest = timeout - direct,
        reply = std::move(reply)](std::optional<std::string> answer) mutable {
         const std::string relay = answer.has_value() ? std::string() : RelayFor(cluster, target);
         if (relay.empty() || rest.count() <= 0) {
           reply(std::move(answer));
           return;
         }
         // The fields of the batch appended alone set relay_to without parsing it again.
         peer::StateUpdateBatch to;
         to.set_relay_to(target);
         counters->relayed.fetch_add(1, std::memory_order_relaxed);
         Call(cluster, relay, peer::METHOD_STATE_UPDATE_RELAY, *kept + to.SerializeAsString(), rest,
              std::move(reply));
       });
}

void RegisterReplicationHandlers(Cluster& cluster, ReplicationLink& link, replication::Replicator& replicator,
                                 replication::HandoffManager& handoff) {
  cluster.server().Register(peer::METHOD_STATE_UPDATE,
                            [&replicator](std::string payload, peer::PeerResponder responder) {
                              if (auto ack = replicator.HandleStateUpdate(payload)) {
                                responder.Reply(std::move(*ack));
                              } else {
                                responder.Fail("malformed StateUpdateBatch");
                              }
                            });
  cluster.server().Register(
      peer::METHOD_STATE_UPDATE_RELAY,
      [&cluster, counters = link.counters_](std::string payload, peer::PeerResponder responder) {
        peer::StateUpdateBatch batch;
        if (!batch.ParseFromString(payload) || batch.relay_to().empty() ||
            batch.relay_to() == cluster.self_id()) {
          responder.Fail("malformed relayed StateUpdateBatch");
          return;
        }
        counters->relays_served.fetch_add(1, std::memory_order_relaxed);
        const std::string to = batch.relay_to();
        // The sender's timeout is not known here: the replication send timeout bounds the wait.
        Call(cluster, to, peer::METHOD_STATE_UPDATE, std::move(payload), kRelayWait,
             [responder](std::optional<std::string> ack) {
               if (ack.has_value()) {
                 responder.Reply(std::move(*ack));
               } else {
                 responder.Fail("the relayed member did not answer");
               }
             });
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
  cluster.server().Register(
      peer::METHOD_SYNC_RANGES, [&handoff](std::string payload, peer::PeerResponder responder) {
        // Answered once this node's states of the ranges reached the sender.
        handoff.HandleSyncRanges(payload, [responder](std::optional<std::string> answer) {
          if (answer.has_value()) {
            responder.Reply(std::move(*answer));
          } else {
            responder.Fail("malformed SyncRanges, or the push of the ranges failed");
          }
        });
      });
}

}  // namespace ringlimit::cluster
