// 64 client connections hammer one key whose limit is 1000: exactly 1000 requests are admitted, no
// matter how the node's threads interleave them.
#include <atomic>
#include <thread>

#include "tests/node/node_test_util.h"

namespace ringlimit::testing {
namespace {

constexpr int kConnections = 64;
constexpr int kRequestsPerConnection = 40;  // 2560 requests for a limit of 1000
constexpr int kLimit = 1000;

class NodeConcurrencyTest : public NodeTest {
 protected:
  std::vector<std::string> Args() override { return {"--threads", "4"}; }
};

TEST_F(NodeConcurrencyTest, SixtyFourConnectionsOnOneKeyAdmitExactlyTheLimit) {
  // A one-hour window so that nothing refills during the test.
  const std::string target =
      "/v1/check?key=hot&name=hammer&algorithm=fixed_window&limit=" + std::to_string(kLimit) +
      "&window_ms=3600000";
  std::atomic<int> allowed{0}, denied{0}, failed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kConnections; ++c) {
    clients.emplace_back([&] {
      HttpClient client(node_->http_port(), std::chrono::seconds(20));
      for (int i = 0; i < kRequestsPerConnection; ++i) {
        auto response = client.Get(target);
        if (!response) {
          failed.fetch_add(1);
        } else if (response->result_int() == 200) {
          allowed.fetch_add(1);
        } else if (response->result_int() == 429) {
          denied.fetch_add(1);
        } else {
          failed.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(allowed.load(), kLimit);
  EXPECT_EQ(denied.load(), kConnections * kRequestsPerConnection - kLimit);

  // The stored state agrees: nothing left.
  auto state = client_->Get("/v1/keys/hot");
  ASSERT_TRUE(state);
  EXPECT_EQ(JsonBody(*state).at("states").at(0).at("remaining"), 0);
}

TEST_F(NodeConcurrencyTest, SixtyFourConnectionsPostingBatchesAdmitExactlyTheLimit) {
  // Each request carries 10 checks on 10 different keys sharing one limit spec; each key gets
  // 64 * 4 = 256 attempts for a limit of 100.
  constexpr int kKeys = 10, kPerKeyLimit = 100, kBatchesPerConnection = 4;
  std::string body = R"({"checks":[)";
  for (int k = 0; k < kKeys; ++k) {
    if (k > 0) body += ",";
    body += R"({"key":"batch)" + std::to_string(k) + R"(","name":"n","algorithm":"fixed_window","limit":)" +
            std::to_string(kPerKeyLimit) + R"(,"window_ms":3600000})";
  }
  body += "]}";
  std::atomic<int> allowed{0}, failed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < kConnections; ++c) {
    clients.emplace_back([&] {
      HttpClient client(node_->http_port(), std::chrono::seconds(20));
      for (int i = 0; i < kBatchesPerConnection; ++i) {
        auto response = client.Post("/v1/check", body);
        if (!response || response->result_int() != 200) {
          failed.fetch_add(1);
          continue;
        }
        const auto json = JsonBody(*response);
        for (const auto& result : json.at("results").as_array()) {
          if (result.at("allowed").as_bool()) allowed.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(allowed.load(), kKeys * kPerKeyLimit);
}

}  // namespace
}  // namespace ringlimit::testing
