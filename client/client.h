// Client: the C++ client of a ringlimit node or cluster (docs/client.md).
//
//   auto client = ringlimit::client::Client::Create({.nodes = {"127.0.0.1:7001"}});
//   if (!client) { ... client.error().ToString() ... }
//   ringlimit::client::Check check{.key = "user:42", .policy = "api"};
//   auto decision = (*client)->Check(check);          // Result<CheckResponse>
//   if (decision && decision->allowed) { ... }
//
// Modes
//  - Plain (ring_aware = false): every call goes to one of `nodes` (round robin); a node that cannot be
//    reached, times out or answers 5xx is retried on the next one, up to `max_attempts` nodes. In a
//    cluster the node forwards each check to its key's owner.
//  - Ring-aware (ring_aware = true): the client reads GET /v1/cluster, builds the same ring as the nodes
//    (client/ring_routes.h) and sends each key's checks straight to its owner's http_address; a batch is
//    split by owner and sent in parallel. Retries go to the key's next members on the ring. The ring is
//    refreshed (asynchronously, at most once per min_refresh_interval) when a node fails, answers 5xx, or
//    a result's "owner" is not the node the check was sent to (a ring change). Until the first refresh
//    succeeds, calls go to `nodes` as in plain mode.
//
// Retries: a check retried after a timeout or a 5xx may have been charged by the node that failed
// (at-least-once); connection failures before the request was sent are never charged twice.
//
// Errors are values (client/error.h): the server's code and message for 4xx/5xx answers, kConnect /
// kTimeout / kUnavailable for transport failures. Denial is a decision, not an error.
//
// Thread safety: a Client is safe for concurrent use from any number of threads without external
// synchronization. Asynchronous handlers run on the client's own I/O threads, never inside the call that
// started them, exactly once each; they must not block and
// must not call the synchronous methods of the same client (that would deadlock with one I/O thread).
// Lifetime: destroying the Client stops its I/O threads; handlers of calls still pending are dropped
// without being called, so wait for your calls before destroying it.
#ifndef RINGLIMIT_CLIENT_CLIENT_H_
#define RINGLIMIT_CLIENT_CLIENT_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/error.h"
#include "client/types.h"

namespace boost::asio {
class io_context;
}

namespace ringlimit::client {

class NodePool;
class RingRoutes;
struct Route;

struct ClientOptions {
  // --- Affects behaviour ---

  // Nodes to talk to, "host:port" of their HTTP API. REQUIRES: not empty. Default: {"127.0.0.1:7001"}.
  std::vector<std::string> nodes = {"127.0.0.1:7001"};

  // Ring-aware routing (see above). Default: false (plain).
  bool ring_aware = false;

  // Sent as `Authorization: Bearer TOKEN` on admin calls (Reset, Leave). Default: "" (none).
  std::string admin_token{};

  // Time limit of one attempt (connect + write + read). Default: 2000 ms.
  std::chrono::milliseconds timeout{2000};

  // Attempts per call, each on a different node when there are several. REQUIRES: >= 1. Default: 3.
  int max_attempts = 3;

  // Ring-aware mode: least time between two ring refreshes. Default: 200 ms.
  std::chrono::milliseconds min_refresh_interval{200};

  // --- Affects performance ---

  // Idle keep-alive connections kept per node. Default: 64.
  size_t max_idle_per_node = 64;

  // Threads running the client's I/O. REQUIRES: >= 1. Default: 1.
  int io_threads = 1;
};

class Client {
 public:
  template <class T>
  using Handler = std::function<void(Result<T>)>;

  // Validates the options and starts the I/O threads; does not connect yet.
  [[nodiscard]] static Result<std::unique_ptr<Client>> Create(ClientOptions options);

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();

  // POST /v1/check with one or many checks (all-or-nothing per key, see docs/api.md). Results are in
  // request order also when a ring-aware batch was split by owner.
  [[nodiscard]] Result<CheckResponse> Check(std::vector<client::Check> checks);
  [[nodiscard]] Result<CheckResponse> Check(client::Check check);
  void AsyncCheck(std::vector<client::Check> checks, Handler<CheckResponse> handler);

  // GET /v1/check: the decision from the status code only (200 allowed, 429 denied), the cheapest call.
  [[nodiscard]] Result<GetDecision> CheckGet(client::Check check);
  void AsyncCheckGet(client::Check check, Handler<GetDecision> handler);

  // GET /v1/keys/{key}: the stored states of an entity.
  [[nodiscard]] Result<KeyInfo> Inspect(const std::string& key);
  // DELETE /v1/keys/{key}[?name=]: resets one (name) or all states; returns how many were removed.
  [[nodiscard]] Result<uint64_t> Reset(const std::string& key, const std::string& name = "");

  // GET /v1/cluster from the first node that answers.
  [[nodiscard]] Result<ClusterInfo> ClusterStatus();
  // POST /v1/cluster/leave to `node`: a member id (looked up in ClusterStatus) or a "host:port".
  [[nodiscard]] Result<std::string> Leave(const std::string& node);

  // Ring-aware mode: reads GET /v1/cluster now and installs the ring. kInvalidArgument in plain mode.
  [[nodiscard]] Result<void> Refresh();
  // The ring in use (null in plain mode or before the first successful refresh).
  [[nodiscard]] std::shared_ptr<const RingRoutes> routes() const;
  // Number of ring refreshes completed (ring-aware mode), for tests and monitoring.
  [[nodiscard]] uint64_t refreshes() const { return refreshes_.load(std::memory_order_relaxed); }

 private:
  struct Target;
  struct RawRequest;
  struct RawAnswer;
  using RawHandler = std::function<void(Result<RawAnswer>)>;

  explicit Client(ClientOptions options);

  // Candidates for a call: the key's preference list in ring-aware mode, else the nodes round robin.
  std::vector<Target> Candidates(const std::string* key);
  Result<std::shared_ptr<NodePool>> Pool(const std::string& address);
  // Sends `request` to candidates[i...] until one answers below 500 or attempts run out.
  void Send(std::shared_ptr<std::vector<Target>> candidates, size_t i, RawRequest request,
            RawHandler handler);
  void CheckGroup(std::vector<client::Check> checks, Handler<CheckResponse> handler);
  // Ring-aware: starts a background refresh unless one is running or the last was too recent.
  void MaybeRefresh();
  void AsyncRefresh(std::function<void(Result<void>)> done);
  // Runs `start` and blocks until the handler it was given is called.
  template <class T>
  Result<T> Wait(const std::function<void(Handler<T>)>& start);
  // A synchronous call: sends `request` (with retries over `candidates`), maps non-2xx to an Error and
  // decodes a 2xx body with `decode`.
  template <class T>
  Result<T> Call(std::vector<Target> candidates, RawRequest request,
                 const std::function<Result<T>(const std::string& body)>& decode);

  // Constant after construction.
  const ClientOptions options_;
  std::unique_ptr<boost::asio::io_context> io_;
  std::vector<std::thread> threads_;

  std::atomic<uint64_t> next_node_{0};
  std::atomic<bool> refreshing_{false};
  std::atomic<uint64_t> refreshes_{0};

  mutable std::mutex mutex_;
  // Protected by mutex_.
  std::map<std::string, std::shared_ptr<NodePool>, std::less<>> pools_;  // by address
  std::shared_ptr<const RingRoutes> routes_;
  std::chrono::steady_clock::time_point last_refresh_{};
};

}  // namespace ringlimit::client

#endif  // RINGLIMIT_CLIENT_CLIENT_H_
