// A replicated key's StateUpdate (proto/peer.proto) written straight into its batch's bytes: the sender's
// hot path, one call per changed key per replication pass. Protobuf's own route -- FillStateUpdate into a
// message, then SerializeToString -- cost ~1.3 k instructions more per key (bench/replication/
// update_wire_bench). The bytes are the same (replicator_test.cc asserts it), so nothing changes on the
// wire: receivers of any version parse them with Protobuf as before.
//
// Thread safety: pure functions (scratch buffers are thread-local).
#ifndef RINGLIMIT_REPLICATION_UPDATE_WIRE_H_
#define RINGLIMIT_REPLICATION_UPDATE_WIRE_H_

#include <span>
#include <string>
#include <string_view>

#include "storage/state_store.h"

namespace ringlimit::replication {

// Appends the bytes of a peer.StateUpdate for `entity` with `states` -- what FillStateUpdate's message
// with `erased` set serializes to, byte for byte.
void AppendStateUpdate(std::string_view entity, bool erased, std::span<const storage::StoredState> states,
                       std::string& out);

}  // namespace ringlimit::replication

#endif  // RINGLIMIT_REPLICATION_UPDATE_WIRE_H_
