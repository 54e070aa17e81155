// Membership of a cluster of real processes: a joining node is seen alive by all within a bound; a
// SIGKILLed node is declared dead within a bound and the ring drops it (its keys move to their next
// node and keep being answered); the restarted node rejoins and owns its keys again; while the owner
// of a key is down, checks for that key are answered by the next node of its preference list; a node
// that leaves exits 0 and the others see it gone.
#include <signal.h>

#include "tests/cluster/cluster_test_util.h"

namespace ringlimit::testing {
namespace {

using std::chrono::milliseconds;

// SWIM defaults declare a crashed node dead within about 3 s on loopback; the test allows slack for a
// loaded CI machine (and more under sanitizers).
const milliseconds kDeadBound{(3'000 + 3'000) * kSlowdown};
// A joining node is gossiped to everyone within a few probe periods.
const milliseconds kJoinBound{5'000 * kSlowdown};
// A leaving node announces itself; the others learn it by gossip.
const milliseconds kLeaveBound{5'000 * kSlowdown};

constexpr size_t kReplicas = 3;

// Checks `key` through every running node except `skip` and expects each to be answered (200) by
// `owner`.
void ExpectAnsweredBy(Cluster& cluster, const std::string& key, const std::string& owner,
                      std::optional<size_t> skip = std::nullopt) {
  for (size_t i : cluster.Running()) {
    if (skip && i == *skip) continue;
    HttpClient client(cluster.http_port(i));
    auto outcome = PostCheck(client, key);
    ASSERT_TRUE(outcome) << outcome.error();
    EXPECT_EQ(outcome->status, 200) << key << " via " << cluster.id(i) << ": " << outcome->body;
    EXPECT_EQ(outcome->owner, owner) << key << " via " << cluster.id(i);
  }
}

// The ring as node i sees it now (built by the test from the members node i reports alive).
std::shared_ptr<const ring::RingView> RingSeenBy(Cluster& cluster, size_t i) {
  auto view = FetchClusterView(cluster.http_port(i));
  EXPECT_TRUE(view) << view.error();
  return view ? RingOfAlive(*view) : nullptr;
}

TEST(ClusterMembershipTest, JoiningNodeIsSeenAliveByAllAndTakesOverItsKeys) {
  auto started = Cluster::Start({.nodes = 3});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;

  auto added = cluster.AddNode();
  ASSERT_TRUE(added) << added.error();
  auto waited = cluster.WaitConverged(kJoinBound);
  ASSERT_TRUE(waited) << waited.error();
  std::cout << "[ metric ] n4 seen alive by all " << waited->count() << " ms after it was ready\n";

  // Every node gives n4 a share, and keys the ring places on n4 are answered by n4 through every node.
  for (size_t i = 0; i < cluster.size(); ++i) {
    auto view = FetchClusterView(cluster.http_port(i));
    ASSERT_TRUE(view) << view.error();
    const MemberView* n4 = view->Find("n4");
    ASSERT_NE(n4, nullptr);
    EXPECT_GT(n4->share, 0.1) << cluster.id(i);
  }
  const auto ring = RingSeenBy(cluster, 0);
  ASSERT_NE(ring, nullptr);
  for (int k = 0; k < 5; ++k) {
    ExpectAnsweredBy(cluster, KeyOwnedBy(*ring, "n4", "join-" + std::to_string(k) + "-"), "n4");
  }
}

TEST(ClusterMembershipTest, KilledNodeIsDeclaredDeadDroppedFromTheRingAndRejoinsAfterRestart) {
  auto started = Cluster::Start({.nodes = 4});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  const size_t victim = 2;  // n3
  const auto before = RingSeenBy(cluster, 0);
  ASSERT_NE(before, nullptr);
  std::vector<std::string> keys;
  for (int k = 0; k < 8; ++k) keys.push_back(KeyOwnedBy(*before, "n3", "kill-" + std::to_string(k) + "-"));

  ASSERT_TRUE(cluster.Kill(victim));
  auto dead = cluster.WaitSeenAs(victim, {"dead"}, /*or_absent=*/true, kDeadBound);
  ASSERT_TRUE(dead) << dead.error();
  std::cout << "[ metric ] SIGKILLed n3 declared dead by all survivors after " << dead->count() << " ms\n";

  // The survivors' ring no longer holds n3; its keys went to their next node clockwise, which answers
  // them through every survivor.
  for (size_t i : cluster.Running()) {
    auto view = FetchClusterView(cluster.http_port(i));
    ASSERT_TRUE(view) << view.error();
    if (const MemberView* m = view->Find("n3")) {
      EXPECT_EQ(m->share, 0.0) << cluster.id(i);
    }
    EXPECT_EQ(view->IdsInState("alive"), (std::vector<std::string>{"n1", "n2", "n4"})) << cluster.id(i);
  }
  for (const auto& key : keys) {
    const std::string successor = PreferenceOf(*before, key, kReplicas)[1];
    for (size_t i : cluster.Running()) {
      auto answer = FetchRing(cluster.http_port(i), key);
      ASSERT_TRUE(answer) << answer.error();
      EXPECT_EQ(answer->owner, successor) << key << " via " << cluster.id(i);
    }
    ExpectAnsweredBy(cluster, key, successor);
  }

  // Restarted on the same id and peer address, n3 rejoins and owns its keys again.
  ASSERT_TRUE(cluster.Restart(victim));
  auto rejoined = cluster.WaitConverged(kJoinBound);
  ASSERT_TRUE(rejoined) << rejoined.error();
  std::cout << "[ metric ] restarted n3 seen alive by all " << rejoined->count()
            << " ms after it was ready\n";
  // Until the successor has handed the keys back (with the counts it kept), n3 passes their checks to it.
  auto handed_back = cluster.WaitHandoffsDone(kJoinBound);
  ASSERT_TRUE(handed_back) << handed_back.error();
  for (const auto& key : keys) ExpectAnsweredBy(cluster, key, "n3");
}

TEST(ClusterMembershipTest, ChecksForAKilledOwnersKeyAreAnsweredByTheNextNode) {
  auto started = Cluster::Start({.nodes = 3});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  const auto ring = RingSeenBy(cluster, 0);
  ASSERT_NE(ring, nullptr);
  const std::string key = KeyOwnedBy(*ring, "n2", "fallback-");
  const std::string successor = PreferenceOf(*ring, key, kReplicas)[1];
  ExpectAnsweredBy(cluster, key, "n2");

  // From the moment n2 dies until well after it is declared dead, every check of its key through the
  // other nodes is answered, by the next node of the preference list.
  ASSERT_TRUE(cluster.Kill(1));
  const auto deadline = std::chrono::steady_clock::now() + kDeadBound + milliseconds(1000);
  int checks = 0, failures = 0;
  std::string first_failure;
  std::vector<std::unique_ptr<HttpClient>> clients;
  for (size_t i : {size_t{0}, size_t{2}})
    clients.push_back(std::make_unique<HttpClient>(cluster.http_port(i)));
  while (std::chrono::steady_clock::now() < deadline) {
    for (auto& client : clients) {
      auto outcome = PostCheck(*client, key);
      ++checks;
      if (outcome && outcome->status == 200 && outcome->owner == successor) continue;
      ++failures;
      if (first_failure.empty()) {
        first_failure = outcome ? std::to_string(outcome->status) + " " + outcome->body : outcome.error();
      }
    }
  }
  EXPECT_EQ(failures, 0) << "of " << checks << " checks; first: " << first_failure;
  std::cout << "[ metric ] " << checks << " checks for a dead owner's key, " << failures
            << " not answered by " << successor << "\n";
  // And by now n2 is dead everywhere.
  auto dead = cluster.WaitSeenAs(1, {"dead"}, /*or_absent=*/true, milliseconds(1000));
  EXPECT_TRUE(dead) << dead.error();
}

TEST(ClusterMembershipTest, LeavingNodeExitsZeroAndTheOthersSeeItGone) {
  auto started = Cluster::Start({.nodes = 3, .args = {"--threads", "2", "--admin-token", "s3cret"}});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  const auto ring = RingSeenBy(cluster, 0);
  ASSERT_NE(ring, nullptr);
  const std::string key = KeyOwnedBy(*ring, "n3", "leave-");
  const std::string successor = PreferenceOf(*ring, key, kReplicas)[1];

  HttpClient client(cluster.http_port(2));
  auto response = client.Post("/v1/cluster/leave", "", {{"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(response) << response.error().message();
  EXPECT_EQ(response->result_int(), 202) << response->body();
  EXPECT_EQ(StringField(JsonBody(*response), "node_id"), "n3") << response->body();
  EXPECT_EQ(StringField(JsonBody(*response), "state"), "leaving") << response->body();

  auto exited = cluster.node(2).WaitExit(kLeaveBound + milliseconds(10'000));
  ASSERT_TRUE(exited) << exited.error();
  EXPECT_EQ(*exited, 0) << cluster.node(2).Log();
  auto gone = cluster.WaitSeenAs(2, {"left"}, /*or_absent=*/true, kLeaveBound);
  ASSERT_TRUE(gone) << gone.error();
  std::cout << "[ metric ] n3 seen left by the others " << gone->count() << " ms after it exited\n";

  for (size_t i : cluster.Running()) {
    auto view = FetchClusterView(cluster.http_port(i));
    ASSERT_TRUE(view) << view.error();
    if (const MemberView* m = view->Find("n3")) {
      EXPECT_EQ(m->share, 0.0);
    }
    EXPECT_EQ(view->IdsInState("alive"), (std::vector<std::string>{"n1", "n2"})) << cluster.id(i);
  }
  ExpectAnsweredBy(cluster, key, successor);
}

}  // namespace
}  // namespace ringlimit::testing
