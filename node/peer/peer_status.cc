#include "node/peer/peer_status.h"

namespace ringlimit::peer {

std::string_view PeerErrorKindName(PeerErrorKind kind) {
  switch (kind) {
    case PeerErrorKind::kOk:
      return "ok";
    case PeerErrorKind::kTimeout:
      return "timeout";
    case PeerErrorKind::kConnectionLost:
      return "connection_lost";
    case PeerErrorKind::kUnavailable:
      return "unavailable";
    case PeerErrorKind::kOverloaded:
      return "overloaded";
    case PeerErrorKind::kAuthFailed:
      return "auth_failed";
    case PeerErrorKind::kRemoteError:
      return "remote_error";
    case PeerErrorKind::kUnknownMethod:
      return "unknown_method";
    case PeerErrorKind::kInvalidArgument:
      return "invalid_argument";
    case PeerErrorKind::kShutdown:
      return "shutdown";
  }
  return "unknown";
}

std::string PeerStatus::ToString() const {
  if (ok()) return "ok";
  std::string out(PeerErrorKindName(kind_));
  out += ": ";
  out += message_;
  return out;
}

Status PeerStatus::ToStatus() const {
  switch (kind_) {
    case PeerErrorKind::kOk:
      return Status::OK();
    case PeerErrorKind::kTimeout:
      return Status::Timeout(ToString());
    case PeerErrorKind::kConnectionLost:
    case PeerErrorKind::kUnavailable:
    case PeerErrorKind::kOverloaded:
    case PeerErrorKind::kAuthFailed:
    case PeerErrorKind::kShutdown:
      return Status::Unavailable(ToString());
    case PeerErrorKind::kInvalidArgument:
      return Status::InvalidArgument(ToString());
    case PeerErrorKind::kRemoteError:
    case PeerErrorKind::kUnknownMethod:
      break;
  }
  return Status::Internal(ToString());
}

}  // namespace ringlimit::peer
