// Fuzz target: the JSON decoder of checks (node/service/api_json.h: ParseJsonBody, CheckFromJson,
// ApplyLimitFields) and the POST /v1/check handler around it. The input is a request body.
//
// Invariants: no crash or sanitizer report; a check the decoder accepts without its target fields
// (allow_target false, as in a policy file) decodes to the same message with them allowed; limit fields
// the decoder accepts give a spec limiter::Validate accepts; POST /v1/check answers as
// ApiHarness::CheckResponse requires, and a 200 has a result for every check.
#include <google/protobuf/util/message_differencer.h>

#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "api.pb.h"
#include "fuzz/api_harness.h"
#include "node/service/api_json.h"

namespace {

using ringlimit::node::ApplyLimitFields;
using ringlimit::node::CheckFromJson;

// One element of "checks" (or any object): decoded both ways, its limit fields applied and validated.
void DecodeOne(const boost::json::object& object) {
  ringlimit::api::Check with_target;
  const bool target_ok = !CheckFromJson(object, /*allow_target=*/true, &with_target).has_value();
  ringlimit::api::Check without_target;
  if (!CheckFromJson(object, /*allow_target=*/false, &without_target).has_value()) {
    FUZZ_CHECK(target_ok, "a check valid without target fields is invalid with them");
    FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals(with_target, without_target),
               "allow_target changes how the same fields decode");
  }
  if (!target_ok) return;
  ringlimit::limiter::LimitSpec spec;
  spec.limit = 10;
  spec.window = ringlimit::limiter::kSecond;
  if (!ApplyLimitFields(with_target, &spec).has_value()) {
    FUZZ_CHECK(!ringlimit::limiter::Validate(spec).has_value(), "ApplyLimitFields accepted an invalid spec");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  boost::json::value root;
  const bool parsed = !ringlimit::node::ParseJsonBody(body, &root).has_value();
  size_t checks = 0;
  if (parsed && root.is_object()) {
    const auto* list = root.get_object().if_contains("checks");
    if (list != nullptr && list->is_array()) {
      checks = list->get_array().size();
      for (const auto& item : list->get_array()) {
        if (item.is_object()) DecodeOne(item.get_object());
      }
    } else {
      DecodeOne(root.get_object());
    }
  }

  ringlimit::fuzz::ApiHarness harness;
  const auto [response, answer] = harness.PostJson("/v1/check", body);
  if (response.result_int() == 200) {
    FUZZ_CHECK(parsed, "200 for a body that is not JSON");
    const auto* results = answer.get_object().if_contains("results");
    // One result per limit: a check names one limit or a policy of one or more.
    FUZZ_CHECK(results != nullptr && results->is_array() && results->get_array().size() >= checks,
               "a 200 without a result for every check");
  }
  return 0;
}
