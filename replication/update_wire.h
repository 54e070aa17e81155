// A replicated key's StateUpdate (proto/peer.proto) written straight into its batch's bytes: the sender's
// hot path, one call per changed key per replication pass. Protobuf's own route -- FillStateUpdate into a
// message, then SerializeToString -- cost ~1.3 k instructions more per key (bench/replication/
// update_wire_bench). The bytes are the same (replicator_test.cc asserts it), so nothing changes on the
// wire: receivers of any version parse them with Protobuf as before.
//
// Thread safety: pure functions (scratch buffers are thread-local).
#ifndef RINGLIMIT_REPLICATION_UPDATE_WIRE_H_
#define RINGLIMIT_REPLICATION_UPDATE_WIRE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "storage/state_store.h"

namespace ringlimit::replication {

// Appends the bytes of a peer.StateUpdate for `entity` with `states` -- what FillStateUpdate's message
// with `erased` set serializes to, byte for byte.
void AppendStateUpdate(std::string_view entity, bool erased, std::span<const storage::StoredState> states,
                       std::string& out);

// The receiver's half: a peer.StateUpdateBatch read in place, its states decoded (storage::ReadStateValue).
struct StateUpdateView {
  std::string_view key;  // into the payload
  bool erased = false;
  uint32_t first = 0;  // its states: BatchView::states[first, first + count)
  uint32_t count = 0;
};
struct BatchView {
  bool want_newer = false;
  uint64_t contributor = 0;
  std::vector<StateUpdateView> updates;
  // The batch's states: the first `state_count` entries. Those past it are kept with their storage, so a
  // view read batch after batch decodes a state into a slot that already has its vectors (no allocation
  // for a state that fits).
  std::vector<storage::StoredState> states;
  // valid[i] false: a state message without a valid state (an invalid spec, bad merged bytes), ignored as
  // Protobuf's route ignores it.
  std::vector<uint8_t> valid;
  size_t state_count = 0;

  // The i-th state of the batch (i < state_count), or nullptr when it is not valid.
  [[nodiscard]] const storage::StoredState* State(size_t i) const { return valid[i] ? &states[i] : nullptr; }
};

// Reads `payload` into `out` (emptied first; its vectors keep their storage) -- what Protobuf's parser
// would read, without a message or a copy of the bytes (the receiver's hot path). false: bytes this
// reader leaves to Protobuf's parser (malformed input, a group, a string that is not plain ASCII, a
// NamedState whose state comes in two parts), which then decides (compared on every input by
// fuzz/peer_message_fuzz.cc).
[[nodiscard]] bool ReadStateUpdateBatch(std::string_view payload, BatchView& out);

}  // namespace ringlimit::replication

#endif  // RINGLIMIT_REPLICATION_UPDATE_WIRE_H_
