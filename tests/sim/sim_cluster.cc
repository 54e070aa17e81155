#include "tests/sim/sim_cluster.h"

#include <algorithm>
#include <utility>

namespace ringlimit::sim {

SimCluster::SimCluster(uint64_t seed, SimOptions options, std::vector<SimKey> keys)
    : options_(std::move(options)),
      world_(seed, options_.slots),
      checker_(std::move(keys)),
      disks_(options_.slots),
      skew_(options_.slots, std::chrono::nanoseconds(0)),
      nodes_(options_.slots),
      arriving_(options_.slots) {}

SimCluster::~SimCluster() {
  // Every node's queued work first (it may point into the nodes), then the nodes.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (world_.up(static_cast<int>(i))) world_.StopLife(static_cast<int>(i));
  }
  for (auto& node : nodes_) node.reset();
}

int SimCluster::SlotOf(std::string_view id) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (IdOf(static_cast<int>(i)) == id) return static_cast<int>(i);
  }
  return -1;
}

int SimCluster::SlotOfAddress(std::string_view address) const {
  if (address.substr(0, 4) != "sim/") return -1;
  return SlotOf(address.substr(4));
}

std::vector<int> SimCluster::Running() const {
  std::vector<int> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i] != nullptr && !nodes_[i]->exited()) out.push_back(static_cast<int>(i));
  }
  return out;
}

void SimCluster::Start(int slot, const std::vector<int>& seeds) {
  if (nodes_[slot] != nullptr) return;
  const uint64_t life = world_.StartLife(slot);
  nodes_[slot] = std::make_unique<SimNode>(*this, slot, life, disks_[slot]);
  std::vector<std::string> addresses;
  for (int s : seeds) addresses.push_back(AddressOf(s));
  world_.Trace(slot, TraceKind::kFault, "start " + IdOf(slot) + (seeds.empty() ? " alone" : " joining"));
  nodes_[slot]->Start(addresses);
}

void SimCluster::Crash(int slot) {
  if (nodes_[slot] == nullptr) return;
  world_.Trace(slot, TraceKind::kFault, "crash " + IdOf(slot));
  Stop(slot);
}

void SimCluster::Stop(int slot) {
  // The clients' connections break: checks the node had, and checks on their way to it, are lost.
  nodes_[slot]->FailPending(Outcome::kLost);
  for (uint64_t check : std::exchange(arriving_[slot], {})) {
    checker_.Answered(check, world_.now(), Outcome::kLost, 0);
    if (world_.tracing())
      world_.Trace(slot, TraceKind::kCheck, "check #" + std::to_string(check) + " answered: lost");
  }
  world_.StopLife(slot);
  nodes_[slot].reset();
}

void SimCluster::Pause(int slot) {
  if (nodes_[slot] == nullptr) return;
  world_.Trace(slot, TraceKind::kFault, "pause " + IdOf(slot));
  world_.Pause(slot);
}

void SimCluster::Resume(int slot) {
  if (nodes_[slot] == nullptr) return;
  world_.Trace(slot, TraceKind::kFault, "resume " + IdOf(slot));
  world_.Resume(slot);
}

void SimCluster::Leave(int slot) {
  if (nodes_[slot] == nullptr) return;
  world_.Trace(slot, TraceKind::kFault, "leave " + IdOf(slot));
  // The node exits (its process ends) once it is done: its life is over, its disk stays.
  world_.Schedule(world_.now(), slot, world_.life(slot), [this, slot] {
    nodes_[slot]->Leave([this, slot] {
      world_.At(world_.now(), [this, slot] {
        if (nodes_[slot] == nullptr) return;
        world_.Trace(slot, TraceKind::kFault, "exit " + IdOf(slot));
        Stop(slot);
      });
    });
  });
}

void SimCluster::Cut(int from, int to, bool cut) {
  world_.Trace(-1, TraceKind::kFault, std::string(cut ? "cut " : "restore ") + IdOf(from) + "->" + IdOf(to));
  if (cut) {
    cut_.insert({from, to});
  } else {
    cut_.erase({from, to});
  }
}

void SimCluster::Partition(const std::vector<int>& side, bool cut) {
  for (int a : side) {
    for (size_t b = 0; b < nodes_.size(); ++b) {
      if (std::find(side.begin(), side.end(), static_cast<int>(b)) != side.end()) continue;
      Cut(a, static_cast<int>(b), cut);
      Cut(static_cast<int>(b), a, cut);
    }
  }
}

void SimCluster::ClientCheck(size_t key, int entry) {
  const uint64_t check = checker_.Sent(key, entry, world_.now());
  world_.Hash(check, key * 64 + static_cast<uint64_t>(entry));
  if (world_.tracing()) {
    world_.Trace(
        entry, TraceKind::kCheck,
        "check #" + std::to_string(check) + " key " + checker_.keys()[key].key + " enters " + IdOf(entry));
  }
  if (nodes_[entry] == nullptr || nodes_[entry]->exited() || nodes_[entry]->draining()) {
    // Connection refused (or a draining node refusing new requests).
    checker_.Answered(check, world_.now(), Outcome::kUnavailable, 0);
    if (world_.tracing()) {
      world_.Trace(entry, TraceKind::kCheck, "check #" + std::to_string(check) + " answered: unavailable");
    }
    return;
  }
  // The client is next to the node: its request is queued for the node now (and waits while it is paused).
  arriving_[entry].insert(check);
  world_.Schedule(world_.now(), entry, world_.life(entry), [this, entry, check, key] {
    arriving_[entry].erase(check);
    nodes_[entry]->ClientCheck(check, key);
  });
}

MonoTime SimCluster::Latency() {
  const auto lo = std::chrono::duration_cast<MonoTime>(options_.network.min_latency).count();
  const auto hi = std::chrono::duration_cast<MonoTime>(options_.network.max_latency).count();
  return MonoTime(static_cast<int64_t>(world_.Uniform(static_cast<uint64_t>(lo), static_cast<uint64_t>(hi))));
}

void SimCluster::SendMembership(int from, const ring::Outgoing& outgoing) {
  const int to = SlotOfAddress(outgoing.to_address);
  if (to < 0 || to == from || !world_.up(to) || IsCut(from, to)) return;
  if (world_.Chance(options_.network.drop)) return;
  const int copies = world_.Chance(options_.network.duplicate) ? 2 : 1;
  const uint64_t life = world_.life(to);
  for (int i = 0; i < copies; ++i) {
    world_.Schedule(world_.now() + Latency(), to, life,
                    [this, to, message = outgoing.message] { nodes_[to]->Receive(message); });
  }
}

namespace {

// One request's state, shared by its timeout, its delivery (or deliveries) and its answer.
struct PendingCall {
  SimCluster::CallDone done_fn;
  bool done = false;

  void Finish(peer::PeerResult result) {
    if (done) return;
    done = true;
    SimCluster::CallDone d = std::move(done_fn);
    done_fn = nullptr;
    d(std::move(result));
  }
  void Fail(peer::PeerErrorKind kind, const char* why) { Finish(peer::PeerResult::Error(kind, why)); }
};

const char* MethodName(peer::Method method) {
  switch (method) {
    case peer::METHOD_FORWARD_CHECK:
      return "forward";
    case peer::METHOD_STATE_UPDATE:
      return "state-update";
    case peer::METHOD_HANDOFF_DONE:
      return "handoff-done";
    case peer::METHOD_GRANT_REQUEST:
      return "grant-request";
    case peer::METHOD_GRANT_RELEASE:
      return "grant-release";
    case peer::METHOD_GRANT_RECALL:
      return "grant-recall";
    default:
      return "other";
  }
}

}  // namespace

SimCluster::CallDone SimCluster::TracedForward(int from, std::string_view to_address,
                                               const std::string& payload, CallDone done) {
  peer::ForwardCheckRequest request;
  if (!request.ParseFromString(payload) || request.checks_size() == 0) return done;
  const int to = SlotOfAddress(to_address);
  std::string text = "check #" + std::to_string(request.checks(0).check_id()) + " forwarded " + IdOf(from) +
                     "->" + (to < 0 ? std::string(to_address) : IdOf(to));
  if (!request.relay_to().empty()) text += " to relay to " + request.relay_to();
  for (int i = 0; i < request.tried_size(); ++i) text += (i == 0 ? ", tried " : " ") + request.tried(i);
  text += ", waiting " + std::to_string(request.wait_ms()) + " ms";
  world_.Trace(from, TraceKind::kCheck, text);
  return [this, from, text, done = std::move(done)](peer::PeerResult result) mutable {
    std::string outcome = result.ok() ? "answered" : "failed: " + result.status().ToString();
    if (result.ok()) {
      peer::ForwardCheckResponse response;
      if (response.ParseFromString(result.payload()) && response.results_size() > 0) {
        outcome +=
            " " + peer::CheckStatus_Name(response.results(0).status()) + " by " + response.results(0).owner();
      }
    }
    world_.Trace(from, TraceKind::kCheck, text.substr(0, text.find(" forwarded")) + " forward " + outcome);
    done(std::move(result));
  };
}

void SimCluster::Request(int from, std::string_view to_id, peer::Method method, std::string payload,
                         std::chrono::milliseconds timeout, replication::ClusterLink::Reply reply) {
  const int to = SlotOf(to_id);
  Call(from, to < 0 ? std::string() : AddressOf(to), method, std::move(payload), timeout,
       [reply = std::move(reply)](peer::PeerResult result) {
         if (result.ok()) {
           reply(result.TakePayload());
         } else {
           reply(std::nullopt);
         }
       });
}

void SimCluster::Call(int from, std::string_view to_address, peer::Method method, std::string payload,
                      std::chrono::milliseconds timeout, CallDone done) {
  if (world_.tracing() && method == peer::METHOD_FORWARD_CHECK)
    done = TracedForward(from, to_address, payload, std::move(done));
  if (method == peer::METHOD_GRANT_RECALL) {  // an owner recalls a slice (sent: it may be lost)
    peer::GrantRecall recall;
    if (recall.ParseFromString(payload)) checker_.Recalled(recall.grant(), world_.now());
  }
  if (world_.tracing() && (method == peer::METHOD_GRANT_REQUEST || method == peer::METHOD_GRANT_RELEASE ||
                           method == peer::METHOD_GRANT_RECALL)) {
    std::string text = std::string(MethodName(method)) + " " + IdOf(from) + "->" + std::string(to_address);
    if (method == peer::METHOD_GRANT_RELEASE) {
      peer::GrantRelease release;
      if (release.ParseFromString(payload)) {
        text += " of " + release.key() + " (grant " + std::to_string(release.grant()) + ", used " +
                std::to_string(release.used()) + ")";
      }
    }
    if (method == peer::METHOD_GRANT_RECALL) {
      peer::GrantRecall recall;
      if (recall.ParseFromString(payload)) {
        text += " of " + recall.key() + " (grant " + std::to_string(recall.grant()) + ")";
      }
    }
    world_.Trace(from, TraceKind::kNote, text);
    done = [this, from, text, done = std::move(done)](peer::PeerResult result) mutable {
      world_.Trace(from, TraceKind::kNote,
                   text + (result.ok() ? ": answered" : ": " + result.status().ToString()));
      done(std::move(result));
    };
  }
  auto call = std::make_shared<PendingCall>(PendingCall{std::move(done), false});
  const uint64_t from_life = world_.life(from);
  const MonoTime now = world_.now();
  const int to = SlotOfAddress(to_address);
  if (to < 0) {
    world_.Schedule(now, from, from_life,
                    [call] { call->Fail(peer::PeerErrorKind::kUnavailable, "no such member"); });
    return;
  }
  if (to == from) {  // its own peer server, as PeerClient reaches it over loopback: no loss, no latency
    world_.Hash(static_cast<uint64_t>(method), static_cast<uint64_t>(from * 64 + to));
    world_.Schedule(now, from, from_life, [this, call, from, from_life, method, payload]() mutable {
      nodes_[from]->Handle(
          method, std::move(payload), [this, call, from, from_life](std::optional<std::string> answer) {
            world_.Schedule(world_.now(), from, from_life, [call, answer = std::move(answer)]() mutable {
              if (answer.has_value()) {
                call->Finish(peer::PeerResult::Value(std::move(*answer)));
              } else {
                call->Fail(peer::PeerErrorKind::kRemoteError, "refused by the handler");
              }
            });
          });
    });
    return;
  }
  world_.Schedule(now + timeout, from, from_life,
                  [call] { call->Fail(peer::PeerErrorKind::kTimeout, "no answer within the timeout"); });
  world_.Hash(static_cast<uint64_t>(method), static_cast<uint64_t>(from * 64 + to));
  if (!world_.up(to)) {  // connection refused
    world_.Schedule(now + Latency(), from, from_life,
                    [call] { call->Fail(peer::PeerErrorKind::kUnavailable, "connection refused"); });
    return;
  }
  if (IsCut(from, to) || world_.Chance(options_.network.drop)) {
    if (world_.tracing()) {
      world_.Trace(from, TraceKind::kNetwork,
                   std::string(MethodName(method)) + " " + IdOf(from) + "->" + IdOf(to) + " lost");
    }
    return;  // the timeout answers
  }
  const int copies = world_.Chance(options_.network.duplicate) ? 2 : 1;
  const uint64_t to_life = world_.life(to);
  for (int i = 0; i < copies; ++i) {
    Responder respond = [this, call, from, from_life, to](std::optional<std::string> answer) {
      if (call->done || IsCut(to, from) || world_.Chance(options_.network.drop)) return;
      world_.Schedule(world_.now() + Latency(), from, from_life,
                      [call, answer = std::move(answer)]() mutable {
                        if (answer.has_value()) {
                          call->Finish(peer::PeerResult::Value(std::move(*answer)));
                        } else {
                          call->Fail(peer::PeerErrorKind::kRemoteError, "refused by the handler");
                        }
                      });
    };
    world_.Schedule(now + Latency(), to, to_life,
                    [this, to, method, payload, respond = std::move(respond)]() mutable {
                      nodes_[to]->Handle(method, std::move(payload), std::move(respond));
                    });
  }
}

bool SimCluster::Settled() const {
  std::vector<std::string> expected;
  for (int slot : Running()) {
    if (!nodes_[slot]->leaving()) expected.push_back(IdOf(slot));
  }
  uint64_t fingerprint = 0;
  for (int slot : Running()) {
    const SimNode& n = *nodes_[slot];
    if (!n.membership().joined() || n.ring() == nullptr) return false;
    const auto& members = n.ring()->members();
    if (members.size() != expected.size()) return false;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i].id != expected[i]) return false;
      auto info = n.membership().Find(expected[i]);
      if (!info.has_value() || info->state != ring::MemberState::kAlive) return false;
    }
    if (fingerprint == 0) fingerprint = n.ring()->fingerprint();
    if (n.ring()->fingerprint() != fingerprint) return false;
    if (!n.handoff().InProgress().empty()) return false;
  }
  return true;
}

}  // namespace ringlimit::sim
