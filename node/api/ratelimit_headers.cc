#include "node/api/ratelimit_headers.h"

#include <algorithm>
#include <charconv>

namespace ringlimit::node {

namespace {

void AppendInt(std::string* out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, end);
}

// A Structured Field string (RFC 8941): printable ASCII, with " and \ escaped.
void AppendSfString(std::string* out, std::string_view s) {
  out->push_back('"');
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
  if (!policy_.empty()) {
    policy_.append(", ");
    state_.append(", ");
  }
  AppendSfString(&policy_, name);
  policy_.append(";q=");
  AppendInt(&policy_, quota);
  policy_.append(";w=");
  AppendInt(&policy_, std::max<int64_t>(1, window_seconds));
  AppendSfString(&state_, name);
  state_.append(";r=");
  AppendInt(&state_, remaining);
  state_.append(";t=");
  AppendInt(&state_, std::max<int64_t>(0, reset_seconds));
}

}  // namespace ringlimit::node
