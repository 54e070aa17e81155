#include "tests/cluster/cluster_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

namespace ringlimit::testing {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;

// Pause between two polls of a condition that has a deadline.
constexpr auto kPollInterval = std::chrono::milliseconds(10);
// Per-request bound of the harness's own HTTP calls.
constexpr auto kRequestTimeout = std::chrono::milliseconds(2000);

std::string Join(const std::vector<std::string>& ids) {
  std::string out;
  for (const auto& id : ids) out += (out.empty() ? "" : ",") + id;
  return "[" + out + "]";
}

// An error result. (Plain `return "text";` is ambiguous for aggregates whose first member is a string.)
template <class T>
Result<T> Error(std::string message) {
  return Result<T>(boost::system::in_place_error, std::move(message));
}

}  // namespace

json::value JsonBody(const ClientResponse& response) {
  boost::system::error_code ec;
  json::value value = json::parse(response.body(), ec);
  return ec ? json::value() : value;
}

std::string StringField(const json::value& value, std::string_view name) {
  if (!value.is_object()) return "";
  const auto* field = value.as_object().if_contains(name);
  return field != nullptr && field->is_string() ? std::string(field->as_string()) : "";
}

std::string ErrorCode(const ClientResponse& response) {
  const auto body = JsonBody(response);
  if (!body.is_object()) return "";
  const auto* error = body.as_object().if_contains("error");
  return error == nullptr ? "" : StringField(*error, "code");
}

const MemberView* ClusterView::Find(std::string_view id) const {
  for (const auto& m : members) {
    if (m.id == id) return &m;
  }
  return nullptr;
}

std::vector<std::string> ClusterView::IdsInState(std::string_view state) const {
  std::vector<std::string> ids;
  for (const auto& m : members) {
    if (m.state == state) ids.push_back(m.id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

namespace {

// GET `target` and parse it with `parse` (which may throw on a body of the wrong shape).
template <class T>
Result<T> GetAndParse(const std::string& host, uint16_t http_port, const std::string& target,
                      const std::function<T(const json::value&)>& parse) {
  HttpClient client(host, http_port, kRequestTimeout);
  auto response = client.Get(target);
  if (!response) return Error<T>("GET " + target + ": " + response.error().message());
  if (response->result_int() != 200) {
    return Error<T>("GET " + target + ": status " + std::to_string(response->result_int()) + " " +
                    response->body());
  }
  try {
    return parse(JsonBody(*response));
  } catch (const std::exception& e) {
    return Error<T>("GET " + target + ": unexpected body (" + e.what() + "): " + response->body());
  }
}

}  // namespace

Result<ClusterView> FetchClusterView(uint16_t http_port) { return FetchClusterView("127.0.0.1", http_port); }

Result<ClusterView> FetchClusterView(const std::string& host, uint16_t http_port) {
  return GetAndParse<ClusterView>(host, http_port, "/v1/cluster", [](const json::value& body) {
    ClusterView view;
    view.node_id = std::string(body.at("node_id").as_string());
    view.ring_version = body.at("ring_version").to_number<uint64_t>();
    view.ring_fingerprint = std::string(body.at("ring_fingerprint").as_string());
    if (const json::value* handoffs = body.as_object().if_contains("handoffs")) {
      view.handoffs = handoffs->as_array().size();
      view.handoffs_json = json::serialize(*handoffs);
    }
    if (const json::value* fence = body.as_object().if_contains("fence")) {
      view.deciding = fence->at("deciding").as_bool();
      view.fence_reason = StringField(*fence, "reason");
    }
    if (const json::value* replication = body.as_object().if_contains("replication")) {
      view.pending_keys = replication->at("pending_keys").to_number<uint64_t>();
    }
    if (const json::value* clock = body.as_object().if_contains("clock")) {
      view.clock_state = StringField(*clock, "state");
      view.clock_offset_ms = clock->at("offset_ms").to_number<double>();
    }
    for (const auto& m : body.at("members").as_array()) {
      MemberView member;
      member.id = std::string(m.at("id").as_string());
      member.state = std::string(m.at("state").as_string());
      member.http_address = StringField(m, "http_address");
      member.peer_address = StringField(m, "peer_address");
      member.vnodes = m.at("vnodes").to_number<uint32_t>();
      member.share = m.at("share").to_number<double>();
      if (const json::value* offset = m.as_object().if_contains("clock_offset_ms")) {
        member.clock_offset_ms = offset->to_number<double>();
      }
      if (const json::value* uncertainty = m.as_object().if_contains("clock_uncertainty_ms")) {
        member.clock_uncertainty_ms = uncertainty->to_number<double>();
      }
      view.members.push_back(std::move(member));
    }
    return view;
  });
}

Result<RingAnswer> FetchRing(uint16_t http_port, const std::string& key) {
  return FetchRing("127.0.0.1", http_port, key);
}

Result<RingAnswer> FetchRing(const std::string& host, uint16_t http_port, const std::string& key) {
  return GetAndParse<RingAnswer>(host, http_port, "/v1/ring?key=" + key, [](const json::value& body) {
    RingAnswer answer;
    answer.owner = std::string(body.at("owner").as_string());
    for (const auto& m : body.at("preference_list").as_array()) {
      answer.preference_list.emplace_back(m.at("id").as_string());
    }
    return answer;
  });
}

Result<std::chrono::milliseconds> WaitFor(const std::string& what, std::chrono::milliseconds timeout,
                                          const std::function<bool(std::string*)>& condition) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  std::string last;
  while (true) {
    last.clear();
    if (condition(&last)) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    }
    if (Clock::now() >= deadline) {
      return "timed out after " + std::to_string(timeout.count()) + " ms waiting for " + what +
             (last.empty() ? "" : " (last: " + last + ")");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

Result<std::unique_ptr<Cluster>> Cluster::Start(ClusterOptions options) {
  std::string pattern = (fs::temp_directory_path() / "ringlimit-cluster-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) return std::string("mkdtemp: ") + std::strerror(errno);
  const int n = options.nodes;
  std::unique_ptr<Cluster> cluster(new Cluster(std::move(options), fs::path(pattern)));
  // One node at a time, each seen alive by all and its ranges handed over before the next joins: what
  // the tests check starts from a settled cluster (members joining in quick succession see different
  // intermediate rings, and their handoffs can wait for each other until a timeout).
  for (int i = 0; i < n; ++i) {
    if (auto added = cluster->AddNode(); !added) return added.error();
    if (auto converged = cluster->WaitConverged(); !converged) return converged.error();
    if (auto settled = cluster->WaitHandoffsDone(cluster->options_.converge_timeout); !settled)
      return settled.error();
  }
  return cluster;
}

Cluster::~Cluster() {
  for (auto& m : nodes_) m.process.reset();  // SIGKILLs what still runs
  // RINGLIMIT_KEEP_NODE_DIRS=1 keeps the nodes' directories (logs, data) for a post-mortem.
  if (const char* keep = std::getenv("RINGLIMIT_KEEP_NODE_DIRS");
      keep != nullptr && std::string_view(keep) == "1") {
    std::fprintf(stderr, "cluster directory kept: %s\n", root_.c_str());
    return;
  }
  std::error_code ignored;
  fs::remove_all(root_, ignored);
}

std::string Cluster::SecretEnv() const {
  // The root directory's name ends in mkdtemp's random suffix, unique among the clusters that exist.
  return "RINGLIMIT_CLUSTER_SECRET=" + root_.filename().string();
}

std::optional<size_t> Cluster::IndexOf(std::string_view id) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].id == id) return i;
  }
  return std::nullopt;
}

std::vector<size_t> Cluster::Running() const {
  std::vector<size_t> out;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (running(i)) out.push_back(i);
  }
  return out;
}

std::optional<size_t> Cluster::AnyRunningExcept(size_t i) const {
  for (size_t j : Running()) {
    if (j != i) return j;
  }
  return std::nullopt;
}

std::vector<std::string> Cluster::ArgsFor(const Member& m, std::optional<size_t> seed) const {
  std::vector<std::string> args = options_.args;
  args.insert(args.end(),
              {"--node-id", m.id, "--peer-listen", m.address + ":" + std::to_string(m.peer_port)});
  if (seed) {
    args.insert(args.end(), {"--join", host(*seed) + ":" + std::to_string(nodes_[*seed].peer_port)});
  }
  args.insert(args.end(), m.extra_args.begin(), m.extra_args.end());
  return args;
}

NodePlacement Cluster::PlacementOf(const std::string& id) const {
  return options_.placement ? options_.placement(id) : NodePlacement{};
}

Result<std::unique_ptr<NodeProcess>> Cluster::Launch(const Member& m, std::optional<size_t> seed) const {
  NodePlacement placement = PlacementOf(m.id);
  NodeProcessOptions options;
  options.args = ArgsFor(m, seed);
  options.listen = m.address + ":0";
  options.wrapper = std::move(placement.wrapper);
  // The cluster's secret, then both environments: the placement's (e.g. a skewed clock) and the member's
  // own (AddNode, SetEnv).
  options.env = {SecretEnv()};
  options.env.insert(options.env.end(), placement.env.begin(), placement.env.end());
  options.env.insert(options.env.end(), m.env.begin(), m.env.end());
  options.dir = root_ / m.id;
  options.start_timeout = options_.start_timeout;
  auto process = NodeProcess::Start(std::move(options));
  if (!process) return m.id + ": " + process.error();
  return std::move(*process);
}

Result<size_t> Cluster::AddNode(std::vector<std::string> extra_args, std::vector<std::string> env) {
  Member m;
  m.id = "n" + std::to_string(nodes_.size() + 1);
  m.extra_args = std::move(extra_args);
  m.address = PlacementOf(m.id).address;
  m.env = std::move(env);
  // The first start binds an ephemeral peer port (picking a free one beforehand raced with other tests
  // taking it before the node bound it); restarts keep that port, as a restarted node keeps its address.
  auto process = Launch(m, AnyRunningExcept(nodes_.size()));
  if (!process) return process.error();
  m.process = std::move(*process);
  const auto peer_port = m.process->port("peer_port");
  if (!peer_port || *peer_port == 0) return m.id + ": no peer_port in its port file";
  m.peer_port = *peer_port;
  nodes_.push_back(std::move(m));
  return nodes_.size() - 1;
}

Result<void> Cluster::Kill(size_t i) { return nodes_[i].process->Kill(); }

Result<void> Cluster::Restart(size_t i) {
  if (running(i)) return id(i) + " is still running";
  auto process = Launch(nodes_[i], AnyRunningExcept(i));
  if (!process) return process.error();
  nodes_[i].process = std::move(*process);
  return {};
}

Result<std::chrono::milliseconds> Cluster::WaitConverged() {
  return WaitConverged(options_.converge_timeout);
}

Result<std::chrono::milliseconds> Cluster::WaitConverged(std::chrono::milliseconds timeout) {
  std::vector<std::string> want;
  for (size_t i : Running()) want.push_back(id(i));
  std::sort(want.begin(), want.end());
  auto waited = WaitFor("every node to see " + Join(want) + " alive", timeout, [&](std::string* last) {
    for (size_t i : Running()) {
      auto view = FetchClusterView(host(i), http_port(i));
      if (!view) {
        *last = id(i) + ": " + view.error();
        return false;
      }
      const auto alive = view->IdsInState("alive");
      if (alive != want) {
        *last = id(i) + " sees " + Join(alive) + " alive";
        return false;
      }
    }
    return true;
  });
  if (!waited) return waited.error() + "\n" + Logs();
  return waited;
}

Result<std::chrono::milliseconds> Cluster::WaitDecidingAndShipped(std::chrono::milliseconds timeout,
                                                                  const std::vector<size_t>& except) {
  auto waited = WaitFor("every node deciding, every change shipped", timeout, [&](std::string* last) {
    for (size_t i : Running()) {
      if (std::find(except.begin(), except.end(), i) != except.end()) continue;
      auto view = FetchClusterView(host(i), http_port(i));
      if (!view) {
        *last = id(i) + ": " + view.error();
        return false;
      }
      if (!view->deciding || view->pending_keys != 0) {
        *last = id(i) + (view->deciding ? " has " + std::to_string(view->pending_keys) + " key(s) to ship"
                                        : " is fenced (not deciding)");
        return false;
      }
    }
    return true;
  });
  if (!waited) return waited.error() + "\n" + Logs();
  return waited;
}

Result<std::chrono::milliseconds> Cluster::WaitHandoffsDone(std::chrono::milliseconds timeout) {
  auto waited = WaitFor("no handoff in progress on any node", timeout, [&](std::string* last) {
    for (size_t i : Running()) {
      auto view = FetchClusterView(host(i), http_port(i));
      if (!view) {
        *last = id(i) + ": " + view.error();
        return false;
      }
      if (view->handoffs != 0) {
        *last = id(i) + " lists " + std::to_string(view->handoffs) + " handoff(s): " + view->handoffs_json;
        return false;
      }
    }
    return true;
  });
  if (!waited) return waited.error() + "\n" + Logs();
  return waited;
}

Result<std::chrono::milliseconds> Cluster::WaitSeenAs(size_t i, const std::vector<std::string>& states,
                                                      bool or_absent, std::chrono::milliseconds timeout) {
  std::string what = "every other node to see " + id(i) + " as " + Join(states);
  auto waited = WaitFor(what, timeout, [&](std::string* last) {
    for (size_t j : Running()) {
      if (j == i) continue;
      auto view = FetchClusterView(host(j), http_port(j));
      if (!view) {
        *last = id(j) + ": " + view.error();
        return false;
      }
      const MemberView* member = view->Find(id(i));
      if (member == nullptr) {
        if (or_absent) continue;
        *last = id(j) + " does not list " + id(i);
        return false;
      }
      if (std::find(states.begin(), states.end(), member->state) == states.end()) {
        *last = id(j) + " sees " + id(i) + " " + member->state;
        return false;
      }
    }
    return true;
  });
  if (!waited) return waited.error() + "\n" + Logs();
  return waited;
}

std::string Cluster::Logs() const {
  std::string out;
  for (const auto& m : nodes_) {
    std::string log = m.process ? m.process->Log() : "";
    constexpr size_t kTail = 2500;
    if (log.size() > kTail) log = "..." + log.substr(log.size() - kTail);
    out += "--- " + m.id + " log ---\n" + log;
  }
  return out;
}

}  // namespace ringlimit::testing
