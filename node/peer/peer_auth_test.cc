// The cluster-secret handshake and hostile input on the peer port: every bad connection is dropped
// and counted while a good connection keeps working.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "node/peer/auth.h"
#include "node/peer/peer_client.h"
#include "node/peer/peer_server.h"
#include "node/peer/peer_test_util.h"
#include "node/peer/protocol.h"

namespace ringlimit::peer {
namespace {

using std::chrono::milliseconds;
using testing::Address;
using testing::CallSync;
using testing::IoThreads;
using testing::RawSocket;
using testing::WaitFor;

constexpr uint32_t kEcho = 1;
constexpr char kSecret[] = "correct horse battery staple";

class PeerAuthTest : public ::testing::Test {
 protected:
  void StartServer(std::string secret) {
    PeerServerOptions options;
    options.cluster_secret = std::move(secret);
    options.handshake_timeout = milliseconds(300);
    options.framing.max_frame_bytes = 1 << 20;
    server_ = std::make_unique<PeerServer>(io_.io(), options);
    server_->Register(kEcho, [this](std::string payload, PeerResponder r) {
      handled_.fetch_add(1);
      r.Reply(payload);
    });
    ASSERT_TRUE(server_->Start().ok());
    peer_ = Address(server_->port());
  }

  static PeerClientOptions WithSecret(std::string secret) {
    PeerClientOptions options;
    options.cluster_secret = std::move(secret);
    return options;
  }

  // A good, authenticated client that must keep working whatever else hits the port.
  void ExpectGoodClientWorks(PeerClient& good) {
    PeerResult r = CallSync(good, peer_, kEcho, "alive");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r.payload(), "alive");
  }

  // Reads the server's Hello on a raw connection.
  static transport::Hello ReadHello(RawSocket& raw) {
    std::optional<transport::Frame> frame = raw.ReadFrame();
    EXPECT_TRUE(frame && frame->has_hello());
    return frame ? frame->hello() : transport::Hello();
  }

  IoThreads io_;
  std::unique_ptr<PeerServer> server_;
  std::string peer_;
  std::atomic<int> handled_{0};  // messages that reached the handler
};

TEST_F(PeerAuthTest, RightSecretWorksBothWays) {
  StartServer(kSecret);
  PeerClient client(io_.io(), WithSecret(kSecret));
  ExpectGoodClientWorks(client);
  EXPECT_EQ(server_->Stats().auth_failures, 0u);
  EXPECT_EQ(client.Stats().auth_failures, 0u);
}

TEST_F(PeerAuthTest, WrongSecretIsRefusedAndCounted) {
  StartServer(kSecret);
  PeerClient good(io_.io(), WithSecret(kSecret));
  ExpectGoodClientWorks(good);
  PeerClient bad(io_.io(), WithSecret("guess"));
  PeerResult r = CallSync(bad, peer_, kEcho, "let me in");
  EXPECT_EQ(r.kind(), PeerErrorKind::kAuthFailed) << r.status().ToString();
  ASSERT_TRUE(WaitFor([&] { return server_->Stats().auth_failures == 1; }));
  EXPECT_EQ(server_->Stats().messages_in, 1u);  // only the good client's message got through
  ExpectGoodClientWorks(good);
}

TEST_F(PeerAuthTest, MissingSecretIsRefusedEitherWay) {
  StartServer(kSecret);
  PeerClient none(io_.io(), {});
  EXPECT_EQ(CallSync(none, peer_, kEcho, "").kind(), PeerErrorKind::kAuthFailed);
  EXPECT_EQ(none.Stats().auth_failures, 1u);

  // Mutual: a client with a secret refuses a server that does not check one.
  PeerServerOptions open_options;
  PeerServer open_server(io_.io(), open_options);
  open_server.Register(kEcho, [](std::string p, PeerResponder r) { r.Reply(p); });
  ASSERT_TRUE(open_server.Start().ok());
  PeerClient strict(io_.io(), WithSecret(kSecret));
  EXPECT_EQ(CallSync(strict, Address(open_server.port()), kEcho, "").kind(), PeerErrorKind::kAuthFailed);
}

TEST_F(PeerAuthTest, ForgedProofOnRawConnectionIsDropped) {
  StartServer(kSecret);
  PeerClient good(io_.io(), WithSecret(kSecret));
  ExpectGoodClientWorks(good);
  RawSocket raw(server_->port());
  const transport::Hello hello = ReadHello(raw);
  EXPECT_TRUE(hello.auth_required());
  EXPECT_EQ(hello.server_nonce().size(), auth::kNonceBytes);
  transport::Frame reply;
  reply.mutable_hello_reply()->set_version(kProtocolVersion);
  reply.mutable_hello_reply()->set_client_nonce(auth::RandomNonce());
  reply.mutable_hello_reply()->set_client_mac(std::string(auth::kMacBytes, 'x'));
  raw.WriteFrame(reply);
  std::optional<transport::Frame> done = raw.ReadFrame();
  ASSERT_TRUE(done && done->has_hello_done());
  EXPECT_FALSE(done->hello_done().accepted());
  EXPECT_TRUE(raw.ClosedByPeer());
  EXPECT_EQ(server_->Stats().auth_failures, 1u);
  ExpectGoodClientWorks(good);
}

TEST_F(PeerAuthTest, MessagesBeforeTheHandshakeAreDropped) {
  StartServer(kSecret);
  PeerClient good(io_.io(), WithSecret(kSecret));
  RawSocket raw(server_->port());
  ReadHello(raw);
  transport::Frame data;
  transport::Envelope* envelope = data.add_envelopes();
  envelope->set_request_id(1);
  envelope->set_kind(transport::KIND_REQUEST);
  envelope->set_method(kEcho);
  envelope->set_payload("sneaky");
  raw.WriteFrame(data);
  EXPECT_TRUE(raw.ClosedByPeer());
  EXPECT_EQ(server_->Stats().auth_failures, 1u);
  EXPECT_EQ(handled_.load(), 0);
  ExpectGoodClientWorks(good);
  EXPECT_EQ(handled_.load(), 1);
}

TEST_F(PeerAuthTest, SilentConnectionTimesOutOfTheHandshake) {
  StartServer(kSecret);
  PeerClient good(io_.io(), WithSecret(kSecret));
  RawSocket raw(server_->port());
  ExpectGoodClientWorks(good);
  EXPECT_TRUE(raw.ClosedByPeer());  // after handshake_timeout (300 ms)
  EXPECT_EQ(server_->Stats().handshake_timeouts, 1u);
  ExpectGoodClientWorks(good);
}

TEST_F(PeerAuthTest, GarbageBytesAreMalformedAndClosed) {
  StartServer(kSecret);
  PeerClient good(io_.io(), WithSecret(kSecret));
  ExpectGoodClientWorks(good);
  RawSocket raw(server_->port());
  // A plausible length, then bytes that are no Frame (0xff... is an invalid tag/wire type).
  raw.WriteBytes(std::string("\x00\x00\x00\x08", 4) + std::string(8, '\xff'));
  EXPECT_TRUE(raw.ClosedByPeer());
  EXPECT_EQ(server_->Stats().malformed_frames, 1u);
  // An empty frame is malformed too.
  RawSocket empty(server_->port());
  empty.WriteBytes(std::string(4, '\0'));
  EXPECT_TRUE(empty.ClosedByPeer());
  EXPECT_EQ(server_->Stats().malformed_frames, 2u);
  ExpectGoodClientWorks(good);
}

TEST_F(PeerAuthTest, OversizedFrameClosesThatConnectionOnly) {
  StartServer(kSecret);
  PeerClient good(io_.io(), WithSecret(kSecret));
  ExpectGoodClientWorks(good);
  RawSocket raw(server_->port());
  // 2 MiB announced before the handshake (limit then: 4 KiB; after it: 1 MiB).
  raw.WriteBytes(std::string("\x00\x20\x00\x00", 4));
  EXPECT_TRUE(raw.ClosedByPeer());
  RawSocket http(server_->port());
  http.WriteBytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n");  // "GET " read as a length: ~1.2 GB
  EXPECT_TRUE(http.ClosedByPeer());
  EXPECT_EQ(server_->Stats().oversized_frames, 2u);
  ExpectGoodClientWorks(good);
  EXPECT_EQ(good.Stats().connections_opened, 1u);  // the good connection was never disturbed
}

TEST_F(PeerAuthTest, OversizedFrameFromAnAuthenticatedPeerIsCounted) {
  StartServer("");
  PeerClientOptions big;
  big.framing.max_frame_bytes = 4 << 20;  // the client allows more than the server (1 MiB)
  PeerClient client(io_.io(), big);
  EXPECT_EQ(CallSync(client, peer_, kEcho, "small").payload(), "small");
  PeerResult r = CallSync(client, peer_, kEcho, std::string(2 << 20, 'x'));
  EXPECT_EQ(r.kind(), PeerErrorKind::kConnectionLost) << r.status().ToString();
  EXPECT_EQ(server_->Stats().oversized_frames, 1u);
}

}  // namespace
}  // namespace ringlimit::peer
