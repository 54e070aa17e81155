#include "node/peer/peer_stats.h"

namespace ringlimit::peer {

PeerStats StatsCounters::Snapshot() const {
  const auto get = [](const std::atomic<uint64_t>& counter) {
    return counter.load(std::memory_order_relaxed);
  };
  PeerStats s;
  s.frames_in = get(frames_in);
  s.frames_out = get(frames_out);
  s.messages_in = get(messages_in);
  s.messages_out = get(messages_out);
  s.bytes_in = get(bytes_in);
  s.bytes_out = get(bytes_out);
  s.connections_opened = get(connections_opened);
  s.connections_open = get(connections_open);
  s.auth_failures = get(auth_failures);
  s.handshake_timeouts = get(handshake_timeouts);
  s.malformed_frames = get(malformed_frames);
  s.oversized_frames = get(oversized_frames);
  s.reconnects = get(reconnects);
  s.connect_failures = get(connect_failures);
  s.queue_full_rejections = get(queue_full_rejections);
  s.timeouts = get(timeouts);
  s.rejected_connections = get(rejected_connections);
  return s;
}

}  // namespace ringlimit::peer
