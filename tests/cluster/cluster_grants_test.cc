// Quota grants end to end (--grants on, docs/limiter.md "Quota grants"): three real ringlimitd processes,
// one hot key with limit L, clients on every node. Entry nodes decide the key from slices its owner lent
// them; once every slice came back (expired, idle or released), the key has admitted exactly L -- never
// more -- and grants were really made and used (the test fails when no slice is ever lent).
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include "tests/cluster/cluster_test_util.h"

namespace ringlimit::testing {
namespace {

constexpr int kNodes = 3;
constexpr int kClients = 24;
constexpr uint64_t kLimit = 3000;
// Checks sent through every node in phase 1: short of the limit, so slices are still out (partly unused) when
// it ends and their unused units must come back for phase 2 to reach the limit.
constexpr uint64_t kFirstPhase = kLimit - kLimit / 10;

// Sums `name{labels}` over the nodes; nullopt when a node has no such sample.
std::optional<double> SumOver(Cluster& cluster, const std::string& name, const std::string& labels = "") {
  double sum = 0;
  for (int i = 0; i < kNodes; ++i) {
    const std::optional<double> v = MetricSample(cluster.http_port(i), name, labels);
    if (!v) return std::nullopt;
    sum += *v;
  }
  return sum;
}

struct Case {
  const char* algorithm;
  int64_t window_ms;  // long: nothing refills or rolls over during the test
};

class ClusterGrantsTest : public ::testing::TestWithParam<Case> {};

TEST_P(ClusterGrantsTest, AHotKeyThroughAllNodesAdmitsExactlyTheLimitOnceTheSlicesAreBack) {
  auto started = Cluster::Start(
      {.nodes = kNodes,
       .args = {"--threads", "2", "--grants", "on", "--grant-threshold", "20", "--grant-term-ms", "500"}});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  const CheckSpec spec{.algorithm = GetParam().algorithm, .limit = kLimit, .window_ms = GetParam().window_ms};
  const std::string key = std::string("hot-") + GetParam().algorithm;
  auto ring = FetchRing(cluster.http_port(0), key);
  ASSERT_TRUE(ring) << ring.error();
  int owner = -1;
  for (int i = 0; i < kNodes; ++i) {
    if ("n" + std::to_string(i + 1) == ring->owner) owner = i;
  }
  ASSERT_GE(owner, 0) << ring->owner;

  std::atomic<uint64_t> admitted{0}, sent{0}, failed{0};
  std::mutex failure_mutex;
  std::string first_failure;  // guarded by failure_mutex
  auto note_failure = [&](const std::string& what) {
    failed.fetch_add(1);
    std::lock_guard lock(failure_mutex);
    if (first_failure.empty()) first_failure = what;
  };

  // Phase 1: nine tenths of the limit, from clients spread over every node.
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      HttpClient client(cluster.http_port(c % kNodes), std::chrono::seconds(10 * kSlowdown));
      while (sent.fetch_add(1) < kFirstPhase) {
        auto outcome = PostCheck(client, key, spec);
        if (!outcome || outcome->status != 200) {
          note_failure(outcome ? outcome->body : outcome.error());
          continue;
        }
        if (outcome->allowed) admitted.fetch_add(1);
      }
    });
  }
  for (auto& t : clients) t.join();
  ASSERT_EQ(failed.load(), 0u) << first_failure;
  EXPECT_LE(admitted.load(), kLimit) << "over the limit while slices were out";

  // Grants were made and used: the run exercised the protocol, not only forwarding.
  const std::optional<double> made = SumOver(cluster, "ringlimit_grants_total", "event=\"made\"");
  const std::optional<double> local = SumOver(cluster, "ringlimit_grants_checks_total", "decided=\"local\"");
  ASSERT_TRUE(made && local);
  const std::optional<double> asked = SumOver(cluster, "ringlimit_grants_requests_total");
  const std::optional<double> forwarded =
      SumOver(cluster, "ringlimit_grants_checks_total", "decided=\"forwarded\"");
  EXPECT_GT(*made, 0) << "no slice was ever lent; asked " << asked.value_or(-1) << ", checks forwarded "
                      << forwarded.value_or(-1);
  EXPECT_GT(*local, 0) << "no check was decided from a slice";

  // Every slice comes back: released by its holder at its term or when idle, or reclaimed by the owner.
  auto back =
      WaitFor("every slice back", std::chrono::milliseconds(15'000 * kSlowdown), [&](std::string* why) {
        const std::optional<double> out = SumOver(cluster, "ringlimit_grants_units_out");
        const std::optional<double> held = SumOver(cluster, "ringlimit_grants_slices_held");
        if (!out || !held) return false;
        *why = std::to_string(*out) + " units out, " + std::to_string(*held) + " slices held";
        return *out == 0 && *held == 0;
      });
  ASSERT_TRUE(back) << back.error();

  // Phase 2: the owner decides what is left (it asks nobody for a slice): the remaining units, then
  // refusals only. Stop after 20 refusals in a row.
  HttpClient at_owner(cluster.http_port(owner), std::chrono::seconds(10 * kSlowdown));
  int refusals = 0;
  uint64_t second = 0;
  while (refusals < 20 && second < kLimit) {
    auto outcome = PostCheck(at_owner, key, spec);
    ASSERT_TRUE(outcome && outcome->status == 200) << (outcome ? outcome->body : outcome.error());
    if (outcome->allowed) {
      ++second;
      refusals = 0;
    } else {
      ++refusals;
    }
  }
  const std::optional<double> made_after = SumOver(cluster, "ringlimit_grants_total", "event=\"made\"");
  const std::optional<double> released = SumOver(cluster, "ringlimit_grants_total", "event=\"released\"");
  const std::optional<double> expired = SumOver(cluster, "ringlimit_grants_total", "event=\"expired\"");
  const std::optional<double> returned = SumOver(cluster, "ringlimit_grants_returned_units_total");
  const std::optional<double> refused = SumOver(cluster, "ringlimit_grants_total", "event=\"refused\"");
  const std::optional<double> send_failed =
      SumOver(cluster, "ringlimit_grants_failures_total", "kind=\"send\"");
  std::printf(
      "%s: phase 1 admitted %llu of %llu sent over %d nodes (%.0f decided from slices, %.0f "
      "forwarded by holders); grants made %.0f, released %.0f, expired %.0f, units returned %.0f; "
      "phase 2 at the owner admitted %llu; total %llu (limit %llu); asked %.0f, refused %.0f, "
      "unanswered %.0f\n",
      GetParam().algorithm, static_cast<unsigned long long>(admitted.load()),
      static_cast<unsigned long long>(kFirstPhase), kNodes, *local, forwarded.value_or(-1),
      made_after.value_or(-1), released.value_or(-1), expired.value_or(-1), returned.value_or(-1),
      static_cast<unsigned long long>(second), static_cast<unsigned long long>(admitted.load() + second),
      static_cast<unsigned long long>(kLimit), asked.value_or(-1), refused.value_or(-1),
      send_failed.value_or(-1));
  ASSERT_TRUE(made_after && released && expired);
  EXPECT_EQ(*released + *expired, *made_after) << "every grant made was settled";
  EXPECT_EQ(admitted.load() + second, kLimit)
      << admitted.load() << " admitted through every node, then " << second << " at the owner; grants made "
      << *made << ", checks decided from slices " << *local;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ClusterGrantsTest,
                         ::testing::Values(Case{"fixed_window", 86'400'000},
                                           Case{"token_bucket", 30LL * 86'400'000}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.algorithm);
                         });

}  // namespace
}  // namespace ringlimit::testing
