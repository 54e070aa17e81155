#include "node/peer/client_channel.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <optional>
#include <vector>

#include "node/peer/auth.h"

namespace ringlimit::peer::internal {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// ---------------------------------------------------------------------------------------------------
// ClientConnection

ClientConnection::ClientConnection(SerialExecutor strand, std::shared_ptr<ClientShared> shared,
                                   std::weak_ptr<PeerChannel> channel)
    : FramedConnection(strand, shared->options.framing, shared->stats),
      shared_(std::move(shared)),
      channel_(std::move(channel)),
      resolver_(strand),
      connect_timer_(strand) {}

void ClientConnection::Start(const HostPort& address) {
  connect_timer_.expires_after(shared_->options.connect_timeout);
  connect_timer_.async_wait([self = Self()](boost::system::error_code ec) {
    if (ec || self->closed() || self->phase_ == Phase::kOpen) return;
    self->Fail(PeerStatus(PeerErrorKind::kUnavailable, "connect and handshake timed out"));
  });
  resolver_.async_resolve(
      address.host, address.port,
      [self = Self()](boost::system::error_code ec, const tcp::resolver::results_type& endpoints) {
        if (self->closed()) return;
        if (ec) {
          self->Fail(PeerStatus(PeerErrorKind::kUnavailable, "cannot resolve: " + ec.message()));
          return;
        }
        asio::async_connect(
            self->socket(), endpoints, [self](boost::system::error_code ec, const tcp::endpoint&) {
              if (self->closed()) return;
              if (ec) {
                self->Fail(PeerStatus(PeerErrorKind::kUnavailable, "cannot connect: " + ec.message()));
                return;
              }
              boost::system::error_code ignored;
              self->socket().set_option(tcp::no_delay(true), ignored);
              self->phase_ = Phase::kAwaitHello;
              self->SecureThen(/*server=*/false, [self] { self->StartReading(); });
            });
      });
}

void ClientConnection::Fail(PeerStatus why) {
  if (closed()) return;
  failure_ = std::move(why);
  Close();
}

void ClientConnection::AuthFailed(std::string why) {
  StatsCounters::Add(shared_->stats.auth_failures);
  Fail(PeerStatus(PeerErrorKind::kAuthFailed, std::move(why)));
}

void ClientConnection::OnFrame(transport::Frame&& frame) {
  const bool handshake = frame.handshake_case() != transport::Frame::HANDSHAKE_NOT_SET;
  if (phase_ == Phase::kAwaitHello && frame.has_hello() && frame.envelopes_size() == 0) {
    OnHello(frame.hello());
  } else if (phase_ == Phase::kAwaitDone && frame.has_hello_done() && frame.envelopes_size() == 0) {
    OnHelloDone(frame.hello_done());
  } else if (phase_ == Phase::kOpen && !handshake && frame.envelopes_size() > 0) {
    std::shared_ptr<PeerChannel> channel = channel_.lock();
    for (transport::Envelope& envelope : *frame.mutable_envelopes()) {
      if (closed() || !channel) return;
      channel->OnResponse(this, envelope.request_id(), envelope.kind(), envelope.status(),
                          std::move(*envelope.mutable_payload()), envelope.error());
    }
  } else {
    StatsCounters::Add(shared_->stats.malformed_frames);
    Fail(PeerStatus(phase_ == Phase::kOpen ? PeerErrorKind::kConnectionLost : PeerErrorKind::kUnavailable,
                    "protocol error: unexpected frame from the peer"));
  }
}

void ClientConnection::OnEnvelopes(std::span<const EnvelopeView> envelopes) {
  std::shared_ptr<PeerChannel> channel = channel_.lock();
  static const std::string kNoError;
  for (const EnvelopeView& envelope : envelopes) {
    if (closed() || !channel) return;
    channel->OnResponse(this, envelope.request_id, envelope.kind, envelope.status,
                        std::string(envelope.payload), kNoError);
  }
}

void ClientConnection::OnHello(const transport::Hello& hello) {
  const std::string& secret = shared_->options.cluster_secret;
  if (hello.version() != kProtocolVersion) {
    Fail(PeerStatus(PeerErrorKind::kUnavailable,
                    "peer speaks protocol version " + std::to_string(hello.version())));
    return;
  }
  if (hello.auth_required() && secret.empty()) {
    AuthFailed("peer requires a cluster secret and none is configured here");
    return;
  }
  if (!hello.auth_required() && !secret.empty()) {
    AuthFailed("peer does not check the cluster secret (none configured there)");
    return;
  }
  if (!secret.empty() && hello.server_nonce().size() != auth::kNonceBytes) {
    AuthFailed("peer sent an invalid nonce");
    return;
  }
  server_nonce_ = hello.server_nonce();
  client_nonce_ = auth::RandomNonce();
  transport::Frame frame;
  transport::HelloReply* reply = frame.mutable_hello_reply();
  reply->set_version(kProtocolVersion);
  reply->set_client_nonce(client_nonce_);
  if (!secret.empty()) {
    reply->set_client_mac(auth::Proof(secret, auth::kClientLabel, server_nonce_, client_nonce_));
  }
  SendControlFrame(frame);
  phase_ = Phase::kAwaitDone;
}

void ClientConnection::OnHelloDone(const transport::HelloDone& done) {
  const std::string& secret = shared_->options.cluster_secret;
  if (!done.accepted()) {
    AuthFailed("peer refused the connection: " + done.reason());
    return;
  }
  if (!secret.empty() &&
      !auth::VerifyProof(done.server_mac(), secret, auth::kServerLabel, server_nonce_, client_nonce_)) {
    AuthFailed("peer failed to prove it knows the cluster secret");
    return;
  }
  phase_ = Phase::kOpen;
  AllowFullFrames();
  connect_timer_.cancel();
  if (auto channel = channel_.lock()) channel->OnOpen(this);
}

void ClientConnection::OnClosed() {
  connect_timer_.cancel();
  resolver_.cancel();
  const bool was_open = phase_ == Phase::kOpen;
  PeerStatus why = failure_;
  if (why.ok()) {
    why = was_open ? PeerStatus(PeerErrorKind::kConnectionLost, "connection closed")
                   : PeerStatus(PeerErrorKind::kUnavailable, "connection closed during the handshake");
  }
  if (auto channel = channel_.lock()) channel->OnConnectionClosed(this, std::move(why), was_open);
}

void ClientConnection::OnWriteDone(size_t one_way) {
  if (auto channel = channel_.lock(); channel && one_way > 0) channel->OnOneWayWritten(this, one_way);
}

// ---------------------------------------------------------------------------------------------------
// PeerChannel

PeerChannel::PeerChannel(std::shared_ptr<ClientShared> shared, std::string name, HostPort address)
    : shared_(std::move(shared)),
      name_(std::move(name)),
      address_(std::move(address)),
      strand_(MakeSerialExecutor(shared_->io, shared_->options.single_thread)),
      deadline_timer_(strand_),
      backoff_timer_(strand_),
      backoff_(shared_->options.backoff_initial) {}

PeerStatus PeerChannel::Admit() {
  if (shared_->stopped.load()) return PeerStatus(PeerErrorKind::kShutdown, "peer client stopped");
  if (closed_.load())
    return PeerStatus(PeerErrorKind::kConnectionLost, "peer " + name_ + " was disconnected");
  if (backing_off_.load()) {
    return PeerStatus(PeerErrorKind::kUnavailable,
                      "peer " + name_ + " unreachable; backing off before reconnecting");
  }
  if (outstanding_.fetch_add(1) >= shared_->options.max_queued_per_peer) {
    outstanding_.fetch_sub(1);
    StatsCounters::Add(shared_->stats.queue_full_rejections);
    return PeerStatus(PeerErrorKind::kOverloaded, "queue to peer " + name_ + " is full");
  }
  return PeerStatus::Ok();
}

void PeerChannel::Call(uint32_t method, std::string payload, PeerCallback done,
                       std::chrono::milliseconds timeout) {
  if (PeerStatus admitted = Admit(); !admitted.ok()) {
    asio::post(shared_->io, [done = std::move(done), admitted = std::move(admitted)] {
      done(PeerResult::Error(admitted.kind(), admitted.message()));
    });
    return;
  }
  const Clock::time_point deadline = Clock::now() + timeout;
  asio::post(strand_, [self = shared_from_this(), method, payload = std::move(payload),
                       done = std::move(done), deadline]() mutable {
    self->StartCall(method, std::move(payload), std::move(done), deadline);
  });
}

PeerStatus PeerChannel::Send(uint32_t method, std::string payload) {
  PeerStatus admitted = Admit();
  if (!admitted.ok()) return admitted;
  asio::post(strand_, [self = shared_from_this(), method, payload = std::move(payload)]() mutable {
    self->StartSend(method, std::move(payload));
  });
  return admitted;
}

void PeerChannel::Close(PeerStatus why) {
  closed_.store(true);
  asio::post(strand_, [self = shared_from_this(), why = std::move(why)]() mutable {
    if (self->state_ == State::kClosed) return;
    self->state_ = State::kClosed;
    self->close_status_ = why;
    self->backoff_timer_.cancel();
    self->deadline_timer_.cancel();
    if (self->connection_) {
      self->connection_->Fail(std::move(why));  // -> OnConnectionClosed -> FailAll
    } else {
      self->FailAll(why);
    }
  });
}

PeerStatus PeerChannel::Refusal() const {
  if (state_ == State::kClosed) return close_status_;
  return PeerStatus(PeerErrorKind::kUnavailable,
                    "peer " + name_ + " unreachable; backing off before reconnecting");
}

void PeerChannel::StartCall(uint32_t method, std::string payload, PeerCallback done,
                            Clock::time_point deadline) {
  if (state_ == State::kBackoff || state_ == State::kClosed) {
    outstanding_.fetch_sub(1);
    const PeerStatus why = Refusal();
    done(PeerResult::Error(why.kind(), why.message()));
    return;
  }
  const uint64_t id = ++next_id_;
  calls_.emplace(id, Pending{std::move(done), deadline});
  ArmDeadlineTimer(deadline);
  OutEnvelope envelope;
  envelope.request_id = id;
  envelope.kind = transport::KIND_REQUEST;
  envelope.method = method;
  envelope.payload = std::move(payload);
  Transmit(std::move(envelope));
}

void PeerChannel::StartSend(uint32_t method, std::string payload) {
  if (state_ == State::kBackoff || state_ == State::kClosed) {
    outstanding_.fetch_sub(1);  // best effort: dropped
    return;
  }
  ++unwritten_one_way_;
  OutEnvelope envelope;
  envelope.kind = transport::KIND_ONE_WAY;
  envelope.method = method;
  envelope.payload = std::move(payload);
  Transmit(std::move(envelope));
}

void PeerChannel::Transmit(OutEnvelope&& envelope) {
  if (state_ == State::kOpen) {
    // The only request awaiting an answer: nothing to coalesce it with soon, write it at once.
    const bool urgent =
        shared_->options.flush_when_idle && envelope.kind == transport::KIND_REQUEST && calls_.size() <= 1;
    connection_->Queue(std::move(envelope), urgent);
    return;
  }
  waiting_.push_back(std::move(envelope));
  if (state_ == State::kIdle) Connect();
}

void PeerChannel::Connect() {
  state_ = State::kConnecting;
  connection_ = std::make_shared<ClientConnection>(strand_, shared_, weak_from_this());
  connection_->Start(address_);
}

void PeerChannel::OnOpen(ClientConnection* connection) {
  if (connection != connection_.get()) return;
  state_ = State::kOpen;
  backoff_ = shared_->options.backoff_initial;
  StatsCounters::Add(shared_->stats.connections_opened);
  StatsCounters::Add(shared_->stats.connections_open);
  if (ever_opened_) StatsCounters::Add(shared_->stats.reconnects);
  ever_opened_ = true;
  spdlog::debug("peer: connected to {}", name_);
  std::deque<OutEnvelope> waiting;
  waiting.swap(waiting_);
  // Requests that timed out while waiting are not sent.
  std::erase_if(waiting, [&](const OutEnvelope& envelope) {
    return envelope.kind == transport::KIND_REQUEST && !calls_.contains(envelope.request_id);
  });
  for (size_t i = 0; i < waiting.size(); ++i) {
    // They all waited for the connection already: the last one flushes them without more delay.
    connection_->Queue(std::move(waiting[i]), /*urgent=*/i + 1 == waiting.size());
  }
}

void PeerChannel::OnResponse(ClientConnection* connection, uint64_t request_id, int kind, int status,
                             std::string&& payload, const std::string& error) {
  if (connection != connection_.get()) return;
  if (kind != transport::KIND_RESPONSE) {
    StatsCounters::Add(shared_->stats.malformed_frames);
    connection_->Fail(PeerStatus(PeerErrorKind::kConnectionLost, "protocol error: peer sent a non-response"));
    return;
  }
  switch (status) {
    case transport::REPLY_OK:
      Complete(request_id, PeerResult::Value(std::move(payload)));
      return;
    case transport::REPLY_NO_HANDLER:
      Complete(request_id, PeerResult::Error(PeerErrorKind::kUnknownMethod, error));
      return;
    case transport::REPLY_OVERLOADED:
      Complete(request_id, PeerResult::Error(PeerErrorKind::kOverloaded, error));
      return;
    default:
      Complete(request_id, PeerResult::Error(PeerErrorKind::kRemoteError, error));
      return;
  }
}

void PeerChannel::OnConnectionClosed(ClientConnection* connection, PeerStatus why, bool was_open) {
  if (connection != connection_.get()) return;
  connection_.reset();
  if (was_open) {
    StatsCounters::Sub(shared_->stats.connections_open);
  } else {
    StatsCounters::Add(shared_->stats.connect_failures);
  }
  FailAll(why);
  if (state_ == State::kClosed) return;
  spdlog::warn("peer: connection to {} failed ({}); retrying after {} ms", name_, why.ToString(),
               backoff_.count());
  state_ = State::kBackoff;
  backing_off_.store(true);
  backoff_timer_.expires_after(backoff_);
  backoff_ = std::min(backoff_ * 2, shared_->options.backoff_max);
  backoff_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (ec || self->state_ != State::kBackoff) return;
    self->state_ = State::kIdle;  // the next call reconnects
    self->backing_off_.store(false);
  });
}

void PeerChannel::OnOneWayWritten(ClientConnection* connection, size_t count) {
  if (connection != connection_.get()) return;
  count = std::min(count, unwritten_one_way_);
  unwritten_one_way_ -= count;
  outstanding_.fetch_sub(count);
}

void PeerChannel::Complete(uint64_t id, PeerResult result) {
  const auto it = calls_.find(id);
  if (it == calls_.end()) return;  // already timed out
  PeerCallback done = std::move(it->second.done);
  calls_.erase(it);
  outstanding_.fetch_sub(1);
  done(std::move(result));
}

void PeerChannel::FailAll(const PeerStatus& why) {
  std::unordered_map<uint64_t, Pending> calls;
  calls.swap(calls_);
  waiting_.clear();
  outstanding_.fetch_sub(calls.size() + unwritten_one_way_);
  unwritten_one_way_ = 0;
  for (auto& [id, pending] : calls) pending.done(PeerResult::Error(why.kind(), why.message()));
}

void PeerChannel::ArmDeadlineTimer(Clock::time_point at) {
  if (deadline_timer_armed_ && deadline_timer_at_ <= at) return;
  deadline_timer_armed_ = true;
  deadline_timer_at_ = at;
  const uint64_t generation = ++deadline_timer_generation_;
  deadline_timer_.expires_at(at);
  deadline_timer_.async_wait([self = shared_from_this(), generation](boost::system::error_code) {
    if (generation != self->deadline_timer_generation_) return;  // superseded by an earlier deadline
    self->deadline_timer_armed_ = false;
    self->ExpireDeadlines();
  });
}

void PeerChannel::ExpireDeadlines() {
  const Clock::time_point now = Clock::now();
  std::vector<uint64_t> expired;
  std::optional<Clock::time_point> earliest;
  for (const auto& [id, pending] : calls_) {
    if (pending.deadline <= now) {
      expired.push_back(id);
    } else if (!earliest || pending.deadline < *earliest) {
      earliest = pending.deadline;
    }
  }
  // Oldest first (ids grow with time), as the callers would expect.
  std::sort(expired.begin(), expired.end());
  for (uint64_t id : expired) {
    StatsCounters::Add(shared_->stats.timeouts);
    Complete(id, PeerResult::Error(PeerErrorKind::kTimeout, "no answer from " + name_));
  }
  if (earliest) ArmDeadlineTimer(*earliest);
}

}  // namespace ringlimit::peer::internal
