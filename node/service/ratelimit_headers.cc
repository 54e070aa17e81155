#include "node/service/ratelimit_headers.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace ringlimit::node {

namespace {

using Text = RateLimitHeaders::Text;

void Append(Text* out, std::string_view s) { out->Append(s); }

void AppendInt(Text* out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  Append(out, std::string_view(buf, static_cast<size_t>(end - buf)));
}

// A Structured Field string (RFC 8941): printable ASCII, with " and \ escaped.
void AppendSfString(Text* out, std::string_view s) {
  out->push_back('"');
  const bool plain =
      std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\'; });
  if (plain) {  // the usual name: copied at once
    Append(out, s);
    out->push_back('"');
    return;
  }
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (c < 0x20 || c > 0x7e) {
      out->push_back('?');
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

}  // namespace

void RateLimitHeaders::Add(std::string_view name, int64_t quota, int64_t window_seconds, int64_t remaining,
                           int64_t reset_seconds) {
  if (!empty()) {
    Append(&policy_, ", ");
    Append(&state_, ", ");
  }
  AppendSfString(&policy_, name);
  Append(&policy_, ";q=");
  AppendInt(&policy_, quota);
  Append(&policy_, ";w=");
  AppendInt(&policy_, std::max<int64_t>(1, window_seconds));
  AppendSfString(&state_, name);
  Append(&state_, ";r=");
  AppendInt(&state_, remaining);
  Append(&state_, ";t=");
  AppendInt(&state_, std::max<int64_t>(0, reset_seconds));
}

}  // namespace ringlimit::node
