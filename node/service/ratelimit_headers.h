// The values of the RateLimit-Policy and RateLimit headers (draft-ietf-httpapi-ratelimit-headers-10),
// one list member per limit, built by appending: shared by the HTTP check path and Envoy's rate limit
// service (response_headers_to_add).
//
// Thread safety: a plain value.
#ifndef RINGLIMIT_NODE_SERVICE_RATELIMIT_HEADERS_H_
#define RINGLIMIT_NODE_SERVICE_RATELIMIT_HEADERS_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace ringlimit::node {

class RateLimitHeaders {
 public:
  // One limit: its name (written as a Structured Field string), quota and window (whole seconds, at
  // least 1) for RateLimit-Policy; units left and seconds until reset for RateLimit.
  void Add(std::string_view name, int64_t quota, int64_t window_seconds, int64_t remaining,
           int64_t reset_seconds);

  [[nodiscard]] bool empty() const { return policy_.view().empty(); }
  [[nodiscard]] std::string_view policy() const { return policy_.view(); }  // RateLimit-Policy
  [[nodiscard]] std::string_view state() const { return state_.view(); }    // RateLimit

  // The text of one header value: a limit or two fit inline (no allocation on the check path), longer
  // ones move to a string.
  class Text {
   public:
    void Append(std::string_view s) {
      if (s.empty()) return;  // (an empty view may hold a null pointer, which memcpy must not be given)
      if (heap_.empty() && size_ + s.size() <= kInline) {
        std::memcpy(inline_ + size_, s.data(), s.size());
        size_ += s.size();
        return;
      }
      if (heap_.empty()) heap_.assign(inline_, size_);
      heap_.append(s);
    }
    void push_back(char c) { Append(std::string_view(&c, 1)); }
    [[nodiscard]] std::string_view view() const {
      return heap_.empty() ? std::string_view(inline_, size_) : std::string_view(heap_);
    }

   private:
    static constexpr size_t kInline = 112;
    char inline_[kInline];
    size_t size_ = 0;
    std::string heap_;  // non-empty once the text outgrew inline_
  };

 private:
  Text policy_;
  Text state_;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_RATELIMIT_HEADERS_H_
