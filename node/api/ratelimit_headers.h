// The values of the RateLimit-Policy and RateLimit headers (draft-ietf-httpapi-ratelimit-headers-10),
// one list member per limit, built by appending: shared by the HTTP check path and Envoy's rate limit
// service (response_headers_to_add).
//
// Thread safety: a plain value.
#ifndef RINGLIMIT_NODE_API_RATELIMIT_HEADERS_H_
#define RINGLIMIT_NODE_API_RATELIMIT_HEADERS_H_

#include <boost/container/small_vector.hpp>
#include <cstdint>
#include <string>
#include <string_view>

namespace ringlimit::node {

class RateLimitHeaders {
 public:
  // One limit: its name (written as a Structured Field string), quota and window (whole seconds, at
  // least 1) for RateLimit-Policy; units left and seconds until reset for RateLimit.
  void Add(std::string_view name, int64_t quota, int64_t window_seconds, int64_t remaining,
           int64_t reset_seconds);

  [[nodiscard]] bool empty() const { return policy_.empty(); }
  [[nodiscard]] std::string_view policy() const {
    return {policy_.data(), policy_.size()};
  }                                                                                        // RateLimit-Policy
  [[nodiscard]] std::string_view state() const { return {state_.data(), state_.size()}; }  // RateLimit

  // The text of one header value: a limit or two fit inline (no allocation on the check path).
  using Text = boost::container::small_vector<char, 80>;

 private:
  Text policy_;
  Text state_;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_API_RATELIMIT_HEADERS_H_
