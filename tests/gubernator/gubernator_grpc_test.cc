// Gubernator's gRPC service (pb.gubernator.V1 on --grpc-listen) on real ringlimitd processes, through the
// C++ stub generated from proto/gubernator/gubernator.proto: the cases of the HTTP gateway's tests, the
// behaviours where ringlimit follows Gubernator, and one counter per key across a 3-node cluster.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gubernator/gubernator.grpc.pb.h"
#include "tests/cluster/cluster_harness.h"
#include "tests/support/http_client.h"
#include "tests/support/node_process.h"

namespace ringlimit::testing {
namespace {

namespace gpb = ::pb::gubernator;

gpb::RateLimitReq Item(const std::string& key, int64_t hits, int64_t limit, int64_t duration_ms,
                       gpb::Algorithm algorithm = gpb::TOKEN_BUCKET, int behavior = 0) {
  gpb::RateLimitReq req;
  req.set_name("requests_per_hour");
  req.set_unique_key(key);
  req.set_hits(hits);
  req.set_limit(limit);
  req.set_duration(duration_ms);
  req.set_algorithm(algorithm);
  req.set_behavior(static_cast<gpb::Behavior>(behavior));
  return req;
}

struct Answer {
  grpc::Status status;
  gpb::GetRateLimitsResp response;
};

class V1Client {
 public:
  explicit V1Client(uint16_t port)
      : stub_(gpb::V1::NewStub(
            grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()))) {}

  Answer Call(const std::vector<gpb::RateLimitReq>& items) const {
    gpb::GetRateLimitsReq request;
    for (const auto& item : items) *request.add_requests() = item;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    Answer answer;
    answer.status = stub_->GetRateLimits(&context, request, &answer.response);
    return answer;
  }

  // One item; its response (a failed call fails the test).
  gpb::RateLimitResp One(const gpb::RateLimitReq& item) const {
    Answer a = Call({item});
    EXPECT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.response.responses_size(), 1);
    return a.response.responses_size() == 1 ? a.response.responses(0) : gpb::RateLimitResp();
  }

  grpc::Status Health(gpb::HealthCheckResp* response) const {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub_->HealthCheck(&context, gpb::HealthCheckReq(), response);
  }

 private:
  std::unique_ptr<gpb::V1::Stub> stub_;
};

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class GubernatorNodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    NodeProcessOptions options;
    options.args = {"--grpc-listen", "127.0.0.1:0", "--threads", "2"};
    options.start_timeout = std::chrono::seconds(15);
    auto started = NodeProcess::Start(std::move(options));
    ASSERT_TRUE(started) << started.error();
    node_ = started->release();
    auto port = node_->port("grpc_port");
    ASSERT_TRUE(port.has_value()) << "no grpc_port in the port file";
    client_ = new V1Client(*port);
  }
  static void TearDownTestSuite() {
    delete client_;
    delete node_;
  }
  void SetUp() override { ASSERT_NE(client_, nullptr); }

  static NodeProcess* node_;
  static V1Client* client_;
};
NodeProcess* GubernatorNodeTest::node_ = nullptr;
V1Client* GubernatorNodeTest::client_ = nullptr;

TEST_F(GubernatorNodeTest, UnderThenOverLimit) {
  const gpb::RateLimitReq item = Item("account:1", 1, 2, 3'600'000);
  for (int i = 0; i < 2; ++i) {
    const int64_t before = NowMs();
    gpb::RateLimitResp r = client_->One(item);
    EXPECT_EQ(r.status(), gpb::UNDER_LIMIT);
    EXPECT_EQ(r.limit(), 2);
    EXPECT_EQ(r.remaining(), 1 - i);
    EXPECT_EQ(r.error(), "");
    EXPECT_GT(r.reset_time(), before);
    EXPECT_LE(r.reset_time(), NowMs() + 3'600'000);
  }
  gpb::RateLimitResp r = client_->One(item);
  EXPECT_EQ(r.status(), gpb::OVER_LIMIT);
  EXPECT_EQ(r.remaining(), 0);
}

TEST_F(GubernatorNodeTest, ItemsAreIndependentAndErrorsArePerItem) {
  gpb::RateLimitReq no_key = Item("", 1, 5, 1000);
  gpb::RateLimitReq gregorian = Item("b", 1, 5, 1000, gpb::TOKEN_BUCKET, gpb::DURATION_IS_GREGORIAN);
  gpb::RateLimitReq negative = Item("b", -1, 5, 1000);
  Answer a = client_->Call(
      {no_key, Item("b", 1, 5, 60'000), Item("b", 9, 5, 60'000), negative, Item("b", 1, 0, 1000), gregorian});
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  ASSERT_EQ(a.response.responses_size(), 6);
  EXPECT_NE(a.response.responses(0).error().find("unique_key"), std::string::npos);
  EXPECT_EQ(a.response.responses(1).status(), gpb::UNDER_LIMIT);
  EXPECT_EQ(a.response.responses(2).status(), gpb::OVER_LIMIT);  // not all-or-nothing with [1]
  EXPECT_NE(a.response.responses(3).error().find("hits"), std::string::npos);
  EXPECT_EQ(a.response.responses(4).status(), gpb::OVER_LIMIT);  // limit 0
  EXPECT_NE(a.response.responses(5).error().find("GREGORIAN"), std::string::npos);
  // The items of one key are charged in request order: [1] charged 1 and [2] (over) nothing.
  EXPECT_EQ(client_->One(Item("b", 0, 5, 60'000)).remaining(), 4);
}

TEST_F(GubernatorNodeTest, ZeroHitsPeeksAndLeakyBucketLeaks) {
  EXPECT_EQ(client_->One(Item("peek", 2, 5, 60'000)).remaining(), 3);
  EXPECT_EQ(client_->One(Item("peek", 0, 5, 60'000)).remaining(), 3);
  const gpb::RateLimitReq leaky = Item("leaky", 1, 2, 3'600'000, gpb::LEAKY_BUCKET);
  EXPECT_EQ(client_->One(leaky).status(), gpb::UNDER_LIMIT);
  EXPECT_EQ(client_->One(leaky).status(), gpb::UNDER_LIMIT);
  EXPECT_EQ(client_->One(leaky).status(), gpb::OVER_LIMIT);
  // A new leaky bucket asked for more than its burst: Gubernator answers it empty (remaining 0), its
  // reset time a whole burst's leak away.
  const int64_t before_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  const gpb::RateLimitResp big = client_->One(Item("leaky-new", 5, 2, 60'000, gpb::LEAKY_BUCKET));
  EXPECT_EQ(big.status(), gpb::OVER_LIMIT);
  EXPECT_EQ(big.remaining(), 0);
  EXPECT_GE(big.reset_time(), before_ms + 60'000);
  EXPECT_LE(big.reset_time(), before_ms + 70'000);
  // ... and it stays empty: the next hit waits for the leak (30 s for one of 2 per minute).
  const gpb::RateLimitResp next = client_->One(Item("leaky-new", 1, 2, 60'000, gpb::LEAKY_BUCKET));
  EXPECT_EQ(next.status(), gpb::OVER_LIMIT);
  EXPECT_EQ(next.remaining(), 0);
}

TEST_F(GubernatorNodeTest, TokenBucketResetTimeIsFixedAtTheFirstHit) {
  const int64_t before_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  const gpb::RateLimitResp first = client_->One(Item("fixed-reset", 1, 3, 60'000));
  EXPECT_EQ(first.remaining(), 2);
  EXPECT_GE(first.reset_time(), before_ms + 60'000);  // a whole duration from the first hit
  EXPECT_LE(first.reset_time(), before_ms + 70'000);
  // Later hits neither move it nor get anything back before it.
  const gpb::RateLimitResp second = client_->One(Item("fixed-reset", 2, 3, 60'000));
  EXPECT_EQ(second.remaining(), 0);
  EXPECT_EQ(second.reset_time(), first.reset_time());
  const gpb::RateLimitResp over = client_->One(Item("fixed-reset", 1, 3, 60'000));
  EXPECT_EQ(over.status(), gpb::OVER_LIMIT);
  EXPECT_EQ(over.reset_time(), first.reset_time());
}

TEST_F(GubernatorNodeTest, GregorianDurationsAsGubernator) {
  using namespace std::chrono;
  // The last millisecond of the UTC day / month holding `t`; the call's instant is between two readings
  // of the clock, and the answer must be the period end of one of them (a call made across midnight).
  auto day_end = [](sys_time<milliseconds> t) {
    return (floor<days>(t) + days(1)).time_since_epoch() / milliseconds(1) - 1;
  };
  auto month_end = [](sys_time<milliseconds> t) {
    const year_month_day ymd{floor<days>(t)};
    return sys_days(ymd.year() / ymd.month() / 1 + months(1)).time_since_epoch() / milliseconds(1) - 1;
  };
  auto now_ms = [] { return floor<milliseconds>(system_clock::now()); };
  // duration 2 = GregorianDays: counted in the UTC day, reset at its last millisecond.
  const gpb::RateLimitReq day = Item("calendar", 1, 2, 2, gpb::TOKEN_BUCKET, gpb::DURATION_IS_GREGORIAN);
  auto before = now_ms();
  const gpb::RateLimitResp first = client_->One(day);
  auto after = now_ms();
  EXPECT_EQ(first.error(), "");
  EXPECT_EQ(first.remaining(), 1);
  EXPECT_TRUE(first.reset_time() == day_end(before) || first.reset_time() == day_end(after))
      << first.reset_time();
  EXPECT_EQ(client_->One(day).remaining(), 0);
  EXPECT_EQ(client_->One(day).status(), gpb::OVER_LIMIT);
  // duration 4 = GregorianMonths: counted in the calendar month, reset at its last millisecond.
  const gpb::RateLimitReq month = Item("calendar-m", 2, 3, 4, gpb::TOKEN_BUCKET, gpb::DURATION_IS_GREGORIAN);
  before = now_ms();
  const gpb::RateLimitResp m = client_->One(month);
  after = now_ms();
  EXPECT_EQ(m.error(), "");
  EXPECT_EQ(m.remaining(), 1);
  EXPECT_TRUE(m.reset_time() == month_end(before) || m.reset_time() == month_end(after)) << m.reset_time();
  EXPECT_EQ(client_->One(month).status(), gpb::OVER_LIMIT);
  // Weeks: Gubernator's own error, per item.
  EXPECT_NE(client_->One(Item("calendar-w", 1, 2, 3, gpb::TOKEN_BUCKET, gpb::DURATION_IS_GREGORIAN))
                .error()
                .find("GregorianWeeks"),
            std::string::npos);
}

TEST_F(GubernatorNodeTest, ResetRemainingAsGubernator) {
  EXPECT_EQ(client_->One(Item("reset", 4, 5, 3'600'000)).remaining(), 1);
  // RESET_REMAINING forgets what was counted and ignores the hits: remaining = limit, no reset time.
  gpb::RateLimitResp r =
      client_->One(Item("reset", 3, 5, 3'600'000, gpb::TOKEN_BUCKET, gpb::RESET_REMAINING));
  EXPECT_EQ(r.status(), gpb::UNDER_LIMIT);
  EXPECT_EQ(r.remaining(), 5);
  EXPECT_EQ(r.reset_time(), 0);
  EXPECT_EQ(client_->One(Item("reset", 4, 5, 3'600'000)).remaining(), 1);
}

TEST_F(GubernatorNodeTest, DrainOverLimitAsGubernator) {
  EXPECT_EQ(client_->One(Item("drain", 6, 10, 3'600'000)).remaining(), 4);
  gpb::RateLimitResp kept = client_->One(Item("drain", 5, 10, 3'600'000));
  EXPECT_EQ(kept.status(), gpb::OVER_LIMIT);
  EXPECT_EQ(kept.remaining(), 4);  // without the flag an over-limit hit takes nothing
  gpb::RateLimitResp drained =
      client_->One(Item("drain", 5, 10, 3'600'000, gpb::TOKEN_BUCKET, gpb::DRAIN_OVER_LIMIT));
  EXPECT_EQ(drained.status(), gpb::OVER_LIMIT);
  EXPECT_EQ(drained.remaining(), 0);
  EXPECT_EQ(client_->One(Item("drain", 1, 10, 3'600'000)).status(), gpb::OVER_LIMIT);
}

TEST_F(GubernatorNodeTest, SameAnswersAsTheHttpGateway) {
  // One key counted through both doors: the HTTP gateway sees what gRPC charged, and the other way round.
  EXPECT_EQ(client_->One(Item("both", 3, 10, 3'600'000)).remaining(), 7);
  HttpClient http(node_->http_port());
  auto response =
      http.Post("/v1/GetRateLimits", R"({"requests":[{"name":"requests_per_hour","unique_key":"both",)"
                                     R"("hits":2,"limit":10,"duration":3600000}]})");
  ASSERT_TRUE(response) << response.error().message();
  EXPECT_EQ(response->result_int(), 200);
  EXPECT_NE(response->body().find(R"("remaining":"5")"), std::string::npos) << response->body();
  EXPECT_EQ(client_->One(Item("both", 0, 10, 3'600'000)).remaining(), 5);
}

TEST_F(GubernatorNodeTest, BadRequestsGetStatusErrorsAndTheNodeStaysUp) {
  std::vector<gpb::RateLimitReq> many(1001, Item("many", 1, 5, 1000));
  Answer a = client_->Call(many);
  EXPECT_EQ(a.status.error_code(), grpc::StatusCode::OUT_OF_RANGE) << a.status.error_message();
  EXPECT_NE(a.status.error_message().find("max size"), std::string::npos);
  gpb::RateLimitReq unknown = Item("alg", 1, 5, 1000);
  unknown.set_algorithm(static_cast<gpb::Algorithm>(7));
  Answer b = client_->Call({unknown});
  ASSERT_TRUE(b.status.ok()) << b.status.error_message();
  EXPECT_NE(b.response.responses(0).error().find("algorithm"), std::string::npos);
  // An empty request answers an empty list.
  Answer empty = client_->Call({});
  ASSERT_TRUE(empty.status.ok());
  EXPECT_EQ(empty.response.responses_size(), 0);
  gpb::HealthCheckResp health;
  ASSERT_TRUE(client_->Health(&health).ok());
  EXPECT_EQ(health.status(), "healthy");
}

TEST_F(GubernatorNodeTest, HealthCheckOverGrpcAndHttp) {
  gpb::HealthCheckResp health;
  grpc::Status status = client_->Health(&health);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(health.status(), "healthy");
  EXPECT_EQ(health.message(), "");
  EXPECT_EQ(health.peer_count(), 1);
  HttpClient http(node_->http_port());
  auto response = http.Get("/v1/HealthCheck");
  ASSERT_TRUE(response) << response.error().message();
  EXPECT_EQ(response->result_int(), 200);
  EXPECT_NE(response->body().find(R"("status":"healthy")"), std::string::npos) << response->body();
  auto live = http.Get("/v1/LiveCheck");
  ASSERT_TRUE(live) << live.error().message();
  EXPECT_EQ(live->result_int(), 200);
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics) << metrics.error().message();
  EXPECT_NE(metrics->body().find(
                R"(ringlimit_grpc_requests_total{method="pb.gubernator.V1/HealthCheck",result="ok"})"),
            std::string::npos);
}

constexpr int kNodes = 3;

class GubernatorClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterOptions options;
    options.nodes = kNodes;
    options.args = {"--threads", "2", "--grpc-listen", "127.0.0.1:0"};
    auto started = Cluster::Start(options);
    ASSERT_TRUE(started) << started.error();
    cluster_ = std::move(*started);
    for (int i = 0; i < kNodes; ++i) {
      auto port = cluster_->node(static_cast<size_t>(i)).port("grpc_port");
      ASSERT_TRUE(port.has_value());
      clients_.push_back(std::make_unique<V1Client>(*port));
    }
  }

  std::unique_ptr<Cluster> cluster_;
  std::vector<std::unique_ptr<V1Client>> clients_;
};

TEST_F(GubernatorClusterTest, OneKeyHasOneCounterThroughEveryNodeAndReportsItsOwner) {
  const gpb::RateLimitReq item = Item("account:42", 1, kNodes, 3'600'000);
  std::string owner;
  for (int i = 0; i < kNodes; ++i) {
    gpb::RateLimitResp r = clients_[static_cast<size_t>(i)]->One(item);
    EXPECT_EQ(r.status(), gpb::UNDER_LIMIT) << "node " << i;
    EXPECT_EQ(r.remaining(), kNodes - 1 - i) << "node " << i;
    ASSERT_EQ(r.metadata().count("owner"), 1u);
    if (i == 0) owner = r.metadata().at("owner");
    EXPECT_EQ(r.metadata().at("owner"), owner) << "every node reports the same deciding owner";
  }
  // As Gubernator: the owner's address, one of the cluster's HTTP addresses.
  bool known = false;
  for (int i = 0; i < kNodes; ++i) {
    known |= owner == "127.0.0.1:" + std::to_string(cluster_->http_port(static_cast<size_t>(i)));
  }
  EXPECT_TRUE(known) << owner;
  for (int i = 0; i < kNodes; ++i) {
    EXPECT_EQ(clients_[static_cast<size_t>(i)]->One(item).status(), gpb::OVER_LIMIT) << "node " << i;
  }
  gpb::HealthCheckResp health;
  ASSERT_TRUE(clients_[1]->Health(&health).ok());
  EXPECT_EQ(health.status(), "healthy");
  EXPECT_EQ(health.peer_count(), kNodes);
  EXPECT_FALSE(health.advertise_address().empty());
}

TEST_F(GubernatorClusterTest, SixtyFourConcurrentClientsAcrossNodesAdmitExactlyTheLimit) {
  constexpr int kThreads = 64;
  constexpr int kCalls = 10;
  constexpr int kLimit = 100;
  const std::vector<std::string> keys = {"exact:1", "exact:2", "exact:3"};
  std::vector<std::atomic<int>> admitted(keys.size());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const V1Client& client = *clients_[static_cast<size_t>(t % kNodes)];
      for (int c = 0; c < kCalls; ++c) {
        const size_t k = static_cast<size_t>((t + c) % static_cast<int>(keys.size()));
        Answer a = client.Call({Item(keys[k], 1, kLimit, 3'600'000)});
        if (!a.status.ok() || a.response.responses_size() != 1 || !a.response.responses(0).error().empty()) {
          failures.fetch_add(1);
          continue;
        }
        if (a.response.responses(0).status() == gpb::UNDER_LIMIT) admitted[k].fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  for (size_t k = 0; k < keys.size(); ++k)
    EXPECT_EQ(admitted[k].load(), kLimit) << keys[k];  // 640 calls, 3 x 100
}

}  // namespace
}  // namespace ringlimit::testing
