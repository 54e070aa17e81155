// The ring token of an entity key: the 64-bit hash that places the entity on the consistent-hash ring.
//
// One definition for the whole system: the ring (ownership), the memory tier (sharding) and the RocksDB
// key layout (8-byte big-endian token prefix, so a ring arc is a contiguous key range) must agree on it.
// XXH3-64 with seed 0: fast on short keys, well distributed, stable across versions and platforms.
#ifndef RINGLIMIT_RING_TOKEN_H_
#define RINGLIMIT_RING_TOKEN_H_

#include <xxhash.h>

#include <cstdint>
#include <string_view>

namespace ringlimit::ring {

using Token = uint64_t;

inline Token RingToken(std::string_view entity_key) {
  return XXH3_64bits(entity_key.data(), entity_key.size());
}

}  // namespace ringlimit::ring

#endif  // RINGLIMIT_RING_TOKEN_H_
