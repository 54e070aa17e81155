#include "node/server/request_head.h"

#include <algorithm>
#include <array>
#include <boost/beast/core/string.hpp>
#include <cstdint>
#include <cstring>

namespace ringlimit::node {
namespace {

namespace http = boost::beast::http;

// RFC 9110 5.6.2: tchar, the characters of a method or a field name.
constexpr std::array<bool, 256> MakeTokenTable() {
  std::array<bool, 256> table{};
  for (int c = '0'; c <= '9'; ++c) table[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) table[c] = true;
  for (int c = 'a'; c <= 'z'; ++c) table[c] = true;
  for (char c : std::string_view("!#$%&'*+-.^_`|~")) table[static_cast<unsigned char>(c)] = true;
  return table;
}
constexpr std::array<bool, 256> kToken = MakeTokenTable();

bool IsToken(char c) { return kToken[static_cast<unsigned char>(c)]; }
// A visible ASCII character (what a target is made of here).
bool IsVisible(char c) { return c > 0x20 && c < 0x7f; }
// Skips the visible ASCII characters from `p` (at most up to `end`), eight at a time while it can.
const char* SkipVisible(const char* p, const char* end) {
  constexpr uint64_t kOnes = 0x0101010101010101;
  constexpr uint64_t kHighs = 0x8080808080808080;
  while (end - p >= 8) {
    uint64_t w;
    std::memcpy(&w, p, sizeof w);
    // A byte below 0x21, or above 0x7e (0x7f, or its high bit set): the classic "has less" / "has more"
    // word tests (exact as to whether there is one; the byte loop below finds it).
    const uint64_t below = (w - 0x21 * kOnes) & ~w & kHighs;
    const uint64_t above = ((w + kOnes) | w) & kHighs;
    if ((below | above) != 0) break;
    p += 8;
  }
  while (p < end && IsVisible(*p)) ++p;
  return p;
}
// A character of a field value here: visible ASCII, space or tab.
bool IsValueChar(char c) { return (c >= 0x20 && c < 0x7f) || c == '\t'; }

// The fields that frame a body or decide the connection's fate: left to Beast's parser.
bool IsFramingField(std::string_view name) {
  using boost::beast::iequals;
  switch (name.size()) {
    case 7:
      return iequals(name, "Upgrade");
    case 10:
      return iequals(name, "Connection");
    case 14:
      return iequals(name, "Content-Length");
    case 16:
      return iequals(name, "Proxy-Connection");
    case 17:
      return iequals(name, "Transfer-Encoding");
    default:
      return false;
  }
}

}  // namespace

std::optional<size_t> ParseSimpleRequestHead(std::string_view bytes, size_t max_head_bytes,
                                             HttpRequest& request) {
  // A head of max_head_bytes or more is Beast's to refuse (431).
  const char* const begin = bytes.data();
  const char* const end = begin + std::min(bytes.size(), max_head_bytes == 0 ? 0 : max_head_bytes - 1);
  const char* p = begin;

  // The request line.
  const char* const method = p;
  while (p < end && IsToken(*p)) ++p;
  if (p == method || p == end || *p != ' ') return std::nullopt;
  const http::verb verb = http::string_to_verb(std::string_view(method, static_cast<size_t>(p - method)));
  if (verb == http::verb::unknown) return std::nullopt;
  const char* const target = ++p;
  p = SkipVisible(p, end);
  if (p == target) return std::nullopt;
  const std::string_view target_view(target, static_cast<size_t>(p - target));
  constexpr std::string_view kVersion = " HTTP/1.1\r\n";
  if (static_cast<size_t>(end - p) < kVersion.size() || std::string_view(p, kVersion.size()) != kVersion) {
    return std::nullopt;
  }
  p += kVersion.size();
  request.method(verb);
  request.target(target_view);
  request.version(11);

  // The fields, up to the empty line.
  for (;;) {
    if (end - p < 2) return std::nullopt;
    if (*p == '\r') {
      if (p[1] != '\n') return std::nullopt;
      return static_cast<size_t>(p + 2 - begin);
    }
    const char* const name = p;
    while (p < end && IsToken(*p)) ++p;
    if (p == name || p == end || *p != ':') return std::nullopt;
    const std::string_view name_view(name, static_cast<size_t>(p - name));
    if (IsFramingField(name_view)) return std::nullopt;
    ++p;
    while (p < end && (*p == ' ' || *p == '\t')) ++p;
    const char* const value = p;
    while (p < end && IsValueChar(*p)) ++p;
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n') return std::nullopt;
    const char* value_end = p;
    while (value_end > value && (value_end[-1] == ' ' || value_end[-1] == '\t')) --value_end;
    request.insert(name_view, std::string_view(value, static_cast<size_t>(value_end - value)));
    p += 2;
  }
}

}  // namespace ringlimit::node
