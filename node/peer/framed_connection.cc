#include "node/peer/framed_connection.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <climits>
#include <cstdint>
#include <cstring>
#include <utility>

#include "node/peer/block_arena.h"
#include "node/peer/protocol.h"
#include "storage/proto_append.h"
#include "storage/proto_read.h"

namespace ringlimit::peer::internal {

namespace asio = boost::asio;

namespace {
// A read or write buffer grown beyond this by a large frame is released after it.
constexpr size_t kKeepBufferBytes = 1 << 20;
// What one read asks the socket for: many frames (a burst of coalesced checks) in one system call.
constexpr size_t kReadChunkBytes = 64 << 10;
// The stack block a frame is parsed onto: a frame of a few envelopes fits (larger ones take more blocks).
constexpr size_t kFrameArenaBlockBytes = 2048;
}  // namespace

void WriteFrameLength(size_t size, unsigned char* p) {
  p[0] = static_cast<unsigned char>(size >> 24);
  p[1] = static_cast<unsigned char>(size >> 16);
  p[2] = static_cast<unsigned char>(size >> 8);
  p[3] = static_cast<unsigned char>(size);
}

namespace {

// One Envelope's bytes read in place; false when they hold anything ReadDataFrame leaves to Protobuf.
bool ReadEnvelope(std::string_view bytes, EnvelopeView& out) {
  namespace read = storage::proto_read;
  read::Reader reader(bytes);
  while (reader.Next()) {
    uint64_t v = 0;
    std::string_view text;
    switch (reader.field()) {
      case transport::Envelope::kRequestIdFieldNumber:
        if (!reader.Varint(v)) return false;
        out.request_id = v;
        break;
      case transport::Envelope::kKindFieldNumber:
        // (An enum value beyond int32 is read by Protobuf as its low 32 bits: left to it.)
        if (!reader.Varint(v) || v > static_cast<uint64_t>(INT32_MAX)) return false;
        out.kind = static_cast<int>(v);
        break;
      case transport::Envelope::kMethodFieldNumber:
        if (!reader.Varint(v) || v > UINT32_MAX) return false;
        out.method = static_cast<uint32_t>(v);
        break;
      case transport::Envelope::kPayloadFieldNumber:
        if (!reader.Bytes(out.payload)) return false;
        break;
      case transport::Envelope::kStatusFieldNumber:
        if (!reader.Varint(v) || v > static_cast<uint64_t>(INT32_MAX)) return false;
        out.status = static_cast<int>(v);
        break;
      case transport::Envelope::kErrorFieldNumber:
        // An error text is rare (a failed call) and a proto3 string Protobuf checks: left to it.
        if (!reader.Bytes(text) || !text.empty()) return false;
        break;
      default:
        return false;
    }
  }
  return reader.done();
}

}  // namespace

void AppendEnvelope(const OutEnvelope& envelope, std::string& out) {
  namespace append = storage::proto_append;
  // An enum is written as its int32 value sign-extended to 64 bits, as Protobuf writes it.
  auto enum_value = [](int v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); };
  const uint64_t kind = enum_value(envelope.kind);
  const uint64_t status = enum_value(envelope.status);
  size_t size = 0;
  if (envelope.request_id != 0) size += 1 + append::VarintSize(envelope.request_id);
  if (kind != 0) size += 1 + append::VarintSize(kind);
  if (envelope.method != 0) size += 1 + append::VarintSize(envelope.method);
  if (!envelope.payload.empty())
    size += 1 + append::VarintSize(envelope.payload.size()) + envelope.payload.size();
  if (status != 0) size += 1 + append::VarintSize(status);
  if (!envelope.error.empty()) size += 1 + append::VarintSize(envelope.error.size()) + envelope.error.size();
  out.reserve(out.size() + 1 + append::VarintSize(size) + size);
  append::Tag(out, transport::Frame::kEnvelopesFieldNumber, append::kLengthDelimited);
  append::Varint(out, size);
  auto varint_field = [&out](uint32_t field, uint64_t v) {
    if (v == 0) return;
    append::Tag(out, field, append::kVarint);
    append::Varint(out, v);
  };
  varint_field(transport::Envelope::kRequestIdFieldNumber, envelope.request_id);
  varint_field(transport::Envelope::kKindFieldNumber, kind);
  varint_field(transport::Envelope::kMethodFieldNumber, envelope.method);
  if (!envelope.payload.empty())
    append::Bytes(out, transport::Envelope::kPayloadFieldNumber, envelope.payload);
  varint_field(transport::Envelope::kStatusFieldNumber, status);
  if (!envelope.error.empty()) append::Bytes(out, transport::Envelope::kErrorFieldNumber, envelope.error);
}

bool ReadDataFrame(std::string_view frame, EnvelopeViews& out) {
  namespace read = storage::proto_read;
  out.clear();
  if (!read::Reader::Fits(frame)) return false;
  read::Reader reader(frame);
  while (reader.Next()) {
    std::string_view bytes;
    if (reader.field() != transport::Frame::kEnvelopesFieldNumber || !reader.Bytes(bytes)) return false;
    EnvelopeView& envelope = out.emplace_back();
    if (!ReadEnvelope(bytes, envelope)) return false;
  }
  return reader.done() && !out.empty();
}

void AppendFrame(const transport::Frame& frame, std::string& out) {
  const size_t size = frame.ByteSizeLong();
  const size_t start = out.size();
  out.resize(start + kFrameHeaderBytes + size);
  auto* p = reinterpret_cast<unsigned char*>(out.data() + start);
  WriteFrameLength(size, p);
  frame.SerializeWithCachedSizesToArray(p + kFrameHeaderBytes);
}

FramedConnection::FramedConnection(SerialExecutor strand, FramingOptions options, StatsCounters& stats)
    : strand_(std::move(strand)),
      options_(std::move(options)),
      stats_(stats),
      socket_(strand_),
      flush_timer_(strand_) {}

FramedConnection::~FramedConnection() = default;

void FramedConnection::Close() {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  flush_timer_.cancel();
  pending_.clear();
  pending_bytes_ = 0;
  OnClosed();
}

void FramedConnection::StartReading() { ReadMore(); }

void FramedConnection::SecureThen(bool server, std::function<void()> next) {
  if (options_.tls == nullptr) return next();
  tls_.emplace(socket_, *options_.tls);
  tls_->async_handshake(server ? asio::ssl::stream_base::server : asio::ssl::stream_base::client,
                        [self = shared_from_this(), next = std::move(next)](boost::system::error_code ec) {
                          if (self->closed_) return;
                          if (ec) {
                            StatsCounters::Add(self->stats_.auth_failures);
                            spdlog::warn("peer: TLS handshake failed: {}", ec.message());
                            self->Close();
                            return;
                          }
                          next();
                        });
}

void FramedConnection::ReadMore() {
  if (closed_) return;
  // Move a partial frame to the front, so that the free space is at the end.
  if (read_begin_ > 0) {
    std::memmove(read_buffer_.data(), read_buffer_.data() + read_begin_, read_end_ - read_begin_);
    read_end_ -= read_begin_;
    read_begin_ = 0;
  }
  // A frame larger than the buffer: grow it to hold the whole frame (its length is within the limit,
  // DeliverFrames checked it); back to the usual size once it is delivered.
  // Until the handshake is done, frames are small: so is the buffer of an unauthenticated peer.
  const size_t chunk =
      frame_limit_ > kHandshakeFrameLimit ? kReadChunkBytes : kFrameHeaderBytes + kHandshakeFrameLimit;
  size_t want = chunk;
  if (read_end_ >= kFrameHeaderBytes) {
    const auto* p = reinterpret_cast<const unsigned char*>(read_buffer_.data());
    const size_t length = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | size_t{p[3]};
    want = std::max(want, kFrameHeaderBytes + length);
  }
  if (read_buffer_.size() < want) {
    read_buffer_.resize(want);
  } else if (read_buffer_.size() > kKeepBufferBytes && want <= chunk) {
    read_buffer_.resize(chunk);
    read_buffer_.shrink_to_fit();
  }
  auto buffer = asio::buffer(read_buffer_.data() + read_end_, read_buffer_.size() - read_end_);
  auto done = [self = shared_from_this()](boost::system::error_code ec, size_t bytes) {
    self->OnRead(ec, bytes);
  };
  if (tls_) {
    tls_->async_read_some(buffer, std::move(done));
  } else {
    socket_.async_read_some(buffer, std::move(done));
  }
}

void FramedConnection::OnRead(boost::system::error_code ec, size_t bytes) {
  if (ec) {
    Close();  // EOF, reset or our own Close(): nothing to count
    return;
  }
  read_end_ += bytes;
  // Answers produced while delivering these frames are written together, once all are delivered.
  hold_flush_ = true;
  const bool open = DeliverFrames();
  hold_flush_ = false;
  if (!open) return;
  // The answers to what was just read are complete: with coalesce_delay 0 they are due now.
  if (options_.coalesce_delay.count() <= 0) {
    FlushNow();
  } else {
    MaybeFlush();
  }
  ReadMore();
}

bool FramedConnection::DeliverFrames() {
  while (!closed_ && read_end_ - read_begin_ >= kFrameHeaderBytes) {
    const auto* p = reinterpret_cast<const unsigned char*>(read_buffer_.data() + read_begin_);
    const uint32_t length =
        (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
    if (length > frame_limit_) {
      StatsCounters::Add(stats_.oversized_frames);
      spdlog::warn("peer: frame of {} bytes exceeds the {}-byte limit; closing the connection", length,
                   frame_limit_);
      Close();
      return false;
    }
    if (length == 0) {
      StatsCounters::Add(stats_.malformed_frames);
      spdlog::warn("peer: empty frame; closing the connection");
      Close();
      return false;
    }
    if (read_end_ - read_begin_ < kFrameHeaderBytes + length) break;  // the rest is still to come
    // A data frame is read in place: no message objects. Its views stay valid while it is delivered (nothing
    // writes into read_buffer_ until DeliverFrames returns).
    if (TakesEnvelopesInPlace() &&
        ReadDataFrame(std::string_view(read_buffer_.data() + read_begin_ + kFrameHeaderBytes, length),
                      envelopes_)) {
      read_begin_ += kFrameHeaderBytes + length;
      StatsCounters::Add(stats_.bytes_in, kFrameHeaderBytes + length);
      StatsCounters::Add(stats_.frames_in);
      StatsCounters::Add(stats_.messages_in, envelopes_.size());
      OnEnvelopes(envelopes_);
      continue;
    }
    // The frame and its envelopes are parsed onto an arena whose first block is on the stack: no
    // allocation per envelope object (payloads larger than a short string still get their own buffer,
    // which the handlers take over).
    BlockArena<kFrameArenaBlockBytes> arena;
    transport::Frame& frame = *arena.Create<transport::Frame>();
    if (!frame.ParseFromArray(p + kFrameHeaderBytes, static_cast<int>(length))) {
      StatsCounters::Add(stats_.malformed_frames);
      spdlog::warn("peer: unparseable frame of {} bytes; closing the connection", length);
      Close();
      return false;
    }
    read_begin_ += kFrameHeaderBytes + length;
    StatsCounters::Add(stats_.bytes_in, kFrameHeaderBytes + length);
    if (frame.envelopes_size() > 0) {
      StatsCounters::Add(stats_.frames_in);
      StatsCounters::Add(stats_.messages_in, frame.envelopes_size());
    }
    OnFrame(std::move(frame));
  }
  if (read_begin_ == read_end_) read_begin_ = read_end_ = 0;
  return !closed_;
}

void FramedConnection::QueueEnvelope(OutEnvelope&& envelope, bool urgent) {
  if (closed_) return;
  urgent_ = urgent_ || urgent;
  if (pending_.empty()) oldest_pending_ = std::chrono::steady_clock::now();
  pending_bytes_ += envelope.payload.size() + kEnvelopeOverheadBytes;
  pending_.push_back(std::move(envelope));
  MaybeFlush();
}

void FramedConnection::SendControlFrame(const transport::Frame& frame, bool close_after) {
  if (closed_) return;
  AppendFrame(frame, control_);
  close_after_write_ = close_after_write_ || close_after;
  MaybeFlush();
}

void FramedConnection::MaybeFlush() {
  if (closed_ || writing_ || hold_flush_) return;
  if (!control_.empty()) {
    StartWrite();
    return;
  }
  if (pending_.empty()) return;
  if (pending_bytes_ >= options_.coalesce_max_bytes || pending_.size() >= options_.coalesce_max_messages) {
    StartWrite();
    return;
  }
  if (options_.coalesce_delay.count() <= 0) {
    // Written once the handlers that are ready now have run (the end of this turn of the event loop):
    // whatever they queue shares the frame, with no timer and no added wait.
    if (flush_posted_) return;
    flush_posted_ = true;
    asio::post(strand_, [self = shared_from_this()] {
      self->flush_posted_ = false;
      self->FlushNow();
    });
    return;
  }
  const auto deadline = oldest_pending_ + options_.coalesce_delay;
  if (urgent_ || std::chrono::steady_clock::now() >= deadline) {
    StartWrite();
    return;
  }
  if (flush_timer_armed_) return;  // an armed timer expires no later than `deadline`
  flush_timer_armed_ = true;
  flush_timer_.expires_at(deadline);
  flush_timer_.async_wait([self = shared_from_this()](boost::system::error_code) {
    self->flush_timer_armed_ = false;
    self->MaybeFlush();  // re-evaluates: the oldest pending envelope may be a newer one by now
  });
}

void FramedConnection::FlushNow() {
  if (closed_ || writing_ || hold_flush_) return;
  if (!control_.empty() || !pending_.empty()) StartWrite();
}

void FramedConnection::StartWrite() {
  write_buffer_.clear();
  size_t messages = 0;
  size_t one_way = 0;
  if (!control_.empty()) {
    write_buffer_.swap(control_);
  } else {
    // The frame (a transport.Frame of the envelopes, field 1 repeated) is written straight into the buffer,
    // envelope by envelope, as protobuf would encode it: no Frame or Envelope object, no copy of an envelope.
    write_buffer_.resize(kFrameHeaderBytes);
    size_t bytes = 0;
    while (!pending_.empty() && messages < options_.coalesce_max_messages) {
      const size_t size = pending_.front().payload.size() + kEnvelopeOverheadBytes;
      if (messages > 0 && (bytes + size > options_.coalesce_max_bytes ||
                           bytes + size + kFrameHeaderBytes > options_.max_frame_bytes)) {
        break;
      }
      if (pending_.front().kind == transport::KIND_ONE_WAY) ++one_way;
      AppendEnvelope(pending_.front(), write_buffer_);
      pending_.pop_front();
      bytes += size;
      pending_bytes_ -= size;
      ++messages;
    }
    WriteFrameLength(write_buffer_.size() - kFrameHeaderBytes,
                     reinterpret_cast<unsigned char*>(write_buffer_.data()));
    // Whatever is left over is due at once: it already waited for this write.
    if (!pending_.empty()) oldest_pending_ = std::chrono::steady_clock::now() - options_.coalesce_delay;
  }
  if (pending_.empty()) urgent_ = false;
  writing_ = true;
  auto done = [self = shared_from_this(), messages, one_way](boost::system::error_code ec, size_t bytes) {
    self->OnWrite(ec, bytes, messages, one_way);
  };
  if (tls_) {
    asio::async_write(*tls_, asio::buffer(write_buffer_), std::move(done));
  } else {
    asio::async_write(socket_, asio::buffer(write_buffer_), std::move(done));
  }
}

void FramedConnection::OnWrite(boost::system::error_code ec, size_t bytes, size_t messages, size_t one_way) {
  writing_ = false;
  if (ec) {
    Close();
    return;
  }
  StatsCounters::Add(stats_.bytes_out, bytes);
  if (write_buffer_.capacity() > kKeepBufferBytes) std::string().swap(write_buffer_);
  if (messages > 0) {
    StatsCounters::Add(stats_.frames_out);
    StatsCounters::Add(stats_.messages_out, messages);
    if (!closed_) OnWriteDone(one_way);
  }
  if (close_after_write_ && control_.empty()) {
    Close();
    return;
  }
  // What was queued during the write already waited for it: with coalesce_delay 0 it is due now.
  if (options_.coalesce_delay.count() <= 0) {
    FlushNow();
  } else {
    MaybeFlush();
  }
}

}  // namespace ringlimit::peer::internal

namespace ringlimit::peer {

namespace asio = boost::asio;

Result<std::shared_ptr<asio::ssl::context>> MakeTlsContext(bool server, const std::string& cert_file,
                                                           const std::string& key_file,
                                                           const std::string& ca_file) {
  auto tls = std::make_shared<asio::ssl::context>(server ? asio::ssl::context::tls_server
                                                         : asio::ssl::context::tls_client);
  tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                   asio::ssl::context::no_tlsv1_1);
  boost::system::error_code ec;
  auto failed = [&](const std::string& what) { return Status::InvalidArgument(what, ec.message()); };
  if (tls->use_certificate_chain_file(cert_file, ec); ec) return failed("peer TLS certificate " + cert_file);
  if (tls->use_private_key_file(key_file, asio::ssl::context::pem, ec); ec) {
    return failed("peer TLS key " + key_file);
  }
  if (tls->load_verify_file(ca_file, ec); ec) return failed("peer TLS CA " + ca_file);
  tls->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert, ec);
  if (ec) return failed("peer TLS verify mode");
  return tls;
}

}  // namespace ringlimit::peer
