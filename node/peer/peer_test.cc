// PeerServer + PeerClient over real sockets on 127.0.0.1 ephemeral ports, in one process.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "node/peer/framed_connection.h"
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
using testing::WaitFor;

constexpr uint32_t kEcho = 1;
constexpr uint32_t kHold = 2;  // answered later by the test through the stored responders
constexpr uint32_t kFail = 3;
constexpr uint32_t kThrow = 4;
constexpr uint32_t kDrop = 5;
constexpr uint32_t kUnknown = 99;

// Responders held back by the kHold handler.
struct Held {
  std::mutex mu;
  std::vector<std::pair<std::string, PeerResponder>> items;  // guarded by mu
  size_t size() {
    std::lock_guard lock(mu);
    return items.size();
  }
  std::vector<std::pair<std::string, PeerResponder>> Take() {
    std::lock_guard lock(mu);
    return std::move(items);
  }
};

// Every case twice: two threads running the io_context with a strand per connection and channel, and one
// thread with single_thread (connections and channels on the io_context's own executor).
class PeerTest : public ::testing::TestWithParam<bool> {
 protected:
  bool single_thread() const { return GetParam(); }
  PeerClientOptions Client(PeerClientOptions options = {}) const {
    options.single_thread = single_thread();
    return options;
  }

  std::unique_ptr<PeerServer> StartServer(PeerServerOptions options = {}) {
    options.single_thread = single_thread();
    auto server = std::make_unique<PeerServer>(io_.io(), options);
    server->Register(kEcho, [](std::string payload, PeerResponder r) { r.Reply("echo:" + payload); });
    server->Register(kHold, [held = held_](std::string payload, PeerResponder r) {
      std::lock_guard lock(held->mu);
      held->items.emplace_back(std::move(payload), std::move(r));
    });
    server->Register(kFail, [](std::string, PeerResponder r) { r.Fail("nope"); });
    server->Register(kThrow, [](std::string, PeerResponder) -> void { throw std::runtime_error("boom"); });
    server->Register(kDrop, [](std::string, PeerResponder) {});
    EXPECT_TRUE(server->Start().ok());
    EXPECT_NE(server->port(), 0);
    return server;
  }

  IoThreads io_{GetParam() ? 1 : 2};
  std::shared_ptr<Held> held_ = std::make_shared<Held>();
};

TEST_P(PeerTest, RequestResponseRoundTrip) {
  auto server = StartServer();
  PeerClient client(io_.io(), Client());
  PeerResult result = CallSync(client, Address(server->port()), kEcho, "hello");
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result.payload(), "echo:hello");
  // A second call reuses the same connection.
  result = CallSync(client, Address(server->port()), kEcho, std::string(100'000, 'x'));
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result.payload().size(), 100'005u);
  EXPECT_EQ(client.Stats().connections_opened, 1u);
  EXPECT_EQ(server->Stats().connections_opened, 1u);
  EXPECT_EQ(server->Stats().messages_in, 2u);
  EXPECT_EQ(client.Stats().messages_in, 2u);
}

TEST_P(PeerTest, HandlerErrorsAreNamedValues) {
  auto server = StartServer();
  PeerClient client(io_.io(), Client());
  const std::string peer = Address(server->port());
  PeerResult fail = CallSync(client, peer, kFail, "");
  EXPECT_EQ(fail.kind(), PeerErrorKind::kRemoteError);
  EXPECT_EQ(fail.status().message(), "nope");
  PeerResult thrown = CallSync(client, peer, kThrow, "");
  EXPECT_EQ(thrown.kind(), PeerErrorKind::kRemoteError);
  EXPECT_NE(thrown.status().message().find("boom"), std::string::npos);
  PeerResult dropped = CallSync(client, peer, kDrop, "");
  EXPECT_EQ(dropped.kind(), PeerErrorKind::kRemoteError);
  PeerResult unknown = CallSync(client, peer, kUnknown, "");
  EXPECT_EQ(unknown.kind(), PeerErrorKind::kUnknownMethod);
  EXPECT_EQ(CallSync(client, peer, kEcho, "still").payload(), "echo:still");
}

TEST_P(PeerTest, InvalidArgumentsAreRefused) {
  auto server = StartServer();
  PeerClientOptions options;
  options.framing.max_frame_bytes = 4096;
  PeerClient client(io_.io(), Client(options));
  EXPECT_EQ(CallSync(client, "no-port", kEcho, "").kind(), PeerErrorKind::kInvalidArgument);
  EXPECT_EQ(CallSync(client, "127.0.0.1:99999", kEcho, "").kind(), PeerErrorKind::kInvalidArgument);
  EXPECT_EQ(CallSync(client, Address(server->port()), 0, "").kind(), PeerErrorKind::kInvalidArgument);
  EXPECT_EQ(CallSync(client, Address(server->port()), kEcho, std::string(5000, 'x')).kind(),
            PeerErrorKind::kInvalidArgument);
  EXPECT_EQ(client.Send(Address(server->port()), kEcho, std::string(5000, 'x')).kind(),
            PeerErrorKind::kInvalidArgument);
}

TEST_P(PeerTest, ManyConcurrentRequestsAnsweredOutOfOrder) {
  auto server = StartServer();
  PeerClient client(io_.io(), Client());
  const std::string peer = Address(server->port());
  constexpr int kCalls = 500;
  std::atomic<int> matched{0}, done{0};
  for (int i = 0; i < kCalls; ++i) {
    const std::string payload = "req-" + std::to_string(i);
    client.Call(peer, kHold, payload, [&, payload](PeerResult r) {
      if (r.ok() && r.payload() == "ans-" + payload) matched.fetch_add(1);
      done.fetch_add(1);
    });
  }
  ASSERT_TRUE(WaitFor([&] { return held_->size() == kCalls; }));
  auto held = held_->Take();
  std::reverse(held.begin(), held.end());
  // Answer from two threads at once, in reverse order.
  std::thread other([&] {
    for (size_t i = 0; i < held.size(); i += 2) held[i].second.Reply("ans-" + held[i].first);
  });
  for (size_t i = 1; i < held.size(); i += 2) held[i].second.Reply("ans-" + held[i].first);
  other.join();
  ASSERT_TRUE(WaitFor([&] { return done.load() == kCalls; }));
  EXPECT_EQ(matched.load(), kCalls);
  EXPECT_EQ(client.Stats().connections_opened, 1u);
  EXPECT_EQ(client.TEST_Outstanding(peer), 0u);
}

// Sends `calls` requests at once and returns the server's (frames, messages) read.
// With `warm_up`, the connection is established first; otherwise the burst waits for it.
std::pair<uint64_t, uint64_t> FramesForBurst(IoThreads& io, PeerServer& server, PeerClientOptions options,
                                             int calls, bool warm_up = true) {
  PeerClient client(io.io(), options);
  const std::string peer = Address(server.port());
  if (warm_up) {
    EXPECT_TRUE(CallSync(client, peer, kEcho, "warm-up").ok());
  }
  const PeerStats before = server.Stats();
  std::atomic<int> ok{0};
  for (int i = 0; i < calls; ++i) {
    client.Call(peer, kEcho, "x", [&](PeerResult r) { ok.fetch_add(r.ok() ? 1 : 0); });
  }
  EXPECT_TRUE(WaitFor([&] { return ok.load() == calls; }));
  const PeerStats after = server.Stats();
  return {after.frames_in - before.frames_in, after.messages_in - before.messages_in};
}

TEST_P(PeerTest, CoalescingBatchesMessagesIntoFewFrames) {
  auto server = StartServer();
  PeerClientOptions batched;
  batched.framing.coalesce_delay =
      std::chrono::milliseconds(500);  // wide: the burst fits even on a loaded machine
  const auto [frames, messages] = FramesForBurst(io_, *server, Client(batched), 300);
  EXPECT_EQ(messages, 300u);
  EXPECT_LE(frames, 30u) << "300 messages should share a handful of frames";

  PeerClientOptions unbatched;
  unbatched.framing.coalesce_max_messages = 1;
  const auto [frames1, messages1] = FramesForBurst(io_, *server, Client(unbatched), 300);
  EXPECT_EQ(messages1, 300u);
  EXPECT_EQ(frames1, 300u);

  PeerClientOptions by_count;
  by_count.framing.coalesce_delay = std::chrono::seconds(5);  // only the count threshold flushes
  by_count.framing.coalesce_max_messages = 10;
  const auto [frames10, messages10] = FramesForBurst(io_, *server, Client(by_count), 100, /*warm_up=*/false);
  EXPECT_EQ(messages10, 100u);
  // No frame holds more than 10 messages; frames may hold fewer (messages that waited for the
  // connection or for a write in progress are flushed without waiting for a full frame).
  EXPECT_GE(frames10, 10u);
  EXPECT_LT(frames10, 100u);
}

TEST_P(PeerTest, OneWayMessagesAreDelivered) {
  auto server = StartServer();
  PeerClient client(io_.io(), Client());
  const std::string peer = Address(server->port());
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(client.Send(peer, kHold, "note").ok());
  ASSERT_TRUE(WaitFor([&] { return held_->size() == 10; }));
  for (auto& [payload, responder] : held_->Take()) {
    EXPECT_TRUE(responder.one_way());
    responder.Reply("ignored");  // a no-op for one-way messages
  }
  ASSERT_TRUE(WaitFor([&] { return client.TEST_Outstanding(peer) == 0; }));
  EXPECT_EQ(CallSync(client, peer, kEcho, "after").payload(), "echo:after");
}

TEST_P(PeerTest, RequestTimesOut) {
  auto server = StartServer();
  PeerClient client(io_.io(), Client());
  const std::string peer = Address(server->port());
  const auto start = std::chrono::steady_clock::now();
  PeerResult r = CallSync(client, peer, kHold, "never answered", {.timeout = milliseconds(100)});
  EXPECT_EQ(r.kind(), PeerErrorKind::kTimeout);
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(100));
  EXPECT_EQ(client.Stats().timeouts, 1u);
  // A late answer is ignored; the connection keeps working.
  for (auto& [payload, responder] : held_->Take()) responder.Reply("late");
  EXPECT_EQ(CallSync(client, peer, kEcho, "next").payload(), "echo:next");
  EXPECT_EQ(client.TEST_Outstanding(peer), 0u);
}

TEST_P(PeerTest, BoundedQueueRejectsWithOverloaded) {
  auto server = StartServer();
  PeerClientOptions options;
  options.max_queued_per_peer = 4;
  PeerClient client(io_.io(), Client(options));
  const std::string peer = Address(server->port());
  std::atomic<int> answered{0};
  for (int i = 0; i < 4; ++i) {
    client.Call(peer, kHold, "held", [&](PeerResult r) { answered.fetch_add(r.ok() ? 1 : 0); });
  }
  PeerResult rejected = CallSync(client, peer, kEcho, "one too many");
  EXPECT_EQ(rejected.kind(), PeerErrorKind::kOverloaded);
  EXPECT_EQ(client.Send(peer, kEcho, "one-way too").kind(), PeerErrorKind::kOverloaded);
  EXPECT_EQ(client.Stats().queue_full_rejections, 2u);
  ASSERT_TRUE(WaitFor([&] { return held_->size() == 4; }));
  for (auto& [payload, responder] : held_->Take()) responder.Reply("ok");
  ASSERT_TRUE(WaitFor([&] { return answered.load() == 4; }));
  EXPECT_EQ(CallSync(client, peer, kEcho, "room again").payload(), "echo:room again");
}

TEST_P(PeerTest, ServerInflightCapAnswersOverloaded) {
  PeerServerOptions options;
  options.max_inflight_per_connection = 2;
  auto server = StartServer(options);
  PeerClient client(io_.io(), Client());
  const std::string peer = Address(server->port());
  client.Call(peer, kHold, "a", [](PeerResult) {});
  client.Call(peer, kHold, "b", [](PeerResult) {});
  ASSERT_TRUE(WaitFor([&] { return held_->size() == 2; }));
  EXPECT_EQ(CallSync(client, peer, kEcho, "c").kind(), PeerErrorKind::kOverloaded);
  EXPECT_EQ(server->Stats().queue_full_rejections, 1u);
  for (auto& [payload, responder] : held_->Take()) responder.Reply("");
  ASSERT_TRUE(WaitFor([&] { return CallSync(client, peer, kEcho, "d").ok(); }));
}

TEST_P(PeerTest, UnreachablePeerFailsFastDuringBackoff) {
  uint16_t port;
  {
    auto server = StartServer();  // find a free port, then close it
    port = server->port();
    server->Stop();
  }
  PeerClientOptions options;
  options.backoff_initial = milliseconds(2000);
  options.backoff_max = milliseconds(2000);
  PeerClient client(io_.io(), Client(options));
  EXPECT_EQ(CallSync(client, Address(port), kEcho, "").kind(), PeerErrorKind::kUnavailable);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(CallSync(client, Address(port), kEcho, "").kind(), PeerErrorKind::kUnavailable);
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
  EXPECT_EQ(client.Stats().connect_failures, 1u);
}

TEST_P(PeerTest, ServerKilledThenClientReconnectsToNewServerOnSamePort) {
  auto server = StartServer();
  const uint16_t port = server->port();
  const std::string peer = Address(port);
  PeerClientOptions options;
  options.backoff_initial = milliseconds(10);
  options.backoff_max = milliseconds(40);
  PeerClient client(io_.io(), Client(options));
  ASSERT_EQ(CallSync(client, peer, kEcho, "before").payload(), "echo:before");

  // A request in flight when the server dies fails with connection lost.
  auto pending = std::make_shared<std::promise<PeerResult>>();
  auto pending_result = pending->get_future();
  client.Call(peer, kHold, "in flight", [pending](PeerResult r) { pending->set_value(std::move(r)); },
              {.timeout = milliseconds(10'000)});
  ASSERT_TRUE(WaitFor([&] { return held_->size() == 1; }));
  server->Stop();
  ASSERT_EQ(pending_result.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(pending_result.get().kind(), PeerErrorKind::kConnectionLost);
  held_->Take();
  ASSERT_TRUE(WaitFor([&] { return server->Stats().connections_open == 0; }));
  server.reset();

  // Nobody listens: calls fail (unavailable) rather than hang.
  PeerResult down = CallSync(client, peer, kEcho, "down");
  EXPECT_FALSE(down.ok());

  // Stop() closes the old listener asynchronously: retry until the port is free again.
  PeerServerOptions same_port;
  same_port.port = port;
  same_port.single_thread = single_thread();
  std::unique_ptr<PeerServer> reborn;
  ASSERT_TRUE(WaitFor([&] {
    reborn = std::make_unique<PeerServer>(io_.io(), same_port);
    reborn->Register(kEcho, [](std::string payload, PeerResponder r) { r.Reply("echo:" + payload); });
    return reborn->Start().ok();
  }));
  ASSERT_EQ(reborn->port(), port);
  ASSERT_TRUE(WaitFor([&] { return CallSync(client, peer, kEcho, "after").ok(); }));
  EXPECT_GE(client.Stats().reconnects, 1u);
  EXPECT_GE(client.Stats().connect_failures + client.Stats().reconnects, 1u);
}

TEST_P(PeerTest, StopFailsPendingCallsExactlyOnce) {
  auto server = StartServer();
  auto client = std::make_unique<PeerClient>(io_.io(), Client());
  const std::string peer = Address(server->port());
  constexpr int kCalls = 50;
  auto shutdown = std::make_shared<std::atomic<int>>(0);
  auto callbacks = std::make_shared<std::atomic<int>>(0);
  for (int i = 0; i < kCalls; ++i) {
    client->Call(peer, kHold, "p", [shutdown, callbacks](PeerResult r) {
      callbacks->fetch_add(1);
      if (r.kind() == PeerErrorKind::kShutdown) shutdown->fetch_add(1);
    });
  }
  ASSERT_TRUE(WaitFor([&] { return held_->size() == kCalls; }));
  client->Stop();
  ASSERT_TRUE(WaitFor([&] { return callbacks->load() == kCalls; }));
  EXPECT_EQ(shutdown->load(), kCalls);
  EXPECT_EQ(CallSync(*client, peer, kEcho, "").kind(), PeerErrorKind::kShutdown);
  EXPECT_EQ(client->Send(peer, kEcho, "").kind(), PeerErrorKind::kShutdown);
  // Late answers after Stop are harmless, and no callback runs twice.
  for (auto& [payload, responder] : held_->Take()) responder.Reply("late");
  client.reset();
  ASSERT_TRUE(WaitFor([&] { return server->Stats().connections_open == 0; }));
  EXPECT_EQ(callbacks->load(), kCalls);
}

TEST_P(PeerTest, DisconnectFailsPendingAndReconnectsLater) {
  auto server = StartServer();
  PeerClient client(io_.io(), Client());
  const std::string peer = Address(server->port());
  auto pending = std::make_shared<std::promise<PeerResult>>();
  auto result = pending->get_future();
  client.Call(peer, kHold, "p", [pending](PeerResult r) { pending->set_value(std::move(r)); });
  ASSERT_TRUE(WaitFor([&] { return held_->size() == 1; }));
  client.Disconnect(peer);
  ASSERT_EQ(result.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(result.get().kind(), PeerErrorKind::kConnectionLost);
  EXPECT_EQ(CallSync(client, peer, kEcho, "fresh").payload(), "echo:fresh");
  EXPECT_EQ(client.Stats().connections_opened, 2u);
}

TEST_P(PeerTest, ClientsInOneProcessKeepTheirOwnChannels) {
  // Channels are found through a per-thread cache (base/published.h): two clients calling the same
  // address from the same threads must still each use, drop and stop only their own channel.
  auto server = StartServer();
  PeerClient a(io_.io(), Client());
  PeerClient b(io_.io(), Client());
  const std::string peer = Address(server->port());
  std::atomic<int> ok{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 3; ++t) {
    callers.emplace_back([&] {
      for (int i = 0; i < 20; ++i) {
        PeerClient& client = i % 2 == 0 ? a : b;
        if (CallSync(client, peer, kEcho, "x").ok()) ok.fetch_add(1);
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(ok.load(), 60);
  EXPECT_EQ(a.Stats().connections_opened, 1u);
  EXPECT_EQ(b.Stats().connections_opened, 1u);

  a.Disconnect(peer);
  EXPECT_EQ(CallSync(b, peer, kEcho, "b").payload(), "echo:b");
  EXPECT_EQ(CallSync(a, peer, kEcho, "a").payload(), "echo:a");
  EXPECT_EQ(a.Stats().connections_opened, 2u);
  EXPECT_EQ(b.Stats().connections_opened, 1u);

  a.Stop();
  EXPECT_EQ(CallSync(a, peer, kEcho, "a").kind(), PeerErrorKind::kShutdown);
  EXPECT_EQ(CallSync(b, peer, kEcho, "b").payload(), "echo:b");
}

INSTANTIATE_TEST_SUITE_P(Executors, PeerTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "SingleThread" : "Strands";
                         });

// StartWrite writes a frame envelope by envelope (AppendEnvelope, from plain OutEnvelopes); the result must
// be the frame a Frame message of those envelopes serializes to, byte for byte, whatever their sizes (the
// length varint takes 1, 2 or 3 bytes) and values (zeros left out, a negative enum value in ten bytes).
TEST(FramingTest, EnvelopesAppendedOneByOneAreTheSerializedFrame) {
  for (size_t payload_bytes : {size_t{0}, size_t{5}, size_t{200}, size_t{20'000}}) {
    transport::Frame frame;
    std::string streamed(internal::kFrameHeaderBytes, '\0');
    for (int i = 0; i < 4; ++i) {
      internal::OutEnvelope out;
      out.request_id = i == 3 ? 0 : (i == 2 ? UINT64_MAX : 1000 + i);
      out.kind = i == 2   ? transport::KIND_ONE_WAY
                 : i == 3 ? static_cast<transport::Kind>(-1)
                          : transport::KIND_REQUEST;
      out.method = i == 3 ? 0 : 10 + i;
      out.payload = std::string(payload_bytes + i, static_cast<char>('a' + i));
      out.status = i == 1   ? transport::REPLY_OVERLOADED
                   : i == 3 ? static_cast<transport::ReplyStatus>(-3)
                            : transport::REPLY_OK;
      if (i == 1) out.error = "why";
      transport::Envelope envelope;
      envelope.set_request_id(out.request_id);
      envelope.set_kind(out.kind);
      envelope.set_method(out.method);
      envelope.set_payload(out.payload);
      envelope.set_status(out.status);
      envelope.set_error(out.error);
      internal::AppendEnvelope(out, streamed);
      *frame.add_envelopes() = envelope;
    }
    internal::WriteFrameLength(streamed.size() - internal::kFrameHeaderBytes,
                               reinterpret_cast<unsigned char*>(streamed.data()));
    std::string whole;
    internal::AppendFrame(frame, whole);
    EXPECT_EQ(streamed, whole) << "payloads of " << payload_bytes << " bytes";
    transport::Frame parsed;
    ASSERT_TRUE(parsed.ParseFromArray(streamed.data() + internal::kFrameHeaderBytes,
                                      static_cast<int>(streamed.size() - internal::kFrameHeaderBytes)));
    ASSERT_EQ(parsed.envelopes_size(), 4);
    EXPECT_EQ(parsed.envelopes(2).payload().size(), payload_bytes + 2);
  }
}

// A data frame read in place holds what Protobuf reads; anything the reader does not take is left to it.
TEST(FramingTest, ADataFrameReadInPlaceHoldsWhatProtobufReads) {
  transport::Frame frame;
  for (int i = 0; i < 3; ++i) {
    transport::Envelope* envelope = frame.add_envelopes();
    envelope->set_request_id(i == 0 ? 0 : (uint64_t{1} << 63) + i);
    envelope->set_kind(i == 0 ? transport::KIND_ONE_WAY : transport::KIND_RESPONSE);
    envelope->set_method(i == 2 ? UINT32_MAX : 7);
    envelope->set_payload(std::string(i * 300, static_cast<char>('a' + i)));
    envelope->set_status(i == 1 ? transport::REPLY_OVERLOADED : transport::REPLY_OK);
  }
  internal::EnvelopeViews views;
  const std::string bytes = frame.SerializeAsString();  // (the views point into it)
  ASSERT_TRUE(internal::ReadDataFrame(bytes, views));
  ASSERT_EQ(views.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const transport::Envelope& e = frame.envelopes(i);
    EXPECT_EQ(views[i].request_id, e.request_id());
    EXPECT_EQ(views[i].kind, e.kind());
    EXPECT_EQ(views[i].method, e.method());
    EXPECT_EQ(views[i].payload, e.payload());
    EXPECT_EQ(views[i].status, e.status());
  }
  // Left to Protobuf: an error text, a handshake message, an unknown field, a kind beyond int32, no envelope,
  // truncated bytes.
  transport::Frame with_error = frame;
  with_error.mutable_envelopes(1)->set_error("overloaded");
  transport::Frame handshake;
  handshake.mutable_hello()->set_version(1);
  transport::Frame with_hello = frame;
  with_hello.mutable_hello()->set_version(1);
  std::string unknown = frame.SerializeAsString() + std::string("\x28\x01", 2);  // field 5, varint
  std::string inner_unknown;
  {
    transport::Envelope e = frame.envelopes(0);
    const std::string envelope_bytes =
        e.SerializeAsString() + std::string("\x38\x01", 2);  // envelope field 7
    inner_unknown = std::string("\x0a", 1) + static_cast<char>(envelope_bytes.size()) + envelope_bytes;
  }
  const std::string big_kind = std::string("\x0a\x06\x10\x80\x80\x80\x80\x08", 8);  // kind = 2^31
  const std::string& whole = bytes;
  for (const std::string& other :
       {with_error.SerializeAsString(), handshake.SerializeAsString(), with_hello.SerializeAsString(),
        unknown, inner_unknown, big_kind, std::string(), whole.substr(0, whole.size() - 1)}) {
    EXPECT_FALSE(internal::ReadDataFrame(other, views)) << other.size() << " bytes";
  }
  // (What Protobuf makes of those: the error text and the unknown fields parse; the rest is its verdict.)
  transport::Frame parsed;
  EXPECT_TRUE(parsed.ParseFromString(unknown));
  EXPECT_TRUE(parsed.ParseFromString(big_kind));
}

TEST(ParseHostPortTest, Forms) {
  auto v4 = ParseHostPort("127.0.0.1:7101");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, "7101");
  auto v6 = ParseHostPort("[::1]:80");
  ASSERT_TRUE(v6);
  EXPECT_EQ(v6->host, "::1");
  auto name = ParseHostPort("node-2.local:7101");
  ASSERT_TRUE(name);
  EXPECT_EQ(name->host, "node-2.local");
  EXPECT_FALSE(ParseHostPort("7101"));
  EXPECT_FALSE(ParseHostPort(":7101"));
  EXPECT_FALSE(ParseHostPort("host:"));
  EXPECT_FALSE(ParseHostPort("host:0"));
  EXPECT_FALSE(ParseHostPort("host:65536"));
  EXPECT_FALSE(ParseHostPort("host:12x"));
  EXPECT_FALSE(ParseHostPort("[::1:80"));
}

}  // namespace
}  // namespace ringlimit::peer
