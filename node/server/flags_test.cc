// ringlimitd's flag table and its parsing (node/server/flags.h). The process-level behaviour (exit codes,
// --help, the environment against --config) is tested on the real binary in
// tests/node/node_lifecycle_test.cc.
#include "node/server/flags.h"

#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <set>
#include <string>
#include <vector>

namespace ringlimit::node {
namespace {

std::string LongName(const FlagSpec& spec) {
  const std::string name(spec.name);
  return name.substr(0, name.find(','));
}

// RINGLIMIT_ and the flag's name in upper case, '-' as '_'.
std::string VariableOf(const std::string& flag) {
  std::string variable = "RINGLIMIT_";
  for (char c : flag)
    variable += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return variable;
}

TEST(FlagTableTest, EveryFlagHasHelpAndOneName) {
  std::set<std::string> names;
  for (const FlagSpec& spec : FlagTable()) {
    const std::string name = LongName(spec);
    EXPECT_TRUE(names.insert(name).second) << "--" << name << " is declared twice";
    ASSERT_NE(spec.help, nullptr) << "--" << name;
    EXPECT_GE(std::string(spec.help).size(), 10u) << "--" << name << " has no real help text";
  }
  EXPECT_EQ(names.size(), 60u) << "a flag was added or removed: update this count and docs/operations.md";
}

// Every flag is also set by RINGLIMIT_<FLAG>, as before the table, except the secrets (read with their
// files: the flag, else the file, else the variable) and --config, --help and --version.
TEST(FlagTableTest, EveryFlagButTheSecretsAndTheActionsHasItsVariable) {
  const std::set<std::string> without = {"admin-token", "cluster-secret", "config", "help", "version"};
  for (const FlagSpec& spec : FlagTable()) {
    const std::string name = LongName(spec);
    if (without.contains(name)) {
      EXPECT_EQ(spec.env, nullptr) << "--" << name;
      EXPECT_EQ(FlagOfVariable(VariableOf(name)), "") << "--" << name;
      continue;
    }
    ASSERT_NE(spec.env, nullptr) << "--" << name << " has no variable";
    EXPECT_EQ(spec.env, VariableOf(name)) << "--" << name;
    EXPECT_EQ(FlagOfVariable(spec.env), name);
  }
  EXPECT_EQ(FlagOfVariable("RINGLIMIT_NO_SUCH_FLAG"), "");
  EXPECT_EQ(FlagOfVariable("PATH"), "");
}

ParsedFlags Parse(std::vector<std::string> args, std::string* err) {
  args.insert(args.begin(), "ringlimitd");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  testing::internal::CaptureStderr();
  ParsedFlags parsed = ParseFlags(static_cast<int>(argv.size()), argv.data());
  *err = testing::internal::GetCapturedStderr();
  return parsed;
}

TEST(ParseFlagsTest, DefaultsAndGivenValuesReachTheNodeOptions) {
  std::string err;
  ParsedFlags parsed = Parse({"--listen", "127.0.0.1:0", "--grants", "on", "--failure-mode", "closed",
                              "--join", "10.0.0.1:7101", "--max-memory", "64MiB", "--log-format", "json"},
                             &err);
  ASSERT_TRUE(parsed.flags.has_value()) << err;
  const NodeOptions& n = parsed.flags->node;
  EXPECT_EQ(n.http.address, "127.0.0.1");
  EXPECT_EQ(n.http.port, 0);
  EXPECT_EQ(n.cluster.peer_host, "127.0.0.1");
  EXPECT_EQ(n.cluster.peer_port, 7101);
  EXPECT_TRUE(n.grants.enabled);
  EXPECT_EQ(n.forward.failure_mode, cluster::FailureMode::kClosed);
  EXPECT_EQ(n.replication.mode, replication::ReplicationMode::kSync);  // closed makes sync the default
  EXPECT_EQ(n.storage.max_bytes, 64u << 20);
  EXPECT_EQ(n.cluster.seeds, std::vector<std::string>{"10.0.0.1:7101"});
  EXPECT_TRUE(parsed.flags->log_json);
  EXPECT_FALSE(n.grpc.has_value());
}

// --sync-timeout-ms: 250 ms unless given, below the forward timeout then (a forwarded check's
// sender must not give up on a decision still waiting for its acknowledgements).
TEST(ParseFlagsTest, SyncTimeoutIsGivenOrBelowTheForwardTimeout) {
  struct Case {
    std::vector<std::string> args;
    std::chrono::milliseconds sync_timeout;
  };
  const Case cases[] = {
      {{}, std::chrono::milliseconds(250)},
      {{"--forward-timeout-ms", "300"}, std::chrono::milliseconds(250)},
      {{"--forward-timeout-ms", "200"}, std::chrono::milliseconds(199)},
      {{"--sync-timeout-ms", "400"}, std::chrono::milliseconds(400)},
      {{"--sync-timeout-ms", "1500", "--forward-timeout-ms", "2000"}, std::chrono::milliseconds(1500)},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--listen", "127.0.0.1:0"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::string err;
    ParsedFlags parsed = Parse(args, &err);
    ASSERT_TRUE(parsed.flags.has_value()) << err;
    EXPECT_EQ(parsed.flags->node.replication.sync_timeout, c.sync_timeout) << args.back();
  }
}

TEST(ParseFlagsTest, BadValuesExitTwoWithTheMessage) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"--listen", "nope"}, "ringlimitd: --listen: expected HOST:PORT, got nope\n"},
      {{"--rls-config", "x.yaml"}, "ringlimitd: --rls-config needs --grpc-listen\n"},
      {{"--grants", "maybe"}, "ringlimitd: --grants: expected off or on, got maybe\n"},
      {{"--max-memory", "1MiB"},
       "ringlimitd: --max-memory must be at least 16MiB (or 0: unbounded), got 1MiB\n"},
      {{"--no-such-flag"}, "ringlimitd: unrecognised option '--no-such-flag'\n(try --help)\n"},
      {{"--sync-timeout-ms", "500"},
       "ringlimitd: --sync-timeout-ms: expected 1 to --forward-timeout-ms - 1 (499), got 500\n"},
      {{"--sync-timeout-ms", "-1"},
       "ringlimitd: --sync-timeout-ms: expected 1 to --forward-timeout-ms - 1 (499), got -1\n"},
  };
  for (const Case& c : cases) {
    std::string err;
    ParsedFlags parsed = Parse(c.args, &err);
    EXPECT_FALSE(parsed.flags.has_value()) << c.args[0];
    EXPECT_EQ(parsed.exit_code, kExitBadFlags) << c.args[0];
    EXPECT_EQ(err, c.message);
  }
}

TEST(ParseFlagsTest, ValidateFlagsSaysInvalidArgument) {
  RawFlags raw;  // no defaults applied: --listen is empty
  Result<Flags> flags = ValidateFlags(raw);
  ASSERT_FALSE(flags.ok());
  EXPECT_TRUE(flags.status().IsInvalidArgument());
  EXPECT_EQ(flags.status().message(), "--listen: expected HOST:PORT, got ");
}

}  // namespace
}  // namespace ringlimit::node
