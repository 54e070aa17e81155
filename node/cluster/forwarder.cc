#include "node/cluster/forwarder.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "node/cluster/cluster.h"
#include "node/peer/peer_client.h"
#include "node/peer/peer_server.h"
#include "ring/token.h"

namespace ringlimit::cluster {

struct Forwarder::Attempt {
  std::string payload;                 // serialized ForwardCheckRequest
  std::vector<std::string> targets;    // ids, in the order to try
  std::vector<std::string> addresses;  // their peer addresses
  size_t next = 0;
  ForwardDone done;
};

Forwarder::Forwarder(Cluster& cluster, ForwarderOptions options, LocalDecider decider)
    : cluster_(cluster), options_(options), decider_(std::move(decider)) {}

void Forwarder::RegisterHandlers() {
  cluster_.server().Register(peer::METHOD_FORWARD_CHECK,
                             [this](std::string payload, peer::PeerResponder responder) {
                               std::optional<std::string> answer = decider_(payload);
                               if (!answer) {
                                 served_bad_.fetch_add(1, std::memory_order_relaxed);
                                 responder.Fail("malformed ForwardCheckRequest");
                                 return;
                               }
                               served_.fetch_add(1, std::memory_order_relaxed);
                               responder.Reply(std::move(*answer));
                             });
}

const std::string& Forwarder::self_id() const { return cluster_.self_id(); }

void Forwarder::Classify(std::span<const std::string_view> keys, std::vector<uint8_t>* remote) const {
  remote->assign(keys.size(), 0);
  const std::shared_ptr<const ring::RingView> view = cluster_.ring().Current();
  if (view == nullptr || view->empty()) return;
  const std::string& self = cluster_.self_id();
  for (size_t i = 0; i < keys.size(); ++i) {
    const ring::RingMember* owner = view->Owner(ring::RingToken(keys[i]));
    (*remote)[i] = owner != nullptr && owner->id != self ? 1 : 0;
  }
}

void Forwarder::Forward(peer::ForwardedCheck check, ForwardDone done) {
  const std::shared_ptr<const ring::RingView> view = cluster_.ring().Current();
  const std::shared_ptr<const ClusterSnapshot> snapshot = cluster_.Snapshot();
  auto attempt = std::make_shared<Attempt>();
  attempt->done = std::move(done);
  if (view != nullptr) {
    const size_t r = std::max<size_t>(cluster_.options().replicas, options_.max_attempts);
    for (const ring::RingMember* member : view->PreferenceList(ring::RingToken(check.key()), r)) {
      if (attempt->targets.size() >= options_.max_attempts) break;
      const ring::MemberInfo* info = snapshot->Find(member->id);
      const bool owner = attempt->targets.empty();
      // The owner is always tried (a false suspicion must not split its keys); fallbacks only if alive.
      if (member->id != cluster_.self_id() && (info == nullptr || info->peer_address.empty() ||
                                               (!owner && info->state != ring::MemberState::kAlive))) {
        continue;
      }
      attempt->targets.push_back(member->id);
      attempt->addresses.push_back(info != nullptr ? info->peer_address : std::string());
    }
  }
  if (attempt->targets.empty() || attempt->targets[0] == cluster_.self_id()) {
    attempt->done(std::nullopt);  // the ring moved: this node owns it now
    return;
  }
  peer::ForwardCheckRequest request;
  request.set_from(cluster_.self_id());
  request.set_owner(attempt->targets[0]);
  request.set_ring_fingerprint(view->fingerprint());
  *request.add_checks() = std::move(check);
  attempt->payload = request.SerializeAsString();
  forwarded_.fetch_add(1, std::memory_order_relaxed);
  Try(std::move(attempt));
}

void Forwarder::Try(std::shared_ptr<Attempt> attempt) {
  if (attempt->next >= attempt->targets.size() || attempt->targets[attempt->next] == cluster_.self_id()) {
    fallback_local_.fetch_add(1, std::memory_order_relaxed);
    attempt->done(std::nullopt);
    return;
  }
  const size_t index = attempt->next++;
  if (index > 0) fallback_next_.fetch_add(1, std::memory_order_relaxed);
  // The payload is needed again if this attempt fails: send a copy.
  std::string payload = attempt->payload;
  cluster_.client().Call(
      attempt->addresses[index], peer::METHOD_FORWARD_CHECK, std::move(payload),
      [this, attempt](peer::PeerResult result) mutable {
        if (result.ok()) {
          peer::ForwardCheckResponse response;
          if (response.ParseFromString(result.payload()) && response.results_size() == 1 &&
              response.results(0).status() == peer::CHECK_OK) {
            attempt->done(std::move(*response.mutable_results(0)));
            return;
          }
        }
        failures_.fetch_add(1, std::memory_order_relaxed);
        spdlog::debug("forward to {} failed: {}", attempt->targets[attempt->next - 1],
                      result.ok() ? std::string("unusable answer") : result.status().ToString());
        Try(std::move(attempt));
      },
      peer::CallOptions{.timeout = options_.timeout});
}

ForwarderStats Forwarder::stats() const {
  ForwarderStats s;
  s.forwarded = forwarded_.load(std::memory_order_relaxed);
  s.failures = failures_.load(std::memory_order_relaxed);
  s.fallback_next = fallback_next_.load(std::memory_order_relaxed);
  s.fallback_local = fallback_local_.load(std::memory_order_relaxed);
  s.served = served_.load(std::memory_order_relaxed);
  s.served_bad = served_bad_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace ringlimit::cluster
