#include "node/cluster/replication_link.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

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

bool ReplicationLink::Deciding() const { return !cluster_.ClockSkewed(); }

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

namespace {

// One hedged send (SendRelayed): the direct call and, once `direct` passed without an answer (or the direct
// call failed), the same batch through a relay. The first acknowledgement answers; nullopt once every leg
// that was started failed. Legs answer on the peer client's threads, the timer on the cluster's strand.
struct Hedge {
  std::mutex mu;
  bool answered = false;
  bool direct_done = false;    // the direct call failed
  bool relay_started = false;  // tried (or found no relay)
  bool relay_running = false;
  replication::ClusterLink::Reply reply;
  std::string kept;  // the batch, sent again through the relay
  std::string target;
  std::chrono::milliseconds relay_timeout{0};  // what the relayed leg may take: the send's timeout - `direct`

  // Called with mu held: whether every leg is over (nothing can answer any more).
  [[nodiscard]] bool Exhausted() const { return direct_done && relay_started && !relay_running; }
};

void Answer(const std::shared_ptr<Hedge>& hedge, std::unique_lock<std::mutex>& lock,
            std::optional<std::string> answer) {
  hedge->answered = true;
  replication::ClusterLink::Reply reply = std::move(hedge->reply);
  lock.unlock();
  reply(std::move(answer));
}

// Starts the relayed leg unless it was started, or answers nullopt when none can start and nothing else
// runs. Called with the lock held; releases it.
void StartRelay(Cluster& cluster, const std::shared_ptr<std::atomic<uint64_t>>& relayed,
                const std::shared_ptr<Hedge>& hedge, std::unique_lock<std::mutex>& lock) {
  if (hedge->answered || hedge->relay_started) return;
  hedge->relay_started = true;
  const std::chrono::milliseconds left = hedge->relay_timeout;
  const std::string relay = left.count() > 0 ? RelayFor(cluster, hedge->target) : std::string();
  if (relay.empty()) {
    if (hedge->Exhausted()) Answer(hedge, lock, std::nullopt);
    return;
  }
  hedge->relay_running = true;
  // The fields of the batch appended alone set relay_to without parsing it again.
  peer::StateUpdateBatch to;
  to.set_relay_to(hedge->target);
  std::string payload = hedge->kept + to.SerializeAsString();
  lock.unlock();
  relayed->fetch_add(1, std::memory_order_relaxed);
  Call(cluster, relay, peer::METHOD_STATE_UPDATE_RELAY, std::move(payload), left,
       [hedge](std::optional<std::string> answer) {
         std::unique_lock lock(hedge->mu);
         hedge->relay_running = false;
         if (hedge->answered) return;
         if (answer.has_value() || hedge->Exhausted()) Answer(hedge, lock, std::move(answer));
       });
}

}  // namespace

void ReplicationLink::SendRelayed(std::string_view id, std::string payload, std::chrono::milliseconds direct,
                                  std::chrono::milliseconds timeout, Reply reply) {
  // Hedged, not abandoned: a direct answer that comes after `direct` (a busy holder, a slow host) still
  // counts while the relayed copy is under way, so the relay adds a path instead of replacing the faster
  // one.
  auto hedge = std::make_shared<Hedge>();
  hedge->reply = std::move(reply);
  hedge->kept = payload;
  hedge->target = std::string(id);
  hedge->relay_timeout = timeout - direct;
  auto relayed = std::shared_ptr<std::atomic<uint64_t>>(counters_, &counters_->relayed);
  Call(cluster_, id, peer::METHOD_STATE_UPDATE, std::move(payload), timeout,
       [&cluster = cluster_, relayed, hedge](std::optional<std::string> answer) {
         std::unique_lock lock(hedge->mu);
         if (hedge->answered) return;
         if (answer.has_value()) {
           Answer(hedge, lock, std::move(answer));
           return;
         }
         hedge->direct_done = true;
         if (!hedge->relay_started) {
           StartRelay(cluster, relayed, hedge, lock);
         } else if (hedge->Exhausted()) {
           Answer(hedge, lock, std::nullopt);
         }
       });
  if (direct < timeout) {
    cluster_.After(direct, [&cluster = cluster_, relayed, hedge] {
      std::unique_lock lock(hedge->mu);
      StartRelay(cluster, relayed, hedge, lock);
    });
  }
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
