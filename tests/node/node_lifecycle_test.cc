// The process: flags and config file, policy reload on SIGHUP (states kept), graceful shutdown on
// SIGTERM/SIGINT (requests in flight complete, exit 0), SIGKILL and restart.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "tests/node/node_test_util.h"

namespace ringlimit::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string Policies(int limit) {
  return R"({"policies":{"api":{"limits":[{"algorithm":"fixed_window","limit":)" + std::to_string(limit) +
         R"(,"window_ms":3600000}]}}})";
}

// Polls `condition` until it holds or `timeout` passes.
bool Eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// Counts occurrences of `needle` in the node's log.
size_t CountInLog(const NodeProcess& node, std::string_view needle) {
  const std::string log = node.Log();
  size_t count = 0;
  for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++count;
  return count;
}

class NodeLifecycleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ringlimit-lifecycle-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  std::unique_ptr<NodeProcess> StartNode(std::vector<std::string> args) {
    NodeProcessOptions options;
    options.args = std::move(args);
    options.dir = dir_ / "node";
    auto node = NodeProcess::Start(std::move(options));
    EXPECT_TRUE(node) << node.error();
    return node ? std::move(*node) : nullptr;
  }

  fs::path dir_;
};

TEST_F(NodeLifecycleTest, SighupReloadsPoliciesAndKeepsStates) {
  const fs::path policies = dir_ / "policies.json";
  ASSERT_TRUE(WriteFile(policies, Policies(3)));
  auto node = StartNode({"--policies", policies.string(), "--threads", "2"});
  ASSERT_TRUE(node);
  HttpClient client(node->http_port());
  for (int i = 0; i < 2; ++i) ASSERT_EQ(client.Get("/v1/check?key=k&policy=api")->result_int(), 200);
  // The load at start counts as a successful one; a node without --rls-config has no series for it.
  const std::string reloads = R"(ringlimit_config_reloads_total{file="policies",result=)";
  const std::string loaded_at = R"(ringlimit_config_last_reload_success_timestamp_seconds{file="policies"})";
  const std::string last_ok = R"(ringlimit_config_last_reload_successful{file="policies"})";
  EXPECT_EQ(MetricValue(client, reloads + R"("success"})"), 1.);
  EXPECT_EQ(MetricValue(client, reloads + R"("failure"})"), 0.);
  EXPECT_EQ(MetricValue(client, last_ok), 1.);
  EXPECT_EQ(MetricValue(client, R"(ringlimit_config_reloads_total{file="rls_config",result="success"})"),
            std::nullopt);
  const std::optional<double> started_at = MetricValue(client, loaded_at);
  ASSERT_TRUE(started_at.has_value());
  EXPECT_NEAR(*started_at, static_cast<double>(time(nullptr)), 60.);

  ASSERT_TRUE(WriteFile(policies, Policies(5)));
  ASSERT_TRUE(node->Signal(SIGHUP));
  ASSERT_TRUE(Eventually([&] { return CountInLog(*node, "policies reloaded") == 1; })) << node->Log();
  EXPECT_EQ(MetricValue(client, reloads + R"("success"})"), 2.);
  const std::optional<double> reloaded_at = MetricValue(client, loaded_at);
  ASSERT_TRUE(reloaded_at.has_value());
  EXPECT_GT(*reloaded_at, *started_at);
  auto after = client.Get("/v1/check?key=k&policy=api");
  ASSERT_TRUE(after);
  EXPECT_EQ(after->result_int(), 200);
  EXPECT_EQ(Header(*after, "X-RateLimit-Limit"), "5");
  EXPECT_EQ(Header(*after, "X-RateLimit-Remaining"), "2");  // 5 - the 3 counted so far: the state was kept

  // A broken file is refused and the policies in force stay.
  ASSERT_TRUE(WriteFile(policies, "{ not json"));
  ASSERT_TRUE(node->Signal(SIGHUP));
  ASSERT_TRUE(Eventually([&] { return CountInLog(*node, "policies not reloaded") == 1; })) << node->Log();
  auto still = client.Get("/v1/check?key=k&policy=api");
  ASSERT_TRUE(still);
  EXPECT_EQ(Header(*still, "X-RateLimit-Limit"), "5");
  EXPECT_EQ(Header(*still, "X-RateLimit-Remaining"), "1");
  // ... and an alert can see it: a failure counted, the last load not successful, the time of the last
  // good one unchanged.
  EXPECT_EQ(MetricValue(client, reloads + R"("failure"})"), 1.);
  EXPECT_EQ(MetricValue(client, reloads + R"("success"})"), 2.);
  EXPECT_EQ(MetricValue(client, last_ok), 0.);
  EXPECT_EQ(MetricValue(client, loaded_at), reloaded_at);

  ASSERT_TRUE(node->Signal(SIGTERM));
  auto code = node->WaitExit();
  ASSERT_TRUE(code) << code.error();
  EXPECT_EQ(*code, 0);
}

TEST_F(NodeLifecycleTest, SigtermFinishesRequestsInFlightThenExitsZero) {
  auto node = StartNode({"--threads", "2"});
  ASSERT_TRUE(node);
  // A request half sent, and an idle keep-alive connection.
  HttpClient busy(node->http_port());
  const std::string body = R"({"checks":[{"key":"inflight","limit":10,"window_ms":1000}]})";
  const std::string head =
      "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n";
  ASSERT_TRUE(busy.SendRaw(head + body.substr(0, 10)));
  HttpClient idle(node->http_port());
  ASSERT_TRUE(idle.Get("/healthz"));

  ASSERT_TRUE(node->Signal(SIGTERM));
  ASSERT_TRUE(Eventually([&] { return CountInLog(*node, "SIGTERM: stopping") == 1; })) << node->Log();
  // The idle connection is closed, the half-sent request is still awaited and answered.
  auto idle_rest = idle.ReadUntilClosed();
  ASSERT_TRUE(idle_rest) << idle_rest.error().message();
  EXPECT_TRUE(node->running());
  ASSERT_TRUE(busy.SendRaw(body.substr(10)));
  auto response = busy.ReadResponse();
  ASSERT_TRUE(response) << response.error().message();
  EXPECT_EQ(response->result_int(), 200);
  EXPECT_EQ(JsonBody(*response).at("allowed"), true);
  EXPECT_FALSE(response->keep_alive());

  auto code = node->WaitExit();
  ASSERT_TRUE(code) << code.error();
  EXPECT_EQ(*code, 0);
  // No new connections once stopping.
  HttpClient late(node->http_port(), 300ms);
  EXPECT_FALSE(late.Get("/healthz"));
}

TEST_F(NodeLifecycleTest, PipelinedRequestsSentBeforeSigintAreAllAnswered) {
  auto node = StartNode({"--threads", "1"});
  ASSERT_TRUE(node);
  HttpClient client(node->http_port());
  std::string pipeline;
  for (int i = 0; i < 20; ++i) {
    pipeline += "GET /v1/check?key=p&limit=100&window_ms=60000 HTTP/1.1\r\nHost: x\r\n\r\n";
  }
  ASSERT_TRUE(client.SendRaw(pipeline));
  // The first answer proves the node has accepted the connection and is working through the pipeline
  // (a signal before the accept would rightly leave the connection unserved); SIGINT lands mid-pipeline.
  auto first = client.ReadResponse();
  ASSERT_TRUE(first) << first.error().message();
  EXPECT_EQ(first->result_int(), 200);
  ASSERT_TRUE(node->Signal(SIGINT));
  int answered = 1;
  while (first->keep_alive()) {
    auto response = client.ReadResponse();
    if (!response) break;
    EXPECT_EQ(response->result_int(), 200);
    ++answered;
    if (!response->keep_alive()) break;
  }
  // Requests the node had read before the signal are answered; it reads nothing after a drain.
  EXPECT_GE(answered, 1);
  auto code = node->WaitExit();
  ASSERT_TRUE(code) << code.error();
  EXPECT_EQ(*code, 0);
}

TEST_F(NodeLifecycleTest, SigkillAndRestartOnTheSameDirectory) {
  auto node = StartNode({"--threads", "1"});
  ASSERT_TRUE(node);
  const pid_t first = node->pid();
  ASSERT_TRUE(node->Kill());
  auto restarted = node->Restart();
  ASSERT_TRUE(restarted) << restarted.error();
  EXPECT_NE(node->pid(), first);
  EXPECT_EQ(node->port("http"), node->http_port());
  EXPECT_EQ(node->port("nothing"), std::nullopt);
  HttpClient client(node->http_port());
  auto response = client.Get("/readyz");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->result_int(), 200);
  EXPECT_TRUE(fs::exists(node->dir() / "ringlimitd.log"));
}

TEST_F(NodeLifecycleTest, CountersSurviveAGracefulRestartWithADataDir) {
  NodeProcessOptions options;
  options.dir = dir_ / "durable";
  options.pass_data_dir = true;
  options.args = {"--threads", "2"};
  auto started = NodeProcess::Start(std::move(options));
  ASSERT_TRUE(started) << started.error();
  auto& node = *started;
  const std::string target = "/v1/check?key=d&name=n&algorithm=fixed_window&limit=10&window_ms=3600000";
  {
    HttpClient client(node->http_port());
    for (int i = 0; i < 3; ++i) ASSERT_EQ(client.Get(target)->result_int(), 200);
  }
  ASSERT_TRUE(node->Signal(SIGTERM));
  auto code = node->WaitExit();
  ASSERT_TRUE(code) << code.error();
  ASSERT_EQ(*code, 0);
  ASSERT_TRUE(node->Restart());
  HttpClient client(node->http_port());
  auto response = client.Get(target);
  ASSERT_TRUE(response);
  EXPECT_EQ(Header(*response, "X-RateLimit-Remaining"), "6");
}

TEST_F(NodeLifecycleTest, ConfigFileSuppliesFlagsAndTheCommandLineWins) {
  const fs::path config = dir_ / "ringlimitd.conf";
  ASSERT_TRUE(WriteFile(config, "max-body-bytes = 100\nadmin-token = from-file\nlog-level = debug\n"));
  auto node = StartNode({"--config", config.string(), "--admin-token", "from-command-line"});
  ASSERT_TRUE(node);
  HttpClient client(node->http_port());
  auto big = client.Post("/v1/check", std::string(101, ' '));
  ASSERT_TRUE(big);
  EXPECT_EQ(big->result_int(), 413);
  auto file_token = client.Delete("/v1/keys/x", {{"Authorization", "Bearer from-file"}});
  ASSERT_TRUE(file_token);
  EXPECT_EQ(file_token->result_int(), 401);
  auto cli_token = client.Delete("/v1/keys/x", {{"Authorization", "Bearer from-command-line"}});
  ASSERT_TRUE(cli_token);
  EXPECT_EQ(cli_token->result_int(), 200);
}

// Runs ringlimitd with `args` to completion (it must exit by itself); returns the exit code.
int RunToExit(const fs::path& dir, std::vector<std::string> args, std::string* log) {
  NodeProcessOptions options;
  options.dir = dir;
  options.args = std::move(args);
  options.start_timeout = 10s;
  auto node = NodeProcess::Start(std::move(options));
  EXPECT_FALSE(node) << "expected ringlimitd to exit";
  if (node) return -1;
  const std::string error = node.error();
  std::ifstream in(dir / "ringlimitd.log");
  *log = std::string(std::istreambuf_iterator<char>(in), {});
  const auto at = error.find("exited with status ");
  return at == std::string::npos ? -1 : std::stoi(error.substr(at + 19));
}

// Every flag also comes from RINGLIMIT_<FLAG>: the command line wins over it, and it wins over the config
// file.
TEST_F(NodeLifecycleTest, EnvironmentVariablesSitBetweenTheCommandLineAndTheConfigFile) {
  const fs::path config = dir_ / "ringlimitd.conf";
  ASSERT_TRUE(WriteFile(config, "max-body-bytes = 100\n"));
  auto body_limit = [&](std::vector<std::string> args, std::vector<std::string> env) -> int {
    NodeProcessOptions options;
    options.args = std::move(args);
    options.args.insert(options.args.end(), {"--config", config.string()});
    options.env = std::move(env);
    options.dir = dir_ / ("node" + std::to_string(options.args.size()) + std::to_string(options.env.size()));
    auto node = NodeProcess::Start(std::move(options));
    if (!node) {
      ADD_FAILURE() << node.error();
      return -1;
    }
    HttpClient client((*node)->http_port());
    for (int size : {100, 200, 300}) {  // the largest size below 413
      auto response = client.Post("/v1/check", std::string(static_cast<size_t>(size) + 1, ' '));
      if (!response) return -1;
      if (response->result_int() == 413) return size;
    }
    return 1000;
  };
  EXPECT_EQ(body_limit({}, {}), 100);                                // the file
  EXPECT_EQ(body_limit({}, {"RINGLIMIT_MAX_BODY_BYTES=200"}), 200);  // the environment over the file
  EXPECT_EQ(body_limit({"--max-body-bytes", "300"}, {"RINGLIMIT_MAX_BODY_BYTES=200"}), 300);  // the flag
  std::string log;
  NodeProcessOptions bad;
  bad.dir = dir_ / "bad-env";
  bad.env = {"RINGLIMIT_MAX_BODY_BYTES=lots"};
  auto refused = NodeProcess::Start(std::move(bad));
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().find("exited with status 2"), std::string::npos) << refused.error();
}

// --version; --log-format json writes one JSON object per line with UTC times, and the node says when it
// is ready.
TEST_F(NodeLifecycleTest, VersionAndJsonLogsInUtc) {
  std::string log;
  EXPECT_EQ(RunToExit(dir_ / "version", {"--version"}, &log), 0);
  EXPECT_NE(log.find("ringlimitd " RINGLIMIT_TEST_VERSION), std::string::npos) << log;
  EXPECT_EQ(RunToExit(dir_ / "bad-format", {"--log-format", "xml"}, &log), 2);

  auto node = StartNode({"--log-format", "json", "--threads", "1"});
  ASSERT_TRUE(node);
  ASSERT_TRUE(Eventually([&] { return node->Log().find("cluster: ready") != std::string::npos; }))
      << node->Log();
  std::istringstream lines(node->Log());
  int parsed = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    boost::system::error_code ec;
    const boost::json::value entry = boost::json::parse(line, ec);
    ASSERT_FALSE(ec) << "not JSON: " << line;
    const std::string time(entry.at("time").as_string());
    EXPECT_EQ(time.back(), 'Z') << line;
    EXPECT_FALSE(entry.at("level").as_string().empty()) << line;
    EXPECT_TRUE(entry.at("message").is_string()) << line;
    ++parsed;
  }
  EXPECT_GE(parsed, 3);

  NodeProcessOptions text_options;
  text_options.dir = dir_ / "text";
  auto text = NodeProcess::Start(std::move(text_options));
  ASSERT_TRUE(text) << text.error();
  const std::string first = (*text)->Log().substr(0, (*text)->Log().find('\n'));
  ASSERT_GT(first.size(), 24u) << first;
  EXPECT_EQ(first[23], 'Z') << "UTC timestamps: " << first;
}

TEST_F(NodeLifecycleTest, HelpAndBadFlags) {
  std::string log;
  EXPECT_EQ(RunToExit(dir_ / "help", {"--help"}, &log), 0);
  for (const char* flag :
       {"--listen", "--threads", "--max-keys", "--admin-token", "--key-header", "--headroom-ttl-ms",
        "--max-connections", "--read-timeout-ms", "--idle-timeout-ms", "--max-body-bytes", "--node-id",
        "--policies", "--config", "--log-level", "--port-file", "--max-clock-offset-ms"}) {
    EXPECT_NE(log.find(flag), std::string::npos) << flag << " is not documented by --help";
  }
  EXPECT_EQ(RunToExit(dir_ / "bad1", {"--no-such-flag"}, &log), 2);
  EXPECT_EQ(RunToExit(dir_ / "bad2", {"--log-level", "loud"}, &log), 2);
  EXPECT_EQ(RunToExit(dir_ / "bad3", {"--read-timeout-ms", "0"}, &log), 2);
  EXPECT_EQ(RunToExit(dir_ / "bad4", {"--threads", "many"}, &log), 2);
  EXPECT_EQ(RunToExit(dir_ / "bad6", {"--max-clock-offset-ms", "-1"}, &log), 2);
  EXPECT_NE(log.find("--max-clock-offset-ms: expected 0..86400000"), std::string::npos) << log;
  EXPECT_EQ(RunToExit(dir_ / "bad7", {"--max-clock-offset-ms", "soon"}, &log), 2);
  ASSERT_TRUE(WriteFile(dir_ / "broken.json", R"({"policies":{"x":{"limits":[{"limit":-1}]}}})"));
  EXPECT_EQ(RunToExit(dir_ / "bad5", {"--policies", (dir_ / "broken.json").string()}, &log), 1);
  EXPECT_NE(log.find("policies"), std::string::npos) << log;
}

TEST_F(NodeLifecycleTest, AddressInUseFailsToStart) {
  auto first = StartNode({"--threads", "1"});
  ASSERT_TRUE(first);
  NodeProcessOptions options;
  options.dir = dir_ / "second";
  options.listen = "127.0.0.1:" + std::to_string(first->http_port());
  auto second = NodeProcess::Start(std::move(options));
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().find("exited with status 1"), std::string::npos) << second.error();
}

// A busy peer port is reported at once: the replication and handoff parts created before the bind failed
// are dropped, not stopped (stopping waited seconds for io threads that never started, with warnings).
TEST_F(NodeLifecycleTest, PeerAddressInUseFailsToStartWithoutWaitingForItsParts) {
  const int busy = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(busy, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(busy, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(busy, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(busy, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string peer = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  std::string log;
  EXPECT_EQ(RunToExit(dir_ / "peer-busy", {"--peer-listen", peer, "--join", "127.0.0.1:1"}, &log), 1);
  ::close(busy);
  EXPECT_NE(log.find("cannot listen for peers on " + peer), std::string::npos) << log;
  EXPECT_EQ(log.find("did not reach the executor"), std::string::npos) << log;
}

}  // namespace
}  // namespace ringlimit::testing
