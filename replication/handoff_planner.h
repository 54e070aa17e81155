// HandoffPlanner: the decisions of the handoff (handoff.h says what it does) as a pure state machine --
// which ranges move to whom, where each key's checks go meanwhile (the route overrides), when a push is
// retried, abandoned or switched, when an incoming range is released, what is re-replicated and when
// states are dropped.
//
// No I/O, no clock, no threads, no locks: every entry point takes the current time (and, where it asks
// who can be reached, a ClusterView) and returns the actions to carry out. The driver (HandoffManager,
// handoff.h) scans the store, pushes, flushes, sends, publishes the overrides and arms one timer at
// `wake_at`, and reports what came of each action with the matching event:
//
//   RingChanged(before, after)      a new ring (or a restart noticed on the same ring)
//   MembersChanged / Timer          a member may have become unreachable / the last wake_at came
//   PushWindowDone(id, attempt, …)  a PushWindow action's states were acknowledged, or not
//   FenceDone(id)                   no decision routed before a switch's hold is in flight any more
//   FlushDone(id, ok)               the Flush of a switch is over
//   DoneAcked(id, ok)               the HandoffDone of a switch was acknowledged, or not
//   HandoffDoneReceived(…)          a previous owner says it pushed everything of some ranges
//   SyncPulled(round, from, synced)  a holder pushed its copy of ranges this node holds unsynced (or reads)
//   Leave                           graceful leave
//   ReplicationPump / …SliceScanned / …PushDone / Dropped   re-replication and drop progress
//
// One outgoing handoff is an Outgoing whose phase is a std::variant:
//   PushDue --due--> Pushing --all windows acked--> Fencing --FenceDone--> Flushing --FlushDone--> DoneSent
//      ^                 | a window failed                                                    | not acked /
//      acked
//      +-----------------+                                             DoneSent <--due-- DoneRetry / (gone)
// Unsynced ranges: a range this node becomes a holder of on a ring change (a join, a restart, a holder
// declared dead) is *unsynced* until a holder with the range's copy has pushed it here -- the previous
// owner's HandoffDone (when it holds the range synced itself), or the answer to a PullSync: every round
// asks each reachable member holding the range on the newest ring or the ring before the change to push
// its states of it and say whether it holds it synced. A range is synced once one such member does, or
// once every one of them (on both rings) answered -- a cluster that starts, or a range whose every copy
// is gone (nothing to wait for). A member that is out of reach keeps the range unsynced: its copy may
// hold admissions the others lack. Past resync_timeout the range is decided from what this node has
// (logged, counted). Unsynced ranges are published with the overrides: the node decides their keys only
// when no other holder answers (closed: not at all).
//
// Take-over reads (majority_read, with majority acknowledgement): a range this node holds on a new ring
// whose holders changed -- a holder declared dead, a join, a leave, a restart -- may have had admissions
// acknowledged by a majority of its *earlier* holders only. Until a majority of those (this node counted
// when it was one) pushed their copies here (a PullSync each, asked again every kSyncRetryFirst while
// unanswered, never of a member out of reach), and for read_hold at least, the range is published as
// `reading` with the earlier ring: the replication planner then needs a majority of that ring's holders
// as well for every decision of its keys (ReplicatorOptions::ack_majority), so the first decisions after a
// take-over read the earlier holders' copies (merged from their `newer` answers) before one is answered.
// Unlike an unsynced range, a reading range is decided here as usual; no majority reachable there costs
// its admissions (503), not its routing. Past resync_timeout the read is dropped (logged, counted).
// A range both unsynced and read (this node gained it: a join, a restart, back from being declared dead)
// stays unsynced until its read has its majority, even once one holder's copy came: that copy may lack
// what the others acknowledged, and a decision from it would be refused by them (`newer`) -- unsynced,
// its checks go to the other holders meanwhile.
//
// Any phase ends (abandoned) at push_timeout, or when the target is unreachable while nothing is under way;
// a ring change that takes all its ranges from the target supersedes it. From Fencing on, the handoff is
// *switching*: its ranges route to the target with a hold, and checks held meanwhile are resumed (the
// `resume` action) once it ends or a ring change changes its ranges.
//
// Ordering contract for the driver, per returned HandoffActions: publish the routing table first (ring and
// overrides as one update), then resume held checks, then wait on the decision fence for `fence`, then
// carry out the rest. Reports of actions of handoffs or attempts that are gone are ignored, so the driver
// may report late.
//
// Thread safety: none; the driver serialises every call (on its executor).
#ifndef RINGLIMIT_REPLICATION_HANDOFF_PLANNER_H_
#define RINGLIMIT_REPLICATION_HANDOFF_PLANNER_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "replication/executor.h"
#include "replication/replication_planner.h"
#include "replication/routing_table.h"
#include "ring/ring_view.h"

namespace ringlimit::replication {

struct HandoffOptions {
  // --- Affects behaviour ---
  // Preference-list length R (--replicas), as in ReplicatorOptions. REQUIRES: >= 1. Default: 3.
  uint32_t replicas = 3;
  // Incoming: how long to pass a range's checks to its previous owner while waiting for its
  // HandoffDone before deciding from what this node has. REQUIRES: > 0. Default: 30 s.
  std::chrono::milliseconds done_timeout{30'000};
  // Outgoing: how long a push to one member may take in all before it is abandoned (logged, counted).
  // REQUIRES: > 0. Default: 60 s.
  std::chrono::milliseconds push_timeout{60'000};
  // Drop states this node no longer owns or replicates this long after the last ring change (and only
  // when no handoff is in progress). REQUIRES: >= 0. Default: 5 s.
  std::chrono::milliseconds drop_delay{5'000};
  // How long a range this node holds stays unsynced (see above) at most, while no holder with its copy
  // answers; then it is decided from what this node has (logged, counted). REQUIRES: > 0. Default: 60 s.
  std::chrono::milliseconds resync_timeout{60'000};
  // Take-over reads (with ReplicatorOptions::ack_majority, --failure-mode closed): on a ring change, every
  // range this node holds on the new ring whose holders changed is *read* -- pulled from the holders it
  // had on the ring before (a PullSync each) until a majority of them (this node counted when it was one)
  // pushed their copies here -- and published as RouteOverrides::reading with that ring meanwhile, so that
  // its decisions need a majority of that ring's holders too. An entry stays at least `read_hold` (members
  // still on the earlier ring may decide meanwhile), at most resync_timeout. Default: false.
  bool majority_read = false;
  // REQUIRES: >= 0. Default: 2 s.
  std::chrono::milliseconds read_hold{2'000};

  // --- Affects performance ---
  // Token sub-ranges scanned at a time by re-replication and drop passes (bounds the memory of a scan).
  // REQUIRES: >= 1. Default: 64.
  uint32_t scan_slices = 64;
  // Re-replication and drop scan only the token ranges whose holders changed (a join costs work in
  // proportion to the share that moved): re-replication the ranges this node owns whose preference list
  // gained a member (ReplicationRanges), the drop the ranges this node held on a ring since its last drop
  // and holds no more (the first drop after a start scans everything). false: every slice of the token
  // space is scanned (the full scan: the benchmark's baseline, bench/replication/ring_change_bench).
  // Either way each state is checked by key as before. Default: true.
  bool scan_moved_only = true;
};

// Returns nullopt when every REQUIRES of `options` holds, else what is wrong.
[[nodiscard]] Status Validate(const HandoffOptions& options);

// One handoff in progress, as GET /v1/cluster shows it.
struct HandoffView {
  std::string direction;  // "out" (this node pushes) or "in" (this node waits for the previous owner)
  std::string peer;       // the other end
  size_t ranges = 0;      // token ranges concerned
  double share = 0;       // fraction of the token space concerned
  uint64_t keys = 0;      // out: keys pushed so far; in: keys received so far from that peer
  std::string phase;      // out: "pushing", "flushing", "done-sent"; in: "waiting"
  double seconds = 0;     // since it started
  // Out only (0 for "in"): the progress of the push. keys_total: keys to send, counted per scan window when
  // the push (re)started, each window's count replaced by the keys actually sent once it is acknowledged
  // (so keys == keys_total once every window is); 0 until counted. keys_left: the counts of the windows
  // not acknowledged yet (keys + keys_left == keys_total while pushing).
  uint64_t keys_total = 0;
  uint64_t keys_left = 0;
  uint64_t bytes = 0;        // out: the serialized size of the states pushed so far (as `keys`)
  size_t windows_done = 0;   // scan windows acknowledged
  size_t windows_total = 0;  // scan windows of the push
  double done = 0;  // share done: keys / keys_total (windows when nothing counted); 1 from the switch
};

struct HandoffStats {
  uint64_t handed_off_keys = 0;     // keys pushed by outgoing handoffs (including leave)
  uint64_t handoffs_completed = 0;  // outgoing handoffs acknowledged by HandoffDone
  uint64_t handoffs_failed = 0;     // outgoing handoffs abandoned (target gone, push_timeout, superseded)
  uint64_t incoming_completed = 0;  // incoming ranges released by a HandoffDone
  uint64_t incoming_abandoned = 0;  // incoming ranges released because the previous owner was gone or
                                    // done_timeout passed
  uint64_t rereplicated_keys = 0;   // keys pushed to new members of their preference list
  uint64_t dropped_states = 0;      // states discarded because this node neither owns nor replicates them
  uint64_t scanned_states = 0;      // states read by re-replication and drop scans (as the driver reports)
  uint64_t in_progress = 0;         // gauge: handoffs in progress (both directions)
  uint64_t keys_left = 0;           // gauge: keys_left summed over the outgoing handoffs in progress
  uint64_t unsynced_ranges = 0;     // gauge: ranges held without their copy yet
  double unsynced_share = 0;        // gauge: the fraction of the token space they cover
  uint64_t synced_ranges = 0;       // unsynced ranges that received all or part of their copy
  uint64_t resync_expired = 0;      // unsynced ranges decided from what this node had (resync_timeout)
  uint64_t reading_ranges = 0;      // gauge: take-over reads under way or held (majority_read)
  uint64_t reads_completed = 0;     // take-over reads that got a majority's copies
  uint64_t reads_expired = 0;       // ... that did not within resync_timeout (dropped: the ring alone counts)
};

using RingPtr = std::shared_ptr<const ring::RingView>;

// Whether `token` is in one of `sorted` (sorted, non-overlapping).
[[nodiscard]] bool InSortedRanges(const std::vector<ring::TokenRange>& sorted, ring::Token token);
// The i-th of `n` equal slices of the token space (re-replication and drop scan one at a time).
// REQUIRES: i < n.
[[nodiscard]] ring::TokenRange ScanSlice(uint32_t i, uint32_t n);

// Scan the states of `window` whose token is in `ranges` (sorted), send them to `to` (one
// Replicator::SendUpdates), and report PushWindowDone(handoff, attempt, ok, keys sent, their serialized
// bytes). An empty window is reported at once (ok, 0 keys).
struct PushWindow {
  uint64_t handoff = 0;
  uint64_t attempt = 0;
  std::string to;
  ring::TokenRange window;
  std::vector<ring::TokenRange> ranges;
};

// Replicator::Flush(wait); report FlushDone(handoff, ok).
struct FlushLastChanges {
  uint64_t handoff = 0;
  std::chrono::milliseconds wait{0};
};

// Count, for each of `windows`, the keys whose token is in `ranges` (sorted) -- what PushWindow would
// send of it -- and report KeysCounted(handoff, attempt, one count per window): the progress figures
// (HandoffView::keys_total, keys_left) come from it. Store::CountTokenRange: no state is copied.
struct CountKeys {
  uint64_t handoff = 0;
  uint64_t attempt = 0;
  std::vector<ring::TokenRange> windows;
  std::vector<ring::TokenRange> ranges;
};

// Send a HandoffDone for `ranges` of the ring with `fingerprint` to `to`. handoff != 0: report
// DoneAcked(handoff, answered); handoff == 0 (a joining node's "nothing to hand off"): nothing to report.
struct SendDone {
  uint64_t handoff = 0;
  std::string to;
  uint64_t fingerprint = 0;
  uint64_t keys = 0;
  std::vector<ring::TokenRange> ranges;
  bool synced = false;  // this node held every one of `ranges` synced: the receiver holds them synced now
};

// Ask `to` to push its states of `ranges` (sorted) here and to say which of them it holds synced, and --
// when its newest ring is the one with `fingerprint` -- which of them it neither owns nor is handing off
// (one METHOD_SYNC_RANGES call, answered once its push was acknowledged); report SyncPulled(round, to, …).
struct PullSync {
  uint64_t round = 0;
  std::string to;
  std::vector<ring::TokenRange> ranges;
  uint64_t fingerprint = 0;  // this node's newest ring (0: none)
};

// Scan the tokens of `slice` that are in `limit` (all of it when none) and push each state whose key
// ReplicationTargets names targets for to those targets (one Replicator::SendUpdates per target); report
// ReplicationSliceScanned(job, pushes started, states scanned), then ReplicationPushDone(job, keys, ok) for
// each push.
struct ReplicateSlice {
  uint64_t job = 0;
  ring::TokenRange slice;
  std::optional<std::vector<ring::TokenRange>> limit;  // only these tokens (sorted); none: all
  std::vector<ring::TokenRange> pending_in;            // incoming ranges not released yet: skipped
  RingPtr before;                                      // the ring change being re-replicated
  RingPtr after;
  RingPtr current;  // the newest ring: keys this node no longer owns on it are skipped
};

// The members that must receive the key with token `token` for re-replication `slice` (the members that
// joined its preference list, other than this node, reachable), or none: this node does not own it,
// the slice excludes it. Pure; `reachable` is called only for candidates.
[[nodiscard]] std::vector<std::string> ReplicationTargets(
    const ReplicateSlice& slice, std::string_view self, uint32_t replicas, ring::Token token,
    const std::function<bool(std::string_view)>& reachable);

// The tokens where ReplicationTargets of the change `before` -> `after` can name anyone: those `self` owns
// on `after` whose preference list (`replicas`) on `after` has a member other than `self` that it lacks
// on `before`. Sorted, adjacent ranges merged. Pure; O(members V R).
[[nodiscard]] std::vector<ring::TokenRange> ReplicationRanges(const ring::RingView& before,
                                                              const ring::RingView& after,
                                                              std::string_view self, uint32_t replicas);

// `ranges` (sorted, non-overlapping) cut to `slice`: the parts of them a scan of `slice` reads; the whole
// slice when `ranges` is none.
[[nodiscard]] std::vector<ring::TokenRange> ScanParts(
    ring::TokenRange slice, const std::optional<std::vector<ring::TokenRange>>& ranges);

// Discard every state whose key's preference list (R) on `ring` lacks this node, reading only the tokens
// in `ranges` (sorted; none: every token), one slice of HandoffOptions::scan_slices at a time (ScanParts);
// report Dropped(states discarded, states scanned).
struct DropStates {
  RingPtr ring;
  std::optional<std::vector<ring::TokenRange>> ranges;
};

struct HandoffActions {
  // Publish into the routing table as one update: `ring` (when set) together with `overrides` (when set).
  RingPtr ring;
  std::shared_ptr<const RouteOverrides> overrides;
  // Handoffs whose held checks are routed again (after the publication above).
  std::vector<uint64_t> resume;
  // Switches that wait for the decision fence (after the publication above); report FenceDone(id).
  std::vector<uint64_t> fence;
  std::vector<CountKeys> count;
  std::vector<PushWindow> push;
  std::vector<FlushLastChanges> flush;
  std::vector<SendDone> send_done;
  std::vector<PullSync> pull;
  // A re-replication slice can be scanned: call ReplicationPump in a task of its own (so other events are
  // served between slices).
  bool pump = false;
  std::optional<ReplicateSlice> replicate;
  // Discard the states this node holds no more; report Dropped.
  std::optional<DropStates> drop;
  // The leave is over: every handoff of it acknowledged (true), or some failed (false).
  std::optional<bool> leave_done;
  // When to call Timer next (replaces any earlier instant); nullopt: nothing is due.
  std::optional<MonoTime> wake_at;
};

class HandoffPlanner {
 public:
  // Delay before retrying a failed push or HandoffDone while the target is still reachable.
  static constexpr std::chrono::milliseconds kRetryDelay{200};
  // An incoming range still waiting this long for its previous owner's HandoffDone makes this node ask
  // that owner (a PullSync) whether it hands the range off at all: members that saw different rings on the
  // way to the same one (a partition healing) can each expect the other to hand a range over. Asked again
  // every this long while it waits.
  static constexpr std::chrono::milliseconds kHandoffQueryAfter{1'000};
  // Delay between rounds of pulls for unsynced ranges: doubles from the first to the second while no
  // round syncs anything.
  static constexpr std::chrono::milliseconds kSyncRetryFirst{250};
  static constexpr std::chrono::milliseconds kSyncRetryMax{4'000};
  // Longest wait for Replicator::Flush at a switch.
  static constexpr std::chrono::milliseconds kMaxFlushWait{5'000};
  // An outgoing push scans windows of at most 1/kPushWindows of the token space at a time.
  static constexpr ring::Token kPushWindows = 16;

  // REQUIRES: Validate(options).ok().
  HandoffPlanner(std::string self, HandoffOptions options);

  HandoffPlanner(const HandoffPlanner&) = delete;
  HandoffPlanner& operator=(const HandoffPlanner&) = delete;

  // The ring changed from `before` (null: none) to `after` (null: ignored). Always publishes
  // `after` with the overrides of the change. If `before` is null or lacks this node while `after` has
  // it, `before` is taken as `after` without this node: every range this node gains is then incoming
  // from its previous owner, and every other member is told at once (SendDone, handoff 0) that this node
  // has nothing to hand off to it. A range moving back before its handoff finished never changed hands:
  // neither end waits for or pushes it. Pushes start at once (unreachable targets fail).
  [[nodiscard]] HandoffActions RingChanged(MonoTime now, const ClusterView& view, RingPtr before,
                                           RingPtr after);
  // Releases incoming ranges whose previous owner is unreachable or late (done_timeout), abandons
  // outgoing handoffs past push_timeout or whose target is unreachable while nothing is under way,
  // retries what is due, expires early HandoffDones, and starts the drop when it is due.
  [[nodiscard]] HandoffActions Timer(MonoTime now, const ClusterView& view);
  [[nodiscard]] HandoffActions MembersChanged(MonoTime now, const ClusterView& view) {
    return Timer(now, view);
  }

  [[nodiscard]] HandoffActions PushWindowDone(MonoTime now, uint64_t handoff, uint64_t attempt, bool ok,
                                              uint64_t keys, uint64_t bytes);
  // The counts of CountKeys (one per window; any other length is ignored). Windows already acknowledged
  // keep the keys they sent.
  [[nodiscard]] HandoffActions KeysCounted(MonoTime now, uint64_t handoff, uint64_t attempt,
                                           const std::vector<uint64_t>& per_window);
  [[nodiscard]] HandoffActions FenceDone(MonoTime now, uint64_t handoff);
  [[nodiscard]] HandoffActions FlushDone(MonoTime now, uint64_t handoff, bool ok);
  [[nodiscard]] HandoffActions DoneAcked(MonoTime now, uint64_t handoff, bool ok);

  // Previous owner `from` pushed everything of `ranges` (sorted, non-overlapping) of the ring with
  // `fingerprint`: the incoming ranges of `from` they cover are released (decided here from now on);
  // the rest is kept as an early HandoffDone for a later ring change to that ring (for done_timeout).
  // `synced`: the sender held them synced (SendDone::synced), so they are synced here from now on.
  [[nodiscard]] HandoffActions HandoffDoneReceived(MonoTime now, std::string_view from,
                                                   const std::vector<ring::TokenRange>& ranges,
                                                   uint64_t fingerprint, uint64_t keys, bool synced = false);

  // The answer to PullSync `round` from `from`: nullopt when it did not answer (or its push failed),
  // else which of the ranges asked it holds synced. Its states of every range asked are merged here.
  // `not_handed`: the parts of the ranges asked that `from`, on the same newest ring as this node, neither
  // owns nor hands off (NotHandedOf): incoming ranges of `from` among them are released as if its
  // HandoffDone had come (synced where `synced` says so) -- it has nothing more to push.
  [[nodiscard]] HandoffActions SyncPulled(MonoTime now, uint64_t round, std::string_view from,
                                          std::optional<std::vector<ring::TokenRange>> synced,
                                          const std::vector<ring::TokenRange>& not_handed = {});
  // Which parts of `ranges` (sorted) this node holds synced on its newest ring (a PullSync's answer).
  [[nodiscard]] std::vector<ring::TokenRange> SyncedOf(const std::vector<ring::TokenRange>& ranges) const;
  // Which parts of `ranges` (sorted) this node neither owns on its newest ring nor is handing off, when
  // that ring has `fingerprint`; empty otherwise (a PullSync's answer: rings that differ say nothing).
  [[nodiscard]] std::vector<ring::TokenRange> NotHandedOf(const std::vector<ring::TokenRange>& ranges,
                                                          uint64_t fingerprint) const;
  // Whether `token` is in an unsynced range.
  [[nodiscard]] bool Unsynced(ring::Token token) const;

  // Graceful leave from the newest ring of RingChanged (`ring` if there was none): hands every range this
  // node owns to its owner on the ring without this node; leave_done reports the end (at once when there
  // is nothing to hand off). nullopt: already leaving (refused; the earlier leave goes on).
  [[nodiscard]] std::optional<HandoffActions> Leave(MonoTime now, const ClusterView& view, RingPtr ring);

  // Re-replication: the next slice of the first job, or nothing to scan now.
  [[nodiscard]] HandoffActions ReplicationPump(MonoTime now);
  // A ReplicateSlice was scanned: `scanned` states read, `pushes` pushes started.
  [[nodiscard]] HandoffActions ReplicationSliceScanned(MonoTime now, uint64_t job, uint32_t pushes,
                                                       uint64_t scanned);
  [[nodiscard]] HandoffActions ReplicationPushDone(MonoTime now, uint64_t job, uint64_t keys, bool ok);
  // The drop asked for is over: `dropped` states discarded of `scanned` read.
  [[nodiscard]] HandoffActions Dropped(MonoTime now, uint64_t dropped, uint64_t scanned);

  // The switching handoff whose ranges contain `token` (its held checks wait for it), or nullopt.
  [[nodiscard]] std::optional<uint64_t> Holding(ring::Token token) const;

  // What is in progress, as of `now`.
  [[nodiscard]] std::vector<HandoffView> Views(MonoTime now) const;
  [[nodiscard]] HandoffStats stats() const;

 private:
  // --- Phases of an outgoing handoff (see the diagram above) ---
  struct Pushing {         // window `next_window - 1` is being pushed (scanned or in flight)
    uint64_t attempt = 0;  // unique per push: answers of an earlier attempt are ignored
    std::vector<ring::TokenRange> windows;
    size_t next_window = 0;
  };
  struct PushDue {  // the push (re)starts from its first window at `at` (new, or a window failed)
    MonoTime at{};
  };
  struct Fencing {};   // switching: waiting for the decisions routed before the hold
  struct Flushing {};  // switching: Replicator::Flush under way
  struct DoneSent {};  // switching: HandoffDone sent, not answered yet
  struct DoneRetry {   // switching: HandoffDone not acknowledged; send again at `at`
    MonoTime at{};
  };
  using Phase = std::variant<Pushing, PushDue, Fencing, Flushing, DoneSent, DoneRetry>;

  struct PushProgress {
    std::vector<uint64_t> window_keys;  // per scan window: states counted, then keys sent once acknowledged
    bool counted = false;               // KeysCounted came
    size_t windows_done = 0;
    size_t windows_total = 0;
  };

  struct Outgoing {
    std::string to;
    std::vector<ring::TokenRange> ranges;  // sorted
    uint64_t fingerprint = 0;              // of the ring the ranges move to
    bool leave = false;
    MonoTime started{};
    uint64_t keys = 0;   // pushed by the current attempt
    uint64_t bytes = 0;  // their serialized size
    Phase phase;
    bool synced = false;    // this node held every one of `ranges` synced when the handoff started
    PushProgress progress;  // of the current attempt (reset when it starts)
  };
  // keys_total, keys_left, windows and done of `o`'s view.
  static void FillProgress(const Outgoing& o, HandoffView& v);

  struct Incoming {
    ring::TokenRange range;
    std::string from;
    MonoTime started{};
    RingPtr before;  // the ring change that made it, for re-replication once released
    RingPtr after;
  };

  struct EarlyDone {  // a HandoffDone that arrived before the ring change it belongs to
    std::string from;
    std::vector<ring::TokenRange> ranges;
    uint64_t fingerprint = 0;  // of the ring the ranges move in: only a ring change to it consumes them
    MonoTime at{};
    bool synced = false;  // HandoffDone's `synced`
  };

  struct UnsyncedRange {
    ring::TokenRange range;
    MonoTime since{};
    RingPtr before;  // the ring before the change that made it: its holders are asked too
  };

  struct SyncRound {
    uint64_t id = 0;
    std::map<std::string, std::vector<ring::TokenRange>> asked;  // by member: ranges asked (sorted)
    std::vector<ring::TokenRange> synced;                        // answered synced by someone
    std::vector<ring::TokenRange> unanswered;  // some holder of it failed to answer or is out of reach
    std::vector<ring::TokenRange> unheld;      // no member but this node holds it (nothing to wait for)
    size_t pending = 0;
  };

  struct ReadingRange {  // a take-over read (majority_read): one piece with the same holders on `before`
    ring::TokenRange range;
    RingPtr before;
    std::vector<std::string> holders;   // of the range on `before`
    std::vector<std::string> answered;  // of them, those that pushed their copy here
    MonoTime since{};
    bool read = false;  // a majority's copies are here (it stays published until since + read_hold)
  };

  struct ReplicationJob {
    uint64_t id = 0;
    RingPtr before;
    RingPtr after;
    // Only these tokens (sorted; ReplicationRanges of the change unless !scan_moved_only); none: all.
    std::optional<std::vector<ring::TokenRange>> limit;
    uint32_t next_slice = 0;
    bool scanning = false;     // a ReplicateSlice is out, not reported yet
    uint32_t outstanding = 0;  // pushes not answered yet
  };

  // From Fencing on: the ranges route to the target with a hold.
  static bool Switching(const Phase& phase);
  static const char* PhaseName(const Phase& phase);
  uint64_t AddOutgoing(MonoTime now, const std::string& to, std::vector<ring::TokenRange> ranges,
                       uint64_t fingerprint, bool leave);
  void StartPush(MonoTime now, const ClusterView& view, uint64_t id, HandoffActions& out);
  void NextWindow(MonoTime now, uint64_t id, HandoffActions& out);
  void SendDoneOf(uint64_t id, HandoffActions& out);
  void Finish(MonoTime now, uint64_t id, bool ok, std::string_view why, HandoffActions& out);
  void Tick(MonoTime now, const ClusterView& view, HandoffActions& out);
  void QueueReplication(const Incoming& in, ring::TokenRange r);
  // ReplicationRanges of `before` -> `after` (the last pair asked is kept: released incoming ranges of one
  // change ask for the same pair again and again).
  const std::vector<ring::TokenRange>& MovedForReplication(const RingPtr& before, const RingPtr& after);
  void SendNothingToHandOff(const ClusterView& view, const RingPtr& after, HandoffActions& out) const;
  void Publish(HandoffActions& out) const;
  // Unsynced ranges after the ring change `before` -> `after`; `deciding` (sorted): ranges this node
  // decided on `before` through its outgoing handoffs (they never left it if they come back).
  void UpdateUnsynced(MonoTime now, const RingPtr& before, const RingPtr& after,
                      const std::vector<ring::TokenRange>& deciding);
  // The ranges of unsynced_, sorted.
  [[nodiscard]] std::vector<ring::TokenRange> UnsyncedRanges() const;
  // `ranges` (sorted) are synced from now on; true when that changed anything. With majority_read, the
  // parts of them still in an unread take-over read are copied only: they stay unsynced until the read has
  // its majority (ReleaseCopied) -- one holder's copy may lack admissions a majority of the earlier holders
  // acknowledged, and deciding from it would only have the decision refused (a holder answers it newer).
  bool MarkSynced(const std::vector<ring::TokenRange>& ranges);
  // Marks synced the copied ranges whose take-over reads are over; true when that changed anything.
  bool ReleaseCopied();
  // The ranges of the take-over reads without their majority yet, sorted.
  [[nodiscard]] std::vector<ring::TokenRange> UnreadRanges() const;
  void ExpireUnsynced(MonoTime now, HandoffActions& out);
  // Take-over reads of the ring change `before` -> `after` (majority_read).
  void UpdateReading(MonoTime now, const RingPtr& before, const RingPtr& after);
  // Asks each reachable holder of an unread piece that has not pushed it yet (one PullSync per member).
  void StartReads(MonoTime now, const ClusterView& view, HandoffActions& out);
  // The answer to a read's PullSync; false when `round` is not one.
  bool ReadPulled(MonoTime now, uint64_t round, std::string_view from, bool answered);
  // Marks `r` read once its answers, this node counted when it is one of its holders, are a majority of them.
  void MarkReadIfMajority(ReadingRange& r);
  // Ends the reads past read_hold and expires those past resync_timeout; publishes when that changed them.
  void EndReads(MonoTime now, HandoffActions& out);
  void StartSyncRound(MonoTime now, const ClusterView& view, HandoffActions& out);
  // Asks each reachable previous owner whose incoming ranges waited kHandoffQueryAfter whether it hands
  // them off at all (a PullSync), unless a query to it is under way or was answered less than that ago.
  void QueryWaitingHandoffs(MonoTime now, const ClusterView& view, HandoffActions& out);
  // Releases the incoming ranges of `from` that `ranges` (sorted) cover (its HandoffDone, announcing
  // `keys`); returns the parts released (sorted).
  std::vector<ring::TokenRange> ReleaseIncoming(MonoTime now, std::string_view from,
                                                const std::vector<ring::TokenRange>& ranges, uint64_t keys);
  void EndSyncRound(MonoTime now, HandoffActions& out);
  // Every event ends here: the re-replication pump and the next wake-up.
  HandoffActions& Done(HandoffActions& out);

  // --- Constant after construction ---
  const std::string self_;
  const HandoffOptions options_;

  // --- State ---
  uint64_t next_id_ = 1;  // handoff, attempt and job ids
  std::map<uint64_t, Outgoing> outgoing_;
  std::vector<Incoming> incoming_;  // sorted by range.first
  std::vector<EarlyDone> early_dones_;
  std::deque<ReplicationJob> jobs_;
  bool pump_requested_ = false;          // a `pump` action is out, ReplicationPump not called yet
  std::vector<UnsyncedRange> unsynced_;  // sorted by range.first, non-overlapping
  // Unsynced ranges a holder's synced copy reached while their take-over read lacked its majority (sorted).
  std::vector<ring::TokenRange> copied_;
  std::optional<SyncRound> round_;     // the pulls under way
  std::vector<ReadingRange> reading_;  // sorted by range.first; pieces of several changes may overlap
  std::map<uint64_t, std::pair<std::string, std::vector<ring::TokenRange>>> read_rounds_;  // id -> to, ranges
  MonoTime read_next_{};                                                                   // next StartReads
  struct HandoffQuery {  // QueryWaitingHandoffs, by previous owner
    uint64_t round = 0;  // the PullSync under way (0: none)
    MonoTime next{};     // not asked again before
  };
  std::map<std::string, HandoffQuery, std::less<>> queries_;
  MonoTime next_round_{};
  std::chrono::milliseconds round_delay_ = kSyncRetryFirst;
  RingPtr latest_;  // `after` of the last ring change
  MonoTime last_change_{};
  bool drop_pending_ = false;
  bool dropping_ = false;  // a `drop` action is out, Dropped not called yet
  // What the next drop reads (scan_moved_only): the ranges held on some ring since the last drop (the
  // ranges not held on the newest are read); none: every token (no drop since the start: the store may
  // hold anything). Widened by every ring change, emptied by the drop that reads it.
  std::optional<std::vector<ring::TokenRange>> drop_scope_;
  struct {
    RingPtr before, after;
    std::vector<ring::TokenRange> ranges;
  } moved_cache_;  // MovedForReplication
  // Leave: leaving_ from Leave on; left_ once every handoff of it ended.
  bool leaving_ = false;
  bool left_ = false;
  bool leave_ok_ = true;
  RingPtr left_ring_pending_;  // the ring without this node, installed when the leave ends
  RingPtr left_ring_;          // installed: every check without an entry goes to its owner on it
  HandoffStats stats_;
};

}  // namespace ringlimit::replication

#endif  // RINGLIMIT_REPLICATION_HANDOFF_PLANNER_H_
