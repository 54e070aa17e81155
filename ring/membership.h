// Membership: the SWIM-style failure detector and member table of one node, as a pure state machine.
//
// No I/O and no clock: the network layer feeds it received messages and the current time, and sends the
// messages it returns. Time is a std::chrono::nanoseconds since any fixed epoch (use a steady clock).
//
// Protocol (SWIM, Das et al. 2002, with suspicion and piggybacked dissemination)
//  - Every probe_interval the node pings the next member of a shuffled round-robin list. No Ack within
//    probe_timeout: it asks indirect_probes other members to ping the target for it (PingReq). No Ack
//    (direct or relayed) by the end of the period: the target becomes suspect. A suspect that does not
//    refute within suspicion_timeout becomes dead.
//  - Updates (a member's id, addresses, vnodes, incarnation and state) ride on every message, each
//    retransmitted at most retransmit_mult * ceil(log2(N + 1)) times; a receiver that learns something new
//    passes it on the same way (infection-style). Every sync_interval a node exchanges its whole table
//    with a random member (push-pull), which also repairs anything lost; it also offers its table to one
//    dead member and, when no other member is alive, to the seeds, so both sides of a healed partition
//    find each other again.
//  - Precedence (see Supersedes): a higher incarnation always wins; at equal incarnation the higher
//    state rank wins: joining < alive < leaving < suspect < dead < left. Only a member itself raises
//    its incarnation: told it is suspect or dead, it refutes by re-announcing its state at incarnation + 1.
//    Left is final: nothing at the same or a lower incarnation revives a member that left, and such a
//    member is never probed or suspected.
//  - Joining: a node started with seeds is `joining` until one seed answers its push-pull Ping with the
//    seed's whole table; it then becomes `alive`. A node started without seeds is alive at once.
//    `joining` members are probed but not in the ring; alive, suspect and leaving members are (IsInRing).
//  - Identity: an id belongs to one peer address while its member lives. A record claiming the id of a live
//    (joining, alive, leaving or suspect) member at another peer address is refused (IdConflict, counted),
//    whatever its incarnation: a second node started with a taken id, not a restart (a restart at a new
//    address is taken in once its old life is declared dead). A joining node that finds its own id held
//    elsewhere in a seed's table stays joining (and keeps retrying) instead of becoming alive; a node never
//    refutes a record of its id at another address.
//  - Dead and left members are kept as tombstones for tombstone_retention (so stale gossip cannot revive
//    them), then forgotten. Updates that announce an unknown member as dead or left are ignored.
//
// Thread safety: not thread-safe. The owner serialises all calls (e.g. runs them on one strand).
#ifndef RINGLIMIT_RING_MEMBERSHIP_H_
#define RINGLIMIT_RING_MEMBERSHIP_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "ring/ring_view.h"

namespace ringlimit::ring {

using MonoTime = std::chrono::nanoseconds;  // an instant on the caller's monotonic clock

enum class MemberState : uint8_t {
  kJoining = 0,
  kAlive = 1,
  kLeaving = 2,
  kSuspect = 3,
  kDead = 4,
  kLeft = 5,
};

// Lower-case names: "joining", "alive", "leaving", "suspect", "dead", "left". Parse accepts exactly these.
std::string_view MemberStateName(MemberState state);
std::optional<MemberState> ParseMemberState(std::string_view name);

// Whether a member in `state` owns a part of the ring (alive, suspect, leaving).
[[nodiscard]] bool IsInRing(MemberState state);

// What one node knows about one member; also the unit of gossip.
struct MemberInfo {
  std::string id;                    // REQUIRES: 1..kMaxMemberIdLength bytes
  std::string http_address;          // "host:port" of the HTTP API (informational here)
  std::string peer_address;          // "host:port" of the peer protocol; where messages to it are sent
  uint32_t vnodes = kDefaultVnodes;  // REQUIRES: 1..kMaxVnodes
  uint64_t incarnation = 0;
  MemberState state = MemberState::kAlive;

  bool operator==(const MemberInfo&) const = default;
};

// How much of the cluster a node reaches, judged from its own member table (the majority rule of
// --failure-mode closed): `known` counts every member but joining and left ones, `reached` the alive and
// leaving ones (the node itself included). Suspects count as not reached, so that a cut-off node stops
// deciding as soon as it suspects the others, before it declares them dead.
struct Reach {
  size_t known = 0;
  size_t reached = 0;
  // No more than half of the known members reached.
  [[nodiscard]] bool minority() const { return known > 0 && 2 * reached <= known; }
};
[[nodiscard]] Reach ReachOf(std::span<const MemberInfo> members);

// Whether `update` supersedes `current` (both about the same member): a higher incarnation, or the same
// incarnation and a higher state rank.
[[nodiscard]] bool Supersedes(const MemberInfo& update, const MemberInfo& current);

enum class MessageType : uint8_t {
  kPing = 1,     // "are you there?" -> Ack
  kPingReq = 2,  // "ping `target` for me" -> the helper pings it and relays the Ack
  kAck = 3,      // answer to Ping (or relayed answer to PingReq) with the same seq
};

struct Message {
  MessageType type = MessageType::kPing;
  uint64_t seq = 0;            // probe sequence number of the prober; an Ack echoes it
  std::string from;            // sender id
  std::string from_address;    // sender peer address (answers go there)
  std::string target;          // PingReq: member to probe; Ack: member whose liveness it confirms
  std::string target_address;  // PingReq: its peer address
  // Ping: `updates` is the sender's whole table and the receiver answers with its whole table (push-pull;
  // used to join and for anti-entropy). Ack: `updates` is the sender's whole table.
  bool full_state = false;
  std::vector<MemberInfo> updates;  // piggybacked gossip
  // Clock comparison (ring/clock_offset.h). The state machine reads no clock: the network layer stamps
  // wall_ns on every message it sends (the sender's wall clock, ns since the Unix epoch; 0 = not given),
  // and an Ack answering a Ping or PingReq directly echoes that message's wall_ns in echo_wall_ns (0 when
  // relayed), so the prober can estimate the answerer's offset from the exchange.
  int64_t wall_ns = 0;
  int64_t echo_wall_ns = 0;

  bool operator==(const Message&) const = default;
};

// A message to send. to_id is empty when the receiver's id is unknown (a seed address).
struct Outgoing {
  std::string to_address;
  std::string to_id;
  Message message;
};

enum class MemberEventKind : uint8_t {
  kJoined = 1,  // first seen (joining or alive)
  kAlive = 2,   // became alive (join done, refuted suspicion, restarted) or changed addresses/vnodes
  kLeaving = 3,
  kSuspect = 4,
  kDead = 5,
  kLeft = 6,
  kForgotten = 7,  // tombstone dropped from the table
};

struct MemberEvent {
  MemberEventKind kind;
  MemberInfo member;  // the member's record after the change
};

// What every call returns: messages to send, what changed, and whether the ring members changed.
// Two nodes with one id: `id` is held by a live member at `held_by` (a peer address), and a record of a
// node at `refused` claiming it was not taken in (by this node: see Membership, "Identity").
struct IdConflict {
  std::string id;
  std::string held_by;
  std::string refused;
};

struct MembershipOutput {
  std::vector<Outgoing> messages;
  std::vector<IdConflict> id_conflicts;
  std::vector<MemberEvent> events;
  bool ring_changed = false;  // RingMembers() differs from before the call: rebuild the RingView
  // A rumour said this node is dead (it was paused or cut off long enough): the others dropped it from their
  // rings meanwhile and its ranges were decided elsewhere. Reported once per declaration of this life, also
  // when it comes after the node refuted an older suspicion (the rumour is then stale, yet true).
  bool declared_dead = false;
};

struct MembershipOptions {
  // --- Affects behaviour ---
  // Period of the failure detector: one member probed per period. Default: 200 ms.
  std::chrono::milliseconds probe_interval{200};
  // How long to wait for a direct Ack before asking helpers. REQUIRES: < probe_interval. Default: 80 ms.
  std::chrono::milliseconds probe_timeout{80};
  // Helpers asked to probe indirectly after a direct timeout (k). 0 disables indirect probes. Default: 3.
  uint32_t indirect_probes = 3;
  // A suspect that has not refuted within this is declared dead. Default: 1500 ms.
  // With the defaults a crashed member is declared dead, on loopback, within
  //   (time until some member probes it: <= probe_interval for most clusters, <= (N-1) * probe_interval
  //    in the worst phase) + probe_interval (the failed period) + suspicion_timeout
  //   = 200 + 200 + 1500 ms = 1.9 s typical, 2.6 s worst case for 5 nodes; dissemination of `dead`
  //   then takes a few more periods of gossip (each message reaches a new member).
  std::chrono::milliseconds suspicion_timeout{1500};
  // Dead and left members are forgotten after this. Default: 60 s.
  std::chrono::milliseconds tombstone_retention{60'000};
  // A joining node re-sends its join Ping to every seed this often until one answers. Default: 500 ms.
  std::chrono::milliseconds join_retry_interval{500};
  // A joining node that no seed answered within this starts alone (alive) and keeps offering its table to
  // the seeds and discovered addresses (MaybeSync), so the first node of a cluster found through DNS
  // (--join-dns) does not wait for itself. 0: never, it stays joining (--join). Default: 0.
  std::chrono::milliseconds join_alone_after{0};
  // Push-pull exchange of whole tables with one random member (anti-entropy), and the offer of our table
  // to one dead member, to the seeds when alone, and to an unknown discovered address (healing). 0
  // disables both. In a cluster of more than sync_scale_after members the anti-entropy exchange runs every
  // sync_interval * N / sync_scale_after instead (SyncIntervalFor), so that the bytes of whole tables
  // (O(N) each) a node sends per second do not grow with N; healing offers keep sync_interval.
  // Default: 5 s.
  std::chrono::milliseconds sync_interval{5'000};
  // See sync_interval. REQUIRES: >= 1. Default: 32 (memberlist's push-pull scale threshold).
  uint32_t sync_scale_after = 32;
  // Each update is piggybacked at most retransmit_mult * ceil(log2(N + 1)) times (lambda). Default: 3.
  uint32_t retransmit_mult = 3;
  // The most vnodes a member may announce: a record with more is refused (counted in
  // MembershipStats::vnodes_refused), so one member cannot take most of the ring by asking for it.
  // REQUIRES: 1..kMaxVnodes. Default: 512 (4 x the default vnodes).
  uint32_t max_vnodes = 512;

  // --- Affects performance ---
  // Updates piggybacked per message at most (whole-table messages are not limited). Default: 8.
  uint32_t max_piggyback = 8;
  // Gossip fan-out: every probe_interval in which updates wait to be disseminated, the node also sends
  // them to this many random probeable members, in an Ack with seq 0 (which every version merges and
  // answers nothing to). Piggybacking on probes alone reaches about two members per period; with the
  // fan-out a rumour reaches N members in fewer periods, and a node's queue drains faster. Nothing is
  // sent when no update waits (steady state). 0 disables. Default: 3 (memberlist's GossipNodes).
  uint32_t gossip_nodes = 3;

  // Seed of the random choices (probe order, helpers, sync partner). Default: 0 = derived from the id.
  uint64_t random_seed = 0;
};

// OK when every REQUIRES of `options` holds, else InvalidArgument saying what is wrong.
[[nodiscard]] Status Validate(const MembershipOptions& options);

// The interval between a node's anti-entropy exchanges (push-pull of whole tables with one alive member)
// when it knows `members` members (itself included, tombstones too): sync_interval up to
// sync_scale_after members, then in proportion to `members`. 0 when sync_interval is 0.
[[nodiscard]] std::chrono::milliseconds SyncIntervalFor(const MembershipOptions& options, size_t members);

// Counters for /metrics.
struct MembershipStats {
  uint64_t probes_sent = 0;
  uint64_t indirect_probes_sent = 0;
  uint64_t probes_failed = 0;    // periods that ended without an Ack (target suspected)
  uint64_t refutations = 0;      // times this node raised its incarnation to refute a rumour
  uint64_t invalid_updates = 0;  // gossip entries dropped as malformed
  uint64_t stale_updates = 0;    // gossip entries that did not supersede what we knew
  uint64_t id_conflicts = 0;     // records refused because their id is taken by a live member elsewhere
  uint64_t vnodes_refused = 0;   // records refused because they announce more than max_vnodes
};

class Membership {
 public:
  // `self` is this node's record; its incarnation should exceed any earlier life's (e.g. wall-clock
  // milliseconds at start), so a restart outranks its own tombstone. Its state is ignored.
  Membership(const MembershipOptions& options, MemberInfo self);

  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Starts the node: alone (alive) when `seeds` is empty, else joining through the seeds' peer addresses
  // (this node's own address among them is ignored). Call once, before anything else.
  [[nodiscard]] MembershipOutput Start(MonoTime now, const std::vector<std::string>& seeds);

  // Peer addresses found by discovery (DNS, re-resolved by the caller), replacing the previous set. A
  // joining node sends its join to them as to its seeds; every sync interval a node offers its table to
  // one of them that is no known member's address (this node's own is ignored), so separately started
  // nodes -- or two clusters formed before the names resolved -- merge into one.
  void SetDiscovered(std::vector<std::string> addresses);

  // Advances timers: probes, indirect probes, suspicion timeouts, join retries, syncs, reaping.
  // Call at least every probe_interval / 4 or so; later calls only delay detection.
  [[nodiscard]] MembershipOutput Tick(MonoTime now);

  // Handles one received message (possibly from an unknown sender).
  [[nodiscard]] MembershipOutput Receive(MonoTime now, const Message& message);

  // Graceful leave, step 1: announce `leaving` (still in the ring; hand off state now).
  [[nodiscard]] MembershipOutput Leave(MonoTime now);
  // Step 2: announce `left`. Returns a Ping carrying the `left` record to every member not known dead or
  // left (we no longer probe, so nothing would piggyback it); send them, then stop. Afterwards Tick and
  // Receive return nothing: the node neither probes nor answers.
  [[nodiscard]] MembershipOutput FinishLeave(MonoTime now);

  [[nodiscard]] const MemberInfo& self() const { return self_; }
  [[nodiscard]] bool joined() const { return self_.state != MemberState::kJoining; }
  // Every known member (self included, tombstones too), sorted by id.
  [[nodiscard]] std::vector<MemberInfo> Members() const;
  // Changes whenever Members() may have changed (a record taken in, changed or forgotten, self's
  // included), so that a caller can tell without copying the table.
  [[nodiscard]] uint64_t table_version() const { return table_version_; }
  // ReachOf(Members()), in O(1).
  [[nodiscard]] Reach reach() const;
  // The record of `id`, if known.
  [[nodiscard]] std::optional<MemberInfo> Find(std::string_view id) const;
  // The members that own a part of the ring (IsInRing), sorted by id: the input of RingView::Build.
  [[nodiscard]] std::vector<RingMember> RingMembers() const;
  // Whether some update still has retransmissions left.
  [[nodiscard]] bool HasPendingGossip() const { return queued_ != 0; }
  [[nodiscard]] const MembershipStats& stats() const { return stats_; }

 private:
  struct QueueState;
  // An update waiting to be piggybacked. `info` and `state` point into the record it disseminates (an
  // Entry of members_, or self_ and self_queue_), which outlives it: a record leaves members_ only after
  // Dequeue.
  struct Queued {
    const MemberInfo* info = nullptr;
    QueueState* state = nullptr;
  };
  // The dissemination queue: one list per number of transmits (queue_[t]: the records piggybacked t times
  // since they were last queued), newest arrival first. MakeMessage takes the lowest level first, each
  // from its front (fresh news first, as memberlist does), and moving a record between levels is a
  // splice: O(1) per piggybacked update, no comparison, no allocation.
  using QueueLevel = std::list<Queued>;
  // Where a record stands in the queue: kept next to the record itself (Entry, or self_queue_ for self_),
  // so that queuing and piggybacking find it without a lookup by id.
  struct QueueState {
    bool queued = false;
    uint32_t transmits = 0;   // times piggybacked since last queued: its level
    QueueLevel::iterator at;  // its place in queue_[transmits], when queued
  };
  struct Entry {
    MemberInfo info;
    MonoTime changed_at{};  // when the current state was entered (suspicion and tombstone timers)
    QueueState queue;
  };
  using Table = std::map<std::string, Entry, std::less<>>;
  struct Probe {
    std::string target;
    uint64_t seq = 0;
    MonoTime sent_at{};
    bool indirect_sent = false;
  };
  struct Relay {  // a Ping sent on behalf of another member's PingReq
    std::string requester_id;
    std::string requester_address;
    uint64_t requester_seq = 0;
    std::string target;
    MonoTime expires_at{};
  };
  // Keeps suspects_by_time_, tombstones_by_time_ and state_counts_ in step with an entry: Unindex before
  // changing its state or changed_at, Index after.
  void Index(const std::string& id, const Entry& entry);
  void Unindex(const std::string& id, const Entry& entry);
  // Ring changes without a walk over the table: before a member's record changes, TouchRing notes its
  // ring entry (RingEntry: nullopt when it is not in the ring) once per call; RingChanged, at the end of the
  // call, tells whether any touched member's entry differs now -- exactly when RingMembers() differs from
  // before the call -- and forgets the notes. O(touched * log N).
  std::optional<RingMember> RingEntry(const std::string& id, const MemberInfo& info) const;
  void TouchRing(const std::string& id);
  bool RingChanged();

  // Merges one update; returns whether it was accepted. Emits events and queues accepted updates.
  bool Merge(MonoTime now, const MemberInfo& update, MembershipOutput& out);
  // Applies a new record for a member (not self), emitting the matching event. `it`: its entry, or
  // members_.end() when it is not known yet.
  void Apply(MonoTime now, Table::iterator it, const MemberInfo& info, MembershipOutput& out);
  // Raises our incarnation above the rumour's and re-announces our own state.
  void Refute(uint64_t rumour_incarnation);
  // Moves self to `state` at a new incarnation and announces it.
  void SetSelfState(MemberState state, MembershipOutput& out);
  // (Re)queues a record with no transmits yet, or takes it out of the queue. O(1), no lookup by id.
  void Enqueue(const MemberInfo& info, QueueState& state);
  void Dequeue(QueueState& state);

  void ProbeStep(MonoTime now, MembershipOutput& out);
  void Gossip(MonoTime now, MembershipOutput& out);
  // Up to indirect_probes random alive members other than `target`, to ask to probe it.
  std::vector<std::string> IndirectHelpers(Table::const_iterator target);
  void StartProbe(MonoTime now, MembershipOutput& out);
  // The next member to probe (probeable), or members_.end().
  Table::iterator NextProbeTarget();
  void Suspect(MonoTime now, const std::string& id, MembershipOutput& out);
  void SendJoin(MembershipOutput& out);
  void MaybeSync(MonoTime now, MembershipOutput& out);
  void Reap(MonoTime now, MembershipOutput& out);

  // Builds a message to `to_id` with piggybacked updates (the receiver's own record first when we think
  // it is suspect or dead, so it can refute).
  Outgoing MakeMessage(MessageType type, const std::string& to_id, const std::string& to_address,
                       uint64_t seq);
  // The entry of `id` (not self), or members_.end(): O(1), through index_.
  Table::iterator Lookup(std::string_view id);
  Table::const_iterator Lookup(std::string_view id) const;
  std::vector<MemberInfo> FullTable() const;
  std::vector<std::string> AliveOthers(const std::string& except) const;
  size_t CountOf(MemberState state) const { return state_counts_[static_cast<size_t>(state)]; }
  uint32_t RetransmitLimit() const;

  // Constant after construction.
  const MembershipOptions options_;

  MemberInfo self_;
  QueueState self_queue_;
  Table members_;  // other members, by id
  // members_ by id, hashed (keys view members_'s keys): the lookups of every message and tick cost O(1),
  // not a walk down the tree (ten string comparisons at 1,000 members, each likely a cache miss).
  std::unordered_map<std::string_view, Table::iterator> index_;
  std::vector<QueueLevel> queue_;         // the records being disseminated, by transmits (QueueLevel)
  size_t queued_ = 0;                     // records in queue_
  uint64_t table_version_ = 0;            // see table_version()
  std::array<size_t, 6> state_counts_{};  // members_ per state (index: MemberState); see Index
  // The suspects and the tombstones by the time they entered that state (changed_at), so that the
  // timeouts of Tick look at the expired ones only, not at every member.
  std::set<std::pair<MonoTime, std::string>> suspects_by_time_;
  std::set<std::pair<MonoTime, std::string>> tombstones_by_time_;
  std::map<std::string, std::optional<RingMember>, std::less<>> ring_touched_;  // see TouchRing
  std::vector<std::string> seeds_;
  std::vector<std::string> discovered_;  // SetDiscovered
  std::vector<std::string> probe_order_;
  size_t probe_index_ = 0;
  std::optional<Probe> probe_;
  std::map<uint64_t, Relay> relays_;  // by the seq of our relay Ping
  uint64_t next_seq_ = 1;
  MonoTime next_probe_at_{};
  MonoTime next_gossip_at_{};
  MonoTime next_join_at_{};
  MonoTime joining_since_{};
  MonoTime next_sync_at_{};  // anti-entropy
  MonoTime next_heal_at_{};  // healing offers
  bool started_ = false;
  // Rumours of our death at an incarnation below this were reported (declared_dead) or are of an earlier
  // life (below our incarnation at construction).
  uint64_t dead_news_from_ = 0;
  std::mt19937_64 rng_;
  MembershipStats stats_;
};

}  // namespace ringlimit::ring

#endif  // RINGLIMIT_RING_MEMBERSHIP_H_
