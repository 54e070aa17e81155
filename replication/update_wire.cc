#include "replication/update_wire.h"

#include <google/protobuf/io/coded_stream.h>

#include "ring/token.h"
#include "storage/state_codec.h"

namespace ringlimit::replication {
namespace {

using google::protobuf::io::CodedOutputStream;

constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;

void AppendVarint(std::string& out, uint64_t v) {
  uint8_t buffer[10];
  const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(v, buffer);
  out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(end - buffer));
}

void AppendBytesField(std::string& out, uint32_t field, std::string_view bytes) {
  AppendVarint(out, (field << 3) | kLengthDelimited);
  AppendVarint(out, bytes.size());
  out.append(bytes);
}

}  // namespace

// Fields in number order, scalars and strings only when not empty: what Protobuf writes for proto3.
void AppendStateUpdate(std::string_view entity, bool erased, std::span<const storage::StoredState> states,
                       std::string& out) {
  if (!entity.empty()) AppendBytesField(out, 1, entity);  // key
  if (const uint64_t token = ring::RingToken(entity); token != 0) {
    out.push_back(static_cast<char>((2 << 3) | kFixed64));
    uint8_t buffer[8];
    CodedOutputStream::WriteLittleEndian64ToArray(token, buffer);
    out.append(reinterpret_cast<const char*>(buffer), sizeof buffer);
  }
  // Each NamedState { name = 1; state = 2 (always set) }, built in scratch kept for its capacity.
  thread_local std::string state_bytes;
  thread_local std::string named;
  for (const storage::StoredState& s : states) {
    state_bytes.clear();
    storage::AppendStateMessage(s, 0, state_bytes);  // no expiry on the wire (ToNamedState)
    named.clear();
    if (!s.name.empty()) AppendBytesField(named, 1, s.name);
    AppendBytesField(named, 2, state_bytes);
    AppendBytesField(out, 3, named);
  }
  if (erased) {
    out.push_back(static_cast<char>((4 << 3) | kVarint));
    out.push_back(1);
  }
}

}  // namespace ringlimit::replication
