// Bad input on the cluster endpoints and flags: clear 4xx JSON errors (or a clean refusal to start),
// never a crash, and the node keeps serving.
#include <unistd.h>

#include <cctype>

#include "tests/cluster/cluster_test_util.h"

namespace ringlimit::testing {
namespace {

constexpr char kToken[] = "cluster-admin";

class ClusterBadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = Cluster::Start({.nodes = 2, .args = {"--threads", "2", "--admin-token", kToken}});
    ASSERT_TRUE(started) << started.error();
    cluster_ = std::move(*started);
  }

  // The node still answers, and still sees both members alive.
  void ExpectStillServing(size_t i) {
    HttpClient client(cluster_->http_port(i));
    auto ready = client.Get("/readyz");
    ASSERT_TRUE(ready) << ready.error().message();
    EXPECT_EQ(ready->result_int(), 200);
    auto view = FetchClusterView(cluster_->http_port(i));
    ASSERT_TRUE(view) << view.error();
    EXPECT_EQ(view->IdsInState("alive"), (std::vector<std::string>{"n1", "n2"}));
  }

  std::unique_ptr<Cluster> cluster_;
};

TEST_F(ClusterBadInputTest, RingWithoutAKeyIs400Json) {
  HttpClient client(cluster_->http_port(0));
  for (const char* target : {"/v1/ring", "/v1/ring?key=", "/v1/ring?other=1"}) {
    auto response = client.Get(target);
    ASSERT_TRUE(response) << response.error().message();
    EXPECT_EQ(response->result_int(), 400) << target << ": " << response->body();
    EXPECT_NE(ErrorCode(*response), "") << target << ": not a JSON error: " << response->body();
  }
  ExpectStillServing(0);
}

TEST_F(ClusterBadInputTest, RingAnswersOddButValidKeys) {
  HttpClient client(cluster_->http_port(0));
  for (const char* key : {"a%20b", "%C3%A9t%C3%A9", "x%3Dy%26z", "k%00k"}) {
    auto response = client.Get(std::string("/v1/ring?key=") + key);
    ASSERT_TRUE(response) << response.error().message();
    // Either an answer naming a member, or a clear 400: never a 5xx or a dropped connection.
    if (response->result_int() == 200) {
      const std::string owner = StringField(JsonBody(*response), "owner");
      EXPECT_TRUE(owner == "n1" || owner == "n2") << key << ": " << response->body();
    } else {
      EXPECT_EQ(response->result_int(), 400) << key << ": " << response->body();
      EXPECT_NE(ErrorCode(*response), "") << response->body();
    }
  }
  ExpectStillServing(0);
}

TEST_F(ClusterBadInputTest, LeaveWithoutTheAdminTokenIs401AndTheNodeStays) {
  HttpClient client(cluster_->http_port(1));
  for (const Headers& headers : {Headers{}, Headers{{"Authorization", "Bearer wrong"}},
                                 Headers{{"Authorization", std::string("Basic ") + kToken}}}) {
    auto response = client.Post("/v1/cluster/leave", "", headers);
    ASSERT_TRUE(response) << response.error().message();
    EXPECT_EQ(response->result_int(), 401) << response->body();
    EXPECT_NE(ErrorCode(*response), "") << "not a JSON error: " << response->body();
  }
  EXPECT_TRUE(cluster_->running(1));
  ExpectStillServing(1);
  ExpectStillServing(0);
}

TEST_F(ClusterBadInputTest, WrongMethodsOnClusterEndpointsAreRefused) {
  HttpClient client(cluster_->http_port(0));
  auto get_leave = client.Get("/v1/cluster/leave", {{"Authorization", std::string("Bearer ") + kToken}});
  ASSERT_TRUE(get_leave) << get_leave.error().message();
  EXPECT_GE(get_leave->result_int(), 400) << get_leave->body();
  EXPECT_LT(get_leave->result_int(), 500) << get_leave->body();
  auto post_cluster = client.Post("/v1/cluster", "{}");
  ASSERT_TRUE(post_cluster) << post_cluster.error().message();
  EXPECT_GE(post_cluster->result_int(), 400) << post_cluster->body();
  EXPECT_LT(post_cluster->result_int(), 500) << post_cluster->body();
  ExpectStillServing(0);
}

// Flags the cluster added: invalid values make ringlimitd refuse to start (and say why) instead of
// running with a half-valid configuration.
// A node that has not joined its cluster (its seed never answers) does not know the keys' owners: it
// answers every kind of check 503 not_ready with a JSON body (clients retry elsewhere), instead of
// deciding keys from what it has; the rest of its API works.
TEST(ClusterJoiningTest, ANodeThatHasNotJoinedAnswersChecks503) {
  NodeProcessOptions options;
  options.args = {"--threads", "1", "--peer-listen", "127.0.0.1:0", "--join", "127.0.0.1:1"};
  options.ready_path = "/healthz";
  auto node = NodeProcess::Start(std::move(options));
  ASSERT_TRUE(node) << node.error();
  HttpClient client((*node)->http_port());
  auto ready = client.Get("/readyz");
  ASSERT_TRUE(ready) << ready.error().message();
  EXPECT_EQ(ready->result_int(), 503);
  const std::vector<std::pair<std::string, std::string>> posts = {
      {"/v1/check",
       R"({"checks":[{"key":"k","limits":[{"algorithm":"fixed_window","limit":5,"window_ms":1000}]}]})"},
      {"/v1/GetRateLimits",
       R"({"requests":[{"name":"n","unique_key":"k","hits":1,"limit":5,"duration":1000}]})"},
  };
  for (const auto& [path, body] : posts) {
    auto response = client.Post(path, body);
    ASSERT_TRUE(response) << response.error().message();
    EXPECT_EQ(response->result_int(), 503) << path << ": " << response->body();
    if (path == "/v1/GetRateLimits") {  // Gubernator's gateway form: UNAVAILABLE
      EXPECT_NE(response->body().find(R"("code":14)"), std::string::npos) << response->body();
    } else {
      EXPECT_EQ(ErrorCode(*response), "not_ready") << path << ": " << response->body();
    }
  }
  auto get = client.Get("/v1/check?key=k&algorithm=fixed_window&limit=5&window_ms=1000");
  ASSERT_TRUE(get) << get.error().message();
  EXPECT_EQ(get->result_int(), 503) << get->body();
  EXPECT_EQ(ErrorCode(*get), "not_ready") << get->body();
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health) << health.error().message();
  EXPECT_EQ(health->result_int(), 200);
  EXPECT_TRUE((*node)->running());
}

// Identity: a node started with the id of a live member (n1) at another address is refused on both sides --
// the member it joins through keeps n1 as it was and counts the conflict; the newcomer stays joining (503
// on /readyz), logs why, and counts it too -- and the cluster's ring does not change.
TEST_F(ClusterBadInputTest, ANodeWithATakenIdIsRefusedOnBothSides) {
  const auto before = FetchClusterView(cluster_->http_port(1));
  ASSERT_TRUE(before) << before.error();
  NodeProcessOptions options;
  options.args = {
      "--threads",     "1",           "--node-id", "n1",
      "--peer-listen", "127.0.0.1:0", "--join",    "127.0.0.1:" + std::to_string(cluster_->peer_port(1))};
  options.env = {cluster_->SecretEnv()};
  options.ready_path = "/healthz";
  auto twin = NodeProcess::Start(std::move(options));
  ASSERT_TRUE(twin) << twin.error();
  auto refused = WaitFor("both sides to count the conflict", std::chrono::milliseconds(10'000 * kSlowdown),
                         [&](std::string* last) {
                           const double seed = MetricSample(cluster_->http_port(1),
                                                            "ringlimit_membership_dropped_records_total",
                                                            R"(reason="id_conflict")")
                                                   .value_or(0);
                           const double newcomer = MetricSample((*twin)->http_port(),
                                                                "ringlimit_membership_dropped_records_total",
                                                                R"(reason="id_conflict")")
                                                       .value_or(0);
                           *last = "n2 " + std::to_string(seed) + ", newcomer " + std::to_string(newcomer);
                           return seed >= 1 && newcomer >= 1;
                         });
  ASSERT_TRUE(refused) << refused.error() << "\n" << (*twin)->Log() << cluster_->Logs();
  HttpClient client((*twin)->http_port());
  auto ready = client.Get("/readyz");
  ASSERT_TRUE(ready) << ready.error().message();
  EXPECT_EQ(ready->result_int(), 503);
  EXPECT_NE((*twin)->Log().find("this node's id n1 is taken by the live member at 127.0.0.1:" +
                                std::to_string(cluster_->peer_port(0))),
            std::string::npos)
      << (*twin)->Log();
  EXPECT_NE(cluster_->Logs().find("announcing id n1: the live member at"), std::string::npos);
  for (size_t i = 0; i < 2; ++i) {
    auto view = FetchClusterView(cluster_->http_port(i));
    ASSERT_TRUE(view) << view.error();
    const MemberView* n1 = view->Find("n1");
    ASSERT_NE(n1, nullptr);
    EXPECT_EQ(n1->peer_address, "127.0.0.1:" + std::to_string(cluster_->peer_port(0)));
    EXPECT_EQ(view->ring_fingerprint, before->ring_fingerprint);
  }
  ExpectStillServing(0);
  ExpectStillServing(1);
}

// Without --node-id a node is "<host name>-<http port>": unique across hosts and across the nodes of one.
TEST(ClusterIdentityTest, TheDefaultIdIsTheHostNameAndTheHttpPort) {
  NodeProcessOptions options;
  options.args = {"--threads", "1"};
  auto node = NodeProcess::Start(std::move(options));
  ASSERT_TRUE(node) << node.error();
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  std::string expected = name;
  for (char& c : expected) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '-';
  }
  expected += "-" + std::to_string((*node)->http_port());
  if (expected.size() > 64) GTEST_SKIP() << "host name too long to compare simply";
  auto view = FetchClusterView((*node)->http_port());
  ASSERT_TRUE(view) << view.error();
  EXPECT_EQ(view->node_id, expected);
}

TEST(ClusterFlagsTest, InvalidClusterFlagsAreRefusedAtStart) {
  const std::vector<std::vector<std::string>> bad = {
      {"--node-id", "has space"},    {"--node-id", std::string(65, 'x')},
      {"--peer-listen", "nonsense"}, {"--peer-listen", "127.0.0.1:99999"},
      {"--join", "no-port"},         {"--vnodes", "0"},
      {"--replicas", "0"},
  };
  for (const auto& args : bad) {
    NodeProcessOptions options;
    options.args = args;
    // An ephemeral peer port, so that only the flag under test can make the start fail.
    if (args[0] != "--peer-listen")
      options.args.insert(options.args.begin(), {"--peer-listen", "127.0.0.1:0"});
    options.start_timeout = std::chrono::milliseconds(10'000 * kSlowdown);
    auto node = NodeProcess::Start(std::move(options));
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    ASSERT_FALSE(node) << shown << "was accepted";
    EXPECT_NE(node.error().find("exited with status"), std::string::npos) << shown << ": " << node.error();
  }
}

}  // namespace
}  // namespace ringlimit::testing
