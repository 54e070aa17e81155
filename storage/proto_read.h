// Reading Protobuf wire-format fields in place, for the few hot paths that decode a message's bytes without
// building the message (storage::DecodeStateValue, replication's StateUpdateBatch receiver): the reading
// half of proto_append.h: varints, fixed64 and length-delimited fields of Protobuf's wire format, with
// views into the input instead of copies.
//
// A reader answers only for well-formed input it fully understands; anything else -- a group, a field
// number 0, a field with an unexpected wire type, truncated bytes -- is for the caller to hand to
// Protobuf's own parser, whose verdict stands. So a fast decoder built on it never accepts what Protobuf
// would refuse, nor reads a value differently (fuzz/stored_state_fuzz.cc and fuzz/state_batch_fuzz.cc
// compare the two on every input).
//
// Thread safety: a reader is used by one thread; it borrows the bytes it reads.
#ifndef RINGLIMIT_STORAGE_PROTO_READ_H_
#define RINGLIMIT_STORAGE_PROTO_READ_H_

#include <climits>
#include <cstdint>
#include <string_view>

namespace ringlimit::storage::proto_read {

inline constexpr uint32_t kVarint = 0;
inline constexpr uint32_t kFixed64 = 1;
inline constexpr uint32_t kLengthDelimited = 2;
inline constexpr uint32_t kFixed32 = 5;

class Reader {
 public:
  explicit Reader(std::string_view bytes)
      : p_(reinterpret_cast<const uint8_t*>(bytes.data())), end_(p_ + bytes.size()) {}

  // Whether the input fits in one parse (Protobuf's own limit: an int of bytes).
  [[nodiscard]] static bool Fits(std::string_view bytes) {
    return bytes.size() < static_cast<size_t>(INT_MAX);
  }

  // Moves to the next field. false at the end of the input and on a bad tag -- `done()` tells which.
  bool Next() {
    at_end_ = p_ == end_;
    uint64_t tag = 0;
    if (at_end_ || !ReadVarint(tag, 5) || tag > UINT32_MAX || (tag >> 3) == 0) {
      tag_ = 0;
      return false;
    }
    tag_ = static_cast<uint32_t>(tag);
    return true;
  }
  // The input was read to its end with no malformed tag.
  [[nodiscard]] bool done() const { return tag_ == 0 && at_end_; }

  [[nodiscard]] uint32_t field() const { return tag_ >> 3; }
  [[nodiscard]] uint32_t wire_type() const { return tag_ & 7; }

  // Each reads the current field's value; false when its wire type is not the one asked for or the bytes
  // are malformed.
  bool Varint(uint64_t& v) { return wire_type() == kVarint && ReadVarint(v, 10); }
  bool Fixed64(uint64_t& v) {
    if (wire_type() != kFixed64 || end_ - p_ < 8) return false;
    v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p_[i];  // little-endian
    p_ += 8;
    return true;
  }
  bool Bytes(std::string_view& v) {
    uint64_t length = 0;
    if (wire_type() != kLengthDelimited || !ReadVarint(length, 5) ||
        length > static_cast<uint64_t>(end_ - p_)) {
      return false;
    }
    v = std::string_view(reinterpret_cast<const char*>(p_), length);
    p_ += length;
    return true;
  }
  // Skips a field this decoder does not know; false for groups, which are left to Protobuf.
  bool Skip() {
    uint64_t v = 0;
    std::string_view bytes;
    switch (wire_type()) {
      case kVarint:
        return Varint(v);
      case kFixed64:
        return Fixed64(v);
      case kLengthDelimited:
        return Bytes(bytes);
      case kFixed32:
        if (end_ - p_ < 4) return false;
        p_ += 4;
        return true;
      default:
        return false;
    }
  }

 private:
  // A varint of at most `most` bytes (10: any 64-bit value; 5: a tag or a length, as Protobuf reads them
  // from well-formed input). Longer ones, and input ending inside one, are refused.
  bool ReadVarint(uint64_t& v, int most) {
    v = 0;
    for (int i = 0; i < most && p_ != end_; ++i) {
      const uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7f) << (7 * i);
      if (b < 0x80) return i < 9 || b <= 1;  // a tenth byte carries only the 64th bit
    }
    return false;
  }

  const uint8_t* p_;
  const uint8_t* end_;
  uint32_t tag_ = 0;
  bool at_end_ = false;
};

// A string field holds only what Protobuf accepts without checking it: ASCII (a proto3 string must be
// UTF-8, which Protobuf's parser checks; other bytes go to it).
[[nodiscard]] inline bool PlainAscii(std::string_view s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace ringlimit::storage::proto_read

#endif  // RINGLIMIT_STORAGE_PROTO_READ_H_
