// JsonWriter: appends JSON to a std::string without building a DOM (the response hot path).
// The caller is responsible for well-formedness (commas are inserted automatically inside objects
// and arrays opened through the writer).
//
// Thread safety: a JsonWriter is used by one thread at a time.
#ifndef RINGLIMIT_NODE_SERVICE_JSON_WRITER_H_
#define RINGLIMIT_NODE_SERVICE_JSON_WRITER_H_

#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ringlimit::node {

class JsonWriter {
 public:
  // Appends to *out, which must outlive the writer.
  explicit JsonWriter(std::string* out) : out_(out) {}

  void BeginObject();
  void EndObject();
  void BeginArray();
  void EndArray();
  // Writes "key": and leaves the writer expecting a value. REQUIRES: `key` needs no JSON escaping
  // (keys are the schema's field names).
  void Key(std::string_view key);

  void String(std::string_view value);
  void Int(int64_t value);
  void Uint(uint64_t value);
  void Double(double value);
  void Bool(bool value);

  // Key + value shortcuts.
  void Field(std::string_view key, std::string_view value) { Key(key), String(value); }
  void Field(std::string_view key, const char* value) { Key(key), String(value); }
  void FieldInt(std::string_view key, int64_t value) { Key(key), Int(value); }
  void FieldUint(std::string_view key, uint64_t value) { Key(key), Uint(value); }
  void FieldDouble(std::string_view key, double value) { Key(key), Double(value); }
  void FieldBool(std::string_view key, bool value) { Key(key), Bool(value); }

 private:
  void Separate();

  std::string* out_;
  bool first_ = true;  // no element written yet in the innermost object/array
};

// Appends `value` as a quoted JSON string (escaping quotes, backslashes and control characters).
void AppendJsonString(std::string* out, std::string_view value);

// Appends to a std::string through a pointer into room made up front: a run of small pieces (the literal
// fragments, numbers and strings of a response) without the string's bookkeeping for each. Room runs out
// safely: a piece that does not fit grows the string first. The string holds exactly what was written once
// Close() is called (or the Appender goes); until then its tail is unspecified.
class Appender {
 public:
  // Appends to `out` (which must outlive the Appender), making room for `expect` bytes.
  Appender(std::string& out, size_t expect) : out_(out) {
    const size_t at = out.size();
    out.resize(at + expect);
    p_ = out.data() + at;
    end_ = out.data() + out.size();
  }
  ~Appender() { Close(); }
  Appender(const Appender&) = delete;
  Appender& operator=(const Appender&) = delete;

  void Put(std::string_view s) {
    Room(s.size());
    if (!s.empty()) std::memcpy(p_, s.data(), s.size());  // (an empty view may hold a null pointer)
    p_ += s.size();
  }
  void Put(char c) {
    Room(1);
    *p_++ = c;
  }
  void Uint(uint64_t v) {
    Room(20);
    p_ = std::to_chars(p_, end_, v).ptr;
  }
  void Int(int64_t v) {
    Room(20);
    p_ = std::to_chars(p_, end_, v).ptr;
  }
  // `value` as a quoted JSON string (AppendJsonString's escaping).
  void JsonString(std::string_view value);

  // Cuts the string to what was written. Idempotent; nothing may be appended after it.
  void Close() {
    if (end_ == nullptr) return;
    out_.resize(static_cast<size_t>(p_ - out_.data()));
    p_ = end_ = nullptr;
  }

 private:
  void Room(size_t n) {
    if (static_cast<size_t>(end_ - p_) < n) Grow(n);
  }
  void Grow(size_t n);

  std::string& out_;
  char* p_;
  char* end_;
};

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points above U+10FFFF).
[[nodiscard]] bool IsValidUtf8(std::string_view s);

// `s` with every byte that does not begin a well-formed UTF-8 sequence replaced by U+FFFD, for text that
// echoes what a client sent (a JSON string must be valid UTF-8).
[[nodiscard]] std::string ToValidUtf8(std::string_view s);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_JSON_WRITER_H_
