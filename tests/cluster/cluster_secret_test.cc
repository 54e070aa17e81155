// --cluster-secret at process level: nodes sharing the secret form a cluster and forward to each other;
// a node with another secret never joins (its handshakes are refused and counted by the members it
// tries), a member announcing more virtual nodes than --max-member-vnodes is refused, and bytes that are not
// the peer protocol are dropped on the peer port without harming the node.
#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <sstream>

#include "tests/cluster/cluster_test_util.h"

namespace ringlimit::testing {
namespace {

constexpr char kSecret[] = "correct horse battery staple";

// The value of the sample `name{labels}` in the node's /metrics (labels as written, e.g.
// `side="server",what="auth_failures"`); -1 when absent or unreadable.
int64_t MetricValue(uint16_t http_port, const std::string& name, const std::string& labels) {
  HttpClient client(http_port);
  auto response = client.Get("/metrics");
  if (!response || response->result_int() != 200) return -1;
  const std::string prefix = name + "{" + labels + "} ";
  std::istringstream lines(response->body());
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(prefix)) return std::stoll(line.substr(prefix.size()));
  }
  return -1;
}

// A server-side peer transport error counter (ringlimit_peer_errors_total{side="server",error=...}).
int64_t PeerServerErrors(uint16_t http_port, const std::string& error) {
  return MetricValue(http_port, "ringlimit_peer_errors_total", "side=\"server\",error=\"" + error + "\"");
}

class ClusterSecretTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = Cluster::Start({.nodes = 2, .args = {"--threads", "2", "--cluster-secret", kSecret}});
    ASSERT_TRUE(started) << started.error();
    cluster_ = std::move(*started);
  }

  // Both nodes still serve and still see exactly each other alive.
  void ExpectClusterIntact() {
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_TRUE(cluster_->running(i)) << cluster_->id(i) << " died:\n" << cluster_->Logs();
      auto view = FetchClusterView(cluster_->http_port(i));
      ASSERT_TRUE(view) << view.error();
      EXPECT_EQ(view->IdsInState("alive"), (std::vector<std::string>{"n1", "n2"})) << cluster_->id(i);
      EXPECT_EQ(view->members.size(), 2u) << cluster_->id(i);
    }
  }

  std::unique_ptr<Cluster> cluster_;
};

TEST_F(ClusterSecretTest, NodesWithTheSameSecretFormAClusterAndForward) {
  ExpectClusterIntact();
  auto view = FetchClusterView(cluster_->http_port(0));
  ASSERT_TRUE(view) << view.error();
  const auto ring = RingOfAlive(*view);
  const std::string remote = KeyOwnedBy(*ring, "n2", "secret-");
  HttpClient client(cluster_->http_port(0));
  auto outcome = PostCheck(client, remote);
  ASSERT_TRUE(outcome) << outcome.error();
  EXPECT_EQ(outcome->status, 200) << outcome->body;
  EXPECT_EQ(outcome->owner, "n2") << outcome->body;  // forwarded over the authenticated connection
  EXPECT_EQ(PeerServerErrors(cluster_->http_port(0), "auth_failure"), 0);
  EXPECT_EQ(PeerServerErrors(cluster_->http_port(1), "auth_failure"), 0);
}

TEST_F(ClusterSecretTest, ANodeWithAnotherSecretCannotJoin) {
  const int64_t before = PeerServerErrors(cluster_->http_port(0), "auth_failure");
  ASSERT_GE(before, 0);
  NodeProcessOptions options;
  options.args = {"--threads",        "1",
                  "--node-id",        "intruder",
                  "--cluster-secret", "wrong secret",
                  "--join",           "127.0.0.1:" + std::to_string(cluster_->peer_port(0))};
  // It keeps trying to join and never becomes ready: the start fails once this timeout has passed.
  options.start_timeout = std::chrono::milliseconds(2'500 * kSlowdown);
  auto intruder = NodeProcess::Start(std::move(options));
  ASSERT_FALSE(intruder) << "a node with the wrong secret became ready";

  // n1 refused its handshakes and counted them.
  auto counted = WaitFor(
      "n1 counts refused handshakes", std::chrono::milliseconds(5'000 * kSlowdown), [&](std::string* why) {
        const int64_t now = PeerServerErrors(cluster_->http_port(0), "auth_failure");
        *why = "auth_failures " + std::to_string(now) + ", before " + std::to_string(before);
        return now > before;
      });
  EXPECT_TRUE(counted) << counted.error();
  ExpectClusterIntact();  // the intruder is not a member anywhere
  for (size_t i = 0; i < 2; ++i) {
    auto view = FetchClusterView(cluster_->http_port(i));
    ASSERT_TRUE(view) << view.error();
    EXPECT_EQ(view->Find("intruder"), nullptr) << cluster_->id(i) << " lists the intruder";
  }
}

// A member that knows the secret but announces 4096 virtual nodes (it would own ~99% of the ring) is
// refused by members keeping the default --max-member-vnodes 512: counted, never listed, and the keys stay
// with the members that were there.
TEST_F(ClusterSecretTest, AMemberAnnouncingTooManyVnodesIsRefused) {
  const auto refused = [&](size_t i) {
    return MetricValue(cluster_->http_port(i), "ringlimit_membership_dropped_records_total",
                       "reason=\"too_many_vnodes\"");
  };
  ASSERT_EQ(refused(0), 0);
  NodeProcessOptions options;
  options.args = {
      "--threads",           "1",     "--node-id", "greedy",
      "--cluster-secret",    kSecret, "--vnodes",  "4096",
      "--max-member-vnodes", "4096",  "--join",    "127.0.0.1:" + std::to_string(cluster_->peer_port(0))};
  options.ready_path = "/healthz";  // it may never become ready: nobody takes it in
  auto greedy = NodeProcess::Start(std::move(options));
  ASSERT_TRUE(greedy) << greedy.error();
  auto counted = WaitFor("n1 and n2 refuse the greedy member's records",
                         std::chrono::milliseconds(10'000 * kSlowdown), [&](std::string* why) {
                           *why =
                               "refused " + std::to_string(refused(0)) + " / " + std::to_string(refused(1));
                           return refused(0) > 0 && refused(1) > 0;
                         });
  EXPECT_TRUE(counted) << counted.error() << "\n" << (*greedy)->Log();
  ExpectClusterIntact();  // exactly n1 and n2, alive, on both
  auto view = FetchClusterView(cluster_->http_port(0));
  ASSERT_TRUE(view) << view.error();
  for (int k = 0; k < 20; ++k) {
    HttpClient client(cluster_->http_port(1));
    auto outcome = PostCheck(client, "greedy-" + std::to_string(k));
    ASSERT_TRUE(outcome) << outcome.error();
    EXPECT_TRUE(outcome->owner == "n1" || outcome->owner == "n2") << outcome->body;
  }
}

TEST_F(ClusterSecretTest, GarbageOnThePeerPortIsDroppedAndCounted) {
  const uint16_t http = cluster_->http_port(1);
  const int64_t before = PeerServerErrors(http, "auth_failure") + PeerServerErrors(http, "malformed_frame") +
                         PeerServerErrors(http, "oversized_frame");
  namespace asio = boost::asio;
  using tcp = asio::ip::tcp;
  // An HTTP request (its first 4 bytes read as a huge frame length), a frame of random bytes within the
  // handshake limit, and an empty frame: each connection is closed by the node.
  const std::vector<std::string> garbage = {
      "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
      std::string("\x00\x00\x00\x10", 4) + "\xde\xad\xbe\xef\x01\x02\x03\x04\xff\xfe\xfd\xfc\x10\x20\x30\x40",
      std::string("\x00\x00\x00\x00", 4),
  };
  for (const std::string& bytes : garbage) {
    asio::io_context io;
    tcp::socket socket(io);
    boost::system::error_code ec;
    socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), cluster_->peer_port(1)), ec);
    ASSERT_FALSE(ec) << ec.message();
    asio::write(socket, asio::buffer(bytes), ec);
    ASSERT_FALSE(ec) << ec.message();
    // The node may send its Hello first; then it must close the connection (EOF or reset), not wait.
    // A bounded read: the socket gets a receive timeout so a node that kept it open fails the test.
    struct timeval tv {
      .tv_sec = 10 * kSlowdown, .tv_usec = 0
    };
    ASSERT_EQ(setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    char buffer[4096];
    size_t total = 0;
    for (;;) {
      const size_t n = socket.read_some(asio::buffer(buffer), ec);
      total += n;
      if (ec) break;
      ASSERT_LT(total, 1u << 20) << "the node keeps sending";
    }
    EXPECT_TRUE(ec == asio::error::eof || ec == asio::error::connection_reset)
        << "connection not closed by the node: " << ec.message();
  }
  auto counted = WaitFor("n2 counts the dropped connections", std::chrono::milliseconds(5'000 * kSlowdown),
                         [&](std::string* why) {
                           const int64_t now = PeerServerErrors(http, "auth_failure") +
                                               PeerServerErrors(http, "malformed_frame") +
                                               PeerServerErrors(http, "oversized_frame");
                           *why = std::to_string(now - before) + " counted";
                           return now >= before + static_cast<int64_t>(garbage.size());
                         });
  EXPECT_TRUE(counted) << counted.error();
  ExpectClusterIntact();
  // And forwarding between the members still works.
  auto view = FetchClusterView(cluster_->http_port(0));
  ASSERT_TRUE(view) << view.error();
  const std::string remote = KeyOwnedBy(*RingOfAlive(*view), "n2", "after-garbage-");
  HttpClient client(cluster_->http_port(0));
  auto outcome = PostCheck(client, remote);
  ASSERT_TRUE(outcome) << outcome.error();
  EXPECT_EQ(outcome->owner, "n2") << outcome->body;
}

}  // namespace
}  // namespace ringlimit::testing
