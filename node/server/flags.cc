#include "node/server/flags.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/ip/address.hpp>
#include <boost/program_options.hpp>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string_view>

#include "node/cluster/cluster.h"
#include "node/peer/peer_options.h"
#include "ring/membership.h"

namespace ringlimit::node {

namespace {

namespace po = boost::program_options;

const NodeOptions& Defaults() {
  static const NodeOptions defaults;
  return defaults;
}

int64_t Millis(std::chrono::nanoseconds duration) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(duration).count();
}

// The table. Groups are listed in --help order, flags in their group's order.
std::vector<FlagSpec> MakeTable() {
  using G = FlagGroup;
  const ring::MembershipOptions swim;
  return {
      // --- General ---
      {"help,h", G::kGeneral, nullptr, "print this help and exit", {}},
      {"version", G::kGeneral, nullptr, "print the version and exit", {}},
      {"log-format", G::kGeneral, "RINGLIMIT_LOG_FORMAT",
       "text (one line per event, UTC timestamps) or json (one JSON object per line)",
       [](RawFlags& r) { return po::value(&r.log_format)->default_value("text"); }},
      {"config", G::kGeneral, nullptr,
       "read further flags from FILE (lines of `name = value`; the command line wins)",
       [](RawFlags& r) { return po::value(&r.config); }},
      {"log-level", G::kGeneral, "RINGLIMIT_LOG_LEVEL", "trace, debug, info, warn, error, critical or off",
       [](RawFlags& r) { return po::value(&r.log_level)->default_value("info"); }},
      {"port-file", G::kGeneral, "RINGLIMIT_PORT_FILE",
       "once listening, write {\"http\":PORT,\"peer_port\":PORT[,\"grpc_port\":PORT],\"pid\":PID} to PATH "
       "(for scripts and tests using port 0)",
       [](RawFlags& r) { return po::value(&r.port_file); }},
      {"node-id", G::kGeneral, "RINGLIMIT_NODE_ID",
       "member id in the cluster and logs: 1-64 bytes of [A-Za-z0-9._-] (default: <host name>-<http port>)",
       [](RawFlags& r) { return po::value(&r.node.node_id); }},
      {"insecure", G::kGeneral, "RINGLIMIT_INSECURE",
       "start even though an address it listens on is not loopback and --admin-token or --cluster-secret is "
       "missing (logged as a warning); without it such a node refuses to start",
       [](RawFlags& r) { return po::bool_switch(&r.insecure); }},

      // --- HTTP server ---
      {"listen", G::kHttp, "RINGLIMIT_LISTEN", "HOST:PORT to serve the HTTP API on; port 0 picks a free port",
       [](RawFlags& r) { return po::value(&r.listen)->default_value("127.0.0.1:7001"); }},
      {"threads", G::kHttp, "RINGLIMIT_THREADS", "threads serving requests (0 = hardware threads)",
       [](RawFlags& r) { return po::value(&r.node.threads)->default_value(0); }},
      {"max-connections", G::kHttp, "RINGLIMIT_MAX_CONNECTIONS",
       "open connections at most: a new one beyond it replaces the connection idle the longest, or gets 503 "
       "when none is idle",
       [](RawFlags& r) {
         return po::value(&r.node.http.max_connections)->default_value(Defaults().http.max_connections);
       }},
      {"max-connections-per-client", G::kHttp, "RINGLIMIT_MAX_CONNECTIONS_PER_CLIENT",
       "open connections per client address at most (503 beyond); 0 = half of --max-connections",
       [](RawFlags& r) {
         return po::value(&r.node.http.max_connections_per_client)
             ->default_value(Defaults().http.max_connections_per_client);
       }},
      {"read-timeout-ms", G::kHttp, "RINGLIMIT_READ_TIMEOUT_MS",
       "a started request must arrive completely within this time, else 408",
       [](RawFlags& r) {
         return po::value(&r.read_timeout_ms)->default_value(Defaults().http.read_timeout.count());
       }},
      {"idle-timeout-ms", G::kHttp, "RINGLIMIT_IDLE_TIMEOUT_MS",
       "close keep-alive connections idle for this long",
       [](RawFlags& r) {
         return po::value(&r.idle_timeout_ms)->default_value(Defaults().http.idle_timeout.count());
       }},
      {"max-body-bytes", G::kHttp, "RINGLIMIT_MAX_BODY_BYTES", "largest request body; larger gets 413",
       [](RawFlags& r) {
         return po::value(&r.node.http.max_body_bytes)->default_value(Defaults().http.max_body_bytes);
       }},
      {"max-header-bytes", G::kHttp, "RINGLIMIT_MAX_HEADER_BYTES",
       "largest request line + headers; larger gets 431",
       [](RawFlags& r) {
         return po::value(&r.node.http.max_header_bytes)->default_value(Defaults().http.max_header_bytes);
       }},
      {"drain-timeout-ms", G::kHttp, "RINGLIMIT_DRAIN_TIMEOUT_MS",
       "on SIGTERM/SIGINT, how long to let connections finish their requests",
       [](RawFlags& r) {
         return po::value(&r.drain_timeout_ms)->default_value(Defaults().drain_timeout.count());
       }},

      // --- Rate limiting ---
      {"policies", G::kRateLimiting, "RINGLIMIT_POLICIES",
       "named policies file (JSON, see docs/api.md); reloaded on SIGHUP",
       [](RawFlags& r) { return po::value(&r.node.policies_path); }},
      {"grpc-listen", G::kRateLimiting, "RINGLIMIT_GRPC_LISTEN",
       "serve Envoy's rate limit service (gRPC) on HOST:PORT (port 0 = ephemeral); off unless set",
       [](RawFlags& r) { return po::value(&r.grpc_listen); }},
      {"grpc-max-message-bytes", G::kRateLimiting, "RINGLIMIT_GRPC_MAX_MESSAGE_BYTES",
       "largest gRPC request message; larger gets RESOURCE_EXHAUSTED",
       [](RawFlags& r) { return po::value(&r.grpc_max_message_bytes)->default_value(1 << 20); }},
      {"rls-response-headers", G::kRateLimiting, "RINGLIMIT_RLS_RESPONSE_HEADERS",
       "add RateLimit / RateLimit-Policy and X-RateLimit-* to the rate limit service's answers, for Envoy to "
       "pass on",
       [](RawFlags& r) { return po::bool_switch(&r.node.api.rls_response_headers); }},
      {"rls-config", G::kRateLimiting, "RINGLIMIT_RLS_CONFIG",
       "envoyproxy/ratelimit YAML config for the gRPC rate limit service (docs/api.md); reloaded when it "
       "changes and on SIGHUP",
       [](RawFlags& r) { return po::value(&r.node.rls_config_path); }},
      {"max-metric-names", G::kRateLimiting, "RINGLIMIT_MAX_METRIC_NAMES",
       "inline limit names and RLS descriptor rules with decision series of their own in /metrics; later "
       "ones count as name=\"other\"",
       [](RawFlags& r) {
         return po::value(&r.node.max_metric_names)->default_value(Defaults().max_metric_names);
       }},
      {"max-keys", G::kRateLimiting, "RINGLIMIT_MAX_KEYS",
       "most limiter states in memory; least recently used are evicted beyond it (0 = unbounded)",
       [](RawFlags& r) {
         return po::value(&r.node.storage.max_keys)->default_value(Defaults().storage.max_keys);
       }},
      {"max-memory", G::kRateLimiting, "RINGLIMIT_MAX_MEMORY",
       "most memory the limiter states take (e.g. 512MiB, 4GiB; at least 16MiB); least recently used are "
       "evicted beyond it. auto = a quarter of the machine's (or the cgroup's) memory; 0 = unbounded",
       [](RawFlags& r) { return po::value(&r.max_memory)->default_value("auto"); }},
      {"data-dir", G::kRateLimiting, "RINGLIMIT_DATA_DIR",
       "RocksDB directory for the counters (created if missing); empty = memory-only",
       [](RawFlags& r) { return po::value(&r.node.storage.data_dir); }},
      {"flush-interval-ms", G::kRateLimiting, "RINGLIMIT_FLUSH_INTERVAL_MS",
       "how often dirty counters are written to RocksDB (the most a kill -9 can lose)",
       [](RawFlags& r) {
         return po::value(&r.node.storage.flush_interval_ms)
             ->default_value(Defaults().storage.flush_interval_ms);
       }},
      {"tls-cert", G::kRateLimiting, "RINGLIMIT_TLS_CERT",
       "serve the HTTP API (and --grpc-listen) over TLS with this PEM certificate chain; needs --tls-key",
       [](RawFlags& r) { return po::value(&r.node.http.tls_cert_file); }},
      {"tls-key", G::kRateLimiting, "RINGLIMIT_TLS_KEY", "the PEM private key of --tls-cert",
       [](RawFlags& r) { return po::value(&r.node.http.tls_key_file); }},
      {"peer-tls-cert", G::kRateLimiting, "RINGLIMIT_PEER_TLS_CERT",
       "TLS on the peer port with this PEM certificate chain (mutual: every peer needs one signed by "
       "--peer-tls-ca); needs --peer-tls-key and --peer-tls-ca, on every node",
       [](RawFlags& r) { return po::value(&r.peer_tls_cert); }},
      {"peer-tls-key", G::kRateLimiting, "RINGLIMIT_PEER_TLS_KEY", "the PEM private key of --peer-tls-cert",
       [](RawFlags& r) { return po::value(&r.peer_tls_key); }},
      {"peer-tls-ca", G::kRateLimiting, "RINGLIMIT_PEER_TLS_CA",
       "the PEM CA every peer's certificate must chain to",
       [](RawFlags& r) { return po::value(&r.peer_tls_ca); }},
      {"admin-token-file", G::kRateLimiting, "RINGLIMIT_ADMIN_TOKEN_FILE",
       "read --admin-token from this file (trailing whitespace dropped); or set RINGLIMIT_ADMIN_TOKEN",
       [](RawFlags& r) { return po::value(&r.admin_token_file); }},
      {"admin-token", G::kRateLimiting, nullptr,
       "require `Authorization: Bearer TOKEN` on DELETE /v1/keys and PUT /v1/headroom",
       [](RawFlags& r) { return po::value(&r.node.api.admin_token); }},
      {"auth-deny-status", G::kRateLimiting, "RINGLIMIT_AUTH_DENY_STATUS",
       "GET /v1/auth (nginx auth_request): the status of a denied or bad request, 403 or 401",
       [](RawFlags& r) {
         return po::value(&r.node.api.auth_deny_status)->default_value(Defaults().api.auth_deny_status);
       }},
      {"auth-missing-key", G::kRateLimiting, "RINGLIMIT_AUTH_MISSING_KEY",
       "GET /v1/auth without a key: deny (the --auth-deny-status) or allow (200)",
       [](RawFlags& r) { return po::value(&r.auth_missing_key)->default_value("deny"); }},
      {"key-header", G::kRateLimiting, "RINGLIMIT_KEY_HEADER",
       "request header GET /v1/check reads the key from when the query has none (empty: off)",
       [](RawFlags& r) {
         return po::value(&r.node.api.key_header)->default_value(Defaults().api.key_header);
       }},
      {"headroom-ttl-ms", G::kRateLimiting, "RINGLIMIT_HEADROOM_TTL_MS",
       "how long a PUT /v1/headroom signal lasts unless the request gives ttl_ms",
       [](RawFlags& r) {
         return po::value(&r.headroom_ttl_ms)->default_value(Defaults().api.headroom_ttl.count());
       }},

      // --- Cluster ---
      {"peer-listen", G::kCluster, "RINGLIMIT_PEER_LISTEN",
       "HOST:PORT of the peer protocol (membership, forwarding); port 0 picks a free port",
       [](RawFlags& r) { return po::value(&r.peer_listen)->default_value("127.0.0.1:7101"); }},
      {"advertise-peer", G::kCluster, "RINGLIMIT_ADVERTISE_PEER",
       "HOST or HOST:PORT the other members reach this node's peer port at (default: the --peer-listen "
       "address; required when that is 0.0.0.0 or ::)",
       [](RawFlags& r) { return po::value(&r.node.cluster.advertise_peer); }},
      {"advertise-http", G::kCluster, "RINGLIMIT_ADVERTISE_HTTP",
       "HOST or HOST:PORT clients and the console reach this node's HTTP API at, as shown in /v1/cluster "
       "(default: the --listen address, or for 0.0.0.0 / :: the advertised peer host)",
       [](RawFlags& r) { return po::value(&r.node.advertise_http); }},
      {"join-dns", G::kCluster, "RINGLIMIT_JOIN_DNS",
       "NAME:PORT whose addresses are peers to join through (repeatable), resolved at start and every 10 s "
       "again (a Kubernetes headless service); a node none of them answers within 3 s starts alone and "
       "merges with the others when they appear",
       [](RawFlags& r) { return po::value(&r.node.cluster.join_dns)->composing(); }},
      {"join", G::kCluster, "RINGLIMIT_JOIN",
       "HOST:PORT: peer address of a member to join through (repeatable); without it the node starts alone",
       [](RawFlags& r) { return po::value(&r.node.cluster.seeds)->composing(); }},
      {"vnodes", G::kCluster, "RINGLIMIT_VNODES",
       "virtual nodes of this member on the ring (1 to --max-member-vnodes)",
       [](RawFlags& r) {
         return po::value(&r.node.cluster.vnodes)->default_value(Defaults().cluster.vnodes);
       }},
      {"max-member-vnodes", G::kCluster, "RINGLIMIT_MAX_MEMBER_VNODES",
       "the most vnodes a member may announce; a member announcing more is refused (1-4096)",
       [](RawFlags& r) {
         return po::value(&r.node.cluster.membership.max_vnodes)
             ->default_value(Defaults().cluster.membership.max_vnodes);
       }},
      {"replicas", G::kCluster, "RINGLIMIT_REPLICAS",
       "copies of each key's counters: its owner and the next replicas-1 members clockwise (capped at the "
       "member count; 1 = no replication)",
       [](RawFlags& r) {
         return po::value(&r.node.cluster.replicas)->default_value(Defaults().cluster.replicas);
       }},
      {"replication", G::kCluster, "RINGLIMIT_REPLICATION",
       "async: ship changes to the replicas within --replication-interval-ms, off the request path; sync: "
       "answer a check only after a replica has acknowledged its new state. --failure-mode closed makes sync "
       "the default: exactness under gray failures needs both (docs/gray-failures.md)",
       [](RawFlags& r) {
         return po::value(&r.replication_mode)
             ->default_value("", "async, or sync with --failure-mode closed");
       }},
      {"replication-interval-ms", G::kCluster, "RINGLIMIT_REPLICATION_INTERVAL_MS",
       "async replication: how often changed counters are shipped to the replicas",
       [](RawFlags& r) {
         return po::value(&r.replication_interval_ms)->default_value(Defaults().replication.interval.count());
       }},
      {"sync-timeout-ms", G::kCluster, "RINGLIMIT_SYNC_TIMEOUT_MS",
       "sync replication: how long a decision waits for its replicas' acknowledgements (with --failure-mode "
       "closed, a majority of the key's holders) before it is answered anyway (open) or refused 503 "
       "(closed); "
       "less than --forward-timeout-ms",
       [](RawFlags& r) {
         return po::value(&r.sync_timeout_ms)
             ->default_value(0, std::to_string(Defaults().replication.sync_timeout.count()) +
                                    ", below --forward-timeout-ms");
       }},
      {"cluster-secret", G::kCluster, nullptr,
       "shared secret: peers must prove it (HMAC handshake) before any message is accepted; better from "
       "--cluster-secret-file or RINGLIMIT_CLUSTER_SECRET, which ps does not show",
       [](RawFlags& r) { return po::value(&r.node.cluster.cluster_secret); }},
      {"cluster-secret-file", G::kCluster, "RINGLIMIT_CLUSTER_SECRET_FILE",
       "read --cluster-secret from this file (trailing whitespace dropped)",
       [](RawFlags& r) { return po::value(&r.cluster_secret_file); }},
      {"probe-interval-ms", G::kCluster, "RINGLIMIT_PROBE_INTERVAL_MS",
       "SWIM: one member is probed per interval",
       [probe = swim.probe_interval.count()](RawFlags& r) {
         return po::value(&r.probe_interval_ms)->default_value(probe);
       }},
      {"probe-timeout-ms", G::kCluster, "RINGLIMIT_PROBE_TIMEOUT_MS",
       "SWIM: wait for a direct answer before asking other members to probe (< probe interval)",
       [timeout = swim.probe_timeout.count()](RawFlags& r) {
         return po::value(&r.probe_timeout_ms)->default_value(timeout);
       }},
      {"suspicion-timeout-ms", G::kCluster, "RINGLIMIT_SUSPICION_TIMEOUT_MS",
       "SWIM: a suspect that does not refute within this is declared dead",
       [timeout = swim.suspicion_timeout.count()](RawFlags& r) {
         return po::value(&r.suspicion_timeout_ms)->default_value(timeout);
       }},
      {"forward-timeout-ms", G::kCluster, "RINGLIMIT_FORWARD_TIMEOUT_MS",
       "a check forwarded to its owner that is not answered within this is sent again to it once (if it is "
       "not known dead), then goes to the next node",
       [](RawFlags& r) {
         return po::value(&r.forward_timeout_ms)->default_value(Defaults().forward.timeout.count());
       }},
      {"failure-mode", G::kCluster, "RINGLIMIT_FAILURE_MODE",
       "when no holder of a key answers and this node holds no copy: open decides from this node's own copy "
       "(merged into the holders' count later; counted in ringlimit_forward_fallback_open_total), "
       "closed answers 503 unavailable",
       [](RawFlags& r) { return po::value(&r.failure_mode)->default_value("open"); }},
      {"max-clock-offset-ms", G::kCluster, "RINGLIMIT_MAX_CLOCK_OFFSET_MS",
       "a node whose wall clock is off from most members' by more than this refuses to decide checks "
       "(0..86400000; 0 disables the rule)",
       [](RawFlags& r) {
         return po::value(&r.max_clock_offset_ms)->default_value(Defaults().cluster.clock.max_offset.count());
       }},
      {"grants", G::kCluster, "RINGLIMIT_GRANTS",
       "quota grants of hot keys (docs/limiter.md \"Quota grants\"): on lets a node that sees a key's checks "
       "at --grant-threshold or more ask the key's owner for a slice of its budget and decide them itself "
       "from it, never over the limit (token_bucket, gcra, leaky_bucket without max_delay, fixed_window and "
       "anchored_window in hard mode; the sliding algorithms stay owner-decided); off forwards every check",
       [](RawFlags& r) { return po::value(&r.grants_mode)->default_value("off"); }},
      {"grant-threshold", G::kCluster, "RINGLIMIT_GRANT_THRESHOLD",
       "--grants on: a key's checks per second entering a node from which it asks the owner for a slice",
       [](RawFlags& r) {
         return po::value(&r.grant_threshold)->default_value(Defaults().grants.planner.threshold);
       }},
      {"grant-term-ms", G::kCluster, "RINGLIMIT_GRANT_TERM_MS",
       "--grants on: how long a slice may be used, counted from when its request was sent (1..60000); "
       "the owner reclaims an unreleased slice min(250 ms, term) after it",
       [](RawFlags& r) {
         return po::value(&r.grant_term_ms)->default_value(Millis(Defaults().grants.planner.term));
       }},
  };
}

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

struct HostPort {
  std::string host;
  uint16_t port = 0;
};

// "host:port", "[v6]:port" or ":port" (all interfaces); nullopt for anything else.
std::optional<HostPort> ParseListen(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::string h = text.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.empty()) h = "0.0.0.0";
  const std::string p = text.substr(colon + 1);
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const unsigned long value = std::stoul(p);
  if (value > 65535) return std::nullopt;
  return HostPort{std::move(h), static_cast<uint16_t>(value)};
}

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

// The long name of a spec ("help,h" -> "help").
std::string_view LongName(const FlagSpec& spec) {
  const std::string_view name(spec.name);
  return name.substr(0, name.find(','));
}

// A secret: the flag, else its file (trailing whitespace dropped), else the variable -- one source each.
Status ReadSecret(std::string_view flag, std::string* value, const std::string& file, const char* env) {
  const std::string name(flag);
  if (!file.empty()) {
    if (!value->empty())
      return Status::InvalidArgument("give --" + name + " or --" + name + "-file, not both");
    std::ifstream in(file);
    std::ostringstream text;
    if (!in || !(text << in.rdbuf()))
      return Status::InvalidArgument("--" + name + "-file: cannot read " + file);
    *value = text.str();
    while (!value->empty() && std::isspace(static_cast<unsigned char>(value->back()))) value->pop_back();
    if (value->empty()) return Status::InvalidArgument("--" + name + "-file: " + file + " is empty");
  } else if (value->empty()) {
    if (const char* from_env = std::getenv(env); from_env != nullptr) *value = from_env;
  }
  return Status::OK();
}

// --max-connections against RLIMIT_NOFILE: every connection is an open file, and RocksDB, the peer
// transport and gRPC need some more. Raises the soft limit to the hard one, then lowers max_connections
// to what fits (with a warning) unless it was given.
Status FitConnections(const RawFlags& raw, Flags* flags) {
  NodeOptions& n = flags->node;
  constexpr rlim_t kReservedFiles = 512;
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) != 0) return Status::OK();
  if (nofile.rlim_cur < nofile.rlim_max) {
    rlimit raised = nofile;
    raised.rlim_cur = nofile.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) nofile = raised;
  }
  const rlim_t usable = nofile.rlim_cur > kReservedFiles ? nofile.rlim_cur - kReservedFiles : 0;
  if (n.http.max_connections <= usable) return Status::OK();
  const std::string why = "--max-connections " + std::to_string(n.http.max_connections) + " needs " +
                          std::to_string(n.http.max_connections + kReservedFiles) +
                          " open files; the limit (ulimit -n) is " + std::to_string(nofile.rlim_cur);
  if (raw.max_connections_given || usable == 0)
    return Status::InvalidArgument(why + ": lower it or raise the limit");
  n.http.max_connections = static_cast<size_t>(usable);
  flags->warnings.push_back(why + ": serving at most " + std::to_string(usable) + " connections");
  return Status::OK();
}

// Secure by default: a node reachable from other machines must authenticate its admin operations and its
// peers, unless told otherwise (--insecure, then a warning).
Status CheckExposure(const RawFlags& raw, Flags* flags) {
  const NodeOptions& n = flags->node;
  std::vector<std::string> exposed;
  if (!IsLoopbackHost(n.http.address)) exposed.push_back("--listen " + raw.listen);
  if (!IsLoopbackHost(n.cluster.peer_host)) exposed.push_back("--peer-listen " + raw.peer_listen);
  if (n.grpc && !IsLoopbackHost(n.grpc->address)) exposed.push_back("--grpc-listen " + raw.grpc_listen);
  std::vector<std::string> missing;
  if (n.api.admin_token.empty()) missing.emplace_back("--admin-token");
  if (n.cluster.cluster_secret.empty()) missing.emplace_back("--cluster-secret");
  if (exposed.empty() || missing.empty()) return Status::OK();
  auto join = [](const std::vector<std::string>& parts) {
    std::string out;
    for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
    return out;
  };
  const std::string why = "listening beyond loopback (" + join(exposed) + ") without " + join(missing);
  if (!raw.insecure) {
    return Status::InvalidArgument(
        why +
        ": anyone who reaches it could reset counters or join the cluster. Give them "
        "(or --admin-token-file / --cluster-secret-file, RINGLIMIT_ADMIN_TOKEN / "
        "RINGLIMIT_CLUSTER_SECRET), or --insecure to run without");
  }
  flags->warnings.push_back(why + " (--insecure): admin operations and the peer port are unauthenticated");
  return Status::OK();
}

}  // namespace

std::span<const FlagSpec> FlagTable() {
  static const std::vector<FlagSpec> table = MakeTable();
  return table;
}

std::string FlagOfVariable(const std::string& variable) {
  static constexpr std::string_view kPrefix = "RINGLIMIT_";
  if (!variable.starts_with(kPrefix)) return "";
  std::string flag = variable.substr(kPrefix.size());
  for (char& c : flag) c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const FlagSpec& spec : FlagTable()) {
    if (LongName(spec) == flag) return spec.env != nullptr ? flag : "";
  }
  return "";
}

Result<Flags> ValidateFlags(RawFlags raw) {
  Flags flags;
  flags.node = std::move(raw.node);
  flags.port_file = std::move(raw.port_file);
  NodeOptions& n = flags.node;
  auto bad = [](const std::string& message) { return Status::InvalidArgument(message); };

  if (std::optional<HostPort> http = ParseListen(raw.listen)) {
    n.http.address = std::move(http->host);
    n.http.port = http->port;
  } else {
    return bad("--listen: expected HOST:PORT, got " + raw.listen);
  }
  if (Status s = ReadSecret("admin-token", &n.api.admin_token, raw.admin_token_file, "RINGLIMIT_ADMIN_TOKEN");
      !s.ok())
    return s;
  if (Status s = ReadSecret("cluster-secret", &n.cluster.cluster_secret, raw.cluster_secret_file,
                            "RINGLIMIT_CLUSTER_SECRET");
      !s.ok())
    return s;
  if (n.api.auth_deny_status != 401 && n.api.auth_deny_status != 403)
    return bad("--auth-deny-status: expected 401 or 403 (what a proxy's auth_request understands)");
  if (raw.auth_missing_key != "deny" && raw.auth_missing_key != "allow")
    return bad("--auth-missing-key: expected deny or allow, got " + raw.auth_missing_key);
  n.api.auth_allow_without_key = raw.auth_missing_key == "allow";
  if (raw.log_format != "text" && raw.log_format != "json")
    return bad("--log-format: expected text or json, got " + raw.log_format);
  flags.log_json = raw.log_format == "json";
  flags.log_level = spdlog::level::from_str(raw.log_level);
  if (flags.log_level == spdlog::level::off && raw.log_level != "off")
    return bad("--log-level: unknown level " + raw.log_level);
  if (raw.read_timeout_ms <= 0 || raw.idle_timeout_ms <= 0 || raw.headroom_ttl_ms <= 0 ||
      raw.drain_timeout_ms < 0)
    return bad("timeouts must be positive");
  if (n.storage.flush_interval_ms == 0) return bad("--flush-interval-ms must be at least 1");
  constexpr uint64_t kMinMaxMemory = 16u << 20;
  if (raw.max_memory == "auto") {
    n.storage.max_bytes = std::max<uint64_t>(AvailableMemory() / 4, kMinMaxMemory);
  } else if (std::optional<uint64_t> bytes = ParseBytes(raw.max_memory); !bytes.has_value()) {
    return bad("--max-memory: expected a size like 512MiB or 4GiB, auto, or 0; got " + raw.max_memory);
  } else if (*bytes != 0 && *bytes < kMinMaxMemory) {
    return bad("--max-memory must be at least 16MiB (or 0: unbounded), got " + raw.max_memory);
  } else {
    n.storage.max_bytes = *bytes;
  }
  if (n.http.max_connections == 0) return bad("--max-connections must be at least 1");
  if (Status s = FitConnections(raw, &flags); !s.ok()) return s;
  if (n.http.max_header_bytes < 256) return bad("--max-header-bytes must be at least 256");
  if (n.http.tls_cert_file.empty() != n.http.tls_key_file.empty())
    return bad("give both --tls-cert and --tls-key (or neither)");
  if (!raw.peer_tls_cert.empty() || !raw.peer_tls_key.empty() || !raw.peer_tls_ca.empty()) {
    if (raw.peer_tls_cert.empty() || raw.peer_tls_key.empty() || raw.peer_tls_ca.empty())
      return bad("give all of --peer-tls-cert, --peer-tls-key and --peer-tls-ca (or none)");
    for (const bool server : {true, false}) {
      auto tls = peer::MakeTlsContext(server, raw.peer_tls_cert, raw.peer_tls_key, raw.peer_tls_ca);
      if (!tls.ok()) return tls.status();
      (server ? n.cluster.peer_tls_server : n.cluster.peer_tls_client) = std::move(*tls);
    }
  }
  n.http.read_timeout = std::chrono::milliseconds(raw.read_timeout_ms);
  n.http.idle_timeout = std::chrono::milliseconds(raw.idle_timeout_ms);
  n.api.headroom_ttl = std::chrono::milliseconds(raw.headroom_ttl_ms);
  n.drain_timeout = std::chrono::milliseconds(raw.drain_timeout_ms);

  if (!raw.grpc_listen.empty()) {
    GrpcServerOptions grpc;
    std::optional<HostPort> address = ParseListen(raw.grpc_listen);
    if (!address) return bad("--grpc-listen: expected HOST:PORT, got " + raw.grpc_listen);
    grpc.address = std::move(address->host);
    grpc.port = address->port;
    if (raw.grpc_max_message_bytes < 1024) return bad("--grpc-max-message-bytes must be at least 1024");
    grpc.max_message_bytes = raw.grpc_max_message_bytes;
    grpc.tls_cert_file = n.http.tls_cert_file;
    grpc.tls_key_file = n.http.tls_key_file;
    grpc.drain_timeout = n.drain_timeout;
    n.grpc = std::move(grpc);
  } else if (!n.rls_config_path.empty()) {
    return bad("--rls-config needs --grpc-listen");
  }
  if (std::optional<HostPort> peer = ParseListen(raw.peer_listen)) {
    n.cluster.peer_host = std::move(peer->host);
    n.cluster.peer_port = peer->port;
  } else {
    return bad("--peer-listen: expected HOST:PORT, got " + raw.peer_listen);
  }
  for (const std::string& name : n.cluster.join_dns) {
    std::optional<HostPort> address = ParseListen(name);
    if (!address || address->port == 0) return bad("--join-dns: expected NAME:PORT, got " + name);
  }
  for (const std::string& seed : n.cluster.seeds) {
    std::optional<HostPort> address = ParseListen(seed);
    if (!address || address->port == 0) return bad("--join: expected HOST:PORT, got " + seed);
  }
  if (!n.node_id.empty()) {
    if (Status s = cluster::ValidateNodeId(n.node_id); !s.ok()) return bad("--node-id: " + s.message());
  }
  if (raw.probe_interval_ms <= 0 || raw.probe_timeout_ms <= 0 || raw.suspicion_timeout_ms <= 0 ||
      raw.forward_timeout_ms <= 0) {
    return bad(
        "--probe-interval-ms, --probe-timeout-ms, --suspicion-timeout-ms and --forward-timeout-ms "
        "must be positive");
  }
  n.cluster.membership.probe_interval = std::chrono::milliseconds(raw.probe_interval_ms);
  n.cluster.membership.probe_timeout = std::chrono::milliseconds(raw.probe_timeout_ms);
  n.cluster.membership.suspicion_timeout = std::chrono::milliseconds(raw.suspicion_timeout_ms);
  n.forward.timeout = std::chrono::milliseconds(raw.forward_timeout_ms);
  if (raw.grants_mode == "on") {
    n.grants.enabled = true;
  } else if (raw.grants_mode != "off") {
    return bad("--grants: expected off or on, got " + raw.grants_mode);
  }
  if (raw.grant_term_ms < 1 || raw.grant_term_ms > 60'000) return bad("--grant-term-ms: expected 1..60000");
  n.grants.planner.threshold = raw.grant_threshold;
  n.grants.planner.term = std::chrono::milliseconds(raw.grant_term_ms);
  n.grants.planner.margin = std::min(n.grants.planner.margin, n.grants.planner.term);
  if (Status s = cluster::Validate(n.grants.planner); !s.ok()) return bad("--grant-*: " + s.message());
  if (raw.max_clock_offset_ms < 0 || raw.max_clock_offset_ms > 86'400'000)
    return bad("--max-clock-offset-ms: expected 0..86400000 (0 disables the clock offset rule), got " +
               std::to_string(raw.max_clock_offset_ms));
  n.cluster.clock.max_offset = std::chrono::milliseconds(raw.max_clock_offset_ms);
  if (raw.failure_mode == "open") {
    n.forward.failure_mode = cluster::FailureMode::kOpen;
  } else if (raw.failure_mode == "closed") {
    n.forward.failure_mode = cluster::FailureMode::kClosed;
  } else {
    return bad("--failure-mode: expected open or closed, got " + raw.failure_mode);
  }
  std::string replication_mode = raw.replication_mode;
  if (replication_mode.empty()) replication_mode = raw.failure_mode == "closed" ? "sync" : "async";
  if (auto mode = replication::ParseReplicationMode(replication_mode)) {
    n.replication.mode = *mode;
  } else {
    return bad("--replication: expected async or sync, got " + replication_mode);
  }
  if (raw.replication_interval_ms <= 0 || raw.replication_interval_ms > 60'000)
    return bad("--replication-interval-ms: expected 1..60000");
  n.replication.interval = std::chrono::milliseconds(raw.replication_interval_ms);
  // A forwarded check's sender waits --forward-timeout-ms for the decision, its replicas' acknowledgements
  // included: waiting as long for them would send the check on to the next holder meanwhile.
  if (raw.sync_timeout_ms == 0) {  // not given
    n.replication.sync_timeout =
        std::min(Defaults().replication.sync_timeout, std::chrono::milliseconds(raw.forward_timeout_ms - 1));
  } else if (raw.sync_timeout_ms < 0 || raw.sync_timeout_ms >= raw.forward_timeout_ms) {
    return bad("--sync-timeout-ms: expected 1 to --forward-timeout-ms - 1 (" +
               std::to_string(raw.forward_timeout_ms - 1) + "), got " + std::to_string(raw.sync_timeout_ms));
  } else {
    n.replication.sync_timeout = std::chrono::milliseconds(raw.sync_timeout_ms);
  }
  // A wildcard peer address cannot be announced: the others would send to 0.0.0.0.
  if ((n.cluster.peer_host == "0.0.0.0" || n.cluster.peer_host == "::") && n.cluster.advertise_peer.empty()) {
    return bad("--peer-listen " + raw.peer_listen +
               " listens on every interface, which is no address the other members can reach: give "
               "--advertise-peer HOST[:PORT]");
  }
  if (Status s = CheckExposure(raw, &flags); !s.ok()) return s;
  cluster::ClusterOptions check = n.cluster;
  check.node_id = "n";  // the default id is valid; the given one was checked above
  if (Status s = cluster::Validate(check); !s.ok()) return bad(s.message());
  return flags;
}

ParsedFlags ParseFlags(int argc, char** argv) {
  RawFlags raw;
  std::array<po::options_description, 4> groups{
      po::options_description("General"), po::options_description("HTTP server"),
      po::options_description("Rate limiting"), po::options_description("Cluster")};
  for (const FlagSpec& spec : FlagTable()) {
    po::options_description& group = groups[static_cast<size_t>(spec.group)];
    if (spec.value) {
      group.add_options()(spec.name, spec.value(raw), spec.help);
    } else {
      group.add_options()(spec.name, spec.help);
    }
  }
  po::options_description all("ringlimitd: a ringlimit rate-limiter node\n\nUsage: ringlimitd [flags]");
  for (const po::options_description& group : groups) all.add(group);

  ParsedFlags parsed;
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
    // Then the environment (each flag's variable in the table); a flag on the command line wins over it,
    // and it wins over the config file.
    po::store(po::parse_environment(all, FlagOfVariable), vm);
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream file(path);
      if (!file) throw po::error("cannot read config file " + path);
      po::store(po::parse_config_file(file, all), vm);
    }
    po::notify(vm);
    raw.max_connections_given = !vm["max-connections"].defaulted();
  } catch (const po::error& e) {
    std::cerr << "ringlimitd: " << e.what() << "\n(try --help)\n";
    parsed.exit_code = kExitBadFlags;
    return parsed;
  }
  Result<Flags> flags = ValidateFlags(std::move(raw));
  if (!flags.ok()) {
    std::cerr << "ringlimitd: " << flags.status().message() << "\n";
    parsed.exit_code = kExitBadFlags;
    return parsed;
  }
  parsed.flags = std::move(flags).value();
  return parsed;
}

}  // namespace ringlimit::node
