// ringlimitd's flags. Each flag is declared once, in FlagTable(): its name, the RINGLIMIT_ variable that
// also sets it, its --help text and where its value goes. ParseFlags reads the command line, then the
// environment, then a --config file (the first source to give a flag wins), and ValidateFlags turns what
// was given into NodeOptions or says what is wrong. main.cc only calls ParseFlags. See docs/operations.md.
//
// Thread safety: call from main's thread before any other thread runs (ValidateFlags raises the process's
// RLIMIT_NOFILE; ParseFlags writes to stdout and stderr).
#ifndef RINGLIMIT_NODE_SERVER_FLAGS_H_
#define RINGLIMIT_NODE_SERVER_FLAGS_H_

#include <spdlog/common.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "node/server/node.h"

namespace boost::program_options {
class value_semantic;
}

namespace ringlimit::node {

// What ringlimitd runs with, once checked.
struct Flags {
  NodeOptions node;
  std::string port_file;  // --port-file; empty: none
  spdlog::level::level_enum log_level = spdlog::level::info;
  bool log_json = false;
  std::vector<std::string> warnings;  // found while checking, logged once logging is set up
};

// The flags as given, before ValidateFlags: values the parser stores straight into NodeOptions, and the
// others as the parser read them (strings where ValidateFlags parses them, milliseconds as integers).
struct RawFlags {
  NodeOptions node;
  std::string port_file;
  bool insecure = false;
  bool max_connections_given = false;  // --max-connections came from a source, not its default
  std::string listen, peer_listen, grpc_listen;
  std::string log_level, log_format, config;
  std::string admin_token_file, cluster_secret_file;
  std::string max_memory, auth_missing_key;
  std::string peer_tls_cert, peer_tls_key, peer_tls_ca;
  std::string replication_mode, failure_mode, grants_mode;
  int grpc_max_message_bytes = 1 << 20;
  double grant_threshold = 0;
  int64_t headroom_ttl_ms = 0, read_timeout_ms = 0, idle_timeout_ms = 0, drain_timeout_ms = 0;
  int64_t probe_interval_ms = 0, probe_timeout_ms = 0, suspicion_timeout_ms = 0, forward_timeout_ms = 0;
  int64_t max_clock_offset_ms = 0, replication_interval_ms = 0, sync_timeout_ms = 0, grant_term_ms = 0;
};

// --help shows the groups in this order.
enum class FlagGroup : uint8_t { kGeneral, kHttp, kRateLimiting, kCluster };

struct FlagSpec {
  const char* name;  // the long name, with ",x" when it has a short one ("help,h")
  FlagGroup group;
  // The environment variable that sets it: RINGLIMIT_ and the name in upper case with '_' for '-'. Null
  // for --config, --help and --version, and for the secrets, whose variables are read with their files
  // (the flag, else its file, else the variable).
  const char* env;
  const char* help;
  // Where the parser stores the value, with its default; empty for a switch that only acts (--help).
  std::function<boost::program_options::value_semantic*(RawFlags& raw)> value;
};

// Every flag, in --help order within its group.
[[nodiscard]] std::span<const FlagSpec> FlagTable();

// The flag a variable sets ("RINGLIMIT_MAX_CONNECTIONS" -> "max-connections"), or "" for a variable that
// is no flag's (or whose flag has no variable).
[[nodiscard]] std::string FlagOfVariable(const std::string& variable);

// Checks `raw` and turns it into Flags: reads the secret files and the variables RINGLIMIT_ADMIN_TOKEN and
// RINGLIMIT_CLUSTER_SECRET, loads the peer TLS files, raises the soft RLIMIT_NOFILE to the hard one.
// Errors: InvalidArgument with the message ringlimitd prints ("--listen: expected HOST:PORT, got x").
[[nodiscard]] Result<Flags> ValidateFlags(RawFlags raw);

// Exit codes of ringlimitd.
inline constexpr int kExitOk = 0;
inline constexpr int kExitStartFailed = 1;
inline constexpr int kExitBadFlags = 2;

struct ParsedFlags {
  std::optional<Flags> flags;  // nullopt: exit with `exit_code` (--help, --version, bad flags)
  int exit_code = kExitOk;
};

// Parses and checks argv, the environment and --config. Prints --help and --version to stdout, and what is
// wrong with the flags to stderr ("ringlimitd: ...").
[[nodiscard]] ParsedFlags ParseFlags(int argc, char** argv);

}  // namespace ringlimit::node

#endif  // RINGLIMIT_NODE_SERVER_FLAGS_H_
