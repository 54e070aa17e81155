// Fuzz target: the one-pass request head parser (node/server/request_head.h) against Beast's request
// parser, which the transport uses for every head the one-pass parser leaves to it.
//
// Invariants: no crash or sanitizer report; a head the one-pass parser takes is taken by Beast too, with
// the same length, method, target, version and fields, no body, and keep-alive; the scanned head's
// RequestHead::Field finds, for every field name, the value of Beast's first field of that name. The first
// input byte picks the head size limit (a small one puts the limit inside most heads).
#include "node/server/beast_http.h"  // (first: see there)
// The rest.
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "node/server/request_head.h"

namespace {

namespace http = boost::beast::http;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ringlimit::fuzz::FuzzInput input(data, size);
  const uint8_t choice = input.Byte();
  const size_t limit = choice < 128 ? size_t{16} << 10 : static_cast<size_t>(choice - 127) * 4;
  const std::string_view bytes = input.Rest();

  ringlimit::node::HttpRequest fast;
  const std::optional<size_t> used = ringlimit::node::ParseSimpleRequestHead(bytes, limit, fast);
  if (!used) return 0;
  FUZZ_CHECK(*used <= bytes.size() && *used < limit, "the head lies within the input and the limit");

  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<uint32_t>(limit));
  parser.body_limit(1 << 20);
  boost::asio::const_buffer rest(bytes.data(), bytes.size());
  size_t consumed = 0;
  while (!parser.is_done()) {
    boost::beast::error_code ec;
    const size_t n = parser.put(rest, ec);
    consumed += n;
    rest += n;
    FUZZ_CHECK(!ec, "Beast takes the head too");
    FUZZ_CHECK(n > 0, "Beast needs no more bytes than the head");
  }
  FUZZ_CHECK(consumed == *used, "the same length");
  FUZZ_CHECK(parser.keep_alive(), "keep-alive");
  const ringlimit::node::HttpRequest& beast = parser.get();
  FUZZ_CHECK(beast.method_string() == fast.method_string(), "the same method");
  FUZZ_CHECK(beast.target() == fast.target(), "the same target");
  FUZZ_CHECK(beast.version() == fast.version(), "the same version");
  FUZZ_CHECK(beast.body().empty() && fast.body().empty(), "no body");
  auto b = beast.begin();
  auto f = fast.begin();
  for (; b != beast.end() && f != fast.end(); ++b, ++f) {
    FUZZ_CHECK(b->name() == f->name() && b->name_string() == f->name_string(), "the same field name");
    FUZZ_CHECK(b->value() == f->value(), "the same field value");
  }
  FUZZ_CHECK(b == beast.end() && f == fast.end(), "the same number of fields");
  const std::optional<ringlimit::node::SimpleRequestHead> scanned =
      ringlimit::node::ScanSimpleRequestHead(bytes, limit);
  FUZZ_CHECK(scanned && scanned->size == *used, "the scan takes the head the parse takes");
  for (const auto& field : beast) {
    const std::optional<std::string_view> value = scanned->head.Field(field.name_string());
    FUZZ_CHECK(value && *value == beast[field.name_string()], "Field finds the first value of a name");
  }
  return 0;
}
