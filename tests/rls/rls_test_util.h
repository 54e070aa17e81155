// Helpers of the Envoy rate limit service tests: a blocking client on the generated C++ stub, request
// builders, and the config file the tests share.
#ifndef RINGLIMIT_TESTS_RLS_RLS_TEST_UTIL_H_
#define RINGLIMIT_TESTS_RLS_RLS_TEST_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"

namespace ringlimit::testing {

namespace rlsv3 = envoy::service::ratelimit::v3;
using Descriptor = std::vector<std::pair<std::string, std::string>>;

// The config most cases use: one domain, every feature of the format.
inline constexpr char kRlsConfig[] = R"(domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    value: /login
    rate_limit: {unit: hour, requests_per_unit: 2, name: login}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: shadow
    rate_limit: {unit: hour, requests_per_unit: 1}
    shadow_mode: true
  - key: internal
    unlimited: true
  - key: client
    descriptors:
      - key: plan
        value: free
        rate_limit: {unit: hour, requests_per_unit: 1}
      - key: plan
        rate_limit: {unit: hour, requests_per_unit: 4}
  - key: blocked
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: exact
    rate_limit: {unit: hour, requests_per_unit: 40}
  - key: ldap
    rate_limit: {unlimited: true}
  - key: category
    value: read
    rate_limit: {unit: hour, requests_per_unit: 1, name: reads}
  - key: endpoint
    value: /reports
    rate_limit: {unit: hour, requests_per_unit: 2, name: reports, replaces: [{name: reads}]}
  - key: file
    value: /shared/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: file
    value: "*.pdf"
    rate_limit: {unit: hour, requests_per_unit: 1}
)";

// A RateLimitRequest of `domain` with one descriptor per element of `descriptors`.
inline rlsv3::RateLimitRequest MakeRequest(const std::string& domain,
                                           const std::vector<Descriptor>& descriptors,
                                           uint32_t hits_addend = 0) {
  rlsv3::RateLimitRequest request;
  request.set_domain(domain);
  request.set_hits_addend(hits_addend);
  for (const Descriptor& d : descriptors) {
    auto* descriptor = request.add_descriptors();
    for (const auto& [k, v] : d) {
      auto* entry = descriptor->add_entries();
      entry->set_key(k);
      entry->set_value(v);
    }
  }
  return request;
}

struct RlsAnswer {
  grpc::Status status;
  rlsv3::RateLimitResponse response;
};

// A blocking client of one node's gRPC port (thread-safe: gRPC stubs are).
class RlsClient {
 public:
  explicit RlsClient(uint16_t port)
      : channel_(
            grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials())),
        stub_(rlsv3::RateLimitService::NewStub(channel_)) {}

  RlsAnswer Call(const rlsv3::RateLimitRequest& request) const {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    RlsAnswer answer;
    answer.status = stub_->ShouldRateLimit(&context, request, &answer.response);
    return answer;
  }

  // The same descriptor `n` times; how many were answered OK (each call must succeed).
  int Admitted(const rlsv3::RateLimitRequest& request, int n, std::string* failure) const {
    int ok = 0;
    for (int i = 0; i < n; ++i) {
      RlsAnswer a = Call(request);
      if (!a.status.ok()) {
        *failure = a.status.error_message();
        return -1;
      }
      if (a.response.overall_code() == rlsv3::RateLimitResponse::OK) ++ok;
    }
    return ok;
  }

  [[nodiscard]] const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<rlsv3::RateLimitService::Stub> stub_;
};

}  // namespace ringlimit::testing

#endif  // RINGLIMIT_TESTS_RLS_RLS_TEST_UTIL_H_
