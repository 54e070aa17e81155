// GrantDriver: runs the GrantPlanner (grant_planner.h) of one node on its ForwardHost -- the quota grants of
// docs/limiter.md "Quota grants", behind --grants (off by default).
//
//   entry node (holder)                                      the key's owner
//   Forwarder::DecideAtEntry(check) --DecideHere--> decided from a slice here (no round trip)
//                               \-> forwarded as before;  SendRequest --METHOD_GRANT_REQUEST-->  Serve
//                                                          <-- GrantReply (after the row is acked) --
//   Tick / Fence / expiry       --METHOD_GRANT_RELEASE-->  Serve: SettleMerged in the key's row
//   Serve  <--METHOD_GRANT_RECALL--                        Tick (reclaims), Recall
//
// What it adds to the planner: the per-key rate estimate of the checks entering this node, the wire
// (proto/peer.proto GrantRequest, GrantReply, GrantRelease, GrantRecall) and the owner's row operations
// through GrantRows: a grant is recorded in the key's merged state (limiter::LendMerged) in the same atomic
// update of the row that read the budget it was sized from, then replicated like any decision (`ack`: the
// Forwarder's Decided, the mode's acknowledgement rule) before the reply goes out; a Release or a reclaim
// settles it there (limiter::SettleMerged). The ledger lives in the row, so replicas and the next owner carry
// it, and every decision made from the row counts the slices out (limiter::GrantsOut).
//
// What is lent: checks of one limit, of cost > 0, without reset, whose spec lends (limiter::Lends:
// token_bucket, gcra, leaky_bucket without a shaper, fixed_window, anchored_window) in hard mode without
// count_denied; everything else is forwarded as before (owner-decided).
//
// Recalls (owner): every Tick the owner reads the rows of the keys it has slices out of (GrantRows::Read)
// while it decides them, and the planner recalls their slices when the key nears its limit, when its row is
// gone (an admin DELETE) or does not lend any more, and when the key was reset or its spec changed (another
// KeyBudget::generation: a Gubernator RESET_REMAINING, a policy reload); a slice request under a new
// generation recalls the old slices too. So a recall follows the owner's own checks by one Tick (50 ms).
//
// An owner settles (from a Release, or reclaiming) only while it decides the key and its pause fence is down;
// a Release that reaches another node, or an owner just resumed from a pause, is refused and sent again; a
// reclaim is put off (tried again every `margin` while the key is known).
// A Release that gets no answer (its key's decider left, crashed or is unknown here yet) is sent again, at
// most every `margin`, to whoever decides the key then, for at most 4 x (term + margin): the next owner
// settles it, so an owner that moves does not leave the slice counted for the rest of its window.
//
// Taking over (owner): when this node's ring gives it token ranges it did not own (at its start, a join, a
// failover, a leave), it scans their rows (GrantRows::Unsettled) at once and again term + margin later
// (copies still on their way: a handoff, replication) and adopts the unsettled grants of the keys it then
// decides: reclaimed term + margin after adoption unless their Release comes first. So a grant nobody will
// release -- lent by an owner that crashed or stopped before its reply went out -- is settled by whoever
// decides its key next, asked a slice of it or not.
//
// Pause safety: a slice's term runs from when its request was sent, on the host's steady clock (the
// planner's check at every use), and the host's pause fence (ForwardHost::Paused) releases every slice and
// stops asking until it is down.
//
// Thread safety: every method is safe for concurrent use. The holder's side is sharded by key: kShards
// shards, each a mutex over its own GrantPlanner (holder events only), rate table and known keys, so checks
// of keys in different shards never wait for each other and a check takes exactly one shard's mutex. The
// owner's side -- one GrantPlanner (the one that mints grant ids), the retries, the leave, the ranges taken
// over -- is under mu_. No thread holds two of these mutexes at once, and none is held while sending or
// while calling GrantRows, except that GrantRows::Lend calls `decide` -- which takes the key's shard mutex,
// then mu_ -- inside its row update (lock order: the row, then one of them).
// Lifetime: the host, the rows and whatever `ack` calls must outlive the driver and every pending call.
#ifndef RINGLIMIT_NODE_GRANTS_GRANT_DRIVER_H_
#define RINGLIMIT_NODE_GRANTS_GRANT_DRIVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "limiter/limiter.h"
#include "node/forward/forward_host.h"
#include "node/grants/grant_planner.h"
#include "peer.pb.h"
#include "ring/ring_view.h"

namespace ringlimit::cluster {

// --grants: whether this node asks for and lends slices. Default: off.
struct GrantDriverOptions {
  bool enabled = false;
  GrantOptions planner{};  // --grant-threshold, --grant-term-ms (the others at their defaults)
  // Rate estimate: the key's checks counted over windows of this length; the rate is the larger of the last
  // full window's and the current one's so far. Default: 250 ms.
  std::chrono::nanoseconds rate_window = std::chrono::milliseconds(250);
  // Keys whose rate is tracked at once (a bound on memory; further keys are not lent until the table
  // empties at the next window). Default: 4096.
  size_t max_tracked_keys = 4096;
  // Timeout of one grant message. Default: 500 ms.
  std::chrono::milliseconds timeout{500};
};

// Whether `spec` is lent by the driver (see the header comment).
[[nodiscard]] bool DriverLends(const limiter::LimitSpec& spec);

// One lendable limit of one key, as the wire names it.
struct GrantKey {
  std::string key;   // entity key
  std::string name;  // state name
  limiter::LimitSpec spec;
};

// The owner's side in the store: the key's row. Implemented on a storage::StateStore (StoreGrantRows,
// grant_rows.h). Thread safety: safe for concurrent use.
class GrantRows {
 public:
  virtual ~GrantRows() = default;
  // In one atomic update of the key's row at wall time `now`: reads its budget and the ids of its unsettled
  // grants (some perhaps lent by a previous owner), calls `decide(budget, unsettled)` and records
  // (limiter::LendMerged) every Lend it returns; a Lend that cannot be recorded is turned into a Refuse.
  // Returns decide's actions.
  using Decide = std::function<GrantActions(const KeyBudget& budget, const std::vector<GrantId>& unsettled)>;
  [[nodiscard]] virtual GrantActions Lend(const GrantKey& key, limiter::TimeNs now, const Decide& decide) = 0;
  // Settles `grant` in the key's row and charges what it returns (limiter::SettleMerged); returns the units
  // charged.
  virtual uint64_t Settle(const GrantKey& key, GrantId grant, std::optional<uint64_t> used,
                          limiter::TimeNs now) = 0;
  // The key's budget at wall time `now` as its row holds it (under the spec the row was last decided with:
  // a policy change shows as another generation), without writing it; nullopt when it has no row (erased).
  [[nodiscard]] virtual std::optional<KeyBudget> Read(const GrantKey& key, limiter::TimeNs now) = 0;
  // The rows with ring tokens in [first, last] that hold unsettled grants, with their ids (a scan of the
  // range: what a node that takes the range over adopts).
  struct UnsettledRow {
    GrantKey key;  // the row's spec: the one it was last decided with
    std::vector<GrantId> grants;
  };
  [[nodiscard]] virtual std::vector<UnsettledRow> Unsettled(ring::Token first, ring::Token last) = 0;
};

struct GrantDriverStats {
  GrantStats planner;
  uint64_t requests_served = 0;  // grant requests this node answered as an owner
  uint64_t not_acked = 0;        // grants recorded but refused: their row was not acknowledged
  uint64_t send_failures = 0;    // grant messages that got no answer
  uint64_t releases_resent = 0;  // Releases sent again after they got no answer
  uint64_t tracked_keys = 0;     // gauge: keys whose rate is tracked
};

class GrantDriver final : public EntryDecider {
 public:
  // Replicates the row of `key` under the mode's acknowledgement rule and calls done(acked) once.
  using Ack = std::function<void(std::string_view key, std::function<void(bool acked)> done)>;

  // REQUIRES: options.enabled; Validate(options.planner).ok().
  GrantDriver(ForwardHost& host, GrantDriverOptions options, GrantRows& rows, Ack ack);

  GrantDriver(const GrantDriver&) = delete;
  GrantDriver& operator=(const GrantDriver&) = delete;

  // Holder: `check` enters this node and `decider` decides its key. When the check is admitted from a
  // slice here (its owner: this node), returns the units this node's slices of the key can still admit;
  // nullopt: forward it as usual. Counts the check towards the key's rate here; may send grant messages.
  // No allocation once the key is known (the request path of every check a node forwards).
  [[nodiscard]] std::optional<uint64_t> DecideHere(const node::EntryCheck& check,
                                                   std::string_view decider) override;
  // Whether this node's slices of the key hold `check.cost` units now (and no fence stops their use).
  // Counts nothing and sends nothing.
  [[nodiscard]] bool MayDecideHere(const node::EntryCheck& check, std::string_view decider) override;

  // Serves a grant method (METHOD_GRANT_REQUEST, _RELEASE, _RECALL): calls `respond` exactly once with the
  // encoded answer, or a failure (kRemoteError) when `payload` does not parse; possibly later, on another
  // thread.
  using Respond = std::function<void(peer::PeerResult result)>;
  void Serve(peer::Method method, std::string payload, Respond respond);

  // Runs the planner's timer (expired and idle slices released, overdue grants reclaimed) and the pause
  // fence. Call periodically (the node: every 50 ms; the simulator: on its ticks).
  void Tick();

  // The node leaves the cluster gracefully (before its handoff): releases every slice it holds to the
  // decider of its key, asks for and decides from no slice again, and calls `done` once every one of those
  // Releases was answered, or term + margin after the call (every slice is reclaimed by then); from a Tick
  // or an answer, possibly on another thread. Call once.
  void Leave(std::function<void()> done);

  [[nodiscard]] GrantDriverStats stats() const;

  // The hot keys as this node sees them now (GET /v1/grants, the console): the keys it lent slices of
  // (owner) and those it holds slices of (holder), each by entity key and limit name, at most `max` of each.
  struct HotKeys {
    struct Lent {
      std::string key, name;
      uint64_t units = 0;  // lent and not settled
      uint32_t grants = 0;
      std::vector<std::string> holders;
      bool recalled = false;
    };
    struct Held {
      std::string key, name;
      std::string owner;  // whom it asked
      uint64_t units_left = 0;
      uint32_t slices = 0;
      std::chrono::nanoseconds expires_in{};
    };
    std::vector<Lent> lent;  // most units first
    std::vector<Held> held;  // most units left first
  };
  [[nodiscard]] HotKeys Hot(size_t max) const;

 private:
  struct Rate {
    std::chrono::nanoseconds window_start{};
    uint64_t current = 0;   // units in the window that started at window_start
    uint64_t previous = 0;  // units in the window before it
  };
  struct Known {  // a key this node asked slices of, or lent slices of
    GrantKey key;
    std::string owner;  // holder: whom it asked (releases go there)
    std::chrono::nanoseconds last_seen{};
  };

  // The holder's side of the keys hashed to it.
  struct Shard {
    explicit Shard(const GrantOptions& options) : planner(options) {}
    std::mutex mu;
    GrantPlanner planner;  // holder events only (it lends nothing)
    std::map<std::string, Rate, std::less<>> rates;
    std::map<std::string, Known, std::less<>> known;  // by planner key
    bool fenced = false;                              // the fence was applied for the current pause
  };
  static constexpr size_t kShards = 16;

  // The planner's key for one limit of one entity key.
  [[nodiscard]] static std::string PlannerKey(std::string_view key, std::string_view name);
  // The same into `out` (its storage reused).
  static void PlannerKeyInto(std::string_view key, std::string_view name, std::string& out);
  [[nodiscard]] Shard& ShardOf(std::string_view pkey) const;
  // Whether `check` entering here may be decided from a slice at all (a lent kind of limit, decided by
  // another node, neither a reset nor free).
  [[nodiscard]] bool Offered(const node::EntryCheck& check, std::string_view decider) const;
  // The key of planner key `pkey` as last seen (and whom a holder asked, into `owner`), or nullopt.
  [[nodiscard]] std::optional<GrantKey> KnownKey(std::string_view pkey, std::string* owner = nullptr) const;
  // Notes `pkey` as known now (`owner`: unchanged when empty).
  void NoteKnown(std::string_view pkey, const GrantKey& key, std::string_view owner,
                 std::chrono::nanoseconds now);
  // Under shard.mu: the key's rate of checks here, counting `cost` now.
  double ObserveRate(Shard& shard, std::string_view pkey, uint64_t cost, std::chrono::nanoseconds now);
  // Under shard.mu: the pause fence, once per pause.
  void FenceIfPaused(Shard& shard, std::chrono::nanoseconds now, GrantActions& out);
  // The same with the pause judgement given (Tick judges it once for all shards).
  void FenceIf(bool paused, Shard& shard, std::chrono::nanoseconds now, GrantActions& out);
  // Carries out the actions that send (requests, releases, recalls); settles (owner) in the rows. Not under
  // mu_.
  void Execute(GrantActions actions);
  void SendRequest(const SendRequest& request);
  void SendRelease(const SendRelease& release);
  // A Release was answered, or cannot be sent any more (its key is forgotten): the leave may be done.
  void Released(GrantId grant);
  // Under mu_: the leave's `done` when it is due now (every Release of the leave answered, or its bound
  // passed), once; else null.
  std::function<void()> LeftLocked(std::chrono::nanoseconds now);
  // Under mu_: `release` got no answer; sent again from Tick.
  void RetryRelease(const cluster::SendRelease& release, std::chrono::nanoseconds now);
  // Under mu_: when the retries of `grant` began (now, for its first).
  std::chrono::nanoseconds RetryingSince(GrantId grant, std::chrono::nanoseconds now);
  // Owner: reads the rows of `keys` (planner key, key) -- the keys of its slices out -- that it decides and
  // lets the planner recall (OwnerChecked). Not under mu_.
  void Watch(std::chrono::nanoseconds now, const std::vector<std::pair<std::string, GrantKey>>& keys);
  // Under mu_: notes the ranges this node's ring gives it that the last ring it looked at did not, to be
  // scanned now and term + margin later.
  void NoteGainedRanges(std::chrono::nanoseconds now);
  // Scans `ranges` and adopts the unsettled grants of the keys this node decides. Not under mu_.
  void AdoptScanned(std::chrono::nanoseconds now, const std::vector<ring::TokenRange>& ranges);
  void SendRecall(const SendRecall& recall);
  void Settle(const cluster::Settle& settle);
  void ServeRequest(const peer::GrantRequest& request, Respond respond);
  // Whether this node decides entity key `key` now and was not just paused: an owner settles grants only
  // then (a stale copy that misses another node's settle of a grant would charge it twice).
  [[nodiscard]] bool Deciding(std::string_view key) const;
  // The peer address of member `id`, or empty.
  [[nodiscard]] std::string AddressOf(std::string_view id) const;
  [[nodiscard]] limiter::TimeNs WallNow() const { return host_.WallNowNs(); }

  // --- Constant after construction ---
  ForwardHost& host_;
  const GrantDriverOptions options_;
  GrantRows& rows_;
  const Ack ack_;

  std::vector<std::unique_ptr<Shard>> shards_;  // kShards, constant after construction

  // --- Protected by mu_ ---
  mutable std::mutex mu_;
  GrantPlanner owner_;  // owner events: lends, settles, recalls, adoptions
  struct Unsent {
    cluster::SendRelease release;
    std::chrono::nanoseconds next_try{};
    std::chrono::nanoseconds since{};  // its grant's first retry (RetryingSince)
  };
  std::vector<Unsent> unsent_;  // Releases that got no answer, by grant at most once each
  struct Unsettled {
    cluster::Settle settle;
    std::chrono::nanoseconds next_try{};
    std::chrono::nanoseconds since{};  // its grant's first retry (RetryingSince)
  };
  std::vector<Unsettled> unsettled_;  // settles put off while this node did not decide their key
  struct Leaving {                    // Leave was called
    std::set<GrantId> releases;       // its Releases not answered yet
    std::chrono::nanoseconds until{};
    std::function<void()> done;  // null once called
  };
  std::optional<Leaving> leaving_;
  // When each grant's Release or settle was first put off: its retries end `keep` (Tick) after that.
  std::map<GrantId, std::chrono::nanoseconds> retry_since_;
  // Taking over: the ring last looked at, this node's arcs on it, and the scans due (range, when).
  std::shared_ptr<const ring::RingView> scanned_ring_;
  std::vector<ring::TokenRange> owned_arcs_;
  std::vector<std::pair<ring::TokenRange, std::chrono::nanoseconds>> scans_;

  std::atomic<uint64_t> requests_served_{0}, not_acked_{0}, send_failures_{0}, releases_resent_{0};
};

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_GRANTS_GRANT_DRIVER_H_
