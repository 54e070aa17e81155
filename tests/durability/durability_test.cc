// Restart semantics of a node with --data-dir (docs/storage.md, "Durability contract"):
//  - after kill -9, every update older than the flush interval is there again;
//  - after SIGTERM (clean stop), every update is there, with no wait.
// For every algorithm: consume part of a limit, stop the node one way or the other, restart it on the
// same data directory and check that the remaining figures continued where they were.
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <signal.h>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "storage/key_codec.h"
#include "tests/support/http_client.h"
#include "tests/support/node_process.h"

namespace ringlimit::testing {
namespace {

constexpr int kFlushIntervalMs = 50;
const char* const kAlgorithms[] = {
    "fixed_window", "sliding_log", "sliding_window", "sliding_window_approx", "token_bucket",
    "leaky_bucket", "gcra"};

// One inline check on "user:<algorithm>": 10 per hour (nothing refills noticeably during the test).
std::string CheckBody(const std::string& algorithm, int cost) {
  std::string burst = algorithm == "gcra" ? R"(,"burst":9)" : "";
  return R"({"checks":[{"key":"user:)" + algorithm + R"(","name":"per_hour","algorithm":")" + algorithm +
         R"(","limit":10,"window_ms":3600000,"cost":)" + std::to_string(cost) + burst + "}]}";
}

class DurabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    NodeProcessOptions options;
    options.pass_data_dir = true;
    options.args = {"--threads", "2", "--flush-interval-ms", std::to_string(kFlushIntervalMs)};
    auto node = NodeProcess::Start(std::move(options));
    if (!node && node.error().find("data-dir") != std::string::npos) {
      GTEST_SKIP() << "ringlimitd does not accept --data-dir / --flush-interval-ms yet: " << node.error();
    }
    ASSERT_TRUE(node) << node.error();
    node_ = std::move(*node);
  }

  // Charges `cost` on the algorithm's key and returns the `remaining` figure (-1 on any failure).
  int64_t Remaining(const std::string& algorithm, int cost) {
    HttpClient client(node_->http_port());
    auto response = client.Post("/v1/check", CheckBody(algorithm, cost));
    if (!response) {
      ADD_FAILURE() << algorithm << ": " << response.error().message();
      return -1;
    }
    EXPECT_EQ(response->result_int(), 200) << response->body();
    boost::system::error_code ec;
    auto body = boost::json::parse(response->body(), ec);
    if (ec || !body.is_object()) {
      ADD_FAILURE() << algorithm << ": not JSON: " << response->body();
      return -1;
    }
    return body.at("results").at(0).at("remaining").to_number<int64_t>();
  }

  // Consumes 1, 2 and 1 units on every algorithm's key; returns the remaining figures.
  std::map<std::string, int64_t> ConsumeSome() {
    std::map<std::string, int64_t> remaining;
    for (const char* a : kAlgorithms) {
      Remaining(a, 1);
      Remaining(a, 2);
      remaining[a] = Remaining(a, 1);
      EXPECT_LT(remaining[a], 10) << a;
    }
    return remaining;
  }

  void ExpectContinued(const std::map<std::string, int64_t>& before) {
    for (const auto& [algorithm, remaining] : before) {
      EXPECT_EQ(Remaining(algorithm, 0), remaining) << algorithm << " after restart";  // cost 0: peek
      EXPECT_EQ(Remaining(algorithm, 1), remaining - 1) << algorithm << " charging after restart";
    }
  }

  std::unique_ptr<NodeProcess> node_;
};

TEST_F(DurabilityTest, KillNineAfterTheFlushIntervalKeepsEveryUpdate) {
  auto before = ConsumeSome();
  // The contract is about time: updates older than the flush interval are on disk. Let several
  // intervals pass (the flusher runs every kFlushIntervalMs).
  std::this_thread::sleep_for(std::chrono::milliseconds(6 * kFlushIntervalMs));
  ASSERT_TRUE(node_->Kill());
  auto restarted = node_->Restart();
  ASSERT_TRUE(restarted) << restarted.error();
  ExpectContinued(before);
}

TEST_F(DurabilityTest, SigtermWithoutWaitingKeepsEveryUpdate) {
  auto before = ConsumeSome();
  ASSERT_TRUE(node_->Signal(SIGTERM));
  auto exit_code = node_->WaitExit();
  ASSERT_TRUE(exit_code) << exit_code.error();
  EXPECT_EQ(*exit_code, 0);
  auto restarted = node_->Restart();
  ASSERT_TRUE(restarted) << restarted.error();
  ExpectContinued(before);
}

TEST_F(DurabilityTest, RepeatedCrashesKeepCounting) {
  int64_t expected = 10;
  for (int round = 0; round < 3; ++round) {
    expected = Remaining("token_bucket", 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(6 * kFlushIntervalMs));
    ASSERT_TRUE(node_->Kill());
    auto restarted = node_->Restart();
    ASSERT_TRUE(restarted) << restarted.error();
  }
  EXPECT_EQ(expected, 4);
  EXPECT_EQ(Remaining("token_bucket", 0), expected);
}

// Rows of states that went idle leave RocksDB (the store sweeps idle states and deletes their rows;
// a clean stop sweeps everything). Inspects the database directly once the node has stopped.
TEST_F(DurabilityTest, ExpiredStatesLeaveTheDatabase) {
  HttpClient client(node_->http_port());
  auto check = [&](const std::string& key, int window_ms) {
    auto response =
        client.Post("/v1/check", R"({"checks":[{"key":")" + key +
                                     R"(","name":"n","algorithm":"fixed_window","limit":5,"window_ms":)" +
                                     std::to_string(window_ms) + "}]}");
    ASSERT_TRUE(response) << response.error().message();
    ASSERT_EQ(response->result_int(), 200) << response->body();
  };
  for (int i = 0; i < 20; ++i) check("short:" + std::to_string(i), 100);
  check("long", 3'600'000);
  // The condition is time itself: let the 100 ms windows end (and a few flush intervals pass).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(node_->Signal(SIGTERM));
  ASSERT_TRUE(node_->WaitExit());

  rocksdb::DB* raw = nullptr;
  rocksdb::Status status = rocksdb::DB::OpenForReadOnly(rocksdb::Options(), node_->data_dir().string(), &raw);
  ASSERT_TRUE(status.ok()) << status.ToString();
  std::unique_ptr<rocksdb::DB> db(raw);
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
  std::vector<std::string> entities;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    auto row = storage::DecodeRowKey(it->key().ToStringView());
    ASSERT_TRUE(row.has_value());
    entities.emplace_back(row->entity);
  }
  EXPECT_EQ(entities, std::vector<std::string>{"long"});
}

TEST_F(DurabilityTest, CorruptDataDirIsAClearErrorAtStart) {
  Remaining("token_bucket", 1);
  ASSERT_TRUE(node_->Signal(SIGTERM));
  ASSERT_TRUE(node_->WaitExit());
  ASSERT_TRUE(WriteFile(node_->data_dir() / "CURRENT", "not a manifest\n"));
  auto restarted = node_->Restart();
  ASSERT_FALSE(restarted) << "a node started on a corrupt data directory";
  EXPECT_NE(restarted.error().find("cannot open the RocksDB data directory"), std::string::npos)
      << restarted.error();
}

}  // namespace
}  // namespace ringlimit::testing
