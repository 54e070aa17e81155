// The `ringlimit` executable against a real ringlimitd: every sub-command's output and exit code.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <cctype>
#include <fstream>
#include <sstream>

#include "tests/support/node_process.h"

namespace ringlimit::client {
namespace {

using testing::NodeProcess;

constexpr const char* kToken = "cli-token";

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string Slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs the built `ringlimit` with `args` (no shell), capturing stdout and stderr in files.
// Whether `text` holds a number written with an exponent (1.2E3, 5e-07).
bool HasExponent(const std::string& text) {
  for (size_t i = 1; i + 1 < text.size(); ++i) {
    if ((text[i] != 'e' && text[i] != 'E') || !std::isdigit(static_cast<unsigned char>(text[i - 1])))
      continue;
    const size_t next = (text[i + 1] == '-' || text[i + 1] == '+') ? i + 2 : i + 1;
    if (next < text.size() && std::isdigit(static_cast<unsigned char>(text[next]))) return true;
  }
  return false;
}

// `env`: extra environment variables of the child, "NAME=value" each.
CliRun Ringlimit(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  static int counter = 0;
  const auto base = std::filesystem::temp_directory_path() /
                    ("rl-cli-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  const std::string out_path = base.string() + ".out", err_path = base.string() + ".err";
  CliRun run;
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* o = std::freopen(out_path.c_str(), "w", stdout);
    FILE* e = std::freopen(err_path.c_str(), "w", stderr);
    if (o == nullptr || e == nullptr) _exit(127);
    for (const std::string& entry : env) {
      const size_t eq = entry.find('=');
      setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
    }
    std::vector<char*> argv;
    std::string path = RINGLIMIT_CLI_PATH;
    argv.push_back(path.data());
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  run.out = Slurp(out_path);
  run.err = Slurp(err_path);
  std::filesystem::remove(out_path);
  std::filesystem::remove(err_path);
  return run;
}

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::NodeProcessOptions options;
    options.args = {"--threads", "2", "--admin-token", kToken};
    auto node = NodeProcess::Start(options);
    ASSERT_TRUE(node) << node.error();
    node_ = node->release();
  }
  static void TearDownTestSuite() {
    delete node_;
    node_ = nullptr;
  }
  static std::string Node() { return "127.0.0.1:" + std::to_string(node_->http_port()); }

  static inline NodeProcess* node_ = nullptr;
};

TEST_F(CliTest, CheckExitsZeroWhenAllowedAndOneWhenDenied) {
  const std::vector<std::string> args = {"check", "cli-user", "--node", Node(),        "--limit",
                                         "2",     "--window", "60s",    "--algorithm", "fixed_window"};
  for (int i = 0; i < 2; ++i) {
    CliRun r = Ringlimit(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("allowed\n", 0), 0u) << r.out;
    EXPECT_NE(r.out.find("remaining=" + std::to_string(1 - i)), std::string::npos) << r.out;
  }
  CliRun denied = Ringlimit(args);
  EXPECT_EQ(denied.exit_code, 1) << denied.err;
  EXPECT_EQ(denied.out.rfind("denied\n", 0), 0u) << denied.out;
  EXPECT_NE(denied.out.find("retry_after_ms="), std::string::npos);
  // --cost 0 peeks.
  CliRun peek =
      Ringlimit({"check", "cli-user-2", "--node", Node(), "--limit", "2", "--window", "1m", "--cost", "0"});
  EXPECT_EQ(peek.exit_code, 0) << peek.err;
  EXPECT_NE(peek.out.find("remaining=2"), std::string::npos) << peek.out;
}

// RINGLIMIT_NODE names the node(s) when --node is not given; --version prints the version.
TEST_F(CliTest, TheNodeFromTheEnvironmentAndTheVersion) {
  CliRun r = Ringlimit({"check", "cli-env-user", "--limit", "5", "--window", "60s"},
                       {"RINGLIMIT_NODE=127.0.0.1:1," + Node()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("remaining=4"), std::string::npos) << r.out;
  CliRun version = Ringlimit({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out, "ringlimit " RINGLIMIT_TEST_VERSION "\n");
}

TEST_F(CliTest, CheckErrorsExitTwoWithTheServersMessage) {
  CliRun bad = Ringlimit({"check", "k", "--node", Node(), "--limit", "0", "--window", "1s"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("invalid_field"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("limit"), std::string::npos) << bad.err;
  CliRun policy = Ringlimit({"check", "k", "--node", Node(), "--policy", "missing"});
  EXPECT_EQ(policy.exit_code, 2);
  EXPECT_NE(policy.err.find("unknown_policy"), std::string::npos) << policy.err;
  CliRun usage = Ringlimit({"check", "--node", Node()});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.err.find("KEY is required"), std::string::npos) << usage.err;
  CliRun window = Ringlimit({"check", "k", "--node", Node(), "--limit", "1", "--window", "soon"});
  EXPECT_EQ(window.exit_code, 2);
  CliRun both = Ringlimit({"check", "k", "--node", Node(), "--policy", "p", "--limit", "1"});
  EXPECT_EQ(both.exit_code, 2);
  CliRun down =
      Ringlimit({"check", "k", "--node", "127.0.0.1:1", "--limit", "1", "--window", "1s", "--attempts", "1"});
  EXPECT_EQ(down.exit_code, 2);
  EXPECT_NE(down.err.find("error: connection_failed"), std::string::npos) << down.err;
  CliRun unknown = Ringlimit({"frobnicate"});
  EXPECT_EQ(unknown.exit_code, 2);
  CliRun bad_flag = Ringlimit({"inspect", "k", "--nope"});
  EXPECT_EQ(bad_flag.exit_code, 2);
}

TEST_F(CliTest, InspectAndReset) {
  ASSERT_EQ(Ringlimit({"check", "cli-inspect", "--node", Node(), "--limit", "10", "--window", "1h", "--cost",
                       "3", "--name", "hourly"})
                .exit_code,
            0);
  CliRun inspect = Ringlimit({"inspect", "cli-inspect", "--node", Node()});
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("key cli-inspect: 1 state"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("hourly"), std::string::npos) << inspect.out;
  EXPECT_NE(inspect.out.find("token_bucket"), std::string::npos) << inspect.out;

  CliRun no_token = Ringlimit({"reset", "cli-inspect", "--node", Node()});
  EXPECT_EQ(no_token.exit_code, 2);
  EXPECT_NE(no_token.err.find("unauthorized"), std::string::npos) << no_token.err;
  CliRun reset = Ringlimit({"reset", "cli-inspect", "--node", Node(), "--admin-token", kToken});
  EXPECT_EQ(reset.exit_code, 0) << reset.err;
  EXPECT_EQ(reset.out, "reset cli-inspect: removed 1 state\n");
  CliRun empty = Ringlimit({"inspect", "cli-inspect", "--node", Node()});
  EXPECT_EQ(empty.out, "key cli-inspect: 0 states\n");
}

TEST_F(CliTest, ClusterStatusListsThisNode) {
  CliRun status = Ringlimit({"cluster", "status", "--node", Node()});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("1 members"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("alive"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find(Node()), std::string::npos) << status.out;
  CliRun what = Ringlimit({"cluster", "--node", Node()});
  EXPECT_EQ(what.exit_code, 2);
}

TEST_F(CliTest, ClusterLeaveStopsTheNode) {
  testing::NodeProcessOptions options;
  options.args = {"--threads", "1", "--admin-token", kToken};
  auto own = NodeProcess::Start(options);
  ASSERT_TRUE(own) << own.error();
  const std::string node = "127.0.0.1:" + std::to_string((*own)->http_port());
  CliRun refused = Ringlimit({"cluster", "leave", node, "--node", node});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("unauthorized"), std::string::npos) << refused.err;
  CliRun leave = Ringlimit({"cluster", "leave", node, "--node", node, "--admin-token", kToken});
  EXPECT_EQ(leave.exit_code, 0) << leave.err;
  EXPECT_NE(leave.out.find("leaving"), std::string::npos) << leave.out;
  auto exited = (*own)->WaitExit();
  ASSERT_TRUE(exited) << exited.error();
  EXPECT_EQ(*exited, 0);
}

TEST_F(CliTest, BenchReportsThroughputDecisionsAndPercentiles) {
  CliRun bench = Ringlimit({"bench", "--node", Node(), "--requests", "400", "--concurrency", "8", "--keys",
                            "20", "--limit", "10", "--window", "1h", "--algorithm", "fixed_window,gcra",
                            "--distribution", "zipf", "--json", "--quiet"});
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  boost::system::error_code ec;
  auto v = boost::json::parse(bench.out, ec);
  ASSERT_FALSE(ec) << bench.out;
  const auto& o = v.as_object();
  EXPECT_EQ(o.at("requests").to_number<uint64_t>(), 400u);
  EXPECT_EQ(o.at("errors").to_number<uint64_t>(), 0u);
  EXPECT_EQ(o.at("allowed").to_number<uint64_t>() + o.at("denied").to_number<uint64_t>(), 400u);
  EXPECT_LE(o.at("allowed").to_number<uint64_t>(), 20u * 10u);  // at most limit per key
  EXPECT_GT(o.at("denied").to_number<uint64_t>(), 0u);          // Zipf: the hot keys run out
  EXPECT_GT(o.at("p99_ms").to_number<double>(), 0.0);
  EXPECT_LE(o.at("p50_ms").to_number<double>(), o.at("p99_ms").to_number<double>());
  EXPECT_FALSE(HasExponent(bench.out)) << "plain numbers, no exponents: " << bench.out;
  uint64_t histogram_total = 0;
  for (const auto& bucket : o.at("histogram").as_array()) {
    histogram_total += bucket.at("count").to_number<uint64_t>();
  }
  EXPECT_EQ(histogram_total, 400u);

  CliRun human = Ringlimit({"bench", "--node", Node(), "--duration", "1s", "--rate", "200", "--method", "get",
                            "--concurrency", "4"});
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("req/s"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("p99.9"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("histogram"), std::string::npos) << human.out;
  // stderr is a file here, not a terminal: no progress line redrawn with \r.
  EXPECT_EQ(human.err.find('\r'), std::string::npos) << human.err;
  CliRun bad = Ringlimit({"bench", "--node", Node(), "--distribution", "pareto"});
  EXPECT_EQ(bad.exit_code, 2);
}

// --json on every sub-command: one JSON object with plain numbers.
TEST_F(CliTest, EverySubCommandSpeaksJson) {
  CliRun check =
      Ringlimit({"check", "cli-json", "--node", Node(), "--limit", "5", "--window", "60s", "--json"});
  ASSERT_EQ(check.exit_code, 0) << check.err;
  boost::system::error_code ec;
  auto v = boost::json::parse(check.out, ec);
  ASSERT_FALSE(ec) << check.out;
  EXPECT_TRUE(v.at("allowed").as_bool());
  EXPECT_EQ(v.at("results").as_array().at(0).at("remaining").to_number<uint64_t>(), 4u);
  CliRun inspect = Ringlimit({"inspect", "cli-json", "--node", Node(), "--json"});
  ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
  v = boost::json::parse(inspect.out, ec);
  ASSERT_FALSE(ec) << inspect.out;
  EXPECT_EQ(v.at("states").as_array().size(), 1u);
  CliRun status = Ringlimit({"cluster", "status", "--node", Node(), "--json"});
  ASSERT_EQ(status.exit_code, 0) << status.err;
  v = boost::json::parse(status.out, ec);
  ASSERT_FALSE(ec) << status.out;
  EXPECT_EQ(v.at("members").as_array().size(), 1u);
  EXPECT_FALSE(HasExponent(status.out)) << status.out;
  CliRun reset = Ringlimit({"reset", "cli-json", "--node", Node(), "--admin-token", kToken, "--json"});
  ASSERT_EQ(reset.exit_code, 0) << reset.err;
  v = boost::json::parse(reset.out, ec);
  ASSERT_FALSE(ec) << reset.out;
  EXPECT_EQ(v.at("removed").to_number<uint64_t>(), 1u);
}

TEST_F(CliTest, EverySubCommandHasHelp) {
  for (const char* cmd : {"check", "inspect", "reset", "cluster", "bench"}) {
    CliRun help = Ringlimit({cmd, "--help"});
    EXPECT_EQ(help.exit_code, 0) << cmd;
    EXPECT_NE(help.out.find(std::string("Usage: ringlimit ") + cmd), std::string::npos) << help.out;
    EXPECT_NE(help.out.find("--node"), std::string::npos) << cmd;
  }
  // Positional arguments are not listed as options.
  EXPECT_EQ(Ringlimit({"check", "--help"}).out.find("--key"), std::string::npos);
  EXPECT_EQ(Ringlimit({"cluster", "--help"}).out.find("--action"), std::string::npos);
  CliRun top = Ringlimit({"--help"});
  EXPECT_EQ(top.exit_code, 0);
  EXPECT_NE(top.out.find("cluster leave NODE"), std::string::npos);
  EXPECT_EQ(Ringlimit({}).exit_code, 2);
}

}  // namespace
}  // namespace ringlimit::client
