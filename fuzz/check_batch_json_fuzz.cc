// Fuzz target: POST /v1/check's streaming body reader (node/api/check_json.h: ReadChecksStreaming) against
// the DOM path it stands in for (ParseJsonBody, the body's shape, CheckFromJson per check), differentially.
// The input is a request body.
//
// Invariants: no crash or sanitizer report; a body the streaming reader accepts is one the DOM path
// accepts, with the same checks in the same order (Protobuf-equal messages); a body the DOM path accepts
// is accepted by the streaming reader too unless it has one of the shapes the reader declines on purpose
// (a key repeated in an object, a number that is not a plain non-negative integer literal); and the DOM's
// own serialization of an accepted body without such numbers is accepted, with the same checks.
#include <google/protobuf/arena.h>
#include <google/protobuf/util/message_differencer.h>

#include <boost/json.hpp>
#include <boost/json/basic_parser_impl.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api.pb.h"
#include "fuzz/fuzz_util.h"
#include "node/api/check_json.h"
#include "node/service/api_json.h"

namespace {

namespace json = boost::json;
using ringlimit::api::Check;

constexpr size_t kMaxChecks = 8;  // small, so that the bound is crossed often

// The DOM path's decision (node/api/check_handlers.cc PrepareCheckPostDom, before CheckBatch::Add):
// the checks, or false for a body it answers with an error.
bool ReadChecksDom(std::string_view body, google::protobuf::Arena* arena, std::vector<Check*>* out,
                   size_t* object_members) {
  json::value root;
  if (ringlimit::node::ParseJsonBody(body, &root)) return false;
  if (!root.is_object()) return false;
  const json::object& object = root.get_object();
  if (object.size() != 1 || !object.contains("checks")) return false;
  const json::value& checks = object.at("checks");
  if (!checks.is_array() || checks.get_array().empty() || checks.get_array().size() > kMaxChecks)
    return false;
  *object_members = 1;
  for (const json::value& item : checks.get_array()) {
    if (!item.is_object()) return false;
    Check* check = google::protobuf::Arena::CreateMessage<Check>(arena);
    if (ringlimit::node::CheckFromJson(item.get_object(), /*allow_target=*/true, check)) return false;
    *object_members += item.get_object().size();
    out->push_back(check);
  }
  return true;
}

// What the streaming reader declines on purpose, counted through Boost.JSON's SAX parser: every key of
// every object (repeated ones included), and the numbers written other than as a non-negative integer.
struct ShapeCounter {
  static constexpr size_t max_object_size = json::object::max_size();
  static constexpr size_t max_array_size = json::array::max_size();
  static constexpr size_t max_key_size = json::string::max_size();
  static constexpr size_t max_string_size = json::string::max_size();
  size_t keys = 0;
  size_t other_numbers = 0;
  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) { return true; }
  bool on_object_end(size_t, json::error_code&) { return true; }
  bool on_array_begin(json::error_code&) { return true; }
  bool on_array_end(size_t, json::error_code&) { return true; }
  bool on_key_part(json::string_view, size_t, json::error_code&) { return true; }
  bool on_key(json::string_view, size_t, json::error_code&) {
    ++keys;
    return true;
  }
  bool on_string_part(json::string_view, size_t, json::error_code&) { return true; }
  bool on_string(json::string_view, size_t, json::error_code&) { return true; }
  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(int64_t v, json::string_view, json::error_code&) {
    other_numbers += v < 0 ? 1 : 0;  // (-0 as well: see below)
    return true;
  }
  bool on_uint64(uint64_t, json::string_view, json::error_code&) { return true; }
  bool on_double(double, json::string_view, json::error_code&) {
    ++other_numbers;
    return true;
  }
  bool on_bool(bool, json::error_code&) { return true; }
  bool on_null(json::error_code&) { return true; }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }
};

ShapeCounter Shape(std::string_view body) {
  json::parse_options options;
  options.max_depth = 32;
  json::basic_parser<ShapeCounter> parser(options);
  json::error_code ec;
  (void)parser.write_some(false, body.data(), body.size(), ec);
  ShapeCounter shape = parser.handler();
  // "-0" reads as the int64 0 and its sign is only in the text: any '-' outside a string counts.
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '"') in_string = !in_string;
    if (in_string && body[i] == '\\') ++i;
    if (!in_string && body[i] == '-') ++shape.other_numbers;
  }
  return shape;
}

void ExpectSame(const std::vector<Check*>& a, const std::vector<Check*>& b, const char* what) {
  FUZZ_CHECK(a.size() == b.size(), what);
  for (size_t i = 0; i < a.size(); ++i) {
    FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(*a[i], *b[i]), what);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  google::protobuf::Arena arena;
  std::vector<Check*> streamed;
  const bool stream_ok = ringlimit::node::ReadChecksStreaming(body, kMaxChecks, &arena, &streamed);
  std::vector<Check*> dom;
  size_t members = 0;
  const bool dom_ok = ReadChecksDom(body, &arena, &dom, &members);

  if (stream_ok) {
    FUZZ_CHECK(dom_ok, "the streaming reader accepted a body the DOM path refuses");
    ExpectSame(streamed, dom, "the streaming reader and the DOM path decode different checks");
  }
  if (!dom_ok) return 0;
  const ShapeCounter shape = Shape(body);
  if (!stream_ok) {
    FUZZ_CHECK(shape.keys > members || shape.other_numbers > 0,
               "the streaming reader declined a body without repeated keys or unusual numbers");
  }
  if (shape.other_numbers > 0) return 0;
  // The DOM's serialization has no repeated key: always accepted, to the same checks.
  json::value root;
  FUZZ_CHECK(!ringlimit::node::ParseJsonBody(body, &root), "the DOM path accepted a body it cannot parse");
  const std::string again = json::serialize(root);
  std::vector<Check*> reread;
  FUZZ_CHECK(ringlimit::node::ReadChecksStreaming(again, kMaxChecks, &arena, &reread),
             "the streaming reader declined the DOM's serialization of an accepted body");
  ExpectSame(reread, dom, "the DOM's serialization decodes to other checks");
  return 0;
}
