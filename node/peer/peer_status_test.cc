// PeerStatus -> ringlimit::Status.
#include "node/peer/peer_status.h"

#include <gtest/gtest.h>

namespace ringlimit::peer {
namespace {

TEST(PeerStatusTest, ToStatusKeepsWhatTheCallerCanDo) {
  EXPECT_TRUE(PeerStatus::Ok().ToStatus().ok());
  struct Case {
    PeerErrorKind kind;
    Status::Code code;
  };
  const Case cases[] = {
      {PeerErrorKind::kTimeout, Status::Code::kTimeout},
      {PeerErrorKind::kConnectionLost, Status::Code::kUnavailable},
      {PeerErrorKind::kUnavailable, Status::Code::kUnavailable},
      {PeerErrorKind::kOverloaded, Status::Code::kUnavailable},
      {PeerErrorKind::kAuthFailed, Status::Code::kUnavailable},
      {PeerErrorKind::kShutdown, Status::Code::kUnavailable},
      {PeerErrorKind::kInvalidArgument, Status::Code::kInvalidArgument},
      {PeerErrorKind::kRemoteError, Status::Code::kInternal},
      {PeerErrorKind::kUnknownMethod, Status::Code::kInternal},
  };
  for (const Case& c : cases) {
    const PeerStatus peer(c.kind, "n2:7101");
    const Status status = peer.ToStatus();
    EXPECT_EQ(status.code(), c.code) << peer.ToString();
    EXPECT_EQ(status.message(), peer.ToString());  // the peer kind stays readable
  }
}

}  // namespace
}  // namespace ringlimit::peer
