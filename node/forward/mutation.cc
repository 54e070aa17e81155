#include "node/forward/mutation.h"

#ifdef RINGLIMIT_MUTATIONS
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace ringlimit::cluster::mutation {
namespace {

Mutation Parse() {
  const char* name = std::getenv("RINGLIMIT_MUTATION");
  if (name == nullptr || *name == '\0') return Mutation::kNone;
  const std::string_view n(name);
  if (n == "forward_503") return Mutation::kForward503;
  if (n == "skip_pause_fence") return Mutation::kSkipPauseFence;
  if (n == "relay_decides") return Mutation::kRelayDecides;
  std::fprintf(stderr, "RINGLIMIT_MUTATION=%s: unknown (forward_503, skip_pause_fence, relay_decides)\n",
               name);
  std::abort();
}

}  // namespace

Mutation Active() {
  static const Mutation active = Parse();
  return active;
}

}  // namespace ringlimit::cluster::mutation
#endif
