// Quota grants end to end (--grants on, docs/limiter.md "Quota grants"): three real ringlimitd processes,
// one hot key with limit L, clients on every node. Entry nodes decide the key from slices its owner lent
// them; once every slice came back (expired, idle or released), the key has admitted exactly L -- never
// more -- and grants were really made and used (the test fails when no slice is ever lent).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "tests/cluster/cluster_test_util.h"

namespace ringlimit::testing {
namespace {

constexpr int kNodes = 3;
constexpr int kClients = 64;  // issue 34: 64 clients on one key
constexpr uint64_t kLimit = 3000;
// Checks sent through every node in phase 1: short of the limit, so slices are still out (partly unused) when
// it ends and their unused units must come back for phase 2 to reach the limit.
constexpr uint64_t kFirstPhase = kLimit - kLimit / 10;
// The pace of a phase 1 in which a holder is caught with a slice: kFirstPhase in about three seconds.
constexpr double kPacedPerSecond = 900;

// Sums `name{labels}` over the running nodes; nullopt when one has no such sample.
std::optional<double> SumOver(Cluster& cluster, const std::string& name, const std::string& labels = "") {
  double sum = 0;
  for (size_t i : cluster.Running()) {
    const std::optional<double> v = MetricSample(cluster.http_port(i), name, labels);
    if (!v) return std::nullopt;
    sum += *v;
  }
  return sum;
}

Result<std::unique_ptr<Cluster>> StartGrantCluster(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--threads",         "2",  "--grants",        "on",
                                   "--grant-threshold", "20", "--grant-term-ms", "500"};
  args.insert(args.end(), extra.begin(), extra.end());
  return Cluster::Start({.nodes = kNodes, .args = std::move(args)});
}

// The index of the node that owns `key` as node `asked` sees it, or -1.
int OwnerIndex(Cluster& cluster, const std::string& key, int asked = 0) {
  auto ring = FetchRing(cluster.http_port(asked), key);
  if (!ring) return -1;
  for (int i = 0; i < kNodes; ++i) {
    if ("n" + std::to_string(i + 1) == ring->owner) return i;
  }
  return -1;
}

// Waits until no running node has units lent out or slices held.
Result<std::chrono::milliseconds> WaitSlicesBack(Cluster& cluster) {
  return WaitFor("every slice back", std::chrono::milliseconds(15'000 * kSlowdown), [&](std::string* why) {
    const std::optional<double> out = SumOver(cluster, "ringlimit_grants_units_out");
    const std::optional<double> held = SumOver(cluster, "ringlimit_grants_slices_held");
    if (!out || !held) return false;
    *why = std::to_string(*out) + " units out, " + std::to_string(*held) + " slices held";
    return *out == 0 && *held == 0;
  });
}

// Whether node `owner`'s GET /v1/grants lists node `holder` among the holders of slices of `key` it lent
// and has not settled.
bool OwnerListsHolder(Cluster& cluster, int owner, const std::string& key, int holder) {
  HttpClient client(cluster.http_port(owner), std::chrono::seconds(2 * kSlowdown));
  auto response = client.Get("/v1/grants");
  if (!response || response->result_int() != 200) return false;
  boost::system::error_code ec;
  const boost::json::value body = boost::json::parse(response->body(), ec);
  if (ec || !body.is_object()) return false;
  const boost::json::value* lent = body.as_object().if_contains("lent");
  if (lent == nullptr || !lent->is_array()) return false;
  for (const boost::json::value& entry : lent->as_array()) {
    const boost::json::object* o = entry.if_object();
    if (o == nullptr || !o->contains("key") || !o->at("key").is_string() || o->at("key").as_string() != key) {
      continue;
    }
    const boost::json::value* holders = o->if_contains("holders");
    if (holders == nullptr || !holders->is_array()) continue;
    for (const boost::json::value& h : holders->as_array()) {
      if (h.is_string() && h.as_string() == cluster.id(static_cast<size_t>(holder))) return true;
    }
  }
  return false;
}

// Checks at node `owner` (which asks nobody for a slice) until 20 refusals in a row: what is left of the
// key's budget. Fails the test on an error answer.
uint64_t DrainAtOwner(Cluster& cluster, int owner, const std::string& key, const CheckSpec& spec) {
  HttpClient at_owner(cluster.http_port(owner), std::chrono::seconds(10 * kSlowdown));
  int refusals = 0;
  uint64_t admitted = 0;
  while (refusals < 20 && admitted <= kLimit) {
    auto outcome = PostCheck(at_owner, key, spec);
    if (!outcome || outcome->status != 200) {
      ADD_FAILURE() << (outcome ? outcome->body : outcome.error());
      break;
    }
    if (outcome->allowed) {
      ++admitted;
      refusals = 0;
    } else {
      ++refusals;
    }
  }
  return admitted;
}

// Phase 1's load: kClients clients spread over every node, each checking `key` until `total` checks were
// sent in all. An answer other than 200 is a failure (the first one kept), except a 503 when `count_503`
// (counted apart). Once Kill(node) marked a node dead, its clients send no more: a check of theirs left
// without an answer (or with an error) is unknown (it may have been admitted). With `per_second`, the
// clients together send at most that many checks a second (each client its share, on its own schedule): a
// paced load lasts long enough for a test to catch a holder with a slice before it ends, however fast the
// nodes answer (unpaced, the whole phase can be over in half a second).
class HotLoad {
 public:
  HotLoad(Cluster& cluster, const std::string& key, const CheckSpec& spec, uint64_t total,
          std::chrono::seconds timeout, bool count_503 = false, double per_second = 0) {
    for (int c = 0; c < kClients; ++c) {
      clients_.emplace_back([&, key, spec, total, timeout, count_503, per_second, c] {
        const int node = c % kNodes;
        struct Finished {  // counted however the client ends, for WaitHeld
          HotLoad& load;
          ~Finished() {
            std::lock_guard lock(load.hold_mu_);
            ++load.finished_;
            load.hold_cv_.notify_all();
          }
        } finished{*this};
        HttpClient client(cluster.http_port(node), timeout);
        const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(per_second > 0 ? kClients / per_second : 0));
        auto next = std::chrono::steady_clock::now();
        while (sent.fetch_add(1) < total) {
          if (per_second > 0) {
            std::this_thread::sleep_until(next);  // pacing the load, not waiting for an event
            next += interval;
          }
          WaitWhileHeld();
          if (node == dead_.load()) return;  // held across its node's death: sends nothing more
          auto outcome = PostCheck(client, key, spec);
          if (node == dead_.load()) {
            if (!outcome || outcome->status != 200) unknown.fetch_add(1);
            if (outcome && outcome->status == 200 && outcome->allowed) admitted.fetch_add(1);
            return;
          }
          if (count_503 && outcome && outcome->status == 503) {
            if (unavailable.fetch_add(1) == 0) Note(first_unavailable_, outcome->body);
            continue;
          }
          if (!outcome || outcome->status != 200) {
            failed.fetch_add(1);
            Note(first_failure_, outcome ? outcome->body : outcome.error());
            continue;
          }
          if (outcome->allowed) admitted.fetch_add(1);
        }
      });
    }
  }
  ~HotLoad() { Join(); }

  // Node `node` is about to die: its clients stop after their check in flight.
  void Dying(int node) { dead_.store(node); }
  // Hold: no client sends another check until Release. WaitHeld: true once every client is waiting in the
  // hold or done, i.e. no check is in flight; false if that took longer than `limit`.
  void Hold() {
    std::lock_guard lock(hold_mu_);
    held_ = true;
  }
  bool WaitHeld(std::chrono::milliseconds limit) {
    std::unique_lock lock(hold_mu_);
    return hold_cv_.wait_for(lock, limit, [&] { return waiting_ + finished_ == kClients; });
  }
  void Release() {
    {
      std::lock_guard lock(hold_mu_);
      held_ = false;
    }
    hold_cv_.notify_all();
  }
  void Join() {
    for (auto& t : clients_) {
      if (t.joinable()) t.join();
    }
  }
  std::string first_failure() {
    std::lock_guard lock(mu_);
    return first_failure_;
  }
  std::string first_unavailable() {
    std::lock_guard lock(mu_);
    return first_unavailable_;
  }

  std::atomic<uint64_t> admitted{0}, sent{0}, unknown{0}, unavailable{0}, failed{0};

 private:
  void Note(std::string& first, const std::string& what) {
    std::lock_guard lock(mu_);
    if (first.empty()) first = what;
  }

  void WaitWhileHeld() {
    std::unique_lock lock(hold_mu_);
    if (!held_) return;
    ++waiting_;
    hold_cv_.notify_all();
    hold_cv_.wait(lock, [&] { return !held_; });
    --waiting_;
  }

  std::atomic<int> dead_{-1};
  std::mutex hold_mu_;
  std::condition_variable hold_cv_;
  bool held_ = false;  // guarded by hold_mu_, as the two counts
  int waiting_ = 0;    // clients waiting in the hold
  int finished_ = 0;   // clients done
  std::mutex mu_;
  std::string first_failure_, first_unavailable_;  // guarded by mu_
  std::vector<std::thread> clients_;
};

struct Case {
  const char* algorithm;
  int64_t window_ms;  // long: nothing refills or rolls over during the test
  uint64_t burst = 0;
};

// A grant cluster (StartGrantCluster with `extra` flags), the test's key (`prefix` + the algorithm) and the
// index of its owner.
struct Bed {
  std::unique_ptr<Cluster> cluster;
  CheckSpec spec;
  std::string key;
  int owner = -1;
};
Result<Bed> StartBed(const Case& c, const std::string& prefix, std::vector<std::string> extra = {}) {
  auto started = StartGrantCluster(std::move(extra));
  if (!started) return started.error();
  Bed bed{
      .cluster = std::move(*started),
      .spec =
          CheckSpec{.algorithm = c.algorithm, .limit = kLimit, .window_ms = c.window_ms, .burst = c.burst},
      .key = prefix + c.algorithm};
  bed.owner = OwnerIndex(*bed.cluster, bed.key);
  if (bed.owner < 0) return std::string("no owner of ") + bed.key;
  return bed;
}

class ClusterGrantsTest : public ::testing::TestWithParam<Case> {};

// The victim caught holding a slice: what was read just before it was stopped.
struct Caught {
  double held = 0;            // the victim's slices
  double out_before = 0;      // the owner's units out on grant
  double expired_before = 0;  // the owner's grants reclaimed so far
};

// Once a third of `load` was sent and `victim` holds a slice of `key`, stops it (SIGSTOP: it releases
// nothing then) and leaves it stopped if the owner still lists it among the key's holders; else it
// released the slice between the sample and the stop, and is resumed and caught again. On failure the
// victim is left running.
Result<Caught> StopWhileHolding(Cluster& cluster, const HotLoad& load, int owner, int victim,
                                const std::string& key) {
  Caught caught;
  auto stopped = WaitFor(
      "a third of phase 1 sent and the victim stopped while the owner lists it holding a slice",
      std::chrono::milliseconds(30'000 * kSlowdown), [&](std::string* why) {
        const std::optional<double> held =
            MetricSample(cluster.http_port(victim), "ringlimit_grants_slices_held");
        *why =
            "sent " + std::to_string(load.sent.load()) + ", slices held " + std::to_string(held.value_or(-1));
        if (load.sent.load() < kFirstPhase / 3 || held.value_or(0) <= 0) return false;
        const std::optional<double> out =
            MetricSample(cluster.http_port(owner), "ringlimit_grants_units_out");
        const std::optional<double> expired =
            MetricSample(cluster.http_port(owner), "ringlimit_grants_total", "event=\"expired\"");
        if (!out || !expired) {
          *why += ", the owner's metrics unreadable";
          return false;
        }
        caught = Caught{*held, *out, *expired};
        if (!cluster.node(victim).Signal(SIGSTOP)) {  // returns once the kernel reports it stopped
          *why = "could not stop the victim";
          return false;
        }
        if (OwnerListsHolder(cluster, owner, key, victim)) return true;
        *why += ", but the owner no longer listed it as a holder once it was stopped";
        return !cluster.node(victim).Signal(SIGCONT);  // (a victim that cannot be resumed ends the wait)
      });
  if (!stopped) {
    static_cast<void>(cluster.node(victim).Signal(SIGCONT));
    return stopped.error();
  }
  return caught;
}

TEST_P(ClusterGrantsTest, AHotKeyThroughAllNodesAdmitsExactlyTheLimitOnceTheSlicesAreBack) {
  auto bed = StartBed(GetParam(), "hot-");
  ASSERT_TRUE(bed) << bed.error();
  Cluster& cluster = *bed->cluster;
  const CheckSpec& spec = bed->spec;
  const std::string& key = bed->key;
  const int owner = bed->owner;

  // Phase 1: nine tenths of the limit, from clients spread over every node.
  HotLoad load(cluster, key, spec, kFirstPhase, std::chrono::seconds(10 * kSlowdown));
  load.Join();
  ASSERT_EQ(load.failed.load(), 0u) << load.first_failure();
  EXPECT_LE(load.admitted.load(), kLimit) << "over the limit while slices were out";

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
  auto back = WaitSlicesBack(cluster);
  ASSERT_TRUE(back) << back.error();

  // Phase 2: the owner decides what is left: the remaining units, then refusals only.
  const uint64_t second = DrainAtOwner(cluster, owner, key, spec);
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
      GetParam().algorithm, static_cast<unsigned long long>(load.admitted.load()),
      static_cast<unsigned long long>(kFirstPhase), kNodes, *local, forwarded.value_or(-1),
      made_after.value_or(-1), released.value_or(-1), expired.value_or(-1), returned.value_or(-1),
      static_cast<unsigned long long>(second), static_cast<unsigned long long>(load.admitted.load() + second),
      static_cast<unsigned long long>(kLimit), asked.value_or(-1), refused.value_or(-1),
      send_failed.value_or(-1));
  // A grant the owner's own range scan found in its row unsettled -- between a Release taken off the
  // owner's books and its settle reaching the row -- is adopted as well and settled again (the ledger
  // settles once): each grant made or adopted is settled once on the books.
  const std::optional<double> adopted = SumOver(cluster, "ringlimit_grants_total", "event=\"adopted\"");
  ASSERT_TRUE(made_after && released && expired && adopted);
  EXPECT_EQ(*released + *expired, *made_after + *adopted) << "every grant made or adopted was settled";
  EXPECT_EQ(load.admitted.load() + second, kLimit)
      << load.admitted.load() << " admitted through every node, then " << second
      << " at the owner; grants made " << *made << ", checks decided from slices " << *local;
}

TEST_P(ClusterGrantsTest, AHolderKilledWithSlicesLosesAtMostThemAndNothingIsOverAdmitted) {
  auto bed = StartBed(GetParam(), "crash-");
  ASSERT_TRUE(bed) << bed.error();
  Cluster& cluster = *bed->cluster;
  const CheckSpec& spec = bed->spec;
  const std::string& key = bed->key;
  const int owner = bed->owner;
  const int victim = (owner + 1) % kNodes;  // a holder, not the owner

  // Phase 1 as above, except that the victim is SIGKILLed under load once a third of it was sent, while
  // the owner has a slice of the key out to it: the victim is stopped (SIGSTOP: it releases nothing then)
  // once it holds a slice, and killed if the owner still lists it among the key's holders; else (it
  // released the slice between the sample and the stop) it is resumed and caught again. Its clients stop
  // at their first failure; a check it was deciding when it died is unknown to its client (counted apart:
  // it may have been admitted from a slice).
  HotLoad load(cluster, key, spec, kFirstPhase, std::chrono::seconds(10 * kSlowdown), /*count_503=*/false,
               kPacedPerSecond);
  auto caught = StopWhileHolding(cluster, load, owner, victim, key);
  if (!caught) {
    load.Join();
    FAIL() << caught.error() << ": the scenario did not happen";
  }
  const std::optional<double> held = caught->held;
  const std::optional<double> out_before = caught->out_before;
  load.Dying(victim);
  ASSERT_TRUE(cluster.Kill(victim));
  const std::optional<double> out_after =
      MetricSample(cluster.http_port(owner), "ringlimit_grants_units_out");
  load.Join();
  ASSERT_EQ(load.failed.load(), 0u) << load.first_failure();
  ASSERT_TRUE(held && out_before && out_after);
  EXPECT_LE(load.admitted.load(), kLimit);

  auto back = WaitSlicesBack(cluster);
  ASSERT_TRUE(back) << back.error();
  const uint64_t second = DrainAtOwner(cluster, owner, key, spec);
  const uint64_t total = load.admitted.load() + second;
  const std::optional<double> expired = SumOver(cluster, "ringlimit_grants_total", "event=\"expired\"");
  ASSERT_TRUE(expired);
  const double lost_bound = std::max(*out_before, *out_after) + static_cast<double>(load.unknown.load());
  std::printf(
      "%s, holder n%d killed holding %.0f slices (%.0f-%.0f units out at the owner): admitted %llu "
      "of limit %llu, %llu checks unknown to their clients, %.0f grants reclaimed\n",
      GetParam().algorithm, victim + 1, *held, *out_before, *out_after,
      static_cast<unsigned long long>(total), static_cast<unsigned long long>(kLimit),
      static_cast<unsigned long long>(load.unknown.load()), *expired);
  EXPECT_LE(total, kLimit) << "over the limit";
  EXPECT_GE(static_cast<double>(total), static_cast<double>(kLimit) - lost_bound)
      << "lost more than what was out on grant when the holder died";
  // The fault happened as planned: the victim was killed with a slice out (above), and the owner reclaimed
  // it.
  EXPECT_GT(*expired, 0) << "no grant was reclaimed";
}

// A holder stopped (SIGSTOP) while it holds slices, until the owner reclaimed them (term + margin on the
// owner's clock), then resumed: nothing is over-admitted, what the owner reclaimed whole (the units out on
// grant when it stopped) is lost at most, and its clients' checks wait out the pause and are answered after
// it (none fails). That the resumed holder decides nothing from a reclaimed slice is asserted by the
// simulator (grants_holder_pause: SliceUseBeyondLent), which sees every decision; from outside, the owner
// counting a reclaimed slice as spent whole makes such a use invisible in the totals.
TEST_P(ClusterGrantsTest, AHolderPausedPastItsTermLosesAtMostItsSlicesAndNothingIsOverAdmitted) {
  auto bed = StartBed(GetParam(), "pause-");
  ASSERT_TRUE(bed) << bed.error();
  Cluster& cluster = *bed->cluster;
  const CheckSpec& spec = bed->spec;
  const std::string& key = bed->key;
  const int owner = bed->owner;
  const int victim = (owner + 1) % kNodes;  // a holder, not the owner

  HotLoad load(cluster, key, spec, kFirstPhase, std::chrono::seconds(30 * kSlowdown), /*count_503=*/false,
               kPacedPerSecond);
  // Once a third was sent and the victim holds a slice, stop it -- and keep it stopped if the owner still
  // lists it among the key's holders (else it released the slice between the sample and the stop: it is
  // resumed and caught again).
  auto holding = StopWhileHolding(cluster, load, owner, victim, key);
  if (!holding) {
    load.Join();
    FAIL() << holding.error() << ": the scenario did not happen";
  }
  const std::optional<double> held = holding->held;
  const std::optional<double> out_before = holding->out_before;
  const std::optional<double> expired_before = holding->expired_before;
  ASSERT_TRUE(out_before && expired_before);
  // (A slice lent between the sample above and the stop is out too.)
  const std::optional<double> out_stopped =
      MetricSample(cluster.http_port(owner), "ringlimit_grants_units_out");
  // Stopped until the owner reclaimed what it lent the victim (the fault lasts past term + margin).
  std::optional<double> expired_during;
  auto reclaimed = WaitFor("the owner reclaiming the stopped holder's grants",
                           std::chrono::milliseconds(20'000 * kSlowdown), [&](std::string* why) {
                             expired_during = MetricSample(cluster.http_port(owner), "ringlimit_grants_total",
                                                           "event=\"expired\"");
                             *why = "expired " + std::to_string(expired_during.value_or(-1));
                             return expired_during.value_or(0) > *expired_before;
                           });
  ASSERT_TRUE(cluster.node(victim).Signal(SIGCONT));
  load.Join();
  ASSERT_TRUE(reclaimed) << reclaimed.error() << ": the scenario did not happen";
  ASSERT_TRUE(out_stopped);
  EXPECT_EQ(load.failed.load(), 0u) << "a check failed: " << load.first_failure();
  EXPECT_LE(load.admitted.load(), kLimit);

  auto back = WaitSlicesBack(cluster);
  ASSERT_TRUE(back) << back.error();
  const uint64_t second = DrainAtOwner(cluster, owner, key, spec);
  const uint64_t total = load.admitted.load() + second;
  const std::optional<double> expired = SumOver(cluster, "ringlimit_grants_total", "event=\"expired\"");
  const std::optional<double> local_at_victim =
      MetricSample(cluster.http_port(victim), "ringlimit_grants_checks_total", "decided=\"local\"");
  ASSERT_TRUE(expired && local_at_victim);
  std::printf(
      "%s, holder n%d stopped holding %.0f slices (%.0f units out at the owner) until %.0f grants were "
      "reclaimed: admitted %llu of limit %llu (%.0f decided from slices at n%d), %.0f grants reclaimed in "
      "all\n",
      GetParam().algorithm, victim + 1, *held, *out_before, *expired_during - *expired_before,
      static_cast<unsigned long long>(total), static_cast<unsigned long long>(kLimit), *local_at_victim,
      victim + 1, *expired);
  EXPECT_LE(total, kLimit) << "over the limit";
  EXPECT_GE(static_cast<double>(total), static_cast<double>(kLimit) - std::max(*out_before, *out_stopped))
      << "lost more than what was out on grant when the holder stopped";
}

// Exact mode (--replication sync --failure-mode closed): the owner is SIGKILLed while its slices are out.
// Its grant records were acknowledged by a majority of the key's holders, so the next owner knows them and
// never lends the same budget twice: nothing is over-admitted, and at most what was out on grant when it
// died is lost (reclaimed whole), plus the checks the owner was deciding when it died. The holders ask the
// next owner for slices and keep deciding; the checks sent to the dead node fail (their clients stop), and
// the others are answered -- a refusal while the take-over reads its majority (503) is counted and bounded.
TEST_P(ClusterGrantsTest, TheOwnerKilledWithSlicesOutInExactModeAdmitsNoMoreThanTheLimit) {
  auto bed = StartBed(GetParam(), "owner-crash-",
                      {"--replication", "sync", "--failure-mode", "closed", "--replicas", "3"});
  ASSERT_TRUE(bed) << bed.error();
  Cluster& cluster = *bed->cluster;
  const CheckSpec& spec = bed->spec;
  const std::string& key = bed->key;
  const int owner = bed->owner;
  // A settled cluster: for read_hold (2 s) after each join a node's decisions also need a majority of the
  // ring before it, which for the ranges of the first two nodes is both of them -- a crash then refuses
  // their keys until the crashed node is declared dead (a known limit of two earlier holders, not what
  // this test is about).
  auto settled = WaitFor("no take-over read under way", std::chrono::milliseconds(20'000 * kSlowdown),
                         [&](std::string* why) {
                           const std::optional<double> reading = SumOver(cluster, "ringlimit_takeover_reads");
                           *why = "ranges being read: " + std::to_string(reading.value_or(-1));
                           return reading.value_or(1) == 0;
                         });
  ASSERT_TRUE(settled) << settled.error();

  HotLoad load(cluster, key, spec, kFirstPhase, std::chrono::seconds(10 * kSlowdown), /*count_503=*/true);
  std::optional<double> out_before;
  auto lent = WaitFor("a third of phase 1 sent and slices out", std::chrono::milliseconds(30'000 * kSlowdown),
                      [&](std::string* why) {
                        out_before = MetricSample(cluster.http_port(owner), "ringlimit_grants_units_out");
                        *why = "sent " + std::to_string(load.sent.load()) + ", units out " +
                               std::to_string(out_before.value_or(-1));
                        return load.sent.load() >= kFirstPhase / 3 && out_before.value_or(0) > 0;
                      });
  if (!lent) {
    load.Join();
    FAIL() << lent.error() << ": the scenario did not happen";
  }
  // What is out on grant when the owner dies, read exactly: the load held (a holder asks for a slice only
  // while it decides a check) and every slice asked for answered, the owner lends nothing more. Read while
  // checks and requests were still coming, the figure missed slices lent between the read and the kill
  // (1 run in about 40 under ctest -j2: lost 513 with 445 allowed).
  load.Hold();
  if (!load.WaitHeld(std::chrono::milliseconds(20'000 * kSlowdown))) {
    load.Release();
    load.Join();
    FAIL() << "the load's checks in flight were not answered";
  }
  auto answered = WaitFor(
      "every slice asked for answered by the owner", std::chrono::milliseconds(10'000 * kSlowdown),
      [&](std::string* why) {
        const auto asked = SumOver(cluster, "ringlimit_grants_requests_total");
        const auto made = MetricSample(cluster.http_port(owner), "ringlimit_grants_total", "event=\"made\"");
        const auto refused =
            MetricSample(cluster.http_port(owner), "ringlimit_grants_total", "event=\"refused\"");
        out_before = MetricSample(cluster.http_port(owner), "ringlimit_grants_units_out");
        *why = "asked " + std::to_string(asked.value_or(-1)) + ", made " + std::to_string(made.value_or(-1)) +
               ", refused " + std::to_string(refused.value_or(-1));
        return asked && made && refused && out_before && *made + *refused >= *asked;
      });
  if (!answered) {
    load.Release();
    load.Join();
    FAIL() << answered.error();
  }
  load.Dying(owner);
  ASSERT_TRUE(cluster.Kill(owner));
  load.Release();
  load.Join();
  EXPECT_EQ(load.failed.load(), 0u) << load.first_failure();
  EXPECT_LE(load.unavailable.load() * 10, kFirstPhase)
      << "more than a tenth of the checks refused with 503; the first: " << load.first_unavailable();
  EXPECT_LE(load.admitted.load(), kLimit);

  // The survivors see the owner dead (and take its keys over) before the rest is drained at the next owner.
  auto converged = cluster.WaitConverged();
  ASSERT_TRUE(converged) << converged.error();
  const int survivor = (owner + 1) % kNodes;
  int next_owner = -1;
  auto taken_over = WaitFor("the survivors' ring without the dead owner",
                            std::chrono::milliseconds(20'000 * kSlowdown), [&](std::string*) {
                              next_owner = OwnerIndex(cluster, key, survivor);
                              return next_owner >= 0 && next_owner != owner;
                            });
  ASSERT_TRUE(taken_over) << taken_over.error();
  auto back = WaitSlicesBack(cluster);
  ASSERT_TRUE(back) << back.error();
  const uint64_t second = DrainAtOwner(cluster, next_owner, key, spec);
  const uint64_t total = load.admitted.load() + second;
  // A check refused with 503 was decided and may have been charged before its acknowledgements failed.
  const double lost_bound = *out_before + static_cast<double>(load.unknown.load() + load.unavailable.load());
  std::printf(
      "%s, exact mode, owner n%d killed with %.0f units out: admitted %llu of limit %llu (%llu unknown to "
      "their clients, %llu refused with 503 during the take-over)\n",
      GetParam().algorithm, owner + 1, *out_before, static_cast<unsigned long long>(total),
      static_cast<unsigned long long>(kLimit), static_cast<unsigned long long>(load.unknown.load()),
      static_cast<unsigned long long>(load.unavailable.load()));
  EXPECT_LE(total, kLimit) << "over the limit";
  EXPECT_GE(static_cast<double>(total), static_cast<double>(kLimit) - lost_bound)
      << "lost more than what was out on grant when the owner died";
}

// Under-admission (issue 34): demand at 80 % of a key's rate (limit / window), paced and spread over the
// three nodes for five windows -- hot enough at every node for slices -- is admitted at least 95 %, and
// once the demand stops, the idle slices come back within 2 x the term (plus one poll of the metrics).
// GET /v1/grants while a hot key is checked through every node: its owner lists the key with the slices
// out and their holders, the holders list their live slices and whom they asked; once the load stops and
// every slice is back, both lists are empty again. A node without --grants says so.
TEST(ClusterGrantsViewTest, TheGrantsEndpointShowsTheHotKeyAtItsOwnerAndItsHoldersUntilTheSlicesAreBack) {
  auto bed = StartBed(Case{"fixed_window", 3'600'000}, "view-");
  ASSERT_TRUE(bed) << bed.error();
  Cluster& cluster = *bed->cluster;
  CheckSpec spec = bed->spec;
  spec.limit = 1'000'000'000;  // never near the limit: slices keep being lent while the load runs
  const std::string& key = bed->key;
  const int owner = bed->owner;
  const std::string owner_id = "n" + std::to_string(owner + 1);
  auto grants_of = [&](int node) -> std::optional<boost::json::value> {
    HttpClient client(cluster.http_port(node), std::chrono::seconds(5 * kSlowdown));
    auto response = client.Get("/v1/grants");
    if (!response || response->result_int() != 200) return std::nullopt;
    return JsonBody(*response);
  };
  auto lists = [](const boost::json::value& v, const char* list, const std::string& k) {
    for (const boost::json::value& e : v.at(list).as_array()) {
      if (e.at("key").as_string() == k) return e;
    }
    return boost::json::value();
  };

  const uint64_t kEndless = uint64_t{1} << 40;
  HotLoad load(cluster, key, spec, kEndless, std::chrono::seconds(10 * kSlowdown));
  std::string seen_lent, seen_held;
  auto shown = WaitFor("the hot key on /v1/grants", std::chrono::milliseconds(20'000 * kSlowdown),
                       [&](std::string* why) {
                         const auto at_owner = grants_of(owner);
                         if (!at_owner) return false;
                         const boost::json::value lent = lists(*at_owner, "lent", key);
                         if (!lent.is_null() && lent.at("units_out").to_number<uint64_t>() > 0 &&
                             !lent.at("holders").as_array().empty()) {
                           seen_lent = boost::json::serialize(lent);
                         }
                         for (int node = 0; node < kNodes && seen_held.empty(); ++node) {
                           if (node == owner) continue;
                           const auto at_holder = grants_of(node);
                           if (!at_holder) continue;
                           const boost::json::value held = lists(*at_holder, "held", key);
                           if (!held.is_null() && held.at("owner").as_string() == owner_id &&
                               held.at("slices").to_number<uint64_t>() > 0) {
                             seen_held = boost::json::serialize(held);
                           }
                         }
                         *why = "owner " + boost::json::serialize(*at_owner) + "; held seen: " + seen_held;
                         return !seen_lent.empty() && !seen_held.empty();
                       });
  load.sent.store(kEndless);  // every client stops after its check in flight
  load.Join();
  ASSERT_EQ(load.failed.load(), 0u) << load.first_failure();
  ASSERT_TRUE(shown) << shown.error();
  std::printf("at the owner %s: %s; at a holder: %s\n", owner_id.c_str(), seen_lent.c_str(),
              seen_held.c_str());

  auto back = WaitSlicesBack(cluster);
  ASSERT_TRUE(back) << back.error();
  for (int node = 0; node < kNodes; ++node) {
    const auto view = grants_of(node);
    ASSERT_TRUE(view.has_value());
    EXPECT_EQ(view->at("grants").as_string(), "on");
    EXPECT_EQ(view->at("node_id").as_string(), "n" + std::to_string(node + 1));
    EXPECT_TRUE(view->at("lent").as_array().empty()) << boost::json::serialize(*view);
    EXPECT_TRUE(view->at("held").as_array().empty()) << boost::json::serialize(*view);
  }
}

struct RateCase {
  const char* algorithm;
  uint64_t limit;
  int64_t window_ms;
};
class ClusterGrantsRateTest : public ::testing::TestWithParam<RateCase> {};

TEST_P(ClusterGrantsRateTest, DemandAtFourFifthsOfTheRateIsAdmittedAndIdleSlicesComeBackWithinTwoTerms) {
  constexpr auto kTerm = std::chrono::milliseconds(500);  // StartGrantCluster's --grant-term-ms
  auto started = StartGrantCluster();
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  const RateCase c = GetParam();
  const CheckSpec spec{.algorithm = c.algorithm, .limit = c.limit, .window_ms = c.window_ms};
  const std::string key = std::string("rate-") + c.algorithm;
  const double per_second = 0.8 * static_cast<double>(c.limit) * 1000.0 / static_cast<double>(c.window_ms);
  constexpr int kPaced = 6;  // two per node
  const auto pace = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(kPaced / per_second));
  const auto length = std::chrono::milliseconds(5 * c.window_ms);
  std::atomic<uint64_t> sent{0}, admitted{0}, failed{0};
  std::vector<std::thread> clients;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kPaced; ++i) {
    clients.emplace_back([&, i] {
      HttpClient client(cluster.http_port(i % kNodes), std::chrono::seconds(10 * kSlowdown));
      // Each paced client sends at its own fixed instants (staggered), never in a burst to catch up.
      for (auto at = start + pace * i / kPaced; at < start + length; at += pace) {
        std::this_thread::sleep_until(at);  // the load's pace, not a wait for the system
        sent.fetch_add(1);
        auto outcome = PostCheck(client, key, spec);
        if (!outcome || outcome->status != 200) {
          failed.fetch_add(1);
          continue;
        }
        if (outcome->allowed) admitted.fetch_add(1);
      }
    });
  }
  for (auto& t : clients) t.join();
  const auto stopped = std::chrono::steady_clock::now();
  auto back = WaitSlicesBack(cluster);
  ASSERT_TRUE(back) << back.error();
  const auto idle_back =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - stopped);
  const std::optional<double> made = SumOver(cluster, "ringlimit_grants_total", "event=\"made\"");
  const std::optional<double> local = SumOver(cluster, "ringlimit_grants_checks_total", "decided=\"local\"");
  ASSERT_TRUE(made && local);
  std::printf(
      "%s, %.1f checks/s (80 %% of %llu per %lld ms) for %lld ms over 3 nodes: admitted %llu of %llu (%.1f "
      "%%), "
      "%.0f from slices, %.0f grants; slices back %lld ms after the last answer\n",
      c.algorithm, per_second, static_cast<unsigned long long>(c.limit), static_cast<long long>(c.window_ms),
      static_cast<long long>(length.count()), static_cast<unsigned long long>(admitted.load()),
      static_cast<unsigned long long>(sent.load()),
      100.0 * static_cast<double>(admitted.load()) / static_cast<double>(std::max<uint64_t>(1, sent.load())),
      *local, *made, static_cast<long long>(idle_back.count()));
  EXPECT_EQ(failed.load(), 0u);
  EXPECT_GT(*made, 0) << "no slice was lent: the demand was not hot enough";
  EXPECT_GT(*local, 0) << "no check was decided from a slice";
  EXPECT_GE(static_cast<double>(admitted.load()), 0.95 * static_cast<double>(sent.load()));
  EXPECT_LE(idle_back, 2 * kTerm + std::chrono::milliseconds(100 * kSlowdown))
      << "idle slices came back late";
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ClusterGrantsRateTest,
                         ::testing::Values(RateCase{"token_bucket", 100, 1'000},
                                           RateCase{"fixed_window", 200, 2'000}),
                         [](const ::testing::TestParamInfo<RateCase>& info) {
                           return std::string(info.param.algorithm);
                         });

INSTANTIATE_TEST_SUITE_P(
    Algorithms, ClusterGrantsTest,
    ::testing::Values(Case{"fixed_window", 86'400'000}, Case{"token_bucket", 30LL * 86'400'000},
                      // Capacity burst + 1 = the limit.
                      Case{"gcra", 30LL * 86'400'000, kLimit - 1}, Case{"leaky_bucket", 30LL * 86'400'000},
                      Case{"anchored_window", 86'400'000}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.algorithm); });

}  // namespace
}  // namespace ringlimit::testing
