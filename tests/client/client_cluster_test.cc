// The client library against a 3-node cluster of real ringlimitd processes: ring-aware routing sends each
// key straight to its owner (the owner in the results is the node the client sent to, and the client's
// ring agrees with the nodes' GET /v1/ring), batches split by owner come back in request order, and the
// client refreshes its ring after a node is killed and after a node is added. Plain mode through one
// node gets forwarded answers.
#include <gtest/gtest.h>

#include <chrono>
#include <map>

#include "client/client.h"
#include "client/ring_routes.h"
#include "tests/cluster/cluster_harness.h"

// tests/cluster/cluster_harness.cc calls boost::json::value_to<> without including its definition
// (<boost/json/value_to.hpp>), so it links only where another translation unit instantiates it. Do so
// here until the harness includes it.
#include <boost/json/value_to.hpp>
template uint64_t boost::json::value_to<uint64_t>(const boost::json::value&);
template uint32_t boost::json::value_to<uint32_t>(const boost::json::value&);

namespace ringlimit::client {
namespace {

using testing::Cluster;
using namespace std::chrono_literals;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kSlowdown = 3;
#else
constexpr int kSlowdown = 1;
#endif

std::string Address(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

Check Inline(std::string key) {
  return Check{
      .key = std::move(key), .name = "t", .algorithm = "fixed_window", .limit = 1000, .window_ms = 3'600'000};
}

std::unique_ptr<Client> RingAwareClient(std::vector<std::string> nodes) {
  auto c = Client::Create(
      {.nodes = std::move(nodes), .ring_aware = true, .timeout = 1500ms, .min_refresh_interval = 50ms});
  EXPECT_TRUE(c) << c.error().ToString();
  return c ? std::move(*c) : nullptr;
}

// Polls `condition` until it holds or `timeout` passes.
bool Eventually(std::chrono::milliseconds timeout, const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return condition();
}

TEST(ClientClusterTest, RingAwareChecksGoStraightToTheOwner) {
  auto started = Cluster::Start({.nodes = 3});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  auto client = RingAwareClient({Address(cluster.http_port(0))});
  ASSERT_TRUE(client->Refresh());
  auto routes = client->routes();
  ASSERT_NE(routes, nullptr);
  ASSERT_EQ(routes->Members().size(), 3u);

  std::map<std::string, int> per_owner;
  for (int k = 0; k < 60; ++k) {
    const std::string key = "direct-" + std::to_string(k);
    const Route owner = routes->Owner(key);
    auto ring = testing::FetchRing(cluster.http_port(k % 3), key);
    ASSERT_TRUE(ring) << ring.error();
    EXPECT_EQ(ring->owner, owner.id) << key;  // the client's ring is the nodes' ring

    auto r = client->Check(Inline(key));
    ASSERT_TRUE(r) << r.error().ToString();
    ASSERT_EQ(r->results.size(), 1u);
    EXPECT_EQ(r->results[0].owner, owner.id) << key;
    EXPECT_EQ(r->results[0].sent_to, owner.http_address) << key;  // decided where it was sent: no hop
    auto g = client->CheckGet(Inline(key));
    ASSERT_TRUE(g) << g.error().ToString();
    if (!g->owner.empty()) {
      EXPECT_EQ(g->owner, owner.id);
    }
    per_owner[owner.id]++;
  }
  EXPECT_EQ(per_owner.size(), 3u);  // every node was an owner

  // One batch over many owners: split, sent in parallel, merged back in request order.
  std::vector<Check> batch;
  for (int k = 0; k < 30; ++k) batch.push_back(Inline("batch-" + std::to_string(k)));
  auto r = client->Check(batch);
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(r->results.size(), batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(r->results[i].key, batch[i].key);
    EXPECT_EQ(r->results[i].owner, routes->Owner(batch[i].key).id);
    EXPECT_EQ(r->results[i].remaining, 999u);
  }
}

TEST(ClientClusterTest, PlainModeThroughOneNodeIsForwarded) {
  auto started = Cluster::Start({.nodes = 3});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  auto client = Client::Create({.nodes = {Address(cluster.http_port(0))}});
  ASSERT_TRUE(client);
  auto ring_aware = RingAwareClient({Address(cluster.http_port(0))});
  ASSERT_TRUE(ring_aware->Refresh());
  int forwarded = 0;
  for (int k = 0; k < 30; ++k) {
    const std::string key = "plain-" + std::to_string(k);
    auto r = (*client)->Check(Inline(key));
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(r->results[0].sent_to, Address(cluster.http_port(0)));
    EXPECT_EQ(r->results[0].owner, ring_aware->routes()->Owner(key).id);
    forwarded += r->results[0].owner != cluster.id(0) ? 1 : 0;
  }
  EXPECT_GT(forwarded, 0);
  // Both clients charge the same counter.
  auto again = ring_aware->Check(Inline("plain-0"));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->results[0].remaining, 998u);
}

TEST(ClientClusterTest, RefreshesAfterANodeIsKilledAndAfterANodeJoins) {
  auto started = Cluster::Start({.nodes = 3});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  auto client = RingAwareClient({Address(cluster.http_port(0)), Address(cluster.http_port(1))});
  ASSERT_TRUE(client->Refresh());
  const std::string victim = cluster.id(2);
  ASSERT_TRUE(client->routes()->Contains(victim));
  std::vector<std::string> victim_keys;
  for (int k = 0; victim_keys.size() < 5; ++k) {
    const std::string key = "kill-" + std::to_string(k);
    if (client->routes()->Owner(key).id == victim) victim_keys.push_back(key);
  }

  ASSERT_TRUE(cluster.Kill(2));
  // Checks on the dead owner's keys keep working (retried on the next member of the ring) ...
  for (const std::string& key : victim_keys) {
    auto r = client->Check(Inline(key));
    ASSERT_TRUE(r) << key << ": " << r.error().ToString();
    EXPECT_NE(r->results[0].owner, victim);
  }
  // ... and once the cluster declared the node dead, the client's ring drops it and every key is again
  // decided by the node it was sent to.
  ASSERT_TRUE(Eventually(20s * kSlowdown, [&] {
    (void)client->Check(Inline(victim_keys[0]));
    return client->routes() != nullptr && !client->routes()->Contains(victim);
  })) << cluster.Logs();
  for (const std::string& key : victim_keys) {
    auto r = client->Check(Inline(key));
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(r->results[0].owner, client->routes()->Owner(key).id);
    EXPECT_EQ(r->results[0].sent_to, client->routes()->Owner(key).http_address);
  }

  // A new node joins: keys it now owns come back with owner n4 from their old owner, and the client
  // refreshes and sends them to n4 directly.
  auto added = cluster.AddNode();
  ASSERT_TRUE(added) << added.error();
  ASSERT_TRUE(cluster.WaitConverged()) << cluster.Logs();
  const std::string newcomer = cluster.id(*added);
  int k = 0;
  ASSERT_TRUE(Eventually(20s * kSlowdown, [&] {
    (void)client->Check(Inline("join-" + std::to_string(k++ % 50)));
    return client->routes()->Contains(newcomer);
  }));
  bool direct_to_newcomer = false;
  for (int j = 0; j < 50 && !direct_to_newcomer; ++j) {
    const std::string key = "join-" + std::to_string(j);
    auto r = client->Check(Inline(key));
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_EQ(r->results[0].owner, client->routes()->Owner(key).id);
    direct_to_newcomer =
        r->results[0].owner == newcomer && r->results[0].sent_to == Address(cluster.http_port(*added));
  }
  EXPECT_TRUE(direct_to_newcomer);
}

}  // namespace
}  // namespace ringlimit::client
