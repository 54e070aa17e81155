// Envoy's rate limit service on a 3-node cluster: every node answers for every descriptor, and the key's
// owner decides, so one descriptor has one counter wherever it is asked.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "tests/cluster/cluster_harness.h"
#include "tests/rls/rls_test_util.h"

namespace ringlimit::testing {
namespace {

using Code = rlsv3::RateLimitResponse;
constexpr int kNodes = 3;

class RlsClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ =
        std::filesystem::temp_directory_path() / ("rls_cluster_test_" + std::to_string(getpid()) + ".yaml");
    ASSERT_TRUE(WriteFile(path_, kRlsConfig));
    ClusterOptions options;
    options.nodes = kNodes;
    options.args = {"--threads", "2", "--grpc-listen", "127.0.0.1:0", "--rls-config", path_.string()};
    auto started = Cluster::Start(options);
    ASSERT_TRUE(started) << started.error();
    cluster_ = std::move(*started);
    for (int i = 0; i < kNodes; ++i) {
      auto port = cluster_->node(static_cast<size_t>(i)).port("grpc_port");
      ASSERT_TRUE(port.has_value());
      clients_.push_back(std::make_unique<RlsClient>(*port));
    }
  }
  void TearDown() override {
    clients_.clear();
    cluster_.reset();
    std::filesystem::remove(path_);
  }

  std::filesystem::path path_;
  std::unique_ptr<Cluster> cluster_;
  std::vector<std::unique_ptr<RlsClient>> clients_;
};

TEST_F(RlsClusterTest, OneDescriptorSharesOneCounterThroughEveryNode) {
  // remote_address: 3 per hour. One hit through each node, then every node says OVER_LIMIT.
  const rlsv3::RateLimitRequest request = MakeRequest("edge", {{{"remote_address", "192.0.2.7"}}});
  for (int i = 0; i < kNodes; ++i) {
    RlsAnswer a = clients_[static_cast<size_t>(i)]->Call(request);
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.response.overall_code(), Code::OK) << "node " << i;
    EXPECT_EQ(a.response.statuses(0).limit_remaining(), static_cast<uint32_t>(kNodes - 1 - i))
        << "node " << i;
  }
  for (int i = 0; i < kNodes; ++i) {
    RlsAnswer a = clients_[static_cast<size_t>(i)]->Call(request);
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.response.overall_code(), Code::OVER_LIMIT) << "node " << i;
  }
  // Descriptors of one request are routed to their own owners.
  RlsAnswer mixed = clients_[0]->Call(MakeRequest(
      "edge", {{{"path", "/a"}}, {{"path", "/b"}}, {{"path", "/c"}}, {{"remote_address", "192.0.2.7"}}}));
  ASSERT_TRUE(mixed.status.ok()) << mixed.status.error_message();
  EXPECT_EQ(mixed.response.overall_code(), Code::OVER_LIMIT);
  for (int d = 0; d < 3; ++d) EXPECT_EQ(mixed.response.statuses(d).limit_remaining(), 4u);
  EXPECT_EQ(mixed.response.statuses(3).code(), Code::OVER_LIMIT);
}

TEST_F(RlsClusterTest, ConcurrentClientsAcrossNodesAdmitExactlyTheLimit) {
  // exact: 40 per hour per value; 16 threads over 3 nodes, 3 descriptors' worth of keys, 20 calls each.
  constexpr int kThreads = 16;
  constexpr int kCalls = 20;
  const std::vector<std::string> values = {"k1", "k2", "k3"};
  std::vector<std::atomic<int>> admitted(values.size());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const RlsClient& client = *clients_[static_cast<size_t>(t % kNodes)];
      for (int c = 0; c < kCalls; ++c) {
        const size_t v = static_cast<size_t>((t + c) % static_cast<int>(values.size()));
        RlsAnswer a = client.Call(MakeRequest("edge", {{{"exact", values[v]}}}));
        if (!a.status.ok()) {
          failures.fetch_add(1);
          continue;
        }
        if (a.response.overall_code() == Code::OK) admitted[v].fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  int total = 0;
  for (size_t v = 0; v < values.size(); ++v) {
    EXPECT_EQ(admitted[v].load(), 40) << values[v];
    total += admitted[v].load();
  }
  EXPECT_EQ(total, 120);  // 320 calls for 3 x 40
}

}  // namespace
}  // namespace ringlimit::testing
