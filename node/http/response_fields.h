// ResponseFields: the header fields of a response as Beast's message<> wants them (its Fields
// requirements: boost/beast/http/type_traits.hpp, is_fields), kept as one text buffer and a small index
// rather than Beast's basic_fields, which allocates every field and inserts it into a red-black tree. A
// response has a handful of fields, written once by a handler, read by name rarely (tests, a few
// middlewares) and then written out in order by the session (node/server/session.cc): a linear scan over
// a few entries is cheaper than the tree, and the buffer grows once.
//
// The subset of basic_fields' interface the code uses: set / insert / erase / find / count / operator[] /
// at by `http::field` or by name (names compare case-insensitively), iteration in insertion order with
// name(), name_string() and value(). A field set again replaces the earlier one in place of order.
#ifndef RINGLIMIT_NODE_HTTP_RESPONSE_FIELDS_H_
#define RINGLIMIT_NODE_HTTP_RESPONSE_FIELDS_H_

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/container/small_vector.hpp>
#include <boost/optional/optional.hpp>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ringlimit::node {

class ResponseFields {
  struct Entry {
    boost::beast::http::field id;
    uint32_t name_at;
    uint32_t name_size;
    uint32_t value_at;
    uint32_t value_size;
    bool erased;
  };

  // The fields of a usual response (about ten, a few hundred bytes) fit inline: no allocation.
  using Text = boost::container::small_vector<char, 256>;

 public:
  // One field, as iteration and find() see it. Valid until the fields change.
  class value_type {
   public:
    [[nodiscard]] boost::beast::http::field name() const { return entry_->id; }
    [[nodiscard]] boost::beast::string_view name_string() const {
      return {text_->data() + entry_->name_at, entry_->name_size};
    }
    [[nodiscard]] boost::beast::string_view value() const {
      return {text_->data() + entry_->value_at, entry_->value_size};
    }

   private:
    friend class ResponseFields;
    value_type(const Text* text, const Entry* entry) : text_(text), entry_(entry) {}
    const Text* text_;
    const Entry* entry_;
  };

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = ResponseFields::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = value_type;

    const_iterator() = default;
    value_type operator*() const { return value_type(&fields_->text_, &fields_->entries_[index_]); }
    // A field by value behind an arrow (it->value()).
    struct Arrow {
      value_type field;
      const value_type* operator->() const { return &field; }
    };
    Arrow operator->() const { return Arrow{**this}; }
    const_iterator& operator++() {
      ++index_;
      Skip();
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator before = *this;
      ++*this;
      return before;
    }
    bool operator==(const const_iterator& other) const { return index_ == other.index_; }

   private:
    friend class ResponseFields;
    const_iterator(const ResponseFields* fields, size_t index) : fields_(fields), index_(index) { Skip(); }
    void Skip() {
      while (index_ < fields_->entries_.size() && fields_->entries_[index_].erased) ++index_;
    }
    const ResponseFields* fields_ = nullptr;
    size_t index_ = 0;
  };
  using iterator = const_iterator;

  ResponseFields() = default;

  [[nodiscard]] const_iterator begin() const { return const_iterator(this, 0); }
  [[nodiscard]] const_iterator end() const { return const_iterator(this, entries_.size()); }

  // Replaces every field of that name with one of `value` (in the place of the first).
  void set(boost::beast::http::field name, boost::beast::string_view value);
  void set(boost::beast::string_view name, boost::beast::string_view value);
  // Adds a field (another of the same name may exist).
  void insert(boost::beast::http::field name, boost::beast::string_view value);
  void insert(boost::beast::string_view name, boost::beast::string_view value);
  // insert() of a name Beast's http::field does not know (RateLimit, X-RateLimit-*, ...), without looking
  // it up in Beast's table: for handlers filling a fresh response on the hot path.
  void insert_extension(boost::beast::string_view name, boost::beast::string_view value);
  // Removes every field of that name; returns how many.
  size_t erase(boost::beast::http::field name);
  size_t erase(boost::beast::string_view name);
  void clear();

  // Every field as it goes on the wire ("Name: value\r\n" each, in order), when the text is exactly that:
  // nothing set again in place or erased, and none of the fields the transport writes itself
  // (Content-Length, Transfer-Encoding, Connection). Otherwise nullopt: iterate.
  [[nodiscard]] std::optional<std::string_view> wire() const {
    if (!wire_) return std::nullopt;
    return std::string_view(text_.data(), text_.size());
  }

  // Whether a field is one of those the transport writes itself (Content-Length, Transfer-Encoding,
  // Connection), which wire() leaves out of its block and a writer skips when it iterates.
  [[nodiscard]] static bool IsFraming(boost::beast::http::field id);

  [[nodiscard]] const_iterator find(boost::beast::http::field name) const;
  [[nodiscard]] const_iterator find(boost::beast::string_view name) const;
  [[nodiscard]] size_t count(boost::beast::http::field name) const;
  [[nodiscard]] size_t count(boost::beast::string_view name) const;
  // The value of the first field of that name, or "".
  [[nodiscard]] boost::beast::string_view operator[](boost::beast::http::field name) const;
  [[nodiscard]] boost::beast::string_view operator[](boost::beast::string_view name) const;
  // The same, throwing std::out_of_range when there is none.
  [[nodiscard]] boost::beast::string_view at(boost::beast::http::field name) const;
  [[nodiscard]] boost::beast::string_view at(boost::beast::string_view name) const;

 protected:
  // What beast::http::header<false, ResponseFields> calls (the is_fields requirements).
  [[nodiscard]] boost::beast::string_view get_method_impl() const { return {}; }
  [[nodiscard]] boost::beast::string_view get_target_impl() const { return {}; }
  [[nodiscard]] boost::beast::string_view get_reason_impl() const { return reason_; }
  [[nodiscard]] bool get_chunked_impl() const;
  [[nodiscard]] bool get_keep_alive_impl(unsigned version) const;
  [[nodiscard]] bool has_content_length_impl() const {
    return count(boost::beast::http::field::content_length) > 0;
  }
  void set_method_impl(boost::beast::string_view) {}
  void set_target_impl(boost::beast::string_view) {}
  void set_reason_impl(boost::beast::string_view s) { reason_.assign(s.data(), s.size()); }
  void set_chunked_impl(bool value);
  void set_content_length_impl(const boost::optional<std::uint64_t>& value);
  void set_keep_alive_impl(unsigned version, bool keep_alive);

 private:
  // The first live entry of that name, or entries_.size().
  [[nodiscard]] size_t Find(boost::beast::http::field id, boost::beast::string_view name) const;
  void Append(boost::beast::http::field id, boost::beast::string_view name, boost::beast::string_view value);
  void Set(boost::beast::http::field id, boost::beast::string_view name, boost::beast::string_view value);
  size_t Erase(boost::beast::http::field id, boost::beast::string_view name);
  [[nodiscard]] bool Matches(const Entry& e, boost::beast::http::field id,
                             boost::beast::string_view name) const;

  Text text_;         // every field as "name: value\r\n", one after the other (values set again: at the end)
  bool wire_ = true;  // text_ is the fields in order, none of them framing (wire())
  boost::container::small_vector<Entry, 10> entries_;  // in insertion order; erased ones skipped
  std::string reason_;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_HTTP_RESPONSE_FIELDS_H_
