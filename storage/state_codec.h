// The RocksDB value of a state: a ringlimit.state.StoredState Protobuf message (proto/state.proto). The spec
// inside it goes through limiter/spec_wire.h, like every other LimitSpec on the wire.
//
// Thread safety: pure functions.
#ifndef RINGLIMIT_STORAGE_STATE_CODEC_H_
#define RINGLIMIT_STORAGE_STATE_CODEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "limiter/limiter.h"
#include "storage/state_store.h"

namespace ringlimit::state {
class StoredState;
}  // namespace ringlimit::state

namespace ringlimit::storage {

// The contributor id of what a pre-merge row had recorded (no node incarnation draws it: ids drawn at
// random are checked against it).
inline constexpr uint64_t kLegacyContributor = 1;

// Serialises `state` (its name is in the row key, not in the value) with its expiry (Unix ns): the bytes
// of StateToProto's message, written by AppendStateMessage.
[[nodiscard]] std::string EncodeStateValue(const StoredState& state, limiter::TimeNs expiry);

// Parses a value; `name` comes from the row key. nullopt when the bytes are not a valid value. The bytes
// are read in place (storage/proto_read.h), with no message built -- the replication receiver's hot path:
// ~1.3 k instructions less per state than Protobuf's parser --, and anything unusual (a row from before
// mergeable states, malformed bytes) goes to DecodeStateValueByProtobuf, so the answer is always that one's
// (compared on every input by fuzz/stored_state_fuzz.cc).
[[nodiscard]] std::optional<StoredState> DecodeStateValue(std::string_view name, std::string_view value);
// The same, telling why not: Corruption when the bytes are no state::StoredState message at all (Protobuf's
// parser refuses them), InvalidArgument when they are one without a valid state.
[[nodiscard]] Result<StoredState> ReadStateValue(std::string_view name, std::string_view value);
// The same into `out`, whose vectors keep their storage (the replication receiver reuses one state per slot
// of its batch). On failure `out` holds an unspecified state.
[[nodiscard]] Status ReadStateValueInto(std::string_view name, std::string_view value, StoredState& out);
// The same through Protobuf's parser and StateFromProto.
[[nodiscard]] std::optional<StoredState> DecodeStateValueByProtobuf(std::string_view name,
                                                                    std::string_view value);

// Only the expiry of a value (for the compaction filter); nullopt when unparseable.
[[nodiscard]] std::optional<limiter::TimeNs> DecodeExpiry(std::string_view value);

// The same two conversions on the message itself, for a state that travels inside another message
// (peer.NamedState) without a detour through bytes. `*out` is overwritten.
void StateToProto(const StoredState& state, limiter::TimeNs expiry, state::StoredState* out);
// nullopt when `message` is not a valid state (bad merged bytes, wrong word count, unknown enum number,
// invalid spec). A row written before states were mergeable (words, no merged bytes) is read as
// limiter::FromPlain on behalf of kLegacyContributor.
[[nodiscard]] std::optional<StoredState> StateFromProto(std::string_view name,
                                                        const state::StoredState& message);

// Appends the bytes of state::StoredState as StateToProto(state, expiry) would serialize them, without
// building the message (the replication sender's hot path; equality asserted in state_codec_test.cc).
void AppendStateMessage(const StoredState& state, limiter::TimeNs expiry, std::string& out);

}  // namespace ringlimit::storage

#endif  // RINGLIMIT_STORAGE_STATE_CODEC_H_
