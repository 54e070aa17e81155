// Internals of PeerClient: PeerChannel (one per peer address: the calls, their deadlines, the
// backoff, the current connection) and ClientConnection (one TCP connection attempt: connect,
// handshake, then responses). Both of one peer share that peer's serial executor (a strand, or the
// io_context's executor with PeerClientOptions::single_thread; see SerialExecutor).
//
// Thread safety: PeerChannel's Call, Send, Close and outstanding() may be called from any thread;
// everything else (and all of ClientConnection) runs on the channel's serial executor.
#ifndef RINGLIMIT_NODE_PEER_CLIENT_CHANNEL_H_
#define RINGLIMIT_NODE_PEER_CLIENT_CHANNEL_H_

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/published.h"
#include "node/peer/framed_connection.h"
#include "node/peer/peer_client.h"
#include "node/peer/protocol.h"

namespace ringlimit::peer::internal {

class PeerChannel;

// State shared by a PeerClient and its channels.
struct ClientShared {
  ClientShared(boost::asio::io_context& io_context, PeerClientOptions opts)
      : io(io_context), options(std::move(opts)) {}

  // Constant after construction.
  boost::asio::io_context& io;
  const PeerClientOptions options;

  StatsCounters stats;
  std::atomic<bool> stopped{false};

  // Every call looks its channel up here, from any thread: an immutable copy of `channels`, republished
  // (under mu) whenever a channel is added or removed, so finding an existing channel takes no lock (see
  // base/published.h). Weak references: a thread's cache entry may outlive the client, and a channel
  // must not outlive the io_context its sockets belong to.
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
  };
  using ChannelIndex = std::unordered_map<std::string, std::weak_ptr<PeerChannel>, NameHash, std::equal_to<>>;
  Published<ChannelIndex> index;

  // Serialises adding and removing channels (and stopping).
  std::mutex mu;
  // One channel per peer address, as the caller spelled it. Protected by mu. The owner of the channels.
  std::unordered_map<std::string, std::shared_ptr<PeerChannel>> channels;

  // Publishes `channels` as the new index. REQUIRES: mu held.
  void PublishIndexLocked() {
    auto next = std::make_shared<ChannelIndex>();
    next->reserve(channels.size());
    for (const auto& [name, channel] : channels) next->emplace(name, channel);
    index.Publish(std::move(next));
  }
};

class ClientConnection : public FramedConnection {
 public:
  ClientConnection(SerialExecutor strand, std::shared_ptr<ClientShared> shared,
                   std::weak_ptr<PeerChannel> channel);

  // Resolves, connects and runs the handshake; the channel hears OnOpen or OnConnectionClosed.
  void Start(const HostPort& address);
  void Queue(OutEnvelope&& envelope, bool urgent) { QueueEnvelope(std::move(envelope), urgent); }
  // Closes the connection; the channel's calls fail with `why`.
  void Fail(PeerStatus why);

 private:
  enum class Phase { kConnecting, kAwaitHello, kAwaitDone, kOpen };

  std::shared_ptr<ClientConnection> Self() {
    return std::static_pointer_cast<ClientConnection>(shared_from_this());
  }
  void OnFrame(transport::Frame&& frame) override;
  [[nodiscard]] bool TakesEnvelopesInPlace() const override { return phase_ == Phase::kOpen; }
  void OnEnvelopes(std::span<const EnvelopeView> envelopes) override;
  void OnHello(const transport::Hello& hello);
  void OnHelloDone(const transport::HelloDone& done);
  void OnClosed() override;
  void OnWriteDone(size_t one_way) override;
  void AuthFailed(std::string why);

  // Constant after construction.
  const std::shared_ptr<ClientShared> shared_;

  // State below is touched on the strand only.
  // The channel owns this connection; a weak reference back avoids an ownership cycle.
  std::weak_ptr<PeerChannel> channel_;
  boost::asio::ip::tcp::resolver resolver_;
  boost::asio::steady_timer connect_timer_;
  Phase phase_ = Phase::kConnecting;
  std::string server_nonce_;
  std::string client_nonce_;
  PeerStatus failure_;  // why the connection closed, when known
};

class PeerChannel : public std::enable_shared_from_this<PeerChannel> {
 public:
  PeerChannel(std::shared_ptr<ClientShared> shared, std::string name, HostPort address);

  PeerChannel(const PeerChannel&) = delete;
  PeerChannel& operator=(const PeerChannel&) = delete;

  // Any thread. REQUIRES: method and payload already validated by PeerClient.
  void Call(uint32_t method, std::string payload, PeerCallback done, std::chrono::milliseconds timeout);
  [[nodiscard]] PeerStatus Send(uint32_t method, std::string payload);
  // Any thread: fails everything with `why` and refuses later calls. Terminal.
  void Close(PeerStatus why);
  [[nodiscard]] size_t outstanding() const { return outstanding_.load(); }

  // From the channel's ClientConnection, on the strand.
  void OnOpen(ClientConnection* connection);
  // One envelope of a data frame (its request id, kind, reply status, payload and error).
  void OnResponse(ClientConnection* connection, uint64_t request_id, int kind, int status,
                  std::string&& payload, const std::string& error);
  void OnConnectionClosed(ClientConnection* connection, PeerStatus why, bool was_open);
  void OnOneWayWritten(ClientConnection* connection, size_t count);

 private:
  enum class State { kIdle, kConnecting, kOpen, kBackoff, kClosed };
  using Clock = std::chrono::steady_clock;
  struct Pending {
    PeerCallback done;
    Clock::time_point deadline;
  };

  [[nodiscard]] PeerStatus Admit();
  void StartCall(uint32_t method, std::string payload, PeerCallback done, Clock::time_point deadline);
  void StartSend(uint32_t method, std::string payload);
  [[nodiscard]] PeerStatus Refusal() const;  // why a call cannot start in state_ (kBackoff/kClosed)
  void Transmit(OutEnvelope&& envelope);
  void Connect();
  void Complete(uint64_t id, PeerResult result);
  void FailAll(const PeerStatus& why);
  // Makes the deadline timer expire no later than `at`.
  void ArmDeadlineTimer(Clock::time_point at);
  // Fails the calls whose deadline has passed and re-arms the timer for the earliest remaining one.
  void ExpireDeadlines();

  // Constant after construction.
  const std::shared_ptr<ClientShared> shared_;
  const std::string name_;
  const HostPort address_;
  SerialExecutor strand_;

  // Any thread.
  std::atomic<size_t> outstanding_{0};  // calls not completed + one-way messages not written
  std::atomic<bool> backing_off_{false};
  std::atomic<bool> closed_{false};

  // State below is touched on strand_ only.
  State state_ = State::kIdle;
  PeerStatus close_status_;
  std::shared_ptr<ClientConnection> connection_;
  bool ever_opened_ = false;
  uint64_t next_id_ = 0;
  // The calls awaiting their answer. Deadlines are swept by one timer (no per-call timer or index):
  // it is armed for the earliest deadline when it is not armed, and re-armed after each sweep.
  std::unordered_map<uint64_t, Pending> calls_;
  std::deque<OutEnvelope> waiting_;  // queued while not connected
  size_t unwritten_one_way_ = 0;     // one-way messages in waiting_ or in the connection's queue
  boost::asio::steady_timer deadline_timer_;
  bool deadline_timer_armed_ = false;
  Clock::time_point deadline_timer_at_{};
  uint64_t deadline_timer_generation_ = 0;
  boost::asio::steady_timer backoff_timer_;
  std::chrono::milliseconds backoff_;
};

}  // namespace ringlimit::peer::internal

#endif  // RINGLIMIT_NODE_PEER_CLIENT_CHANNEL_H_
