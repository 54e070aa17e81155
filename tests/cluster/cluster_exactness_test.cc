// Exactness across nodes: 64 concurrent clients spread over the nodes of a 3-node cluster check 500
// keys with hard limits; whatever node a check arrives at and however the checks interleave, each key
// admits exactly `limit` checks, because each key is decided in one place (its owner).
#include <array>
#include <atomic>
#include <thread>

#include "tests/cluster/cluster_test_util.h"

namespace ringlimit::testing {
namespace {

constexpr int kNodes = 3;
constexpr int kClients = 64;
constexpr int kKeys = 500;
constexpr uint64_t kLimit = 20;
constexpr int kAttemptsPerKey = 26;              // 6 more than the limit
constexpr int kConsecutive = 2;                  // items i..i+1 hit the same key: contention from two nodes
constexpr int kItems = kKeys * kAttemptsPerKey;  // 13000 checks

struct Case {
  const char* algorithm;
  const char* threads;  // --threads of every node ("1": one thread, connections without strands)
};

class ClusterExactnessTest : public ::testing::TestWithParam<Case> {};

TEST_P(ClusterExactnessTest, SixtyFourClientsOverAllNodesAdmitExactlyTheLimitPerKey) {
  auto started = Cluster::Start({.nodes = kNodes, .args = {"--threads", GetParam().threads}});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  std::vector<uint16_t> ports;
  for (int i = 0; i < kNodes; ++i) ports.push_back(cluster.http_port(i));

  // A long window: nothing refills during the test (a token bucket of 20 per day refills one token
  // every 72 minutes).
  const CheckSpec spec{.algorithm = GetParam().algorithm, .limit = kLimit, .window_ms = 86'400'000};
  const std::string prefix = std::string("exact-") + GetParam().algorithm + "-";
  std::array<std::atomic<int>, kKeys> allowed{};
  std::array<std::atomic<int>, kKeys> denied{};
  std::atomic<int> next{0}, failed{0};
  std::mutex failure_mutex;
  std::string first_failure;  // guarded by failure_mutex

  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      HttpClient client(ports[c % kNodes], std::chrono::seconds(10 * kSlowdown));
      // Item i goes to key (i / kConsecutive) % kKeys: consecutive items, taken by different clients on
      // different nodes, race on the same key.
      for (int i = next.fetch_add(1); i < kItems; i = next.fetch_add(1)) {
        const int k = (i / kConsecutive) % kKeys;
        auto outcome = PostCheck(client, prefix + std::to_string(k), spec);
        if (outcome && outcome->status == 200) {
          (outcome->allowed ? allowed : denied)[k].fetch_add(1);
          continue;
        }
        failed.fetch_add(1);
        std::lock_guard lock(failure_mutex);
        if (first_failure.empty()) first_failure = outcome ? outcome->body : outcome.error();
      }
    });
  }
  for (auto& t : clients) t.join();

  EXPECT_EQ(failed.load(), 0) << first_failure;
  int wrong = 0;
  for (int k = 0; k < kKeys; ++k) {
    if (allowed[k].load() != static_cast<int>(kLimit) && ++wrong <= 10) {
      ADD_FAILURE() << "key " << k << ": " << allowed[k].load() << " admitted, " << denied[k].load()
                    << " denied (limit " << kLimit << ")";
    }
    EXPECT_EQ(allowed[k].load() + denied[k].load(), kAttemptsPerKey) << "key " << k;
  }
  EXPECT_EQ(wrong, 0) << "keys with a wrong admitted count";
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ClusterExactnessTest,
                         ::testing::Values(Case{"fixed_window", "2"}, Case{"token_bucket", "2"},
                                           Case{"token_bucket", "1"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.algorithm) + "_threads" + info.param.threads;
                         });

}  // namespace
}  // namespace ringlimit::testing
