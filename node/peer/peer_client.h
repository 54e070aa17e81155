// PeerClient: the calling side of the peer transport, a pool of one persistent TCP connection per
// peer address ("host:port"), connected lazily on the first call. Requests are pipelined and
// multiplexed by request id; messages bound for the same peer are coalesced into frames. Every call
// completes exactly once, with the peer's answer or a named error (timeout, connection lost,
// unavailable while backing off after a failure, overloaded when the per-peer queue is full, auth
// failed, remote error, shutdown).
//
// Usage:
//   PeerClient client(io, options);
//   client.Call("10.0.0.2:7101", kMethodCheck, request.SerializeAsString(), [](PeerResult result) {
//     if (!result.ok()) ...result.status().ToString()...; else answer.ParseFromString(result.payload());
//   });
//
// Thread safety: every public method may be called concurrently from any thread without external
// synchronization. Callbacks run on the peer's serial executor (an io_context thread), never inline
// in Call: they must not block, and may call Call/Send again.
//
// Lifetime: the io_context must outlive the client and keep running until every callback has run.
// Stop() (also called by the destructor) fails every pending call with kShutdown, asynchronously on
// the io_context: whatever callbacks capture must stay valid until they have run.
#ifndef RINGLIMIT_NODE_PEER_PEER_CLIENT_H_
#define RINGLIMIT_NODE_PEER_PEER_CLIENT_H_

#include <boost/asio/io_context.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "node/peer/peer_options.h"
#include "node/peer/peer_stats.h"
#include "node/peer/peer_status.h"

namespace ringlimit::peer {

namespace internal {
struct ClientShared;
}  // namespace internal

// Receives the outcome of one call, exactly once.
using PeerCallback = std::function<void(PeerResult result)>;

class PeerClient {
 public:
  PeerClient(boost::asio::io_context& io, PeerClientOptions options);
  ~PeerClient();

  PeerClient(const PeerClient&) = delete;
  PeerClient& operator=(const PeerClient&) = delete;

  // Sends request `payload` (the caller's serialized message) for `method` to `peer` and calls
  // `done` with the answer or an error. A full per-peer queue, a peer in backoff, a bad address or a
  // stopped client complete the call at once (still through the io_context).
  void Call(std::string_view peer, uint32_t method, std::string payload, PeerCallback done,
            CallOptions options = {});

  // Queues a one-way message (no answer; delivery is best effort). Returns kOverloaded, kUnavailable,
  // kInvalidArgument or kShutdown when it cannot even be queued.
  [[nodiscard]] PeerStatus Send(std::string_view peer, uint32_t method, std::string payload);

  // Closes the connection to `peer` (if any) and forgets it: its pending calls fail with
  // kConnectionLost; a later call connects afresh. For members that left the cluster.
  void Disconnect(std::string_view peer);

  // Closes every connection; pending and later calls fail with kShutdown. Idempotent.
  void Stop();

  [[nodiscard]] PeerStats Stats() const;

  // Messages queued, being written or awaiting a response for `peer` (0 if unknown).
  [[nodiscard]] size_t TEST_Outstanding(std::string_view peer) const;

 private:
  boost::asio::io_context& io_;
  std::shared_ptr<internal::ClientShared> shared_;  // also held by every peer channel
};

}  // namespace ringlimit::peer

#endif  // RINGLIMIT_NODE_PEER_PEER_CLIENT_H_
