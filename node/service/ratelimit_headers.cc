#include "node/service/ratelimit_headers.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace ringlimit::node {

namespace {

// Copies `s` to `p`; returns the end of the copy.
char* Put(char* p, std::string_view s) {
  if (!s.empty()) std::memcpy(p, s.data(), s.size());  // (an empty view may hold a null pointer)
  return p + s.size();
}

char* PutInt(char* p, int64_t v) { return std::to_chars(p, p + 20, v).ptr; }

// A Structured Field string (RFC 8941): printable ASCII, with " and \ escaped (others as '?'). Writes at
// most 2 * s.size() + 2 bytes.
char* PutSfString(char* p, std::string_view s) {
  *p++ = '"';
  const bool plain =
      std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\'; });
  if (plain) {  // the usual name: copied at once
    p = Put(p, s);
  } else {
    for (char c : s) {
      if (c == '"' || c == '\\') {
        *p++ = '\\';
        *p++ = c;
      } else {
        *p++ = c < 0x20 || c > 0x7e ? '?' : c;
      }
    }
  }
  *p++ = '"';
  return p;
}

// Appends one list member to `text`: `name;<a>=<x>;<b>=<y>`, after ", " unless it is the first.
void AppendMember(RateLimitHeaders::Text& text, bool first, std::string_view name, std::string_view a,
                  int64_t x, std::string_view b, int64_t y) {
  char* p = text.Room(2 + 2 * name.size() + 2 + a.size() + b.size() + 2 * 20);
  if (!first) p = Put(p, ", ");
  p = PutSfString(p, name);
  p = Put(p, a);
  p = PutInt(p, x);
  p = Put(p, b);
  p = PutInt(p, y);
  text.Commit(p);
}

}  // namespace

void RateLimitHeaders::Add(std::string_view name, int64_t quota, int64_t window_seconds, int64_t remaining,
                           int64_t reset_seconds) {
  const bool first = empty();
  AppendMember(policy_, first, name, ";q=", quota, ";w=", std::max<int64_t>(1, window_seconds));
  AppendMember(state_, first, name, ";r=", remaining, ";t=", std::max<int64_t>(0, reset_seconds));
}

}  // namespace ringlimit::node
