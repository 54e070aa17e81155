// NetnsFabric: one Linux network namespace per test node, joined by a bridge, with firewall rules
// (nftables) to cut the links between them -- real partitions for the gray-failure tests (issue 13).
//
// Create(n) makes, as root, a bridge in the root namespace with the address 10.213.X.1/24 (X picked
// from the test's pid, skipping subnets another live run uses) and n namespaces, node i's with a veth
// pair on the bridge and the address 10.213.X.(10+i). Names carry the pid ("rlg<pid>b", "rlg<pid>n<i>",
// "rlg<pid>v<i>"), so parallel test processes do not clash. The test process stays in the root namespace
// and reaches every node through the bridge; cuts apply only between node addresses, never to it.
//
//   auto fabric = NetnsFabric::Create(3);            // GTEST_SKIP on NetnsFabric::Unsupported()
//   NodeProcessOptions options;
//   options.wrapper = fabric->Wrapper(0);            // runs in namespace 0 ...
//   options.listen = fabric->address(0) + ":0";      // ... and is reached at its address
//   ...
//   fabric->Cut(0, 1);                               // every packet from node 0 to node 1 dropped
//   fabric->Isolate({0});                            // n1 cut from everyone, both ways
//   fabric->HealAll();
//
// A cut from A to B (CutKind::kPackets, the default) drops, in A's namespace, every packet A sends to B:
// UDP datagrams from B still reach A, but TCP fails both ways (a handshake needs packets in both
// directions) -- asymmetric loss as a network has it. CutKind::kConnections drops only the packets of
// connections A opened to B (nftables `ct direction original`): A cannot connect to B, while B's
// connections to A keep working, answers included. Note that a peer transport which sends in both
// directions over one connection keeps talking over B's connections then (ringlimit's does: such a cut of
// A -> B does not stop A's forwards to B). Cutting both directions partitions the pair. Rules are
// rewritten atomically (one `nft -f` per namespace), so a cut or heal applies to the next packet.
//
// Cleanup: the destructor deletes the namespaces (their veths go with them) and the bridge; processes
// still running in a namespace must be stopped first (destroy the Cluster before the fabric). If the
// test process crashes, its nodes die with it (NodeProcess's PR_SET_PDEATHSIG) and the next Create
// deletes every "rlg<pid>..." namespace and bridge whose pid is no longer alive.
//
// Thread safety: none; drive a NetnsFabric from one thread. Unsupported() is thread-safe.
#ifndef RINGLIMIT_TESTS_SUPPORT_NETNS_H_
#define RINGLIMIT_TESTS_SUPPORT_NETNS_H_

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/node_process.h"

namespace ringlimit::testing {

// What a cut drops (see above).
enum class CutKind {
  kPackets,      // every packet from A to B
  kConnections,  // the packets of connections A opened to B
};

class NetnsFabric {
 public:
  // Why this process cannot build a fabric (not root, no `nft`, no right to create a namespace), or
  // nullopt if it can. Probes once (creates and deletes a namespace) and remembers the answer.
  [[nodiscard]] static std::optional<std::string> Unsupported();

  // Builds the bridge and `nodes` namespaces (see above). REQUIRES: 1 <= nodes <= 200.
  [[nodiscard]] static Result<std::unique_ptr<NetnsFabric>> Create(size_t nodes);

  ~NetnsFabric();
  NetnsFabric(const NetnsFabric&) = delete;
  NetnsFabric& operator=(const NetnsFabric&) = delete;

  [[nodiscard]] size_t size() const { return namespaces_.size(); }
  // Node i's address (10.213.X.(10+i)) and namespace name.
  [[nodiscard]] const std::string& address(size_t i) const { return addresses_[i]; }
  [[nodiscard]] const std::string& name(size_t i) const { return namespaces_[i]; }
  // The command prefix that runs a program in node i's namespace: {"ip", "netns", "exec", name(i)}.
  [[nodiscard]] std::vector<std::string> Wrapper(size_t i) const;

  // Drops packets from node `from` to node `to` (one direction, see above). A second cut of the same pair
  // replaces the first.
  [[nodiscard]] Result<void> Cut(size_t from, size_t to, CutKind kind = CutKind::kPackets);
  // Cuts both directions between a and b.
  [[nodiscard]] Result<void> CutBoth(size_t a, size_t b);
  // Cuts both directions between every node of `side` and every node not in it.
  [[nodiscard]] Result<void> Isolate(const std::vector<size_t>& side);
  // Removes the cut from `from` to `to` (if any).
  [[nodiscard]] Result<void> Heal(size_t from, size_t to);
  // Removes every cut.
  [[nodiscard]] Result<void> HealAll();
  // The cuts in place, by (from, to).
  [[nodiscard]] const std::map<std::pair<size_t, size_t>, CutKind>& cuts() const { return cuts_; }

 private:
  NetnsFabric() = default;
  // Writes node i's ruleset from cuts_.
  Result<void> Apply(size_t i);

  // Constant after Create.
  std::string bridge_;
  std::vector<std::string> namespaces_;
  std::vector<std::string> addresses_;
  // The cuts in place.
  std::map<std::pair<size_t, size_t>, CutKind> cuts_;
};

// The HTTP status curl gets for GET `url` from inside namespace `ns` (the output of curl -w '%{http_code}':
// "000" when no connection was answered within `seconds`). Blocks up to `seconds`.
[[nodiscard]] std::string CurlStatusFrom(const std::string& ns, const std::string& url, int seconds = 2);

}  // namespace ringlimit::testing

#endif  // RINGLIMIT_TESTS_SUPPORT_NETNS_H_
