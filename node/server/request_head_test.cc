// ParseSimpleRequestHead against Beast's request parser: whatever the one-pass parser takes, Beast takes
// too, with the same method, target, version, fields and length, no body and keep-alive; what it leaves
// to Beast is the rest (bodies, HTTP/1.0, Connection, odd bytes, heads at the size limit).
#include "node/server/beast_http.h"  // (first: see there)
// The rest.
#include <gtest/gtest.h>

#include <boost/beast/http.hpp>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "node/server/request_head.h"

namespace ringlimit::node {
namespace {

namespace http = boost::beast::http;

constexpr size_t kLimit = 16 << 10;

struct Head {
  size_t used = 0;
  std::string method;
  std::string target;
  unsigned version = 0;
  std::vector<std::pair<std::string, std::string>> fields;
  bool keep_alive = false;
  std::string body;

  bool operator==(const Head&) const = default;
};

Head Describe(const HttpRequest& request, size_t used, bool keep_alive) {
  Head h;
  h.used = used;
  h.method = std::string(request.method_string());
  h.target = std::string(request.target());
  h.version = request.version();
  for (const auto& f : request) h.fields.emplace_back(std::string(f.name_string()), std::string(f.value()));
  h.keep_alive = keep_alive;
  h.body = request.body();
  return h;
}

std::optional<Head> Fast(std::string_view bytes, size_t limit = kLimit) {
  HttpRequest request;
  const std::optional<size_t> used = ParseSimpleRequestHead(bytes, limit, request);
  if (!used) return std::nullopt;
  return Describe(request, *used, true);
}

// What Session does with Beast's parser: the whole request, or nullopt (an error, or more bytes needed).
std::optional<Head> Beast(std::string_view bytes, size_t limit = kLimit) {
  http::request_parser<http::string_body> parser;
  parser.header_limit(static_cast<uint32_t>(limit));
  parser.body_limit(1 << 20);
  boost::asio::const_buffer rest(bytes.data(), bytes.size());
  size_t used = 0;
  while (!parser.is_done()) {
    boost::beast::error_code ec;
    const size_t n = parser.put(rest, ec);
    used += n;
    rest += n;
    if (ec) return std::nullopt;
    if (n == 0) return std::nullopt;
  }
  const bool keep_alive = parser.keep_alive();
  return Describe(parser.release(), used, keep_alive);
}

// Whatever the one-pass parser takes, Beast takes the same way.
void ExpectAgrees(std::string_view bytes, size_t limit = kLimit) {
  const std::optional<Head> fast = Fast(bytes, limit);
  if (!fast) return;
  const std::optional<Head> beast = Beast(bytes, limit);
  ASSERT_TRUE(beast.has_value()) << "taken here, refused by Beast: " << bytes;
  EXPECT_EQ(*fast, *beast) << bytes;
}

const std::vector<std::string>& Seeds() {
  static const std::vector<std::string> seeds = {
      "GET /v1/check?name=api&key=u1&limit=10&window_ms=1000 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n",
      "GET /v1/check?key=a HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/7.88.1\r\nAccept: */*\r\n\r\n",
      "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
      "DELETE /v1/keys/k1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer abc.def\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nhost:x\r\nX-Empty:\r\nX-Spaces: \t a  b \t \r\n\r\n",
      "GET / HTTP/1.1\r\n\r\n",
      "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
  };
  return seeds;
}

TEST(RequestHeadTest, TakesTheHeadsClientsSendForChecks) {
  for (const std::string& seed : Seeds()) {
    const std::optional<Head> fast = Fast(seed);
    ASSERT_TRUE(fast.has_value()) << seed;
    const std::optional<Head> beast = Beast(seed);
    ASSERT_TRUE(beast.has_value()) << seed;
    EXPECT_EQ(*fast, *beast) << seed;
    EXPECT_EQ(fast->used, seed.size());
  }
  const std::optional<Head> h = Fast(Seeds()[4]);
  ASSERT_TRUE(h.has_value());
  ASSERT_EQ(h->fields.size(), 3u);
  EXPECT_EQ(h->fields[1].second, "");
  EXPECT_EQ(h->fields[2].second, "a  b");  // leading and trailing whitespace is not part of the value
}

TEST(RequestHeadTest, PipelinedRequestsAreTakenOneHeadAtATime) {
  const std::string first = Seeds()[0];
  const std::string second = Seeds()[2];
  std::string both = first + second;
  const std::optional<Head> h = Fast(both);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->used, first.size());
  EXPECT_EQ(h->method, "GET");
  const std::optional<Head> next = Fast(std::string_view(both).substr(h->used));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->method, "HEAD");
}

TEST(RequestHeadTest, LeavesEverythingElseToBeast) {
  const std::vector<std::string> others = {
      // incomplete
      "GET /v1/check HTTP/1.1\r\nHost: x\r\n",
      "GET /v1/check HTTP/1.1\r\nHost: x\r\n\r",
      "GET /v1/check HTT",
      "",
      // bodies and connection fields
      "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
      "POST /v1/check HTTP/1.1\r\nHost: x\r\ncontent-length: 0\r\n\r\n",
      "POST /v1/check HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
      "GET / HTTP/1.1\r\nCONNECTION: keep-alive\r\n\r\n",
      "GET / HTTP/1.1\r\nProxy-Connection: close\r\n\r\n",
      "GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
      // other versions
      "GET / HTTP/1.0\r\nHost: x\r\n\r\n",
      "GET / HTTP/2.0\r\n\r\n",
      // unknown method, odd bytes, folds, bare LF
      "BREW /pot HTTP/1.1\r\n\r\n",
      "GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\nX-Name: caf\xc3\xa9\r\n\r\n",
      "GET / HTTP/1.1\r\nX-Folded: a\r\n b\r\n\r\n",
      "GET / HTTP/1.1\nHost: x\n\n",
      "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
      "GET / HTTP/1.1\r\n: x\r\n\r\n",
      "GET  / HTTP/1.1\r\n\r\n",
      "\r\nGET / HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n",
      "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
  };
  for (const std::string& other : others) EXPECT_FALSE(Fast(other).has_value()) << other;
}

TEST(RequestHeadTest, AHeadAtTheSizeLimitIsBeastsToRefuse) {
  const std::string head = "GET /v1/check HTTP/1.1\r\nX-Pad: " + std::string(200, 'a') + "\r\n\r\n";
  EXPECT_FALSE(Fast(head, head.size()).has_value());
  EXPECT_FALSE(Fast(head, head.size() - 1).has_value());
  ASSERT_TRUE(Fast(head, head.size() + 1).has_value());
  ExpectAgrees(head, head.size() + 1);
  EXPECT_FALSE(Fast(head, 0).has_value());
}

// Random edits of the seeds (bytes replaced, inserted or removed, drawn from the characters that matter
// to a parser): every head taken here must be taken identically by Beast.
TEST(RequestHeadTest, AgreesWithBeastOnEditedHeads) {
  const std::string alphabet =
      std::string("\r\n\t :/?=&%aAzZ09-_.~!*'\"(),;<>@[]{}\\^`|#$+\x7f\x80\xff\0", 44);
  std::mt19937_64 rng(20261127);
  size_t taken = 0;
  for (int round = 0; round < 40'000; ++round) {
    std::string head = Seeds()[rng() % Seeds().size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % (head.size() + 1);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          if (at < head.size()) head[at] = c;
          break;
        case 1:
          head.insert(head.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        default:
          if (at < head.size()) head.erase(at, 1);
          break;
      }
    }
    if (Fast(head).has_value()) ++taken;
    ExpectAgrees(head);
    ExpectAgrees(head, head.size() / 2 + 1);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(taken, 1'000u);  // the edits leave many heads inside the subset: the comparison has bite
}

}  // namespace
}  // namespace ringlimit::node
