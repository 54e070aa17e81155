#include "storage/key_codec.h"

#include <cstdint>

namespace ringlimit::storage {

std::string TokenPrefix(ring::Token token) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(token & 0xff);
    token >>= 8;
  }
  return out;
}

std::string EntityPrefix(ring::Token token, std::string_view entity) {
  std::string out = TokenPrefix(token);
  auto len = static_cast<uint32_t>(entity.size());
  while (len >= 0x80) {
    out.push_back(static_cast<char>((len & 0x7f) | 0x80));
    len >>= 7;
  }
  out.push_back(static_cast<char>(len));
  out.append(entity);
  return out;
}

std::string EncodeRowKey(ring::Token token, std::string_view entity, std::string_view name) {
  std::string out = EntityPrefix(token, entity);
  out.append(name);
  return out;
}

std::optional<RowKey> DecodeRowKey(std::string_view key) {
  if (key.size() < 9) return std::nullopt;
  RowKey row;
  for (int i = 0; i < 8; ++i) row.token = (row.token << 8) | static_cast<uint8_t>(key[i]);
  size_t pos = 8;
  uint64_t len = 0;
  for (int shift = 0;; shift += 7) {
    if (pos >= key.size() || shift > 28) return std::nullopt;
    auto byte = static_cast<uint8_t>(key[pos++]);
    len |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) break;
  }
  if (len > key.size() - pos) return std::nullopt;
  row.entity = key.substr(pos, len);
  row.name = key.substr(pos + len);
  return row;
}

}  // namespace ringlimit::storage
