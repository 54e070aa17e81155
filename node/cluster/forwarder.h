// Forwarder: the cluster's CheckRouter (node/api/cluster_hooks.h). It tells the API which keys this
// node owns on the current ring, sends the checks of the others to their owner over the peer transport
// (METHOD_FORWARD_CHECK, one ForwardCheckRequest per key; the transport coalesces the messages bound
// for one owner into shared frames), and serves the checks other nodes forward to this one.
//
// Routing of one key: the owner on this node's ring first; if it does not answer (connection refused,
// timeout, overloaded, error), the next alive member of the key's preference list; if that is this
// node, or nobody answers within max_attempts, this node decides itself (availability over exactness,
// counted as a local fallback). A node that receives a forwarded check always decides it itself, even if
// its ring disagrees: a check travels at most one hop past its entry node, never in a loop.
//
// Thread safety: every method is safe for concurrent use. Completions run on peer transport threads.
// Lifetime: the Cluster and the decider must outlive the Forwarder and every pending completion, i.e.
// stop the io_context (or the Cluster) before destroying them.
#ifndef RINGLIMIT_NODE_CLUSTER_FORWARDER_H_
#define RINGLIMIT_NODE_CLUSTER_FORWARDER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "node/api/cluster_hooks.h"

namespace ringlimit::cluster {

class Cluster;

struct ForwarderOptions {
  // --- Affects behaviour ---
  // Timeout of one forwarded check (--forward-timeout-ms), per attempt. Default: 500 ms.
  std::chrono::milliseconds timeout{500};
  // Nodes tried at most (the owner, then the next alive members of the preference list) before this
  // node decides itself. REQUIRES: >= 1. Default: 2.
  uint32_t max_attempts = 2;
};

struct ForwarderStats {
  uint64_t forwarded = 0;       // keys sent to another node (first attempts)
  uint64_t failures = 0;        // attempts that got no usable answer
  uint64_t fallback_next = 0;   // attempts sent to the next node after a failure
  uint64_t fallback_local = 0;  // keys decided here because no other node answered
  uint64_t served = 0;          // checks other nodes forwarded to this one
  uint64_t served_bad = 0;      // forwarded batches that did not parse
};

// Decides a serialized peer.ForwardCheckRequest here and returns the serialized response, or nullopt
// when the payload does not parse. Must be thread-safe and must not block on I/O.
using LocalDecider = std::function<std::optional<std::string>(std::string_view payload)>;

class Forwarder final : public node::CheckRouter {
 public:
  Forwarder(Cluster& cluster, ForwarderOptions options, LocalDecider decider);

  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;

  // Registers the METHOD_FORWARD_CHECK handler on the cluster's peer server. REQUIRES: before
  // Cluster::Start.
  void RegisterHandlers();

  [[nodiscard]] const std::string& self_id() const override;
  void Classify(std::span<const std::string_view> keys, std::vector<uint8_t>* remote) const override;
  void Forward(peer::ForwardedCheck check, ForwardDone done) override;

  [[nodiscard]] ForwarderStats stats() const;

 private:
  struct Attempt;
  void Try(std::shared_ptr<Attempt> attempt);

  Cluster& cluster_;
  const ForwarderOptions options_;
  const LocalDecider decider_;

  std::atomic<uint64_t> forwarded_{0}, failures_{0}, fallback_next_{0}, fallback_local_{0}, served_{0},
      served_bad_{0};
};

}  // namespace ringlimit::cluster

#endif  // RINGLIMIT_NODE_CLUSTER_FORWARDER_H_
