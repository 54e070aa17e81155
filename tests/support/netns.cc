#include "tests/support/netns.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

namespace ringlimit::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kPrefix[] = "rlg";
// The nftables table each namespace's cuts live in.
constexpr char kTable[] = "ringlimit_gray";

// What a shell command printed (stdout and stderr), and whether it exited 0.
struct ShOutput {
  bool ok = false;
  std::string text;  // the output; on failure, prefixed with the command and its exit status
  explicit operator bool() const { return ok; }
  const std::string& operator*() const { return text; }
  const std::string* operator->() const { return &text; }
  const std::string& error() const { return text; }
};

// Runs `command` through the shell.
ShOutput Sh(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {false, "popen " + command + " failed"};
  std::string output;
  char chunk[4096];
  size_t n = 0;
  while ((n = fread(chunk, 1, sizeof chunk, pipe)) > 0) output.append(chunk, n);
  const int status = pclose(pipe);
  if (status != 0) {
    return {false, command + ": exit " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ": " +
                       output};
  }
  return {true, output};
}

bool PidAlive(long pid) { return kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM; }

// The name at `at` in `line` when it is one of ours -- kPrefix, the creating pid, then `tag` ('n' and a
// node number: a namespace; 'b' followed by ':' or '@': a bridge) -- with that pid; nullopt otherwise.
// (Parsed by hand: GCC 12's <regex> trips -Wmaybe-uninitialized in the sanitizer build.)
std::optional<std::pair<std::string, long>> OurName(std::string_view line, size_t at, char tag) {
  const std::string_view prefix(kPrefix);
  if (at > line.size() || line.substr(at, prefix.size()) != prefix) return std::nullopt;
  auto digits_from = [&](size_t i) {
    while (i < line.size() && line[i] >= '0' && line[i] <= '9') ++i;
    return i;
  };
  const size_t pid_begin = at + prefix.size();
  size_t i = digits_from(pid_begin);
  if (i == pid_begin || i - pid_begin > 9 || i >= line.size() || line[i] != tag) return std::nullopt;
  const long pid = std::stol(std::string(line.substr(pid_begin, i - pid_begin)));
  ++i;
  if (tag == 'n') {
    const size_t node_begin = i;
    i = digits_from(i);
    if (i == node_begin) return std::nullopt;
  } else if (i >= line.size() || (line[i] != ':' && line[i] != '@')) {
    return std::nullopt;
  }
  return std::make_pair(std::string(line.substr(at, i - at)), pid);
}

// Runs `remove` + the name for every line of `listing`'s output that names one of ours (OurName, at the
// position `where` finds in the line, npos: none) whose creating process is gone.
void RemoveStale(const std::string& listing, const std::function<size_t(std::string_view)>& where, char tag,
                 const std::string& remove) {
  auto list = Sh(listing);
  if (!list) return;
  std::istringstream lines(*list);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = where(line);
    if (at == std::string_view::npos) continue;
    if (auto name = OurName(line, at, tag); name && !PidAlive(name->second)) (void)Sh(remove + name->first);
  }
}

// Deletes the namespaces and bridges of earlier runs whose process is gone.
void CleanStale() {
  // "rlg123n1 (id: 0)" / "7: rlg123b: <BROADCAST,...>"
  RemoveStale(
      "ip netns list", [](std::string_view) -> size_t { return 0; }, 'n', "ip netns del ");
  RemoveStale(
      "ip -o link show type bridge",
      [](std::string_view line) -> size_t {
        const size_t colon = line.find(": ");
        return colon == std::string_view::npos ? colon : colon + 2;
      },
      'b', "ip link del ");
}

// A /24 under 10.213.0.0/16 no interface of the root namespace uses yet, derived from the pid.
Result<int> PickSubnet() {
  auto addresses = Sh("ip -o -4 addr show");
  if (!addresses) return addresses.error();
  const int start = static_cast<int>(getpid() % 250);
  for (int k = 0; k < 250; ++k) {
    const int x = 1 + (start + k) % 250;
    if (addresses->find("10.213." + std::to_string(x) + ".") == std::string::npos) return x;
  }
  return std::string("no free 10.213.x.0/24 subnet");
}

}  // namespace

std::optional<std::string> NetnsFabric::Unsupported() {
  // Asked once per process: root alone is not enough (a container may deny CAP_NET_ADMIN), so this
  // creates and deletes a namespace.
  static const std::optional<std::string> why = []() -> std::optional<std::string> {
    if (geteuid() != 0)
      return "network namespaces need root (run the gray-failure tests as root, as CI does)";
    if (!Sh("nft --version")) return "`nft` is unavailable (install nftables: scripts/bootstrap)";
    const std::string probe = kPrefix + std::to_string(getpid()) + "n999";
    if (auto made = Sh("ip netns add " + probe + " && ip netns exec " + probe + " nft list ruleset"); !made) {
      (void)Sh("ip netns del " + probe);
      return "cannot create a network namespace with nftables here: " + made.error();
    }
    (void)Sh("ip netns del " + probe);
    return std::nullopt;
  }();
  return why;
}

Result<std::unique_ptr<NetnsFabric>> NetnsFabric::Create(size_t nodes) {
  if (auto why = Unsupported()) return *why;
  if (nodes < 1 || nodes > 200) return std::string("NetnsFabric: 1 to 200 nodes");
  CleanStale();
  auto subnet = PickSubnet();
  if (!subnet) return subnet.error();
  const std::string net = "10.213." + std::to_string(*subnet) + ".";
  const std::string tag = kPrefix + std::to_string(getpid());

  std::unique_ptr<NetnsFabric> fabric(new NetnsFabric());
  fabric->bridge_ = tag + "b";
  if (auto made = Sh("ip link add " + fabric->bridge_ + " type bridge && ip addr add " + net + "1/24 dev " +
                     fabric->bridge_ + " && ip link set " + fabric->bridge_ + " up");
      !made) {
    return made.error();
  }
  for (size_t i = 0; i < nodes; ++i) {
    const std::string ns = tag + "n" + std::to_string(i);
    const std::string veth = tag + "v" + std::to_string(i);
    const std::string address = net + std::to_string(10 + i);
    // Recorded before it exists, so the destructor removes a half-made namespace too.
    fabric->namespaces_.push_back(ns);
    fabric->addresses_.push_back(address);
    if (auto made = Sh("ip netns add " + ns + " && ip link add " + veth + " type veth peer name eth0 netns " +
                       ns + " && ip link set " + veth + " master " + fabric->bridge_ + " up && ip -n " + ns +
                       " addr add " + address + "/24 dev eth0 && ip -n " + ns +
                       " link set eth0 up && ip -n " + ns + " link set lo up");
        !made) {
      return made.error();
    }
    if (auto applied = fabric->Apply(i); !applied) return applied.error();
  }
  return fabric;
}

NetnsFabric::~NetnsFabric() {
  for (const auto& ns : namespaces_) (void)Sh("ip netns del " + ns);
  if (!bridge_.empty()) (void)Sh("ip link del " + bridge_);
}

std::vector<std::string> NetnsFabric::Wrapper(size_t i) const {
  return {"ip", "netns", "exec", namespaces_[i]};
}

Result<void> NetnsFabric::Apply(size_t i) {
  // Creating the table first makes the delete valid on the first call; the whole file is one transaction.
  std::string rules = std::string("add table inet ") + kTable + "\ndelete table inet " + kTable +
                      "\ntable inet " + kTable +
                      " {\n  chain out {\n    type filter hook output priority 0; policy accept;\n";
  for (const auto& [link, kind] : cuts_) {
    if (link.first != i) continue;
    rules += "    ip daddr " + addresses_[link.second] +
             (kind == CutKind::kConnections ? " ct direction original drop\n" : " drop\n");
  }
  rules += "  }\n}\n";
  const fs::path file = fs::temp_directory_path() / (namespaces_[i] + ".nft");
  if (auto written = WriteFile(file, rules); !written) return written.error();
  auto applied = Sh("ip netns exec " + namespaces_[i] + " nft -f " + file.string());
  std::error_code ignored;
  fs::remove(file, ignored);
  if (!applied) return applied.error();
  return {};
}

Result<void> NetnsFabric::Cut(size_t from, size_t to, CutKind kind) {
  if (from >= size() || to >= size() || from == to) return std::string("Cut: bad node index");
  cuts_[{from, to}] = kind;
  return Apply(from);
}

Result<void> NetnsFabric::CutBoth(size_t a, size_t b) {
  if (auto cut = Cut(a, b); !cut) return cut;
  return Cut(b, a);
}

Result<void> NetnsFabric::Isolate(const std::vector<size_t>& side) {
  std::set<size_t> in(side.begin(), side.end());
  for (size_t a : in) {
    for (size_t b = 0; b < size(); ++b) {
      if (in.count(b) == 0) {
        cuts_[{a, b}] = CutKind::kPackets;
        cuts_[{b, a}] = CutKind::kPackets;
      }
    }
  }
  for (size_t i = 0; i < size(); ++i) {
    if (auto applied = Apply(i); !applied) return applied;
  }
  return {};
}

Result<void> NetnsFabric::Heal(size_t from, size_t to) {
  if (cuts_.erase({from, to}) == 0) return {};
  return Apply(from);
}

Result<void> NetnsFabric::HealAll() {
  cuts_.clear();
  for (size_t i = 0; i < size(); ++i) {
    if (auto applied = Apply(i); !applied) return applied;
  }
  return {};
}

std::string CurlStatusFrom(const std::string& ns, const std::string& url, int seconds) {
  const std::string command = "ip netns exec " + ns + " curl -s -m " + std::to_string(seconds) +
                              " -o /dev/null -w '%{http_code}' " + url + " 2>/dev/null";
  std::string out;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char chunk[256];
    size_t n = 0;
    while ((n = fread(chunk, 1, sizeof chunk, pipe)) > 0) out.append(chunk, n);
    pclose(pipe);
  }
  return out;
}

}  // namespace ringlimit::testing
