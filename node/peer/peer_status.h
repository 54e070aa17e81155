// PeerStatus and PeerResult: the outcome of a peer call, as values with named kinds (no exceptions).
//
// PeerStatus is the transport's own Status: its kinds (connection lost, overloaded, auth failed, unknown
// method, shutdown, ...) are finer than ringlimit::Status's and the peer layer and its tests tell them
// apart, so it stays; ToStatus() converts at the edge of the transport.
//
// Thread safety: plain values; a const object may be read from several threads.
#ifndef RINGLIMIT_NODE_PEER_PEER_STATUS_H_
#define RINGLIMIT_NODE_PEER_PEER_STATUS_H_

#include <string>
#include <string_view>
#include <utility>

#include "base/status.h"

namespace ringlimit::peer {

enum class PeerErrorKind {
  kOk = 0,
  kTimeout,          // no answer within the call's timeout
  kConnectionLost,   // the connection closed while the request was queued or in flight
  kUnavailable,      // cannot connect to the peer (refused, unresolvable, or backing off after failures)
  kOverloaded,       // the per-peer queue is full, or the peer refused the request as overloaded
  kAuthFailed,       // the cluster-secret handshake failed (either side)
  kRemoteError,      // the peer's handler reported a failure
  kUnknownMethod,    // the peer has no handler for the method
  kInvalidArgument,  // bad peer address, method 0, or a payload above the frame size limit
  kShutdown,         // the client was stopped
};

// Stable lowercase name ("timeout", "connection_lost", ...), for logs and metrics labels.
[[nodiscard]] std::string_view PeerErrorKindName(PeerErrorKind kind);

class [[nodiscard]] PeerStatus {
 public:
  PeerStatus() = default;  // ok
  PeerStatus(PeerErrorKind kind, std::string message) : kind_(kind), message_(std::move(message)) {}

  static PeerStatus Ok() { return PeerStatus(); }

  [[nodiscard]] bool ok() const { return kind_ == PeerErrorKind::kOk; }
  [[nodiscard]] PeerErrorKind kind() const { return kind_; }
  [[nodiscard]] const std::string& message() const { return message_; }
  // "ok" or "<kind>: <message>".
  [[nodiscard]] std::string ToString() const;

  // This outcome as the codebase-wide Status (base/status.h), for code above the transport that
  // propagates it: Timeout; Unavailable (connection lost, cannot connect, overloaded, auth failed,
  // shutdown -- another node or a later try may work); InvalidArgument; Internal (the peer's handler
  // failed or has no such method). The message is ToString(), so the peer kind stays readable.
  [[nodiscard]] Status ToStatus() const;

 private:
  PeerErrorKind kind_ = PeerErrorKind::kOk;
  std::string message_;
};

// The answer to a request: the peer's payload when ok(), otherwise the error.
class [[nodiscard]] PeerResult {
 public:
  static PeerResult Value(std::string payload) { return PeerResult(PeerStatus(), std::move(payload)); }
  static PeerResult Error(PeerErrorKind kind, std::string message) {
    return PeerResult(PeerStatus(kind, std::move(message)), {});
  }

  [[nodiscard]] bool ok() const { return status_.ok(); }
  [[nodiscard]] const PeerStatus& status() const { return status_; }
  [[nodiscard]] PeerErrorKind kind() const { return status_.kind(); }
  // REQUIRES: ok(). The peer's serialized answer.
  [[nodiscard]] const std::string& payload() const { return payload_; }
  [[nodiscard]] std::string&& TakePayload() { return std::move(payload_); }

 private:
  PeerResult(PeerStatus status, std::string payload)
      : status_(std::move(status)), payload_(std::move(payload)) {}

  PeerStatus status_;
  std::string payload_;
};

}  // namespace ringlimit::peer

#endif  // RINGLIMIT_NODE_PEER_PEER_STATUS_H_
