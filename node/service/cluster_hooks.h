// The seam between the API (node/api/, which decides checks and renders JSON) and the cluster
// (node/cluster/, which knows the ring, the members and the peer transport). node/api defines these
// interfaces, node/cluster implements them, node/server wires them; node/api never depends on
// node/cluster. A node without a cluster (tests of node/api) passes none: every key is then local.
//
// Thread safety: implementations must be safe for concurrent use from any number of threads.
#ifndef RINGLIMIT_NODE_SERVICE_CLUSTER_HOOKS_H_
#define RINGLIMIT_NODE_SERVICE_CLUSTER_HOOKS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "peer.pb.h"

namespace ringlimit::limiter {
struct LimitSpec;
}  // namespace ringlimit::limiter

namespace ringlimit::node {

// One key's check of one limit as it enters this node (CheckRouter::DecideAtEntry). Views: valid only
// during the call.
struct EntryCheck {
  std::string_view key;
  std::string_view name;  // the limit's state name
  const limiter::LimitSpec* spec = nullptr;
  uint64_t cost = 0;
  bool reset = false;  // start from the initial state: never decided at entry
};

// Routes the checks of entity keys to the node that decides them.
class CheckRouter {
 public:
  virtual ~CheckRouter() = default;

  // This node's id: the "owner" of what it decides itself. Constant.
  [[nodiscard]] virtual const std::string& self_id() const = 0;

  // Whether this node routes checks: false until it holds a ring (a node still joining the cluster).
  // Such a node answers checks 503: it does not know the owners yet, and deciding a key itself would
  // start from what it has -- nothing, or a stale copy after a restart.
  [[nodiscard]] virtual bool Routing() const { return true; }

  // Why this node refuses the client checks entering it now -- it neither decides nor passes them on --
  // or nullopt. Such a node answers them 503 unavailable with this message: a client retries at another
  // node. (A node that only steps back from deciding -- paused, or its clock off -- still takes checks:
  // Classify sends every key to another holder.)
  struct Refusal {
    enum class Reason : uint8_t {
      kMinority = 2,  // it reaches only a minority of the cluster (--failure-mode closed)
    };
    Reason reason = Reason::kMinority;
    std::string message;
  };
  [[nodiscard]] virtual std::optional<Refusal> RefusesChecks() const { return std::nullopt; }

  // Brackets one batch's routing and local decisions (DecisionFence, replication/decision_fence.h): call
  // EnterDecisions before Classify and ExitDecisions(pin) once the local decisions have charged the
  // store, so a handoff switch can wait for the decisions routed before it. Request path: lock-free.
  [[nodiscard]] virtual uint32_t EnterDecisions() const { return 0; }
  virtual void ExitDecisions(uint32_t pin) const { (void)pin; }

  // For each key, whether another node owns it (1) or this node decides it (0), into `remote` (one
  // entry per key, keys.size() of them). One ring snapshot for the whole call.
  virtual void Classify(std::span<const std::string_view> keys, std::span<uint8_t> remote) const = 0;

  // Completion of Forward: the owner's (or fallback node's) result, or nullopt when no other node
  // could decide and this node must decide itself. Called exactly once, possibly on another thread,
  // possibly before Forward returns; it must not block.
  using ForwardDone = std::function<void(std::optional<peer::ForwardedResult> result)>;

  // Before Forward, for a check of one limit whose key Classify sent elsewhere: whether this node
  // decides it after all, from a slice of a quota grant it holds (node/grants/, --grants) -- no round
  // trip, no ForwardedCheck. Returns the units this node's slices can still admit of it once it is
  // charged (it is admitted, and this node is its owner), or nullopt: Forward it. Offer a check once:
  // every call counts towards the key's rate here.
  [[nodiscard]] virtual std::optional<uint64_t> DecideAtEntry(const EntryCheck& check) {
    (void)check;
    return std::nullopt;
  }

  // Whether DecideAtEntry would admit `check` now, as far as this node can tell without counting it (it
  // holds slices of the key with units enough): a hint, DecideAtEntry may still decline. Default: false.
  [[nodiscard]] virtual bool MayDecideAtEntry(const EntryCheck& check) {
    (void)check;
    return false;
  }

  // Sends every limit of one key (`check`, hops already set) to its owner; if the owner does not
  // answer, to the next alive node of the key's preference list.
  virtual void Forward(peer::ForwardedCheck check, ForwardDone done) = 0;

  // Whether Decided always calls done(true) before it returns (no replica to wait for, and nothing that
  // could answer an admission unacknowledged): then a check this node decides is answered before the call
  // that decided it returns (CheckBatch::RunHere).
  [[nodiscard]] virtual bool DecidesAtOnce() const { return true; }

  // This node has just decided (charged) the checks of `keys` itself. Calls done(acked) exactly once,
  // when the answer may be sent: at once, or -- synchronous replication -- once a replica has
  // acknowledged the new states (possibly on another thread). acked false: under --failure-mode closed,
  // a majority of the keys' holders did not acknowledge them, so an admission must not be
  // answered (503). `keys` are valid only during the call.
  virtual void Decided(std::span<const std::string_view> keys, std::function<void(bool acked)> done) {
    (void)keys;
    done(true);
  }
};

// One member as GET /v1/cluster shows it.
struct ClusterMemberView {
  std::string id;
  std::string http_address;
  std::string peer_address;
  std::string_view state;  // "alive", "suspect", ... (static storage)
  uint32_t vnodes = 0;
  uint64_t incarnation = 0;
  double share = 0;  // fraction of the token space owned; 0 when not in the ring
  // Its wall clock minus this node's, as measured from membership traffic, and the measurement's
  // uncertainty (half its round trip), in ms; unset when not measured (and 0 for this node itself).
  std::optional<double> clock_offset_ms;
  std::optional<double> clock_uncertainty_ms;
};

// This node's clock as it judges it against the members' (ring/clock_offset.h).
struct ClusterClockView {
  bool ok = true;            // false: skewed, this node refuses to decide
  std::string_view state;    // "unknown", "ok", "skewed" (static storage)
  double offset_ms = 0;      // this node's offset from the members' median (positive: it runs ahead)
  double max_offset_ms = 0;  // --max-clock-offset-ms (0: the rule is disabled)
  std::string reason;        // why it judged so
};

// A handoff of token ranges in progress (replication/handoff.h).
struct ClusterHandoffView {
  std::string direction;  // "out": this node pushes; "in": it waits for the previous owner
  std::string peer;
  size_t ranges = 0;
  double share = 0;   // fraction of the token space
  uint64_t keys = 0;  // out: keys sent so far; in: keys received so far
  std::string phase;
  double seconds = 0;
  // Out only (0 for "in"), replication::HandoffView: keys to send (counted when the push started, 0 until
  // then) and of those not sent yet, scan windows acknowledged of all, and the share done.
  uint64_t keys_total = 0;
  uint64_t keys_left = 0;
  uint64_t bytes = 0;  // out: the serialized size of the states pushed so far
  size_t windows_done = 0;
  size_t windows_total = 0;
  double done = 0;
};

// Whether this node decides the keys it holds now, and if not why (node/cluster/cluster.h: Paused,
// ClockRefusal, MinorityRefusal; the clock rule is ClusterClockView).
struct ClusterFenceView {
  bool deciding = true;  // none of the reasons below holds it back
  // Why it does not decide (empty while deciding), the first that holds of: "paused" (just resumed from
  // a process pause), "clock_offset" (its clock is off from the cluster's), "minority" (on the minority
  // side under --failure-mode closed). Paused or clock_offset: it still takes checks and passes each to
  // the next holder of its key; minority: it refuses them (503 unavailable). Static storage.
  std::string_view reason;
  std::string detail;    // the reason in words (the clock's or the minority's judgement; empty otherwise)
  bool paused = false;   // just resumed from a process pause: its checks go to their next holders
  std::string minority;  // why it is on the minority side (empty: it is not); it holds back only under
                         // --failure-mode closed
};

struct ClusterView {
  std::string node_id;
  uint64_t ring_version = 0;
  std::string replication_mode;           // "async" / "sync"; empty: no replication
  uint32_t replicas = 0;                  // --replicas
  uint64_t replication_pending_keys = 0;  // changed keys not shipped to their replicas yet
  // Handoffs finished since start (replication::HandoffStats).
  struct HandoffTotals {
    uint64_t completed = 0;           // outgoing, acknowledged
    uint64_t failed = 0;              // outgoing, abandoned
    uint64_t keys = 0;                // keys pushed by outgoing handoffs
    uint64_t incoming_completed = 0;  // incoming ranges released
    uint64_t rereplicated_keys = 0;   // keys pushed to new members of their preference list
  } handoff_totals;
  ClusterFenceView fence;
  std::vector<ClusterHandoffView> handoffs;  // in progress
  // ring::RingView::fingerprint() of the current ring: equal on every node whose ring has the same
  // members (unlike ring_version, a per-node count). 0 without a ring.
  uint64_t ring_fingerprint = 0;
  std::vector<ClusterMemberView> members;  // sorted by id
  ClusterClockView clock;
};

// GET /v1/ring?key=K.
struct KeyPlacementView {
  uint64_t token = 0;
  std::string owner;                               // empty when the ring is empty
  std::vector<ClusterMemberView> preference_list;  // owner first
};

// GET /v1/ring/arcs: one owned token range, as fractions of the token space [0, 1].
struct RingArcView {
  std::string owner;
  double from = 0;
  double to = 0;
};

// GET /v1/grants: the hot keys as one node sees them (quota grants, node/grants/grant_driver.h).
struct HotKeysView {
  bool enabled = false;  // --grants on
  struct Lent {          // this node owns the key and has lent slices of it
    std::string key, name;
    uint64_t units_out = 0;  // lent and not settled
    uint32_t grants = 0;
    std::vector<std::string> holders;
    bool recalled = false;  // every one of its slices recalled
  };
  struct Held {  // this node holds slices of the key
    std::string key, name, owner;
    uint64_t units_left = 0;
    uint32_t slices = 0;
    double expires_in_ms = 0;
  };
  std::vector<Lent> lent;  // most units first
  std::vector<Held> held;  // most units left first
};

// What the cluster endpoints and /readyz need.
class ClusterInfo {
 public:
  virtual ~ClusterInfo() = default;

  // Joined (not `joining`), holding a ring, not leaving.
  [[nodiscard]] virtual bool ready() const = 0;
  // Whether this node decides now, and if not why (ClusterView::fence, without the rest of Describe).
  [[nodiscard]] virtual ClusterFenceView Fence() const { return {}; }
  [[nodiscard]] virtual ClusterView Describe() const = 0;
  [[nodiscard]] virtual KeyPlacementView Place(std::string_view key) const = 0;
  // The advertised HTTP address ("host:port") of member `id`, "" when unknown. Cheap: one snapshot read.
  [[nodiscard]] virtual std::string HttpAddressOf(std::string_view id) const {
    (void)id;
    return "";
  }
  // Every member's owned ranges on the current ring (empty without one), by owner then position.
  [[nodiscard]] virtual std::vector<RingArcView> RingArcs() const = 0;
  // The hot keys (at most `max` lent and `max` held); not enabled without quota grants.
  [[nodiscard]] virtual HotKeysView HotKeys(size_t max) const {
    (void)max;
    return {};
  }
  // Starts a graceful leave (asynchronous; the node exits when done).
  virtual void Leave() = 0;
  // Appends the cluster's metrics (Prometheus text) to `out`.
  virtual void AppendMetrics(std::string* out) const = 0;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_CLUSTER_HOOKS_H_
