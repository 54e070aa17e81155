// POST /v1/GetRateLimits in a 3-node cluster: items are routed to their key's owner like /v1/check, so
// a key's limit holds exactly whatever nodes its hits arrive at, and every decided item names its owner
// in Gubernator's metadata map.
#include <array>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "tests/cluster/cluster_test_util.h"

namespace ringlimit::testing {
namespace {

constexpr int kNodes = 3;

// One item of a GetRateLimits request (TOKEN_BUCKET of `limit` per day: nothing refills during a test).
std::string Item(const std::string& key, int64_t limit, const std::string& name = "gub") {
  return R"({"name":")" + name + R"(","unique_key":")" + key + R"(","hits":1,"limit":)" +
         std::to_string(limit) + R"(,"duration":86400000,"algorithm":"TOKEN_BUCKET"})";
}

std::string Request(const std::vector<std::string>& items) {
  std::string body = R"({"requests":[)";
  for (size_t i = 0; i < items.size(); ++i) body += (i > 0 ? "," : "") + items[i];
  return body + "]}";
}

struct ItemOutcome {
  bool under = false;
  int64_t remaining = -1;
  std::string owner;
  std::string error;
};

// POSTs `body` and parses every response item; fails on anything but 200 with `expected` items.
Result<std::vector<ItemOutcome>> GetRateLimits(HttpClient& client, const std::string& body, size_t expected) {
  auto response = client.Post("/v1/GetRateLimits", body);
  if (!response) return "POST /v1/GetRateLimits: " + response.error().message();
  if (response->result_int() != 200)
    return "POST /v1/GetRateLimits: " + std::to_string(response->result_int()) + " " + response->body();
  std::vector<ItemOutcome> out;
  try {
    const auto json = JsonBody(*response);
    for (const auto& r : json.at("responses").as_array()) {
      ItemOutcome item;
      item.under = r.at("status").as_string() == "UNDER_LIMIT";
      item.remaining = std::stoll(std::string(r.at("remaining").as_string()));
      item.owner = StringField(r.at("metadata"), "owner");
      item.error = StringField(r, "error");
      out.push_back(std::move(item));
    }
  } catch (const std::exception& e) {
    return std::string("unexpected body (") + e.what() + "): " + response->body();
  }
  if (out.size() != expected) return "expected " + std::to_string(expected) + " items: " + response->body();
  return out;
}

class ClusterGubernatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = Cluster::Start({.nodes = kNodes});
    ASSERT_TRUE(started) << started.error();
    cluster_ = std::move(*started);
    auto view = FetchClusterView(cluster_->http_port(0));
    ASSERT_TRUE(view) << view.error();
    ring_ = RingOfAlive(*view);
    ASSERT_EQ(ring_->members().size(), static_cast<size_t>(kNodes));
    for (const auto& m : view->members) id_of_address_[m.http_address] = m.id;
  }

  // The id of the member whose address metadata.owner gives (as Gubernator, "host:port"); "" if none.
  std::string Id(const std::string& owner) const {
    auto it = id_of_address_.find(owner);
    return it == id_of_address_.end() ? "" : it->second;
  }

  std::unique_ptr<Cluster> cluster_;
  std::shared_ptr<const ring::RingView> ring_;
  std::map<std::string, std::string> id_of_address_;
};

// 24 clients over the 3 nodes; each request carries the next hit of two different keys. Every key gets
// kAttempts hits spread over all nodes, and exactly kLimit of them are admitted, each by the key's owner.
TEST_F(ClusterGubernatorTest, ItemsAreDecidedByTheirOwnerExactlyAcrossNodes) {
  constexpr int kClients = 24;
  constexpr int kKeys = 120;
  constexpr int64_t kLimit = 10;
  constexpr int kAttempts = 15;
  constexpr int kHits = kKeys * kAttempts;
  std::array<std::atomic<int>, kKeys> under{};
  std::array<std::atomic<int>, kKeys> over{};
  std::atomic<int> next{0}, failed{0}, wrong_owner{0};
  std::mutex failure_mutex;
  std::string first_failure;  // guarded by failure_mutex
  auto fail = [&](std::string what) {
    failed.fetch_add(1);
    std::lock_guard lock(failure_mutex);
    if (first_failure.empty()) first_failure = std::move(what);
  };

  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      HttpClient client(cluster_->http_port(c % kNodes), std::chrono::seconds(10 * kSlowdown));
      // Hits h and h+1 go to keys h % kKeys and (h+1) % kKeys: the hits of one key come from many
      // clients on all nodes.
      for (int h = next.fetch_add(2); h < kHits; h = next.fetch_add(2)) {
        std::vector<int> keys = {h % kKeys};
        if (h + 1 < kHits) keys.push_back((h + 1) % kKeys);
        std::vector<std::string> items;
        for (int k : keys) items.push_back(Item("gub-" + std::to_string(k), kLimit));
        auto outcome = GetRateLimits(client, Request(items), keys.size());
        if (!outcome) {
          fail(outcome.error());
          continue;
        }
        for (size_t i = 0; i < keys.size(); ++i) {
          const ItemOutcome& item = (*outcome)[i];
          const std::string key = "gub-" + std::to_string(keys[i]);
          if (!item.error.empty()) fail(key + ": " + item.error);
          (item.under ? under : over)[keys[i]].fetch_add(1);
          if (Id(item.owner) != OwnerOf(*ring_, key)) {
            wrong_owner.fetch_add(1);
            fail(key + " decided by '" + item.owner + "', owner is " + OwnerOf(*ring_, key));
          }
        }
      }
    });
  }
  for (auto& t : clients) t.join();

  EXPECT_EQ(failed.load(), 0) << first_failure;
  EXPECT_EQ(wrong_owner.load(), 0);
  int wrong = 0;
  for (int k = 0; k < kKeys; ++k) {
    if (under[k].load() != kLimit && ++wrong <= 10) {
      ADD_FAILURE() << "key " << k << ": " << under[k].load() << " admitted, " << over[k].load()
                    << " refused (limit " << kLimit << ")";
    }
    EXPECT_EQ(under[k].load() + over[k].load(), kAttempts) << "key " << k;
  }
  EXPECT_EQ(wrong, 0) << "keys with a wrong admitted count";
}

// Several items of one key in one request, sent to a node that does not own it: decided by the owner,
// independently (a refused item does not refuse its siblings) and in request order.
TEST_F(ClusterGubernatorTest, ItemsOfOneKeyAreIndependentAndInOrderOnTheOwner) {
  const std::string key = KeyOwnedBy(*ring_, cluster_->id(1), "gub-order-");
  const std::string local = KeyOwnedBy(*ring_, cluster_->id(0), "gub-local-");
  HttpClient client(cluster_->http_port(0));
  auto outcome =
      GetRateLimits(client,
                    Request({Item(key, 2), Item(key, 2), Item(key, 2), Item(key, 5, "other"), Item(local, 1),
                             R"({"name":"gub","unique_key":"","hits":1,"limit":1,"duration":1000})"}),
                    6);
  ASSERT_TRUE(outcome) << outcome.error();
  const auto& items = *outcome;
  EXPECT_TRUE(items[0].under);
  EXPECT_EQ(items[0].remaining, 1);
  EXPECT_TRUE(items[1].under);
  EXPECT_EQ(items[1].remaining, 0);
  EXPECT_FALSE(items[2].under);
  EXPECT_TRUE(items[3].under);  // another limit of the same key: not all-or-nothing with [2]
  EXPECT_EQ(items[3].remaining, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(Id(items[i].owner), cluster_->id(1)) << i;
  EXPECT_TRUE(items[4].under);
  EXPECT_EQ(Id(items[4].owner), cluster_->id(0));
  EXPECT_NE(items[5].error, "");  // a per-item error: nothing decided, no owner
  EXPECT_EQ(items[5].owner, "");

  // The state lives on the owner: the same key through the third node continues where it left off.
  HttpClient third(cluster_->http_port(2));
  auto again = GetRateLimits(third, Request({Item(key, 5, "other")}), 1);
  ASSERT_TRUE(again) << again.error();
  EXPECT_EQ((*again)[0].remaining, 3);
  EXPECT_EQ(Id((*again)[0].owner), cluster_->id(1));
}

}  // namespace
}  // namespace ringlimit::testing
