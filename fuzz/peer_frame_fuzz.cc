// Fuzz target: the peer framing (node/peer/framed_connection.h: FramedConnection's read loop, as
// PeerServer's and PeerClient's connections use it). The input is the byte stream a peer sends: 4-byte
// big-endian lengths, each followed by a transport.Frame. A real FramedConnection reads it from one end
// of a socket pair, in whatever pieces the socket delivers; its limit is the handshake's until the first
// frame is delivered (as after a successful handshake), then the full one.
//
// Invariants: no crash or sanitizer report; the connection delivers exactly the frames a plain reading
// of the stream finds (same count, equal messages) -- after the first frame, the data frames it reads in
// place (ReadDataFrame) included -- counts an oversized, empty or unparseable frame once and closes, counts
// the bytes it consumed, and closes once the stream ends.
#include <google/protobuf/util/message_differencer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "fuzz/proto_util.h"
#include "node/peer/framed_connection.h"
#include "transport.pb.h"

namespace {

namespace asio = boost::asio;
using ringlimit::peer::FramingOptions;
using ringlimit::peer::StatsCounters;
using ringlimit::peer::internal::EnvelopeView;
using ringlimit::peer::internal::FramedConnection;
using ringlimit::peer::internal::kFrameHeaderBytes;
using ringlimit::peer::internal::kHandshakeFrameLimit;
using ringlimit::peer::internal::SerialExecutor;
using ringlimit::transport::Frame;

// The full frame limit of this harness: the default (16 MiB) works the same but makes every input that
// announces a large frame allocate it.
constexpr uint32_t kFullFrameLimit = 1 << 20;

// What a plain reading of the stream finds.
struct Expected {
  std::vector<Frame> frames;
  size_t consumed = 0;     // header and body bytes of those frames
  bool oversized = false;  // stopped at a length above the limit
  bool malformed = false;  // stopped at an empty or unparseable frame
};

Expected ReadPlainly(std::string_view stream) {
  Expected e;
  uint32_t limit = kHandshakeFrameLimit;
  while (stream.size() - e.consumed >= kFrameHeaderBytes) {
    const auto* p = reinterpret_cast<const unsigned char*>(stream.data() + e.consumed);
    const uint32_t length =
        (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
    if (length > limit) {
      e.oversized = true;
      break;
    }
    if (length == 0) {
      e.malformed = true;
      break;
    }
    if (stream.size() - e.consumed - kFrameHeaderBytes < length) break;
    Frame frame;
    if (!frame.ParseFromArray(p + kFrameHeaderBytes, static_cast<int>(length))) {
      e.malformed = true;
      break;
    }
    e.frames.push_back(std::move(frame));
    e.consumed += kFrameHeaderBytes + length;
    limit = kFullFrameLimit;
  }
  return e;
}

class Connection final : public FramedConnection {
 public:
  Connection(SerialExecutor strand, StatsCounters& stats)
      : FramedConnection(std::move(strand), Options(), stats) {}

  void Start(int fd) {
    asio::ip::tcp::socket socket(strand());
    boost::system::error_code ec;
    socket.assign(asio::ip::tcp::v4(), fd, ec);
    FUZZ_CHECK(!ec, "cannot adopt the socket");
    AdoptSocket(std::move(socket));
    StartReading();
  }

  std::vector<Frame> frames;
  bool closed_seen = false;

 private:
  static FramingOptions Options() {
    FramingOptions options;
    options.max_frame_bytes = kFullFrameLimit;
    return options;
  }
  void OnFrame(Frame&& frame) override {
    if (frames.empty()) AllowFullFrames();  // as PeerServer after the handshake
    frames.push_back(std::move(frame));
  }
  // After the first frame (as PeerServer after the handshake) data frames are read in place; what they
  // deliver, made into a Frame again, must be what Protobuf reads.
  bool TakesEnvelopesInPlace() const override { return !frames.empty(); }
  void OnEnvelopes(std::span<const EnvelopeView> envelopes) override {
    FUZZ_CHECK(!envelopes.empty(), "a data frame read in place without envelopes");
    Frame frame;
    for (const EnvelopeView& view : envelopes) {
      ringlimit::transport::Envelope* envelope = frame.add_envelopes();
      envelope->set_request_id(view.request_id);
      envelope->set_kind(static_cast<ringlimit::transport::Kind>(view.kind));
      envelope->set_method(view.method);
      envelope->set_payload(std::string(view.payload));
      envelope->set_status(static_cast<ringlimit::transport::ReplyStatus>(view.status));
    }
    frames.push_back(std::move(frame));
  }
  void OnClosed() override {
    FUZZ_CHECK(!closed_seen, "OnClosed ran twice");
    closed_seen = true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = ringlimit::fuzz::QuietProtobuf();
  (void)quiet;
  const std::string_view stream(reinterpret_cast<const char*>(data), size);
  int fds[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) == 0, "socketpair");
  StatsCounters stats;
  asio::io_context io;
  auto connection = std::make_shared<Connection>(asio::make_strand(io.get_executor()), stats);
  connection->Start(fds[0]);
  // Writes what the socket takes, lets the connection read it, and so on: large inputs arrive in pieces.
  size_t written = 0;
  while (written < size) {
    const ssize_t n = ::send(fds[1], data + written, size - written, MSG_NOSIGNAL);
    if (n > 0) {
      written += static_cast<size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      break;  // the connection closed its end (EPIPE): it has stopped reading
    }
    io.poll();
    io.restart();
  }
  ::shutdown(fds[1], SHUT_WR);
  io.run();
  ::close(fds[1]);

  const Expected expected = ReadPlainly(stream);
  FUZZ_CHECK(connection->closed_seen, "the connection is still open after the stream ended");
  FUZZ_CHECK(connection->frames.size() == expected.frames.size(), "not the frames the stream holds");
  for (size_t i = 0; i < expected.frames.size(); ++i) {
    FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(connection->frames[i], expected.frames[i]),
               "a frame differs from the one in the stream");
  }
  FUZZ_CHECK(stats.oversized_frames.load() == (expected.oversized ? 1u : 0u), "oversized frames miscounted");
  FUZZ_CHECK(stats.malformed_frames.load() == (expected.malformed ? 1u : 0u), "malformed frames miscounted");
  FUZZ_CHECK(stats.bytes_in.load() == expected.consumed, "bytes_in is not what the frames took");
  return 0;
}
