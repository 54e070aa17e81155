// FramedConnection (internal to node/peer/): the framing half of one peer TCP connection, shared by
// the server's sessions and the client's connections. It reads length-prefixed Frames within the
// size limit, and writes queued envelopes coalesced into frames (flushed on size, on message count, or
// at the latest coalesce_delay after the oldest queued envelope). Malformed or oversized input closes
// this connection only and is counted.
//
// Thread safety: every method, and every virtual hook, runs on the connection's serial executor (see
// SerialExecutor); the object is otherwise unsynchronized. Kept alive by its pending handlers
// (shared_from_this).
#ifndef RINGLIMIT_NODE_PEER_FRAMED_CONNECTION_H_
#define RINGLIMIT_NODE_PEER_FRAMED_CONNECTION_H_

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/container/small_vector.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "node/peer/peer_options.h"
#include "node/peer/peer_stats.h"
#include "transport.pb.h"

namespace ringlimit::peer::internal {

// The executor a connection's (or a peer channel's) handlers run on, one at a time: a strand of the
// io_context, or, when exactly one thread runs the io_context (single_thread in the options), the
// io_context's own executor -- one thread already runs them one at a time, and a strand would only add
// a lock, a queue and an executor hop to every handler.
using SerialExecutor = boost::asio::any_io_executor;

inline SerialExecutor MakeSerialExecutor(boost::asio::io_context& io, bool single_thread) {
  if (single_thread) return io.get_executor();
  return boost::asio::make_strand(io.get_executor());
}

inline constexpr size_t kFrameHeaderBytes = 4;
// Frames before the handshake completes are far smaller; this bounds what an unauthenticated peer can
// make us allocate.
inline constexpr uint32_t kHandshakeFrameLimit = 4096;
// Envelope fields other than the payload stay below this many bytes on the wire.
inline constexpr size_t kEnvelopeOverheadBytes = 64;

// Appends the 4-byte big-endian length and the serialized frame to `out`.
void AppendFrame(const transport::Frame& frame, std::string& out);
// Writes a frame's 4-byte big-endian length `size` at `p`.
void WriteFrameLength(size_t size, unsigned char* p);

// An envelope to write: transport.Envelope's fields, plain until they are written into a frame (no message
// object per envelope queued).
struct OutEnvelope {
  uint64_t request_id = 0;
  transport::Kind kind = transport::KIND_UNSPECIFIED;
  uint32_t method = 0;
  std::string payload;
  transport::ReplyStatus status = transport::REPLY_OK;
  std::string error;
};
// Appends `envelope` as one occurrence of transport.Frame's `envelopes` field: the bytes Protobuf writes for
// an Envelope of these fields (field-number order, proto3 zero values left out; peer_test compares them).
void AppendEnvelope(const OutEnvelope& envelope, std::string& out);

// One envelope of a data frame read in place (ReadDataFrame): its fields, the payload a view into the frame's
// bytes (valid while the frame is delivered). Its `error` is empty.
struct EnvelopeView {
  uint64_t request_id = 0;
  int kind = 0;  // a transport::Kind value
  uint32_t method = 0;
  std::string_view payload;
  int status = 0;  // a transport::ReplyStatus value
};
using EnvelopeViews = boost::container::small_vector<EnvelopeView, 4>;

// The envelopes of a data frame -- a transport.Frame of one or more envelopes and nothing else -- read in
// place into `out` (cleared first), without building the messages: true when every field is one it knows,
// with its wire type and a value Protobuf would read the same (a kind, method or status within its type's
// range, no error text). False for anything else -- a handshake message, an unknown field, an error text,
// malformed bytes: such a frame goes to Protobuf's parser, whose verdict stands (fuzz/peer_frame_fuzz.cc
// compares the two on every input). The one Protobuf parse of every frame cost ~1 k instructions
// (cluster_bench
// --callgrind, about two frames per forwarded check).
[[nodiscard]] bool ReadDataFrame(std::string_view frame, EnvelopeViews& out);

class FramedConnection : public std::enable_shared_from_this<FramedConnection> {
 public:
  // `stats` must outlive the connection (hold its owner alive through the derived class).
  FramedConnection(SerialExecutor strand, FramingOptions options, StatsCounters& stats);
  virtual ~FramedConnection();

  FramedConnection(const FramedConnection&) = delete;
  FramedConnection& operator=(const FramedConnection&) = delete;

  // Closes the socket and cancels everything; OnClosed runs once. Idempotent.
  void Close();

 protected:
  [[nodiscard]] SerialExecutor& strand() { return strand_; }
  [[nodiscard]] boost::asio::ip::tcp::socket& socket() { return socket_; }
  [[nodiscard]] bool closed() const { return closed_; }
  [[nodiscard]] size_t pending_messages() const { return pending_.size(); }

  // With FramingOptions::tls: the TLS handshake (as the server or the client), then `next`; without: `next`
  // at once. A failed handshake closes the connection. Call before anything is read or written.
  void SecureThen(bool server, std::function<void()> next);
  // Replaces the (unopened) socket by an accepted one. REQUIRES: its executor is strand().
  void AdoptSocket(boost::asio::ip::tcp::socket&& socket) { socket_ = std::move(socket); }
  // Frames read from now on may be up to options.max_frame_bytes (until then: kHandshakeFrameLimit).
  // Call once the handshake has succeeded.
  void AllowFullFrames() { frame_limit_ = options_.max_frame_bytes; }
  // Starts the read loop: OnFrame for every valid frame until the connection closes.
  void StartReading();
  // Queues one envelope for the next coalesced data frame. With `urgent`, the frame is written as
  // soon as the connection is not already writing, without waiting for the coalescing window.
  void QueueEnvelope(OutEnvelope&& envelope, bool urgent = false);
  // Writes a handshake frame ahead of any queued envelope; with `close_after`, closes the connection
  // once it is written (a refusal the peer should read).
  void SendControlFrame(const transport::Frame& frame, bool close_after = false);

  // A complete, parsed frame. The derived class validates its contents and may Close().
  virtual void OnFrame(transport::Frame&& frame) = 0;
  // Whether a data frame read in place (ReadDataFrame) goes to OnEnvelopes now rather than to OnFrame (e.g.
  // once the handshake is over). Default: never.
  [[nodiscard]] virtual bool TakesEnvelopesInPlace() const { return false; }
  // The envelopes of a complete data frame read in place (what OnFrame would get as the frame's envelopes);
  // their views are valid during the call. Only called when TakesEnvelopesInPlace. May Close().
  virtual void OnEnvelopes(std::span<const EnvelopeView> envelopes) { (void)envelopes; }
  // The connection closed (error, EOF, Close()). Called exactly once.
  virtual void OnClosed() = 0;
  // A data frame holding `one_way` one-way envelopes was handed to the kernel.
  virtual void OnWriteDone(size_t one_way) { (void)one_way; }

 private:
  // Reads whatever the socket has (up to the free space of read_buffer_), then hands every complete
  // frame in the buffer to OnFrame: one read system call for all the frames that arrived together.
  void ReadMore();
  void OnRead(boost::system::error_code ec, size_t bytes);
  // Parses the complete frames in read_buffer_[read_begin_, read_end_); false if the connection closed.
  bool DeliverFrames();
  // Writes, or schedules the write of, what is queued according to the coalescing options.
  void MaybeFlush();
  // Writes whatever is queued, unless a write is in progress (its completion flushes the rest).
  void FlushNow();
  void StartWrite();
  void OnWrite(boost::system::error_code ec, size_t bytes, size_t messages, size_t one_way);

  // Constant after construction.
  SerialExecutor strand_;
  const FramingOptions options_;
  StatsCounters& stats_;

  // State below is touched on strand_ only.
  boost::asio::ip::tcp::socket socket_;
  std::optional<boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>> tls_;  // over socket_, once secured
  boost::asio::steady_timer flush_timer_;
  uint32_t frame_limit_ = kHandshakeFrameLimit;  // largest frame accepted now
  bool closed_ = false;
  bool writing_ = false;
  bool close_after_write_ = false;
  bool flush_timer_armed_ = false;
  bool urgent_ = false;        // an urgent envelope is pending
  bool flush_posted_ = false;  // coalesce_delay 0: a FlushNow is posted for the end of this turn
  bool hold_flush_ = false;    // delivering the frames of one read: their answers are written together
  // Bytes read and not yet delivered are read_buffer_[read_begin_, read_end_); the buffer grows to hold
  // one large frame and shrinks back afterwards.
  std::string read_buffer_;
  EnvelopeViews envelopes_;  // scratch of DeliverFrames: a data frame read in place
  size_t read_begin_ = 0;
  size_t read_end_ = 0;
  std::string control_;              // encoded handshake frames, written first
  std::deque<OutEnvelope> pending_;  // envelopes not yet in a write
  size_t pending_bytes_ = 0;         // payload + overhead of pending_
  std::chrono::steady_clock::time_point oldest_pending_{};
  std::string write_buffer_;  // the frame(s) being written; untouched until the write completes
};

}  // namespace ringlimit::peer::internal

#endif  // RINGLIMIT_NODE_PEER_FRAMED_CONNECTION_H_
