#include "client/cli/commands.h"

#include <unistd.h>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/program_options.hpp>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <optional>

#include "client/cli/bench.h"
#include "client/cli/json_out.h"
#include "client/cli/parse.h"
#include "client/client.h"
#include "client/ring_routes.h"

namespace ringlimit::cli {
namespace po = boost::program_options;
namespace json = boost::json;
namespace {

bool StderrIsTerminal() { return isatty(STDERR_FILENO) == 1; }

constexpr const char* kUsage =
    "ringlimit: client of a ringlimit rate-limiter node or cluster\n\n"
    "Usage: ringlimit COMMAND [options]   (ringlimit COMMAND --help for its options)\n\n"
    "Commands:\n"
    "  check KEY        ask for a decision (exit 0 allowed, 1 denied, 2 error)\n"
    "  inspect KEY      show the stored states of KEY\n"
    "  reset KEY        reset the states of KEY (admin)\n"
    "  cluster status   membership table\n"
    "  cluster leave NODE   make NODE (id or host:port) leave the cluster gracefully (admin)\n"
    "  bench            load generator: throughput, decisions, latency percentiles\n";

// Options every command shares.
struct Common {
  std::vector<std::string> nodes;
  bool ring_aware = false;
  std::string admin_token;
  int64_t timeout_ms = 2000;
  int attempts = 3;
  bool json = false;
};

void AddCommon(po::options_description& d, Common& c, bool admin) {
  d.add_options()("help,h", "print this help")(
      "node,n", po::value(&c.nodes)->composing(),
      "HOST:PORT of a node's HTTP API; repeat for several (default: $RINGLIMIT_NODE, comma-separated, "
      "else 127.0.0.1:7001)")("ring-aware", po::bool_switch(&c.ring_aware),
                              "read the ring from GET /v1/cluster and send each key straight to its owner")(
      "timeout-ms", po::value(&c.timeout_ms)->default_value(2000), "time limit of one attempt")(
      "attempts", po::value(&c.attempts)->default_value(3), "attempts per call, on different nodes")(
      "json", po::bool_switch(&c.json), "print the result as one JSON object (plain numbers)");
  if (admin) {
    d.add_options()("admin-token", po::value(&c.admin_token),
                    "sent as `Authorization: Bearer TOKEN` (or set RINGLIMIT_ADMIN_TOKEN)");
  }
}

client::Result<std::unique_ptr<client::Client>> MakeClient(const Common& c, int io_threads = 1) {
  client::ClientOptions o;
  if (!c.nodes.empty()) {
    o.nodes = c.nodes;
  } else if (const char* env = std::getenv("RINGLIMIT_NODE"); env != nullptr && *env != '\0') {
    o.nodes.clear();
    std::string_view rest = env;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      if (std::string_view node = rest.substr(0, comma); !node.empty()) o.nodes.emplace_back(node);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  o.ring_aware = c.ring_aware;
  o.admin_token = c.admin_token;
  if (o.admin_token.empty()) {
    if (const char* env = std::getenv("RINGLIMIT_ADMIN_TOKEN"); env != nullptr) o.admin_token = env;
  }
  o.timeout = std::chrono::milliseconds(c.timeout_ms);
  o.max_attempts = c.attempts;
  o.io_threads = io_threads;
  o.max_idle_per_node = 1024;
  auto client = client::Client::Create(std::move(o));
  if (client && c.ring_aware) {
    (void)(*client)->Refresh();  // best effort: without a ring the calls go to --node and get forwarded
  }
  return client;
}

// Parses `args` against `desc` with positional names; prints help when asked. Returns nullopt to exit
// with *exit_code.
// `hidden`: the positional arguments' options, parsed but not listed by --help.
std::optional<po::variables_map> Parse(const std::vector<std::string>& args,
                                       const po::options_description& desc,
                                       const po::positional_options_description& positional,
                                       const std::string& usage, std::ostream& out, std::ostream& err,
                                       int* exit_code, const po::options_description& hidden = {}) {
  po::variables_map vm;
  try {
    po::options_description all;
    all.add(desc).add(hidden);
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
    if (vm.count("help")) {
      out << usage << "\n\n" << desc << "\n";
      *exit_code = kExitOk;
      return std::nullopt;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    err << "ringlimit: " << e.what() << "\n" << usage << "\n(--help for the options)\n";
    *exit_code = kExitError;
    return std::nullopt;
  }
  return vm;
}

int Fail(std::ostream& err, const client::Error& e) {
  err << "error: " << e.ToString() << "\n";
  return kExitError;
}

int Usage(std::ostream& err, const std::string& message) {
  err << "ringlimit: " << message << "\n";
  return kExitError;
}

// ---------------------------------------------------------------------------------------------------------

int Check(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Common common;
  std::string key, policy, tier, name, algorithm, window, mode;
  uint64_t limit = 0, cost = 1, burst = 0;
  po::options_description desc("Options");
  AddCommon(desc, common, false);
  po::options_description hidden;
  hidden.add_options()("key", po::value(&key), "entity key");
  desc.add_options()("policy,p", po::value(&policy), "named policy configured on the server")(
      "tier", po::value(&tier), "tier of the policy")("limit,l", po::value(&limit),
                                                      "inline limit: units per window")(
      "window,w", po::value(&window), "inline window: 250ms, 60s, 5m, 1h, 1d (bare number: ms)")(
      "algorithm,a", po::value(&algorithm),
      "fixed_window, anchored_window, sliding_log, sliding_window, sliding_window_approx, token_bucket "
      "(default), "
      "leaky_bucket, gcra")("burst", po::value(&burst), "bucket capacity / GCRA burst")(
      "name", po::value(&name), "inline limit name (default \"default\")")(
      "mode", po::value(&mode), "hard, soft, shadow or dynamic")("cost", po::value(&cost)->default_value(1),
                                                                 "units to charge (0 = peek)");
  po::positional_options_description pos;
  pos.add("key", 1);
  int code = kExitError;
  auto vm =
      Parse(args, desc, pos,
            "Usage: ringlimit check KEY [--policy P [--tier T] | --limit N --window 60s [--algorithm A]] "
            "[--cost C] [--json]",
            out, err, &code, hidden);
  if (!vm) return code;
  if (key.empty()) return Usage(err, "check: KEY is required");
  client::Check c{.key = key, .cost = cost};
  if (!policy.empty()) {
    if (vm->count("limit") || vm->count("window") || vm->count("algorithm")) {
      return Usage(err, "check: give either --policy or --limit/--window/--algorithm, not both");
    }
    c.policy = policy;
    if (!tier.empty()) c.tier = tier;
  } else {
    if (!vm->count("limit") || !vm->count("window")) {
      return Usage(err, "check: give --policy, or --limit and --window");
    }
    auto w = ParseDuration(window);
    if (!w) return Usage(err, "check: bad --window \"" + window + "\" (e.g. 500ms, 60s, 5m, 1h)");
    c.limit = limit;
    c.window_ms = static_cast<uint64_t>(w->count());
    if (!algorithm.empty()) c.algorithm = algorithm;
    if (!name.empty()) c.name = name;
    if (!mode.empty()) c.mode = mode;
    if (vm->count("burst")) c.burst = burst;
  }
  auto client = MakeClient(common);
  if (!client) return Fail(err, client.error());
  auto r = (*client)->Check(std::move(c));
  if (!r) return Fail(err, r.error());
  if (common.json) {
    json::object o;
    o["allowed"] = r->allowed;
    json::array results;
    for (const client::CheckResult& x : r->results) {
      json::object e;
      e["key"] = x.key;
      e["name"] = x.name;
      e["allowed"] = x.allowed;
      e["limit"] = x.limit;
      e["remaining"] = x.remaining;
      e["reset_ms"] = x.reset_ms;
      e["retry_after_ms"] = x.retry_after_ms;
      e["delay_ms"] = x.delay_ms;
      e["mode"] = x.mode;
      e["would_deny"] = x.would_deny;
      e["owner"] = x.owner;
      results.push_back(std::move(e));
    }
    o["results"] = std::move(results);
    out << ToJson(o) << "\n";
    return r->allowed ? kExitOk : kExitDenied;
  }
  out << (r->allowed ? "allowed" : "denied") << "\n";
  for (const client::CheckResult& x : r->results) {
    out << "  " << x.name << ": " << (x.allowed ? "allowed" : "denied") << " limit=" << x.limit
        << " remaining=" << x.remaining << " reset_ms=" << x.reset_ms
        << " retry_after_ms=" << x.retry_after_ms;
    if (x.delay_ms != 0) out << " delay_ms=" << x.delay_ms;
    out << " mode=" << x.mode;
    if (x.would_deny) out << " would_deny";
    if (!x.owner.empty()) out << " owner=" << x.owner;
    out << "\n";
  }
  return r->allowed ? kExitOk : kExitDenied;
}

int Inspect(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Common common;
  std::string key;
  po::options_description desc("Options");
  AddCommon(desc, common, false);
  po::options_description hidden;
  hidden.add_options()("key", po::value(&key), "entity key");
  po::positional_options_description pos;
  pos.add("key", 1);
  int code = kExitError;
  if (!Parse(args, desc, pos, "Usage: ringlimit inspect KEY [--json]", out, err, &code, hidden)) return code;
  if (key.empty()) return Usage(err, "inspect: KEY is required");
  auto client = MakeClient(common);
  if (!client) return Fail(err, client.error());
  auto r = (*client)->Inspect(key);
  if (!r) return Fail(err, r.error());
  if (common.json) {
    json::object o;
    o["key"] = r->key;
    json::array states;
    for (const client::KeyState& st : r->states) {
      json::object e;
      e["name"] = st.name;
      e["algorithm"] = st.algorithm;
      e["limit"] = st.limit;
      e["window_ms"] = st.window_ms;
      e["remaining"] = st.remaining;
      e["reset_ms"] = st.reset_ms;
      e["mode"] = st.mode;
      e["version"] = st.version;
      states.push_back(std::move(e));
    }
    o["states"] = std::move(states);
    out << ToJson(o) << "\n";
    return kExitOk;
  }
  out << "key " << r->key << ": " << r->states.size() << (r->states.size() == 1 ? " state" : " states")
      << "\n";
  if (r->states.empty()) return kExitOk;
  char line[512];
  std::snprintf(line, sizeof(line), "%-24s %-22s %12s %12s %12s %12s %-7s %8s\n", "NAME", "ALGORITHM",
                "LIMIT", "WINDOW_MS", "REMAINING", "RESET_MS", "MODE", "VERSION");
  out << line;
  for (const client::KeyState& s : r->states) {
    std::snprintf(line, sizeof(line), "%-24s %-22s %12llu %12llu %12llu %12lld %-7s %8llu\n", s.name.c_str(),
                  s.algorithm.c_str(), static_cast<unsigned long long>(s.limit),
                  static_cast<unsigned long long>(s.window_ms), static_cast<unsigned long long>(s.remaining),
                  static_cast<long long>(s.reset_ms), s.mode.c_str(),
                  static_cast<unsigned long long>(s.version));
    out << line;
  }
  return kExitOk;
}

int Reset(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Common common;
  std::string key, name;
  po::options_description desc("Options");
  AddCommon(desc, common, true);
  po::options_description hidden;
  hidden.add_options()("key", po::value(&key), "entity key");
  desc.add_options()("name", po::value(&name), "reset only this state (e.g. api/per_minute); default: all");
  po::positional_options_description pos;
  pos.add("key", 1);
  int code = kExitError;
  if (!Parse(args, desc, pos, "Usage: ringlimit reset KEY [--name STATE] [--admin-token T] [--json]", out,
             err, &code, hidden)) {
    return code;
  }
  if (key.empty()) return Usage(err, "reset: KEY is required");
  auto client = MakeClient(common);
  if (!client) return Fail(err, client.error());
  auto r = (*client)->Reset(key, name);
  if (!r) return Fail(err, r.error());
  if (common.json) {
    json::object o;
    o["key"] = key;
    o["removed"] = *r;
    out << ToJson(o) << "\n";
    return kExitOk;
  }
  out << "reset " << key << ": removed " << *r << (*r == 1 ? " state" : " states") << "\n";
  return kExitOk;
}

int Cluster(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Common common;
  std::string action, node;
  po::options_description desc("Options");
  AddCommon(desc, common, true);
  po::options_description hidden;
  hidden.add_options()("action", po::value(&action), "status or leave")("member", po::value(&node),
                                                                        "leave: the member id or HOST:PORT");
  po::positional_options_description pos;
  pos.add("action", 1).add("member", 1);
  int code = kExitError;
  if (!Parse(args, desc, pos,
             "Usage: ringlimit cluster status [--json] | ringlimit cluster leave NODE [--admin-token T]", out,
             err, &code, hidden)) {
    return code;
  }
  auto client = MakeClient(common);
  if (!client) return Fail(err, client.error());
  if (action == "status") {
    auto r = (*client)->ClusterStatus();
    if (!r) return Fail(err, r.error());
    if (common.json) {
      json::object o;
      o["node_id"] = r->node_id;
      o["ring_version"] = r->ring_version;
      json::array members;
      for (const client::Member& m : r->members) {
        json::object e;
        e["id"] = m.id;
        e["state"] = m.state;
        e["http_address"] = m.http_address;
        e["peer_address"] = m.peer_address;
        e["vnodes"] = m.vnodes;
        e["share"] = m.share;
        members.push_back(std::move(e));
      }
      o["members"] = std::move(members);
      out << ToJson(o) << "\n";
      return kExitOk;
    }
    out << "node " << r->node_id << ", ring version " << r->ring_version << ", " << r->members.size()
        << " members\n";
    char line[512];
    std::snprintf(line, sizeof(line), "%-16s %-9s %-22s %-22s %6s %7s\n", "ID", "STATE", "HTTP", "PEER",
                  "VNODES", "SHARE");
    out << line;
    for (const client::Member& m : r->members) {
      std::snprintf(line, sizeof(line), "%-16s %-9s %-22s %-22s %6u %6.1f%%\n", m.id.c_str(), m.state.c_str(),
                    m.http_address.c_str(), m.peer_address.c_str(), m.vnodes, m.share * 100);
      out << line;
    }
    return kExitOk;
  }
  if (action == "leave") {
    if (node.empty()) return Usage(err, "cluster leave: NODE is required");
    auto r = (*client)->Leave(node);
    if (!r) return Fail(err, r.error());
    if (common.json) {
      out << (r->empty() || r->back() != '\n' ? *r + "\n" : *r);
      return kExitOk;
    }
    out << "leave requested: " << *r << (r->empty() || r->back() != '\n' ? "\n" : "");
    return kExitOk;
  }
  return Usage(err,
               action.empty() ? "cluster: status or leave?" : "cluster: unknown action \"" + action + "\"");
}

int Bench(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Common common;
  BenchOptions b;
  std::string duration, window, distribution, method, costs, algorithms;
  int io_threads = 1;
  bool quiet = false;
  po::options_description desc("Options");
  AddCommon(desc, common, false);
  desc.add_options()("concurrency,c", po::value(&b.concurrency)->default_value(64),
                     "requests in flight (closed loop) or their cap (open loop)")(
      "duration,d", po::value(&duration)->default_value("10s"), "how long to run (e.g. 30s)")(
      "requests", po::value(&b.requests)->default_value(0), "send this many requests instead of --duration")(
      "rate,r", po::value(&b.rate)->default_value(0), "open loop: requests per second (0 = closed loop)")(
      "keys,k", po::value(&b.keys)->default_value(10000), "distinct keys")(
      "key-prefix", po::value(&b.key_prefix)->default_value("bench:"), "key names: PREFIX<index>")(
      "distribution", po::value(&distribution)->default_value("uniform"), "uniform or zipf")(
      "zipf-s", po::value(&b.zipf_s)->default_value(1.0), "Zipf exponent")(
      "batch,b", po::value(&b.batch)->default_value(1), "checks per POST request")(
      "method", po::value(&method)->default_value("post"), "post (JSON body) or get (status code only)")(
      "cost", po::value(&costs)->default_value("1"), "cost per check, or a list picked at random: 1,2,5")(
      "algorithm,a", po::value(&algorithms)->default_value("token_bucket"),
      "algorithm, or a list assigned to keys round robin: gcra,token_bucket")(
      "limit,l", po::value(&b.limit)->default_value(100), "inline limit per window")(
      "window,w", po::value(&window)->default_value("1s"), "inline window")(
      "policy,p", po::value(&b.policy), "use this named policy instead of inline limits")(
      "io-threads", po::value(&io_threads)->default_value(1), "client I/O threads")(
      "seed", po::value(&b.seed)->default_value(1), "random seed")(
      "quiet,q", po::bool_switch(&quiet),
      "no live progress line (there is none when stderr is not a terminal)");
  po::positional_options_description pos;
  int code = kExitError;
  if (!Parse(args, desc, pos, "Usage: ringlimit bench [--node H:P ...] [options]", out, err, &code))
    return code;
  auto d = ParseDuration(duration);
  auto w = ParseDuration(window);
  auto dist = ParseKeyDistribution(distribution);
  auto m = ParseBenchMethod(method);
  auto c = ParseUintList(costs);
  if (!d || d->count() == 0) return Usage(err, "bench: bad --duration \"" + duration + "\"");
  if (!w || w->count() == 0) return Usage(err, "bench: bad --window \"" + window + "\"");
  if (!dist) return Usage(err, "bench: --distribution must be uniform or zipf");
  if (!m) return Usage(err, "bench: --method must be post or get");
  if (!c) return Usage(err, "bench: bad --cost \"" + costs + "\"");
  if (b.concurrency < 1 || b.batch < 1 || b.batch > 1000 || b.keys < 1 || io_threads < 1 || b.zipf_s <= 0) {
    return Usage(err, "bench: --concurrency, --keys, --io-threads >= 1; --batch 1..1000; --zipf-s > 0");
  }
  b.duration = *d;
  b.window_ms = static_cast<uint64_t>(w->count());
  b.distribution = *dist;
  b.method = *m;
  b.costs = *c;
  b.algorithms = SplitList(algorithms);
  if (b.algorithms.empty()) return Usage(err, "bench: empty --algorithm");
  // The progress line is redrawn in place: only on a terminal.
  if (quiet || !StderrIsTerminal()) b.progress_interval = std::chrono::milliseconds(0);
  auto client = MakeClient(common, io_threads);
  if (!client) return Fail(err, client.error());
  BenchReport report = RunBench(**client, b, err);
  out << (common.json ? ReportJson(report) + "\n" : FormatReport(report));
  return report.requests > 0 && report.errors < report.requests ? kExitOk : kExitError;
}

}  // namespace

int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    (args.empty() ? err : out) << kUsage;
    return args.empty() ? kExitError : kExitOk;
  }
  if (args[0] == "--version" || args[0] == "version") {
    out << "ringlimit " << RINGLIMIT_VERSION << "\n";
    return kExitOk;
  }
  static const std::map<std::string,
                        std::function<int(const std::vector<std::string>&, std::ostream&, std::ostream&)>>
      kCommands = {
          {"check", Check}, {"inspect", Inspect}, {"reset", Reset}, {"cluster", Cluster}, {"bench", Bench}};
  auto it = kCommands.find(args[0]);
  if (it == kCommands.end()) {
    err << "ringlimit: unknown command \"" << args[0] << "\"\n\n" << kUsage;
    return kExitError;
  }
  return it->second(std::vector<std::string>(args.begin() + 1, args.end()), out, err);
}

}  // namespace ringlimit::cli
