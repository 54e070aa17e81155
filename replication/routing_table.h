// RoutingTable: everything the request path needs to route a check -- the ring, the handoff's route
// overrides and the members' addresses and states -- as one immutable, versioned value.
// RoutingPublisher: where the cluster (the members; the ring too when no handoff follows it) and the
// handoff (the ring with the overrides of its change, as one update) publish their parts; each change
// publishes a whole new table, so a reader never sees a ring without the overrides that go with it. Readers
// get the current table through a per-thread cache checked by one atomic load.
//
// Thread safety: RoutingTable is immutable. RoutingPublisher: every method from any thread; writers
// serialise on a mutex that readers take only when the version changed since their thread last read.
// Lifetime: see Current().
#ifndef RINGLIMIT_REPLICATION_ROUTING_TABLE_H_
#define RINGLIMIT_REPLICATION_ROUTING_TABLE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ring/membership.h"
#include "ring/ring_view.h"

namespace ringlimit::replication {

// The handoff's overrides of the ring (replication/handoff.h says when each applies).
struct RouteOverrides {
  struct Entry {
    ring::TokenRange range;
    std::string target;  // who decides the range now
    bool hold = false;   // a range this node is switching to `target`: its checks wait for the switch
  };
  std::vector<Entry> entries;  // sorted by range.first, non-overlapping
  // Set once this node left (or while it leaves, for ranges already handed over): every token without an
  // entry goes to its owner on this ring.
  std::shared_ptr<const ring::RingView> left_ring;
  // Ranges this node holds on its ring without having received their copy yet (HandoffPlanner's
  // unsynced ranges): it decides none of their keys while another holder can (sorted, non-overlapping).
  std::vector<ring::TokenRange> unsynced;
  // Take-over reads under way (HandoffPlanner, majority_read): ranges whose holders changed, with the ring
  // before the change, until a majority of that ring's holders pushed their copies here. Decisions of their
  // keys need a majority of `before`'s holders too (ReplicatorOptions::ack_majority). Sorted by
  // range.first; entries may overlap (a range read from two earlier rings).
  struct Reading {
    ring::TokenRange range;
    std::shared_ptr<const ring::RingView> before;
    bool read = false;  // a majority's copies are here; held for read_hold (ReadRing::held)
  };
  std::vector<Reading> reading;

  [[nodiscard]] bool empty() const {
    return entries.empty() && left_ring == nullptr && unsynced.empty() && reading.empty();
  }
  // The entry of `token`, or null.
  [[nodiscard]] const Entry* Find(ring::Token token) const;
};

struct RoutingTable {
  uint64_t version = 0;                                          // 0: nothing published yet
  std::shared_ptr<const ring::RingView> ring;                    // null until this node holds a ring
  std::shared_ptr<const RouteOverrides> overrides;               // null: none
  std::shared_ptr<const std::vector<ring::MemberInfo>> members;  // sorted by id; null: none known

  // Who decides the key with ring token `token` according to the overrides only (nullopt: follow the ring).
  [[nodiscard]] std::optional<std::string_view> Override(ring::Token token) const;
  // Who decides `token`: the override, else the ring's owner; empty without a ring.
  [[nodiscard]] std::string_view Decider(ring::Token token) const;
  // Whether `token` is in a range this node is switching (its checks are held).
  [[nodiscard]] bool Holds(ring::Token token) const;
  // Whether `token` is in a range this node holds without its copy yet (RouteOverrides::unsynced).
  [[nodiscard]] bool Unsynced(ring::Token token) const;
  // Whether node `self` is leaving or has left and `token` is already decided by another node: its copy
  // of the key may be older than the decider's, so `self` must not decide the key, not even as a
  // fallback when the decider does not answer.
  [[nodiscard]] bool Relinquished(ring::Token token, std::string_view self) const;
  // The record of member `id`, or null.
  [[nodiscard]] const ring::MemberInfo* Member(std::string_view id) const;
};

class RoutingPublisher {
 public:
  RoutingPublisher();
  RoutingPublisher(const RoutingPublisher&) = delete;
  RoutingPublisher& operator=(const RoutingPublisher&) = delete;

  // Each publishes a new table with this part replaced and the version incremented.
  void SetRing(std::shared_ptr<const ring::RingView> ring);
  void SetOverrides(std::shared_ptr<const RouteOverrides> overrides);
  void SetMembers(std::shared_ptr<const std::vector<ring::MemberInfo>> members);
  // The ring and the overrides that go with it, as one new table (the handoff publishes a ring change so:
  // no reader sees the new ring without its overrides).
  void SetRingAndOverrides(std::shared_ptr<const ring::RingView> ring,
                           std::shared_ptr<const RouteOverrides> overrides);

  // The current table. Request path: one atomic load when this thread read the same version before.
  // The reference stays valid until this thread calls Current() on this publisher again and finds a
  // newer version: do not hold it across a call that may route (copy what you need first).
  [[nodiscard]] const RoutingTable& Current() const;

  // The current table as a shared pointer (not for the request path: it counts a reference).
  [[nodiscard]] std::shared_ptr<const RoutingTable> Snapshot() const;

  [[nodiscard]] uint64_t version() const { return version_.load(); }

 private:
  void PublishLocked(std::shared_ptr<RoutingTable> next);

  const uint64_t id_;         // process-unique: keys the per-thread cache (an address may be reused)
  mutable std::mutex mutex_;  // serialises writers; guards current_
  std::shared_ptr<const RoutingTable> current_;
  std::atomic<uint64_t> version_{0};  // current_->version, stored after current_ (seq_cst: see DecisionFence)
};

}  // namespace ringlimit::replication

#endif  // RINGLIMIT_REPLICATION_ROUTING_TABLE_H_
