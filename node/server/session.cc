#include "node/server/session.h"  // (first: it includes Beast through node/server/beast_http.h)

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/http/error.hpp>
#include <exception>
#include <optional>
#include <string_view>

#include "node/http/http_error.h"
#include "node/http/wire.h"
#include "node/server/request_head.h"

namespace ringlimit::node {
namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;

// How long a connection keeps discarding input after an error response before it is closed, so that
// the client reads the response instead of a reset.
constexpr std::chrono::milliseconds kLingerTime{1'000};

// The deadline ticker's period: a quarter of the shortest timeout, within [5 ms, 1 s]. Deadlines are
// therefore enforced within about a quarter of their length.
std::chrono::milliseconds TickPeriod(const ServerOptions& options) {
  auto shortest = std::min({options.read_timeout, options.idle_timeout, options.write_timeout});
  return std::clamp(shortest / 4, std::chrono::milliseconds{5}, std::chrono::milliseconds{1'000});
}

bool IsParseError(const error_code& ec) {
  return &ec.category() == &http::make_error_code(http::error::bad_method).category();
}

// A read asks the kernel for up to this many bytes (when the buffer has room for fewer, it grows).
constexpr size_t kReadBytes = 64 << 10;

// A write gathers the ready responses up to about this many bytes (pipelined requests); a connection keeps
// a write buffer up to this capacity between writes.
constexpr size_t kWriteBatchBytes = 64 << 10;

// Debug-level: a client going away is routine for a server.
void Fail(const error_code& ec, const char* what) {
  spdlog::debug("http connection: {}: {}", what, ec.message());
}

}  // namespace

Session::Session(net::ip::tcp::socket&& socket, std::shared_ptr<ServerShared> shared, bool counted)
    : shared_(std::move(shared)),
      counted_(counted),
      socket_(std::move(socket)),
      strand_(socket_.get_executor().target<Strand>()),
      io_executor_(socket_.get_executor().target<net::io_context::executor_type>()),
      ticker_(socket_.get_executor()) {
  if (shared_->tls != nullptr) tls_.emplace(socket_, *shared_->tls);
}

template <class Handler>
void Session::ReadSome(net::mutable_buffer buffer, Handler&& handler) {
  if (tls_) {
    tls_->async_read_some(buffer, std::forward<Handler>(handler));
  } else {
    socket_.async_read_some(buffer, std::forward<Handler>(handler));
  }
}

template <class Handler>
void Session::Write(Handler&& handler) {
  if (tls_) {
    net::async_write(*tls_, net::buffer(out_), std::forward<Handler>(handler));
  } else {
    net::async_write(socket_, net::buffer(out_), std::forward<Handler>(handler));
  }
}

void Session::Handshake(void (Session::*next)()) {
  phase_ = ReadPhase::kPartial;  // the ticker closes a handshake that takes longer than read_timeout
  read_deadline_ = Clock::now() + shared_->options.read_timeout;
  tls_->async_handshake(net::ssl::stream_base::server, [self = shared_from_this(), next](error_code ec) {
    self->phase_ = ReadPhase::kNone;
    if (self->closed_) return;
    if (ec) {
      spdlog::debug("http connection: TLS handshake failed: {}", ec.message());
      self->Close();
      return;
    }
    ((*self).*next)();
  });
}

void Session::StartReading() { ReadRequest(); }

void Session::RejectNow() {
  QueueError(http::status::service_unavailable, "too_many_connections",
             "the server has reached its connection limit; retry later");
}

Session::~Session() {
  if (counted_) shared_->connections.fetch_sub(1, std::memory_order_relaxed);
  std::lock_guard lock(shared_->mutex);
  shared_->sessions.erase(this);
  if (!client_.empty()) {
    auto it = shared_->per_client.find(client_);
    if (it != shared_->per_client.end() && --it->second == 0) shared_->per_client.erase(it);
  }
}

void Session::CloseIfIdle() {
  net::post(socket_.get_executor(), [self = shared_from_this()] {
    if (self->closed_ || self->phase_ != ReadPhase::kIdle || !self->pending_.empty() || self->writing_ ||
        self->RequestInProgress()) {
      return;
    }
    self->Close();
  });
}

void Session::Run() {
  {
    std::lock_guard lock(shared_->mutex);
    shared_->sessions.emplace(this, weak_from_this());
  }
  net::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    error_code ignored;
    self->socket_.set_option(net::ip::tcp::no_delay(true), ignored);
    // An answer written in place goes straight to the kernel (OnAnsweredInPlace): a send that would block
    // must say so rather than wait.
    if (!self->tls_) self->socket_.non_blocking(true, ignored);
    self->draining_ = self->shared_->draining.load();
    self->ArmTicker();
    if (self->tls_) return self->Handshake(&Session::StartReading);
    self->ReadRequest();
  });
}

void Session::Reject() {
  net::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    self->ArmTicker();
    if (self->tls_) return self->Handshake(&Session::RejectNow);
    self->RejectNow();
  });
}

void Session::Drain() {
  net::post(socket_.get_executor(), [self = shared_from_this()] { self->DoDrain(); });
}

bool Session::RequestInProgress() const {
  if (phase_ == ReadPhase::kPartial) return true;
  if (phase_ == ReadPhase::kNone) {
    // Between requests (the next one is read once the answer is written): bytes of it may be here.
    if (read_closed_ || closed_) return false;
    boost::system::error_code ec;
    return buffer_.size() > 0 || (socket_.available(ec) > 0 && !ec);
  }
  if (phase_ != ReadPhase::kIdle) return false;
  if (buffer_.size() > 0 || (parser_ && parser_->got_some())) return true;
  // Bytes already in the kernel's receive queue count too: the client has sent them.
  boost::system::error_code ec;
  return socket_.available(ec) > 0 && !ec;
}

void Session::DoDrain() {
  draining_ = true;
  if (!RequestInProgress()) read_closed_ = true;
  FinishIfDone();
}

void Session::ReadRequest() {
  if (read_closed_ || closed_ || phase_ != ReadPhase::kNone) return;
  if (pending_.size() >= shared_->options.max_pipelined) return;  // resumed by OnWrite
  parser_.reset();  // made by Parse when the request is not one ParseSimpleRequestHead takes
  const auto now = Clock::now();
  if (buffer_.size() == 0) {
    phase_ = ReadPhase::kIdle;
    read_deadline_ = now + shared_->options.idle_timeout;
    if (pending_.empty() && !writing_) {
      idle_since_ns_.store(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count(),
          std::memory_order_relaxed);
    }
  } else {
    phase_ = ReadPhase::kPartial;
    read_deadline_ = now + shared_->options.read_timeout;
  }
  Parse();
}

// What http::async_read does, without its composed operations (a third of the transport's instructions
// per request): the buffered bytes go to the parser; a whole request completes at once (OnRead, inline,
// also for a pipelined one already buffered), else more bytes are read.
void Session::Parse() {
  if (!parser_ && buffer_.size() > 0) {
    // The head nearly every client sends, whole in the buffer: one pass, no Beast parser.
    const auto bytes = buffer_.data();
    if (std::optional<SimpleRequestHead> scanned =
            ScanSimpleRequestHead(std::string_view(static_cast<const char*>(bytes.data()), bytes.size()),
                                  shared_->options.max_header_bytes)) {
      switch (AnswerInPlace(scanned->head)) {
        case InPlace::kAnswered:
          buffer_.consume(scanned->size);
          return OnAnsweredInPlace();
        case InPlace::kLater:
          buffer_.consume(scanned->size);
          return OnTakenInPlace();
        case InPlace::kDeclined:
          break;
      }
      HttpRequest request;
      ToHttpRequest(scanned->head, request);
      buffer_.consume(scanned->size);
      return OnRequest(std::move(request), /*keep_alive=*/true);
    }
    parser_.emplace();
    parser_->header_limit(shared_->options.max_header_bytes);
    parser_->body_limit(shared_->options.max_body_bytes);
  }
  while (parser_) {
    if (parser_->is_done()) return OnRead({});
    if (buffer_.size() == 0) break;
    error_code ec;
    const size_t used = parser_->put(buffer_.data(), ec);
    buffer_.consume(used);
    if (ec == http::error::need_more) break;
    if (ec) return OnRead(ec);
  }
  ReadSome(buffer_.prepare(boost::beast::read_size(buffer_, kReadBytes)),
           [self = shared_from_this()](error_code ec, size_t n) { self->OnReadSome(ec, n); });
}

void Session::OnReadSome(error_code ec, size_t bytes) {
  buffer_.commit(bytes);
  // (A TLS client that closes without close_notify ends the stream "truncated": an end of stream too.)
  if (ec == net::error::eof || ec == net::ssl::error::stream_truncated) {
    if (!parser_ || !parser_->got_some()) return OnRead(http::error::end_of_stream);
    // The end of the stream ends a message that has no length (the parser says whether it may).
    error_code eof;
    parser_->put_eof(eof);
    return OnRead(eof);
  }
  if (ec) return OnRead(ec);
  Parse();
}

void Session::OnRead(error_code ec) {
  if (!ec) {
    const bool keep_alive = parser_->keep_alive();
    return OnRequest(parser_->release(), keep_alive);
  }
  const ReadPhase phase = phase_;
  phase_ = ReadPhase::kNone;
  idle_since_ns_.store(0, std::memory_order_relaxed);
  if (closed_) return;
  const bool partial = phase == ReadPhase::kPartial || buffer_.size() > 0 || (parser_ && parser_->got_some());
  read_closed_ = true;
  if (timed_out_) {
    timed_out_ = false;
    if (partial) {
      QueueError(http::status::request_timeout, "request_timeout",
                 "the request did not arrive completely within the read timeout");
      return;
    }
  } else if (ec == http::error::body_limit) {
    QueueError(http::status::payload_too_large, "body_too_large",
               "the request body exceeds the limit of " + std::to_string(shared_->options.max_body_bytes) +
                   " bytes");
    return;
  } else if (ec == http::error::header_limit) {
    QueueError(http::status::request_header_fields_too_large, "headers_too_large",
               "the request line and headers exceed the limit of " +
                   std::to_string(shared_->options.max_header_bytes) + " bytes");
    return;
  } else if (ec != http::error::end_of_stream && IsParseError(ec)) {
    QueueError(http::status::bad_request, "bad_http", "malformed HTTP request: " + ec.message());
    return;
  } else if (ec != http::error::end_of_stream && ec != net::error::operation_aborted) {
    Fail(ec, "read");
  }
  FinishIfDone();
}

class Session::Later final : public AnswerLater {
 public:
  Later(Session& session, Clock::time_point start) : session_(session), start_(start) {}

  WireRespond Take() override {
    taken_ = true;
    seq_ = session_.next_seq_++;
    session_.pending_.push_back(Pending{std::nullopt, /*keep_alive=*/true, start_, /*head=*/false, {}});
    return [self = session_.shared_from_this(), seq = seq_](std::string&& bytes, unsigned status) {
      // Inline when the handler answers on this strand (a local decision, or a forward's answer on a
      // single_thread server), else on it.
      if (self->OnItsStrand()) return self->OnWireResponse(seq, std::move(bytes), status);
      net::dispatch(self->socket_.get_executor(), [self, seq, status, bytes = std::move(bytes)]() mutable {
        self->OnWireResponse(seq, std::move(bytes), status);
      });
    };
  }

  [[nodiscard]] bool taken() const { return taken_; }
  [[nodiscard]] uint64_t seq() const { return seq_; }

 private:
  Session& session_;
  const Clock::time_point start_;
  bool taken_ = false;
  uint64_t seq_ = 0;
};

bool Session::OnItsStrand() const {
  return (strand_ != nullptr && strand_->running_in_this_thread()) ||
         (io_executor_ != nullptr && io_executor_->running_in_this_thread());
}

Session::InPlace Session::AnswerInPlace(const RequestHead& head) {
  // Only an answer that can go out now: nothing owed before it, no write using out_, and no drain (whose
  // answers may close the connection).
  if (!pending_.empty() || writing_ || draining_ || closed_ ||
      shared_->draining.load(std::memory_order_relaxed)) {
    return InPlace::kDeclined;
  }
  const auto start = Clock::now();
  out_.clear();
  unsigned status = 0;
  Later later(*this, start);
  try {
    status = shared_->handler->AnswerInPlace(head, out_, &later);
  } catch (const std::exception& e) {
    spdlog::error("request handler threw: {}", e.what());
    const HttpResponse error =
        ErrorResponse(http::status::internal_server_error, "internal", "internal error");
    if (later.taken()) {
      // Its slot is owed an answer: this one, unless the handler gave one before throwing.
      std::string bytes;
      AppendHttpResponse(error, /*head=*/false, /*close=*/false, bytes);
      OnWireResponse(later.seq(), std::move(bytes), error.result_int());
      return InPlace::kLater;
    }
    out_.clear();
    AppendHttpResponse(error, /*head=*/false, /*close=*/false, out_);
    status = error.result_int();
  }
  if (later.taken()) return InPlace::kLater;
  if (status == 0) return InPlace::kDeclined;
  const auto now = Clock::now();
  if (shared_->observer) shared_->observer(status, now - start, false);
  write_deadline_ = now + shared_->options.write_timeout;
  return InPlace::kAnswered;
}

void Session::OnTakenInPlace() {
  phase_ = ReadPhase::kNone;
  idle_since_ns_.store(0, std::memory_order_relaxed);
  if (closed_) return;
  // As after Dispatch (OnRequest): answered at once and being written with nothing more buffered, the next
  // request is read once the write completes; otherwise read on now.
  if (!(writing_ && buffer_.size() == 0 && pending_.size() == writing_count_)) ReadRequest();
  FinishIfDone();
}

void Session::OnWireResponse(uint64_t seq, std::string&& bytes, unsigned status) {
  if (closed_ || seq < first_seq_ || seq - first_seq_ >= pending_.size()) return;
  Pending& slot = pending_[seq - first_seq_];
  if (slot.answered()) return;  // answered twice: keep the first
  if (bytes.empty()) {
    // (A handler's bug: no answer. The slot is owed one, or the connection would wait forever.)
    spdlog::error("request handler answered later with nothing");
    return OnResponse(seq, ErrorResponse(http::status::internal_server_error, "internal", "internal error"));
  }
  if (shared_->observer) shared_->observer(status, Clock::now() - slot.start, false);
  slot.wire = std::move(bytes);
  MaybeWrite();
}

void Session::OnAnsweredInPlace() {
  phase_ = ReadPhase::kNone;
  idle_since_ns_.store(0, std::memory_order_relaxed);
  // out_ holds the answer, owed to no pending request: a write of no pending_ entries.
  writing_ = true;
  writing_count_ = 0;
  if (!tls_ && buffer_.size() == 0 && socket_.non_blocking()) {
    // Nothing more to read yet (the usual one request in flight): the answer goes to the kernel at once,
    // without an asynchronous write's operation and completion; what the kernel does not take now is
    // written asynchronously.
    error_code ec;
    const size_t sent = socket_.write_some(net::buffer(out_), ec);
    if (!ec && sent == out_.size()) return OnWrite(/*close=*/false, ec);
    if (ec && ec != net::error::would_block && ec != net::error::try_again)
      return OnWrite(/*close=*/false, ec);
    out_.erase(0, sent);
  }
  Write([self = shared_from_this()](error_code ec, size_t) { self->OnWrite(/*close=*/false, ec); });
  // A pipelined request already buffered is read on (it goes through Handle: out_ is being written).
  if (buffer_.size() > 0) ReadRequest();
}

void Session::OnRequest(HttpRequest&& request, bool keep_alive) {
  phase_ = ReadPhase::kNone;
  idle_since_ns_.store(0, std::memory_order_relaxed);
  if (closed_) return;
  // A drain that has begun but whose post has not reached this connection yet counts too (Drain sets the
  // shared flag before posting): a request read from now on is answered with Connection: close.
  if (!draining_ && shared_->draining.load(std::memory_order_relaxed)) draining_ = true;
  Dispatch(std::move(request));
  if (!keep_alive || draining_) read_closed_ = true;
  // Answered at once and being written, nothing more buffered: the next request is read once the write
  // completes (OnWrite). Reading now would find nothing -- the client has not seen this answer yet --
  // and cost a recv that fails. Otherwise read on now (pipelining while a forwarded answer is pending).
  if (!(writing_ && buffer_.size() == 0 && pending_.size() == writing_count_)) ReadRequest();
  FinishIfDone();
}

namespace {

// Only `chunked` is a transfer coding this server decodes (RFC 9112 6.1: another one is 501).
bool OnlyChunked(std::string_view codings) {
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
  };
  while (!codings.empty()) {
    const size_t comma = codings.find(',');
    const std::string_view coding = trim(codings.substr(0, comma));
    if (!coding.empty() && !boost::beast::iequals(coding, "chunked")) return false;
    codings = comma == std::string_view::npos ? std::string_view() : codings.substr(comma + 1);
  }
  return true;
}

}  // namespace

void Session::Dispatch(HttpRequest&& request) {
  const uint64_t seq = next_seq_++;
  pending_.push_back(
      Pending{std::nullopt, request.keep_alive(), Clock::now(), request.method() == http::verb::head, {}});
  // Codings the server cannot undo are refused before the handler sees the bytes as a body.
  if (auto te = request.find(http::field::transfer_encoding);
      te != request.end() && !OnlyChunked(te->value())) {
    OnResponse(seq, ErrorResponse(http::status::not_implemented, "unsupported_transfer_coding",
                                  "only the chunked transfer coding is supported"));
    return;
  }
  if (auto ce = request.find(http::field::content_encoding);
      ce != request.end() && !boost::beast::iequals(ce->value(), "identity") && !ce->value().empty()) {
    OnResponse(seq, ErrorResponse(http::status::unsupported_media_type, "unsupported_content_coding",
                                  "request bodies must not be content-coded (Content-Encoding: " +
                                      std::string(ce->value().substr(0, 64)) + ")"));
    return;
  }
  Respond respond = [self = shared_from_this(), seq](HttpResponse&& response) {
    // Runs inline when the handler answers on this strand, or on the one thread of a single_thread
    // server (a local decision: no executor in between), else hops onto it.
    if (self->OnItsStrand()) {
      self->OnResponse(seq, std::move(response));
      return;
    }
    net::dispatch(self->socket_.get_executor(), [self, seq, response = std::move(response)]() mutable {
      self->OnResponse(seq, std::move(response));
    });
  };
  try {
    shared_->handler->Handle(std::move(request), std::move(respond));
  } catch (const std::exception& e) {
    spdlog::error("request handler threw: {}", e.what());
    OnResponse(seq, ErrorResponse(http::status::internal_server_error, "internal", "internal error"));
  }
}

void Session::OnResponse(uint64_t seq, HttpResponse&& response) {
  if (closed_ || seq < first_seq_ || seq - first_seq_ >= pending_.size()) return;
  Pending& slot = pending_[seq - first_seq_];
  if (slot.answered()) return;  // answered twice (or after a handler exception): keep the first
  if (shared_->observer) {
    shared_->observer(static_cast<unsigned>(response.result_int()), Clock::now() - slot.start, false);
  }
  slot.response = std::move(response);
  MaybeWrite();
}

void Session::QueueError(http::status status, std::string_view code, std::string_view message) {
  read_closed_ = true;
  pending_.push_back(Pending{ErrorResponse(status, code, message), false, Clock::now(), false, {}});
  ++next_seq_;
  if (shared_->observer) shared_->observer(static_cast<unsigned>(status), std::chrono::nanoseconds{0}, true);
  MaybeWrite();
}

void Session::MaybeWrite() {
  if (writing_ || closed_ || pending_.empty() || !pending_.front().answered()) return;
  // Every response that is ready, in order, in one write (serialized by hand: one buffer, no Beast
  // serializer state per response), up to the one that closes the connection.
  out_.clear();
  size_t count = 0;
  bool close = false;
  while (count < pending_.size() && pending_[count].answered() && !close && out_.size() < kWriteBatchBytes) {
    const Pending& p = pending_[count];
    // The last response of a connection that reads nothing more says so.
    const bool only = count + 1 == pending_.size();
    const bool last = read_closed_ && only && phase_ == ReadPhase::kNone;
    close = !p.keep_alive || last || (draining_ && only && !RequestInProgress());
    if (p.response) {
      AppendHttpResponse(*p.response, p.head, close, out_);
    } else {
      AppendWireResponse(p.wire, close, out_);
    }
    ++count;
  }
  writing_ = true;
  writing_count_ = count;
  write_deadline_ = Clock::now() + shared_->options.write_timeout;
  Write([self = shared_from_this(), close](error_code ec, size_t) { self->OnWrite(close, ec); });
}

void Session::OnWrite(bool close, error_code ec) {
  writing_ = false;
  if (closed_) return;
  if (ec) {
    Fail(ec, "write");
    Close();
    return;
  }
  for (size_t k = 0; k < writing_count_; ++k) pending_.pop_front();
  first_seq_ += writing_count_;
  writing_count_ = 0;
  if (out_.capacity() > kWriteBatchBytes) std::string().swap(out_);  // a large body's buffer goes back
  if (close) {
    // With no read pending, drain the client's unread input before closing so that it reads this
    // response rather than a connection reset.
    if (phase_ == ReadPhase::kNone && pending_.empty()) {
      Linger();
    } else {
      Close();
    }
    return;
  }
  if (pending_.empty() && phase_ == ReadPhase::kIdle) {
    const auto now = Clock::now();
    read_deadline_ = now + shared_->options.idle_timeout;
    idle_since_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count(),
                         std::memory_order_relaxed);
  }
  ReadRequest();
  MaybeWrite();
  FinishIfDone();
}

void Session::FinishIfDone() {
  if (closed_ || writing_ || !pending_.empty()) return;
  if (draining_ && phase_ == ReadPhase::kIdle && !RequestInProgress()) {
    // Cancel the read that waits for a request rather than closing: bytes the reactor has already
    // taken from the kernel but not yet handed to us are invisible here, and their completion still
    // arrives (and is served, with Connection: close). A read that really was idle completes with
    // operation_aborted and OnRead closes the connection.
    error_code ignored;
    socket_.cancel(ignored);
    return;
  }
  if (read_closed_ && phase_ == ReadPhase::kNone) Close();
}

void Session::Linger() {
  if (phase_ != ReadPhase::kLinger) {
    phase_ = ReadPhase::kLinger;
    read_deadline_ = Clock::now() + kLingerTime;
  }
  buffer_.clear();
  if (tls_ && !tls_closing_) {
    // TLS ends with close_notify (a client that sees the TCP close without it may report a truncation
    // attack); then the client's own close_notify, or anything else it still sends, ends the linger.
    tls_closing_ = true;
    tls_->async_shutdown([self = shared_from_this()](error_code ec) {
      if (self->closed_) return;
      if (!ec) return self->Close();
      self->Linger();  // it kept sending: drain as for plain HTTP, under the same deadline
    });
    return;
  }
  error_code ignored;
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  socket_.async_read_some(buffer_.prepare(16 << 10),
                          [self = shared_from_this()](error_code ec, size_t) { self->OnLinger(ec); });
}

void Session::OnLinger(error_code ec) {
  if (closed_) return;
  if (ec) {
    Close();
    return;
  }
  socket_.async_read_some(buffer_.prepare(16 << 10),
                          [self = shared_from_this()](error_code ec, size_t) { self->OnLinger(ec); });
}

void Session::ArmTicker() {
  ticker_.expires_after(TickPeriod(shared_->options));
  ticker_.async_wait([self = shared_from_this()](error_code ec) { self->OnTick(ec); });
}

void Session::OnTick(error_code ec) {
  if (ec || closed_) return;
  const auto now = Clock::now();
  if (writing_ && now >= write_deadline_) {
    spdlog::debug("http connection: write timed out");
    Close();
    return;
  }
  switch (phase_) {
    case ReadPhase::kIdle:
      if (buffer_.size() > 0 || (parser_ && parser_->got_some())) {
        // The first bytes arrived: the whole request now has read_timeout to arrive.
        phase_ = ReadPhase::kPartial;
        idle_since_ns_.store(0, std::memory_order_relaxed);
        read_deadline_ = now + shared_->options.read_timeout;
      } else if (pending_.empty() && !writing_ && now >= read_deadline_) {
        Close();  // idle keep-alive connection
        return;
      }
      break;
    case ReadPhase::kPartial:
      if (now >= read_deadline_ && !timed_out_) {
        timed_out_ = true;
        error_code ignored;
        socket_.cancel(ignored);  // OnRead answers 408
      }
      break;
    case ReadPhase::kLinger:
      if (now >= read_deadline_) {
        Close();
        return;
      }
      break;
    case ReadPhase::kNone:
      break;
  }
  ArmTicker();
}

void Session::Close() {
  if (closed_) return;
  closed_ = true;
  error_code ignored;
  ticker_.cancel();
  socket_.shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  pending_.clear();
}

}  // namespace ringlimit::node
