// PeerServer: the listening side of the peer transport (--peer-listen). One session per accepted
// connection; after the handshake (HMAC challenge when a cluster secret is set) each request is
// dispatched to the handler registered for its method, and the handler answers through a
// PeerResponder, at once or later, from any thread. Responses are coalesced into frames.
//
// Usage:
//   PeerServer server(io, options);
//   server.Register(kMethodCheck, [](std::string payload, PeerResponder responder) {
//     ... responder.Reply(answer.SerializeAsString());  // or responder.Fail("why")
//   });
//   if (Status started = server.Start(); !started.ok()) ...;   // server.port() is the bound port
//
// Thread safety: Register must be called before Start (handlers are then immutable). Start, Stop,
// port() and Stats() may be called from any thread. The server runs on an io_context the caller owns
// and runs on any number of threads; every connection has its own strand (with
// PeerServerOptions::single_thread, one thread runs the io_context and connections use its executor).
//
// Lifetime: the io_context must outlive the server and keep running until Stop() has taken effect;
// handlers and everything they capture must stay valid until the io_context has stopped (a handler may
// run on a connection that Stop() is closing). Destroying the server calls Stop().
#ifndef RINGLIMIT_NODE_PEER_PEER_SERVER_H_
#define RINGLIMIT_NODE_PEER_PEER_SERVER_H_

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "node/peer/peer_options.h"
#include "node/peer/peer_stats.h"

namespace ringlimit::peer {

namespace internal {
struct ResponderState;
struct ServerShared;
class ServerListener;
}  // namespace internal

// The way a handler answers one message. Copyable; all copies share one answer: the first Reply or
// Fail wins, later ones are ignored. If every copy is destroyed without an answer, the caller gets a
// REPLY_HANDLER_ERROR ("request dropped by the handler"). For one-way messages Reply/Fail do nothing.
// Reply and Fail may be called from any thread, after the connection closed too (then they do nothing).
class PeerResponder {
 public:
  explicit PeerResponder(std::shared_ptr<internal::ResponderState> state);

  [[nodiscard]] bool one_way() const;
  // Sends `payload` (the application's serialized answer) to the caller.
  void Reply(std::string payload) const;
  // Sends a handler error; the caller gets PeerErrorKind::kRemoteError with `message`.
  void Fail(std::string message) const;

 private:
  std::shared_ptr<internal::ResponderState> state_;
};

// Called on the connection's strand for every request or one-way message of its method. It must not
// block (it delays every other message of that connection); slow work belongs on another executor,
// answering later through the responder. An exception thrown by the handler becomes Fail(what()).
using PeerHandler = std::function<void(std::string payload, PeerResponder responder)>;

class PeerServer {
 public:
  PeerServer(boost::asio::io_context& io, PeerServerOptions options);
  ~PeerServer();

  PeerServer(const PeerServer&) = delete;
  PeerServer& operator=(const PeerServer&) = delete;

  // REQUIRES: before Start; method != 0. A later registration for the same method replaces it.
  void Register(uint32_t method, PeerHandler handler);

  // Binds, listens and starts accepting. Errors are returned: InvalidArgument for an address that does not
  // parse, IOError when the port cannot be bound (in use, not permitted).
  [[nodiscard]] Status Start();

  // The bound port (the ephemeral one when options.port was 0); 0 before Start.
  [[nodiscard]] uint16_t port() const;

  // Stops accepting and closes every connection (answers not yet written are lost; the callers see
  // their connection lost). Asynchronous: takes effect on the io_context's threads, so the port may
  // still be bound for a moment after Stop returns. Idempotent.
  void Stop();

  [[nodiscard]] PeerStats Stats() const;

 private:
  boost::asio::io_context& io_;
  std::shared_ptr<internal::ServerShared> shared_;  // also held by the listener and every session
  std::shared_ptr<internal::ServerListener> listener_;
};

}  // namespace ringlimit::peer

#endif  // RINGLIMIT_NODE_PEER_PEER_SERVER_H_
