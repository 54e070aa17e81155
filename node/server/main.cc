// ringlimitd: parses flags (node/server/flags.h), sets up logging, starts a Node and waits for signals.
// SIGTERM/SIGINT: graceful stop, exit 0. SIGHUP: reload the policies file and
// --rls-config. POST /v1/cluster/leave: leave the cluster, then the same graceful stop, exit 0. Everything
// else lives in Node (node/server/node.h). See docs/operations.md.
#include <signal.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "node/server/file_watcher.h"
#include "node/server/flags.h"
#include "node/server/node.h"
#include "storage/allocator.h"

namespace {

using ringlimit::node::kExitOk;
using ringlimit::node::kExitStartFailed;

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
  ringlimit::node::ParsedFlags parsed = ringlimit::node::ParseFlags(argc, argv);
  if (!parsed.flags) return parsed.exit_code;
  ringlimit::node::Flags& flags = *parsed.flags;

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
  if (!ringlimit::storage::FixAllocatorThresholds()) {
    spdlog::debug("allocator: mmap and trim thresholds not fixed (not glibc's malloc)");
  }

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
