#include "node/forward/forwarder.h"

#include <google/protobuf/arena.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/container/small_vector.hpp>

#include "node/forward/forward_wire.h"
#include "node/forward/mutation.h"
#include "node/peer/block_arena.h"
#include "node/peer/protocol.h"
#include "replication/handoff.h"
#include "replication/replicator.h"

namespace ringlimit::cluster {

struct Forwarder::Attempt {
  std::string payload;           // serialized ForwardCheckRequest
  ForwardTargetList targets;     // ids and peer addresses, in the order to try
  size_t next = 0;               // the next target to try
  uint32_t timeout_retries = 0;  // of the current target
  ring::Token token = 0;         // the key's
  int64_t deadline_wall_ns = 0;  // when the upstream sender gives up (this node's wall clock); 0: none
  bool relay_tried = false;      // the decider was tried through another member (see "Relays")
  // At this node's turn: how long it waits for the key's copy (steady clock; 0: not yet).
  std::chrono::nanoseconds copy_wait_until{0};
  ForwardDone done;
};

// A served request and where its answer goes, in one allocation: the request lives on an arena whose first
// block is part of this object, so parsing a typical request allocates nothing more.
struct Forwarder::Served {
  explicit Served(Respond respond_in)
      : respond(std::move(respond_in)), request(arena.Create<peer::ForwardCheckRequest>()) {}

  const Respond respond;
  peer::BlockArena<1024> arena;              // a request of one check fits in its first block
  peer::ForwardCheckRequest* const request;  // on `arena`
};

// Where a served check's answer goes: to the sender and, for a first attempt with a request id, into the
// dedup cache, which hands it to the check's retries. Copyable; every copy answers the same call.
class Forwarder::Reply {
 public:
  Reply(std::shared_ptr<const Respond> respond, DedupCache* dedup, RequestId id)
      : respond_(std::move(respond)), dedup_(dedup), id_(id) {}

  // The check was decided here or by the node it was passed on to: its retries get the same answer.
  void Answer(std::string payload) const {
    if (dedup_ != nullptr) dedup_->Finish(id_, payload);
    (*respond_)(peer::PeerResult::Value(std::move(payload)));
  }
  // Answered without a decision (a CHECK_UNAVAILABLE result): forgotten like Refuse.
  void Decline(std::string payload) const {
    if (dedup_ != nullptr) dedup_->Abandon(id_);
    (*respond_)(peer::PeerResult::Value(std::move(payload)));
  }
  // Nothing was charged: the check is forgotten, its waiting retries refused; the sender goes on.
  void Refuse(std::string why) const {
    if (dedup_ != nullptr) dedup_->Abandon(id_);
    (*respond_)(peer::PeerResult::Error(peer::PeerErrorKind::kRemoteError, std::move(why)));
  }

 private:
  std::shared_ptr<const Respond> respond_;  // shared by the copies: one answer, however many hold it
  DedupCache* dedup_;                       // null: no id, nothing to remember
  RequestId id_;
};

namespace {

// Random, never 0 (0 in both halves means "no id").
uint64_t RandomNonce(ForwardHost& host) {
  const uint64_t nonce = host.Random();
  return nonce != 0 ? nonce : 1;
}

// The dedup options in effect: the ttl covers every retry of a check twice over.
DedupOptions EffectiveDedup(const ForwarderOptions& options) {
  DedupOptions dedup = options.dedup;
  dedup.ttl = std::max(dedup.ttl, 2 * (1 + options.timeout_retries) * options.timeout);
  return dedup;
}

// An attempt's deadline stamp alone (AppendDeadlineStamp): appended to an encoded request it sets (or, on a
// retry, resets) those fields without encoding the request again.
std::string DeadlineStamp(int64_t wall_now_ns, std::chrono::milliseconds wait) {
  std::string stamp;
  AppendDeadlineStamp(wall_now_ns, wait, stamp);
  return stamp;
}

// The one decided result in a forward's answer (CHECK_OK, or CHECK_UNACKED: charged, answered 503, not
// to be tried elsewhere), or nullopt: the call failed, or the answer is a refusal (CHECK_UNAVAILABLE) or
// does not parse as one result.
std::optional<peer::ForwardedResult> DecidedResult(const peer::PeerResult& result) {
  if (!result.ok()) return std::nullopt;
  return DecidedResultOf(result.payload());
}

RequestId IdOf(const peer::ForwardedCheck& check) {
  return RequestId{check.request_id_hi(), check.request_id_lo()};
}

// Holds a decision pin (DecisionFence) for its scope: from the routing read to the store's charge.
class DecisionPin {
 public:
  explicit DecisionPin(const node::CheckRouter& router) : router_(router), pin_(router.EnterDecisions()) {}
  ~DecisionPin() { router_.ExitDecisions(pin_); }
  DecisionPin(const DecisionPin&) = delete;
  DecisionPin& operator=(const DecisionPin&) = delete;

 private:
  const node::CheckRouter& router_;
  const uint32_t pin_;
};

}  // namespace

Status Validate(const ForwarderOptions& options) {
  if (options.timeout.count() <= 0) return Status::InvalidArgument("forward timeout: must be positive");
  if (options.max_attempts < 1) return Status::InvalidArgument("forward attempts: must be at least 1");
  if (options.timeout_retries > 3) return Status::InvalidArgument("forward timeout retries: at most 3");
  return Validate(options.dedup);
}

Forwarder::Forwarder(ForwardHost& host, ForwarderOptions options, LocalDecider decider,
                     replication::Replicator* replicator, replication::HandoffManager* handoff)
    : host_(host),
      options_(options),
      decider_(std::move(decider)),
      replicator_(replicator),
      handoff_(handoff),
      request_nonce_(RandomNonce(host)),
      dedup_(EffectiveDedup(options)) {}

void Forwarder::DecideAndReply(const std::shared_ptr<peer::ForwardCheckRequest>& request_ptr,
                               const Reply& reply) {
  const peer::ForwardCheckRequest& request = *request_ptr;
  Status why = DecideRefusal();
  if (why.ok() && SenderGaveUp(request)) {
    why = Status::Unavailable("the sender gave up on this attempt before it was decided");
  }
  if (why.ok() && host_.Paused()) {
    paused_.fetch_add(1, std::memory_order_relaxed);
    why = Status::Unavailable("this node was just paused and is catching up: it does not decide yet");
  }
  if (!why.ok()) {
    // A skewed clock or a pause: every check answered CHECK_UNAVAILABLE, so the sender goes on to the next
    // holder.
    std::vector<node::ForwardedOutcome> declined(static_cast<size_t>(request.checks_size()));
    for (size_t i = 0; i < declined.size(); ++i) {
      declined[i].check_id = request.checks(static_cast<int>(i)).check_id();
      declined[i].status = peer::CHECK_UNAVAILABLE;
      declined[i].owner = self_id();
      declined[i].error = why.message();
    }
    std::string answer;
    AppendForwardResponse(self_id(), declined, answer);
    reply.Decline(std::move(answer));
    return;
  }
  // The outcomes in a buffer each thread keeps; the answer's bytes are written from them at once.
  thread_local std::vector<node::ForwardedOutcome> outcomes;
  decider_(request, outcomes);
  boost::container::small_vector<std::string_view, 1> keys;
  bool any_admitted = false;
  for (size_t i = 0; i < static_cast<size_t>(request.checks_size()) && i < outcomes.size(); ++i) {
    if (outcomes[i].status != peer::CHECK_OK) continue;
    keys.push_back(request.checks(static_cast<int>(i)).key());
    any_admitted = any_admitted || outcomes[i].allowed;
  }
  std::string answer;
  answer.reserve(128);
  AppendForwardResponse(self_id(), outcomes, answer);
  // The answer should a majority of the holders not acknowledge (--failure-mode closed only): charged here,
  // but not every holder that could decide these keys next has it -- not an admission.
  std::string unacked;
  if (any_admitted && replicator_ != nullptr && options_.failure_mode == FailureMode::kClosed) {
    for (node::ForwardedOutcome& o : outcomes) {
      if (o.status != peer::CHECK_OK || !o.allowed) continue;
      o.status = peer::CHECK_UNACKED;
      o.decisions.clear();
      o.allowed = false;
      o.error = "a majority of its holders did not acknowledge the decision (--failure-mode closed)";
    }
    AppendForwardResponse(self_id(), outcomes, unacked);
  }
  Decided(keys, [reply, answer = std::move(answer), unacked = std::move(unacked)](bool acked) mutable {
    reply.Answer(acked || unacked.empty() ? std::move(answer) : std::move(unacked));
  });
}

void Forwarder::Serve(std::string payload, Respond respond_in) {
  // One allocation per served request: the request is parsed onto an arena whose first block lives in the
  // same object as the responder; both are handed on through aliasing shared_ptrs.
  auto served = std::make_shared<Served>(std::move(respond_in));
  const std::shared_ptr<const Respond> respond(served, &served->respond);
  auto fail = [&respond](std::string why) {
    (*respond)(peer::PeerResult::Error(peer::PeerErrorKind::kRemoteError, std::move(why)));
  };
  const std::shared_ptr<peer::ForwardCheckRequest> request(served, served->request);
  if (!request->ParseFromString(payload)) {
    served_bad_.fetch_add(1, std::memory_order_relaxed);
    fail("malformed ForwardCheckRequest");
    return;
  }
  served_.fetch_add(static_cast<uint64_t>(request->checks_size()), std::memory_order_relaxed);
  // A node still joining (a sender saw it in the ring first, e.g. restarted under the same id) does not
  // decide: its counters are nothing or a stale copy until the current owners' handoffs arrive. The
  // failure sends the sender on to the key's next node, which has them.
  if (!Routing()) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    fail("not joined yet");
    return;
  }
  if (SenderGaveUp(*request)) {
    fail("the sender gave up on this attempt before it was served");
    return;
  }
  // Forward sends one check per request; a check with an id is served once, its retries answered alike.
  // Not a relay request: a relay never charges (the decider it passes the check to has its own cache), and
  // were it registered, the sender's direct attempt at this node after the relay failed -- same id -- would
  // wait for the relay and fail with it.
  const RequestId id =
      request->checks_size() == 1 && request->relay_to().empty() ? IdOf(request->checks(0)) : RequestId{};
  if (id.empty()) {
    ServeFirst(request, Reply(respond, nullptr, id));
    return;
  }
  DedupCache::Lookup found =
      dedup_.Begin(id, host_.SteadyNow(), [respond](std::optional<std::string> answer) {
        if (answer.has_value()) {
          (*respond)(peer::PeerResult::Value(std::move(*answer)));
        } else {
          (*respond)(peer::PeerResult::Error(peer::PeerErrorKind::kRemoteError,
                                             "the first attempt of this check charged nothing here: go on"));
        }
      });
  switch (found.outcome) {
    case DedupCache::Outcome::kNew:
      ServeFirst(request, Reply(respond, &dedup_, id));
      return;
    case DedupCache::Outcome::kDone:
      (*respond)(peer::PeerResult::Value(std::move(found.answer)));
      return;
    case DedupCache::Outcome::kWaiting:
      return;  // answered when the first attempt is
  }
}

void Forwarder::ServeFirst(const std::shared_ptr<peer::ForwardCheckRequest>& request, const Reply& reply) {
  if (!request->relay_to().empty()) {
    RelayOn(request, reply);
    return;
  }
  const DecisionPin pin(*this);
  if (request->checks_size() == 1 && handoff_ != nullptr) {
    // A key whose range this node is switching to its new owner waits for the switch, then goes to the
    // owner -- even if that is the sender (which passed it here while it waited for the switch) and
    // beyond the hop limit: the owner has the range by then and decides it.
    const ring::Token token = ring::RingToken(request->checks(0).key());
    if (handoff_->Switching(token)) {
      std::function<void()> resume = [this, request, reply] {
        const DecisionPin pin(*this);
        const std::string decider = DeciderOf(ring::RingToken(request->checks(0).key()));
        if (decider.empty() || decider == self_id()) {
          DecideAndReply(request, reply);
        } else if (decider == request->from() && request->checks(0).hops() >= kMaxHops) {
          // The new owner passed the check here while it waited for this switch, and serves it under
          // the check's id meanwhile: sent back, its dedup cache would hold it as a retry of itself
          // until both attempts time out. Refused instead: nothing was charged here, and the sender,
          // holding the range by now, decides it.
          reply.Refuse("switched: the key's new owner, the sender, decides it");
        } else {
          PassOn(request, reply);
        }
      };
      if (handoff_->HoldWhileSwitching(token, resume)) return;
    }
  }
  // Pass on what this node would not decide itself (Forward sends one check per request). Never back to
  // the sender: a sender whose ring disagrees with ours gets the answer from here instead; nor to a holder
  // the sender tried already and gave up on.
  if (request->checks_size() == 1) {
    const ring::Token token = ring::RingToken(request->checks(0).key());
    const std::string decider = DeciderOf(token);
    const bool decider_tried =
        std::find(request->tried().begin(), request->tried().end(), decider) != request->tried().end();
    if (!decider_tried && PassesOn(request->checks(0).hops(), decider, self_id(), request->from())) {
      PassOn(request, reply);
      return;
    }
    if (host_.routing().Relinquished(token, self_id())) {
      // Sent back by the node this one handed the key to (its ring still names this node): that node
      // has the counter, this one an older copy. The failure makes the sender decide it.
      refused_.fetch_add(1, std::memory_order_relaxed);
      reply.Refuse("left: the key is decided by its new owner");
      return;
    }
    if (options_.failure_mode == FailureMode::kClosed && !HoldsCopy(token)) {
      // Out of hops at a node with no copy of the key: the sender goes on to the next holder.
      closed_.fetch_add(1, std::memory_order_relaxed);
      reply.Refuse("not a holder of the key (--failure-mode closed)");
      return;
    }
  }
  DecideAndReply(request, reply);
}

void Forwarder::PassOn(const std::shared_ptr<peer::ForwardCheckRequest>& request, const Reply& reply) {
  passed_on_.fetch_add(1, std::memory_order_relaxed);
  peer::ForwardedCheck check = request->checks(0);
  check.set_hops(check.hops() + 1);
  ForwardBefore(std::move(check), SenderDeadline(*request).value_or(0),
                [this, request, reply](std::optional<peer::ForwardedResult> result) {
                  if (!result) {
                    if (host_.routing().Relinquished(ring::RingToken(request->checks(0).key()), self_id())) {
                      // This node left the key's range: its copy may be older than the new owner's, so it
                      // must not decide. The failure sends the original sender on to the key's next node.
                      reply.Refuse("left: the key's new owner did not answer");
                      return;
                    }
                    if (options_.failure_mode == FailureMode::kClosed &&
                        !HoldsCopy(ring::RingToken(request->checks(0).key()))) {
                      closed_.fetch_add(1, std::memory_order_relaxed);
                      reply.Refuse("no holder of the key answered (--failure-mode closed)");
                      return;
                    }
                    DecideAndReply(request, reply);
                    return;
                  }
                  peer::ForwardCheckResponse response;
                  response.set_from(self_id());
                  result->set_check_id(request->checks(0).check_id());
                  *response.add_results() = std::move(*result);
                  reply.Answer(response.SerializeAsString());
                });
}

const std::string& Forwarder::self_id() const { return host_.self_id(); }

bool Forwarder::Routing() const { return host_.routing().ring != nullptr; }

std::optional<int64_t> Forwarder::SenderDeadline(const peer::ForwardCheckRequest& request) const {
  if (request.sent_wall_ns() == 0 || request.wait_ms() == 0) return std::nullopt;
  const std::optional<ring::OffsetEstimate> offset = host_.ClockOffsetOf(request.from());
  if (!offset) return std::nullopt;
  const int64_t wait_ns = static_cast<int64_t>(request.wait_ms()) * 1'000'000;
  // A reading of the sender's clock less certain than a quarter of the wait says nothing about it: the
  // only sample may be a probe answered across a pause of either node (a round trip of most of a second).
  // Judged with it, every check from a sender just back from a pause looked given up, so the sender,
  // refused by every holder, decided from its own copy, which lacked what they admitted meanwhile
  // (gray clock_skew_*: over-admission in the default mode, a refused check under --failure-mode closed).
  if (offset->uncertainty.count() > wait_ns / 4) return std::nullopt;
  // A send time that reads minutes away from now was not taken on the clock measured: the sender restarted
  // under another one (a member keeps its estimate across a restart until its first new sample, which then
  // replaces it; ClusterPlanner). Not judged.
  constexpr int64_t kStepped = int64_t{300} * 1'000'000'000;
  const int64_t sent_here = request.sent_wall_ns() - offset->offset.count();
  const int64_t now = host_.WallNowNs();
  if (sent_here < now - kStepped || sent_here > now + kStepped) return std::nullopt;
  // The send time read on this node's clock (the sender's minus its offset), early by the uncertainty of
  // that reading; a quarter of the wait is left for the answer's way back.
  return sent_here - offset->uncertainty.count() + wait_ns - wait_ns / 4;
}

bool Forwarder::SenderGaveUp(const peer::ForwardCheckRequest& request) const {
  const std::optional<int64_t> deadline = SenderDeadline(request);
  if (!deadline || host_.WallNowNs() < *deadline) return false;
  expired_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::optional<node::CheckRouter::Refusal> Forwarder::RefusesChecks() const {
  if (options_.failure_mode != FailureMode::kClosed) return std::nullopt;
  const Status why = host_.MinorityRefusal();
  if (why.ok()) return std::nullopt;
  minority_refusals_.fetch_add(1, std::memory_order_relaxed);
  return Refusal{Refusal::Reason::kMinority, why.message()};
}

Status Forwarder::DecideRefusal() const {
  if (Status why = host_.ClockRefusal(); !why.ok()) {
    clock_refusals_.fetch_add(1, std::memory_order_relaxed);
    return why;
  }
  if (std::optional<Refusal> refusal = RefusesChecks()) return Status::Unavailable(refusal->message);
  return Status::OK();
}

uint32_t Forwarder::EnterDecisions() const { return handoff_ != nullptr ? handoff_->EnterDecision() : 0; }

void Forwarder::ExitDecisions(uint32_t pin) const {
  if (handoff_ != nullptr) handoff_->ExitDecision(pin);
}

std::string Forwarder::DeciderOf(ring::Token token) const {
  return std::string(host_.routing().Decider(token));
}

void Forwarder::Classify(std::span<const std::string_view> keys, std::span<uint8_t> remote) const {
  std::fill(remote.begin(), remote.end(), 0);
  const replication::RoutingTable& table = host_.routing();
  if (table.ring == nullptr || table.ring->empty()) return;
  // Nothing is decided here for now -- just paused, or the clock is off -- every key goes to another
  // holder (Forward).
  if (host_.Paused() || host_.ClockSkewed()) {
    std::fill(remote.begin(), remote.end(), 1);
    return;
  }
  const std::string& self = host_.self_id();
  for (size_t i = 0; i < keys.size(); ++i) {
    const ring::Token token = ring::RingToken(keys[i]);
    // A range held without its copy yet goes to the holders that have it (Forward).
    remote[i] = table.Decider(token) != self || table.Unsynced(token) ? 1 : 0;
  }
}

void Forwarder::Forward(peer::ForwardedCheck check, ForwardDone done) {
  if (mutation::Is(mutation::Mutation::kForward503)) {
    peer::ForwardedResult refused;
    refused.set_status(peer::CHECK_UNAVAILABLE);
    refused.set_owner(host_.self_id());
    refused.set_error("mutation forward_503");
    done(std::move(refused));
    return;
  }
  ForwardBefore(std::move(check), 0, std::move(done));
}

std::optional<uint64_t> Forwarder::DecideAtEntry(const node::EntryCheck& check) {
  // (Under the forward_503 mutation every check goes to Forward, which refuses it.)
  if (grants_ == nullptr || mutation::Is(mutation::Mutation::kForward503)) return std::nullopt;
  return grants_->DecideHere(check, DeciderOf(ring::RingToken(check.key)));
}

bool Forwarder::MayDecideAtEntry(const node::EntryCheck& check) {
  if (grants_ == nullptr || mutation::Is(mutation::Mutation::kForward503)) return false;
  return grants_->MayDecideHere(check, DeciderOf(ring::RingToken(check.key)));
}

void Forwarder::ForwardBefore(peer::ForwardedCheck check, int64_t deadline_wall_ns, ForwardDone done) {
  const ring::Token token = ring::RingToken(check.key());
  if (handoff_ != nullptr && handoff_->Switching(token)) {
    // This node is switching the key's range to its new owner: route it once that is over.
    auto parked =
        std::make_shared<std::pair<peer::ForwardedCheck, ForwardDone>>(std::move(check), std::move(done));
    std::function<void()> resume = [this, parked, deadline_wall_ns] {
      ForwardBefore(std::move(parked->first), deadline_wall_ns, std::move(parked->second));
    };
    if (handoff_->HoldWhileSwitching(token, resume)) return;
    check = std::move(parked->first);
    done = std::move(parked->second);
  }
  // Everything needed from the table is copied out before calling out (see RoutingPublisher::Current).
  const replication::RoutingTable& table = host_.routing();
  const std::string& self = host_.self_id();
  auto attempt = std::make_shared<Attempt>();
  attempt->done = std::move(done);
  attempt->token = token;
  attempt->deadline_wall_ns = deadline_wall_ns;
  std::optional<std::string> route_override;
  if (std::optional<std::string_view> decider = table.Override(token)) route_override.emplace(*decider);
  std::span<const ring::MemberInfo> members;
  if (table.members != nullptr) members = *table.members;
  attempt->targets = ForwardTargets(token, self, route_override, table.ring.get(), members, host_.replicas(),
                                    options_.max_attempts);
  const uint64_t fingerprint = table.ring != nullptr ? table.ring->fingerprint() : 0;
  const bool skewed = host_.ClockSkewed();
  const bool paused = host_.Paused();
  const bool unsynced = table.Unsynced(token);
  if (skewed || paused || unsynced) {
    // The clock is off: this node decides nothing; just paused: its copy may be behind what its holders
    // decided meanwhile; or it holds the key's range without its copy yet. Its turn is skipped: when no
    // other holder answers, a skewed node refuses (Try), a paused node still decides, an unsynced one as
    // --failure-mode says (below, or in Try).
    auto self_at = std::find_if(attempt->targets.begin(), attempt->targets.end(),
                                [&](const ForwardTarget& t) { return t.id == self; });
    if (self_at != attempt->targets.end()) {
      (skewed ? clock_skips_ : paused ? paused_ : unsynced_skips_).fetch_add(1, std::memory_order_relaxed);
      attempt->targets.erase(self_at);
    }
  }
  if (attempt->targets.empty() && (skewed || unsynced)) {
    Try(std::move(attempt));  // no other holder to ask: refused (skewed, or closed) or decided here (open)
    return;
  }
  if (attempt->targets.empty() || attempt->targets[0].id == self) {
    attempt->done(std::nullopt);  // the ring moved: this node decides it now
    return;
  }
  if (IdOf(check).empty()) {  // an entry node's check; a passed-on one keeps the entry node's id
    check.set_request_id_hi(request_nonce_);
    check.set_request_id_lo(next_request_.fetch_add(1, std::memory_order_relaxed));
  }
  // The request's own fields, then the check appended as its one `checks` entry (not moved into it).
  attempt->payload.reserve(256);  // a request of one check with a few limits: one allocation
  AppendForwardRequestHead(self, attempt->targets[0].id, fingerprint, attempt->payload);
  peer::AppendMessageField(peer::ForwardCheckRequest::kChecksFieldNumber, check, attempt->payload);
  forwarded_.fetch_add(1, std::memory_order_relaxed);
  Try(std::move(attempt));
}

bool Forwarder::DecidesAtOnce() const {
  return replicator_ == nullptr || (options_.failure_mode != FailureMode::kClosed && !replicator_->Waits());
}

void Forwarder::Decided(std::span<const std::string_view> keys, std::function<void(bool acked)> done) {
  if (replicator_ == nullptr || keys.empty()) {
    done(true);
    return;
  }
  if (options_.failure_mode != FailureMode::kClosed) {
    // Open: the answer goes out whatever the replicas said (availability first); at once when the
    // replicator does not wait (async), without wrapping `done` (an allocation per check).
    if (!replicator_->Waits()) {
      done(true);
      return;
    }
    replicator_->Decided(keys, [done = std::move(done)](bool) { done(true); });
    return;
  }
  replicator_->Decided(keys, [this, done = std::move(done)](bool acked) {
    if (!acked) unacked_.fetch_add(1, std::memory_order_relaxed);
    done(acked);
  });
}

void Forwarder::Try(std::shared_ptr<Attempt> attempt) {
  if (attempt->next + 1 < attempt->targets.size() && attempt->targets[attempt->next].id == host_.self_id()) {
    // This node's turn, with holders after it, but its clock was judged off or it was paused since the
    // check came in (ForwardBefore skips its turn only when that held then): those holders are asked first,
    // as they would have been. (Skewed, it would refuse; just paused, its copy may be behind theirs.)
    const bool skewed = host_.ClockSkewed();
    if (skewed || host_.Paused()) {
      (skewed ? clock_skips_ : paused_).fetch_add(1, std::memory_order_relaxed);
      attempt->targets.erase(attempt->targets.begin() + static_cast<std::ptrdiff_t>(attempt->next));
    }
  }
  if (attempt->next >= attempt->targets.size() || attempt->targets[attempt->next].id == host_.self_id()) {
    // This node's turn, perhaps seconds after the check came in (timeouts, retries): judged again now. A
    // node cut off meanwhile reaches only a minority by now, and its ring may already make it the holder of
    // keys it has no copy of.
    // (A node just paused still decides here when no other holder answered: see ForwardBefore.)
    if (const Status why = DecideRefusal(); !why.ok()) {
      peer::ForwardedResult refused;
      refused.set_status(peer::CHECK_UNAVAILABLE);
      refused.set_owner(host_.self_id());
      refused.set_error(why.message());
      attempt->done(std::move(refused));
      return;
    }
    if (!HoldsCopy(attempt->token)) {
      // No holder answered and this node has no copy of the key (its turn in the preference list, if it
      // has one, is past the holders'). A holder whose copy is on its way waits for it, in either mode: open,
      // deciding from what it held before (a resumed owner's copy from before its pause) would admit what
      // the key's holders admitted meanwhile a second time.
      if (WaitForCopy(attempt)) return;
      if (options_.failure_mode == FailureMode::kClosed) {
        closed_.fetch_add(1, std::memory_order_relaxed);
        peer::ForwardedResult refused;
        refused.set_status(peer::CHECK_UNAVAILABLE);
        refused.set_owner(host_.self_id());
        refused.set_error("no holder of the key answered (--failure-mode closed)");
        attempt->done(std::move(refused));
        return;
      }
      fallback_open_.fetch_add(1, std::memory_order_relaxed);
    }
    fallback_local_.fetch_add(1, std::memory_order_relaxed);
    attempt->done(std::nullopt);
    return;
  }
  const size_t index = attempt->next++;
  attempt->timeout_retries = 0;
  if (index > 0) fallback_next_.fetch_add(1, std::memory_order_relaxed);
  Call(std::move(attempt), index);
}

std::optional<std::chrono::milliseconds> Forwarder::WaitBefore(int64_t deadline_wall_ns) const {
  if (deadline_wall_ns == 0) return options_.timeout;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::nanoseconds(deadline_wall_ns - host_.WallNowNs()));
  if (left.count() <= 0) return std::nullopt;
  return std::min(options_.timeout, left);
}

void Forwarder::Call(std::shared_ptr<Attempt> attempt, size_t index) {
  const std::optional<std::chrono::milliseconds> waits = WaitBefore(attempt->deadline_wall_ns);
  if (!waits) {
    // The upstream sender has given up: no answer from here reaches it.
    attempt->done(std::nullopt);
    return;
  }
  const std::chrono::milliseconds wait = *waits;
  // The payload is needed again if this attempt fails: send a copy, stamped with this attempt's deadline
  // and, from the second target on, the targets tried before (the receiver does not pass it back to them).
  std::string payload;
  payload.reserve(attempt->payload.size() + 16);
  payload = attempt->payload;
  AppendDeadlineStamp(host_.WallNowNs(), wait, payload);
  for (size_t i = 0; i < index; ++i) AppendTried(attempt->targets[i].id, payload);
  const std::chrono::nanoseconds sent = host_.SteadyNow();
  host_.Call(attempt->targets[index].peer_address, peer::METHOD_FORWARD_CHECK, std::move(payload), wait,
             [this, attempt, index, sent](peer::PeerResult result) mutable {
               if (std::optional<peer::ForwardedResult> decided = DecidedResult(result)) {
                 host_.ObserveRoundTrip(host_.SteadyNow() - sent);
                 attempt->done(std::move(*decided));
                 return;
               }
               failures_.fetch_add(1, std::memory_order_relaxed);
               const std::string& target = attempt->targets[index].id;
               spdlog::debug("forward to {} failed: {}", target,
                             result.ok() ? std::string("unusable answer") : result.status().ToString());
               // Timed out: the node may be paused or slow and may have charged the check. The same node
               // answers the retry from its dedup cache; the next one would charge it again.
               if (!result.ok() && result.kind() == peer::PeerErrorKind::kTimeout &&
                   attempt->timeout_retries < options_.timeout_retries && !KnownDead(target)) {
                 ++attempt->timeout_retries;
                 retried_same_.fetch_add(1, std::memory_order_relaxed);
                 Call(std::move(attempt), index);
                 return;
               }
               // Unreachable from here (not declining): perhaps only from here.
               if (index == 0 && !attempt->relay_tried && !result.ok() && !KnownDead(target) &&
                   (result.kind() == peer::PeerErrorKind::kTimeout ||
                    result.kind() == peer::PeerErrorKind::kConnectionLost ||
                    result.kind() == peer::PeerErrorKind::kUnavailable)) {
                 Relay(std::move(attempt));
                 return;
               }
               Try(std::move(attempt));
             });
}

void Forwarder::Relay(std::shared_ptr<Attempt> attempt) {
  attempt->relay_tried = true;
  const std::string& self = host_.self_id();
  const std::string decider = attempt->targets[0].id;
  // The next holder when it is another node (it would be tried next anyway), else any other alive member.
  std::string relay_address;
  if (attempt->targets.size() > 1 && attempt->targets[1].id != self) {
    relay_address = attempt->targets[1].peer_address;
  } else {
    const replication::RoutingTable& table = host_.routing();
    if (table.members != nullptr) {
      for (const ring::MemberInfo& m : *table.members) {
        if (m.id != self && m.id != decider && m.state == ring::MemberState::kAlive &&
            !m.peer_address.empty()) {
          relay_address = m.peer_address;
          break;
        }
      }
    }
  }
  const std::optional<std::chrono::milliseconds> wait = WaitBefore(attempt->deadline_wall_ns);
  if (relay_address.empty() || !wait) {
    Try(std::move(attempt));
    return;
  }
  relayed_.fetch_add(1, std::memory_order_relaxed);
  peer::ForwardCheckRequest relay;
  relay.set_relay_to(decider);
  std::string payload =
      attempt->payload + relay.SerializeAsString() + DeadlineStamp(host_.WallNowNs(), *wait);
  const std::chrono::nanoseconds sent = host_.SteadyNow();
  host_.Call(relay_address, peer::METHOD_FORWARD_CHECK, std::move(payload), *wait,
             [this, attempt, sent](peer::PeerResult result) mutable {
               if (std::optional<peer::ForwardedResult> decided = DecidedResult(result)) {
                 host_.ObserveRoundTrip(host_.SteadyNow() - sent);
                 attempt->done(std::move(*decided));
                 return;
               }
               failures_.fetch_add(1, std::memory_order_relaxed);
               Try(std::move(attempt));
             });
}

void Forwarder::RelayOn(const std::shared_ptr<peer::ForwardCheckRequest>& request, const Reply& reply) {
  if (mutation::Is(mutation::Mutation::kRelayDecides)) {
    DecideAndReply(request, reply);
    return;
  }
  const std::string& to = request->relay_to();
  std::string address;
  const replication::RoutingTable& table = host_.routing();
  if (table.members != nullptr && to != self_id()) {
    for (const ring::MemberInfo& m : *table.members) {
      if (m.id == to && ring::IsInRing(m.state)) address = m.peer_address;
    }
  }
  const std::optional<int64_t> deadline = SenderDeadline(*request);
  const std::optional<std::chrono::milliseconds> wait = WaitBefore(deadline.value_or(0));
  if (address.empty() || request->checks_size() != 1 || !wait) {
    reply.Refuse("relay: " + to + " is not a member this node can pass the check on to");
    return;
  }
  relays_served_.fetch_add(1, std::memory_order_relaxed);
  peer::ForwardCheckRequest onward;
  onward.set_from(self_id());
  onward.set_owner(to);
  *onward.add_checks() = request->checks(0);
  onward.mutable_checks(0)->set_hops(request->checks(0).hops() + 1);
  std::string payload = onward.SerializeAsString() + DeadlineStamp(host_.WallNowNs(), *wait);
  host_.Call(address, peer::METHOD_FORWARD_CHECK, std::move(payload), *wait,
             [this, request, reply](peer::PeerResult result) {
               if (std::optional<peer::ForwardedResult> decided = DecidedResult(result)) {
                 peer::ForwardCheckResponse response;
                 response.set_from(self_id());
                 decided->set_check_id(request->checks(0).check_id());
                 *response.add_results() = std::move(*decided);
                 reply.Answer(response.SerializeAsString());
                 return;
               }
               reply.Refuse("relay: " + request->relay_to() + " did not answer");
             });
}

bool Forwarder::WaitForCopy(const std::shared_ptr<Attempt>& attempt) {
  // A holder of the key whose range is waiting for its copy (handoffs in after a resume or a join, a
  // take-over read) is asked again every kCopyPoll until one forward timeout has passed (or the sender's
  // deadline): the copy usually comes within a handoff's round trips, and the check is then decided here
  // rather than refused. Only while no other holder answered: they were asked first.
  const replication::RoutingTable& table = host_.routing();
  if (!table.Unsynced(attempt->token) || !HoldsKeyHere(table, attempt->token)) return false;
  const std::chrono::nanoseconds now = host_.SteadyNow();
  if (attempt->copy_wait_until.count() == 0) attempt->copy_wait_until = now + options_.timeout;
  const std::optional<std::chrono::milliseconds> sender_left = WaitBefore(attempt->deadline_wall_ns);
  if (now + kCopyPoll >= attempt->copy_wait_until || !sender_left || *sender_left <= kCopyPoll) return false;
  copy_waits_.fetch_add(1, std::memory_order_relaxed);
  host_.After(kCopyPoll, [this, attempt] { Try(attempt); });
  return true;
}

bool Forwarder::HoldsKeyHere(const replication::RoutingTable& table, ring::Token token) const {
  std::optional<std::string> route_override;
  if (std::optional<std::string_view> decider = table.Override(token)) route_override.emplace(*decider);
  return HoldsKey(token, host_.self_id(), route_override, table.ring.get(), host_.replicas());
}

bool Forwarder::HoldsCopy(ring::Token token) const {
  const replication::RoutingTable& table = host_.routing();
  return !table.Unsynced(token) && HoldsKeyHere(table, token);
}

bool Forwarder::KnownDead(std::string_view id) const {
  const replication::RoutingTable& table = host_.routing();
  if (table.members == nullptr) return false;
  const std::vector<ring::MemberInfo>& members = *table.members;  // sorted by id
  auto it = std::lower_bound(members.begin(), members.end(), id,
                             [](const ring::MemberInfo& m, std::string_view v) { return m.id < v; });
  return it != members.end() && it->id == id &&
         (it->state == ring::MemberState::kDead || it->state == ring::MemberState::kLeft);
}

ForwarderStats Forwarder::stats() const {
  ForwarderStats s;
  s.forwarded = forwarded_.load(std::memory_order_relaxed);
  s.failures = failures_.load(std::memory_order_relaxed);
  s.fallback_next = fallback_next_.load(std::memory_order_relaxed);
  s.fallback_local = fallback_local_.load(std::memory_order_relaxed);
  s.fallback_open = fallback_open_.load(std::memory_order_relaxed);
  s.closed = closed_.load(std::memory_order_relaxed);
  s.copy_waits = copy_waits_.load(std::memory_order_relaxed);
  s.paused = paused_.load(std::memory_order_relaxed);
  s.unsynced = unsynced_skips_.load(std::memory_order_relaxed);
  s.served = served_.load(std::memory_order_relaxed);
  s.served_bad = served_bad_.load(std::memory_order_relaxed);
  s.passed_on = passed_on_.load(std::memory_order_relaxed);
  s.refused = refused_.load(std::memory_order_relaxed);
  s.retried_same = retried_same_.load(std::memory_order_relaxed);
  s.clock_refusals = clock_refusals_.load(std::memory_order_relaxed);
  s.clock_passed = clock_skips_.load(std::memory_order_relaxed);
  s.expired = expired_.load(std::memory_order_relaxed);
  s.minority_refusals = minority_refusals_.load(std::memory_order_relaxed);
  s.unacked = unacked_.load(std::memory_order_relaxed);
  s.relayed = relayed_.load(std::memory_order_relaxed);
  s.relays_served = relays_served_.load(std::memory_order_relaxed);
  s.dedup = dedup_.stats();
  return s;
}

}  // namespace ringlimit::cluster
