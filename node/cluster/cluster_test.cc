// In-process clusters: several Cluster instances on ephemeral loopback ports, one io_context, fast SWIM
// timings. Conditions are polled with deadlines.
#include "node/cluster/cluster.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "node/cluster/cluster_endpoints.h"
#include "node/cluster/cluster_forward_host.h"
#include "node/forward/forwarder.h"
#include "node/peer/peer_test_util.h"
#include "ring/token.h"

namespace ringlimit::cluster {
namespace {

using peer::testing::IoThreads;
using peer::testing::WaitFor;
using std::chrono::milliseconds;

ClusterOptions FastOptions(const std::string& id, std::vector<std::string> seeds = {}) {
  ClusterOptions options;
  options.node_id = id;
  options.http_address = "127.0.0.1:1";
  options.seeds = std::move(seeds);
  options.vnodes = 64;
  options.membership.probe_interval = milliseconds(40);
  options.membership.probe_timeout = milliseconds(15);
  options.membership.suspicion_timeout = milliseconds(300);
  options.membership.join_retry_interval = milliseconds(50);
  options.membership.sync_interval = milliseconds(500);
  return options;
}

// Whether `c` sees exactly `ids` alive (and nothing else in the ring).
bool SeesAlive(const Cluster& c, const std::vector<std::string>& ids) {
  auto snap = c.Snapshot();
  if (snap->ring == nullptr || snap->ring->members().size() != ids.size()) return false;
  for (const auto& id : ids) {
    const ring::MemberInfo* m = snap->Find(id);
    if (m == nullptr || m->state != ring::MemberState::kAlive) return false;
  }
  return true;
}

std::optional<ring::MemberState> StateOf(const Cluster& c, const std::string& id) {
  auto snap = c.Snapshot();
  const ring::MemberInfo* m = snap->Find(id);
  if (m == nullptr) return std::nullopt;
  return m->state;
}

// A decider that charges nothing and answers "allowed" with owner = `id` (what the API does is tested
// in node/api and tests/cluster; here only the routing).
LocalDecider EchoDecider(std::string id, std::atomic<int>* calls) {
  return
      [id, calls](const peer::ForwardCheckRequest& request, std::vector<node::ForwardedOutcome>& outcomes) {
        calls->fetch_add(1);
        outcomes.clear();
        for (const auto& check : request.checks()) {
          node::ForwardedOutcome& result = outcomes.emplace_back();
          result.check_id = check.check_id();
          result.owner = id;
          result.allowed = true;
          for (int i = 0; i < check.limits_size(); ++i) result.decisions.emplace_back().allowed = true;
        }
      };
}

struct Member {
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<ClusterForwardHost> host;
  std::unique_ptr<Forwarder> forwarder;
  std::atomic<int> served{0};
};

std::unique_ptr<Member> StartMember(IoThreads& io, const std::string& id,
                                    std::vector<std::string> seeds = {}) {
  auto m = std::make_unique<Member>();
  m->cluster = std::make_unique<Cluster>(io.io(), FastOptions(id, std::move(seeds)));
  m->host = std::make_unique<ClusterForwardHost>(*m->cluster);
  m->forwarder = std::make_unique<Forwarder>(*m->host, ForwarderOptions{.timeout = milliseconds(300)},
                                             EchoDecider(id, &m->served));
  m->host->RegisterHandler(*m->forwarder);
  const Status started = m->cluster->Start();
  EXPECT_TRUE(started.ok()) << started.ToString();
  return m;
}

// Forward synchronously (bounded).
std::optional<peer::ForwardedResult> ForwardSync(Forwarder& f, const std::string& key) {
  peer::ForwardedCheck check;
  check.set_key(key);
  check.set_cost(1);
  check.set_hops(1);
  check.add_limits()->set_name("default");
  auto promise = std::make_shared<std::promise<std::optional<peer::ForwardedResult>>>();
  auto future = promise->get_future();
  f.Forward(std::move(check),
            [promise](std::optional<peer::ForwardedResult> r) { promise->set_value(std::move(r)); });
  EXPECT_EQ(future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  return future.get();
}

// A key whose owner on `c`'s ring is `id`.
std::string KeyOwnedBy(const Cluster& c, const std::string& id) {
  auto view = c.ring().Current();
  for (int i = 0;; ++i) {
    std::string key = "user:" + std::to_string(i);
    if (view->Owner(ring::RingToken(key))->id == id) return key;
  }
}

TEST(ClusterTest, ValidatesNodeIds) {
  EXPECT_TRUE(ValidateNodeId("n1").ok());
  EXPECT_TRUE(ValidateNodeId("node-1.a_b").ok());
  EXPECT_FALSE(ValidateNodeId("").ok());
  EXPECT_FALSE(ValidateNodeId("a b").ok());
  EXPECT_FALSE(ValidateNodeId(std::string(65, 'x')).ok());
  ClusterOptions bad = FastOptions("n1");
  bad.vnodes = 0;
  EXPECT_FALSE(Validate(bad).ok());
}

TEST(ClusterTest, AloneIsReadyAtOnce) {
  IoThreads io(2);
  auto a = StartMember(io, "a");
  ASSERT_TRUE(WaitFor([&] { return a->cluster->ready(); }));
  EXPECT_TRUE(SeesAlive(*a->cluster, {"a"}));
  EXPECT_GE(a->cluster->ring().version(), 1u);
  // Every key is local.
  std::vector<std::string_view> keys = {"x", "y", "z"};
  std::vector<uint8_t> remote(keys.size());
  a->forwarder->Classify(keys, remote);
  EXPECT_EQ(remote, std::vector<uint8_t>({0, 0, 0}));
}

TEST(ClusterTest, ThreeMembersConvergeAndDetectACrash) {
  IoThreads io(2);
  auto a = StartMember(io, "a");
  const std::string seed = a->cluster->peer_address();
  auto b = StartMember(io, "b", {seed});
  auto c = StartMember(io, "c", {seed});
  const std::vector<std::string> all = {"a", "b", "c"};
  ASSERT_TRUE(WaitFor([&] {
    return SeesAlive(*a->cluster, all) && SeesAlive(*b->cluster, all) && SeesAlive(*c->cluster, all) &&
           a->cluster->ready() && b->cluster->ready() && c->cluster->ready();
  }));
  // Same members, same ring, bit for bit.
  EXPECT_EQ(a->cluster->ring().Current()->fingerprint(), b->cluster->ring().Current()->fingerprint());
  EXPECT_EQ(a->cluster->ring().Current()->fingerprint(), c->cluster->ring().Current()->fingerprint());

  // A crash (no goodbye): the others declare it dead and drop it from the ring.
  c->cluster->Stop();
  ASSERT_TRUE(WaitFor([&] {
    return StateOf(*a->cluster, "c") == ring::MemberState::kDead &&
           StateOf(*b->cluster, "c") == ring::MemberState::kDead && SeesAlive(*a->cluster, {"a", "b"}) &&
           SeesAlive(*b->cluster, {"a", "b"});
  }));
}

TEST(ClusterTest, LeaveIsAnnouncedAndReported) {
  IoThreads io(2);
  auto a = StartMember(io, "a");
  auto b = StartMember(io, "b", {a->cluster->peer_address()});
  ASSERT_TRUE(WaitFor([&] {
    return SeesAlive(*a->cluster, {"a", "b"}) && SeesAlive(*b->cluster, {"a", "b"});
  }));
  std::atomic<bool> left{false};
  ClusterEndpoints endpoints(*b->cluster, *b->forwarder, *b->host, [&] { left = true; });
  endpoints.Leave();
  ASSERT_TRUE(WaitFor([&] { return left.load(); }));
  EXPECT_FALSE(b->cluster->ready());
  ASSERT_TRUE(WaitFor([&] { return StateOf(*a->cluster, "b") == ring::MemberState::kLeft; }));
  EXPECT_TRUE(SeesAlive(*a->cluster, {"a"}));
}

TEST(ClusterTest, ForwardsToTheOwnerAndFallsBack) {
  IoThreads io(2);
  auto a = StartMember(io, "a");
  auto b = StartMember(io, "b", {a->cluster->peer_address()});
  ASSERT_TRUE(WaitFor([&] {
    return SeesAlive(*a->cluster, {"a", "b"}) && SeesAlive(*b->cluster, {"a", "b"});
  }));

  const std::string remote_key = KeyOwnedBy(*a->cluster, "b");
  const std::string local_key = KeyOwnedBy(*a->cluster, "a");
  std::vector<std::string_view> keys = {remote_key, local_key};
  std::vector<uint8_t> remote(keys.size());
  a->forwarder->Classify(keys, remote);
  EXPECT_EQ(remote, std::vector<uint8_t>({1, 0}));

  auto result = ForwardSync(*a->forwarder, remote_key);
  ASSERT_TRUE(result);
  EXPECT_EQ(result->owner(), "b");
  EXPECT_EQ(b->served.load(), 1);
  EXPECT_EQ(a->forwarder->stats().forwarded, 1u);

  // The owner is gone but still in a's ring: the next node of the preference list is a itself.
  b->cluster->Stop();
  auto fallback = ForwardSync(*a->forwarder, remote_key);
  EXPECT_FALSE(fallback);  // decide locally
  EXPECT_GE(a->forwarder->stats().failures, 1u);
  EXPECT_EQ(a->forwarder->stats().fallback_local, 1u);
}

// Sends one ForwardedCheck for `key` with `hops` to `to`'s peer port as if from member `from`, and
// returns the id of the node that decided it.
std::string ServeForwarded(Member& sender, const Member& to, const std::string& from, const std::string& key,
                           uint32_t hops, const std::vector<std::string>& tried = {}) {
  peer::ForwardCheckRequest request;
  request.set_from(from);
  for (const std::string& id : tried) request.add_tried(id);
  peer::ForwardedCheck* check = request.add_checks();
  check->set_key(key);
  check->set_cost(1);
  check->set_hops(hops);
  check->add_limits()->set_name("default");
  auto promise = std::make_shared<std::promise<std::string>>();
  auto future = promise->get_future();
  sender.cluster->client().Call(
      to.cluster->peer_address(), peer::METHOD_FORWARD_CHECK, request.SerializeAsString(),
      [promise](peer::PeerResult result) {
        peer::ForwardCheckResponse response;
        if (!result.ok() || !response.ParseFromString(result.payload()) || response.results_size() != 1) {
          promise->set_value("(failed)");
          return;
        }
        promise->set_value(response.results(0).owner());
      });
  EXPECT_EQ(future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  return future.get();
}

// The hop limit: a receiver whose ring gives the key to another node passes a first-hop check on once
// (never back to its sender); a check at the hop limit is answered from the receiver's own view.
TEST(ClusterTest, ForwardedChecksMakeAtMostTwoHops) {
  IoThreads io(2);
  auto a = StartMember(io, "a");
  auto b = StartMember(io, "b", {a->cluster->peer_address()});
  auto c = StartMember(io, "c", {a->cluster->peer_address()});
  ASSERT_TRUE(WaitFor([&] {
    return SeesAlive(*a->cluster, {"a", "b", "c"}) && SeesAlive(*b->cluster, {"a", "b", "c"}) &&
           SeesAlive(*c->cluster, {"a", "b", "c"});
  }));
  const std::string key = KeyOwnedBy(*b->cluster, "c");

  // At the hop limit b disagrees about ownership but answers from its own view.
  EXPECT_EQ(ServeForwarded(*a, *b, "a", key, kMaxHops), "b");
  EXPECT_EQ(b->served.load(), 1);
  EXPECT_EQ(c->served.load(), 0);
  EXPECT_EQ(b->forwarder->stats().passed_on, 0u);

  // A first hop from a sender with another ring: b passes it on to the owner on its ring.
  EXPECT_EQ(ServeForwarded(*a, *b, "a", key, 1), "c");
  EXPECT_EQ(c->served.load(), 1);
  EXPECT_EQ(b->forwarder->stats().passed_on, 1u);

  // Never back to the sender: c sent it, so b decides whatever its ring says.
  EXPECT_EQ(ServeForwarded(*c, *b, "c", key, 1), "b");
  EXPECT_EQ(b->served.load(), 2);
  EXPECT_EQ(c->served.load(), 1);

  // Nor to a holder the sender tried already: a tried c (it did not answer a) and b decides.
  EXPECT_EQ(ServeForwarded(*a, *b, "a", key, 1, {"c"}), "b");
  EXPECT_EQ(b->served.load(), 3);
  EXPECT_EQ(c->served.load(), 1);
  EXPECT_EQ(b->forwarder->stats().passed_on, 1u);
}

// A node still joining holds no ring: it neither routes HTTP checks (Routing) nor decides forwarded ones
// -- after a restart its counters are nothing or a stale copy until the owners' handoffs arrive -- so a
// sender that already lists it in its ring fails over to the key's next node.
TEST(ClusterTest, ANodeStillJoiningRefusesForwardedChecks) {
  IoThreads io(2);
  auto a = StartMember(io, "a");
  // b's only seed is a port nobody listens on: it keeps joining.
  auto b = StartMember(io, "b", {"127.0.0.1:1"});
  ASSERT_TRUE(WaitFor([&] { return a->forwarder->Routing(); }));  // a's ring of itself is built
  EXPECT_FALSE(b->forwarder->Routing());
  EXPECT_EQ(ServeForwarded(*a, *b, "a", "user:1", 1), "(failed)");
  EXPECT_EQ(b->served.load(), 0);
  EXPECT_EQ(b->forwarder->stats().refused, 1u);
}

TEST(ClusterTest, DescribesMembersAndPlacement) {
  IoThreads io(2);
  auto a = StartMember(io, "a");
  auto b = StartMember(io, "b", {a->cluster->peer_address()});
  ASSERT_TRUE(WaitFor([&] {
    return SeesAlive(*a->cluster, {"a", "b"}) && SeesAlive(*b->cluster, {"a", "b"});
  }));
  ClusterEndpoints endpoints(*a->cluster, *a->forwarder, *a->host, [] {});
  const node::ClusterView view = endpoints.Describe();
  EXPECT_EQ(view.node_id, "a");
  ASSERT_EQ(view.members.size(), 2u);
  EXPECT_EQ(view.members[0].id, "a");
  EXPECT_EQ(view.members[1].id, "b");
  EXPECT_NEAR(view.members[0].share + view.members[1].share, 1.0, 1e-9);
  EXPECT_EQ(view.members[1].peer_address, b->cluster->peer_address());
  const node::KeyPlacementView place = endpoints.Place("user:1");
  ASSERT_EQ(place.preference_list.size(), 2u);
  EXPECT_EQ(place.owner, place.preference_list[0].id);
  EXPECT_EQ(place.token, ring::RingToken("user:1"));
  std::string metrics;
  endpoints.AppendMetrics(&metrics);
  EXPECT_NE(metrics.find("ringlimit_cluster_members{state=\"alive\"} 2"), std::string::npos) << metrics;
}

}  // namespace
}  // namespace ringlimit::cluster
