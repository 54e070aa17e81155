// Appending Protobuf wire-format fields to a std::string, for the few hot paths that write a message's
// bytes without building the message (storage::AppendStateMessage, replication::AppendStateUpdate). The
// encodings are Protobuf's own (CodedOutputStream's static writers); these only append.
//
// Thread safety: pure functions.
#ifndef RINGLIMIT_STORAGE_PROTO_APPEND_H_
#define RINGLIMIT_STORAGE_PROTO_APPEND_H_

#include <google/protobuf/io/coded_stream.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace ringlimit::storage::proto_append {

inline constexpr uint32_t kVarint = 0;
inline constexpr uint32_t kFixed64 = 1;
inline constexpr uint32_t kLengthDelimited = 2;

inline void Varint(std::string& out, uint64_t v) {
  uint8_t buffer[10];
  const uint8_t* end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(v, buffer);
  out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(end - buffer));
}

// The bytes Varint(v) appends.
inline size_t VarintSize(uint64_t v) { return google::protobuf::io::CodedOutputStream::VarintSize64(v); }

inline void Tag(std::string& out, uint32_t field, uint32_t wire_type) {
  Varint(out, (field << 3) | wire_type);
}

inline void Fixed64(std::string& out, uint32_t field, uint64_t v) {
  Tag(out, field, kFixed64);
  uint8_t buffer[8];
  google::protobuf::io::CodedOutputStream::WriteLittleEndian64ToArray(v, buffer);
  out.append(reinterpret_cast<const char*>(buffer), sizeof buffer);
}

inline void Bytes(std::string& out, uint32_t field, std::string_view bytes) {
  Tag(out, field, kLengthDelimited);
  Varint(out, bytes.size());
  out.append(bytes);
}

}  // namespace ringlimit::storage::proto_append

#endif  // RINGLIMIT_STORAGE_PROTO_APPEND_H_
