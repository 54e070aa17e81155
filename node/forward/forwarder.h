// Forwarder: the cluster's CheckRouter (node/service/cluster_hooks.h). It tells the API which keys this
// node decides, sends the checks of the others to the node that decides them over the peer transport
// (METHOD_FORWARD_CHECK, one ForwardCheckRequest per key; the transport coalesces the messages bound
// for one owner into shared frames), and serves the checks other nodes forward to this one (Serve).
//
// It runs on a ForwardHost (forward_host.h): the routing table, the cluster's judgements, the clocks, the
// random request-id nonce and the transport all come from there. A node's host is the Cluster
// (ClusterForwardHost, which also registers Serve as the METHOD_FORWARD_CHECK handler); the deterministic
// simulator's is its simulated node -- the same Forwarder runs in both.
//
// Who decides a key: the node's routing table (Cluster::routing(): ring, handoff overrides and member
// addresses published together, read with one atomic load per check) -- the owner on the ring, unless the
// HandoffManager overrides it while the key's range moves (replication/handoff.h): the previous owner until
// it has handed the range over, this node while it hands a range over, the new owners once this node has
// left.
//
// Routing of one key: the decider first; if it does not answer (connection refused, timeout, overloaded,
// error), the next alive member of the key's preference list, until every holder (the first --replicas of
// the list) was tried; if that reaches this node, it decides itself from its copy. If nobody answers
// and this node holds no copy, --failure-mode says what happens: `open` decides from this node's own (empty
// or stale) copy, which later merges into the holders' state, `closed` refuses the check. Either way it
// never silently replaces the holders' count: states merge (limiter/merge.h). A node receiving a forwarded
// check decides it itself, unless its own routing names another node and the check has made fewer than
// kMaxHops hops: then it passes it on once (a range being handed over, or a sender with a stale ring). A
// check never makes more than kMaxHops hops: the last receiver answers from its own view, so there is no
// forwarding loop. Exception: a check of a range this node is switching to its new owner
// (HandoffManager::HoldWhileSwitching) is held until the switch is over and then sent to the new owner,
// whatever its hops and even if that is its sender; the new owner then decides it.
//
// Idempotency: Forward gives every check an id unique across the cluster (RequestId: this process's
// random nonce and a counter) unless it has one (a pass-on keeps the entry node's), and every hop and
// retry carries it unchanged. A node serving a forwarded check with an id looks it up in its DedupCache
// (dedup_cache.h) first: a retry of a check it decided is answered with that first decision, a retry of
// one still in progress waits for it; only a first attempt is decided (or passed on). A first attempt
// that charged nothing (refused, or its pass-on failed and this node may not decide) is forgotten, and
// its waiting retries refused, so the sender goes on.
//
// Retries: an attempt that timed out is sent again to the same node, up to timeout_retries times, as
// long as that node is not known dead: the node may be paused or slow rather than gone, and may have
// charged the first attempt; the same node answers the retry from its dedup cache, where the next node
// would charge a second time. Any other failure (connection refused, an error or a refusal), or a node
// known dead, goes to the next node at once. A key's checks thus wait at most
// max_attempts * (1 + timeout_retries) * timeout before this node decides them itself.
//
// Relays: when the decider does not answer at the transport level (timeout, connection lost or refused)
// and is not known dead, the check is first sent to one other alive member -- the next holder if it is
// not this node, else any other -- as a relay request (ForwardCheckRequest.relay_to = the decider): the
// relay passes it on to the decider and answers with its answer, or refuses; it never decides it. Only
// then does the check go on to the next holder. So a link cut between this node and the decider (both
// ways, or one way) costs a forward timeout or two, not a second decider. A decider that answers but
// declines (CHECK_UNAVAILABLE: paused, clock off) is not relayed to: it is reachable.
//
// Deadlines: every attempt carries the sender's wall clock when it was sent and how long it waits for the
// answer (ForwardCheckRequest.sent_wall_ns / wait_ms). A node about to serve or decide a forwarded check
// whose sender -- by the clock offset membership measured for it -- has given up (the receiver was paused
// with the attempt in its socket, or it sat in a queue) charges nothing and refuses it: the sender has
// already sent it on to the next holder, which charges it. The cut-off leaves a quarter of the wait (and
// the offset's uncertainty) for the answer's way back. A sender whose offset is not measured, or measured
// less precisely than a quarter of the wait (a probe answered across a pause), is not judged, nor is a send
// time that reads minutes from now (a sender restarted under another clock). A member keeps its estimate
// while it is declared dead and when it is back (ClusterPlanner): forwards a node sent into a partition
// reach their receivers after the heal, out of TCP's retransmission queue, and are refused, not charged
// again at every node they reach.
//
// Pause: a node that sees it was just paused (Cluster::Paused) decides nothing for a moment: its client
// checks go to the key's other holders first (it decides them itself only if none answers), checks
// forwarded to it are declined (CHECK_UNAVAILABLE).
//
// Clock: a node whose clock is off from the cluster's (Cluster::ClockRefusal, --max-clock-offset-ms)
// steps back: it decides nothing -- not its own keys, not from a copy it holds -- but takes checks as
// any non-holder does (issue 35 item 4). Classify sends every key entering it to Forward, which skips
// this node among the key's holders: the owner's keys go to their next holder, which decides them (it
// does not pass a check back to its sender). When no other holder answers, the check is refused
// (CHECK_UNAVAILABLE, 503 unavailable to a client) rather than decided here. Forwarded checks it would
// decide are declined (CHECK_UNAVAILABLE: the sender goes on to the key's next holder); forwarded checks
// of other keys and relay requests it still passes on. The other members need not judge its clock: its
// own judgement is the only one that stops it deciding, so a key never has two deciders over it.
//
// Quorum: under --failure-mode closed, a node that reaches only a minority of the cluster
// (Cluster::MinorityRefusal: a partition's smaller side, or a node cut off) decides nothing, and takes
// no checks either (RefusesChecks: the API answers 503 unavailable); the majority side takes its keys over
// once it declares it dead. Under `open` it goes on deciding, and what it admits merges into the
// majority's counts on healing.
//
// Replication: every decision made here goes through Replicator::Decided before it is answered (sync
// mode waits there for a replica's acknowledgement).
//
// Quota grants (--grants, node/grants/grant_driver.h): when an EntryDecider (the GrantDriver) is set, a
// client's check of one limit entering here is first offered to it (DecideAtEntry, before Forward, with
// the check's plain fields): a check it admits from a slice this node holds is answered at once, with this
// node as its owner; every other check is forwarded as above.
//
// Thread safety: every method is safe for concurrent use (when the host's are). Completions run where the
// host's Call completes (peer transport threads on a node).
// Lifetime: the host, the decider, the replicator and the handoff manager must outlive the Forwarder
// and every pending completion, i.e. stop the io_context (or the Cluster) before destroying them.
#ifndef RINGLIMIT_NODE_FORWARD_FORWARDER_H_
#define RINGLIMIT_NODE_FORWARD_FORWARDER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "node/forward/dedup_cache.h"
#include "node/forward/forward_host.h"
#include "node/forward/routing.h"
#include "node/service/cluster_hooks.h"
#include "node/service/forwarded.h"
#include "ring/token.h"

namespace ringlimit::replication {
class HandoffManager;
class Replicator;
}  // namespace ringlimit::replication

namespace ringlimit::cluster {

// What a node does with a check when no holder of its key answered and it holds no copy itself.
enum class FailureMode : uint8_t {
  kOpen,    // decide it from this node's own copy (admits; the state merges into the holders' later)
  kClosed,  // refuse it: 503 unavailable to a client, CHECK_UNAVAILABLE to a forwarding node
};

struct ForwarderOptions {
  // --- Affects behaviour ---
  // Timeout of one forwarded check (--forward-timeout-ms), per attempt. Default: 500 ms.
  std::chrono::milliseconds timeout{500};
  // Nodes tried at least (the owner, then the next alive members of the preference list) before this
  // node decides itself; every holder of the key (the first --replicas of the list) is tried in any case.
  // REQUIRES: >= 1. Default: 2.
  uint32_t max_attempts = 2;
  // --failure-mode: when no holder answered and this node holds no copy of the key. Default: kOpen -- a
  // rate limiter that cannot reach its state should not take the API it protects down with it (Envoy's
  // rate limit filter fails open by default too); what it admits is counted (fallback_open) and merges
  // into the holders' count when they are back.
  FailureMode failure_mode = FailureMode::kOpen;
  // Times an attempt that timed out is sent again to the same node (unless it is known dead) before the
  // next node is tried; see "Retries" above. REQUIRES: <= 3. Default: 1.
  uint32_t timeout_retries = 1;
  // The served checks' request ids remembered (see "Idempotency" above). REQUIRES: valid. The ttl is
  // raised to 2 * (1 + timeout_retries) * timeout when lower, to cover every retry. Default: see
  // DedupOptions.
  DedupOptions dedup{};
};

// OK when every REQUIRES of `options` holds, else InvalidArgument saying what is wrong.
[[nodiscard]] Status Validate(const ForwarderOptions& options);

struct ForwarderStats {
  uint64_t forwarded = 0;       // keys sent to another node (first attempts)
  uint64_t failures = 0;        // attempts that got no usable answer
  uint64_t fallback_next = 0;   // attempts sent to the next node after a failure
  uint64_t fallback_local = 0;  // keys decided here because no other node answered
  uint64_t fallback_open = 0;   // ... of which this node held no copy (--failure-mode open)
  uint64_t closed = 0;          // keys refused because no holder answered (--failure-mode closed)
  uint64_t paused = 0;          // checks sent on (or declined) because this node was just paused
  uint64_t unsynced = 0;        // checks sent on because this node holds their range without its copy
  // Waits of kCopyPoll for the key's copy, by checks no other holder answered (WaitForCopy).
  uint64_t copy_waits = 0;
  uint64_t served = 0;             // checks other nodes forwarded to this one
  uint64_t served_bad = 0;         // forwarded batches that did not parse
  uint64_t passed_on = 0;          // forwarded checks this node passed on to the node its routing names
  uint64_t refused = 0;            // forwarded batches refused because this node was still joining
  uint64_t retried_same = 0;       // timed-out attempts sent again to the same node
  uint64_t expired = 0;            // forwarded checks not decided: their sender had given up on them
  uint64_t relayed = 0;            // checks sent through another member because the decider was unreachable
  uint64_t relays_served = 0;      // relay requests this node passed on to their decider for another node
  uint64_t clock_refusals = 0;     // checks (forwarded or a client's) refused because the clock is off
  uint64_t clock_passed = 0;       // checks whose key this node holds sent to another holder: clock off
  uint64_t minority_refusals = 0;  // ... because this node reaches only a minority (--failure-mode closed)
  // Decisions of this node answered 503 because a majority of their holders did not acknowledge them
  // (closed).
  uint64_t unacked = 0;
  DedupStats dedup;  // the served checks' request ids
};

// Decides a ForwardCheckRequest here: one outcome per check of `request` into `outcomes` (the answer's
// results, written by AppendForwardResponse; `outcomes` may hold a previous call's, to be replaced). Must be
// thread-safe and must not block on I/O.
using LocalDecider = std::function<void(const peer::ForwardCheckRequest& request,
                                        std::vector<node::ForwardedOutcome>& outcomes)>;

class Forwarder final : public node::CheckRouter {
 public:
  // `replicator` and `handoff` may be null (no replication: decisions are answered at once, the ring
  // alone routes).
  Forwarder(ForwardHost& host, ForwarderOptions options, LocalDecider decider,
            replication::Replicator* replicator = nullptr, replication::HandoffManager* handoff = nullptr);

  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;

  // Serves one METHOD_FORWARD_CHECK request another node sent here (`payload`: a ForwardCheckRequest):
  // calls `respond` exactly once, with the encoded ForwardCheckResponse or a failure (kRemoteError and
  // why: the sender goes on to the key's next node), possibly later and on another thread.
  using Respond = std::function<void(peer::PeerResult result)>;
  void Serve(std::string payload, Respond respond);

  [[nodiscard]] const std::string& self_id() const override;
  [[nodiscard]] bool Routing() const override;
  [[nodiscard]] std::optional<Refusal> RefusesChecks() const override;
  // When the sender of `request` gives up on it, less the answer's way back (see "Deadlines"), on this
  // node's wall clock; nullopt when not judged (no stamp, or the sender's offset is not measured to within a
  // quarter of the wait).
  [[nodiscard]] std::optional<int64_t> SenderDeadline(const peer::ForwardCheckRequest& request) const;
  // Whether that deadline has passed; counts it if so.
  [[nodiscard]] bool SenderGaveUp(const peer::ForwardCheckRequest& request) const;
  [[nodiscard]] uint32_t EnterDecisions() const override;
  void ExitDecisions(uint32_t pin) const override;
  void Classify(std::span<const std::string_view> keys, std::span<uint8_t> remote) const override;
  [[nodiscard]] std::optional<uint64_t> DecideAtEntry(const node::EntryCheck& check) override;
  [[nodiscard]] bool MayDecideAtEntry(const node::EntryCheck& check) override;
  void Forward(peer::ForwardedCheck check, ForwardDone done) override;
  void Decided(std::span<const std::string_view> keys, std::function<void(bool acked)> done) override;
  // No replicator, or --failure-mode open with a replicator that does not wait (async).
  [[nodiscard]] bool DecidesAtOnce() const override;

  // The node that decides the key with ring token `token` now: this node's id, another member's id, or
  // empty when this node holds no ring.
  [[nodiscard]] std::string DeciderOf(ring::Token token) const;

  // Quota grants: client checks are offered to `grants` before they are forwarded. REQUIRES: called once,
  // before the first check; `grants` outlives the Forwarder.
  void SetGrants(EntryDecider* grants) { grants_ = grants; }

  [[nodiscard]] ForwarderStats stats() const;
  [[nodiscard]] FailureMode failure_mode() const { return options_.failure_mode; }

 private:
  struct Attempt;
  struct Served;
  class Reply;
  // Why this node must not decide a check now (its clock is off, or RefusesChecks), or nullopt; counts it.
  [[nodiscard]] Status DecideRefusal() const;
  // Tries the attempt's next target (or decides here when none is left).
  // Forward, for a check whose upstream sender gives up at `deadline_wall_ns` (this node's wall clock; 0:
  // none): no attempt waits past it, and none starts after it.
  void ForwardBefore(peer::ForwardedCheck check, int64_t deadline_wall_ns, ForwardDone done);
  void Try(std::shared_ptr<Attempt> attempt);
  // Sends the attempt to its target `index`; on a timeout, again to the same one (see "Retries").
  void Call(std::shared_ptr<Attempt> attempt, size_t index);
  // Whether this node is a holder of the key of `token` in `table` (routing.h HoldsKey).
  [[nodiscard]] bool HoldsKeyHere(const replication::RoutingTable& table, ring::Token token) const;
  // Whether this node holds a copy of the key of `token`: a holder whose range is not waiting for its copy.
  [[nodiscard]] bool HoldsCopy(ring::Token token) const;
  // At this node's turn with no other holder having answered: when this node holds the key but its
  // range is still waiting for its copy, Try runs again kCopyPoll later (until one forward timeout after the
  // first wait, or the sender's deadline) and returns true; else false (refuse, or decide here when open).
  bool WaitForCopy(const std::shared_ptr<Attempt>& attempt);
  static constexpr std::chrono::milliseconds kCopyPoll{10};
  // Whether the routing table's members say `id` is dead or left.
  [[nodiscard]] bool KnownDead(std::string_view id) const;
  // Serve after the dedup lookup: a first attempt.
  void ServeFirst(const std::shared_ptr<peer::ForwardCheckRequest>& request, const Reply& reply);
  // Sends the attempt through another member to its decider (see "Relays"); goes on with Try if it fails.
  void Relay(std::shared_ptr<Attempt> attempt);
  // Serves a relay request: passes it on to request.relay_to() and answers with its answer, or refuses.
  void RelayOn(const std::shared_ptr<peer::ForwardCheckRequest>& request, const Reply& reply);
  // The wait of an attempt that must end by `deadline_wall_ns` (0: none): the forward timeout, or less;
  // nullopt when the deadline has passed.
  [[nodiscard]] std::optional<std::chrono::milliseconds> WaitBefore(int64_t deadline_wall_ns) const;
  // Sends the single check of `request` on to the node that decides it and replies with its answer
  // (or decides it here when no other node answers).
  void PassOn(const std::shared_ptr<peer::ForwardCheckRequest>& request, const Reply& reply);
  // Decides `request` here and replies once the decisions may be answered.
  void DecideAndReply(const std::shared_ptr<peer::ForwardCheckRequest>& request, const Reply& reply);

  ForwardHost& host_;
  const ForwarderOptions options_;
  const LocalDecider decider_;
  replication::Replicator* const replicator_;
  replication::HandoffManager* const handoff_;
  EntryDecider* grants_ = nullptr;  // set once before serving (SetGrants); null: --grants off
  const uint64_t request_nonce_;    // random, never 0: the high half of this process's request ids

  DedupCache dedup_;  // thread-safe
  std::atomic<uint64_t> next_request_{1};
  std::atomic<uint64_t> forwarded_{0}, failures_{0}, fallback_next_{0}, fallback_local_{0}, served_{0},
      served_bad_{0}, passed_on_{0}, refused_{0}, retried_same_{0}, fallback_open_{0}, closed_{0},
      copy_waits_{0};
  mutable std::atomic<uint64_t> paused_{0};
  mutable std::atomic<uint64_t> unsynced_skips_{0};
  mutable std::atomic<uint64_t> clock_refusals_{0};
  std::atomic<uint64_t> clock_skips_{0};
  mutable std::atomic<uint64_t> minority_refusals_{0};
  std::atomic<uint64_t> unacked_{0};
  mutable std::atomic<uint64_t> expired_{0};
  std::atomic<uint64_t> relayed_{0}, relays_served_{0};
};

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_FORWARD_FORWARDER_H_
