// ringlimitd: parses flags (command line and --config file), sets up logging, starts a Node and
// waits for signals. SIGTERM/SIGINT: graceful stop, exit 0. SIGHUP: reload the policies file and
// --rls-config. POST /v1/cluster/leave: leave the cluster, then the same graceful stop, exit 0. Everything
// else lives in Node (node/server/node.h). See docs/operations.md.
#include <signal.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/program_options.hpp>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "node/cluster/cluster.h"
#include "node/peer/peer_options.h"
#include "node/server/file_watcher.h"
#include "node/server/node.h"

namespace {

namespace po = boost::program_options;
using ringlimit::node::NodeOptions;

// Exit codes.
constexpr int kExitOk = 0;
constexpr int kExitStartFailed = 1;
constexpr int kExitBadFlags = 2;

struct Flags {
  NodeOptions node;
  std::string port_file;
  spdlog::level::level_enum log_level = spdlog::level::info;
  bool log_json = false;
  std::vector<std::string> warnings;  // found while parsing, logged once logging is set up
};

struct Parsed {
  std::optional<Flags> flags;  // nullopt: exit with `exit_code`
  int exit_code = kExitOk;
};

// "123", "64MiB", "512M", "2GiB", "1.5G" (binary units; B, K/KiB, M/MiB, G/GiB, T/TiB, case-insensitive).
std::optional<uint64_t> ParseBytes(const std::string& text) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
  size_t end = 0;
  double number = 0;
  try {
    number = std::stod(text, &end);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::string unit = text.substr(end);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  if (unit == "k" || unit == "kib" || unit == "kb") scale = 0x1p10;
  if (unit == "m" || unit == "mib" || unit == "mb") scale = 0x1p20;
  if (unit == "g" || unit == "gib" || unit == "gb") scale = 0x1p30;
  if (unit == "t" || unit == "tib" || unit == "tb") scale = 0x1p40;
  if (scale == 0 || !(number >= 0) || number * scale >= 0x1p63) return std::nullopt;
  return static_cast<uint64_t>(number * scale);
}

// The memory this process may use: physical memory, or the cgroup's limit (v2 memory.max, v1
// memory.limit_in_bytes) when lower. 0 when unknown.
uint64_t AvailableMemory() {
  uint64_t bytes = 0;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) bytes = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    uint64_t limit = 0;
    if (in >> limit && limit > 0 && (bytes == 0 || limit < bytes)) bytes = limit;  // "max" fails the read
  }
  return bytes;
}

// "host:port", "[v6]:port" or ":port" (all interfaces).
bool ParseListen(const std::string& text, std::string* host, uint16_t* port) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  std::string h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) h = "0.0.0.0";
  const std::string p = text.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) return false;
  const unsigned long value = std::stoul(p);
  if (value > 65535) return false;
  *host = h;
  *port = static_cast<uint16_t>(value);
  return true;
}

// %* in a --log-format json pattern: the message as the inside of a JSON string.
class JsonMessageFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    static constexpr char kHex[] = "0123456789abcdef";
    for (char c : std::string_view(msg.payload.data(), msg.payload.size())) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        dest.push_back('\\');
        dest.push_back(c);
      } else if (c == '\n') {
        dest.append(std::string_view("\\n"));
      } else if (u < 0x20) {
        const char escaped[] = {'\\', 'u', '0', '0', kHex[u >> 4], kHex[u & 0xf]};
        dest.append(escaped, escaped + sizeof(escaped));
      } else {
        dest.push_back(c);
      }
    }
  }
  [[nodiscard]] std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

// True for an address only this machine can reach: 127.0.0.0/8, ::1 (and IPv4-mapped loopback), "localhost".
// Any other name or address -- 0.0.0.0, an interface's address, a host name -- may be reachable from
// elsewhere.
bool IsLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  boost::system::error_code ec;
  const boost::asio::ip::address address = boost::asio::ip::make_address(host, ec);
  if (ec) return false;
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, address.to_v6()).is_loopback();
  }
  return address.is_loopback();
}

// The flag RINGLIMIT_<FLAG> sets ("RINGLIMIT_MAX_CONNECTIONS" -> "max-connections"), or "" for a variable
// that is no flag's (and for the secrets', read later with their files, and --config/--help/--version).
std::string FlagOfVariable(const po::options_description& all, const std::string& variable) {
  static constexpr std::string_view kPrefix = "RINGLIMIT_";
  if (!variable.starts_with(kPrefix)) return "";
  std::string flag = variable.substr(kPrefix.size());
  for (char& c : flag) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (flag == "admin-token" || flag == "cluster-secret" || flag == "config" || flag == "help" ||
      flag == "version")
    return "";
  return all.find_nothrow(flag, false) != nullptr ? flag : "";
}

Parsed ParseFlags(int argc, char** argv) {
  const NodeOptions defaults;
  std::string listen, log_level, config;
  std::string admin_token_file, cluster_secret_file;
  std::string max_memory;
  std::string peer_tls_cert, peer_tls_key, peer_tls_ca;
  bool insecure = false;
  std::string auth_missing_key;
  int64_t headroom_ttl_ms = 0, read_timeout_ms = 0, idle_timeout_ms = 0, drain_timeout_ms = 0;
  Flags flags;
  NodeOptions& n = flags.node;

  po::options_description general("General");
  std::string log_format;
  general.add_options()("help,h", "print this help and exit")("version", "print the version and exit")(
      "log-format", po::value(&log_format)->default_value("text"),
      "text (one line per event, UTC timestamps) or json (one JSON object per line)")(
      "config", po::value(&config),
      "read further flags from FILE (lines of `name = value`; the command line wins)")(
      "log-level", po::value(&log_level)->default_value("info"),
      "trace, debug, info, warn, error, critical or off")(
      "port-file", po::value(&flags.port_file),
      "once listening, write {\"http\":PORT,\"peer_port\":PORT[,\"grpc_port\":PORT],\"pid\":PID} to PATH "
      "(for scripts "
      "and tests "
      "using port 0)")(
      "node-id", po::value(&n.node_id),
      "member id in the cluster and logs: 1-64 bytes of [A-Za-z0-9._-] (default: <host name>-<http port>)")(
      "insecure", po::bool_switch(&insecure),
      "start even though an address it listens on is not loopback and --admin-token or --cluster-secret is "
      "missing (logged as a warning); without it such a node refuses to start");

  const ringlimit::ring::MembershipOptions swim;
  std::string peer_listen;
  std::string grpc_listen;
  int grpc_max_message_bytes = 1 << 20;
  int64_t probe_interval_ms = 0, probe_timeout_ms = 0, suspicion_timeout_ms = 0, forward_timeout_ms = 0;
  int64_t max_clock_offset_ms = 0;
  std::string replication_mode;
  std::string failure_mode;
  int64_t replication_interval_ms = 0;
  std::string grants_mode;
  double grant_threshold = 0;
  int64_t grant_term_ms = 0;
  po::options_description cluster("Cluster");
  cluster.add_options()("peer-listen", po::value(&peer_listen)->default_value("127.0.0.1:7101"),
                        "HOST:PORT of the peer protocol (membership, forwarding); port 0 picks a free port")(
      "advertise-peer", po::value(&n.cluster.advertise_peer),
      "HOST or HOST:PORT the other members reach this node's peer port at (default: the --peer-listen "
      "address; required when that is 0.0.0.0 or ::)")(
      "advertise-http", po::value(&n.advertise_http),
      "HOST or HOST:PORT clients and the console reach this node's HTTP API at, as shown in /v1/cluster "
      "(default: the --listen address, or for 0.0.0.0 / :: the advertised peer host)")(
      "join-dns", po::value(&n.cluster.join_dns)->composing(),
      "NAME:PORT whose addresses are peers to join through (repeatable), resolved at start and every 10 s "
      "again (a Kubernetes headless service); a node none of them answers within 3 s starts alone and "
      "merges with the others when they appear")(
      "join", po::value(&n.cluster.seeds)->composing(),
      "HOST:PORT: peer address of a member to join through (repeatable); without it the node starts alone")(
      "vnodes", po::value(&n.cluster.vnodes)->default_value(n.cluster.vnodes),
      "virtual nodes of this member on the ring (1 to --max-member-vnodes)")(
      "max-member-vnodes",
      po::value(&n.cluster.membership.max_vnodes)->default_value(n.cluster.membership.max_vnodes),
      "the most vnodes a member may announce; a member announcing more is refused (1-4096)")(
      "replicas", po::value(&n.cluster.replicas)->default_value(n.cluster.replicas),
      "copies of each key's counters: its owner and the next replicas-1 members clockwise (capped at the "
      "member count; 1 = no replication)")(
      "replication",
      po::value(&replication_mode)->default_value("", "async, or sync with --failure-mode closed"),
      "async: ship changes to the replicas within --replication-interval-ms, off the request path; sync: "
      "answer a check only after a replica has acknowledged its new state. --failure-mode closed makes sync "
      "the default: exactness under gray failures needs both (docs/gray-failures.md)")(
      "replication-interval-ms",
      po::value(&replication_interval_ms)->default_value(defaults.replication.interval.count()),
      "async replication: how often changed counters are shipped to the replicas")(
      "cluster-secret", po::value(&n.cluster.cluster_secret),
      "shared secret: peers must prove it (HMAC handshake) before any message is accepted; better from "
      "--cluster-secret-file or RINGLIMIT_CLUSTER_SECRET, which ps does not show")(
      "cluster-secret-file", po::value(&cluster_secret_file),
      "read --cluster-secret from this file (trailing whitespace dropped)")(
      "probe-interval-ms", po::value(&probe_interval_ms)->default_value(swim.probe_interval.count()),
      "SWIM: one member is probed per interval")(
      "probe-timeout-ms", po::value(&probe_timeout_ms)->default_value(swim.probe_timeout.count()),
      "SWIM: wait for a direct answer before asking other members to probe (< probe interval)")(
      "suspicion-timeout-ms", po::value(&suspicion_timeout_ms)->default_value(swim.suspicion_timeout.count()),
      "SWIM: a suspect that does not refute within this is declared dead")(
      "forward-timeout-ms", po::value(&forward_timeout_ms)->default_value(n.forward.timeout.count()),
      "a check forwarded to its owner that is not answered within this is sent again to it once (if it is "
      "not known dead), then goes to the next node")(
      "failure-mode", po::value(&failure_mode)->default_value("open"),
      "when no holder of a key answers and this node holds no copy: open decides from this node's own copy "
      "(merged into the holders' count later; counted in ringlimit_forward_fallback_open_total), "
      "closed answers 503 unavailable")(
      "max-clock-offset-ms",
      po::value(&max_clock_offset_ms)->default_value(n.cluster.clock.max_offset.count()),
      "a node whose wall clock is off from most members' by more than this refuses to decide checks "
      "(0..86400000; 0 disables the rule)")(
      "grants", po::value(&grants_mode)->default_value("off"),
      "quota grants of hot keys (docs/limiter.md \"Quota grants\"): on lets a node that sees a key's checks "
      "at --grant-threshold or more ask the key's owner for a slice of its budget and decide them itself "
      "from it, never over the limit (token_bucket and fixed_window in hard mode; others stay "
      "owner-decided); off forwards every check")(
      "grant-threshold", po::value(&grant_threshold)->default_value(n.grants.planner.threshold),
      "--grants on: a key's checks per second entering a node from which it asks the owner for a slice")(
      "grant-term-ms",
      po::value(&grant_term_ms)
          ->default_value(
              std::chrono::duration_cast<std::chrono::milliseconds>(n.grants.planner.term).count()),
      "--grants on: how long a slice may be used, counted from when its request was sent (1..60000); "
      "the owner reclaims an unreleased slice min(250 ms, term) after it");

  po::options_description http("HTTP server");
  http.add_options()("listen", po::value(&listen)->default_value("127.0.0.1:7001"),
                     "HOST:PORT to serve the HTTP API on; port 0 picks a free port")(
      "threads", po::value(&n.threads)->default_value(0), "threads serving requests (0 = hardware threads)")(
      "max-connections", po::value(&n.http.max_connections)->default_value(defaults.http.max_connections),
      "open connections at most: a new one beyond it replaces the connection idle the longest, or gets 503 "
      "when none is idle")(
      "max-connections-per-client",
      po::value(&n.http.max_connections_per_client)->default_value(defaults.http.max_connections_per_client),
      "open connections per client address at most (503 beyond); 0 = half of --max-connections")(
      "read-timeout-ms", po::value(&read_timeout_ms)->default_value(defaults.http.read_timeout.count()),
      "a started request must arrive completely within this time, else 408")(
      "idle-timeout-ms", po::value(&idle_timeout_ms)->default_value(defaults.http.idle_timeout.count()),
      "close keep-alive connections idle for this long")(
      "max-body-bytes", po::value(&n.http.max_body_bytes)->default_value(defaults.http.max_body_bytes),
      "largest request body; larger gets 413")(
      "max-header-bytes", po::value(&n.http.max_header_bytes)->default_value(defaults.http.max_header_bytes),
      "largest request line + headers; larger gets 431")(
      "drain-timeout-ms", po::value(&drain_timeout_ms)->default_value(defaults.drain_timeout.count()),
      "on SIGTERM/SIGINT, how long to let connections finish their requests");

  po::options_description api("Rate limiting");
  api.add_options()("policies", po::value(&n.policies_path),
                    "named policies file (JSON, see docs/api.md); reloaded on SIGHUP")(
      "grpc-listen", po::value(&grpc_listen),
      "serve Envoy's rate limit service (gRPC) on HOST:PORT (port 0 = ephemeral); off unless set")(
      "grpc-max-message-bytes", po::value(&grpc_max_message_bytes)->default_value(1 << 20),
      "largest gRPC request message; larger gets RESOURCE_EXHAUSTED")(
      "rls-response-headers", po::bool_switch(&n.api.rls_response_headers),
      "add RateLimit / RateLimit-Policy and X-RateLimit-* to the rate limit service's answers, for Envoy to "
      "pass on")(
      "rls-config", po::value(&n.rls_config_path),
      "envoyproxy/ratelimit YAML config for the gRPC rate limit service (docs/api.md); reloaded when it "
      "changes and on SIGHUP")(
      "max-metric-names", po::value(&n.max_metric_names)->default_value(defaults.max_metric_names),
      "inline limit names and RLS descriptor rules with decision series of their own in /metrics; later "
      "ones count as name=\"other\"")(
      "max-keys", po::value(&n.storage.max_keys)->default_value(defaults.storage.max_keys),
      "most limiter states in memory; least recently used are evicted beyond it (0 = unbounded)")(
      "max-memory", po::value(&max_memory)->default_value("auto"),
      "most memory the limiter states take (e.g. 512MiB, 4GiB; at least 16MiB); least recently used are "
      "evicted beyond it. auto = a quarter of the machine's (or the cgroup's) memory; 0 = unbounded")(
      "data-dir", po::value(&n.storage.data_dir),
      "RocksDB directory for the counters (created if missing); empty = memory-only")(
      "flush-interval-ms",
      po::value(&n.storage.flush_interval_ms)->default_value(defaults.storage.flush_interval_ms),
      "how often dirty counters are written to RocksDB (the most a kill -9 can lose)")(
      "tls-cert", po::value(&n.http.tls_cert_file),
      "serve the HTTP API (and --grpc-listen) over TLS with this PEM certificate chain; needs --tls-key")(
      "tls-key", po::value(&n.http.tls_key_file), "the PEM private key of --tls-cert")(
      "peer-tls-cert", po::value(&peer_tls_cert),
      "TLS on the peer port with this PEM certificate chain (mutual: every peer needs one signed by "
      "--peer-tls-ca); needs --peer-tls-key and --peer-tls-ca, on every node")(
      "peer-tls-key", po::value(&peer_tls_key), "the PEM private key of --peer-tls-cert")(
      "peer-tls-ca", po::value(&peer_tls_ca), "the PEM CA every peer's certificate must chain to")(
      "admin-token-file", po::value(&admin_token_file),
      "read --admin-token from this file (trailing whitespace dropped); or set RINGLIMIT_ADMIN_TOKEN")(
      "admin-token", po::value(&n.api.admin_token),
      "require `Authorization: Bearer TOKEN` on DELETE /v1/keys and PUT /v1/headroom")(
      "auth-deny-status", po::value(&n.api.auth_deny_status)->default_value(defaults.api.auth_deny_status),
      "GET /v1/auth (nginx auth_request): the status of a denied or bad request, 403 or 401")(
      "auth-missing-key", po::value(&auth_missing_key)->default_value("deny"),
      "GET /v1/auth without a key: deny (the --auth-deny-status) or allow (200)")(
      "key-header", po::value(&n.api.key_header)->default_value(defaults.api.key_header),
      "request header GET /v1/check reads the key from when the query has none (empty: off)")(
      "headroom-ttl-ms", po::value(&headroom_ttl_ms)->default_value(defaults.api.headroom_ttl.count()),
      "how long a PUT /v1/headroom signal lasts unless the request gives ttl_ms");

  po::options_description all("ringlimitd: a ringlimit rate-limiter node\n\nUsage: ringlimitd [flags]");
  all.add(general).add(http).add(api).add(cluster);

  Parsed parsed;
  bool max_connections_given = false;
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, all), vm);
    if (vm.count("version")) {
      std::cout << "ringlimitd " << RINGLIMIT_VERSION << "\n";
      return parsed;
    }
    if (vm.count("help")) {
      std::cout << all
                << "\nSignals: SIGTERM/SIGINT stop gracefully (exit 0); SIGHUP reloads --policies and "
                   "--rls-config.\n"
                   "POST /v1/cluster/leave leaves the cluster cleanly, then stops the same way (exit 0).\n";
      return parsed;
    }
    // Then the environment: RINGLIMIT_<FLAG> (upper case, '-' as '_') for every flag; a flag on the
    // command line wins over it, and it wins over the config file. The two secrets keep their own rule
    // (below: the flag, else its file, else the variable).
    po::store(po::parse_environment(all,
                                    [&all](const std::string& variable) -> std::string {
                                      return FlagOfVariable(all, variable);
                                    }),
              vm);
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream file(path);
      if (!file) throw po::error("cannot read config file " + path);
      po::store(po::parse_config_file(file, all), vm);
    }
    po::notify(vm);
    max_connections_given = !vm["max-connections"].defaulted();
  } catch (const po::error& e) {
    std::cerr << "ringlimitd: " << e.what() << "\n(try --help)\n";
    parsed.exit_code = kExitBadFlags;
    return parsed;
  }

  auto bad = [&](const std::string& message) {
    std::cerr << "ringlimitd: " << message << "\n";
    parsed.exit_code = kExitBadFlags;
    return parsed;
  };
  if (!ParseListen(listen, &n.http.address, &n.http.port))
    return bad("--listen: expected HOST:PORT, got " + listen);
  // Secrets: the flag, its file, or the environment -- one source each.
  for (auto [flag, value, file, env] :
       {std::tuple<const char*, std::string*, const std::string*, const char*>{
            "admin-token", &n.api.admin_token, &admin_token_file, "RINGLIMIT_ADMIN_TOKEN"},
        {"cluster-secret", &n.cluster.cluster_secret, &cluster_secret_file, "RINGLIMIT_CLUSTER_SECRET"}}) {
    if (!file->empty()) {
      if (!value->empty()) return bad(std::string("give --") + flag + " or --" + flag + "-file, not both");
      std::ifstream in(*file);
      std::ostringstream text;
      if (!in || !(text << in.rdbuf())) return bad(std::string("--") + flag + "-file: cannot read " + *file);
      *value = text.str();
      while (!value->empty() && std::isspace(static_cast<unsigned char>(value->back()))) value->pop_back();
      if (value->empty()) return bad(std::string("--") + flag + "-file: " + *file + " is empty");
    } else if (value->empty()) {
      if (const char* from_env = std::getenv(env); from_env != nullptr) *value = from_env;
    }
  }
  if (n.api.auth_deny_status != 401 && n.api.auth_deny_status != 403)
    return bad("--auth-deny-status: expected 401 or 403 (what a proxy's auth_request understands)");
  if (auth_missing_key != "deny" && auth_missing_key != "allow")
    return bad("--auth-missing-key: expected deny or allow, got " + auth_missing_key);
  n.api.auth_allow_without_key = auth_missing_key == "allow";
  if (log_format != "text" && log_format != "json")
    return bad("--log-format: expected text or json, got " + log_format);
  flags.log_json = log_format == "json";
  flags.log_level = spdlog::level::from_str(log_level);
  if (flags.log_level == spdlog::level::off && log_level != "off")
    return bad("--log-level: unknown level " + log_level);
  if (read_timeout_ms <= 0 || idle_timeout_ms <= 0 || headroom_ttl_ms <= 0 || drain_timeout_ms < 0) {
    return bad("timeouts must be positive");
  }
  if (n.storage.flush_interval_ms == 0) return bad("--flush-interval-ms must be at least 1");
  constexpr uint64_t kMinMaxMemory = 16u << 20;
  if (max_memory == "auto") {
    n.storage.max_bytes = std::max<uint64_t>(AvailableMemory() / 4, kMinMaxMemory);
  } else if (std::optional<uint64_t> bytes = ParseBytes(max_memory); !bytes.has_value()) {
    return bad("--max-memory: expected a size like 512MiB or 4GiB, auto, or 0; got " + max_memory);
  } else if (*bytes != 0 && *bytes < kMinMaxMemory) {
    return bad("--max-memory must be at least 16MiB (or 0: unbounded), got " + max_memory);
  } else {
    n.storage.max_bytes = *bytes;
  }
  if (n.http.max_connections == 0) return bad("--max-connections must be at least 1");
  // Every connection is an open file, and RocksDB, the peer transport and gRPC need some more: raise the
  // soft RLIMIT_NOFILE to the hard one, then make sure the connections fit under it.
  constexpr rlim_t kReservedFiles = 512;
  if (rlimit nofile{}; getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    if (nofile.rlim_cur < nofile.rlim_max) {
      rlimit raised = nofile;
      raised.rlim_cur = nofile.rlim_max;
      if (setrlimit(RLIMIT_NOFILE, &raised) == 0) nofile = raised;
    }
    const rlim_t usable = nofile.rlim_cur > kReservedFiles ? nofile.rlim_cur - kReservedFiles : 0;
    if (n.http.max_connections > usable) {
      const std::string why = "--max-connections " + std::to_string(n.http.max_connections) + " needs " +
                              std::to_string(n.http.max_connections + kReservedFiles) +
                              " open files; the limit (ulimit -n) is " + std::to_string(nofile.rlim_cur);
      if (max_connections_given || usable == 0) return bad(why + ": lower it or raise the limit");
      n.http.max_connections = static_cast<size_t>(usable);
      flags.warnings.push_back(why + ": serving at most " + std::to_string(usable) + " connections");
    }
  }
  if (n.http.max_header_bytes < 256) return bad("--max-header-bytes must be at least 256");
  if (n.http.tls_cert_file.empty() != n.http.tls_key_file.empty()) {
    return bad("give both --tls-cert and --tls-key (or neither)");
  }
  if (!peer_tls_cert.empty() || !peer_tls_key.empty() || !peer_tls_ca.empty()) {
    if (peer_tls_cert.empty() || peer_tls_key.empty() || peer_tls_ca.empty()) {
      return bad("give all of --peer-tls-cert, --peer-tls-key and --peer-tls-ca (or none)");
    }
    std::string error;
    n.cluster.peer_tls_server =
        ringlimit::peer::MakeTlsContext(true, peer_tls_cert, peer_tls_key, peer_tls_ca, &error);
    if (n.cluster.peer_tls_server != nullptr) {
      n.cluster.peer_tls_client =
          ringlimit::peer::MakeTlsContext(false, peer_tls_cert, peer_tls_key, peer_tls_ca, &error);
    }
    if (n.cluster.peer_tls_client == nullptr) return bad(error);
  }
  n.http.read_timeout = std::chrono::milliseconds(read_timeout_ms);
  n.http.idle_timeout = std::chrono::milliseconds(idle_timeout_ms);
  n.api.headroom_ttl = std::chrono::milliseconds(headroom_ttl_ms);
  n.drain_timeout = std::chrono::milliseconds(drain_timeout_ms);

  if (!grpc_listen.empty()) {
    ringlimit::node::GrpcServerOptions grpc;
    if (!ParseListen(grpc_listen, &grpc.address, &grpc.port))
      return bad("--grpc-listen: expected HOST:PORT, got " + grpc_listen);
    if (grpc_max_message_bytes < 1024) return bad("--grpc-max-message-bytes must be at least 1024");
    grpc.max_message_bytes = grpc_max_message_bytes;
    grpc.tls_cert_file = n.http.tls_cert_file;
    grpc.tls_key_file = n.http.tls_key_file;
    grpc.drain_timeout = n.drain_timeout;
    n.grpc = std::move(grpc);
  } else if (!n.rls_config_path.empty()) {
    return bad("--rls-config needs --grpc-listen");
  }
  if (!ParseListen(peer_listen, &n.cluster.peer_host, &n.cluster.peer_port))
    return bad("--peer-listen: expected HOST:PORT, got " + peer_listen);
  for (const std::string& name : n.cluster.join_dns) {
    std::string host;
    uint16_t port = 0;
    if (!ParseListen(name, &host, &port) || port == 0)
      return bad("--join-dns: expected NAME:PORT, got " + name);
  }
  for (const std::string& seed : n.cluster.seeds) {
    std::string host;
    uint16_t port = 0;
    if (!ParseListen(seed, &host, &port) || port == 0) return bad("--join: expected HOST:PORT, got " + seed);
  }
  if (!n.node_id.empty()) {
    if (ringlimit::Status s = ringlimit::cluster::ValidateNodeId(n.node_id); !s.ok())
      return bad("--node-id: " + s.message());
  }
  if (probe_interval_ms <= 0 || probe_timeout_ms <= 0 || suspicion_timeout_ms <= 0 ||
      forward_timeout_ms <= 0) {
    return bad(
        "--probe-interval-ms, --probe-timeout-ms, --suspicion-timeout-ms and --forward-timeout-ms "
        "must be positive");
  }
  n.cluster.membership.probe_interval = std::chrono::milliseconds(probe_interval_ms);
  n.cluster.membership.probe_timeout = std::chrono::milliseconds(probe_timeout_ms);
  n.cluster.membership.suspicion_timeout = std::chrono::milliseconds(suspicion_timeout_ms);
  n.forward.timeout = std::chrono::milliseconds(forward_timeout_ms);
  if (grants_mode == "on") {
    n.grants.enabled = true;
  } else if (grants_mode != "off") {
    return bad("--grants: expected off or on, got " + grants_mode);
  }
  if (grant_term_ms < 1 || grant_term_ms > 60'000) return bad("--grant-term-ms: expected 1..60000");
  n.grants.planner.threshold = grant_threshold;
  n.grants.planner.term = std::chrono::milliseconds(grant_term_ms);
  n.grants.planner.margin = std::min(n.grants.planner.margin, n.grants.planner.term);
  if (ringlimit::Status s = ringlimit::cluster::Validate(n.grants.planner); !s.ok())
    return bad("--grant-*: " + s.message());
  if (max_clock_offset_ms < 0 || max_clock_offset_ms > 86'400'000)
    return bad("--max-clock-offset-ms: expected 0..86400000 (0 disables the clock offset rule), got " +
               std::to_string(max_clock_offset_ms));
  n.cluster.clock.max_offset = std::chrono::milliseconds(max_clock_offset_ms);
  if (failure_mode == "open") {
    n.forward.failure_mode = ringlimit::cluster::FailureMode::kOpen;
  } else if (failure_mode == "closed") {
    n.forward.failure_mode = ringlimit::cluster::FailureMode::kClosed;
  } else {
    return bad("--failure-mode: expected open or closed, got " + failure_mode);
  }
  if (replication_mode.empty()) replication_mode = failure_mode == "closed" ? "sync" : "async";
  if (auto mode = ringlimit::replication::ParseReplicationMode(replication_mode)) {
    n.replication.mode = *mode;
  } else {
    return bad("--replication: expected async or sync, got " + replication_mode);
  }
  if (replication_interval_ms <= 0 || replication_interval_ms > 60'000)
    return bad("--replication-interval-ms: expected 1..60000");
  n.replication.interval = std::chrono::milliseconds(replication_interval_ms);
  // A wildcard peer address cannot be announced: the others would send to 0.0.0.0.
  if ((n.cluster.peer_host == "0.0.0.0" || n.cluster.peer_host == "::") && n.cluster.advertise_peer.empty()) {
    return bad("--peer-listen " + peer_listen +
               " listens on every interface, which is no address the other members can reach: give "
               "--advertise-peer HOST[:PORT]");
  }
  // Secure by default: a node reachable from other machines must authenticate its admin operations and its
  // peers, unless told otherwise.
  std::vector<std::string> exposed;
  if (!IsLoopbackHost(n.http.address)) exposed.push_back("--listen " + listen);
  if (!IsLoopbackHost(n.cluster.peer_host)) exposed.push_back("--peer-listen " + peer_listen);
  if (n.grpc && !IsLoopbackHost(n.grpc->address)) exposed.push_back("--grpc-listen " + grpc_listen);
  std::vector<std::string> missing;
  if (n.api.admin_token.empty()) missing.emplace_back("--admin-token");
  if (n.cluster.cluster_secret.empty()) missing.emplace_back("--cluster-secret");
  if (!exposed.empty() && !missing.empty()) {
    auto join = [](const std::vector<std::string>& parts) {
      std::string out;
      for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
      return out;
    };
    const std::string why = "listening beyond loopback (" + join(exposed) + ") without " + join(missing);
    if (!insecure) {
      return bad(why +
                 ": anyone who reaches it could reset counters or join the cluster. Give them (or "
                 "--admin-token-file / --cluster-secret-file, RINGLIMIT_ADMIN_TOKEN / "
                 "RINGLIMIT_CLUSTER_SECRET), or --insecure to run without");
    }
    flags.warnings.push_back(why + " (--insecure): admin operations and the peer port are unauthenticated");
  }
  {
    ringlimit::cluster::ClusterOptions check = n.cluster;
    check.node_id = "n";  // the default id is valid; the given one was checked above
    if (ringlimit::Status s = ringlimit::cluster::Validate(check); !s.ok()) return bad(s.message());
  }
  parsed.flags = std::move(flags);
  return parsed;
}

// Written to a temporary name and renamed, so a reader never sees half a file.
bool WritePortFile(const std::string& path, uint16_t port, uint16_t peer_port, uint16_t grpc_port) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << "{\"http\":" << port << ",\"peer_port\":" << peer_port;
    if (grpc_port != 0) out << ",\"grpc_port\":" << grpc_port;
    out << ",\"pid\":" << getpid() << "}\n";
    if (!out) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return !ec;
}

}  // namespace

int main(int argc, char** argv) {
  Parsed parsed = ParseFlags(argc, argv);
  if (!parsed.flags) return parsed.exit_code;
  Flags& flags = *parsed.flags;

  auto logger = spdlog::stderr_color_mt("ringlimitd");
  logger->set_level(flags.log_level);
  spdlog::set_default_logger(logger);
  if (flags.log_json) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
    formatter->add_flag<JsonMessageFlag>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l","message":"%*"})");
    spdlog::set_formatter(std::move(formatter));
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%l%$ %v", spdlog::pattern_time_type::utc);
  }
  for (const std::string& warning : flags.warnings) spdlog::warn("{}", warning);

  // Signals are handled on this thread's io_context (installed before the node starts, so a signal
  // can never take the default action once the port file exists); the node serves on its own threads.
  boost::asio::io_context main_io(1);
  boost::asio::signal_set signals(main_io, SIGINT, SIGTERM, SIGHUP);
  std::signal(SIGPIPE, SIG_IGN);

  // POST /v1/cluster/leave: once the others have heard that this node left, stop and exit 0.
  flags.node.on_left = [&main_io] {
    spdlog::info("left the cluster: stopping");
    main_io.stop();
  };
  ringlimit::node::Node node(flags.node);
  // The rate limit service's config is also reread when its file changes (as envoyproxy/ratelimit does);
  // a bad file is logged and the previous config stays in force, as on SIGHUP. Watched before the node
  // reads it and says it is ready, so no change written after either is missed.
  std::optional<ringlimit::node::FileWatcher> rls_watcher;
  if (!flags.node.rls_config_path.empty()) {
    rls_watcher.emplace(main_io, flags.node.rls_config_path, [&] {
      if (ringlimit::Status reloaded = node.ReloadRlsConfig(); !reloaded.ok()) {
        spdlog::error("{} changed: rls config not reloaded, the previous one stays in force: {}",
                      flags.node.rls_config_path, reloaded.message());
      } else {
        spdlog::info("{} changed: rls config reloaded", flags.node.rls_config_path);
      }
    });
    if (ringlimit::Status watching = rls_watcher->Start(); !watching.ok()) {
      spdlog::warn("--rls-config is reloaded on SIGHUP only: {}", watching.message());
    }
  }
  if (ringlimit::Status started = node.Start(); !started.ok()) {
    spdlog::critical("cannot start: {}", started.message());
    return kExitStartFailed;
  }
  spdlog::info("ringlimitd {} started, http port {} (ready once the cluster says so)", RINGLIMIT_VERSION,
               node.http_port());
  if (!flags.port_file.empty() &&
      !WritePortFile(flags.port_file, node.http_port(), node.peer_port(), node.grpc_port())) {
    spdlog::critical("cannot write --port-file {}", flags.port_file);
    node.Stop();
    return kExitStartFailed;
  }

  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int signal) {
        if (ec) return;
        if (signal == SIGHUP) {
          if (ringlimit::Status reloaded = node.ReloadPolicies(); !reloaded.ok()) {
            spdlog::error("SIGHUP: policies not reloaded, the previous ones stay in force: {}",
                          reloaded.message());
          } else {
            spdlog::info("SIGHUP: policies reloaded from {}", flags.node.policies_path);
          }
          if (!flags.node.rls_config_path.empty()) {
            if (ringlimit::Status reloaded = node.ReloadRlsConfig(); !reloaded.ok()) {
              spdlog::error("SIGHUP: rls config not reloaded, the previous one stays in force: {}",
                            reloaded.message());
            } else {
              spdlog::info("SIGHUP: rls config reloaded from {}", flags.node.rls_config_path);
            }
          }
          signals.async_wait(on_signal);
          return;
        }
        spdlog::info("{}: stopping (finishing requests in flight)", signal == SIGTERM ? "SIGTERM" : "SIGINT");
        main_io.stop();
      };
  signals.async_wait(on_signal);
  main_io.run();
  rls_watcher.reset();
  node.Stop();
  return kExitOk;
}
