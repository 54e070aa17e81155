// Options of the peer transport: one plain struct per component (PeerServer, PeerClient) plus the
// framing options both share, and the per-call options of PeerClient::Call. Every field states its
// unit and default. Options are read once at construction; none can change at runtime.
//
// Thread safety: plain values.
#ifndef RINGLIMIT_NODE_PEER_PEER_OPTIONS_H_
#define RINGLIMIT_NODE_PEER_PEER_OPTIONS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"

namespace boost::asio::ssl {
class context;
}

namespace ringlimit::peer {

// How frames are sized and how messages are coalesced into frames (both directions).
struct FramingOptions {
  // --- Affects behaviour ---

  // A frame whose announced length exceeds this closes the connection (counted as oversized); a
  // message that cannot fit in a frame of this size is refused with kInvalidArgument.
  // Default: 16 MiB. REQUIRES: >= 1 KiB.
  uint32_t max_frame_bytes = 16u << 20;

  // --- Affects performance ---

  // Messages queued for one connection are written together in one frame and one write. A frame is
  // flushed once this many payload bytes are pending ... Default: 64 KiB.
  size_t coalesce_max_bytes = 64u << 10;
  // ... or this many messages are pending (1 disables coalescing: one message per frame and per
  // write) ... Default: 1024. REQUIRES: >= 1.
  size_t coalesce_max_messages = 1024;
  // ... or at the latest this long after the first pending message was queued. 0: flushed at the end
  // of the current turn of the event loop, once the handlers that are ready have run (everything they
  // queue shares one frame and one write, with no timer and no added wait); messages queued during a
  // write share the next one. A positive window batches more at low concurrency but costs a timer
  // and an event-loop wake-up per frame, and adds that much latency. Default: 0.
  std::chrono::microseconds coalesce_delay{0};

  // --- Affects behaviour ---

  // TLS on every connection (MakeTlsContext, below): the server side's context for PeerServerOptions, the
  // client side's for PeerClientOptions. A peer that does not complete the TLS handshake is dropped (counted
  // as an auth failure). Null: plain TCP. Default: null.
  std::shared_ptr<boost::asio::ssl::context> tls;
};

// A TLS context for the peer port: this node's certificate chain and key (PEM files), and the cluster's CA
// (PEM), which every peer's certificate must chain to -- on both sides (mutual TLS): a server refuses a
// client without such a certificate, a client a server. Peers are addressed by IP, so no host name is
// checked: the CA is the trust anchor (and --cluster-secret still authenticates each peer). TLS 1.2+.
// InvalidArgument when a file cannot be read or the key does not match the certificate.
[[nodiscard]] Result<std::shared_ptr<boost::asio::ssl::context>> MakeTlsContext(bool server,
                                                                                const std::string& cert_file,
                                                                                const std::string& key_file,
                                                                                const std::string& ca_file);

struct PeerServerOptions {
  // --- Affects behaviour ---

  // Address to listen on (--peer-listen). Default: 127.0.0.1.
  std::string address = "127.0.0.1";
  // TCP port; 0 picks an ephemeral port (see PeerServer::port()). Default: 0.
  uint16_t port = 0;

  // --cluster-secret. When not empty, every connection must prove knowledge of it (HMAC challenge)
  // before any message is accepted; clients that fail are dropped and counted. Default: empty.
  std::string cluster_secret;

  // A connection that has not completed the handshake within this time is closed (counted as a
  // handshake timeout). Default: 5000 ms.
  std::chrono::milliseconds handshake_timeout{5000};

  // Requests read on one connection and not yet answered by the handler; beyond this, requests are
  // answered REPLY_OVERLOADED at once (memory stays bounded). Default: 65536. REQUIRES: >= 1.
  size_t max_inflight_per_connection = 65536;

  // Open connections beyond this are closed at once. Default: 1024.
  size_t max_connections = 1024;

  // Frame limits; responses are written at the end of the turn that produced them (coalesce_delay 0).
  FramingOptions framing = ServerFraming();

  // Exactly one thread runs the io_context: connections use its executor instead of a strand each.
  // Default: false.
  bool single_thread = false;

  static FramingOptions ServerFraming() {
    FramingOptions framing;
    framing.coalesce_delay = std::chrono::microseconds{0};
    return framing;
  }
};

struct PeerClientOptions {
  // --- Affects behaviour ---

  // --cluster-secret. When not empty, the client proves it knows the secret and requires the server
  // to prove it too (mutual); a server without the secret is refused (kAuthFailed). Default: empty.
  std::string cluster_secret;

  // TCP connect plus handshake must complete within this time, or the attempt fails. Default: 1000 ms.
  std::chrono::milliseconds connect_timeout{1000};

  // Timeout of a request whose CallOptions::timeout is 0. Default: 1000 ms.
  std::chrono::milliseconds default_timeout{1000};

  // After a failed connect or a lost connection, calls to that peer fail fast with kUnavailable for
  // a backoff period that doubles on each consecutive failure, from backoff_initial up to
  // backoff_max; the next call after it reconnects. A successful handshake resets it.
  // Defaults: 50 ms, 2000 ms. REQUIRES: 0 < backoff_initial <= backoff_max.
  std::chrono::milliseconds backoff_initial{50};
  std::chrono::milliseconds backoff_max{2000};

  // Messages per peer that are queued, being written, or awaiting their response. Beyond this, a
  // call fails at once with kOverloaded (backpressure, not unbounded memory). Default: 8192.
  // REQUIRES: >= 1.
  size_t max_queued_per_peer = 8192;

  // --- Affects performance ---

  // With a positive framing.coalesce_delay: when true, a request sent while no other request to that
  // peer awaits its answer is written at once (like Nagle's algorithm: the coalescing window applies
  // only while answers are outstanding, so a lightly loaded link adds no latency); when false, every
  // message waits for the window. No effect with coalesce_delay 0. Default: true.
  bool flush_when_idle = true;

  FramingOptions framing;

  // Exactly one thread runs the io_context: each peer's channel and connection use its executor instead
  // of a strand. Default: false.
  bool single_thread = false;
};

// Per-call options of PeerClient::Call.
struct CallOptions {
  // 0 means PeerClientOptions::default_timeout. The timeout runs from the call, including time
  // spent connecting and queued. Default: 0.
  std::chrono::milliseconds timeout{0};
};

}  // namespace ringlimit::peer

#endif  // RINGLIMIT_NODE_PEER_PEER_OPTIONS_H_
