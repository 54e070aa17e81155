// 3- and 5-node clusters of real ringlimitd processes: every node answers every key, every result
// names the owner the ring says (checked against GET /v1/ring and against a RingView the test builds
// from the reported members), and one key's counter is shared by all nodes.
#include <cmath>

#include "tests/cluster/cluster_test_util.h"

namespace ringlimit::testing {
namespace {

constexpr int kKeys = 60;
constexpr size_t kReplicas = 3;  // ringlimitd's default --replicas: the length of a preference list

class ClusterRoutingTest : public ::testing::TestWithParam<int> {};

TEST_P(ClusterRoutingTest, EveryNodeAnswersEveryKeyWithTheRingOwner) {
  const int n = GetParam();
  auto started = Cluster::Start({.nodes = n});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;

  // Every node reports the same members, with their addresses, and shares that match the ring the test
  // computes from those members.
  auto first = FetchClusterView(cluster.http_port(0));
  ASSERT_TRUE(first) << first.error();
  const auto ring = RingOfAlive(*first);
  ASSERT_NE(ring, nullptr);
  ASSERT_EQ(ring->members().size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto view = FetchClusterView(cluster.http_port(i));
    ASSERT_TRUE(view) << view.error();
    EXPECT_EQ(view->node_id, cluster.id(i));
    EXPECT_GT(view->ring_version, 0u);
    // The fingerprint is the ring's content: the same on every node, and the one of the ring the test
    // builds from the same members.
    EXPECT_EQ(view->ring_fingerprint, FingerprintHex(*ring)) << cluster.id(i);
    ASSERT_EQ(view->members.size(), static_cast<size_t>(n)) << cluster.id(i);
    double total_share = 0;
    for (int j = 0; j < n; ++j) {
      const MemberView* m = view->Find(cluster.id(j));
      ASSERT_NE(m, nullptr) << cluster.id(i) << " does not list " << cluster.id(j);
      EXPECT_EQ(m->state, "alive");
      EXPECT_EQ(m->vnodes, ring::kDefaultVnodes);
      EXPECT_EQ(m->http_address, "127.0.0.1:" + std::to_string(cluster.http_port(j)));
      EXPECT_EQ(m->peer_address, "127.0.0.1:" + std::to_string(cluster.peer_port(j)));
      EXPECT_NEAR(m->share, ring->OwnedShare(m->id), 1e-3) << cluster.id(i) << " about " << m->id;
      total_share += m->share;
    }
    EXPECT_NEAR(total_share, 1.0, 1e-3);
  }

  // Every key through every node: the result, the GET header and /v1/ring all name the computed owner.
  std::map<std::string, int> keys_per_owner;
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = "route-" + std::to_string(k);
    const std::string owner = OwnerOf(*ring, key);
    keys_per_owner[owner]++;
    for (int i = 0; i < n; ++i) {
      HttpClient client(cluster.http_port(i));
      auto posted = PostCheck(client, key);
      ASSERT_TRUE(posted) << posted.error();
      EXPECT_EQ(posted->status, 200) << posted->body;
      EXPECT_EQ(posted->owner, owner) << key << " via " << cluster.id(i) << ": " << posted->body;
      auto got = GetCheck(client, key);
      ASSERT_TRUE(got) << got.error();
      EXPECT_EQ(got->status, 200) << got->body;
      EXPECT_EQ(got->owner, owner) << key << " via " << cluster.id(i) << " (RateLimit-Owner)";
      auto answer = FetchRing(cluster.http_port(i), key);
      ASSERT_TRUE(answer) << answer.error();
      EXPECT_EQ(answer->owner, owner) << key << " via " << cluster.id(i);
      EXPECT_EQ(answer->preference_list, PreferenceOf(*ring, key, kReplicas)) << key;
    }
  }
  // The keys above exercised every node as an owner (so also every forwarding path).
  for (int i = 0; i < n; ++i) EXPECT_GT(keys_per_owner[cluster.id(i)], 0) << cluster.id(i);
}

TEST_P(ClusterRoutingTest, OneKeySharesOneCounterAcrossAllNodes) {
  const int n = GetParam();
  auto started = Cluster::Start({.nodes = n});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;

  // A limit of 2n: two checks through each node use it up, in order, and then every node refuses.
  const CheckSpec spec{
      .algorithm = "token_bucket", .limit = static_cast<uint64_t>(2 * n), .window_ms = 86'400'000};
  for (int k = 0; k < 5; ++k) {
    const std::string key = "shared-" + std::to_string(k);
    uint64_t expected_remaining = spec.limit;
    std::string owner;
    for (int round = 0; round < 2; ++round) {
      for (int i = 0; i < n; ++i) {
        HttpClient client(cluster.http_port(i));
        auto outcome = PostCheck(client, key, spec);
        ASSERT_TRUE(outcome) << outcome.error();
        ASSERT_EQ(outcome->status, 200) << outcome->body;
        EXPECT_TRUE(outcome->allowed) << key << " via " << cluster.id(i);
        EXPECT_EQ(outcome->remaining, --expected_remaining) << key << " via " << cluster.id(i);
        if (owner.empty()) owner = outcome->owner;
        EXPECT_EQ(outcome->owner, owner);
      }
    }
    for (int i = 0; i < n; ++i) {
      HttpClient client(cluster.http_port(i));
      auto outcome = GetCheck(client, key, spec);
      ASSERT_TRUE(outcome) << outcome.error();
      EXPECT_EQ(outcome->status, 429) << key << " via " << cluster.id(i) << ": " << outcome->body;
    }
  }
  // Every check sent through a node other than its key's owner was forwarded and answered: 3 of each key's
  // 3n checks per non-owner node, each timed in ringlimit_forward_duration_seconds.
  double forwarded = 0;
  for (int i = 0; i < n; ++i) {
    forwarded += MetricSample(cluster.http_port(i), "ringlimit_forward_duration_seconds_count").value_or(0);
  }
  EXPECT_GE(forwarded, 5 * 3 * (n - 1));
  // The owners shipped the changes to their replicas: acknowledged batches are in the lag histogram.
  auto shipped =
      WaitFor("an acknowledged replication batch", std::chrono::milliseconds(10'000), [&](std::string*) {
        double batches = 0;
        for (int i = 0; i < n; ++i) {
          batches +=
              MetricSample(cluster.http_port(i), "ringlimit_replication_batch_lag_seconds_count").value_or(0);
        }
        return batches >= 1;
      });
  EXPECT_TRUE(shipped) << shipped.error();
}

INSTANTIATE_TEST_SUITE_P(Sizes, ClusterRoutingTest, ::testing::Values(3, 5),
                         [](const auto& info) { return std::to_string(info.param) + "Nodes"; });

}  // namespace
}  // namespace ringlimit::testing
