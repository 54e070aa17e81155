// NodeProcess: a real `ringlimitd` process for integration, durability and cluster tests.
//
// Start() launches the ringlimitd built by this tree (its path is compiled in as RINGLIMITD_PATH) on
// 127.0.0.1 with an ephemeral port (`--listen 127.0.0.1:0`), in a working directory of its own (a
// fresh temporary one unless NodeProcessOptions::dir names one), learns the bound port from the
// `--port-file` the node writes, and returns once GET /readyz answers 200. Everything is bounded by
// deadlines; conditions are polled, never slept on. The process's stdout and stderr go to
// <dir>/ringlimitd.log (Log() returns it, and failures quote its tail).
//
//   auto node = NodeProcess::Start({.args = {"--max-keys", "1000"}});
//   ASSERT_TRUE(node) << node.error();
//   HttpClient client((*node)->http_port());
//   ...
//   ASSERT_TRUE((*node)->Signal(SIGKILL));
//   ASSERT_TRUE((*node)->WaitExit());
//   ASSERT_TRUE((*node)->Restart());           // same flags, same directory (and data dir)
//
// The directory survives restarts; a temporary one is removed when the NodeProcess is destroyed
// (unless keep_dir). Destroying a NodeProcess SIGKILLs a process still running. The child also gets
// SIGKILL if the thread that started it dies (PR_SET_PDEATHSIG), so a crashed test leaves no node
// behind.
//
// A node can run inside a network namespace or under libfaketime: `wrapper` prefixes the command (e.g.
// {"ip", "netns", "exec", "rlg123n1"}), `env` adds environment variables (e.g. LD_PRELOAD and FAKETIME),
// and `listen` names the address the test reaches it at (host() is its host part). The pid is the
// wrapper's, which must exec the node in place (as `ip netns exec` and `env` do), so signals reach it.
//
// Thread safety: none; drive one NodeProcess from one thread.
#ifndef RINGLIMIT_TESTS_SUPPORT_NODE_PROCESS_H_
#define RINGLIMIT_TESTS_SUPPORT_NODE_PROCESS_H_

#include <sys/types.h>

#include <boost/system/result.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ringlimit::testing {

// An error for humans (what failed, with the node's log tail where it helps).
template <class T>
using Result = boost::system::result<T, std::string>;

struct NodeProcessOptions {
  // Extra command-line flags, e.g. {"--policies", path, "--threads", "2"}. The harness adds
  // --listen (below), --port-file, --peer-listen 127.0.0.1:0 (when the binary has that flag and args do
  // not set it) and
  // (see pass_data_dir) --data-dir itself; a flag given twice is an error (exit 2).
  std::vector<std::string> args;

  // The --listen address. Its host part is where the harness sends its own requests (host()): an IPv4
  // address this process can reach. Default: "127.0.0.1:0" (an ephemeral loopback port; a restart gets a
  // new one).
  std::string listen = "127.0.0.1:0";

  // A command the node is started under, with ringlimitd's command line appended to it; it must exec
  // that command line in place (same pid). A name without '/' is looked up in PATH. Empty: ringlimitd is
  // started directly. Default: empty.
  std::vector<std::string> wrapper = {};

  // Extra environment variables of the node, "NAME=value" each; they override inherited ones of the same
  // name. May change between restarts (set_env). Default: empty.
  std::vector<std::string> env = {};

  // Working directory of the node (log, port file, data). Empty: a fresh temporary directory,
  // removed with the NodeProcess. Default: empty.
  std::filesystem::path dir;

  // Pass `--insecure` when `listen` is not on 127.0.0.0/8 (a node in a network namespace the test created,
  // which would otherwise refuse to start without an admin token and a cluster secret). Default: true.
  bool insecure_beyond_loopback = true;

  // Pass `--data-dir <dir>/data` (durable storage). Default: false (memory-only node).
  bool pass_data_dir = false;

  // Keep the directory when the NodeProcess is destroyed (to inspect a failure). Default: false.
  bool keep_dir = false;

  // How long Start/Restart wait for /readyz. Default: 15000 ms (generous for sanitizer builds).
  std::chrono::milliseconds start_timeout{15'000};

  // The path whose 200 answer means started. "/healthz" for a node that is not meant to become ready
  // (e.g. one that cannot join its cluster). Default: "/readyz".
  std::string ready_path = "/readyz";
};

class NodeProcess {
 public:
  // Starts a node and waits until it is ready.
  [[nodiscard]] static Result<std::unique_ptr<NodeProcess>> Start(NodeProcessOptions options = {});

  ~NodeProcess();
  NodeProcess(const NodeProcess&) = delete;
  NodeProcess& operator=(const NodeProcess&) = delete;

  // The HTTP port of the running (or last) incarnation.
  [[nodiscard]] uint16_t http_port() const { return http_port_; }
  // Any port the node wrote to its --port-file ({"http":..., and later e.g. "peer":...}); nullopt
  // when the file or the entry is missing.
  [[nodiscard]] std::optional<uint16_t> port(const std::string& name) const;
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] const std::filesystem::path& dir() const { return options_.dir; }
  [[nodiscard]] std::filesystem::path data_dir() const { return options_.dir / "data"; }
  [[nodiscard]] bool running() const { return pid_ > 0; }
  // The host part of NodeProcessOptions::listen: where the harness reaches the node.
  [[nodiscard]] std::string host() const;
  // Replaces NodeProcessOptions::env for the next Restart (e.g. to restart a node with a skewed clock).
  void set_env(std::vector<std::string> env) { options_.env = std::move(env); }

  // Sends `signal` (SIGTERM, SIGINT, SIGHUP, SIGKILL, ...) to the running process.
  // SIGSTOP returns once the kernel reports the process stopped (every thread), not when it was sent.
  [[nodiscard]] Result<void> Signal(int signal);

  // Waits for the process to exit. Returns its exit code, or 128 + signal number if a signal killed
  // it. Fails if it is still running after `timeout`.
  [[nodiscard]] Result<int> WaitExit(std::chrono::milliseconds timeout = std::chrono::seconds(15));

  // SIGKILL and wait.
  [[nodiscard]] Result<void> Kill();

  // Starts the process again (after it exited or was killed) with the same flags and directory; the
  // port is a new ephemeral one. Waits for /readyz.
  [[nodiscard]] Result<void> Restart();

  // Everything the process (all incarnations) wrote to stdout and stderr.
  [[nodiscard]] std::string Log() const;

 private:
  explicit NodeProcess(NodeProcessOptions options, bool owns_dir);
  Result<void> Launch();
  Result<void> WaitReady();
  std::string LogTail() const;

  NodeProcessOptions options_;
  bool owns_dir_ = false;
  pid_t pid_ = -1;
  uint16_t http_port_ = 0;
  std::optional<int> exit_status_;
};

// Writes `contents` to `path` (e.g. a policies file for --policies). Fails with a message.
[[nodiscard]] Result<void> WriteFile(const std::filesystem::path& path, const std::string& contents);

}  // namespace ringlimit::testing

#endif  // RINGLIMIT_TESTS_SUPPORT_NODE_PROCESS_H_
