// Fuzz target: Envoy's rate limit service (node/envoy/rls_handlers.cc) with envoyproxy/ratelimit's YAML
// config (node/envoy/rls_config.cc: parsing, wildcard matching, replaces, quota mode) through a real
// ApiHandler. The input is a config and a request: two length bytes (little-endian, modulo 1024) give the
// length of the YAML text that follows, and the rest is a serialized RateLimitRequest. A config that does not
// parse is replaced by kConfig, so that every request still reaches the matching.
//
// Invariants: no crash or sanitizer report; ShouldRateLimit answers exactly once, before it returns (no
// cluster); without an error there is one status per descriptor, each OK or OVER_LIMIT, and the overall
// code is OVER_LIMIT only when some status is.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "fuzz/api_harness.h"
#include "node/envoy/rls_config.h"
#include "node/envoy/rls_handlers.h"

namespace {

namespace rlsv3 = envoy::service::ratelimit::v3;

// Every rule kind: nested and value-less keys, wildcards with and without share_threshold, replaces
// (also by an unlimited limit), quota mode, shadow mode, a zero limit, each algorithm family.
constexpr std::string_view kConfig = R"(domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 3, name: base}
  - key: a
    value: "x*y"
    rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: base}, {name: q}]}
  - key: b
    value: "*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token_bucket}
  - key: c
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 2, name: q}
  - key: s
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra}
  - key: z
    rate_limit: {unit: year, requests_per_unit: 0}
  - key: u
    rate_limit: {unlimited: true, replaces: [{name: base}]}
  - key: n
    descriptors:
      - key: m
        value: "*-*"
        rate_limit: {unit: week, requests_per_unit: 4, algorithm: sliding_window}
)";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ringlimit::fuzz::FuzzInput input(data, size);
  // (At most 1 KiB of YAML: the config is an operator's file, not a client's input, and small configs
  // leave the time to the matching.)
  const size_t yaml_size = (input.Byte() | (size_t{input.Byte()} << 8)) % 1024;
  std::string_view rest = input.Rest();
  const std::string_view yaml = rest.substr(0, yaml_size);
  rest.remove_prefix(yaml.size());

  auto parsed = ringlimit::node::rls::RlsConfig::Parse(yaml);
  if (!parsed.ok()) parsed = ringlimit::node::rls::RlsConfig::Parse(kConfig);
  FUZZ_CHECK(parsed.ok(), "the fuzz target's own config does not parse");
  rlsv3::RateLimitRequest request;
  if (!request.ParseFromArray(rest.data(), static_cast<int>(rest.size()))) return 0;

  ringlimit::fuzz::ApiHarness harness;
  rlsv3::RateLimitResponse response;
  int calls = 0;
  std::optional<ringlimit::node::ApiError> error;
  for (int round = 0; round < 2; ++round) {  // twice: the second call sees what the first one counted
    response.Clear();
    calls = 0;
    ringlimit::node::ShouldRateLimit(harness.service(), parsed.value(), request, &response,
                                     [&](std::optional<ringlimit::node::ApiError> e) {
                                       ++calls;
                                       error = std::move(e);
                                     });
    FUZZ_CHECK(calls == 1, "done must be called exactly once, before ShouldRateLimit returns");
    if (error) continue;
    FUZZ_CHECK(response.statuses_size() == request.descriptors_size(), "not one status per descriptor");
    bool any_over = false;
    for (const auto& status : response.statuses()) {
      FUZZ_CHECK(status.code() == rlsv3::RateLimitResponse::OK ||
                     status.code() == rlsv3::RateLimitResponse::OVER_LIMIT,
                 "a status that is neither OK nor OVER_LIMIT");
      any_over = any_over || status.code() == rlsv3::RateLimitResponse::OVER_LIMIT;
    }
    FUZZ_CHECK(response.overall_code() != rlsv3::RateLimitResponse::OVER_LIMIT || any_over,
               "OVER_LIMIT overall with no descriptor over its limit");
  }
  return 0;
}
