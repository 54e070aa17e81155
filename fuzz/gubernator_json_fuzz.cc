// Fuzz target: the JSON decoder of Gubernator's gateway (POST /v1/GetRateLimits, node/api/
// gubernator_handlers.cc: ReadRateLimitReq and the request around it) through a real ApiHandler. The
// input is a request body.
//
// Invariants: no crash or sanitizer report; the answer is as ApiHarness::CheckResponse requires (a 4xx
// is the gateway's {"code","message"}); a 200 has one response per request item, in order.
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz/api_harness.h"
#include "node/service/api_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  boost::json::value root;
  const bool parsed = !ringlimit::node::ParseJsonBody(body, &root).has_value();
  size_t items = 0;
  if (parsed && root.is_object()) {
    const auto* list = root.get_object().if_contains("requests");
    if (list != nullptr && list->is_array()) items = list->get_array().size();
  }

  ringlimit::fuzz::ApiHarness harness;
  const auto [response, answer] = harness.PostJson("/v1/GetRateLimits", body);
  if (response.result_int() == 200) {
    FUZZ_CHECK(parsed, "200 for a body that is not JSON");
    const auto* responses = answer.get_object().if_contains("responses");
    FUZZ_CHECK(responses != nullptr && responses->is_array() && responses->get_array().size() == items,
               "a 200 without one response per request item");
  }
  return 0;
}
