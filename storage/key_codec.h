// The RocksDB row key of a state: an 8-byte big-endian ring token, then the entity key prefixed with its
// length as a LEB128 varint (1 byte below 128), then the limit name (to the end of the key).
//
//   [token: 8 bytes BE][varint32 len(entity)][entity bytes][name bytes]
//
// Big-endian tokens make a ring arc [first, last] one contiguous key range (handoff, replication), and
// all rows of one entity share the prefix EntityPrefix(token, entity). The length prefix keeps the
// layout unambiguous for any bytes in entity and name (no separator to escape).
#ifndef RINGLIMIT_STORAGE_KEY_CODEC_H_
#define RINGLIMIT_STORAGE_KEY_CODEC_H_

#include <optional>
#include <string>
#include <string_view>

#include "ring/token.h"

namespace ringlimit::storage {

// The 8 big-endian bytes of `token` (the first and last keys of a token range start with these).
[[nodiscard]] std::string TokenPrefix(ring::Token token);

// The prefix shared by every row of `entity`.
[[nodiscard]] std::string EntityPrefix(ring::Token token, std::string_view entity);

[[nodiscard]] std::string EncodeRowKey(ring::Token token, std::string_view entity, std::string_view name);

struct RowKey {
  ring::Token token = 0;
  std::string_view entity;  // points into the decoded key
  std::string_view name;    // points into the decoded key
};

// nullopt when `key` is not a well-formed row key.
[[nodiscard]] std::optional<RowKey> DecodeRowKey(std::string_view key);

}  // namespace ringlimit::storage

#endif  // RINGLIMIT_STORAGE_KEY_CODEC_H_
