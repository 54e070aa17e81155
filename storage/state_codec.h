// The RocksDB value of a state: a ringlimit.state.StoredState Protobuf message (proto/state.proto).
#ifndef RINGLIMIT_STORAGE_STATE_CODEC_H_
#define RINGLIMIT_STORAGE_STATE_CODEC_H_

#include <optional>
#include <string>
#include <string_view>

#include "limiter/limiter.h"
#include "storage/state_store.h"

namespace ringlimit::storage {

// Serialises `state` (its name is in the row key, not in the value) with its expiry (Unix ns).
[[nodiscard]] std::string EncodeStateValue(const StoredState& state, limiter::TimeNs expiry);

// Parses a value; `name` comes from the row key. nullopt when the bytes are not a valid value.
[[nodiscard]] std::optional<StoredState> DecodeStateValue(std::string_view name, std::string_view value);

// Only the expiry of a value (for the compaction filter); nullopt when unparseable.
[[nodiscard]] std::optional<limiter::TimeNs> DecodeExpiry(std::string_view value);

}  // namespace ringlimit::storage

#endif  // RINGLIMIT_STORAGE_STATE_CODEC_H_
