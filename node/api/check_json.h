// The body of POST /v1/check read straight into api::Check messages, without a DOM (issue 38 item 2).
//
// Boost.JSON's DOM cost 2.8 k instructions per check of a 100-check body, and reading api::Check messages
// out of it 0.9 k more: every object, key and value built, hashed and then read once. This reads the body
// with simdjson's On-Demand API (Debian's libsimdjson-dev), setting each field as it is reached.
//
// It only ever accepts: any body it cannot take whole -- a syntax error, invalid UTF-8, a field of the
// wrong type or out of range, a key given twice in one object (the DOM keeps the last value at the first
// one's place, which decides which error is reported first), a number that is not an integer literal
// (1e3, 5.0, -0: Boost.JSON 1.81 and simdjson need not round such literals alike), no or empty "checks",
// more than `max_checks` checks, another root field -- is declined, and the caller runs the DOM path
// (ParseJsonBody + CheckFromJson), which finds the exact 4xx answer or the same checks. What it accepts
// decodes to the checks the DOM path decodes, in the same order (fuzz/check_batch_json_fuzz compares the
// two; node/api/check_json_test too).
//
// simdjson picks its kernel at compile time for On-Demand: with the project's default flags (x86-64
// baseline) that is its portable "fallback" one; built with -march=haswell or newer it uses AVX2.
//
// Thread safety: a pure function.
#ifndef RINGLIMIT_NODE_API_CHECK_JSON_H_
#define RINGLIMIT_NODE_API_CHECK_JSON_H_

#include <google/protobuf/arena.h>

#include <cstddef>
#include <string_view>
#include <vector>

#include "api.pb.h"

namespace ringlimit::node {

// Reads `body` as {"checks":[{...}, ...]} into messages allocated on `arena` and appended to *checks
// (cleared first). Returns false when the body is declined (see above); *checks is then unspecified.
[[nodiscard]] bool ReadChecksStreaming(std::string_view body, size_t max_checks,
                                       google::protobuf::Arena* arena, std::vector<api::Check*>* checks);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_CHECK_JSON_H_
