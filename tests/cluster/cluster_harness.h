// Cluster: N real `ringlimitd` processes on 127.0.0.1 forming one ringlimit cluster, for the
// multi-process cluster tests (tests/cluster/) and the cluster benchmark (bench/cluster/).
//
// Every node gets `--node-id nI`, an ephemeral HTTP port (NodeProcess) and a peer port picked free at
// start (`--peer-listen 127.0.0.1:P`), kept across restarts so a restarted node comes back at the same
// peer address, as it would in production. Node 1 starts alone; every later node gets `--join` to the
// peer address of a running member. Start() returns once every node is ready and every node's
// GET /v1/cluster shows all N members alive.
//
//   auto cluster = Cluster::Start({.nodes = 3});
//   ASSERT_TRUE(cluster) << cluster.error();
//   HttpClient client((*cluster)->node(0).http_port());
//
// ClusterOptions::placement can put each node elsewhere than 127.0.0.1 -- its own address in a network
// namespace, under a wrapper command, with extra environment variables (tests/support/netns.h, the
// gray-failure tests in tests/gray/); the harness then reaches node i at host(i).
//
// Conditions are polled with deadlines, never slept on. Node indexes are 0-based (node(0) is "n1").
//
// Thread safety: none; drive a Cluster from the thread that started it (the node processes die with
// that thread, see NodeProcess). The JSON helpers below are free functions and thread-safe.
#ifndef RINGLIMIT_TESTS_CLUSTER_CLUSTER_HARNESS_H_
#define RINGLIMIT_TESTS_CLUSTER_CLUSTER_HARNESS_H_

#include <boost/json/value.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/http_client.h"
#include "tests/support/node_process.h"

namespace ringlimit::testing {

// The parsed JSON body of `response` (null if it is not JSON).
[[nodiscard]] boost::json::value JsonBody(const ClientResponse& response);

// error.code of a JSON error body, or "" when the body is not one.
[[nodiscard]] std::string ErrorCode(const ClientResponse& response);

// `value[name]` as a string if it is one, else "".
[[nodiscard]] std::string StringField(const boost::json::value& value, std::string_view name);

// A member as one node's GET /v1/cluster shows it.
struct MemberView {
  std::string id;
  std::string state;  // joining, alive, suspect, dead, leaving, left
  std::string http_address;
  std::string peer_address;
  uint32_t vnodes = 0;
  double share = 0;
  // The viewing node's estimate of this member's wall clock minus its own ("clock_offset_ms",
  // "clock_uncertainty_ms"); nullopt when not measured (the viewing node itself, or no sample yet).
  std::optional<double> clock_offset_ms;
  std::optional<double> clock_uncertainty_ms;
};

// One node's GET /v1/cluster.
struct ClusterView {
  std::string node_id;
  uint64_t ring_version = 0;
  std::string ring_fingerprint;     // 16 lowercase hex digits, equal on nodes holding the same ring
  std::vector<MemberView> members;  // as the node sent them (sorted by id)
  size_t handoffs = 0;              // handoffs in progress (the "handoffs" array's length)
  std::string handoffs_json;        // the "handoffs" array as served (what a wait failure names)
  bool deciding = true;             // "fence": {"deciding"}: no pause, minority or clock fence holds it back
  std::string fence_reason;         // "fence": {"reason"}: why not ("paused", "clock_offset", "minority")
  uint64_t pending_keys = 0;        // "replication": {"pending_keys"} (0 without replication)
  std::string clock_state;          // "clock": {"state"}: unknown, ok or skewed (the node does not decide)
  double clock_offset_ms = 0;       // "clock": {"offset_ms"}: this node's own offset from the cluster's

  // The member with this id, or nullptr.
  [[nodiscard]] const MemberView* Find(std::string_view id) const;
  // Ids of the members in `state`, sorted.
  [[nodiscard]] std::vector<std::string> IdsInState(std::string_view state) const;
};

// GET /v1/cluster from the node at `http_port`, parsed. Fails on transport errors, a non-200 status or
// a body that does not match the documented shape.
[[nodiscard]] Result<ClusterView> FetchClusterView(uint16_t http_port);
// The same from the node at `host` (an IPv4 address) instead of 127.0.0.1.
[[nodiscard]] Result<ClusterView> FetchClusterView(const std::string& host, uint16_t http_port);

// GET /v1/ring?key=K: the owner and the preference list (ids, owner first).
struct RingAnswer {
  std::string owner;
  std::vector<std::string> preference_list;
};
[[nodiscard]] Result<RingAnswer> FetchRing(uint16_t http_port, const std::string& key);
[[nodiscard]] Result<RingAnswer> FetchRing(const std::string& host, uint16_t http_port,
                                           const std::string& key);

// Polls `condition` every few milliseconds until it returns true or `timeout` passes. On timeout the
// error names `what` and the last message the condition left in its argument (if any).
[[nodiscard]] Result<std::chrono::milliseconds> WaitFor(const std::string& what,
                                                        std::chrono::milliseconds timeout,
                                                        const std::function<bool(std::string*)>& condition);

// Where and how one node runs (ClusterOptions::placement).
struct NodePlacement {
  // The node's IPv4 address: it listens (HTTP, ephemeral port; peer, its fixed port) and is reached there.
  // Default: "127.0.0.1".
  std::string address = "127.0.0.1";
  // NodeProcessOptions::wrapper, e.g. {"ip", "netns", "exec", name}. Default: empty.
  std::vector<std::string> wrapper;
  // NodeProcessOptions::env, e.g. libfaketime's variables. Default: empty.
  std::vector<std::string> env;
};

struct ClusterOptions {
  // Number of nodes Start launches. REQUIRES: >= 1. Default: 3.
  int nodes = 3;

  // Extra flags for every node (e.g. {"--threads", "2"}). Default: {"--threads", "2"}.
  std::vector<std::string> args = {"--threads", "2"};

  // How long Start and AddNode wait for every node to see every running member alive. Default: 30 s
  // (generous for sanitizer builds on 2 cores).
  std::chrono::milliseconds converge_timeout{30'000};

  // How long each node may take to become ready (NodeProcessOptions::start_timeout). Default: 30 s.
  std::chrono::milliseconds start_timeout{30'000};

  // Where node `id` ("n1", ...) runs; asked at every start and restart of it, so a restart can change its
  // environment (not its address). Empty: every node on 127.0.0.1, started directly. Default: empty.
  std::function<NodePlacement(const std::string& id)> placement = nullptr;
};

class Cluster {
 public:
  [[nodiscard]] static Result<std::unique_ptr<Cluster>> Start(ClusterOptions options = {});

  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;
  ~Cluster();

  // Number of nodes ever started (running or not).
  [[nodiscard]] size_t size() const { return nodes_.size(); }
  [[nodiscard]] NodeProcess& node(size_t i) { return *nodes_[i].process; }
  [[nodiscard]] const std::string& id(size_t i) const { return nodes_[i].id; }
  [[nodiscard]] uint16_t peer_port(size_t i) const { return nodes_[i].peer_port; }
  [[nodiscard]] uint16_t http_port(size_t i) const { return nodes_[i].process->http_port(); }
  // The address node i listens on (NodePlacement::address).
  [[nodiscard]] const std::string& host(size_t i) const { return nodes_[i].address; }
  [[nodiscard]] bool running(size_t i) const { return nodes_[i].process->running(); }
  // Index of the node with this id, or nullopt.
  [[nodiscard]] std::optional<size_t> IndexOf(std::string_view id) const;
  // Indexes of the running nodes.
  [[nodiscard]] std::vector<size_t> Running() const;

  // Starts one more node (n<size+1>) joining through a running member, and waits until it is ready.
  // Does not wait for convergence (see WaitConverged). Returns its index. `env`: extra environment
  // variables of its process ("NAME=value"; NodeProcessOptions::env), kept for its restarts.
  [[nodiscard]] Result<size_t> AddNode(std::vector<std::string> extra_args = {},
                                       std::vector<std::string> env = {});

  // SIGKILL node i and reap it.
  [[nodiscard]] Result<void> Kill(size_t i);

  // Starts node i again with the same id, peer port and flags, joining through another running member.
  // Waits until it is ready (not for convergence).
  [[nodiscard]] Result<void> Restart(size_t i);
  // The extra environment of node i's next restarts (see AddNode).
  void SetEnv(size_t i, std::vector<std::string> env) { nodes_[i].env = std::move(env); }

  // Waits until every running node sees exactly the running nodes as alive (and nothing else alive).
  [[nodiscard]] Result<std::chrono::milliseconds> WaitConverged();
  // Waits until no running node lists a handoff in progress (GET /v1/cluster "handoffs" empty).
  [[nodiscard]] Result<std::chrono::milliseconds> WaitHandoffsDone(std::chrono::milliseconds timeout);
  [[nodiscard]] Result<std::chrono::milliseconds> WaitConverged(std::chrono::milliseconds timeout);
  // Waits until every running node decides its keys again ("fence": {"deciding": true}, e.g. a resumed
  // node's pause fence is over) and has shipped every change to its replicas ("pending_keys": 0).
  // Nodes in `except` are not waited for (e.g. a node whose skewed clock keeps it from deciding).
  [[nodiscard]] Result<std::chrono::milliseconds> WaitDecidingAndShipped(
      std::chrono::milliseconds timeout, const std::vector<size_t>& except = {});

  // Waits until every running node other than `i` sees node i in one of `states` (or, if
  // `or_absent`, no longer lists it at all).
  [[nodiscard]] Result<std::chrono::milliseconds> WaitSeenAs(size_t i, const std::vector<std::string>& states,
                                                             bool or_absent,
                                                             std::chrono::milliseconds timeout);

  // The log tails of every node, for failure messages.
  [[nodiscard]] std::string Logs() const;

  // "RINGLIMIT_CLUSTER_SECRET=<secret>": every node of this cluster is started with a secret of its own
  // (unless its flags give --cluster-secret), so that a node of another test running at the same time --
  // one that remembers a peer port this cluster's node now holds -- cannot join it. A test that starts a
  // node of its own to join this cluster passes this in its environment.
  [[nodiscard]] std::string SecretEnv() const;

 private:
  struct Member {
    std::string id;
    std::string address = "127.0.0.1";
    uint16_t peer_port = 0;
    std::vector<std::string> extra_args;
    std::vector<std::string> env;
    std::unique_ptr<NodeProcess> process;
  };

  Cluster(ClusterOptions options, std::filesystem::path root)
      : options_(std::move(options)), root_(std::move(root)) {}
  // Args of node `m` joining through `seed` (nullopt: alone).
  std::vector<std::string> ArgsFor(const Member& m, std::optional<size_t> seed) const;
  std::optional<size_t> AnyRunningExcept(size_t i) const;
  // Where `m` runs now (ClusterOptions::placement, or the default).
  NodePlacement PlacementOf(const std::string& id) const;
  // Starts `m` in its directory, joining through `seed`.
  Result<std::unique_ptr<NodeProcess>> Launch(const Member& m, std::optional<size_t> seed) const;

  ClusterOptions options_;
  std::filesystem::path root_;  // node i lives in root_/n<i+1>; removed with the Cluster
  std::vector<Member> nodes_;
};

}  // namespace ringlimit::testing

#endif  // RINGLIMIT_TESTS_CLUSTER_CLUSTER_HARNESS_H_
