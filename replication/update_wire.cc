#include "replication/update_wire.h"

#include "ring/token.h"
#include "storage/proto_append.h"
#include "storage/proto_read.h"
#include "storage/state_codec.h"

namespace ringlimit::replication {

// Fields in number order, scalars and strings only when not empty: what Protobuf writes for proto3.
void AppendStateUpdate(std::string_view entity, bool erased, std::span<const storage::StoredState> states,
                       std::string& out) {
  namespace pa = storage::proto_append;
  // Grown once: a state of one contributor is ~100 bytes, its spec and name included.
  out.reserve(out.size() + entity.size() + 16 + states.size() * 160);
  if (!entity.empty()) pa::Bytes(out, 1, entity);  // key
  if (const uint64_t token = ring::RingToken(entity); token != 0) pa::Fixed64(out, 2, token);
  // Each NamedState { name = 1; state = 2 (always set) }: its state built in scratch kept for its
  // capacity, then the NamedState written straight into `out` (its size is known from its two fields).
  thread_local std::string state_bytes;
  for (const storage::StoredState& s : states) {
    state_bytes.clear();
    storage::AppendStateMessage(s, 0, state_bytes);  // no expiry on the wire (ToNamedState)
    const size_t name_field = s.name.empty() ? 0 : 1 + pa::VarintSize(s.name.size()) + s.name.size();
    const size_t state_field = 1 + pa::VarintSize(state_bytes.size()) + state_bytes.size();
    pa::Tag(out, 3, pa::kLengthDelimited);
    pa::Varint(out, name_field + state_field);
    if (!s.name.empty()) pa::Bytes(out, 1, s.name);
    pa::Bytes(out, 2, state_bytes);
  }
  if (erased) {
    pa::Tag(out, 4, pa::kVarint);
    pa::Varint(out, 1);
  }
}

namespace {

namespace pr = storage::proto_read;

bool ReadString(pr::Reader& r, std::string_view& v) { return r.Bytes(v) && pr::PlainAscii(v); }

bool ReadBool(pr::Reader& r, bool& v) {
  uint64_t n = 0;
  if (!r.Varint(n)) return false;
  v = n != 0;
  return true;
}

// peer.NamedState { name = 1; state = 2 }, its state decoded into `batch`.
bool ReadNamedState(std::string_view bytes, BatchView& batch) {
  pr::Reader r(bytes);
  std::string_view name;
  std::string_view state;
  bool state_seen = false;
  while (r.Next()) {
    switch (r.field()) {
      case 1:
        if (!ReadString(r, name)) return false;
        break;
      case 2:  // a message given twice is merged by Protobuf: left to it
        if (state_seen || !r.Bytes(state)) return false;
        state_seen = true;
        break;
      default:
        if (!r.Skip()) return false;
    }
  }
  if (!r.done()) return false;
  if (batch.state_count == batch.states.size()) {
    batch.states.emplace_back();
    batch.valid.push_back(0);
  }
  const size_t at = batch.state_count;
  const Status read = storage::ReadStateValueInto(name, state, batch.states[at]);
  if (!read.ok() && read.IsCorruption()) return false;  // Protobuf refuses the whole batch
  batch.valid[at] = read.ok() ? 1 : 0;
  ++batch.state_count;
  return true;
}

// peer.StateUpdate { key = 1; token = 2; states = 3; erased = 4 }.
bool ReadUpdate(std::string_view bytes, BatchView& batch) {
  pr::Reader r(bytes);
  StateUpdateView update;
  update.first = static_cast<uint32_t>(batch.state_count);
  uint64_t token = 0;
  while (r.Next()) {
    switch (r.field()) {
      case 1:
        if (!ReadString(r, update.key)) return false;
        break;
      case 2:
        if (!r.Fixed64(token)) return false;  // receivers hash the key themselves
        break;
      case 3: {
        std::string_view named;
        if (!r.Bytes(named) || !ReadNamedState(named, batch)) return false;
        break;
      }
      case 4:
        if (!ReadBool(r, update.erased)) return false;
        break;
      default:
        if (!r.Skip()) return false;
    }
  }
  if (!r.done()) return false;
  update.count = static_cast<uint32_t>(batch.state_count) - update.first;
  batch.updates.push_back(update);
  return true;
}

}  // namespace

// peer.StateUpdateBatch { from = 1; ring_fingerprint = 2; updates = 3; handoff = 4; relay_to = 5;
// want_newer = 6; contributor = 7 }.
bool ReadStateUpdateBatch(std::string_view payload, BatchView& out) {
  out.want_newer = false;
  out.contributor = 0;
  out.updates.clear();
  out.state_count = 0;
  if (!pr::Reader::Fits(payload)) return false;
  pr::Reader r(payload);
  while (r.Next()) {
    uint64_t v = 0;
    bool flag = false;
    std::string_view bytes;
    switch (r.field()) {
      case 1:
      case 5:
        if (!ReadString(r, bytes)) return false;
        break;
      case 2:
        if (!r.Varint(v)) return false;
        break;
      case 3:
        if (!r.Bytes(bytes) || !ReadUpdate(bytes, out)) return false;
        break;
      case 4:
        if (!ReadBool(r, flag)) return false;
        break;
      case 6:
        if (!ReadBool(r, out.want_newer)) return false;
        break;
      case 7:
        if (!r.Fixed64(out.contributor)) return false;
        break;
      default:
        if (!r.Skip()) return false;
    }
  }
  return r.done();
}

}  // namespace ringlimit::replication
