// The client library against one real ringlimitd: decisions, batches, GET checks, inspect/reset, errors
// as values (the server's code and message; connection failures; timeouts) and retries on another node.
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <future>
#include <set>

#include "client/client.h"
#include "tests/support/node_process.h"

namespace ringlimit::client {
namespace {

using testing::NodeProcess;
using namespace std::chrono_literals;

constexpr const char* kToken = "s3cret";

std::string Address(uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

// A port nothing listens on (bound, then released).
uint16_t DeadPort() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

Check Inline(std::string key, uint64_t limit, uint64_t cost = 1) {
  return Check{
      .key = std::move(key), .cost = cost, .algorithm = "fixed_window", .limit = limit, .window_ms = 60'000};
}

class ClientNodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto dir = std::filesystem::temp_directory_path() / ("rl-client-policies-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    policies_ = dir / "policies.json";
    ASSERT_TRUE(testing::WriteFile(policies_, R"({"policies":{"api":{"limits":[
      {"name":"per_minute","algorithm":"token_bucket","limit":2,"window_ms":60000},
      {"name":"per_hour","algorithm":"sliding_window","limit":100,"window_ms":3600000}]}}})"));
    testing::NodeProcessOptions options;
    options.args = {"--threads", "2", "--admin-token", kToken, "--policies", policies_.string()};
    auto node = NodeProcess::Start(options);
    ASSERT_TRUE(node) << node.error();
    node_ = node->release();
  }
  static void TearDownTestSuite() {
    delete node_;
    node_ = nullptr;
    std::filesystem::remove_all(policies_.parent_path());
  }

  std::unique_ptr<Client> MakeClient(ClientOptions o = {}) {
    if (o.nodes == ClientOptions{}.nodes) o.nodes = {Address(node_->http_port())};
    auto c = Client::Create(std::move(o));
    EXPECT_TRUE(c) << c.error().ToString();
    return c ? std::move(*c) : nullptr;
  }

  static inline NodeProcess* node_ = nullptr;
  static inline std::filesystem::path policies_;
};

TEST_F(ClientNodeTest, AllowsUpToTheLimitThenDenies) {
  auto client = MakeClient();
  for (int i = 0; i < 3; ++i) {
    auto r = client->Check(Inline("allow-deny", 3));
    ASSERT_TRUE(r) << r.error().ToString();
    EXPECT_TRUE(r->allowed) << i;
    ASSERT_EQ(r->results.size(), 1u);
    EXPECT_EQ(r->results[0].remaining, static_cast<uint64_t>(2 - i));
    EXPECT_EQ(r->results[0].limit, 3u);
    EXPECT_EQ(r->results[0].key, "allow-deny");
    EXPECT_EQ(r->results[0].sent_to, Address(node_->http_port()));
  }
  auto denied = client->Check(Inline("allow-deny", 3));
  ASSERT_TRUE(denied) << denied.error().ToString();
  EXPECT_FALSE(denied->allowed);
  EXPECT_FALSE(denied->results[0].allowed);
  EXPECT_GT(denied->results[0].retry_after_ms, 0);
  // A cost the limit can never admit: retry_after -1.
  auto never = client->Check(Inline("allow-deny-2", 3, 5));
  ASSERT_TRUE(never);
  EXPECT_EQ(never->results[0].retry_after_ms, -1);
}

TEST_F(ClientNodeTest, BatchKeepsRequestOrderAndIsAllOrNothingPerKey) {
  auto client = MakeClient();
  std::vector<Check> batch = {Inline("batch-a", 5, 3), Inline("batch-b", 5, 1),
                              Check{.key = "batch-p", .policy = "api"}, Inline("batch-c", 1, 1)};
  auto r = client->Check(batch);
  ASSERT_TRUE(r) << r.error().ToString();
  ASSERT_EQ(r->results.size(), 5u);  // the policy expands to its two limits
  EXPECT_EQ(r->results[0].key, "batch-a");
  EXPECT_EQ(r->results[1].key, "batch-b");
  EXPECT_EQ(r->results[2].name, "api/per_minute");
  EXPECT_EQ(r->results[3].name, "api/per_hour");
  EXPECT_EQ(r->results[4].key, "batch-c");
  EXPECT_TRUE(r->allowed);
  // Second round: batch-a (3 + 3 > 5) and batch-c are refused; the others pass.
  r = client->Check(batch);
  ASSERT_TRUE(r) << r.error().ToString();
  EXPECT_FALSE(r->allowed);
  EXPECT_FALSE(r->results[0].allowed);
  EXPECT_TRUE(r->results[1].allowed);
  EXPECT_TRUE(r->results[2].allowed);
  EXPECT_FALSE(r->results[4].allowed);
}

TEST_F(ClientNodeTest, ConcurrentAsyncChecksAreCountedExactly) {
  auto client = MakeClient({.io_threads = 2});
  constexpr int kKeys = 8, kPerKey = 40, kLimit = 10;
  std::atomic<int> allowed{0}, errors{0}, pending{kKeys * kPerKey};
  std::promise<void> all_done;
  for (int i = 0; i < kKeys * kPerKey; ++i) {
    client->AsyncCheck({Inline("async-" + std::to_string(i % kKeys), kLimit)}, [&](Result<CheckResponse> r) {
      if (!r) {
        errors++;
      } else if (r->allowed) {
        allowed++;
      }
      if (--pending == 0) all_done.set_value();
    });
  }
  ASSERT_EQ(all_done.get_future().wait_for(20s), std::future_status::ready);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(allowed.load(), kKeys * kLimit);
}

TEST_F(ClientNodeTest, GetCheckAnswersWithTheStatusCode) {
  auto client = MakeClient();
  auto first = client->CheckGet(Inline("get-key", 1));
  ASSERT_TRUE(first) << first.error().ToString();
  EXPECT_EQ(first->http_status, 200);
  EXPECT_TRUE(first->allowed);
  auto second = client->CheckGet(Inline("get-key", 1));
  ASSERT_TRUE(second) << second.error().ToString();
  EXPECT_EQ(second->http_status, 429);
  EXPECT_FALSE(second->allowed);
  auto bad = client->CheckGet(Check{.key = "get-key", .limit = 0, .window_ms = 1000});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().http_status, 400);
  EXPECT_EQ(bad.error().code, "invalid_field");
}

TEST_F(ClientNodeTest, InspectAndResetWithTheAdminToken) {
  auto client = MakeClient({.admin_token = kToken});
  ASSERT_TRUE(client->Check(Inline("inspect-me", 10, 4)));
  auto info = client->Inspect("inspect-me");
  ASSERT_TRUE(info) << info.error().ToString();
  EXPECT_EQ(info->key, "inspect-me");
  ASSERT_EQ(info->states.size(), 1u);
  EXPECT_EQ(info->states[0].name, "default");
  EXPECT_EQ(info->states[0].algorithm, "fixed_window");
  EXPECT_EQ(info->states[0].remaining, 6u);

  auto removed = client->Reset("inspect-me");
  ASSERT_TRUE(removed) << removed.error().ToString();
  EXPECT_EQ(*removed, 1u);
  info = client->Inspect("inspect-me");
  ASSERT_TRUE(info);
  EXPECT_TRUE(info->states.empty());

  auto unknown = client->Inspect("never-seen");
  ASSERT_TRUE(unknown);
  EXPECT_TRUE(unknown->states.empty());
}

TEST_F(ClientNodeTest, ServerErrorsComeBackAsValues) {
  auto no_token = MakeClient();
  auto reset = no_token->Reset("whatever");
  ASSERT_FALSE(reset);
  EXPECT_EQ(reset.error().kind, Error::Kind::kServer);
  EXPECT_EQ(reset.error().http_status, 401);
  EXPECT_EQ(reset.error().code, "unauthorized");

  auto bad = no_token->Check(Check{.key = "bad", .limit = 10, .window_ms = 0});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().kind, Error::Kind::kServer);
  EXPECT_EQ(bad.error().http_status, 400);
  EXPECT_EQ(bad.error().code, "invalid_field");
  EXPECT_NE(bad.error().message.find("checks[0].window_ms"), std::string::npos) << bad.error().message;
  EXPECT_EQ(bad.error().node, Address(node_->http_port()));

  auto policy = no_token->Check(Check{.key = "k", .policy = "nope"});
  ASSERT_FALSE(policy);
  EXPECT_EQ(policy.error().code, "unknown_policy");

  auto empty = no_token->Check(std::vector<Check>{});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().kind, Error::Kind::kInvalidArgument);
  EXPECT_FALSE(Client::Create({.nodes = {"no-port"}}));
  EXPECT_FALSE(Client::Create({.nodes = {}}));
}

TEST_F(ClientNodeTest, NodeDownIsAConnectionError) {
  auto client = MakeClient({.nodes = {Address(DeadPort())}, .timeout = 1000ms, .max_attempts = 2});
  const auto start = std::chrono::steady_clock::now();
  auto r = client->Check(Inline("down", 1));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, Error::Kind::kConnect) << r.error().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  auto info = client->Inspect("down");
  ASSERT_FALSE(info);
  EXPECT_EQ(info.error().kind, Error::Kind::kConnect);
}

TEST_F(ClientNodeTest, SilentNodeTimesOut) {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor silent(io, {boost::asio::ip::make_address("127.0.0.1"), 0});  // never reads
  auto client =
      MakeClient({.nodes = {Address(silent.local_endpoint().port())}, .timeout = 300ms, .max_attempts = 1});
  const auto start = std::chrono::steady_clock::now();
  auto r = client->Check(Inline("silent", 1));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, Error::Kind::kTimeout) << r.error().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST_F(ClientNodeTest, RetriesOnAnotherNode) {
  const std::string dead = Address(DeadPort());
  auto client = MakeClient({.nodes = {dead, Address(node_->http_port())}, .max_attempts = 2});
  std::set<std::string> answered_by;
  for (int i = 0; i < 6; ++i) {  // round robin starts at the dead node every other call
    auto r = client->Check(Inline("retry-" + std::to_string(i), 5));
    ASSERT_TRUE(r) << r.error().ToString();
    answered_by.insert(r->results[0].sent_to);
  }
  EXPECT_EQ(answered_by, std::set<std::string>{Address(node_->http_port())});
  // One attempt only: the calls that start at the dead node fail.
  auto once = MakeClient({.nodes = {dead, Address(node_->http_port())}, .max_attempts = 1});
  int failures = 0;
  for (int i = 0; i < 4; ++i) failures += once->Check(Inline("once", 100)) ? 0 : 1;
  EXPECT_EQ(failures, 2);
}

TEST_F(ClientNodeTest, KilledNodeIsAConnectionErrorOnAKeptAliveConnection) {
  testing::NodeProcessOptions options;
  options.args = {"--threads", "1"};
  auto own = NodeProcess::Start(options);
  ASSERT_TRUE(own) << own.error();
  const std::string address = Address((*own)->http_port());
  auto client = MakeClient({.nodes = {address}});
  ASSERT_TRUE(client->Check(Inline("restart", 5)));
  ASSERT_TRUE((*own)->Kill());
  auto down = client->Check(Inline("restart", 5));
  ASSERT_FALSE(down);
  EXPECT_EQ(down.error().kind, Error::Kind::kConnect);
}

}  // namespace
}  // namespace ringlimit::client
