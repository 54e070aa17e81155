#include "node/service/check_service.h"

#include <chrono>
#include <random>

#include "storage/state_codec.h"

namespace ringlimit::node {

limiter::ContributorId DrawContributorId() {
  std::random_device device;
  for (;;) {
    const limiter::ContributorId id = (uint64_t{device()} << 32) | device();
    if (id > storage::kLegacyContributor) return id;
  }
}

Clock SystemClock() {
  return [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
}

}  // namespace ringlimit::node
