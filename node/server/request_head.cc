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

std::optional<SimpleRequestHead> ScanSimpleRequestHead(std::string_view bytes, size_t max_head_bytes) {
  // A head of max_head_bytes or more is Beast's to refuse (431).
  const char* const begin = bytes.data();
  const char* const end = begin + std::min(bytes.size(), max_head_bytes == 0 ? 0 : max_head_bytes - 1);
  const char* p = begin;
  SimpleRequestHead out;

  // The request line.
  const char* const method = p;
  while (p < end && IsToken(*p)) ++p;
  if (p == method || p == end || *p != ' ') return std::nullopt;
  out.head.method = http::string_to_verb(std::string_view(method, static_cast<size_t>(p - method)));
  if (out.head.method == http::verb::unknown) return std::nullopt;
  const char* const target = ++p;
  p = SkipVisible(p, end);
  if (p == target) return std::nullopt;
  out.head.target = std::string_view(target, static_cast<size_t>(p - target));
  constexpr std::string_view kVersion = " HTTP/1.1\r\n";
  if (static_cast<size_t>(end - p) < kVersion.size() || std::string_view(p, kVersion.size()) != kVersion) {
    return std::nullopt;
  }
  p += kVersion.size();

  // The fields, up to the empty line.
  const char* const fields = p;
  for (;;) {
    if (end - p < 2) return std::nullopt;
    if (*p == '\r') {
      if (p[1] != '\n') return std::nullopt;
      out.head.fields = std::string_view(fields, static_cast<size_t>(p - fields));
      out.size = static_cast<size_t>(p + 2 - begin);
      return out;
    }
    const char* const name = p;
    while (p < end && IsToken(*p)) ++p;
    if (p == name || p == end || *p != ':') return std::nullopt;
    if (IsFramingField(std::string_view(name, static_cast<size_t>(p - name)))) return std::nullopt;
    ++p;
    while (p < end && IsValueChar(*p)) ++p;
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n') return std::nullopt;
    p += 2;
  }
}

void ToHttpRequest(const RequestHead& head, HttpRequest& request) {
  request.method(head.method);
  request.target(head.target);
  request.version(11);
  head.ForEachField([&](std::string_view name, std::string_view value) { request.insert(name, value); });
}

std::optional<size_t> ParseSimpleRequestHead(std::string_view bytes, size_t max_head_bytes,
                                             HttpRequest& request) {
  std::optional<SimpleRequestHead> scanned = ScanSimpleRequestHead(bytes, max_head_bytes);
  if (!scanned) return std::nullopt;
  ToHttpRequest(scanned->head, request);
  return scanned->size;
}

}  // namespace ringlimit::node
