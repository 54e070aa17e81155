#include "node/service/json_writer.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace ringlimit::node {

void JsonWriter::Separate() {
  if (!first_) out_->push_back(',');
  first_ = false;
}

void JsonWriter::BeginObject() {
  Separate();
  out_->push_back('{');
  first_ = true;
}

void JsonWriter::EndObject() {
  out_->push_back('}');
  first_ = false;
}

void JsonWriter::BeginArray() {
  Separate();
  out_->push_back('[');
  first_ = true;
}

void JsonWriter::EndArray() {
  out_->push_back(']');
  first_ = false;
}

void JsonWriter::Key(std::string_view key) {
  Separate();
  out_->push_back('"');
  out_->append(key);
  out_->append("\":", 2);
  first_ = true;  // the value that follows takes no comma
}

void JsonWriter::String(std::string_view value) {
  Separate();
  AppendJsonString(out_, value);
}

void JsonWriter::Int(int64_t value) {
  Separate();
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out_->append(buf, end);
}

void JsonWriter::Uint(uint64_t value) {
  Separate();
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out_->append(buf, end);
}

void JsonWriter::Double(double value) {
  Separate();
  if (!std::isfinite(value)) {
    out_->append("null");
    return;
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  out_->append(buf, end);
}

void JsonWriter::Bool(bool value) {
  Separate();
  out_->append(value ? "true" : "false");
}

namespace {

inline bool NeedsEscape(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u < 0x20 || c == '"' || c == '\\';
}

}  // namespace

void AppendJsonString(std::string* out, std::string_view value) {
  static constexpr char kHex[] = "0123456789abcdef";
  size_t i = 0;
  while (i < value.size() && !NeedsEscape(value[i])) ++i;
  out->push_back('"');
  out->append(value.data(), i);
  if (i == value.size()) {  // the common case: nothing to escape
    out->push_back('"');
    return;
  }
  for (; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (!NeedsEscape(value[i])) {
      out->push_back(value[i]);
      continue;
    }
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default: {
        const char esc[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
        out->append(esc, sizeof esc);
      }
    }
  }
  out->push_back('"');
}

void Appender::Grow(size_t n) {
  const size_t at = static_cast<size_t>(p_ - out_.data());
  out_.resize(std::max(out_.size() * 2, at + n + 64));
  p_ = out_.data() + at;
  end_ = out_.data() + out_.size();
}

void Appender::JsonString(std::string_view value) {
  size_t i = 0;
  while (i < value.size() && !NeedsEscape(value[i])) ++i;
  if (i == value.size()) {  // the common case: nothing to escape
    Room(value.size() + 2);
    *p_++ = '"';
    if (!value.empty()) std::memcpy(p_, value.data(), value.size());
    p_ += value.size();
    *p_++ = '"';
    return;
  }
  // Rare: escaped the string's way, then copied in.
  std::string escaped;
  AppendJsonString(&escaped, value);
  Put(escaped);
}

namespace {

// The length of the valid UTF-8 sequence at p (1..4), or 0 when the bytes there are not one.
size_t Utf8SequenceLength(const unsigned char* p, const unsigned char* end) {
  const unsigned char c = *p;
  if (c < 0x80) return 1;
  int extra;
  uint32_t cp;
  if ((c & 0xE0) == 0xC0) {
    extra = 1;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    extra = 2;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    extra = 3;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (end - p <= extra) return 0;
  for (int i = 1; i <= extra; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  static constexpr uint32_t kMinForLength[] = {0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return static_cast<size_t>(extra) + 1;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const size_t n = Utf8SequenceLength(p, end);
    if (n == 0) return false;
    p += n;
  }
  return true;
}

std::string ToValidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto* begin = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = begin + s.size();
  for (const auto* p = begin; p < end;) {
    const size_t n = Utf8SequenceLength(p, end);
    if (n == 0) {
      out.append("\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER
      ++p;
    } else {
      out.append(reinterpret_cast<const char*>(p), n);
      p += n;
    }
  }
  return out;
}

}  // namespace ringlimit::node
