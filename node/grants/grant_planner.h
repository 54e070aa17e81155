// GrantPlanner: the decisions of quota grants (docs/limiter.md "Quota grants") on one node, as a pure state
// machine -- as a *holder* (an entry node deciding a hot key against slices of its budget that the key's
// owner lent it) and as an *owner* (sizing, recording, reclaiming and recalling the slices it lends).
//
// No I/O, no clock, no threads, no locks: every entry point takes the current time on the node's steady
// clock (and, on the owner side, the key's budget as the driver read it from the merged state and its grant
// ledger, limiter/grant_ledger.h) and returns the actions to carry out. The driver sends, writes and
// replicates, and arms one timer at `wake_at`:
//
//   holder                                               owner
//   Check(key, cost, rate) --> decide locally | forward   GrantRequested(from, key, want, budget)
//                          \-> SendRequest ..........>      --> Lend (record, charge, ack, reply) | Refuse
//   GrantReplied / GrantRefused / RequestFailed <........
//   RecallReceived <...................................   Recall(key) / OwnerChecked(key, budget) -->
//                                                         GrantRequested of another generation -->
//   SendRecall Timer / Fence -----------> SendRelease ...........>   ReleaseReceived(grant, used) --> Settle
//                                                         Timer --> Settle (reclaim: the whole slice used)
//                                                         Adopt(key, grants) after a failover
//
// A holder's slice, per key (at most two, the older used first):
//
//   (none) --rate >= threshold--> Requested(sent_at) --GrantReplied--> Held(expires = sent_at + term)
//      ^            |  refused / failed: no request before now + refused_backoff        |
//      +------------+<-- spent / expired / idle / recalled / fenced: SendRelease(used) --+
//
// Pause safety: a slice's term runs from when its request was *sent*, on this node's steady clock, so a
// holder that was stopped past it finds it expired and decides nothing from it; the owner reclaims only
// term + margin after it lent, on its own clock (later). Fence() (the pause fence) releases every slice.
// A holder never denies from a slice: a check that does not fit goes to the owner.
//
// Ordering contract for the driver: a Lend is answered only after the key's row holding the grant record
// (AddGrant, charged as spent) was acknowledged under the mode's acknowledgement rule, and its record is in
// the row before the KeyBudget of the next owner event is read (E includes it); a Settle is one write of
// the row (SettleGrant and the charge of what it returns). A check decided locally is charged to the
// slice before the answer; Releases may be sent in any order and more than once.
//
// Thread safety: none; the driver serialises every call.
#ifndef RINGLIMIT_NODE_GRANTS_GRANT_PLANNER_H_
#define RINGLIMIT_NODE_GRANTS_GRANT_PLANNER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "limiter/grant_ledger.h"

namespace ringlimit::cluster {

using limiter::GrantId;

struct GrantOptions {
  // --- Affects behaviour ---
  // Holder: a key whose checks enter this node at this rate or more (units per second) is asked a slice
  // of. REQUIRES: > 0. Default: 200 (not yet tuned by measurement).
  double threshold = 200;
  // The term asked for and lent at most: how long a slice may be used. REQUIRES: > 0. Default: 1 s.
  std::chrono::nanoseconds term = std::chrono::seconds(1);
  // Owner: a slice nobody released is reclaimed (counted wholly used) this long after its term.
  // REQUIRES: 0 < margin <= term (so idle budget is back within 2 x term). Default: 250 ms.
  std::chrono::nanoseconds margin = std::chrono::milliseconds(250);
  // Owner: the last max(1, ceil(C x reserve_pct / 100)) units of a key are always decided by the owner.
  // REQUIRES: 0 <= reserve_pct <= 100. Default: 1.
  double reserve_pct = 1;
  // Owner: one slice takes at most this share of what is left above the reserve, so slices shrink as the
  // key nears its limit. REQUIRES: 0 < max_share <= 1. Default: 0.25.
  double max_share = 0.25;
  // Owner: the slices out of a key are recalled once what is left above its reserve is below this share
  // of them, and a slice is lent only while what is left after it is at least twice that (KeyBudget).
  // 0: recalled only once nothing lendable is left. REQUIRES: >= 0. Default: 0.25 (grant_planner_test's
  // little clusters, share of the admissions decided where they entered: a fixed_window key run to its
  // limit, 97 % with 0 (recalled at the very end), 88 % with 0.25, 71 % with 1; a token bucket at 80 % of
  // its rate, ~100 %, 97 %, 65 %: holders back off after a recall and forward meanwhile).
  double recall_cover = 0.25;
  // Owner: a slice smaller than this is refused (the key is decided at the owner). REQUIRES: >= 1.
  // Default: 2.
  uint64_t min_slice = 2;
  // Holder: after a refusal, a failed request or a recall, no request for the key for this long.
  // REQUIRES: >= 0. Default: 1 s.
  std::chrono::nanoseconds refused_backoff = std::chrono::seconds(1);
  // Holder: a slice no check used for this long is released early. REQUIRES: > 0. Default: 250 ms.
  std::chrono::nanoseconds idle_release = std::chrono::milliseconds(250);
  // Holder: a slice whose every unit was used is released at once (its units settle at the owner now, and
  // the next slice may be asked for) rather than when it goes idle or expires. Default: true (without it a
  // holder whose two slices are spent forwards every check until one goes idle).
  bool release_spent = true;
  // Owner: this node incarnation's number, the upper 32 bits of the ids it lends (never reused by a
  // restarted node or the next owner). The lower 32 bits count its grants: after 2^32 grants of one
  // incarnation an id comes back, and AddGrant refuses it while its old record is in the ledger (the
  // driver then refuses the request). REQUIRES: != 0. Default: 1.
  uint32_t incarnation = 1;
};

// Returns nullopt when every REQUIRES of `options` holds, else what is wrong.
[[nodiscard]] Status Validate(const GrantOptions& options);

// What the owner's driver read of a key when a request came or when it watches the keys it lent slices of:
// the key's hard capacity C (limit; bucket size; burst + 1 for GCRA), its effective consumption E (merged
// state + Outstanding of its ledger), and how long a slice may live (limiter::GrantTermCap; 0: not lendable
// now). `lends`: limiter::Lends(spec). A key with no row (erased) is KeyBudget{}: not lendable.
//
// Near the limit: with the reserve R = max(1, ceil(C x reserve_pct / 100)), A = C - E - R what is left
// above it and k = GrantOptions::recall_cover, a slice of g is lent only while A - g >= 2 k (out + g) (what
// is left after it covers twice k of the slices out), and the slices out are recalled once A < k x out
// (what is left no longer covers k of them) or A x max_share < min_slice: between the two, owner-decided
// checks (or the window) use up half of that cover, so a lend never calls for a recall, and the last units
// are decided at the owner.
struct KeyBudget {
  uint64_t capacity = 0;
  uint64_t effective = 0;
  std::chrono::nanoseconds term_cap{0};
  bool lends = false;
  // Of `effective`, the units out on unsettled grants (limiter::GrantsOut). Default 0.
  uint64_t out = 0;
  // Changes when the key is reset or its limits change (the driver's digest of the row's spec and reset
  // stamp); 0: not known. A grant lent under one generation is recalled once the key is read at another.
  uint64_t generation = 0;
};

// --- Actions ---
enum class ReleaseWhy { kExpired, kIdle, kRecalled, kFenced, kLate, kSpent, kLeaving };

struct SendRequest {  // holder -> owner: lend `want` units of `key`
  std::string key;
  uint64_t request = 0;
  uint64_t want = 0;
  std::chrono::nanoseconds term{0};
};
struct SendRelease {  // holder -> owner: the slice is over; `used` units of it were admitted here
  std::string key;
  GrantId grant = 0;
  uint64_t used = 0;
  ReleaseWhy why = ReleaseWhy::kExpired;
};
struct Lend {  // owner: AddGrant(grant, units) to the key's row, charge as spent, acknowledge, then reply
  std::string to;
  std::string key;
  uint64_t request = 0;
  GrantId grant = 0;
  uint64_t units = 0;
  std::chrono::nanoseconds term{0};
};
struct Refuse {  // owner -> holder: no slice (the key is decided here)
  std::string to;
  std::string key;
  uint64_t request = 0;
};
struct Settle {  // owner: SettleGrant(grant, used) and charge what it returns, in one write of the row
  std::string key;
  GrantId grant = 0;
  std::optional<uint64_t> used;  // nullopt: reclaimed, the whole slice counted used
};
struct SendRecall {  // owner -> holder: release this slice now
  std::string to;
  std::string key;
  GrantId grant = 0;
};

struct GrantActions {
  // Check only: the check is admitted from this slice (already charged to it), or goes to the owner.
  std::optional<GrantId> local;
  bool forward = false;
  std::vector<SendRequest> requests;
  std::vector<SendRelease> releases;
  std::vector<Lend> lends;
  std::vector<Refuse> refusals;
  std::vector<Settle> settles;
  std::vector<SendRecall> recalls;
  // When set, call Timer then (replaces an earlier instant); unset: leave the timer as it is (the fast path
  // of Check does not compute it; a Timer call with nothing due does nothing).
  std::optional<std::chrono::nanoseconds> wake_at;
};

struct GrantStats {
  // Holder.
  uint64_t local_checks = 0;      // checks decided from a slice
  uint64_t forwarded_checks = 0;  // checks of keys with a slice or a request that went to the owner
  uint64_t requests = 0;
  uint64_t slices_held = 0;     // gauge
  uint64_t released_units = 0;  // units given back unused
  // Owner.
  uint64_t grants_made = 0;
  uint64_t grants_refused = 0;
  uint64_t grants_released = 0;  // settled from a Release
  uint64_t grants_expired = 0;   // reclaimed after term + margin
  uint64_t recalls = 0;
  uint64_t grants_adopted = 0;  // unsettled grants of a key found in its row that this planner did not lend
  uint64_t units_out = 0;       // gauge: units lent and not settled
};

class GrantPlanner {
 public:
  using MonoTime = std::chrono::nanoseconds;  // on the node's steady clock

  // REQUIRES: Validate(options).ok().
  explicit GrantPlanner(GrantOptions options);

  GrantPlanner(const GrantPlanner&) = delete;
  GrantPlanner& operator=(const GrantPlanner&) = delete;

  // --- Holder ---
  // A check of `key` costing `cost` entered this node, which does not own the key; `rate` is the key's
  // recent rate of checks here (units per second, the driver's estimate). Decides it from a live slice when
  // one fits (local), else forward; may ask the owner for a slice (requests). `lends`: the key's limits can
  // be lent at all (limiter::Lends); when not, nothing is asked.
  [[nodiscard]] GrantActions Check(MonoTime now, std::string_view key, uint64_t cost, double rate,
                                   bool lends = true);
  // The owner lent `units` for `term` in answer to `request`. A reply to no request in flight (late, or of
  // an older request) is released at once, unused.
  [[nodiscard]] GrantActions GrantReplied(MonoTime now, std::string_view key, uint64_t request, GrantId grant,
                                          uint64_t units, std::chrono::nanoseconds term);
  // The owner refused `request`, or it was not answered.
  [[nodiscard]] GrantActions GrantRefused(MonoTime now, std::string_view key, uint64_t request);
  [[nodiscard]] GrantActions RecallReceived(MonoTime now, std::string_view key, GrantId grant);
  // The pause fence went up (the process was stopped): every slice is released and none is used or asked
  // for before `until`.
  [[nodiscard]] GrantActions Fence(MonoTime now, MonoTime until);
  // This node leaves the cluster gracefully: every slice is released (kLeaving), to its key's decider
  // while it still answers, and none is used or asked for again.
  [[nodiscard]] GrantActions Retire(MonoTime now);

  // --- Owner ---
  // Holder `from` asks `want` units of `key` (this node owns it) for `term`, and `budget` is the key now.
  // Also recalls the key's slices lent under another generation (a reset or a policy change since).
  [[nodiscard]] GrantActions GrantRequested(MonoTime now, std::string_view from, std::string_view key,
                                            uint64_t request, uint64_t want, std::chrono::nanoseconds term,
                                            const KeyBudget& budget);
  // A Release of `grant` came (possibly twice, possibly after the reclaim: the ledger settles once).
  [[nodiscard]] GrantActions ReleaseReceived(MonoTime now, std::string_view key, GrantId grant,
                                             uint64_t used);
  // The owner read `key`'s budget (after a check it decided, or watching the keys of its slices out: the
  // driver's Tick). Recalls, once each, the key's slices when it nears its limit (KeyBudget) or is not
  // lendable any more (erased, its spec changed to one that does not lend), and those lent under another
  // generation (a reset or a policy change since). A recall is never unsafe: only budget back early.
  [[nodiscard]] GrantActions OwnerChecked(MonoTime now, std::string_view key, const KeyBudget& budget);
  // Recall every slice of `key` (also those recalled already).
  [[nodiscard]] GrantActions Recall(MonoTime now, std::string_view key);
  // This node decides `key` whose ledger holds unsettled `grants` it may not have lent (a failover, a
  // restart, a range taken over: found when asked a slice of the key, or scanning the ranges it took over):
  // those it did not lend are reclaimed term + margin from now unless released first. A grant this planner
  // settled within the last term + margin is not adopted again: the driver writes a Settle after the event
  // that made it, so a row read meanwhile still shows the grant unsettled (it would be settled twice).
  [[nodiscard]] GrantActions Adopt(MonoTime now, std::string_view key, const std::vector<GrantId>& grants);

  // Both: releases expired and idle slices, forgets unanswered requests, reclaims overdue grants.
  [[nodiscard]] GrantActions Timer(MonoTime now);
  // Nothing held, asked for, backed off from or lent: Timer has nothing to do (and its wake_at is none).
  [[nodiscard]] bool Idle() const { return held_.empty() && lent_.empty(); }

  // The size of the slice GrantRequested would lend for `want` against `budget` (0: refused).
  [[nodiscard]] uint64_t SliceSize(uint64_t want, const KeyBudget& budget) const;
  // Whether OwnerChecked recalls every slice of a key at `budget` (KeyBudget: near the limit).
  [[nodiscard]] bool NearLimit(const KeyBudget& budget) const;
  // Owner: the keys with slices out that it lent and has not recalled yet (the keys its driver watches).
  [[nodiscard]] std::vector<std::string> Watched() const;
  // Owner: the keys of the grants it lent or adopted and has not settled (recalled or not).
  [[nodiscard]] std::set<std::string, std::less<>> LentKeys() const;
  // Units `key`'s slices here can still admit before they expire (holder).
  [[nodiscard]] uint64_t LocalUnits(MonoTime now, std::string_view key) const;

  // What an operator sees of the hot keys (GET /v1/grants, the console), by key:
  struct LentKey {  // owner: a key with grants lent (or adopted) and not settled
    std::string key;
    uint64_t units = 0;  // lent and not settled
    uint32_t grants = 0;
    std::vector<std::string> holders;  // sorted, each once; an adopted grant's holder is not known
    bool recalled = false;             // every one of them recalled
  };
  struct HeldKey {  // holder: a key with live slices here
    std::string key;
    uint64_t units_left = 0;  // what they can still admit (LocalUnits)
    uint32_t slices = 0;
    std::chrono::nanoseconds expires_in{};  // the last slice's term left
  };
  [[nodiscard]] std::vector<LentKey> LentSummary() const;              // by key
  [[nodiscard]] std::vector<HeldKey> HeldSummary(MonoTime now) const;  // by key; none while fenced
  [[nodiscard]] const GrantStats& stats() const { return stats_; }

 private:
  struct Slice {
    GrantId grant = 0;
    uint64_t units = 0;
    uint64_t used = 0;
    MonoTime expires{};   // request sent + term
    MonoTime last_use{};  // the reply, then the last check decided from it
  };
  struct Pending {
    uint64_t request = 0;
    MonoTime sent{};
  };
  struct Held {                // a key this node holds slices of, or asks for
    std::deque<Slice> slices;  // oldest first, at most two
    std::optional<Pending> pending;
    MonoTime no_request_before = MonoTime::min();  // after a refusal, a failure or a recall
  };
  struct Lent {  // a grant this node lent (or adopted) and has not settled
    std::string key;
    std::string holder;  // empty when adopted
    uint64_t units = 0;
    MonoTime reclaim_at{};
    bool recalled = false;    // a recall was sent (OwnerChecked sends one once)
    uint64_t generation = 0;  // KeyBudget::generation when lent (0: adopted, or not known)
  };

  static constexpr size_t kMaxSlices = 2;

  void ReleaseSlice(std::string_view key, const Slice& s, ReleaseWhy why, GrantActions& out);
  // Releases every slice (`why`), forgets every request (their replies are released as late) and keeps
  // nothing used or asked for before `until`.
  void ReleaseAll(MonoTime until, ReleaseWhy why, GrantActions& out);
  // Releases the slices of `h` that expired or went idle by `now`.
  void Expire(MonoTime now, std::string_view key, Held& h, GrantActions& out);
  void MaybeRequest(MonoTime now, std::string_view key, Held& h, double rate, GrantActions& out);
  void RecallKey(std::string_view key, GrantActions& out);
  // Recalls the key's slices not recalled yet for which `stale` holds.
  void RecallIf(std::string_view key, const std::function<bool(const Lent&)>& stale, GrantActions& out);
  // R, the reserve of `budget`'s key (KeyBudget).
  [[nodiscard]] uint64_t Reserve(const KeyBudget& budget) const;
  // Drops the entry of a key with no slice, no request and no back-off left.
  void ForgetIfEmpty(MonoTime now, std::map<std::string, Held, std::less<>>::iterator it);
  // `grant` was settled at `now`: remembered (not adopted again) until term + margin later.
  void Settled(MonoTime now, GrantId grant);
  // Every event ends here: gauges and the next wake-up.
  void Done(GrantActions& out);

  // --- Constant after construction ---
  const GrantOptions options_;

  // --- State ---
  std::map<std::string, Held, std::less<>> held_;
  std::map<GrantId, Lent> lent_;
  // Grants settled here and when they may be forgotten (Adopt skips them until then).
  std::map<GrantId, MonoTime> settled_;
  std::deque<std::pair<MonoTime, GrantId>> settled_order_;  // the same, oldest first
  uint64_t next_request_ = 1;
  uint32_t next_sequence_ = 1;
  MonoTime fenced_until_{std::chrono::nanoseconds::min()};
  GrantStats stats_;
};

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_GRANTS_GRANT_PLANNER_H_
