// PeerStats: counters of one PeerServer or PeerClient since it was created, for /metrics.
//
// Thread safety: PeerStats is a plain snapshot. StatsCounters (internal to node/peer/) is safe for
// concurrent updates from any thread (relaxed atomics: the counters are for humans, not for ordering).
#ifndef RINGLIMIT_NODE_PEER_PEER_STATS_H_
#define RINGLIMIT_NODE_PEER_PEER_STATS_H_

#include <atomic>
#include <cstdint>

namespace ringlimit::peer {

struct PeerStats {
  uint64_t frames_in = 0;              // data frames read (each holds one or more messages)
  uint64_t frames_out = 0;             // data frames written
  uint64_t messages_in = 0;            // envelopes read
  uint64_t messages_out = 0;           // envelopes written
  uint64_t bytes_in = 0;               // bytes read, framing included
  uint64_t bytes_out = 0;              // bytes written, framing included
  uint64_t connections_opened = 0;     // accepted (server) or established after handshake (client)
  uint64_t connections_open = 0;       // open now (gauge)
  uint64_t auth_failures = 0;          // handshakes refused: wrong, missing or unexpected proof
  uint64_t handshake_timeouts = 0;     // connections closed for not completing the handshake in time
  uint64_t malformed_frames = 0;       // unparseable or invalid frames (connection closed)
  uint64_t oversized_frames = 0;       // frames announced above max_frame_bytes (connection closed)
  uint64_t reconnects = 0;             // client: connections re-established after a previous one
  uint64_t connect_failures = 0;       // client: connect or handshake attempts that failed
  uint64_t queue_full_rejections = 0;  // calls refused with kOverloaded (client queue or server cap)
  uint64_t timeouts = 0;               // client: requests failed with kTimeout
  uint64_t rejected_connections = 0;   // server: closed at once because max_connections were open
};

// The live counters behind a PeerStats snapshot.
struct StatsCounters {
  std::atomic<uint64_t> frames_in{0}, frames_out{0}, messages_in{0}, messages_out{0}, bytes_in{0},
      bytes_out{0}, connections_opened{0}, connections_open{0}, auth_failures{0}, handshake_timeouts{0},
      malformed_frames{0}, oversized_frames{0}, reconnects{0}, connect_failures{0}, queue_full_rejections{0},
      timeouts{0}, rejected_connections{0};

  static void Add(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
  static void Sub(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.fetch_sub(n, std::memory_order_relaxed);
  }
  [[nodiscard]] PeerStats Snapshot() const;
};

}  // namespace ringlimit::peer

#endif  // RINGLIMIT_NODE_PEER_PEER_STATS_H_
