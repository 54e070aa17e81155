// Session: one HTTP/1.1 connection of HttpServer (internal to node/server/).
//
// A Session is owned by the handlers it has pending (shared_from_this): it lives while a read, a
// write, the deadline ticker or an unanswered request refers to it. All its state is touched only on
// its strand (or, with ServerOptions::single_thread, the io_context's one thread), so it needs no
// mutex; the only thing other threads do is post onto it (a handler's Respond callback, Drain).
//
// Per connection: requests are read one after the other (pipelining: up to max_pipelined read ahead
// of their responses), handed to the RequestHandler, and the responses are written strictly in
// request order whatever order the handler completes them in. A request whose whole head is buffered
// and of the common shape is parsed in one pass (request_head.h); Beast's parser reads every other one.
// Such a request, when nothing is owed before it, is first offered to RequestHandler::AnswerInPlace, which
// may write its answer straight into the output buffer (no HttpRequest, HttpResponse or Respond).
#ifndef RINGLIMIT_NODE_SERVER_SESSION_H_
#define RINGLIMIT_NODE_SERVER_SESSION_H_

#include "node/server/beast_http.h"  // (first: see there; session.cc inlines Beast's parser)
// The rest.
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/container/devector.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "node/server/http_server.h"

namespace ringlimit::node {

class Session;

// What the listener and every session share. Outlives them all (each holds a shared_ptr).
struct ServerShared {
  // Constant after construction.
  ServerOptions options;
  RequestHandler* handler = nullptr;
  RequestObserver observer;

  std::shared_ptr<boost::asio::ssl::context> tls;  // set before serving; null: plain HTTP

  std::atomic<size_t> connections{0};
  std::atomic<uint64_t> rejected{0};
  std::atomic<uint64_t> reclaimed{0};
  std::atomic<bool> draining{false};

  // Open sessions, so that Drain (and the reclaim of idle ones) can reach them, and the open connections
  // per client address. Protected by mutex.
  std::mutex mutex;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  std::unordered_map<std::string, size_t> per_client;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `socket` must have been accepted on its own strand. `counted`: this connection was counted in
  // shared->connections and must uncount itself when it dies.
  Session(boost::asio::ip::tcp::socket&& socket, std::shared_ptr<ServerShared> shared, bool counted);
  ~Session();

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Starts serving requests.
  void Run();
  // Answers 503 and closes: the server is at max_connections.
  void Reject();
  // Finishes the requests already read, then closes (graceful shutdown). Any thread.
  void Drain();
  // Closes the connection if it is still idle (no request read or in progress, nothing owed). Any thread.
  void CloseIfIdle();
  // Since when the connection has been idle (steady clock ns), 0 while it is not. Any thread.
  [[nodiscard]] int64_t idle_since_ns() const { return idle_since_ns_.load(std::memory_order_relaxed); }
  // The client's address ("" when unknown), counted in ServerShared::per_client while open.
  void SetClient(std::string client) { client_ = std::move(client); }

 private:
  using Clock = std::chrono::steady_clock;

  // What the read side is doing.
  enum class ReadPhase {
    kNone,     // no read in progress (pipeline full, or reading is over)
    kIdle,     // waiting for the first byte of a request (idle timeout applies)
    kPartial,  // some bytes of a request have arrived (read timeout applies)
    kLinger,   // discarding input after an error response, until EOF or a short deadline
  };

  // A request that was read and is waiting for (or has) its response.
  struct Pending {
    std::optional<HttpResponse> response;
    bool keep_alive = true;
    Clock::time_point start;
    bool head = false;  // a HEAD request: its response is written without the body
    // Or an answer in place taken to answer later (AnswerLater): its bytes, keep-alive (empty until then).
    std::string wire;

    [[nodiscard]] bool answered() const { return response.has_value() || !wire.empty(); }
  };
  // What the session hands AnswerInPlace: takes the request into pending_ when the handler answers later.
  class Later;
  // What became of a request offered to AnswerInPlace.
  enum class InPlace { kDeclined, kAnswered, kLater };

  // Reads some bytes / writes `out_`, through TLS when the connection has it.
  template <class Handler>
  void ReadSome(boost::asio::mutable_buffer buffer, Handler&& handler);
  template <class Handler>
  void Write(Handler&& handler);
  // TLS: the server side of the handshake (under the read timeout), then `next`; a failure closes.
  void Handshake(void (Session::*next)());
  void StartReading();
  void RejectNow();
  void ReadRequest();
  void Parse();
  void OnReadSome(boost::system::error_code ec, size_t bytes);
  // A read that ended in an error, or (from Beast's parser) in a whole request, which goes to OnRequest.
  void OnRead(boost::system::error_code ec);
  // Offers a request to RequestHandler::AnswerInPlace. kAnswered: its whole answer is in out_, to be
  // written; kLater: it is in pending_, answered through OnWireResponse.
  InPlace AnswerInPlace(const RequestHead& head);
  // Writes an answer AnswerInPlace put in out_, then reads on.
  void OnAnsweredInPlace();
  // After a request was taken to answer later: reads on as OnRequest does.
  void OnTakenInPlace();
  // The answer of a request taken to answer later (AnswerLater), its bytes WireResponse's.
  void OnWireResponse(uint64_t seq, std::string&& bytes, unsigned status);
  // Whether the calling thread runs this session's handlers now (its strand, or a single_thread server's one
  // thread).
  [[nodiscard]] bool OnItsStrand() const;
  // A whole request was read; `keep_alive`: the connection may carry another one after it.
  void OnRequest(HttpRequest&& request, bool keep_alive);
  void Dispatch(HttpRequest&& request);
  void OnResponse(uint64_t seq, HttpResponse&& response);
  // Queues a transport error response (it closes the connection once written).
  void QueueError(boost::beast::http::status status, std::string_view code, std::string_view message);
  void MaybeWrite();
  void OnWrite(bool close, boost::system::error_code ec);
  void FinishIfDone();
  void Linger();
  void OnLinger(boost::system::error_code ec);
  void ArmTicker();
  void OnTick(boost::system::error_code ec);
  void DoDrain();
  // Some bytes of the next request have arrived (whatever the ticker has noticed so far).
  bool RequestInProgress() const;
  void Close();

  // Constant after construction.
  const std::shared_ptr<ServerShared> shared_;
  const bool counted_;

  // Touched only on the strand.
  boost::asio::ip::tcp::socket socket_;  // its executor is this connection's strand
  // TLS over socket_ (ServerShared::tls set), else empty.
  std::optional<boost::asio::ssl::stream<boost::asio::ip::tcp::socket&>> tls_;
  bool tls_closing_ = false;  // close_notify sent (Linger)
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;
  const Strand* strand_;  // that strand (null if the socket's executor is something else)
  // The io_context's own executor (ServerOptions::single_thread), else null.
  const boost::asio::io_context::executor_type* io_executor_;
  boost::asio::steady_timer ticker_;
  boost::beast::flat_buffer buffer_;
  // Beast's parser for the request being read, made only when ParseSimpleRequestHead does not take it.
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  // In request order; front() is the oldest unanswered request. A devector: a request read and its
  // answer written, a push_back and a pop_front, reuse its storage (std::deque allocated a block of one
  // Pending each time).
  boost::container::devector<Pending> pending_;
  uint64_t first_seq_ = 0;  // sequence number of pending_.front()
  uint64_t next_seq_ = 0;   // sequence number of the next request read
  ReadPhase phase_ = ReadPhase::kNone;
  Clock::time_point read_deadline_;
  Clock::time_point write_deadline_;
  bool writing_ = false;
  size_t writing_count_ = 0;  // responses (from pending_.front()) in the write in progress
  std::string out_;           // their bytes, serialized here (reused: the capacity stays)
  bool read_closed_ = false;  // no further request will be read (EOF, error, Connection: close, drain)
  bool timed_out_ = false;    // the ticker cancelled a read whose deadline passed
  bool draining_ = false;
  bool closed_ = false;
  std::atomic<int64_t> idle_since_ns_{0};
  std::string client_;  // set before Run, constant after
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVER_SESSION_H_
