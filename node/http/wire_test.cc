#include "node/http/wire.h"

#include <gtest/gtest.h>

#include <string>

namespace ringlimit::node {
namespace {

TEST(RequestHeadTest, FieldFindsTheFirstOfANameInAnyCaseWithoutTheWhitespaceAround) {
  RequestHead head;
  head.fields = "Host: a\r\nX-Api-Key:  k1 \t\r\nx-api-key: k2\r\nEmpty:\r\n";
  EXPECT_EQ(head.Field("host"), "a");
  EXPECT_EQ(head.Field("X-API-KEY"), "k1");
  EXPECT_EQ(head.Field("Empty"), "");
  EXPECT_EQ(head.Field("X-Api"), std::nullopt);  // a prefix of a name is not the name
  EXPECT_EQ(head.Field("Missing"), std::nullopt);
  EXPECT_EQ(RequestHead{}.Field("Host"), std::nullopt);
}

TEST(WireResponseTest, WritesTheStatusLineTheFieldsInOrderTheLengthAndTheBody) {
  std::string out = "before|";
  WireResponse r(out, 429);
  r.Field("Content-Type", "application/json");
  r.Field("X-RateLimit-Remaining", int64_t{-3});
  r.Fields("A: 1\r\nB: 2\r\n");
  r.Finish(R"({"x":1})");
  EXPECT_EQ(out,
            "before|HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
            "X-RateLimit-Remaining: -3\r\nA: 1\r\nB: 2\r\nContent-Length: 7\r\n\r\n{\"x\":1}");
}

TEST(WireResponseTest, HeadSaysTheLengthItLeavesOutCloseSaysSoAndNoContentHasNoLength) {
  std::string out;
  WireResponse(out, 200, "Fine").Finish("abc", /*head=*/true, /*close=*/true);
  EXPECT_EQ(out, "HTTP/1.1 200 Fine\r\nContent-Length: 3\r\nConnection: close\r\n\r\n");
  out.clear();
  WireResponse(out, 204).Finish("ignored");
  EXPECT_EQ(out, "HTTP/1.1 204 No Content\r\n\r\n");
}

TEST(WireResponseTest, AKeepAliveResponseAppendedToCloseIsTheResponseWrittenToClose) {
  for (const unsigned status : {200u, 204u, 429u}) {
    std::string keep_alive;
    WireResponse kept(keep_alive, status);
    kept.Field("X-A", "1");
    kept.Finish("body\r\n\r\nwith an empty line");
    std::string closing;
    WireResponse closed(closing, status);
    closed.Field("X-A", "1");
    closed.Finish("body\r\n\r\nwith an empty line", /*head=*/false, /*close=*/true);
    std::string out = "before|";
    AppendWireResponse(keep_alive, /*close=*/true, out);
    EXPECT_EQ(out, "before|" + closing) << status;
    out.clear();
    AppendWireResponse(keep_alive, /*close=*/false, out);
    EXPECT_EQ(out, keep_alive) << status;
  }
}

}  // namespace
}  // namespace ringlimit::node
