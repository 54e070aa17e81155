#include "tests/support/node_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/parse.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>

#include "tests/support/http_client.h"

#ifndef RINGLIMITD_PATH
#error "RINGLIMITD_PATH must name the ringlimitd executable (set by tests/support/CMakeLists.txt)"
#endif

namespace ringlimit::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Pause between two polls of a condition that has a deadline.
constexpr auto kPollInterval = std::chrono::milliseconds(5);

std::string ReadWholeFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A fresh temporary directory; empty (and errno set) on failure.
fs::path MakeTempDir() {
  std::string pattern = (fs::temp_directory_path() / "ringlimitd-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) return {};
  return fs::path(pattern);
}

// The port `name` the node wrote to its port file ({"http":<port>,...}). nullopt while absent or
// incomplete.
std::optional<uint16_t> ReadPortFile(const fs::path& path, const std::string& name = "http") {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  boost::system::error_code parse_ec;
  auto value = boost::json::parse(ReadWholeFile(path), parse_ec);
  if (parse_ec || !value.is_object()) return std::nullopt;
  const auto* port = value.as_object().if_contains(name);
  if (port == nullptr || !port->is_int64()) return std::nullopt;
  return static_cast<uint16_t>(port->as_int64());
}

// Whether this ringlimitd documents `flag` in its --help (flags added by later issues, such as
// --peer-listen, are passed only when the binary has them). Asked once per flag and process.
bool SupportsFlag(const std::string& flag) {
  static std::mutex mutex;
  static std::map<std::string, bool> known;
  std::lock_guard lock(mutex);
  if (auto it = known.find(flag); it != known.end()) return it->second;
  std::string help;
  if (FILE* pipe = popen((std::string(RINGLIMITD_PATH) + " --help 2>/dev/null").c_str(), "r")) {
    char chunk[4096];
    size_t n = 0;
    while ((n = fread(chunk, 1, sizeof chunk, pipe)) > 0) help.append(chunk, n);
    pclose(pipe);
  }
  return known[flag] = help.find(flag + " ") != std::string::npos;
}

// `name` itself if it contains a '/', else the first executable PATH entry of that name ("" if none).
// Resolved before fork: the child may only make async-signal-safe calls.
std::string ResolveCommand(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = getenv("PATH");
  std::istringstream dirs(path == nullptr ? "/usr/sbin:/usr/bin:/sbin:/bin" : path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// This process's environment with `extra` ("NAME=value" each) added, overriding same-named entries.
std::vector<std::string> ChildEnvironment(const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const bool overridden = std::any_of(extra.begin(), extra.end(),
                                        [&](const std::string& x) { return name_of(x) == name_of(entry); });
    if (!overridden) out.push_back(entry);
  }
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

}  // namespace

Result<void> WriteFile(const fs::path& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  out.close();
  if (!out) return "cannot write " + path.string();
  return {};
}

NodeProcess::NodeProcess(NodeProcessOptions options, bool owns_dir)
    : options_(std::move(options)), owns_dir_(owns_dir) {}

NodeProcess::~NodeProcess() {
  if (running()) (void)Kill();
  // RINGLIMIT_KEEP_NODE_DIRS=1 keeps every node's directory (log, data) for a post-mortem.
  const char* keep = std::getenv("RINGLIMIT_KEEP_NODE_DIRS");
  if (owns_dir_ && !options_.keep_dir && (keep == nullptr || std::string_view(keep) != "1")) {
    std::error_code ignored;
    fs::remove_all(options_.dir, ignored);
  }
}

Result<std::unique_ptr<NodeProcess>> NodeProcess::Start(NodeProcessOptions options) {
  bool owns_dir = false;
  if (options.dir.empty()) {
    options.dir = MakeTempDir();
    if (options.dir.empty()) return std::string("mkdtemp: ") + std::strerror(errno);
    owns_dir = true;
  } else {
    std::error_code ec;
    fs::create_directories(options.dir, ec);
    if (ec) return "cannot create " + options.dir.string() + ": " + ec.message();
  }
  std::unique_ptr<NodeProcess> node(new NodeProcess(std::move(options), owns_dir));
  if (auto launched = node->Launch(); !launched) return launched.error();
  return node;
}

Result<void> NodeProcess::Launch() {
  if (running()) return std::string("the node is still running");
  const fs::path port_file = options_.dir / "port.json";
  std::error_code ignored;
  fs::remove(port_file, ignored);

  std::vector<std::string> args = options_.wrapper;
  if (!args.empty()) {
    args[0] = ResolveCommand(args[0]);
    if (args[0].empty()) return "wrapper " + options_.wrapper[0] + " not found in PATH";
  }
  args.insert(args.end(), {RINGLIMITD_PATH, "--listen", options_.listen, "--port-file", port_file.string()});
  // Several nodes run side by side in tests: every listening port is ephemeral.
  const bool own_peer_listen =
      std::find(options_.args.begin(), options_.args.end(), "--peer-listen") != options_.args.end();
  if (!own_peer_listen && SupportsFlag("--peer-listen")) {
    args.push_back("--peer-listen");
    args.push_back("127.0.0.1:0");
  }
  // A node on a non-loopback address (a network namespace the test created) refuses to start without an
  // admin token and a cluster secret; the tests that place nodes there are about partitions, not security.
  if (options_.insecure_beyond_loopback && !host().starts_with("127.") && SupportsFlag("--insecure"))
    args.push_back("--insecure");
  if (options_.pass_data_dir) {
    args.push_back("--data-dir");
    args.push_back(data_dir().string());
  }
  args.insert(args.end(), options_.args.begin(), options_.args.end());
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> environment = ChildEnvironment(options_.env);
  std::vector<char*> envp;
  for (auto& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const std::string log = (options_.dir / "ringlimitd.log").string();

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return std::string("fork: ") + std::strerror(errno);
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  pid_ = pid;
  exit_status_.reset();
  return WaitReady();
}

Result<void> NodeProcess::WaitReady() {
  const auto deadline = Clock::now() + options_.start_timeout;
  const fs::path port_file = options_.dir / "port.json";
  std::optional<uint16_t> port;
  while (true) {
    if (!port) port = ReadPortFile(port_file);
    if (port) {
      http_port_ = *port;
      HttpClient client(host(), *port, std::chrono::milliseconds(500));
      auto response = client.Get(options_.ready_path);
      if (response && response->result_int() == 200) return {};
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return "ringlimitd exited with status " + std::to_string(*exit_status_) + " before it was ready\n" +
             LogTail();
    }
    if (Clock::now() >= deadline) {
      return "ringlimitd not ready within " + std::to_string(options_.start_timeout.count()) + " ms\n" +
             LogTail();
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

Result<void> NodeProcess::Signal(int signal) {
  if (!running()) return std::string("the node is not running");
  if (kill(pid_, signal) != 0) return std::string("kill: ") + std::strerror(errno);
  if (signal != SIGSTOP) return {};
  // kill() returns before every thread has stopped: wait until the kernel reports the process stopped
  // ('T' in /proc/<pid>/stat), so that nothing it answers afterwards was sent after the call.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream stat("/proc/" + std::to_string(pid_) + "/stat");
    std::string line;
    std::getline(stat, line);
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos || paren + 2 >= line.size()) return {};  // gone: nothing to wait for
    if (line[paren + 2] == 'T' || line[paren + 2] == 't') return {};
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the next look at the condition
  }
  return std::string("the process did not stop within 10 s");
}

Result<int> NodeProcess::WaitExit(std::chrono::milliseconds timeout) {
  if (!running()) {
    if (exit_status_) return *exit_status_;
    return std::string("the node was never started");
  }
  const auto deadline = Clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t waited = waitpid(pid_, &status, WNOHANG);
    if (waited == pid_) {
      pid_ = -1;
      exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return *exit_status_;
    }
    if (waited < 0) return std::string("waitpid: ") + std::strerror(errno);
    if (Clock::now() >= deadline) {
      return "ringlimitd still running after " + std::to_string(timeout.count()) + " ms\n" + LogTail();
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

Result<void> NodeProcess::Kill() {
  if (auto sent = Signal(SIGKILL); !sent) return sent;
  if (auto exited = WaitExit(); !exited) return exited.error();
  return {};
}

Result<void> NodeProcess::Restart() { return Launch(); }

std::string NodeProcess::host() const { return options_.listen.substr(0, options_.listen.rfind(':')); }

std::optional<uint16_t> NodeProcess::port(const std::string& name) const {
  return ReadPortFile(options_.dir / "port.json", name);
}

std::string NodeProcess::Log() const { return ReadWholeFile(options_.dir / "ringlimitd.log"); }

std::string NodeProcess::LogTail() const {
  std::string log = Log();
  constexpr size_t kTail = 4000;
  if (log.size() > kTail) log = "..." + log.substr(log.size() - kTail);
  return "--- ringlimitd log ---\n" + log;
}

}  // namespace ringlimit::testing
