#include "node/http/response_fields.h"

#include <boost/beast/core/string.hpp>
#include <cassert>
#include <charconv>
#include <cstring>
#include <stdexcept>

namespace ringlimit::node {
namespace {

namespace http = boost::beast::http;
using boost::beast::string_view;

// Whether the comma-separated token list `list` holds `token` (case-insensitively).
bool HasToken(string_view list, string_view token) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    string_view item = list.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (boost::beast::iequals(item, token)) return true;
    if (comma == string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

bool ResponseFields::Matches(const Entry& e, http::field id, string_view name) const {
  if (e.erased) return false;
  if (id != http::field::unknown) return e.id == id;
  return e.id == http::field::unknown &&
         boost::beast::iequals(string_view(text_.data() + e.name_at, e.name_size), name);
}

size_t ResponseFields::Find(http::field id, string_view name) const {
  size_t i = 0;
  while (i < entries_.size() && !Matches(entries_[i], id, name)) ++i;
  return i;
}

void ResponseFields::Append(http::field id, string_view name, string_view value) {
  const auto name_at = static_cast<uint32_t>(text_.size());
  const auto value_at = static_cast<uint32_t>(name_at + name.size() + 2);
  // Grown once, uninitialised, then copied into (small_vector's range insert is several times slower):
  // "name: value\r\n", as the field goes on the wire.
  text_.resize(value_at + value.size() + 2, boost::container::default_init);
  char* const at = text_.data();
  // (An empty view may hold a null pointer, which memcpy must not be given.)
  if (!name.empty()) std::memcpy(at + name_at, name.data(), name.size());
  at[value_at - 2] = ':';
  at[value_at - 1] = ' ';
  if (!value.empty()) std::memcpy(at + value_at, value.data(), value.size());
  at[value_at + value.size()] = '\r';
  at[value_at + value.size() + 1] = '\n';
  if (IsFraming(id)) wire_ = false;
  entries_.push_back(Entry{id, name_at, static_cast<uint32_t>(name.size()), value_at,
                           static_cast<uint32_t>(value.size()), false});
}

void ResponseFields::Set(http::field id, string_view name, string_view value) {
  const size_t first = Find(id, name);
  if (first == entries_.size()) {
    Append(id, name, value);
    return;
  }
  for (size_t i = first + 1; i < entries_.size(); ++i) {
    if (Matches(entries_[i], id, name)) {
      entries_[i].erased = true;
      wire_ = false;
    }
  }
  // The new value goes at the end of the text; the entry keeps its place in the order (the text is no
  // longer the fields in order).
  wire_ = false;
  const auto value_at = static_cast<uint32_t>(text_.size());
  text_.resize(value_at + value.size(), boost::container::default_init);
  if (!value.empty()) std::memcpy(text_.data() + value_at, value.data(), value.size());
  entries_[first].value_at = value_at;
  entries_[first].value_size = static_cast<uint32_t>(value.size());
}

size_t ResponseFields::Erase(http::field id, string_view name) {
  size_t n = 0;
  for (Entry& e : entries_) {
    if (Matches(e, id, name)) {
      e.erased = true;
      wire_ = false;
      ++n;
    }
  }
  return n;
}

void ResponseFields::set(http::field name, string_view value) { Set(name, http::to_string(name), value); }

void ResponseFields::set(string_view name, string_view value) {
  Set(http::string_to_field(name), name, value);
}

void ResponseFields::insert(http::field name, string_view value) {
  Append(name, http::to_string(name), value);
}

void ResponseFields::insert(string_view name, string_view value) {
  Append(http::string_to_field(name), name, value);
}

void ResponseFields::insert_extension(string_view name, string_view value) {
  assert(http::string_to_field(name) == http::field::unknown);
  Append(http::field::unknown, name, value);
}

size_t ResponseFields::erase(http::field name) { return Erase(name, http::to_string(name)); }

size_t ResponseFields::erase(string_view name) { return Erase(http::string_to_field(name), name); }

void ResponseFields::clear() {
  text_.clear();
  entries_.clear();
  wire_ = true;
}

bool ResponseFields::IsFraming(http::field id) {
  return id == http::field::content_length || id == http::field::transfer_encoding ||
         id == http::field::connection;
}

ResponseFields::const_iterator ResponseFields::find(http::field name) const {
  return const_iterator(this, Find(name, http::to_string(name)));
}

ResponseFields::const_iterator ResponseFields::find(string_view name) const {
  return const_iterator(this, Find(http::string_to_field(name), name));
}

size_t ResponseFields::count(http::field name) const {
  size_t n = 0;
  for (const Entry& e : entries_) n += Matches(e, name, {}) ? 1 : 0;
  return n;
}

size_t ResponseFields::count(string_view name) const {
  const http::field id = http::string_to_field(name);
  size_t n = 0;
  for (const Entry& e : entries_) n += Matches(e, id, name) ? 1 : 0;
  return n;
}

string_view ResponseFields::operator[](http::field name) const {
  const size_t i = Find(name, {});
  return i == entries_.size() ? string_view() : (*const_iterator(this, i)).value();
}

string_view ResponseFields::operator[](string_view name) const {
  const size_t i = Find(http::string_to_field(name), name);
  return i == entries_.size() ? string_view() : (*const_iterator(this, i)).value();
}

string_view ResponseFields::at(http::field name) const {
  if (Find(name, {}) == entries_.size()) throw std::out_of_range("field not found");
  return (*this)[name];
}

string_view ResponseFields::at(string_view name) const {
  if (Find(http::string_to_field(name), name) == entries_.size()) throw std::out_of_range("field not found");
  return (*this)[name];
}

bool ResponseFields::get_chunked_impl() const {
  const string_view te = (*this)[http::field::transfer_encoding];
  return HasToken(te, "chunked");
}

bool ResponseFields::get_keep_alive_impl(unsigned version) const {
  const string_view connection = (*this)[http::field::connection];
  if (version < 11) return HasToken(connection, "keep-alive");
  return !HasToken(connection, "close");
}

void ResponseFields::set_chunked_impl(bool value) {
  if (value) {
    set(http::field::transfer_encoding, "chunked");
  } else {
    erase(http::field::transfer_encoding);
  }
}

void ResponseFields::set_content_length_impl(const boost::optional<std::uint64_t>& value) {
  if (!value) {
    erase(http::field::content_length);
    return;
  }
  char digits[24];
  const auto [end, ec] = std::to_chars(digits, digits + sizeof digits, *value);
  set(http::field::content_length, string_view(digits, static_cast<size_t>(end - digits)));
}

void ResponseFields::set_keep_alive_impl(unsigned version, bool keep_alive) {
  if (version < 11) {
    if (keep_alive) {
      set(http::field::connection, "keep-alive");
    } else {
      erase(http::field::connection);
    }
  } else if (keep_alive) {
    erase(http::field::connection);
  } else {
    set(http::field::connection, "close");
  }
}

}  // namespace ringlimit::node
