// Envoy's rate limit service on one real ringlimitd (--grpc-listen, --rls-config), through the C++
// stub generated from the protos the node serves.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <limits>
#include <map>

#include "tests/cluster/cluster_harness.h"
#include "tests/node/node_test_util.h"
#include "tests/rls/rls_test_util.h"
#include "tests/support/http_client.h"
#include "tests/support/node_process.h"

namespace ringlimit::testing {
namespace {

using Code = rlsv3::RateLimitResponse;
using Unit = rlsv3::RateLimitResponse::RateLimit;

std::filesystem::path NewConfigPath() {
  static std::atomic<int> n{0};
  return std::filesystem::temp_directory_path() /
         ("rls_node_test_" + std::to_string(getpid()) + "_" + std::to_string(n++) + ".yaml");
}

NodeProcessOptions WithArgs(std::vector<std::string> args) {
  NodeProcessOptions options;
  options.args = std::move(args);
  options.start_timeout = std::chrono::seconds(15);
  return options;
}

class RlsNodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    config_path_ = new std::filesystem::path(NewConfigPath());
    ASSERT_TRUE(WriteFile(*config_path_, kRlsConfig));
    auto started = NodeProcess::Start(
        WithArgs({"--grpc-listen", "127.0.0.1:0", "--rls-config", config_path_->string(), "--threads", "2"}));
    ASSERT_TRUE(started) << started.error();
    node_ = started->release();
    auto port = node_->port("grpc_port");
    ASSERT_TRUE(port.has_value()) << "no grpc_port in the port file";
    client_ = new RlsClient(*port);
  }
  static void TearDownTestSuite() {
    delete client_;
    delete node_;
    if (config_path_ != nullptr) std::filesystem::remove(*config_path_);
    delete config_path_;
  }
  void SetUp() override { ASSERT_NE(client_, nullptr); }

  static RlsAnswer Call(const std::string& domain, const std::vector<Descriptor>& descriptors,
                        uint32_t hits_addend = 0) {
    return client_->Call(MakeRequest(domain, descriptors, hits_addend));
  }

  static inline NodeProcess* node_ = nullptr;
  static inline RlsClient* client_ = nullptr;
  static inline std::filesystem::path* config_path_ = nullptr;
};

TEST_F(RlsNodeTest, ADescriptorOverItsLimitGetsOverLimit) {
  for (uint32_t i = 0; i < 3; ++i) {
    RlsAnswer a = Call("edge", {{{"remote_address", "10.0.0.1"}}});
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.response.overall_code(), Code::OK);
    ASSERT_EQ(a.response.statuses_size(), 1);
    const auto& s = a.response.statuses(0);
    EXPECT_EQ(s.code(), Code::OK);
    EXPECT_EQ(s.current_limit().requests_per_unit(), 3u);
    EXPECT_EQ(s.current_limit().unit(), Unit::HOUR);
    EXPECT_EQ(s.limit_remaining(), 2 - i);
    EXPECT_GT(s.duration_until_reset().seconds() + s.duration_until_reset().nanos(), 0);
    EXPECT_LE(s.duration_until_reset().seconds(), 3600);
  }
  RlsAnswer over = Call("edge", {{{"remote_address", "10.0.0.1"}}});
  ASSERT_TRUE(over.status.ok());
  EXPECT_EQ(over.response.overall_code(), Code::OVER_LIMIT);
  EXPECT_EQ(over.response.statuses(0).code(), Code::OVER_LIMIT);
  EXPECT_EQ(over.response.statuses(0).limit_remaining(), 0u);
  // A key without a value in the config counts per distinct value.
  RlsAnswer other = Call("edge", {{{"remote_address", "10.0.0.2"}}});
  EXPECT_EQ(other.response.overall_code(), Code::OK);
  EXPECT_EQ(other.response.statuses(0).limit_remaining(), 2u);
}

TEST_F(RlsNodeTest, HitsAddendIsTheCostAndZeroMeansOne) {
  RlsAnswer a = Call("edge", {{{"path", "/hits"}}}, 3);
  ASSERT_TRUE(a.status.ok());
  EXPECT_EQ(a.response.overall_code(), Code::OK);
  EXPECT_EQ(a.response.statuses(0).limit_remaining(), 2u);
  RlsAnswer b = Call("edge", {{{"path", "/hits"}}}, 3);  // 6 > 5: denied, nothing charged
  EXPECT_EQ(b.response.overall_code(), Code::OVER_LIMIT);
  RlsAnswer c = Call("edge", {{{"path", "/hits"}}}, 0);  // 0 counts as 1
  EXPECT_EQ(c.response.overall_code(), Code::OK);
  EXPECT_EQ(c.response.statuses(0).limit_remaining(), 1u);
  RlsAnswer d = Call("edge", {{{"path", "/hits"}}}, 1);
  EXPECT_EQ(d.response.statuses(0).limit_remaining(), 0u);
  EXPECT_EQ(Call("edge", {{{"path", "/hits"}}}).response.overall_code(), Code::OVER_LIMIT);
}

TEST_F(RlsNodeTest, TheValueRuleWinsOverTheKeyOnlyRule) {
  RlsAnswer a = Call("edge", {{{"path", "/login"}}});
  ASSERT_TRUE(a.status.ok());
  EXPECT_EQ(a.response.statuses(0).current_limit().requests_per_unit(), 2u);
  EXPECT_EQ(a.response.statuses(0).current_limit().name(), "login");
  EXPECT_EQ(Call("edge", {{{"path", "/login"}}}).response.overall_code(), Code::OK);
  EXPECT_EQ(Call("edge", {{{"path", "/login"}}}).response.overall_code(), Code::OVER_LIMIT);
  EXPECT_EQ(Call("edge", {{{"path", "/home"}}}).response.statuses(0).current_limit().requests_per_unit(), 5u);
}

TEST_F(RlsNodeTest, APerDescriptorLimitOverridesTheConfig) {
  rlsv3::RateLimitRequest request = MakeRequest("edge", {{{"override", "me"}}});
  request.mutable_descriptors(0)->mutable_limit()->set_requests_per_unit(2);
  request.mutable_descriptors(0)->mutable_limit()->set_unit(envoy::type::v3::MINUTE);
  for (int i = 0; i < 2; ++i) {
    RlsAnswer a = client_->Call(request);
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.response.overall_code(), Code::OK);
    EXPECT_EQ(a.response.statuses(0).current_limit().requests_per_unit(), 2u);
    EXPECT_EQ(a.response.statuses(0).current_limit().unit(), Unit::MINUTE);
    EXPECT_LE(a.response.statuses(0).duration_until_reset().seconds(), 60);
  }
  EXPECT_EQ(client_->Call(request).response.overall_code(), Code::OVER_LIMIT);
  // The override wins over a configured rule too.
  rlsv3::RateLimitRequest wider = MakeRequest("edge", {{{"path", "/override"}}});
  wider.mutable_descriptors(0)->mutable_limit()->set_requests_per_unit(7);
  wider.mutable_descriptors(0)->mutable_limit()->set_unit(envoy::type::v3::HOUR);
  EXPECT_EQ(client_->Call(wider).response.statuses(0).current_limit().requests_per_unit(), 7u);
  // A unit Envoy does not define is a bad request.
  rlsv3::RateLimitRequest bad = MakeRequest("edge", {{{"override", "bad"}}});
  bad.mutable_descriptors(0)->mutable_limit()->set_requests_per_unit(2);
  EXPECT_EQ(client_->Call(bad).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(RlsNodeTest, NestedDescriptorsAndValuelessKeys) {
  EXPECT_EQ(Call("edge", {{{"client", "a"}, {"plan", "free"}}}).response.overall_code(), Code::OK);
  EXPECT_EQ(Call("edge", {{{"client", "a"}, {"plan", "free"}}}).response.overall_code(), Code::OVER_LIMIT);
  // Another client is another counter; another plan takes the key-only rule.
  EXPECT_EQ(Call("edge", {{{"client", "b"}, {"plan", "free"}}}).response.overall_code(), Code::OK);
  RlsAnswer pro = Call("edge", {{{"client", "a"}, {"plan", "pro"}}});
  EXPECT_EQ(pro.response.statuses(0).current_limit().requests_per_unit(), 4u);
  EXPECT_EQ(pro.response.statuses(0).limit_remaining(), 3u);
  // The parent alone has no rate_limit: OK with no current limit, never counted.
  for (int i = 0; i < 5; ++i) {
    RlsAnswer parent = Call("edge", {{{"client", "a"}}});
    EXPECT_EQ(parent.response.overall_code(), Code::OK);
    EXPECT_FALSE(parent.response.statuses(0).has_current_limit());
  }
}

TEST_F(RlsNodeTest, ShadowModeNeverDenies) {
  for (int i = 0; i < 5; ++i) {
    RlsAnswer a = Call("edge", {{{"shadow", "x"}}});
    ASSERT_TRUE(a.status.ok());
    EXPECT_EQ(a.response.overall_code(), Code::OK);
    EXPECT_EQ(a.response.statuses(0).code(), Code::OK);
    EXPECT_EQ(a.response.statuses(0).current_limit().requests_per_unit(), 1u);
  }
}

TEST_F(RlsNodeTest, UnlimitedAlwaysAnswersOk) {
  for (int i = 0; i < 20; ++i) {
    RlsAnswer a = Call("edge", {{{"internal", "x"}}}, 1000);
    ASSERT_TRUE(a.status.ok());
    EXPECT_EQ(a.response.overall_code(), Code::OK);
    EXPECT_FALSE(a.response.statuses(0).has_current_limit());
    EXPECT_EQ(a.response.statuses(0).limit_remaining(), std::numeric_limits<uint32_t>::max());
  }
}

TEST_F(RlsNodeTest, EnvoysRatelimitUnlimitedReplacesAndWildcards) {
  // rate_limit: {unlimited: true}, envoyproxy/ratelimit's place for it.
  RlsAnswer ldap = Call("edge", {{{"ldap", "x"}}}, 1000);
  ASSERT_TRUE(ldap.status.ok()) << ldap.status.error_message();
  EXPECT_EQ(ldap.response.overall_code(), Code::OK);
  EXPECT_EQ(ldap.response.statuses(0).limit_remaining(), std::numeric_limits<uint32_t>::max());

  // replaces: with the endpoint's limit matched too, the category's limit is not applied.
  EXPECT_EQ(Call("edge", {{{"category", "read"}}}).response.overall_code(), Code::OK);
  EXPECT_EQ(Call("edge", {{{"category", "read"}}}).response.overall_code(), Code::OVER_LIMIT);
  for (uint32_t i = 0; i < 2; ++i) {
    RlsAnswer a = Call("edge", {{{"category", "read"}}, {{"endpoint", "/reports"}}});
    ASSERT_TRUE(a.status.ok());
    EXPECT_EQ(a.response.overall_code(), Code::OK) << i;
    EXPECT_FALSE(a.response.statuses(0).has_current_limit());
    EXPECT_EQ(a.response.statuses(1).current_limit().name(), "reports");
    EXPECT_EQ(a.response.statuses(1).limit_remaining(), 1 - i);
  }
  EXPECT_EQ(Call("edge", {{{"category", "read"}}, {{"endpoint", "/reports"}}}).response.overall_code(),
            Code::OVER_LIMIT);

  // Wildcards: /shared/* shares one counter of 2 (share_threshold); *.pdf counts per value.
  EXPECT_EQ(Call("edge", {{{"file", "/shared/a"}}}).response.overall_code(), Code::OK);
  EXPECT_EQ(Call("edge", {{{"file", "/shared/b"}}}).response.overall_code(), Code::OK);
  EXPECT_EQ(Call("edge", {{{"file", "/shared/c"}}}).response.overall_code(), Code::OVER_LIMIT);
  EXPECT_EQ(Call("edge", {{{"file", "a.pdf"}}}).response.overall_code(), Code::OK);
  EXPECT_EQ(Call("edge", {{{"file", "b.pdf"}}}).response.overall_code(), Code::OK);
  EXPECT_EQ(Call("edge", {{{"file", "a.pdf"}}}).response.overall_code(), Code::OVER_LIMIT);
  RlsAnswer none = Call("edge", {{{"file", "a.txt"}}});
  EXPECT_EQ(none.response.overall_code(), Code::OK);
  EXPECT_FALSE(none.response.statuses(0).has_current_limit());
}

TEST_F(RlsNodeTest, UnknownDomainAndUnmatchedDescriptorsAreOk) {
  for (int i = 0; i < 5; ++i) {
    RlsAnswer a = Call("nope", {{{"remote_address", "10.0.0.1"}}, {{"blocked", "x"}}});
    ASSERT_TRUE(a.status.ok());
    EXPECT_EQ(a.response.overall_code(), Code::OK);
    ASSERT_EQ(a.response.statuses_size(), 2);
    EXPECT_FALSE(a.response.statuses(0).has_current_limit());
    RlsAnswer b = Call("edge", {{{"unconfigured", "x"}}});
    EXPECT_EQ(b.response.overall_code(), Code::OK);
    EXPECT_EQ(b.response.statuses(0).code(), Code::OK);
    EXPECT_FALSE(b.response.statuses(0).has_current_limit());
  }
}

TEST_F(RlsNodeTest, OneDescriptorOverMakesTheWholeRequestOver) {
  RlsAnswer a = Call("edge", {{{"path", "/multi"}}, {{"blocked", "x"}}, {{"unconfigured", "y"}}});
  ASSERT_TRUE(a.status.ok());
  EXPECT_EQ(a.response.overall_code(), Code::OVER_LIMIT);
  ASSERT_EQ(a.response.statuses_size(), 3);
  EXPECT_EQ(a.response.statuses(0).code(), Code::OK);
  EXPECT_EQ(a.response.statuses(1).code(), Code::OVER_LIMIT);
  EXPECT_EQ(a.response.statuses(1).current_limit().requests_per_unit(), 0u);
  EXPECT_EQ(a.response.statuses(2).code(), Code::OK);
  // Descriptors are charged independently (as envoyproxy/ratelimit does): /multi was counted.
  EXPECT_EQ(Call("edge", {{{"path", "/multi"}}}).response.statuses(0).limit_remaining(), 3u);
  // The same descriptor twice in one request is charged twice.
  RlsAnswer twice = Call("edge", {{{"path", "/twice"}}, {{"path", "/twice"}}});
  ASSERT_TRUE(twice.status.ok()) << twice.status.error_message();
  EXPECT_EQ(twice.response.statuses(0).limit_remaining(), 4u);
  EXPECT_EQ(twice.response.statuses(1).limit_remaining(), 3u);
}

TEST_F(RlsNodeTest, MalformedAndOversizedRequestsGetErrorsAndTheNodeStaysUp) {
  EXPECT_EQ(Call("", {{{"path", "/x"}}}).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Call("edge", {}).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Call("edge", {{}}).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Call("edge", {{{"", "x"}}}).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Bytes that are not a RateLimitRequest, sent to the method directly.
  grpc::GenericStub generic(client_->channel());
  const std::string garbage = "\xff\xff\xff\xff\x0f\x12\x80";
  grpc::Slice slice(garbage);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer reply;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  std::promise<grpc::Status> done;
  generic.UnaryCall(&context, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                    grpc::StubOptions(), &request, &reply, [&done](grpc::Status s) { done.set_value(s); });
  grpc::Status garbage_status = done.get_future().get();
  EXPECT_FALSE(garbage_status.ok());
  // gRPC's callback API (1.51) answers a request it cannot deserialize UNIMPLEMENTED, before our code.
  EXPECT_EQ(garbage_status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << garbage_status.error_message();

  // Larger than --grpc-max-message-bytes (1 MiB by default).
  RlsAnswer big = Call("edge", {{{"path", std::string(2 << 20, 'x')}}});
  EXPECT_EQ(big.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // More descriptors than the node takes in one request.
  std::vector<Descriptor> many(1001, Descriptor{{"unconfigured", "x"}});
  EXPECT_EQ(Call("edge", many).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Still serving both ports.
  EXPECT_EQ(Call("edge", {{{"unconfigured", "after"}}}).response.overall_code(), Code::OK);
  HttpClient http(node_->http_port());
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->result_int(), 200u);
}

TEST_F(RlsNodeTest, MetricsCountCallsByMethodAndResult) {
  ASSERT_EQ(Call("edge", {{{"blocked", "metrics"}}}).response.overall_code(), Code::OVER_LIMIT);
  ASSERT_EQ(Call("edge", {{{"unconfigured", "metrics"}}}).response.overall_code(), Code::OK);
  ASSERT_EQ(Call("", {{{"unconfigured", "metrics"}}}).status.error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  HttpClient http(node_->http_port());
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  const std::string& body = metrics->body();
  EXPECT_NE(body.find("ringlimit_grpc_requests_total{method=\"envoy.service.ratelimit.v3.RateLimitService/"
                      "ShouldRateLimit\",result=\"over_limit\"}"),
            std::string::npos)
      << body;
  EXPECT_NE(body.find("result=\"ok\"}"), std::string::npos) << body;
  EXPECT_NE(body.find("result=\"invalid_argument\"}"), std::string::npos) << body;
  // The latency histogram: every call lands in the +Inf bucket, which equals the count.
  const std::string method = "method=\"envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit\"";
  const size_t inf = body.find("ringlimit_grpc_duration_seconds_bucket{" + method + ",le=\"+Inf\"} ");
  const size_t count = body.find("ringlimit_grpc_duration_seconds_count{" + method + "} ");
  ASSERT_NE(inf, std::string::npos) << body;
  ASSERT_NE(count, std::string::npos) << body;
  const auto value_at = [&](size_t at) {
    const size_t space = body.find("} ", at) + 2;
    return std::stoull(body.substr(space, body.find('\n', space) - space));
  };
  EXPECT_GE(value_at(count), 3u);
  EXPECT_EQ(value_at(inf), value_at(count));
}

// Its own node: the config changes under it.
class RlsReloadTest : public ::testing::Test {
 protected:
  static std::string ConfigWithLimit(int limit) {
    return "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: " +
           std::to_string(limit) + "}\n";
  }
  // Starts the node on a config of limit 1 at path_. With `symlinked`, path_ is a symbolic link to a file
  // in another directory (target_): writing through it changes nothing the node watches.
  void StartNode(bool symlinked) {
    path_ = NewConfigPath();
    if (symlinked) {
      target_dir_ = path_.string() + ".d";
      std::filesystem::create_directory(target_dir_);
      ASSERT_TRUE(WriteFile(target_dir_ / "config.yaml", ConfigWithLimit(1)));
      std::filesystem::create_symlink(target_dir_ / "config.yaml", path_);
    } else {
      ASSERT_TRUE(WriteFile(path_, ConfigWithLimit(1)));
    }
    auto started =
        NodeProcess::Start(WithArgs({"--grpc-listen", "127.0.0.1:0", "--rls-config", path_.string()}));
    ASSERT_TRUE(started) << started.error();
    node_ = std::move(*started);
    client_ = std::make_unique<RlsClient>(*node_->port("grpc_port"));
    EXPECT_EQ(LimitOf("a"), 1u);
  }
  void TearDown() override {
    std::filesystem::remove(path_);
    if (!target_dir_.empty()) std::filesystem::remove_all(target_dir_);
  }

  uint32_t LimitOf(const std::string& value) const {
    return client_->Call(MakeRequest("r", {{{"k", value}}}))
        .response.statuses(0)
        .current_limit()
        .requests_per_unit();
  }
  Result<std::chrono::milliseconds> WaitForLimit(uint32_t want) const {
    return WaitFor("limit " + std::to_string(want), std::chrono::seconds(10), [&](std::string* why) {
      const uint32_t limit = LimitOf("v");
      *why = "limit " + std::to_string(limit);
      return limit == want;
    });
  }
  // Writes a file the config cannot accept and waits for the rejection in the log.
  Result<std::chrono::milliseconds> WriteBadFile() const {
    if (!WriteFile(path_, "domain: r\ndescriptors: [{key: k, rate_limit: {unit: fortnight}}]\n")) {
      return std::string("cannot write ") + path_.string();
    }
    return WaitFor("the rejected reload in the log", std::chrono::seconds(10), [&](std::string*) {
      return node_->Log().find("rls config not reloaded") != std::string::npos;
    });
  }

  std::filesystem::path path_;
  std::filesystem::path target_dir_;
  std::unique_ptr<NodeProcess> node_;
  std::unique_ptr<RlsClient> client_;
};

TEST_F(RlsReloadTest, SighupReloadsTheConfigAndABadFileKeepsTheOldOne) {
  // Written through a link into a directory the node does not watch: only SIGHUP can bring it in.
  ASSERT_NO_FATAL_FAILURE(StartNode(/*symlinked=*/true));
  ASSERT_TRUE(WriteFile(path_, ConfigWithLimit(9)));
  EXPECT_EQ(LimitOf("b"), 1u);
  ASSERT_TRUE(node_->Signal(SIGHUP));
  auto reloaded = WaitForLimit(9);
  ASSERT_TRUE(reloaded) << reloaded.error();
  ASSERT_TRUE(WriteFile(path_, "domain: r\ndescriptors: [{key: k, rate_limit: {unit: fortnight}}]\n"));
  ASSERT_TRUE(node_->Signal(SIGHUP));
  auto rejected = WaitFor("the rejected reload in the log", std::chrono::seconds(10), [&](std::string*) {
    return node_->Log().find("rls config not reloaded") != std::string::npos;
  });
  ASSERT_TRUE(rejected) << rejected.error();
  EXPECT_EQ(LimitOf("c"), 9u);
  // Counted for alerts: the load at start and the SIGHUP one succeeded, the last one failed.
  HttpClient http(node_->http_port());
  const std::string reloads = R"(ringlimit_config_reloads_total{file="rls_config",result=)";
  EXPECT_EQ(MetricValue(http, reloads + R"("success"})"), 2.);
  EXPECT_EQ(MetricValue(http, reloads + R"("failure"})"), 1.);
  EXPECT_EQ(MetricValue(http, R"(ringlimit_config_last_reload_successful{file="rls_config"})"), 0.);
}

// No signal: the node notices the file changed -- rewritten in place, or replaced by a rename as editors
// and Kubernetes ConfigMap updates do.
TEST_F(RlsReloadTest, AChangedFileIsReloadedWithoutASignal) {
  ASSERT_NO_FATAL_FAILURE(StartNode(/*symlinked=*/false));
  ASSERT_TRUE(WriteFile(path_, ConfigWithLimit(7)));  // in place
  auto in_place = WaitForLimit(7);
  ASSERT_TRUE(in_place) << in_place.error();
  const std::filesystem::path next = path_.string() + ".next";
  ASSERT_TRUE(WriteFile(next, ConfigWithLimit(8)));
  std::filesystem::rename(next, path_);  // replaced
  auto renamed = WaitForLimit(8);
  ASSERT_TRUE(renamed) << renamed.error();
  auto rejected = WriteBadFile();
  ASSERT_TRUE(rejected) << rejected.error();
  EXPECT_EQ(LimitOf("c"), 8u);  // the bad file changed nothing
}

TEST(RlsStartTest, ABadConfigOrAMissingGrpcPortRefusesToStart) {
  const std::filesystem::path path = NewConfigPath();
  ASSERT_TRUE(WriteFile(
      path, "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: weeks, requests_per_unit: 1}\n"));
  auto bad = NodeProcess::Start(WithArgs({"--grpc-listen", "127.0.0.1:0", "--rls-config", path.string()}));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().find("unknown unit 'weeks'"), std::string::npos) << bad.error();
  auto no_port = NodeProcess::Start(WithArgs({"--rls-config", path.string()}));
  ASSERT_FALSE(no_port);
  EXPECT_NE(no_port.error().find("--rls-config needs --grpc-listen"), std::string::npos) << no_port.error();
  std::filesystem::remove(path);
}

TEST(RlsHeadersTest, RateLimitHeadersForEnvoyWithRlsResponseHeaders) {
  const std::filesystem::path path = NewConfigPath();
  ASSERT_TRUE(WriteFile(path, kRlsConfig));
  auto node = NodeProcess::Start(
      WithArgs({"--grpc-listen", "127.0.0.1:0", "--rls-config", path.string(), "--rls-response-headers"}));
  ASSERT_TRUE(node) << node.error();
  auto port = (*node)->port("grpc_port");
  ASSERT_TRUE(port.has_value());
  RlsClient client(*port);
  // path=/login: 2 per hour, named "login"; remote_address: 3 per hour, unnamed (named by its entry).
  RlsAnswer a =
      client.Call(MakeRequest("edge", {{{"path", "/login"}}, {{"remote_address", "198.51.100.1"}}}));
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  std::map<std::string, std::string> headers;
  for (const auto& h : a.response.response_headers_to_add()) headers[h.key()] = h.value();
  EXPECT_EQ(headers["RateLimit-Policy"], R"("login";q=2;w=3600, "remote_address=198.51.100.1";q=3;w=3600)");
  EXPECT_EQ(headers["RateLimit"].rfind(R"("login";r=1;t=)", 0), 0u) << headers["RateLimit"];
  EXPECT_NE(headers["RateLimit"].find(R"("remote_address=198.51.100.1";r=2;t=)"), std::string::npos);
  EXPECT_EQ(headers["X-RateLimit-Limit"], "2");  // the binding limit: fewest units left
  EXPECT_EQ(headers["X-RateLimit-Remaining"], "1");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ringlimit::testing
