// The values of the RateLimit-Policy and RateLimit headers (draft-ietf-httpapi-ratelimit-headers-10),
// one list member per limit, built by appending: shared by the HTTP check path and Envoy's rate limit
// service (response_headers_to_add).
//
// Thread safety: a plain value.
#ifndef RINGLIMIT_NODE_SERVICE_RATELIMIT_HEADERS_H_
#define RINGLIMIT_NODE_SERVICE_RATELIMIT_HEADERS_H_

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

  [[nodiscard]] bool empty() const { return policy_.view().empty(); }
  [[nodiscard]] std::string_view policy() const { return policy_.view(); }  // RateLimit-Policy
  [[nodiscard]] std::string_view state() const { return state_.view(); }    // RateLimit

  // The text of one header value: a limit or two fit inline (no allocation on the check path), longer
  // ones move to a string. Written through a pointer: Room(n) gives n bytes past the end, Commit(p) keeps
  // what was written up to p.
  class Text {
   public:
    char* Room(size_t n) {
      if (!on_heap_ && size_ + n <= kInline) return inline_ + size_;
      if (!on_heap_) {
        heap_.assign(inline_, size_);
        on_heap_ = true;
      }
      heap_.resize(size_ + n);
      return heap_.data() + size_;
    }
    void Commit(const char* end) {
      size_ = static_cast<size_t>(end - (on_heap_ ? heap_.data() : inline_));
      if (on_heap_) heap_.resize(size_);
    }
    [[nodiscard]] std::string_view view() const {
      return on_heap_ ? std::string_view(heap_) : std::string_view(inline_, size_);
    }

   private:
    static constexpr size_t kInline = 112;
    char inline_[kInline];
    size_t size_ = 0;
    bool on_heap_ = false;
    std::string heap_;  // the text once it outgrew inline_
  };

 private:
  Text policy_;
  Text state_;
};

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVICE_RATELIMIT_HEADERS_H_
