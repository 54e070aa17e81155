// A full data-directory disk (docs/storage.md, "Durability contract"): a real ringlimitd whose --data-dir
// is a tmpfs of 8 MiB. The test fills it with a file until the kernel refuses another byte, and checks
// that the node keeps answering checks from memory (200 or 429, no crash), that the failed write-back
// shows in /metrics (flush errors grow, the last success time stands still, the states stay dirty), that
// write-back resumes once the file is removed (the last success time moves again, the errors stop), and
// that after a kill -9 and a restart every state charged before and during the full disk is there.
//
// Mounting needs root: without it the test skips, saying so; under RINGLIMIT_REQUIRE_ROOT_SCENARIOS=1
// (scripts/test, CI runs as root) it fails instead.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/node/node_test_util.h"
#include "tests/support/http_client.h"
#include "tests/support/node_process.h"

namespace ringlimit::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kFlushIntervalMs = 50;
constexpr int kLimit = 10;
constexpr int kCost = 3;  // every key is charged once: kLimit - kCost remain
constexpr const char* kFlushErrors = "ringlimit_storage_flush_errors_total";
constexpr const char* kLastSuccess = "ringlimit_storage_last_flush_success_timestamp_seconds";
constexpr const char* kDirty = "ringlimit_storage_dirty_keys";

// Polls `done` every 20 ms until it holds or `timeout` passes; returns whether it held.
bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// A tmpfs of `size` mounted on a fresh directory `<tmp>/ringlimit-full-disk-XXXXXX/data`, in a private mount
// namespace; unmounted and removed on destruction.
class TinyTmpfs {
 public:
  // nullopt with `why` set when it cannot be mounted (not root, no mount permission).
  static std::unique_ptr<TinyTmpfs> Mount(const std::string& size, std::string* why) {
    std::string pattern = (fs::temp_directory_path() / "ringlimit-full-disk-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      *why = std::string("mkdtemp: ") + strerror(errno);
      return nullptr;
    }
    auto mounted = std::unique_ptr<TinyTmpfs>(new TinyTmpfs(pattern));
    fs::create_directory(mounted->data());
    const std::string data = mounted->data().string();
    // In a mount namespace of this process's own (the nodes it forks share it): a test that dies before
    // its clean-up leaves no tmpfs mounted behind.
    if (::unshare(CLONE_NEWNS) != 0 || ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      *why = std::string("cannot make a mount namespace: ") + strerror(errno) +
             (geteuid() != 0 ? " (not root)" : "");
      return nullptr;
    }
    if (::mount("tmpfs", data.c_str(), "tmpfs", 0, ("size=" + size).c_str()) != 0) {
      *why =
          "cannot mount a tmpfs on " + data + ": " + strerror(errno) + (geteuid() != 0 ? " (not root)" : "");
      return nullptr;
    }
    mounted->mounted_ = true;
    return mounted;
  }
  ~TinyTmpfs() {
    if (mounted_) ::umount2(data().c_str(), MNT_DETACH);
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  TinyTmpfs(const TinyTmpfs&) = delete;
  TinyTmpfs& operator=(const TinyTmpfs&) = delete;

  const fs::path& dir() const { return dir_; }
  fs::path data() const { return dir_ / "data"; }  // what NodeProcess passes as --data-dir

  // Bytes an unprivileged write could still allocate.
  uint64_t Available() const {
    struct statvfs s {};
    if (::statvfs(data().c_str(), &s) != 0) return 0;
    return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
  }

 private:
  explicit TinyTmpfs(fs::path dir) : dir_(std::move(dir)) {}
  fs::path dir_;
  bool mounted_ = false;
};

// Writes `path` until the filesystem refuses (ENOSPC); returns the errno that stopped it.
int FillUntilFull(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  const std::string chunk(4096, 'f');
  int error = 0;
  for (;;) {
    const ssize_t n = ::write(fd, chunk.data(), chunk.size());
    if (n < 0) {
      error = errno;
      break;
    }
  }
  ::close(fd);
  return error;
}

class FullDiskTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    disk_ = TinyTmpfs::Mount("8m", &why);
    if (disk_ == nullptr) {
      if (const char* required = std::getenv("RINGLIMIT_REQUIRE_ROOT_SCENARIOS");
          required != nullptr && std::string(required) == "1") {
        FAIL() << why << " (RINGLIMIT_REQUIRE_ROOT_SCENARIOS=1, set by scripts/test, requires the full-disk "
               << "scenario: run as root)";
      }
      GTEST_SKIP() << "the full-disk scenario needs a tmpfs of its own: " << why;
    }
    NodeProcessOptions options;
    options.dir = disk_->dir();  // the node's log and port file stay off the tmpfs; the data is on it
    options.pass_data_dir = true;
    options.args = {"--threads", "2", "--flush-interval-ms", std::to_string(kFlushIntervalMs)};
    auto node = NodeProcess::Start(std::move(options));
    ASSERT_TRUE(node) << node.error();
    node_ = std::move(*node);
    client_ = std::make_unique<HttpClient>(node_->http_port());
  }

  void TearDown() override {
    if (node_ != nullptr && node_->running()) (void)node_->Kill();
    client_.reset();
    node_.reset();
    disk_.reset();
  }

  // One check of `cost` on `key` (token bucket, kLimit an hour) by GET: the HTTP status, 200 admitted,
  // 429 denied (0: no answer). Long keys make every batch span several pages of the write-ahead log.
  int Check(const std::string& key, int cost) {
    auto response = client_->Get("/v1/check?key=" + key + "&name=per_hour&algorithm=token_bucket&limit=" +
                                 std::to_string(kLimit) + "&window_ms=3600000&cost=" + std::to_string(cost));
    return response ? response->result_int() : 0;
  }

  // `remaining` of a cost-0 look at `key`; -1 when there is no such answer.
  int64_t Remaining(const std::string& key) {
    auto response =
        client_->Post("/v1/check", R"({"checks":[{"key":")" + key +
                                       R"(","name":"per_hour","algorithm":"token_bucket","limit":)" +
                                       std::to_string(kLimit) + R"(,"window_ms":3600000,"cost":0}]})");
    if (!response || response->result_int() != 200) return -1;
    const auto body = JsonBody(*response);
    if (!body.is_object()) return -1;
    return body.at("results").at(0).at("remaining").to_number<int64_t>();
  }

  double Metric(const char* series) { return MetricValue(*client_, series).value_or(-1); }

  static std::string Key(const std::string& phase, int i) {
    return phase + ":" + std::to_string(i) + ":" + std::string(200, 'k');
  }

  std::unique_ptr<TinyTmpfs> disk_;
  std::unique_ptr<NodeProcess> node_;
  std::unique_ptr<HttpClient> client_;
};

TEST_F(FullDiskTest, KeepsAnsweringAndResumesWriteBackWhenSpaceReturns) {
  // 1. Healthy: states charged and written back.
  constexpr int kKeys = 100;
  for (int i = 0; i < kKeys; ++i) ASSERT_EQ(Check(Key("before", i), kCost), 200) << i;
  ASSERT_TRUE(WaitFor([&] { return Metric(kDirty) == 0; }, std::chrono::seconds(10)))
      << "the states were not written back on a healthy disk\n"
      << node_->Log();
  ASSERT_EQ(Metric(kFlushErrors), 0);

  // 2. The disk fills up: the fault must have happened (the kernel refused a write; nothing is left).
  const fs::path filler = disk_->data() / "filler";
  ASSERT_EQ(FillUntilFull(filler), ENOSPC);
  ASSERT_LT(disk_->Available(), 4096u) << "the tmpfs is not full";

  // The node keeps answering from memory while its writes fail: every check is 200 or 429. New keys are
  // charged until the flush errors reach `errors`.
  int during = 0;
  int status = 200;
  const auto charge_until_errors = [&](double errors) {
    return WaitFor(
        [&] {
          status = Check(Key("during", during++), kCost);  // a new key: admitted
          return status != 200 || Metric(kFlushErrors) >= errors;
        },
        std::chrono::seconds(20));
  };
  const auto log = [&] { return "\n" + node_->Log(); };
  ASSERT_TRUE(charge_until_errors(1)) << "no flush failed on a full disk" << log();
  ASSERT_EQ(status, 200) << "a check on a full disk (0: no answer)" << log();
  const double stuck_success = Metric(kLastSuccess);
  // The retries (the write after a failed one aborted the node before) keep failing, and the node answers.
  ASSERT_TRUE(charge_until_errors(3)) << "the failed write was not retried" << log();
  ASSERT_EQ(status, 200) << "a check on a full disk during the retries (0: no answer)" << log();
  for (int i = 0; i < kLimit / kCost; ++i) EXPECT_EQ(Check("hot", kCost), 200) << i;
  EXPECT_EQ(Check("hot", kCost), 429) << "the limit is still enforced from memory";
  EXPECT_EQ(Metric(kLastSuccess), stuck_success) << "a flush succeeded on a full disk";
  EXPECT_GE(Metric(kDirty), 1) << "the unwritten states are not reported dirty";
  auto health = client_->Get("/healthz");
  ASSERT_TRUE(health) << health.error().message();
  EXPECT_EQ(health->result_int(), 200);

  // 3. Space returns: write-back resumes by itself (the last success time moves, nothing is left dirty,
  // and the errors stop growing).
  ASSERT_TRUE(fs::remove(filler));
  ASSERT_TRUE(WaitFor([&] { return Metric(kDirty) == 0 && Metric(kLastSuccess) > stuck_success; },
                      std::chrono::seconds(20)))
      << "write-back did not resume once the disk had room\n"
      << node_->Log();
  const double errors = Metric(kFlushErrors);
  const double resumed = Metric(kLastSuccess);
  ASSERT_TRUE(WaitFor([&] { return Metric(kLastSuccess) > resumed; }, std::chrono::seconds(10)));
  EXPECT_EQ(Metric(kFlushErrors), errors) << "flushes still fail after the disk has room";
  EXPECT_NE(node_->Log().find("write-back resumed"), std::string::npos);

  // 4. kill -9 and restart: everything charged before and during the full disk was flushed.
  ASSERT_TRUE(node_->Kill());
  auto restarted = node_->Restart();
  ASSERT_TRUE(restarted) << restarted.error();
  client_ = std::make_unique<HttpClient>(node_->http_port());
  for (int i = 0; i < kKeys; ++i) EXPECT_EQ(Remaining(Key("before", i)), kLimit - kCost) << "before " << i;
  for (int i = 0; i < during; ++i) EXPECT_EQ(Remaining(Key("during", i)), kLimit - kCost) << "during " << i;
  EXPECT_EQ(Remaining("hot"), kLimit % kCost) << "the hot key's charges";
}

}  // namespace
}  // namespace ringlimit::testing
