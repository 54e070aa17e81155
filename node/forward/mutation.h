// Mutations: deliberate bugs that prove the checkers can fail (issue 32). A build configured with
// -DRINGLIMIT_MUTATIONS=ON compiles them into the cluster's planners and the Forwarder; the environment
// variable RINGLIMIT_MUTATION then picks one for the process (the simulator, or a ringlimitd a test starts):
//
//   forward_503       every check the Forwarder would send to another node is answered CHECK_UNAVAILABLE
//                     (a client sees 503): a cluster that refuses what it should answer
//   skip_pause_fence  a node that was just paused decides at once (Cluster::Paused is always false)
//   relay_decides     a relay decides the check itself instead of passing it on to the decider
//
// ctest runs the simulator (and a gray scenario) against each in that build and expects them to fail
// (tests/sim/CMakeLists.txt, scripts/test). Every other build compiles them out: Active() is constant
// kNone and the branches vanish.
//
// Thread safety: Active() may be called from any thread (read once, then constant).
#ifndef RINGLIMIT_NODE_FORWARD_MUTATION_H_
#define RINGLIMIT_NODE_FORWARD_MUTATION_H_

#include <cstdint>

namespace ringlimit::cluster::mutation {

enum class Mutation : uint8_t { kNone = 0, kForward503, kSkipPauseFence, kRelayDecides };

#ifdef RINGLIMIT_MUTATIONS
// The mutation RINGLIMIT_MUTATION names (kNone when unset); a name it does not know aborts the process.
[[nodiscard]] Mutation Active();
#else
[[nodiscard]] constexpr Mutation Active() { return Mutation::kNone; }
#endif

[[nodiscard]] inline bool Is(Mutation m) { return Active() == m; }

}  // namespace ringlimit::cluster::mutation

#endif  // RINGLIMIT_NODE_FORWARD_MUTATION_H_
