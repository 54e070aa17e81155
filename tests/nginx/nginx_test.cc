// The nginx recipe (examples/nginx/ringlimit.conf, issue 17) as a user runs it: a real nginx in front of an
// app (a second nginx server block answering "app"), asking a real 3-node cluster through GET /v1/auth.
// Asserted: the first `limit` requests of a key reach the app with the RateLimit headers; the next gets 429
// with them and Retry-After; a POST with a large body is answered at once (the subrequest carries no
// body); a request without X-Api-Key is limited by client address; with every ringlimitd down the
// requests still reach the app (fail open).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cluster/cluster_test_util.h"

namespace ringlimit::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

constexpr char kNginx[] = "/usr/sbin/nginx";

// A port nothing listens on right now (bound and released).
uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

void ReplaceAll(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

std::string HeaderOf(const ClientResponse& response, std::string_view name) {
  auto it = response.find(name);
  return it == response.end() ? "" : std::string(it->value());
}

class Nginx {
 public:
  ~Nginx() {
    Stop();
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }

  // Starts nginx on two free ports (front(), the recipe's listener, and the app behind it). nginx cannot
  // bind port 0 and report it, so the ports are picked free and may be taken by another process before
  // nginx binds them: then nginx exits, or the front port answers without being nginx, and it is tried
  // again on other ports.
  Result<void> Start(const Cluster& cluster) {
    std::string errors;
    for (int attempt = 0; attempt < 5; ++attempt) {
      front_ = FreePort();
      const uint16_t app = FreePort();
      if (front_ == 0 || app == 0 || front_ == app) continue;
      auto started = StartOn(cluster, front_, app);
      if (started) return {};
      errors += started.error() + "\n";
      Stop();
    }
    return "nginx did not start in 5 attempts:\n" + errors;
  }

  [[nodiscard]] uint16_t front() const { return front_; }

 private:
  void Stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  // The example config with the cluster's addresses, the app and the front port filled in.
  Result<void> StartOn(const Cluster& cluster, uint16_t front, uint16_t app) {
    dir_ = fs::temp_directory_path() / ("rl-nginx-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::ifstream in(std::string(RINGLIMIT_SOURCE_DIR) + "/examples/nginx/ringlimit.conf");
    std::stringstream text;
    text << in.rdbuf();
    std::string recipe = text.str();
    if (recipe.empty()) return std::string("examples/nginx/ringlimit.conf is missing");
    for (int i = 0; i < 3; ++i) {
      ReplaceAll(recipe, "127.0.0.1:700" + std::to_string(i + 1),
                 "127.0.0.1:" + std::to_string(cluster.http_port(static_cast<size_t>(i))));
    }
    ReplaceAll(recipe, "127.0.0.1:8000", "127.0.0.1:" + std::to_string(app));
    ReplaceAll(recipe, "listen 8080;", "listen 127.0.0.1:" + std::to_string(front) + ";");
    std::ofstream(dir_ / "ringlimit.conf") << recipe;
    const std::string d = dir_.string();
    std::ofstream(dir_ / "nginx.conf")
        << "daemon off;\nmaster_process off;\nworker_processes 1;\npid " << d << "/nginx.pid;\nerror_log "
        << d << "/error.log warn;\nevents { worker_connections 512; }\nhttp {\n  access_log off;\n"
        << "  client_body_temp_path " << d << "/body;\n  proxy_temp_path " << d << "/proxy;\n"
        << "  fastcgi_temp_path " << d << "/fastcgi;\n  uwsgi_temp_path " << d << "/uwsgi;\n"
        << "  scgi_temp_path " << d << "/scgi;\n"
        << "  server { listen 127.0.0.1:" << app << "; location / { return 200 \"app\\n\"; } }\n"
        << "  include " << d << "/ringlimit.conf;\n}\n";
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string log = d + "/stderr.log";
      if (std::freopen(log.c_str(), "w", stderr) == nullptr) _exit(127);
      std::string conf = d + "/nginx.conf";
      std::string prefix = d + "/";
      char* argv[] = {const_cast<char*>(kNginx),
                      const_cast<char*>("-p"),
                      prefix.data(),
                      const_cast<char*>("-c"),
                      conf.data(),
                      nullptr};
      ::execv(kNginx, argv);
      _exit(127);
    }
    bool exited = false;
    auto up = WaitFor("nginx to listen", milliseconds(10'000), [&](std::string* last) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {  // e.g. a port was taken: bind() failed
        pid_ = -1;
        exited = true;
        return true;
      }
      HttpClient probe(front, milliseconds(500));
      auto response = probe.Get("/");
      if (!response) {
        *last = response.error().message();
        return false;
      }
      if (HeaderOf(*response, "Server").starts_with("nginx")) return true;
      *last = "port " + std::to_string(front) + " answers but is not nginx";
      return false;
    });
    if (exited) return "nginx exited: " + Log();
    if (!up) return up.error() + "\n" + Log();
    return {};
  }

 public:
  std::string Log() const {
    std::ifstream in(dir_ / "error.log");
    std::stringstream a;
    a << in.rdbuf();
    std::ifstream err(dir_ / "stderr.log");
    a << err.rdbuf();
    return a.str();
  }

 private:
  fs::path dir_;
  pid_t pid_ = -1;
  uint16_t front_ = 0;
};

TEST(NginxRecipeTest, LimitsPassesHeadersSendsNoBodyAndFailsOpen) {
  if (!fs::exists(kNginx)) GTEST_SKIP() << "no nginx (scripts/bootstrap installs nginx-light)";
  auto started = Cluster::Start({.nodes = 3, .args = {"--threads", "2"}});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  Nginx nginx;
  auto running = nginx.Start(cluster);
  const uint16_t front = nginx.front();
  ASSERT_TRUE(running) << running.error();

  HttpClient client(front, milliseconds(5'000));
  for (int i = 0; i < 10; ++i) {
    auto response = client.Get("/orders", {{"X-Api-Key", "nginx-key"}});
    ASSERT_TRUE(response) << response.error().message();
    ASSERT_EQ(response->result_int(), 200) << response->body() << nginx.Log();
    EXPECT_EQ(response->body(), "app\n");
    EXPECT_EQ(HeaderOf(*response, "X-RateLimit-Limit"), "10");
    EXPECT_EQ(HeaderOf(*response, "X-RateLimit-Remaining"), std::to_string(9 - i));
    EXPECT_NE(HeaderOf(*response, "RateLimit-Policy"), "");
  }
  auto denied = client.Get("/orders", {{"X-Api-Key", "nginx-key"}});
  ASSERT_TRUE(denied) << denied.error().message();
  EXPECT_EQ(denied->result_int(), 429) << denied->body();
  EXPECT_NE(denied->body().find("rate_limited"), std::string::npos);
  EXPECT_EQ(HeaderOf(*denied, "X-RateLimit-Remaining"), "0");
  EXPECT_NE(HeaderOf(*denied, "Retry-After"), "");
  EXPECT_NE(HeaderOf(*denied, "RateLimit"), "");

  // A POST with a body: the subrequest carries none, so it is answered at once.
  const auto before = std::chrono::steady_clock::now();
  auto post = client.Post("/upload", std::string(200'000, 'x'), {{"X-Api-Key", "nginx-post"}}, "text/plain");
  ASSERT_TRUE(post) << post.error().message();
  EXPECT_EQ(post->result_int(), 200) << post->body();
  EXPECT_LT(std::chrono::steady_clock::now() - before, milliseconds(3'000));

  // No key header: limited by the client's address, still allowed here.
  auto anonymous = client.Get("/orders");
  ASSERT_TRUE(anonymous) << anonymous.error().message();
  EXPECT_EQ(anonymous->result_int(), 200);
  EXPECT_EQ(HeaderOf(*anonymous, "X-RateLimit-Limit"), "10");

  // Every ringlimitd down: fail open.
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(cluster.Kill(i));
  HttpClient after(front, milliseconds(10'000));
  auto open = after.Get("/orders", {{"X-Api-Key", "nginx-key"}});
  ASSERT_TRUE(open) << open.error().message();
  EXPECT_EQ(open->result_int(), 200) << open->body() << nginx.Log();
  EXPECT_EQ(open->body(), "app\n");
}

}  // namespace
}  // namespace ringlimit::testing
