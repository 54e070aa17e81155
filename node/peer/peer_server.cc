#include "node/peer/peer_server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "node/peer/auth.h"
#include "node/peer/framed_connection.h"
#include "node/peer/protocol.h"

namespace ringlimit::peer {
namespace internal {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class ServerSession;

// The shared answer slot behind every copy of one PeerResponder.
struct ResponderState {
  ~ResponderState();
  // Sends the answer once; later calls and one-way messages do nothing. Any thread.
  void Answer(transport::ReplyStatus status, std::string payload, std::string error);

  std::weak_ptr<ServerSession> session;
  uint64_t request_id = 0;  // 0 for a one-way message
  std::atomic<bool> answered{false};
};

// State shared by the server object, its listener and its sessions.
struct ServerShared {
  explicit ServerShared(PeerServerOptions opts) : options(std::move(opts)) {}

  // Constant after Start.
  const PeerServerOptions options;
  std::unordered_map<uint32_t, PeerHandler> handlers;

  StatsCounters stats;
  std::atomic<bool> stopped{false};

  std::mutex mu;
  // Open sessions, so that Stop() can close them. Protected by mu.
  std::unordered_map<ServerSession*, std::weak_ptr<ServerSession>> sessions;
};

class ServerSession : public FramedConnection {
 public:
  ServerSession(SerialExecutor strand, std::shared_ptr<ServerShared> shared)
      : FramedConnection(strand, shared->options.framing, shared->stats),
        shared_(std::move(shared)),
        handshake_timer_(strand) {}

  // Any thread. Takes over the accepted socket (whose executor is `strand`) and starts the handshake.
  void Start(tcp::socket&& socket) {
    AdoptSocket(std::move(socket));
    asio::dispatch(strand(), [self = Self()] { self->Begin(); });
  }

  // Any thread.
  void CloseAsync() {
    asio::post(strand(), [self = Self()] { self->Close(); });
  }

  // Any thread: the answer to request `id`, from its responder.
  void Respond(uint64_t id, transport::ReplyStatus status, std::string payload, std::string error) {
    asio::dispatch(strand(), [self = Self(), id, status, payload = std::move(payload),
                              error = std::move(error)]() mutable {
      --self->inflight_;
      self->QueueResponse(id, status, std::move(payload), std::move(error));
    });
  }

 private:
  enum class Phase { kAwaitReply, kOpen, kRefused };

  std::shared_ptr<ServerSession> Self() {
    return std::static_pointer_cast<ServerSession>(shared_from_this());
  }

  void Begin() {
    {
      std::lock_guard lock(shared_->mu);
      shared_->sessions.emplace(this, Self());
    }
    if (shared_->stopped.load()) {
      Close();
      return;
    }
    boost::system::error_code ignored;
    socket().set_option(tcp::no_delay(true), ignored);
    // The handshake timer covers the TLS handshake (when the port has TLS) and the hello exchange.
    handshake_timer_.expires_after(shared_->options.handshake_timeout);
    handshake_timer_.async_wait([self = Self()](boost::system::error_code ec) {
      if (ec || self->closed() || self->phase_ == Phase::kOpen) return;
      StatsCounters::Add(self->shared_->stats.handshake_timeouts);
      spdlog::warn("peer: connection did not complete the handshake in time; closing it");
      self->Close();
    });
    SecureThen(/*server=*/true, [self = Self()] { self->Hello(); });
  }

  void Hello() {
    server_nonce_ = auth::RandomNonce();
    transport::Frame hello;
    hello.mutable_hello()->set_version(kProtocolVersion);
    hello.mutable_hello()->set_server_nonce(server_nonce_);
    hello.mutable_hello()->set_auth_required(!shared_->options.cluster_secret.empty());
    SendControlFrame(hello);
    StartReading();
  }

  void OnFrame(transport::Frame&& frame) override {
    switch (phase_) {
      case Phase::kAwaitReply:
        OnHandshake(frame);
        return;
      case Phase::kRefused:
        return;  // closing once the refusal is written
      case Phase::kOpen:
        break;
    }
    if (frame.handshake_case() != transport::Frame::HANDSHAKE_NOT_SET || frame.envelopes_size() == 0) {
      Malformed("unexpected frame after the handshake");
      return;
    }
    for (transport::Envelope& envelope : *frame.mutable_envelopes()) {
      if (closed()) return;
      Dispatch(envelope.request_id(), envelope.kind(), envelope.method(),
               std::move(*envelope.mutable_payload()));
    }
  }

  bool TakesEnvelopesInPlace() const override { return phase_ == Phase::kOpen; }

  void OnEnvelopes(std::span<const EnvelopeView> envelopes) override {
    for (const EnvelopeView& envelope : envelopes) {
      if (closed()) return;
      Dispatch(envelope.request_id, envelope.kind, envelope.method, std::string(envelope.payload));
    }
  }

  void OnHandshake(const transport::Frame& frame) {
    const std::string& secret = shared_->options.cluster_secret;
    if (!frame.has_hello_reply() || frame.envelopes_size() > 0) {
      // Anything but the expected handshake: with a secret, an unauthenticated message.
      StatsCounters::Add(secret.empty() ? shared_->stats.malformed_frames : shared_->stats.auth_failures);
      Refuse("expected HelloReply");
      return;
    }
    const transport::HelloReply& reply = frame.hello_reply();
    if (reply.version() != kProtocolVersion) {
      StatsCounters::Add(shared_->stats.malformed_frames);
      Refuse("unsupported protocol version " + std::to_string(reply.version()));
      return;
    }
    transport::Frame done;
    if (!secret.empty()) {
      if (reply.client_nonce().size() != auth::kNonceBytes ||
          !auth::VerifyProof(reply.client_mac(), secret, auth::kClientLabel, server_nonce_,
                             reply.client_nonce())) {
        StatsCounters::Add(shared_->stats.auth_failures);
        Refuse("authentication failed");
        return;
      }
      done.mutable_hello_done()->set_server_mac(
          auth::Proof(secret, auth::kServerLabel, server_nonce_, reply.client_nonce()));
    }
    done.mutable_hello_done()->set_accepted(true);
    SendControlFrame(done);
    phase_ = Phase::kOpen;
    AllowFullFrames();
    handshake_timer_.cancel();
  }

  void Refuse(const std::string& reason) {
    spdlog::warn("peer: refusing connection from {}: {}", RemoteName(), reason);
    phase_ = Phase::kRefused;
    handshake_timer_.cancel();
    transport::Frame done;
    done.mutable_hello_done()->set_accepted(false);
    done.mutable_hello_done()->set_reason(reason);
    SendControlFrame(done, /*close_after=*/true);
  }

  void Malformed(const char* what) {
    StatsCounters::Add(shared_->stats.malformed_frames);
    spdlog::warn("peer: {} from {}; closing the connection", what, RemoteName());
    Close();
  }

  // One envelope of a data frame (its request id, kind, method and payload).
  void Dispatch(uint64_t id, int kind, uint32_t method, std::string&& payload) {
    const bool one_way = kind == transport::KIND_ONE_WAY;
    if (kind != transport::KIND_REQUEST && !one_way) {
      Malformed("envelope of unexpected kind");
      return;
    }
    if ((id == 0) != one_way) {
      Malformed("envelope with an invalid request id");
      return;
    }
    const auto it = shared_->handlers.find(method);
    if (it == shared_->handlers.end()) {
      if (!one_way) {
        QueueResponse(id, transport::REPLY_NO_HANDLER, {}, "no handler for method " + std::to_string(method));
      }
      return;
    }
    if (!one_way) {
      if (inflight_ >= shared_->options.max_inflight_per_connection) {
        StatsCounters::Add(shared_->stats.queue_full_rejections);
        QueueResponse(id, transport::REPLY_OVERLOADED, {}, "too many requests in flight");
        return;
      }
      ++inflight_;
    }
    auto state = std::make_shared<ResponderState>();
    state->session = Self();
    state->request_id = id;
    PeerResponder responder(std::move(state));
    try {
      it->second(std::move(payload), responder);
    } catch (const std::exception& e) {
      responder.Fail(std::string("handler threw: ") + e.what());
    }
  }

  void QueueResponse(uint64_t id, transport::ReplyStatus status, std::string payload, std::string error) {
    if (closed()) return;
    QueueEnvelope(OutEnvelope{.request_id = id,
                              .kind = transport::KIND_RESPONSE,
                              .payload = std::move(payload),
                              .status = status,
                              .error = std::move(error)});
  }

  void OnClosed() override {
    handshake_timer_.cancel();
    StatsCounters::Sub(shared_->stats.connections_open);
    std::lock_guard lock(shared_->mu);
    shared_->sessions.erase(this);
  }

  std::string RemoteName() {
    boost::system::error_code ec;
    const auto endpoint = socket().remote_endpoint(ec);
    return ec ? std::string("(unknown)")
              : endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
  }

  // Constant after construction.
  const std::shared_ptr<ServerShared> shared_;

  // State below is touched on the strand only.
  asio::steady_timer handshake_timer_;
  Phase phase_ = Phase::kAwaitReply;
  std::string server_nonce_;
  size_t inflight_ = 0;  // requests handed to a handler and not answered yet
};

ResponderState::~ResponderState() {
  if (request_id != 0 && !answered.load()) {
    Answer(transport::REPLY_HANDLER_ERROR, {}, "request dropped by the handler");
  }
}

void ResponderState::Answer(transport::ReplyStatus status, std::string payload, std::string error) {
  if (request_id == 0 || answered.exchange(true)) return;
  if (auto s = session.lock()) s->Respond(request_id, status, std::move(payload), std::move(error));
}

class ServerListener : public std::enable_shared_from_this<ServerListener> {
 public:
  ServerListener(asio::io_context& io, std::shared_ptr<ServerShared> shared)
      : io_(io),
        shared_(std::move(shared)),
        acceptor_(MakeSerialExecutor(io, shared_->options.single_thread)),
        retry_timer_(acceptor_.get_executor()) {}

  // Before any asynchronous operation: no concurrency yet.
  // InvalidArgument for an address that does not parse, IOError when the socket cannot listen.
  Status Open() {
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(shared_->options.address, ec);
    if (ec) return Status::InvalidArgument("peer listen address " + shared_->options.address, ec.message());
    const tcp::endpoint endpoint(address, shared_->options.port);
    auto failed = [&](std::string_view step) { return Status::IOError(step, ec.message()); };
    if (acceptor_.open(endpoint.protocol(), ec); ec) return failed("open");
    if (acceptor_.set_option(asio::socket_base::reuse_address(true), ec); ec) return failed("reuse_address");
    if (acceptor_.bind(endpoint, ec); ec) return failed("bind");
    if (acceptor_.listen(asio::socket_base::max_listen_connections, ec); ec) return failed("listen");
    port_ = acceptor_.local_endpoint(ec).port();
    if (ec) return failed("local_endpoint");
    return Status::OK();
  }

  uint16_t port() const { return port_; }

  void Accept() {
    SerialExecutor strand = MakeSerialExecutor(io_, shared_->options.single_thread);
    acceptor_.async_accept(strand, [self = shared_from_this(), strand](boost::system::error_code ec,
                                                                       tcp::socket socket) mutable {
      if (ec == asio::error::operation_aborted || !self->acceptor_.is_open()) return;
      if (!ec) {
        self->OnAccepted(std::move(strand), std::move(socket));
        self->Accept();
        return;
      }
      // E.g. out of file descriptors: retry shortly instead of spinning.
      spdlog::warn("peer: accept failed: {}", ec.message());
      self->retry_timer_.expires_after(std::chrono::milliseconds(10));
      self->retry_timer_.async_wait([self](boost::system::error_code) { self->Accept(); });
    });
  }

  void Close() {
    asio::post(acceptor_.get_executor(), [self = shared_from_this()] {
      boost::system::error_code ignored;
      self->acceptor_.close(ignored);
      self->retry_timer_.cancel();
    });
  }

 private:
  void OnAccepted(SerialExecutor strand, tcp::socket socket) {
    StatsCounters& stats = shared_->stats;
    if (stats.connections_open.load() >= shared_->options.max_connections) {
      StatsCounters::Add(stats.rejected_connections);
      boost::system::error_code ignored;
      socket.close(ignored);
      return;
    }
    StatsCounters::Add(stats.connections_opened);
    StatsCounters::Add(stats.connections_open);
    std::make_shared<ServerSession>(std::move(strand), shared_)->Start(std::move(socket));
  }

  asio::io_context& io_;
  const std::shared_ptr<ServerShared> shared_;
  tcp::acceptor acceptor_;          // used on its own strand once accepting
  asio::steady_timer retry_timer_;  // same strand
  std::atomic<uint16_t> port_{0};
};

}  // namespace internal

PeerResponder::PeerResponder(std::shared_ptr<internal::ResponderState> state) : state_(std::move(state)) {}

bool PeerResponder::one_way() const { return state_->request_id == 0; }

void PeerResponder::Reply(std::string payload) const {
  state_->Answer(transport::REPLY_OK, std::move(payload), {});
}

void PeerResponder::Fail(std::string message) const {
  state_->Answer(transport::REPLY_HANDLER_ERROR, {}, std::move(message));
}

PeerServer::PeerServer(boost::asio::io_context& io, PeerServerOptions options)
    : io_(io), shared_(std::make_shared<internal::ServerShared>(std::move(options))) {}

PeerServer::~PeerServer() { Stop(); }

void PeerServer::Register(uint32_t method, PeerHandler handler) {
  shared_->handlers[method] = std::move(handler);
}

Status PeerServer::Start() {
  auto listener = std::make_shared<internal::ServerListener>(io_, shared_);
  if (Status opened = listener->Open(); !opened.ok()) return opened;
  listener_ = std::move(listener);
  listener_->Accept();
  spdlog::info("peer: listening on {}:{}{}", shared_->options.address, listener_->port(),
               shared_->options.cluster_secret.empty() ? "" : " (cluster secret required)");
  return Status::OK();
}

uint16_t PeerServer::port() const { return listener_ ? listener_->port() : 0; }

void PeerServer::Stop() {
  if (shared_->stopped.exchange(true)) return;
  if (listener_) listener_->Close();
  std::vector<std::shared_ptr<internal::ServerSession>> sessions;
  {
    std::lock_guard lock(shared_->mu);
    for (auto& [raw, weak] : shared_->sessions) {
      if (auto session = weak.lock()) sessions.push_back(std::move(session));
    }
  }
  for (auto& session : sessions) session->CloseAsync();
}

PeerStats PeerServer::Stats() const { return shared_->stats.Snapshot(); }

}  // namespace ringlimit::peer
