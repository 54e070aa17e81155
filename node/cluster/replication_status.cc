#include "node/cluster/replication_status.h"

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "node/cluster/replication_link.h"
#include "node/metrics/metrics.h"
#include "replication/handoff.h"
#include "replication/replicator.h"

namespace ringlimit::cluster {

namespace {

// The text format is node/metrics/metrics.h's; these adapt the unsigned counters and the lag gauge to it.
void Sample(std::string* out, std::string_view name, std::string_view labels, uint64_t value) {
  node::AppendSample(out, name, labels, static_cast<int64_t>(value));
}

void Counter(std::string* out, std::string_view name, std::string_view help, uint64_t value) {
  node::AppendFamilyHeader(out, name, "counter", help);
  Sample(out, name, "", value);
}

// A counter family with one sample per value of `label`.
void CounterBy(std::string* out, std::string_view name, std::string_view help, std::string_view label,
               std::initializer_list<std::pair<const char*, uint64_t>> samples) {
  node::AppendFamilyHeader(out, name, "counter", help);
  node::AppendSamplesBy(out, name, label, samples);
}

void Gauge(std::string* out, std::string_view name, std::string_view help, double value) {
  node::AppendFamilyHeader(out, name, "gauge", help);
  node::AppendSample(out, name, "", value);
}

}  // namespace

void AppendReplicationMetrics(const replication::Replicator& replicator,
                              const replication::HandoffManager& handoff, const ReplicationLink* link,
                              std::string* out) {
  const replication::ReplicatorStats r = replicator.stats();
  Counter(out, "ringlimit_replication_updates_sent_total",
          "Key states shipped to replicas (one per key and replica).", r.updates_sent);
  Counter(out, "ringlimit_replication_updates_acked_total",
          "Shipped key states acknowledged by their replica.", r.updates_acked);
  Counter(out, "ringlimit_replication_send_failures_total",
          "Replication batches that got no answer (their keys are shipped again).", r.send_failures);
  Gauge(out, "ringlimit_replication_pending_keys", "Changed keys not shipped to their replicas yet.",
        static_cast<double>(r.pending_keys));
  Gauge(out, "ringlimit_replication_lag_seconds",
        "Last replication batch: time from its oldest change to its acknowledgement.", r.lag_seconds);
  Gauge(out, "ringlimit_replication_max_lag_seconds", "Largest replication lag since start.",
        r.max_lag_seconds);
  node::AppendFamilyHeader(
      out, "ringlimit_replication_batch_lag_seconds", "histogram",
      "Every acknowledged replication batch: time from its oldest change to its acknowledgement.");
  node::AppendHistogramSeries(out, "ringlimit_replication_batch_lag_seconds", "", replication::kLagBoundsNs,
                              r.lag_buckets, r.lag_sum_ns, r.lag_count);
  CounterBy(out, "ringlimit_replication_received_states_total",
            "States received from other nodes (replication, handoff), by whether they were newer than ours.",
            "result", {{"applied", r.applied_states}, {"ignored", r.ignored_states}});
  Counter(out, "ringlimit_replication_sync_waits_total",
          "Decisions answered only after a replica acknowledged them (sync mode).", r.sync_waits);
  Counter(out, "ringlimit_replication_sync_timeouts_total",
          "Sync-mode decisions answered without an acknowledgement (timeout or no replica).",
          r.sync_timeouts);
  Counter(out, "ringlimit_replication_newer_copies_total",
          "Keys whose holder answered a sync-mode batch with a copy holding admissions this node's lacked "
          "(--failure-mode closed): merged in, and the decision waiting for it answered 503.",
          r.newer_received);
  CounterBy(
      out, "ringlimit_replication_unacked_total",
      "Sync-mode decisions answered unacked before the sync timeout (--failure-mode closed: 503), by "
      "why: a holder held admissions the decision lacked (newer), a majority of a ring of the key was out "
      "of reach (unreachable), failed sends left too few holders to make one (lost).",
      "reason",
      {{"newer", r.unacked_newer}, {"unreachable", r.unacked_unreachable}, {"lost", r.unacked_lost}});
  if (link != nullptr) {
    CounterBy(
        out, "ringlimit_replication_relayed_batches_total",
        "Sync-mode batches (--failure-mode closed) sent through another member because their holder did "
        "not answer directly (relayed), and batches this node passed on for others (served).",
        "what", {{"relayed", link->relayed()}, {"served", link->relays_served()}});
  }

  const replication::HandoffStats h = handoff.stats();
  Counter(out, "ringlimit_handoff_keys_total", "Keys pushed to their new owner by outgoing handoffs.",
          h.handed_off_keys);
  CounterBy(out, "ringlimit_handoffs_total", "Outgoing handoffs, by outcome.", "result",
            {{"completed", h.handoffs_completed}, {"failed", h.handoffs_failed}});
  CounterBy(
      out, "ringlimit_handoff_incoming_total",
      "Incoming ranges released: by the previous owner's HandoffDone, or abandoned (owner gone, timeout).",
      "result", {{"completed", h.incoming_completed}, {"abandoned", h.incoming_abandoned}});
  Gauge(out, "ringlimit_handoffs_in_progress", "Handoffs in progress, both directions.",
        static_cast<double>(h.in_progress));
  Gauge(out, "ringlimit_handoff_keys_left",
        "Keys the outgoing handoffs in progress still have to push (counted when each push started).",
        static_cast<double>(h.keys_left));
  Counter(out, "ringlimit_rereplicated_keys_total",
          "Keys pushed to members that joined their preference list.", h.rereplicated_keys);
  Counter(out, "ringlimit_dropped_states_total",
          "States dropped because this node neither owns nor replicates them.", h.dropped_states);
  Counter(
      out, "ringlimit_handoff_scanned_states_total",
      "States read by the re-replication and drop scans after ring changes (only the ranges whose holders "
      "changed are read).",
      h.scanned_states);
  Gauge(out, "ringlimit_unsynced_ranges",
        "Token ranges this node holds without their copy yet (joined, restarted, or became a holder after "
        "others were declared dead): it decides none of their keys while another holder answers.",
        static_cast<double>(h.unsynced_ranges));
  Gauge(out, "ringlimit_unsynced_share", "The fraction of the token space those ranges cover.",
        h.unsynced_share);
  CounterBy(out, "ringlimit_unsynced_ranges_total",
            "Unsynced ranges that received their copy (synced: a holder's push or HandoffDone), or were "
            "decided from what this node had after --resync-timeout-ms (expired).",
            "result", {{"synced", h.synced_ranges}, {"expired", h.resync_expired}});
  Gauge(out, "ringlimit_takeover_reads",
        "Take-over reads under way or held (--failure-mode closed): ranges whose holders changed, whose "
        "decisions also need a majority of their earlier holders until those pushed their copies here.",
        static_cast<double>(h.reading_ranges));
  CounterBy(out, "ringlimit_takeover_reads_total",
            "Take-over reads that got a majority of the earlier holders' copies (completed), or were dropped "
            "after --resync-timeout-ms without one (expired: the new ring alone counts from then).",
            "result", {{"completed", h.reads_completed}, {"expired", h.reads_expired}});
}

std::vector<node::ClusterHandoffView> DescribeHandoffs(const replication::HandoffManager& handoff) {
  std::vector<node::ClusterHandoffView> out;
  for (replication::HandoffView& h : handoff.InProgress()) {
    out.push_back(node::ClusterHandoffView{.direction = std::move(h.direction),
                                           .peer = std::move(h.peer),
                                           .ranges = h.ranges,
                                           .share = h.share,
                                           .keys = h.keys,
                                           .phase = std::move(h.phase),
                                           .seconds = h.seconds,
                                           .keys_total = h.keys_total,
                                           .keys_left = h.keys_left,
                                           .bytes = h.bytes,
                                           .windows_done = h.windows_done,
                                           .windows_total = h.windows_total,
                                           .done = h.done});
  }
  return out;
}

}  // namespace ringlimit::cluster
