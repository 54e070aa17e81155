#include "node/cluster/cluster_endpoints.h"

#include <chrono>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "node/cluster/cluster.h"
#include "node/cluster/cluster_forward_host.h"
#include "node/cluster/replication_link.h"
#include "node/cluster/replication_status.h"
#include "node/forward/forwarder.h"
#include "node/grants/grant_driver.h"
#include "node/metrics/metrics.h"
#include "node/peer/peer_stats.h"
#include "replication/handoff.h"
#include "replication/replicator.h"
#include "ring/token.h"

namespace ringlimit::cluster {

namespace {

node::ClusterMemberView ToView(const ring::MemberInfo& m, const ring::RingView* view) {
  node::ClusterMemberView out;
  out.id = m.id;
  out.http_address = m.http_address;
  out.peer_address = m.peer_address;
  out.state = ring::MemberStateName(m.state);
  out.vnodes = m.vnodes;
  out.incarnation = m.incarnation;
  out.share = view != nullptr ? view->OwnedShare(m.id) : 0.;
  return out;
}

double Ms(std::chrono::nanoseconds d) { return static_cast<double>(d.count()) / 1e6; }

// The Prometheus text format is written by node/metrics/metrics.h alone; these adapt its calls to the
// unsigned counters of the cluster's stats.
void Metric(std::string* out, std::string_view name, std::string_view type, std::string_view help) {
  node::AppendFamilyHeader(out, name, type, help);
}

void Sample(std::string* out, std::string_view name, std::string_view labels, uint64_t value) {
  node::AppendSample(out, name, labels, static_cast<int64_t>(value));
}

void SampleDouble(std::string* out, std::string_view name, std::string_view labels, double value) {
  node::AppendSample(out, name, labels, value);
}

// The peer transport's counters of both sides, one family per unit (so that sum() over a family means
// something): bytes, frames and messages by direction, connection events, and errors by kind.
void PeerSamples(std::string* out, const peer::PeerStats& server, const peer::PeerStats& client) {
  struct Row {
    const char* label;  // the family's own label
    uint64_t peer::PeerStats::*value;
  };
  struct Family {
    const char* name;
    const char* help;
    std::vector<Row> rows;
  };
  using S = peer::PeerStats;
  const Family families[] = {
      {"ringlimit_peer_bytes_total",
       "Bytes on peer connections, by side and direction.",
       {{"direction=\"in\"", &S::bytes_in}, {"direction=\"out\"", &S::bytes_out}}},
      {"ringlimit_peer_frames_total",
       "Frames on peer connections, by side and direction.",
       {{"direction=\"in\"", &S::frames_in}, {"direction=\"out\"", &S::frames_out}}},
      {"ringlimit_peer_messages_total",
       "Messages on peer connections, by side and direction.",
       {{"direction=\"in\"", &S::messages_in}, {"direction=\"out\"", &S::messages_out}}},
      {"ringlimit_peer_connection_events_total",
       "Peer connections opened, reconnections, failed connects and connections refused, by side.",
       {{"event=\"opened\"", &S::connections_opened},
        {"event=\"reconnected\"", &S::reconnects},
        {"event=\"connect_failed\"", &S::connect_failures},
        {"event=\"rejected\"", &S::rejected_connections}}},
      {"ringlimit_peer_errors_total",
       "Peer transport errors, by side and kind: failed authentication (a wrong or missing cluster secret), "
       "handshake timeouts, malformed and oversized frames, messages refused on a full queue, request "
       "timeouts.",
       {{"error=\"auth_failure\"", &S::auth_failures},
        {"error=\"handshake_timeout\"", &S::handshake_timeouts},
        {"error=\"malformed_frame\"", &S::malformed_frames},
        {"error=\"oversized_frame\"", &S::oversized_frames},
        {"error=\"queue_full\"", &S::queue_full_rejections},
        {"error=\"timeout\"", &S::timeouts}}},
  };
  for (const Family& family : families) {
    Metric(out, family.name, "counter", family.help);
    for (const auto& [side, stats] :
         {std::pair<const char*, const S*>{"server", &server}, {"client", &client}}) {
      for (const Row& row : family.rows) {
        Sample(out, family.name, std::string("side=\"") + side + "\"," + row.label, stats->*row.value);
      }
    }
  }
}

}  // namespace

ClusterEndpoints::ClusterEndpoints(Cluster& cluster, const Forwarder& forwarder,
                                   const ClusterForwardHost& host, std::function<void()> on_left)
    : cluster_(cluster), forwarder_(forwarder), host_(host), on_left_(std::move(on_left)) {}

bool ClusterEndpoints::ready() const { return cluster_.ready(); }

std::string ClusterEndpoints::HttpAddressOf(std::string_view id) const {
  const auto snapshot = cluster_.Snapshot();
  const ring::MemberInfo* member = snapshot->Find(id);
  return member != nullptr ? member->http_address : "";
}

node::ClusterFenceView ClusterEndpoints::Fence() const {
  node::ClusterFenceView fence;
  fence.paused = cluster_.Paused();
  fence.minority = cluster_.MinorityRefusal().message();
  const Status clock = cluster_.ClockRefusal();
  if (fence.paused) {
    fence.reason = "paused";
    fence.detail = "just resumed from a process pause: catching up before it decides again";
  } else if (!clock.ok()) {
    fence.reason = "clock_offset";
    fence.detail = clock.message();
  } else if (!fence.minority.empty() && forwarder_.failure_mode() == FailureMode::kClosed) {
    fence.reason = "minority";
    fence.detail = fence.minority;
  }
  fence.deciding = fence.reason.empty();
  return fence;
}

node::ClusterView ClusterEndpoints::Describe() const {
  const auto snapshot = cluster_.Snapshot();
  node::ClusterView out;
  out.node_id = cluster_.self_id();
  out.ring_version = snapshot->ring != nullptr ? snapshot->ring->version() : 0;
  out.ring_fingerprint = snapshot->ring != nullptr ? snapshot->ring->fingerprint() : 0;
  out.members.reserve(snapshot->members.size());
  for (const ring::MemberInfo& m : snapshot->members) {
    node::ClusterMemberView& member = out.members.emplace_back(ToView(m, snapshot->ring.get()));
    if (m.id == out.node_id) {
      member.clock_offset_ms = 0.;
      member.clock_uncertainty_ms = 0.;
    } else if (auto it = snapshot->clock.offsets.find(m.id); it != snapshot->clock.offsets.end()) {
      member.clock_offset_ms = Ms(it->second.offset);
      member.clock_uncertainty_ms = Ms(it->second.uncertainty);
    }
  }
  out.clock.ok = snapshot->clock.health != ring::ClockHealth::kSkewed;
  out.clock.state = ring::ClockHealthName(snapshot->clock.health);
  out.clock.offset_ms = -Ms(snapshot->clock.median_offset);
  out.clock.max_offset_ms = static_cast<double>(cluster_.options().clock.max_offset.count());
  out.clock.reason = snapshot->clock.reason;
  out.fence = Fence();
  if (replicator_ != nullptr && handoff_ != nullptr) {
    out.replication_mode = replication::ToString(replicator_->options().mode);
    out.replicas = replicator_->options().replicas;
    out.replication_pending_keys = replicator_->stats().pending_keys;
    out.handoffs = DescribeHandoffs(*handoff_);
    const replication::HandoffStats h = handoff_->stats();
    out.handoff_totals = {.completed = h.handoffs_completed,
                          .failed = h.handoffs_failed,
                          .keys = h.handed_off_keys,
                          .incoming_completed = h.incoming_completed,
                          .rereplicated_keys = h.rereplicated_keys};
  }
  return out;
}

node::KeyPlacementView ClusterEndpoints::Place(std::string_view key) const {
  const auto snapshot = cluster_.Snapshot();
  node::KeyPlacementView out;
  out.token = ring::RingToken(key);
  if (snapshot->ring == nullptr) return out;
  for (const ring::RingMember* member :
       snapshot->ring->PreferenceList(out.token, cluster_.options().replicas)) {
    const ring::MemberInfo* info = snapshot->Find(member->id);
    ring::MemberInfo fallback;
    fallback.id = member->id;
    out.preference_list.push_back(ToView(info != nullptr ? *info : fallback, snapshot->ring.get()));
  }
  if (!out.preference_list.empty()) out.owner = out.preference_list.front().id;
  return out;
}

std::vector<node::RingArcView> ClusterEndpoints::RingArcs() const {
  const auto snapshot = cluster_.Snapshot();
  std::vector<node::RingArcView> out;
  if (snapshot->ring == nullptr) return out;
  constexpr double kSpace = 18446744073709551616.0;  // 2^64
  for (const ring::RingMember& member : snapshot->ring->members()) {
    for (const ring::TokenRange& range : snapshot->ring->Arcs(member.id)) {
      out.push_back({member.id, static_cast<double>(range.first) / kSpace,
                     (static_cast<double>(range.last) + 1.0) / kSpace});
    }
  }
  return out;
}

void ClusterEndpoints::Leave() { cluster_.Leave(on_left_); }

namespace {

// Quota grants (--grants; zeros while off): one family per unit.
void AppendGrantMetrics(const GrantDriverStats& g, std::string* out) {
  Metric(out, "ringlimit_grants_total", "counter",
         "Quota grants this node handled as a key's owner, by what happened: lent (made), refused, settled "
         "from the holder's release (released), reclaimed whole after term + margin (expired), recalled, "
         "and grants found unsettled in a key's row that another owner lent (adopted).");
  node::AppendSamplesBy(out, "ringlimit_grants_total", "event",
                        {{"made", g.planner.grants_made},
                         {"refused", g.planner.grants_refused},
                         {"released", g.planner.grants_released},
                         {"expired", g.planner.grants_expired},
                         {"recalled", g.planner.recalls},
                         {"adopted", g.planner.grants_adopted}});
  Metric(out, "ringlimit_grants_units_out", "gauge",
         "Units this node lent as an owner and has not settled: counted as spent in their keys' state.");
  Sample(out, "ringlimit_grants_units_out", "", g.planner.units_out);
  Metric(out, "ringlimit_grants_checks_total", "counter",
         "Client checks of keys this node asked or held slices of, by where they were decided: from a slice "
         "here (local) or at the owner (forwarded).");
  node::AppendSamplesBy(out, "ringlimit_grants_checks_total", "decided",
                        {{"local", g.planner.local_checks}, {"forwarded", g.planner.forwarded_checks}});
  Metric(out, "ringlimit_grants_requests_total", "counter", "Slices this node asked key owners for.");
  Sample(out, "ringlimit_grants_requests_total", "", g.planner.requests);
  Metric(out, "ringlimit_grants_slices_held", "gauge", "Slices this node holds now.");
  Sample(out, "ringlimit_grants_slices_held", "", g.planner.slices_held);
  Metric(out, "ringlimit_grants_returned_units_total", "counter",
         "Units of slices held here given back unused (released on expiry, idleness, recall or a pause).");
  Sample(out, "ringlimit_grants_returned_units_total", "", g.planner.released_units);
  Metric(out, "ringlimit_grants_failures_total", "counter",
         "Grant messages that got no answer (send), and grants recorded but refused because their row was "
         "not acknowledged under the acknowledgement rule (not_acked; reclaimed after their term).");
  node::AppendSamplesBy(out, "ringlimit_grants_failures_total", "kind",
                        {{"send", g.send_failures}, {"not_acked", g.not_acked}});
  Metric(
      out, "ringlimit_grants_releases_resent_total", "counter",
      "Releases of slices held here sent again, to whoever decides the key then, after they got no answer.");
  Sample(out, "ringlimit_grants_releases_resent_total", "", g.releases_resent);
}

}  // namespace

void ClusterEndpoints::AppendMetrics(std::string* out) const {
  if (replicator_ != nullptr && handoff_ != nullptr)
    AppendReplicationMetrics(*replicator_, *handoff_, link_, out);
  const auto snapshot = cluster_.Snapshot();
  Metric(out, "ringlimit_cluster_members", "gauge", "Members this node knows, by state (self included).");
  const std::vector<size_t> counts = snapshot->CountByState();
  for (size_t s = 0; s < counts.size(); ++s) {
    const std::string labels =
        "state=\"" + std::string(ring::MemberStateName(static_cast<ring::MemberState>(s))) + "\"";
    Sample(out, "ringlimit_cluster_members", labels, counts[s]);
  }
  Metric(out, "ringlimit_cluster_ring_version", "gauge",
         "Version of this node's current ring (local count).");
  Sample(out, "ringlimit_cluster_ring_version", "",
         snapshot->ring != nullptr ? snapshot->ring->version() : 0);
  Metric(out, "ringlimit_cluster_ready", "gauge", "1 once joined and holding a ring.");
  Sample(out, "ringlimit_cluster_ready", "", cluster_.ready() ? 1 : 0);

  Metric(out, "ringlimit_fenced", "gauge",
         "1 while this node decides none of its keys for the reason labelled: paused (just resumed from a "
         "process pause, catching up), clock_offset (its wall clock is off from most members': it passes "
         "its checks on) or minority (it reaches no more than half of the members, under --failure-mode "
         "closed).");
  Sample(out, "ringlimit_fenced", "reason=\"paused\"", cluster_.Paused() ? 1 : 0);
  Sample(out, "ringlimit_fenced", "reason=\"clock_offset\"", cluster_.ClockSkewed() ? 1 : 0);
  Sample(out, "ringlimit_fenced", "reason=\"minority\"",
         forwarder_.failure_mode() == FailureMode::kClosed && !cluster_.MinorityRefusal().ok() ? 1 : 0);

  Metric(out, "ringlimit_clock_offset_seconds", "gauge",
         "Each member's wall clock minus this node's, measured from membership traffic (min-RTT filtered).");
  for (const auto& [id, estimate] : snapshot->clock.offsets) {
    SampleDouble(out, "ringlimit_clock_offset_seconds", "member=\"" + id + "\"",
                 static_cast<double>(estimate.offset.count()) / 1e9);
  }
  Metric(out, "ringlimit_clock_ok", "gauge",
         "0 when this node's clock is off from most members' beyond --max-clock-offset-ms: it decides "
         "nothing and passes its checks on to their keys' other holders.");
  Sample(out, "ringlimit_clock_ok", "", snapshot->clock.health == ring::ClockHealth::kSkewed ? 0 : 1);

  AppendGrantMetrics(grants_ != nullptr ? grants_->stats() : GrantDriverStats{}, out);
  const ForwarderStats f = forwarder_.stats();
  Metric(out, "ringlimit_clock_refusals_total", "counter",
         "Checks this node declined to decide because its clock is off: forwarded here (the sender goes on "
         "to the next holder), or a client's that no other holder answered (503).");
  Sample(out, "ringlimit_clock_refusals_total", "", f.clock_refusals);
  Metric(out, "ringlimit_minority_refusals_total", "counter",
         "Checks (forwarded here or a client's) refused because this node reaches only a minority of the "
         "cluster (--failure-mode closed).");
  Sample(out, "ringlimit_minority_refusals_total", "", f.minority_refusals);
  Metric(out, "ringlimit_unacked_decisions_total", "counter",
         "Decisions of this node answered 503 rather than as admissions because not every holder that could "
         "decide the key next acknowledged them in time (--replication sync --failure-mode closed).");
  Sample(out, "ringlimit_unacked_decisions_total", "", f.unacked);
  // Forwarding, one family per unit (checks, attempts, batches), so that sum() over a family means something.
  Metric(
      out, "ringlimit_forward_checks_total", "counter",
      "Checks of keys another node decides, by what this node did with them: sent to their decider "
      "(forwarded), sent through another member because the decider was unreachable from here (relayed), "
      "decided here because no other holder answered (fallback_local), refused because no holder answered "
      "(closed, --failure-mode closed), sent on to another holder because this node's clock is off (clock), "
      "sent on or declined because this node was just paused (paused) or holds the key's range without its "
      "copy yet (unsynced).");
  node::AppendSamplesBy(out, "ringlimit_forward_checks_total", "outcome",
                        {{"forwarded", f.forwarded},
                         {"relayed", f.relayed},
                         {"fallback_local", f.fallback_local},
                         {"closed", f.closed},
                         {"clock", f.clock_passed},
                         {"paused", f.paused},
                         {"unsynced", f.unsynced}});
  Metric(
      out, "ringlimit_forward_fallback_open_total", "counter",
      "Checks decided here without a holder answering, of keys this node holds no copy of (--failure-mode "
      "open; part of ringlimit_forward_checks_total{outcome=\"fallback_local\"}): merged into the holders' "
      "count when they are back.");
  Sample(out, "ringlimit_forward_fallback_open_total", "", f.fallback_open);
  Metric(out, "ringlimit_forward_copy_waits_total", "counter",
         "Waits of 10 ms for a key's copy by checks no other holder answered, at a holder whose range is "
         "still waiting for its copy: decided here once it came; if it did not within a forward timeout, "
         "refused (--failure-mode closed) or decided from this node's own copy (open).");
  Sample(out, "ringlimit_forward_copy_waits_total", "", f.copy_waits);
  Metric(out, "ringlimit_forward_attempts_total", "counter",
         "Forwarding attempts beyond the first of each check: attempts that got no usable answer (failed), "
         "sent to the next holder after a failure (next_node), timed out and sent again to the same node "
         "(retried_same).");
  node::AppendSamplesBy(
      out, "ringlimit_forward_attempts_total", "result",
      {{"failed", f.failures}, {"next_node", f.fallback_next}, {"retried_same", f.retried_same}});
  Metric(out, "ringlimit_forward_served_checks_total", "counter",
         "Checks other nodes forwarded to this one, by what happened to them here: decided or passed on "
         "(served), passed on to the node this one's routing names (passed_on, part of served), not decided "
         "because their sender had given up on them (expired), relay requests passed on to their decider for "
         "another node (relays).");
  node::AppendSamplesBy(out, "ringlimit_forward_served_checks_total", "outcome",
                        {{"served", f.served},
                         {"passed_on", f.passed_on},
                         {"expired", f.expired},
                         {"relays", f.relays_served}});
  Metric(out, "ringlimit_forward_refused_batches_total", "counter",
         "Forwarded batches this node did not decide: malformed, or refused while it was still joining "
         "(refused_joining: the sender fails over to the key's next holder).");
  Sample(out, "ringlimit_forward_refused_batches_total", "reason=\"malformed\"", f.served_bad);
  Sample(out, "ringlimit_forward_refused_batches_total", "reason=\"refused_joining\"", f.refused);
  Metric(out, "ringlimit_forward_dedup_total", "counter",
         "Request ids of forwarded checks served here: first attempts remembered, retries answered with the "
         "first decision (hits) or after it (waits), first attempts that charged nothing (abandoned), ids "
         "dropped early because the cache was full (evicted) or at the end of their ttl (expired).");
  node::AppendSamplesBy(out, "ringlimit_forward_dedup_total", "what",
                        {{"inserted", f.dedup.inserted},
                         {"hits", f.dedup.hits},
                         {"waits", f.dedup.waits},
                         {"abandoned", f.dedup.abandoned},
                         {"evicted", f.dedup.evicted},
                         {"expired", f.dedup.expired}});
  Metric(out, "ringlimit_forward_dedup_entries", "gauge", "Request ids of forwarded checks remembered now.");
  Sample(out, "ringlimit_forward_dedup_entries", "", f.dedup.size);

  Metric(out, "ringlimit_forward_duration_seconds", "histogram",
         "Round trip of a check forwarded to the node that decides it (or through a relay), from sending to "
         "its decision arriving; attempts that got no decision are not observed.");
  host_.round_trips().Append(out, "ringlimit_forward_duration_seconds", "");
  const ring::MembershipStats& m = snapshot->stats;
  // Membership, one family per unit (probes, refutations, records).
  Metric(out, "ringlimit_membership_probes_total", "counter",
         "SWIM failure detector probes sent: direct pings and indirect ones (through helpers).");
  Sample(out, "ringlimit_membership_probes_total", "kind=\"direct\"", m.probes_sent);
  Sample(out, "ringlimit_membership_probes_total", "kind=\"indirect\"", m.indirect_probes_sent);
  Metric(out, "ringlimit_membership_failed_probes_total", "counter",
         "Probe periods that ended without an answer (the target became suspect).");
  Sample(out, "ringlimit_membership_failed_probes_total", "", m.probes_failed);
  Metric(out, "ringlimit_membership_refutations_total", "counter",
         "Times this node raised its incarnation to refute a rumour about itself.");
  Sample(out, "ringlimit_membership_refutations_total", "", m.refutations);
  Metric(out, "ringlimit_membership_dropped_records_total", "counter",
         "Membership records received and not taken in: malformed (invalid), not newer than what this node "
         "knew (stale), claiming the id of a live member at another peer address (id_conflict), announcing "
         "more than --max-member-vnodes (too_many_vnodes).");
  node::AppendSamplesBy(out, "ringlimit_membership_dropped_records_total", "reason",
                        {{"invalid", m.invalid_updates},
                         {"stale", m.stale_updates},
                         {"id_conflict", m.id_conflicts},
                         {"too_many_vnodes", m.vnodes_refused}});

  PeerSamples(out, cluster_.ServerStats(), cluster_.ClientStats());
  Metric(out, "ringlimit_peer_connections_open", "gauge", "Open peer connections, by side.");
  Sample(out, "ringlimit_peer_connections_open", "side=\"server\"", cluster_.ServerStats().connections_open);
  Sample(out, "ringlimit_peer_connections_open", "side=\"client\"", cluster_.ClientStats().connections_open);
}

node::HotKeysView ClusterEndpoints::HotKeys(size_t max) const {
  node::HotKeysView out;
  if (grants_ == nullptr) return out;
  out.enabled = true;
  GrantDriver::HotKeys hot = grants_->Hot(max);
  for (GrantDriver::HotKeys::Lent& l : hot.lent) {
    out.lent.push_back(node::HotKeysView::Lent{std::move(l.key), std::move(l.name), l.units, l.grants,
                                               std::move(l.holders), l.recalled});
  }
  for (GrantDriver::HotKeys::Held& h : hot.held) {
    out.held.push_back(
        node::HotKeysView::Held{std::move(h.key), std::move(h.name), std::move(h.owner), h.units_left,
                                h.slices, std::chrono::duration<double, std::milli>(h.expires_in).count()});
  }
  return out;
}

}  // namespace ringlimit::cluster
