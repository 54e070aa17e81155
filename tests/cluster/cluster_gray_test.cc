// Gray failures with real processes (issue 13): a forwarded check whose answer is late is retried and
// charged once (idempotent forwarding), and a node whose wall clock is an hour off refuses to decide
// (clock discipline, under libfaketime).
#include <signal.h>

#include <boost/json.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include "tests/cluster/cluster_test_util.h"
#include "tests/support/faketime.h"

namespace ringlimit::testing {
namespace {

namespace json = boost::json;
using std::chrono::milliseconds;

// GET /v1/cluster from the node at `port` as JSON (null on failure).
json::value ClusterJson(uint16_t port) {
  HttpClient client(port, milliseconds(2000));
  auto response = client.Get("/v1/cluster");
  if (!response || response->result_int() != 200) return nullptr;
  return JsonBody(*response);
}

// The member `id`'s clock_offset_ms in the node's GET /v1/cluster, if measured.
std::optional<double> OffsetMs(const json::value& cluster, const std::string& id) {
  if (!cluster.is_object()) return std::nullopt;
  for (const json::value& m : cluster.at("members").as_array()) {
    if (StringField(m, "id") != id) continue;
    if (const json::value* offset = m.as_object().if_contains("clock_offset_ms"))
      return offset->to_number<double>();
  }
  return std::nullopt;
}

bool ClockOk(const json::value& cluster) { return cluster.is_object() && cluster.at("clock_ok").as_bool(); }

// A key the cluster (as node `via` sees it) places on `owner`; "" (and a test failure) when it cannot tell.
std::string KeyOwnedVia(Cluster& cluster, size_t via, const std::string& owner, const std::string& prefix) {
  auto view = FetchClusterView(cluster.http_port(via));
  if (!view) {
    ADD_FAILURE() << view.error();
    return "";
  }
  auto ring = RingOfAlive(*view);
  if (ring == nullptr || ring->Find(owner) == nullptr) {
    ADD_FAILURE() << owner << " is not in " << view->node_id << "'s ring";
    return "";
  }
  return KeyOwnedBy(*ring, owner, prefix);
}

// The owner of a key is paused (SIGSTOP) past the forward timeout but not past failure detection: the
// entry node's first attempt times out, it sends the check again to the same owner, and the resumed
// owner finds the first attempt past its deadline (the sender gave up on it: charged nothing, counted as
// expired) and decides the retry. The key is charged once.
TEST(ClusterGrayTest, ForwardedCheckRetriedAfterATimeoutIsChargedOnce) {
  // Failure detection far slower than the pause: however late the check reaches n1 on a loaded machine,
  // n2 is never declared dead meanwhile (n1 would then skip it and go straight to the next holder).
  auto started = Cluster::Start(
      {.nodes = 3, .args = {"--threads", "2", "--log-level", "debug", "--suspicion-timeout-ms", "20000"}});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  const std::string key = KeyOwnedVia(cluster, 0, "n2", "dedup-");
  ASSERT_FALSE(key.empty());
  const CheckSpec spec{.limit = 100};
  HttpClient n1(cluster.http_port(0), milliseconds(10'000));
  for (int i = 0; i < 3; ++i) {
    auto outcome = PostCheck(n1, key, spec);
    ASSERT_TRUE(outcome) << outcome.error();
    ASSERT_EQ(outcome->status, 200) << outcome->body;
    ASSERT_EQ(outcome->owner, "n2");
  }
  const double retried_before =
      MetricSample(cluster.http_port(0), "ringlimit_forward_attempts_total", R"(result="retried_same")")
          .value_or(-1);
  ASSERT_GE(retried_before, 0);

  ASSERT_TRUE(cluster.node(1).Signal(SIGSTOP));
  // The check goes in while the owner is paused; it is answered once the owner resumes.
  auto pending = std::async(std::launch::async, [&cluster, &key, &spec] {
    HttpClient client(cluster.http_port(0), milliseconds(10'000));
    return PostCheck(client, key, spec);
  });
  // The first attempt timed out and the same owner got the check again.
  auto retried =
      WaitFor("n1 to retry the paused owner", milliseconds(5'000 * kSlowdown), [&](std::string* last) {
        const double now =
            MetricSample(cluster.http_port(0), "ringlimit_forward_attempts_total", R"(result="retried_same")")
                .value_or(-1);
        *last = "retried_same " + std::to_string(now);
        return now > retried_before;
      });
  ASSERT_TRUE(cluster.node(1).Signal(SIGCONT));
  auto outcome = pending.get();
  ASSERT_TRUE(outcome) << outcome.error();
  ASSERT_TRUE(retried) << retried.error() << "; the check came back " << outcome->status << " "
                       << outcome->body << "\n"
                       << cluster.Logs();
  ASSERT_EQ(outcome->status, 200) << outcome->body;
  EXPECT_TRUE(outcome->allowed);
  EXPECT_EQ(outcome->owner, "n2") << "decided by the owner, not a failover";
  EXPECT_EQ(outcome->remaining, 96u) << "charged once: 100 - 3 - 1";

  // Looked at (cost 0) through every node: one charge.
  for (size_t i = 0; i < 3; ++i) {
    HttpClient client(cluster.http_port(i));
    auto peek = PostCheck(client, key, CheckSpec{.limit = 100, .cost = 0});
    ASSERT_TRUE(peek) << peek.error();
    ASSERT_EQ(peek->status, 200) << peek->body;
    EXPECT_EQ(peek->remaining, 96u) << "through " << cluster.id(i);
  }
  // The owner refused the first attempt, read after its sender had given up on it.
  EXPECT_GE(
      MetricSample(cluster.http_port(1), "ringlimit_forward_served_checks_total", R"(outcome="expired")")
          .value_or(0),
      1)
      << cluster.Logs();
}

// A node paused (SIGSTOP) long enough that another holder may have decided its keys is fenced once it
// resumes: GET /v1/cluster shows "fence": {"deciding": false, "paused": true} and ringlimit_fenced{reason=
// "paused"} is 1 until a membership round trip has run (2 probe intervals), then it decides again.
TEST(ClusterGrayTest, AResumedNodeShowsItsPauseFenceUntilItDecidesAgain) {
  auto started = Cluster::Start(
      {.nodes = 3,
       .args = {"--threads", "2", "--probe-interval-ms", "1000", "--suspicion-timeout-ms", "20000"}});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  const json::value before = ClusterJson(cluster.http_port(1));
  ASSERT_TRUE(before.is_object());
  EXPECT_TRUE(before.at("fence").at("deciding").as_bool()) << before;
  EXPECT_FALSE(before.at("fence").at("paused").as_bool()) << before;

  ASSERT_TRUE(cluster.node(1).Signal(SIGSTOP));
  // Held past the pause gap (max(500 ms, min(suspicion / 2, forward takeover))): a deadline-driven wait.
  const auto resume_at = std::chrono::steady_clock::now() + milliseconds(1500);
  (void)WaitFor("the pause's period", milliseconds(3000),
                [&](std::string*) { return std::chrono::steady_clock::now() >= resume_at; });
  ASSERT_TRUE(cluster.node(1).Signal(SIGCONT));
  std::optional<json::value> fenced;
  auto seen = WaitFor("n2 to show its pause fence", milliseconds(2000), [&](std::string* last) {
    json::value view = ClusterJson(cluster.http_port(1));
    if (!view.is_object()) return false;
    *last = json::serialize(view.at("fence"));
    if (!view.at("fence").at("paused").as_bool()) return false;
    fenced = std::move(view);
    return true;
  });
  ASSERT_TRUE(seen) << seen.error();
  EXPECT_FALSE(fenced->at("fence").at("deciding").as_bool()) << *fenced;
  auto over = WaitFor("n2 to decide again", milliseconds(10'000 * kSlowdown), [&](std::string* last) {
    json::value view = ClusterJson(cluster.http_port(1));
    if (!view.is_object()) return false;
    *last = json::serialize(view.at("fence"));
    return view.at("fence").at("deciding").as_bool() && !view.at("fence").at("paused").as_bool();
  });
  ASSERT_TRUE(over) << over.error();
  EXPECT_EQ(MetricSample(cluster.http_port(1), "ringlimit_fenced", R"(reason="paused")").value_or(-1), 0);
  EXPECT_GE(MetricSample(cluster.http_port(1), "ringlimit_fenced", R"(reason="minority")").value_or(-1), 0);
}

// --failure-mode: with one copy per key (--replicas 1) and its holder paused (not yet declared dead), a
// node holding no copy refuses the key's checks under `closed` (503 unavailable, JSON error, counted) and
// decides them from its own copy under `open` (counted as fallback_open). Once the holder resumes, its
// checks are decided by it again.
class FailureModeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FailureModeTest, ANodeWithNoCopyFollowsTheFailureModeWhenNoHolderAnswers) {
  const bool closed = GetParam() == "closed";
  auto started = Cluster::Start({.nodes = 3,
                                 .args = {"--threads", "2", "--replicas", "1", "--failure-mode", GetParam(),
                                          "--forward-timeout-ms", "200", "--suspicion-timeout-ms", "60000"}});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  const std::string key = KeyOwnedVia(cluster, 0, "n2", "mode-");
  ASSERT_FALSE(key.empty());
  const CheckSpec spec{.limit = 10};
  HttpClient n1(cluster.http_port(0), milliseconds(20'000));
  auto first = PostCheck(n1, key, spec);
  ASSERT_TRUE(first) << first.error();
  ASSERT_EQ(first->status, 200) << first->body;
  ASSERT_EQ(first->owner, "n2");
  // Closed makes synchronous replication the default (exactness needs both); open keeps async.
  const json::value view = ClusterJson(cluster.http_port(0));
  ASSERT_TRUE(view.is_object());
  EXPECT_EQ(view.at("replication").at("mode").as_string(), closed ? "sync" : "async");

  ASSERT_TRUE(cluster.node(1).Signal(SIGSTOP));
  auto during = PostCheck(n1, key, spec);
  ASSERT_TRUE(cluster.node(1).Signal(SIGCONT));
  ASSERT_TRUE(during) << during.error();
  if (closed) {
    EXPECT_EQ(during->status, 503) << during->body;
    EXPECT_NE(during->body.find(R"("code":"unavailable")"), std::string::npos) << during->body;
    EXPECT_GE(MetricSample(cluster.http_port(0), "ringlimit_forward_checks_total", R"(outcome="closed")")
                  .value_or(0),
              1);
  } else {
    EXPECT_EQ(during->status, 200) << during->body;
    EXPECT_TRUE(during->allowed);
    EXPECT_NE(during->owner, "n2");
    const double open =
        MetricSample(cluster.http_port(0), "ringlimit_forward_fallback_open_total", "").value_or(0) +
        MetricSample(cluster.http_port(2), "ringlimit_forward_fallback_open_total", "").value_or(0);
    EXPECT_GE(open, 1);
  }
  // The holder is back: it decides, from its own count (plus, under open, what was admitted meanwhile once
  // that copy has merged in) -- once its pause fence is over (polled).
  std::optional<CheckOutcome> after;
  auto back = WaitFor("n2 to decide again", milliseconds(5'000 * kSlowdown), [&](std::string* last) {
    auto outcome = PostCheck(n1, key, spec);
    if (!outcome) {
      *last = outcome.error();
      return false;
    }
    after = *outcome;
    *last = std::to_string(outcome->status) + " " + outcome->owner + " " + outcome->body;
    return outcome->status == 200 && outcome->owner == "n2";
  });
  ASSERT_TRUE(back) << back.error();
  EXPECT_LE(after->remaining, 8u);
}

INSTANTIATE_TEST_SUITE_P(Modes, FailureModeTest, ::testing::Values("closed", "open"));

// A node left reaching only a minority of the cluster (its two peers killed and declared dead) decides
// nothing under --failure-mode closed -- it may be the smaller side of a partition while the others decide
// its keys -- and answers 503 unavailable (counted); under `open` it goes on deciding.
class MinorityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MinorityTest, ANodeReachingOnlyAMinorityFollowsTheFailureMode) {
  const bool closed = GetParam() == "closed";
  auto started = Cluster::Start(
      {.nodes = 3,
       .args = {"--threads", "2", "--failure-mode", GetParam(), "--suspicion-timeout-ms", "500"}});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  const CheckSpec spec{.limit = 10};
  HttpClient n1(cluster.http_port(0), milliseconds(20'000));
  auto before = PostCheck(n1, "minority-key", spec);
  ASSERT_TRUE(before) << before.error();
  ASSERT_EQ(before->status, 200) << before->body;

  ASSERT_TRUE(cluster.Kill(1));
  ASSERT_TRUE(cluster.Kill(2));
  auto dead = WaitFor("n1 to see n2 and n3 dead", milliseconds(10'000 * kSlowdown), [&](std::string* last) {
    auto view = FetchClusterView(cluster.http_port(0));
    if (!view) {
      *last = view.error();
      return false;
    }
    *last = "dead: " + std::to_string(view->IdsInState("dead").size());
    return view->IdsInState("dead").size() == 2;
  });
  ASSERT_TRUE(dead) << dead.error();
  // Judged at the next membership tick: polled, not assumed.
  std::optional<CheckOutcome> during;
  auto judged =
      WaitFor("n1's answer to follow the mode", milliseconds(5'000 * kSlowdown), [&](std::string* last) {
        auto outcome = PostCheck(n1, "minority-key", spec);
        if (!outcome) {
          *last = outcome.error();
          return false;
        }
        during = *outcome;
        *last = std::to_string(during->status) + " " + during->body;
        return closed ? during->status == 503 : during->status == 200;
      });
  ASSERT_TRUE(judged) << judged.error() << "\n" << cluster.Logs();
  // GET /v1/cluster and /metrics say so: the minority is reported in both modes, it holds the node back
  // only under `closed`.
  const json::value view = ClusterJson(cluster.http_port(0));
  ASSERT_TRUE(view.is_object());
  EXPECT_NE(StringField(view.at("fence"), "minority"), "") << view;
  EXPECT_EQ(view.at("fence").at("deciding").as_bool(), !closed) << view;
  EXPECT_EQ(MetricSample(cluster.http_port(0), "ringlimit_fenced", R"(reason="minority")").value_or(-1),
            closed ? 1 : 0);
  if (closed) {
    EXPECT_NE(during->body.find(R"("code":"unavailable")"), std::string::npos) << during->body;
    EXPECT_NE(during->body.find("minority"), std::string::npos) << during->body;
    EXPECT_GE(MetricSample(cluster.http_port(0), "ringlimit_minority_refusals_total", "").value_or(0), 1);
  } else {
    EXPECT_TRUE(during->allowed);
    EXPECT_EQ(during->owner, "n1");
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, MinorityTest, ::testing::Values("closed", "open"));

// n3 runs an hour ahead or behind (libfaketime; its steady clock is not faked). The others measure its
// offset, it measures theirs and steps back (issue 35 item 4): it decides nothing -- its keys are decided by
// their next holder -- but answers the checks sent to it, passing them on; GET /v1/cluster and /readyz say
// why it does not decide, and a key checked through every node admits exactly its limit. Restarted without
// the skew, it decides again.
class SkewedClockTest : public ::testing::TestWithParam<int> {};  // the skew in hours

TEST_P(SkewedClockTest, ANodeWithASkewedClockPassesChecksOnUntilItsClockIsBack) {
  const int hours = GetParam();
  const double skew_ms = hours * 3'600'000.;
  if (FaketimeLibrary().empty())
    GTEST_SKIP() << "libfaketime is not installed (scripts/bootstrap installs it)";
  auto started = Cluster::Start({.nodes = 2});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  auto added =
      cluster.AddNode({}, FaketimeEnv(std::string(hours > 0 ? "+" : "") + std::to_string(hours) + "h"));
  ASSERT_TRUE(added) << added.error();
  const size_t skewed = *added;
  ASSERT_TRUE(cluster.WaitConverged()) << cluster.Logs();

  // Every node sees the offsets: n3 about `skew` from n1, n1 about -`skew` from n3; n3 alone refuses.
  auto measured =
      WaitFor("the offsets to be measured", milliseconds(10'000 * kSlowdown), [&](std::string* last) {
        const json::value n1 = ClusterJson(cluster.http_port(0));
        const json::value n3 = ClusterJson(cluster.http_port(skewed));
        const std::optional<double> n3_from_n1 = OffsetMs(n1, "n3");
        const std::optional<double> n1_from_n3 = OffsetMs(n3, "n1");
        *last = "n1: " + json::serialize(n1) + "\nn3: " + json::serialize(n3);
        return n3_from_n1 && n1_from_n3 && std::abs(*n3_from_n1 - skew_ms) < 1'000 &&
               std::abs(*n1_from_n3 + skew_ms) < 1'000 && ClockOk(n1) && !ClockOk(n3);
      });
  ASSERT_TRUE(measured) << measured.error();
  const double n3_offset =
      MetricSample(cluster.http_port(0), "ringlimit_clock_offset_seconds", R"(member="n3")").value_or(0);
  EXPECT_NEAR(n3_offset, skew_ms / 1000, 1) << "n1's /metrics";
  EXPECT_EQ(MetricSample(cluster.http_port(skewed), "ringlimit_clock_ok").value_or(-1), 0);
  EXPECT_EQ(MetricSample(cluster.http_port(1), "ringlimit_clock_ok").value_or(-1), 1);
  EXPECT_EQ(
      MetricSample(cluster.http_port(skewed), "ringlimit_fenced", R"(reason="clock_offset")").value_or(-1),
      1);
  EXPECT_EQ(MetricSample(cluster.http_port(0), "ringlimit_fenced", R"(reason="clock_offset")").value_or(-1),
            0);
  // It says why it does not decide, and stays ready: it takes checks.
  const json::value fence = ClusterJson(cluster.http_port(skewed)).at("fence");
  EXPECT_FALSE(fence.at("deciding").as_bool()) << fence;
  EXPECT_EQ(StringField(fence, "reason"), "clock_offset") << fence;
  EXPECT_NE(StringField(fence, "detail").find("clock offset"), std::string::npos) << fence;
  {
    HttpClient client(cluster.http_port(skewed));
    auto readyz = client.Get("/readyz");
    ASSERT_TRUE(readyz);
    EXPECT_EQ(readyz->result_int(), 200) << readyz->body();
    EXPECT_NE(readyz->body().find(R"("deciding":false,"reason":"clock_offset")"), std::string::npos)
        << readyz->body();
    HttpClient n1(cluster.http_port(0));
    auto ready = n1.Get("/readyz");
    ASSERT_TRUE(ready);
    EXPECT_EQ(ready->body(), R"({"status":"ready","deciding":true})");
  }

  // A key n3 owns, checked round robin through every node.
  const std::string key = KeyOwnedVia(cluster, 0, "n3", "skew-");
  ASSERT_FALSE(key.empty());
  const CheckSpec spec{.limit = 10};
  int admitted = 0, denied = 0;
  for (int i = 0; i < 30; ++i) {
    const size_t via = static_cast<size_t>(i) % 3;
    HttpClient client(cluster.http_port(via));
    auto outcome = PostCheck(client, key, spec);
    ASSERT_TRUE(outcome) << outcome.error();
    ASSERT_EQ(outcome->status, 200) << "through n" << via + 1 << ": " << outcome->body;
    EXPECT_NE(outcome->owner, "n3") << "the skewed node decided";
    (outcome->allowed ? admitted : denied)++;
  }
  EXPECT_EQ(admitted, 10) << "exactly the limit, through every node";
  EXPECT_EQ(denied, 20);
  // Its own checks of the key went to the next holder; the others' were declined there first.
  EXPECT_GE(MetricSample(cluster.http_port(skewed), "ringlimit_forward_checks_total", R"(outcome="clock")")
                .value_or(0),
            10);
  EXPECT_GE(MetricSample(cluster.http_port(skewed), "ringlimit_clock_refusals_total").value_or(0), 20);
  EXPECT_NE(cluster.node(skewed).Log().find("clock is off"), std::string::npos) << "n3 logs why";

  // Without the skew n3 decides again. (It is declared dead first: ahead, its last incarnation
  // outranks the restarted one until it refutes, which the dead tombstone makes it do at once.)
  ASSERT_TRUE(cluster.Kill(skewed));
  ASSERT_TRUE(cluster.WaitSeenAs(skewed, {"dead"}, true, milliseconds(15'000 * kSlowdown))) << cluster.Logs();
  cluster.SetEnv(skewed, {});
  ASSERT_TRUE(cluster.Restart(skewed)) << cluster.Logs();
  ASSERT_TRUE(cluster.WaitConverged()) << cluster.Logs();
  auto back = WaitFor("n3's clock to be back", milliseconds(10'000 * kSlowdown), [&](std::string* last) {
    const json::value n3 = ClusterJson(cluster.http_port(skewed));
    const std::optional<double> n1_from_n3 = OffsetMs(n3, "n1");
    *last = json::serialize(n3);
    return ClockOk(n3) && n1_from_n3 && std::abs(*n1_from_n3) < 500;
  });
  ASSERT_TRUE(back) << back.error();
  ASSERT_TRUE(cluster.WaitHandoffsDone(milliseconds(15'000 * kSlowdown))) << cluster.Logs();
  HttpClient n3(cluster.http_port(skewed));
  const std::string fresh = KeyOwnedVia(cluster, skewed, "n3", "unskewed-");
  ASSERT_FALSE(fresh.empty());
  auto decided = PostCheck(n3, fresh, spec);
  ASSERT_TRUE(decided) << decided.error();
  ASSERT_EQ(decided->status, 200) << decided->body;
  EXPECT_EQ(decided->owner, "n3");
  // The key it could not decide keeps its count: still exhausted.
  auto again = PostCheck(n3, key, spec);
  ASSERT_TRUE(again) << again.error();
  ASSERT_EQ(again->status, 200) << again->body;
  EXPECT_FALSE(again->allowed) << "admitted beyond the limit after the skew was removed";
}

INSTANTIATE_TEST_SUITE_P(Skews, SkewedClockTest, ::testing::Values(1, -1), [](const auto& info) {
  return info.param > 0 ? std::string("Ahead") : std::string("Behind");
});

}  // namespace
}  // namespace ringlimit::testing
