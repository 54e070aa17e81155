#include "replication/update_wire.h"

#include "ring/token.h"
#include "storage/proto_append.h"
#include "storage/state_codec.h"

namespace ringlimit::replication {

// Fields in number order, scalars and strings only when not empty: what Protobuf writes for proto3.
void AppendStateUpdate(std::string_view entity, bool erased, std::span<const storage::StoredState> states,
                       std::string& out) {
  namespace pa = storage::proto_append;
  if (!entity.empty()) pa::Bytes(out, 1, entity);  // key
  if (const uint64_t token = ring::RingToken(entity); token != 0) pa::Fixed64(out, 2, token);
  // Each NamedState { name = 1; state = 2 (always set) }, built in scratch kept for its capacity.
  thread_local std::string state_bytes;
  thread_local std::string named;
  for (const storage::StoredState& s : states) {
    state_bytes.clear();
    storage::AppendStateMessage(s, 0, state_bytes);  // no expiry on the wire (ToNamedState)
    named.clear();
    if (!s.name.empty()) pa::Bytes(named, 1, s.name);
    pa::Bytes(named, 2, state_bytes);
    pa::Bytes(out, 3, named);
  }
  if (erased) {
    pa::Tag(out, 4, pa::kVarint);
    pa::Varint(out, 1);
  }
}

}  // namespace ringlimit::replication
