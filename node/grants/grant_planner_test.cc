// GrantPlanner (grant_planner.h): the holder's and the owner's decisions one by one, then a deterministic
// little cluster -- one owner, several holders, each a real GrantPlanner, messages delivered after seeded
// delays, the owner's key a real limiter state with its grant ledger -- checked for never admitting over
// the limit (fixed_window: the total; token_bucket: every admission at its true instant fits one reference
// bucket), for exactness once every slice came back, for idle budget back within 2 x term (also when
// Releases are lost), and for recalls near the limit.
#include "node/grants/grant_planner.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "limiter/grant_ledger.h"
#include "limiter/limiter.h"

namespace ringlimit::cluster {
namespace {

using namespace std::chrono_literals;
using MonoTime = GrantPlanner::MonoTime;

constexpr MonoTime T(int64_t ms) { return std::chrono::milliseconds(ms); }

KeyBudget Budget(uint64_t capacity, uint64_t effective, std::chrono::nanoseconds cap = 1h) {
  return KeyBudget{capacity, effective, cap, true};
}

TEST(GrantPlanner, ValidatesOptions) {
  EXPECT_TRUE(Validate(GrantOptions{}).ok());
  GrantOptions o;
  o.margin = 2s;  // longer than the term
  EXPECT_FALSE(Validate(o).ok());
  o = GrantOptions{};
  o.max_share = 0;
  EXPECT_FALSE(Validate(o).ok());
  o = GrantOptions{};
  o.incarnation = 0;
  EXPECT_FALSE(Validate(o).ok());
}

TEST(GrantPlanner, SlicesShrinkNearTheLimitAndTheReserveStaysAtTheOwner) {
  GrantPlanner p(GrantOptions{});                      // reserve 1 %, share 1/4, min slice 2
  EXPECT_EQ(p.SliceSize(500, Budget(1000, 0)), 247u);  // (1000 - 10) / 4
  EXPECT_EQ(p.SliceSize(100, Budget(1000, 0)), 100u);  // demand-sized
  EXPECT_EQ(p.SliceSize(500, Budget(1000, 950)), 10u);
  EXPECT_EQ(p.SliceSize(500, Budget(1000, 982)), 2u);
  EXPECT_EQ(p.SliceSize(500, Budget(1000, 985)), 0u);  // 1 unit: below min_slice
  EXPECT_EQ(p.SliceSize(500, Budget(1000, 990)), 0u);  // the reserve
  EXPECT_EQ(p.SliceSize(500, Budget(1000, 1200)), 0u);
  EXPECT_EQ(p.SliceSize(500, Budget(1000, 0, 0s)), 0u);  // not lendable now (no window runs)
  EXPECT_EQ(p.SliceSize(500, KeyBudget{1000, 0, 1h, false}), 0u);
  EXPECT_EQ(p.SliceSize(500, Budget(10, 0)), 2u);  // reserve 1, (10 - 1) / 4

  // The term lent is the shortest of the option, the key's cap (a window's end) and what was asked.
  GrantActions a = p.GrantRequested(T(0), "h1", "k", 7, 100, 5s, Budget(1000, 0, 300ms));
  ASSERT_EQ(a.lends.size(), 1u);
  EXPECT_EQ(a.lends[0].term, 300ms);
  EXPECT_EQ(a.lends[0].units, 100u);
  EXPECT_EQ(a.lends[0].grant >> 32, 1u);       // the incarnation
  EXPECT_EQ(a.wake_at, T(0) + 300ms + 250ms);  // the reclaim
  a = p.GrantRequested(T(0), "h1", "k", 8, 100, 0s, Budget(1000, 990));
  EXPECT_TRUE(a.lends.empty());
  ASSERT_EQ(a.refusals.size(), 1u);
  EXPECT_EQ(a.refusals[0].request, 8u);
}

KeyBudget WithOut(KeyBudget b, uint64_t out, uint64_t generation = 0) {
  b.out = out;
  b.generation = generation;
  return b;
}

GrantOptions CoverAll() {
  GrantOptions o;
  o.recall_cover = 1;  // recalled once what is left no longer covers the slices out
  return o;
}

TEST(GrantPlanner, ALendLeavesTwiceTheSlicesOutAndTheyAreRecalledOnceWhatIsLeftNoLongerCoversThem) {
  GrantPlanner p(CoverAll());  // reserve 10 of 1000
  // A = 1000 - 500 - 10 = 490 with 100 out: a slice g leaves A - g >= 2 (100 + g), g <= 96.
  EXPECT_EQ(p.SliceSize(500, WithOut(Budget(1000, 500), 100)), 96u);
  EXPECT_EQ(p.SliceSize(50, WithOut(Budget(1000, 500), 100)), 50u);
  EXPECT_EQ(p.SliceSize(500, WithOut(Budget(1000, 500), 0)), 122u);     // the share: 490 / 4
  EXPECT_EQ(p.SliceSize(500, WithOut(Budget(1000, 500), 245)), 0u);     // A = 2 x out
  EXPECT_EQ(p.SliceSize(500, WithOut(Budget(1000, 500), 10'000)), 0u);  // out above A
  EXPECT_FALSE(p.NearLimit(WithOut(Budget(1000, 500), 245)));
  EXPECT_FALSE(p.NearLimit(WithOut(Budget(1000, 500), 490)));  // A covers what is out
  EXPECT_TRUE(p.NearLimit(WithOut(Budget(1000, 500), 491)));
  EXPECT_TRUE(p.NearLimit(WithOut(Budget(1000, 990), 0)));  // only the reserve is left
  EXPECT_TRUE(p.NearLimit(WithOut(Budget(1000, 983), 0)));  // 7 x 1/4 < min_slice
  EXPECT_TRUE(p.NearLimit(KeyBudget{}));                    // no row (erased): nothing lends

  // The default cover (1/4): recalled once what is left is below a quarter of what is out.
  GrantPlanner quarter(GrantOptions{});
  EXPECT_EQ(quarter.SliceSize(500, WithOut(Budget(1000, 500), 100)), 122u);  // the share
  EXPECT_EQ(quarter.SliceSize(500, WithOut(Budget(1000, 500), 900)), 26u);   // (490 - 450) / 1.5
  EXPECT_FALSE(quarter.NearLimit(WithOut(Budget(1000, 500), 1960)));
  EXPECT_TRUE(quarter.NearLimit(WithOut(Budget(1000, 500), 1961)));
  GrantOptions bad;
  bad.recall_cover = -1;
  EXPECT_FALSE(Validate(bad).ok());

  // Lending never makes the recall rule hold: only the owner's own checks (or the window) do.
  GrantPlanner owner(CoverAll());
  uint64_t effective = 0, out = 0;
  for (int h = 0; h < 20; ++h) {
    const KeyBudget b = WithOut(Budget(1000, effective), out);
    GrantActions a = owner.GrantRequested(T(0), "h" + std::to_string(h), "k", 1, 400, 1s, b);
    if (a.lends.empty()) break;
    effective += a.lends[0].units;
    out += a.lends[0].units;
    EXPECT_TRUE(owner.OwnerChecked(T(0), "k", WithOut(Budget(1000, effective), out)).recalls.empty()) << h;
  }
  EXPECT_GT(out, 300u);                                   // lent, and in several slices
  EXPECT_GE(1000 - 10 - effective, 2 * out - 2 * 2 - 2);  // what is left covers about twice what is out
  // The owner decides checks until what is left no longer covers the slices out: every slice is recalled,
  // once.
  while (!owner.NearLimit(WithOut(Budget(1000, effective), out))) ++effective;
  const GrantActions a = owner.OwnerChecked(T(1), "k", WithOut(Budget(1000, effective), out));
  EXPECT_EQ(a.recalls.size(), owner.stats().grants_made);
  EXPECT_TRUE(owner.Watched().empty());
  EXPECT_TRUE(owner.OwnerChecked(T(2), "k", WithOut(Budget(1000, effective + 5), out)).recalls.empty());
  EXPECT_TRUE(owner.LentKeys().contains("k"));  // recalled, not settled yet
}

TEST(GrantPlanner, AResetOrAPolicyChangeRecallsTheSlicesLentUnderTheOldGeneration) {
  GrantPlanner owner(GrantOptions{});
  GrantActions a = owner.GrantRequested(T(0), "h1", "k", 1, 100, 1s, WithOut(Budget(1'000'000, 0), 0, 7));
  const GrantId old = a.lends.at(0).grant;
  EXPECT_EQ(owner.Watched(), std::vector<std::string>{"k"});
  // Far from the limit, same generation: nothing.
  EXPECT_TRUE(owner.OwnerChecked(T(1), "k", WithOut(Budget(1'000'000, 100), 100, 7)).recalls.empty());
  // A request under a new generation (the key was reset, or came with other limits) calls the old slice
  // back and lends under the new one.
  a = owner.GrantRequested(T(2), "h2", "k", 2, 100, 1s, WithOut(Budget(1'000'000, 100), 100, 8));
  ASSERT_EQ(a.recalls.size(), 1u);
  EXPECT_EQ(a.recalls[0].grant, old);
  EXPECT_EQ(a.recalls[0].to, "h1");
  ASSERT_EQ(a.lends.size(), 1u);
  const GrantId fresh = a.lends[0].grant;
  // The owner's watch reads the key at generation 9 (reset again): the new slice is recalled too, once.
  a = owner.OwnerChecked(T(3), "k", WithOut(Budget(1'000'000, 200), 200, 9));
  ASSERT_EQ(a.recalls.size(), 1u);
  EXPECT_EQ(a.recalls[0].grant, fresh);
  EXPECT_TRUE(owner.OwnerChecked(T(4), "k", WithOut(Budget(1'000'000, 200), 200, 10)).recalls.empty());
  // An unknown generation (0) recalls nothing by itself.
  a = owner.GrantRequested(T(5), "h3", "k", 3, 100, 1s, WithOut(Budget(1'000'000, 200), 200, 10));
  EXPECT_TRUE(owner.OwnerChecked(T(6), "k", WithOut(Budget(1'000'000, 300), 300, 0)).recalls.empty());
  // The key's row is gone (an admin DELETE): KeyBudget{} recalls what is out.
  EXPECT_EQ(owner.OwnerChecked(T(7), "k", KeyBudget{}).recalls.size(), 1u);
}

TEST(GrantPlanner, HolderAsksWhenHotDecidesFromTheSliceAndForwardsWhatDoesNotFit) {
  GrantPlanner p(GrantOptions{});
  GrantActions a = p.Check(T(0), "k", 1, 100);  // below the threshold: nothing kept, nothing asked
  EXPECT_TRUE(a.forward);
  EXPECT_TRUE(a.requests.empty());
  a = p.Check(T(0), "k", 1, 400);
  EXPECT_TRUE(a.forward);
  ASSERT_EQ(a.requests.size(), 1u);
  EXPECT_EQ(a.requests[0].want, 400u);  // rate x term
  const uint64_t request = a.requests[0].request;
  EXPECT_TRUE(p.Check(T(1), "k", 1, 400).requests.empty());  // one request in flight at a time
  a = p.GrantReplied(T(3), "k", request, 42, 5, 1s);
  EXPECT_TRUE(a.releases.empty());
  EXPECT_EQ(p.LocalUnits(T(3), "k"), 5u);
  for (int i = 0; i < 2; ++i) {
    a = p.Check(T(4), "k", 2, 400);
    EXPECT_EQ(a.local, std::optional<GrantId>(42));
    EXPECT_FALSE(a.forward);
    // Three quarters of the slice used (4 of 5) asks for the next one.
    EXPECT_EQ(a.requests.size(), i == 0 ? 0u : 1u);
  }
  // 1 unit left: a check of 2 goes to the owner (a holder never denies).
  a = p.Check(T(5), "k", 2, 400);
  EXPECT_FALSE(a.local);
  EXPECT_TRUE(a.forward);
  EXPECT_TRUE(a.requests.empty());  // one in flight already
  EXPECT_EQ(p.Check(T(5), "k", 1, 400).local, std::optional<GrantId>(42));
  EXPECT_EQ(p.Check(T(5), "k", 0, 400).local, std::nullopt);  // a peek needs the owner's figures
  EXPECT_EQ(p.stats().local_checks, 3u);
}

// What GET /v1/grants and the console show: the owner's keys with slices out, by key, and the holder's
// live slices, by key; recalled, settled and expired ones drop out.
TEST(GrantPlanner, SummariesShowTheKeysLentAndHeldUntilTheyComeBack) {
  GrantPlanner owner(GrantOptions{});
  EXPECT_TRUE(owner.LentSummary().empty());
  const GrantActions a1 = owner.GrantRequested(T(0), "h2", "hot", 1, 100, 1s, Budget(100000, 0));
  const GrantActions a2 = owner.GrantRequested(T(0), "h1", "hot", 1, 50, 1s, Budget(100000, 100));
  const GrantActions a3 = owner.GrantRequested(T(0), "h1", "warm", 2, 10, 1s, Budget(100000, 0));
  ASSERT_EQ(a1.lends.size(), 1u);
  ASSERT_EQ(a2.lends.size(), 1u);
  ASSERT_EQ(a3.lends.size(), 1u);
  std::vector<GrantPlanner::LentKey> lent = owner.LentSummary();
  ASSERT_EQ(lent.size(), 2u);
  EXPECT_EQ(lent[0].key, "hot");
  EXPECT_EQ(lent[0].units, a1.lends[0].units + a2.lends[0].units);
  EXPECT_EQ(lent[0].grants, 2u);
  EXPECT_EQ(lent[0].holders, (std::vector<std::string>{"h1", "h2"}));
  EXPECT_FALSE(lent[0].recalled);
  EXPECT_EQ(lent[1].key, "warm");
  EXPECT_EQ(lent[1].holders, (std::vector<std::string>{"h1"}));
  (void)owner.Recall(T(1), "warm");
  lent = owner.LentSummary();
  ASSERT_EQ(lent.size(), 2u);
  EXPECT_TRUE(lent[1].recalled) << "recalled, not settled yet: still out";
  (void)owner.ReleaseReceived(T(2), "warm", a3.lends[0].grant, 3);
  lent = owner.LentSummary();
  ASSERT_EQ(lent.size(), 1u);
  EXPECT_EQ(lent[0].key, "hot");

  GrantPlanner holder(GrantOptions{});
  GrantActions a = holder.Check(T(0), "hot", 1, 400);
  ASSERT_EQ(a.requests.size(), 1u);
  EXPECT_TRUE(holder.HeldSummary(T(1)).empty()) << "asked, nothing held yet";
  (void)holder.GrantReplied(T(3), "hot", a.requests[0].request, 42, 5, 1s);
  EXPECT_EQ(holder.Check(T(4), "hot", 2, 400).local, std::optional<GrantId>(42));
  std::vector<GrantPlanner::HeldKey> held = holder.HeldSummary(T(10));
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].key, "hot");
  EXPECT_EQ(held[0].units_left, 3u);
  EXPECT_EQ(held[0].slices, 1u);
  EXPECT_EQ(held[0].expires_in, 990ms) << "the term runs from the request (T(0)) + 1 s";
  EXPECT_TRUE(holder.HeldSummary(T(1000)).empty()) << "expired";
}

// Idle: nothing for Timer to do (the driver's tick skips such planners) -- and never while a slice is held,
// a request waits or a back-off runs.
TEST(GrantPlanner, IdleOnlyWithNothingHeldAskedOrLent) {
  GrantPlanner p(GrantOptions{});
  EXPECT_TRUE(p.Idle());
  EXPECT_TRUE(p.Check(T(0), "k", 1, 100).requests.empty());  // not hot: nothing kept
  EXPECT_TRUE(p.Idle());
  GrantActions a = p.Check(T(0), "k", 1, 400);
  ASSERT_EQ(a.requests.size(), 1u);
  EXPECT_FALSE(p.Idle()) << "a request waits";
  a = p.GrantReplied(T(3), "k", a.requests[0].request, 42, 5, 1s);
  EXPECT_FALSE(p.Idle()) << "a slice is held";
  a = p.Timer(T(2000));  // past the term: the slice is released
  ASSERT_EQ(a.releases.size(), 1u);
  EXPECT_TRUE(p.Idle());
  EXPECT_FALSE(p.Timer(T(3000)).wake_at.has_value());
  GrantPlanner owner(GrantOptions{});
  EXPECT_TRUE(owner.Idle());
}

TEST(GrantPlanner, ThePausedHolderDecidesNothingFromAnExpiredSlice) {
  GrantPlanner p(GrantOptions{});
  GrantActions a = p.Check(T(0), "k", 1, 1000);
  ASSERT_EQ(a.requests.size(), 1u);
  // The reply is slow: the term still runs from when the request was sent (0), not from the reply.
  a = p.GrantReplied(T(900), "k", a.requests[0].request, 42, 100, 1s);
  EXPECT_EQ(p.Check(T(950), "k", 1, 1000).local, std::optional<GrantId>(42));
  // The process is stopped at 950 ms and resumes at 5 s: its steady clock ran on.
  a = p.Check(T(5000), "k", 1, 1000);
  EXPECT_FALSE(a.local);
  EXPECT_TRUE(a.forward);
  ASSERT_EQ(a.releases.size(), 1u);
  EXPECT_EQ(a.releases[0].grant, 42u);
  EXPECT_EQ(a.releases[0].used, 1u);
  EXPECT_EQ(a.releases[0].why, ReleaseWhy::kExpired);
  EXPECT_EQ(p.LocalUnits(T(5000), "k"), 0u);
  // Exactly at the term's end nothing is decided from it either.
  GrantPlanner q(GrantOptions{.idle_release = 5s});
  a = q.Check(T(0), "k", 1, 1000);
  a = q.GrantReplied(T(1), "k", a.requests[0].request, 43, 100, 1s);
  EXPECT_EQ(q.Check(T(999), "k", 1, 1000).local, std::optional<GrantId>(43));
  EXPECT_FALSE(q.Check(T(1000), "k", 1, 1000).local);
  // A reply that comes after its term is over is given back at once, unused.
  GrantPlanner r(GrantOptions{});
  a = r.Check(T(0), "k", 1, 1000);
  a = r.GrantReplied(T(1500), "k", a.requests[0].request, 44, 100, 1s);
  ASSERT_EQ(a.releases.size(), 1u);
  EXPECT_EQ(a.releases[0].why, ReleaseWhy::kLate);
  EXPECT_EQ(a.releases[0].used, 0u);
}

TEST(GrantPlanner, ThePauseFenceReleasesEverySliceAndStopsUseAndRequests) {
  GrantPlanner p(GrantOptions{});
  GrantActions a = p.Check(T(0), "a", 1, 1000);
  a = p.GrantReplied(T(1), "a", a.requests[0].request, 1, 100, 1s);
  a = p.Check(T(2), "b", 1, 1000);
  const uint64_t pending_b = a.requests[0].request;
  EXPECT_EQ(p.Check(T(3), "a", 1, 1000).local, std::optional<GrantId>(1));
  a = p.Fence(T(10), T(2000));
  ASSERT_EQ(a.releases.size(), 1u);
  EXPECT_EQ(a.releases[0].why, ReleaseWhy::kFenced);
  EXPECT_EQ(a.releases[0].used, 1u);
  a = p.Check(T(20), "a", 1, 1000);
  EXPECT_TRUE(a.forward);
  EXPECT_TRUE(a.requests.empty());
  // The reply to the request in flight at the fence is given back.
  a = p.GrantReplied(T(30), "b", pending_b, 2, 50, 1s);
  ASSERT_EQ(a.releases.size(), 1u);
  EXPECT_EQ(a.releases[0].why, ReleaseWhy::kLate);
  EXPECT_EQ(p.Check(T(2000), "a", 1, 1000).requests.size(), 1u);  // after the fence: asks again
}

TEST(GrantPlanner, ALeavingHolderReleasesEverySliceAndNeverAsksAgain) {
  GrantPlanner p(GrantOptions{});
  GrantActions a = p.Check(T(0), "a", 1, 1000);
  a = p.GrantReplied(T(1), "a", a.requests.at(0).request, 1, 100, 1s);
  EXPECT_TRUE(p.Check(T(2), "a", 5, 1000).local);
  const uint64_t pending_b = p.Check(T(3), "b", 1, 1000).requests.at(0).request;
  a = p.Retire(T(4));
  ASSERT_EQ(a.releases.size(), 1u);
  EXPECT_EQ(a.releases[0].grant, 1u);
  EXPECT_EQ(a.releases[0].used, 5u);
  EXPECT_EQ(a.releases[0].why, ReleaseWhy::kLeaving);
  EXPECT_EQ(p.stats().slices_held, 0u);
  // The reply to the request in flight is given back unused; nothing is decided or asked from then on.
  a = p.GrantReplied(T(5), "b", pending_b, 2, 50, 1s);
  ASSERT_EQ(a.releases.size(), 1u);
  EXPECT_EQ(a.releases[0].why, ReleaseWhy::kLate);
  a = p.Check(T(100'000), "a", 1, 1000);
  EXPECT_TRUE(a.forward);
  EXPECT_TRUE(a.requests.empty());
}

TEST(GrantPlanner, OwnerRecallsNearTheLimitAndOnDemandAndSettlesEachGrantOnce) {
  GrantPlanner owner(GrantOptions{});
  GrantActions a = owner.GrantRequested(T(0), "h1", "k", 1, 100, 1s, Budget(1000, 0));
  const GrantId g1 = a.lends.at(0).grant;
  a = owner.GrantRequested(T(0), "h2", "k", 1, 100, 1s, Budget(1000, 100));
  const GrantId g2 = a.lends.at(0).grant;
  EXPECT_EQ(owner.stats().units_out, 200u);
  // Plenty left: no recall.
  EXPECT_TRUE(owner.OwnerChecked(T(1), "k", Budget(1000, 500)).recalls.empty());
  // Nothing left above the reserve: both slices are called back, once.
  a = owner.OwnerChecked(T(2), "k", Budget(1000, 989));
  ASSERT_EQ(a.recalls.size(), 2u);
  EXPECT_EQ(a.recalls[0].to, "h1");
  EXPECT_TRUE(owner.OwnerChecked(T(3), "k", Budget(1000, 995)).recalls.empty());
  // A policy change recalls on demand.
  EXPECT_EQ(owner.Recall(T(4), "k").recalls.size(), 2u);

  // The holder's side of a recall: the slice is released with what it used.
  GrantPlanner holder(GrantOptions{});
  a = holder.Check(T(0), "k", 1, 1000);
  a = holder.GrantReplied(T(1), "k", a.requests[0].request, g1, 200, 1s);
  EXPECT_TRUE(holder.Check(T(2), "k", 3, 1000).local);
  a = holder.RecallReceived(T(5), "k", g1);
  ASSERT_EQ(a.releases.size(), 1u);
  EXPECT_EQ(a.releases[0].why, ReleaseWhy::kRecalled);
  EXPECT_EQ(a.releases[0].used, 3u);
  EXPECT_TRUE(holder.Check(T(6), "k", 1, 1000).requests.empty());  // backs off after a recall

  // Settles: from a Release (used), twice (the ledger settles once), and the reclaim of the other.
  a = owner.ReleaseReceived(T(6), "k", g1, 3);
  ASSERT_EQ(a.settles.size(), 1u);
  EXPECT_EQ(a.settles[0].used, std::optional<uint64_t>(3));
  EXPECT_EQ(owner.ReleaseReceived(T(7), "k", g1, 3).settles.size(), 1u);
  EXPECT_EQ(owner.stats().grants_released, 1u);
  a = owner.Timer(T(1249));
  EXPECT_TRUE(a.settles.empty());
  a = owner.Timer(T(1250));  // term + margin after the grant
  ASSERT_EQ(a.settles.size(), 1u);
  EXPECT_EQ(a.settles[0].grant, g2);
  EXPECT_EQ(a.settles[0].used, std::nullopt);
  EXPECT_EQ(owner.stats().grants_expired, 1u);
  EXPECT_EQ(owner.stats().units_out, 0u);

  // A row read before these settles were written still shows both grants unsettled: the owner that
  // settled them does not adopt them again (it would settle each twice), until term + margin has passed.
  a = owner.Adopt(T(1251), "k", {g1, g2});
  EXPECT_EQ(owner.stats().grants_adopted, 0u);
  EXPECT_EQ(a.wake_at, std::nullopt);
  EXPECT_TRUE(owner.Idle());
  EXPECT_TRUE(owner.Timer(T(3000)).settles.empty());
  a = owner.Adopt(T(3000), "k", {g2});  // settled at 1250: forgotten from 2500 on
  EXPECT_EQ(owner.stats().grants_adopted, 1u);
  EXPECT_EQ(owner.Timer(T(4250)).settles.size(), 1u);

  // After a failover the new owner reclaims the grants it finds unsettled in the ledger.
  GrantPlanner next(GrantOptions{.incarnation = 2});
  a = next.Adopt(T(100), "k", {g1, g2});
  EXPECT_EQ(a.wake_at, T(100) + 1250ms);
  EXPECT_EQ(next.Timer(T(1350)).settles.size(), 2u);
}

// --- A little cluster --------------------------------------------------------------------------------

constexpr limiter::TimeNs kEpoch = 1'700'000'000LL * limiter::kSecond;

struct ClusterOptions {
  limiter::LimitSpec spec;
  int holders = 6;
  std::vector<double> rates;  // checks per second entering each holder (cycled)
  int64_t demand_ms = 20'000;
  double drop_releases = 0;  // probability that a Release is lost
  // The design docs/limiter.md rejects: a slice charged into the state at the grant (draining from there),
  // its unused units never given back.
  bool charge_at_grant = false;
  // Faults: a holder killed at crash_at_ms (its checks, messages and timers are gone from then on); a holder
  // stopped from pause_at_ms for pause_for_ms (what comes for it waits, its clock runs on; with
  // fence_on_resume its pause fence goes up when it resumes, else only the term protects); the owner failing
  // over at failover_at_ms to a replica with its state and ledger (a new incarnation that adopts the grants
  // out). -1: none.
  int crash_holder = -1;
  int64_t crash_at_ms = 0;
  int pause_holder = -1;
  int64_t pause_at_ms = 0;
  int64_t pause_for_ms = 0;
  bool fence_on_resume = false;
  int64_t failover_at_ms = -1;
  uint64_t seed = 1;
  GrantOptions grants;
};

struct ClusterResult {
  uint64_t offered = 0;  // checks that entered the holders
  uint64_t admitted = 0;
  uint64_t local = 0;
  uint64_t admitted_during_demand = 0;  // before the final drain
  uint64_t final_admitted = 0;          // after every slice came back and the owner admitted what was left
  uint64_t recalls = 0;
  uint64_t reclaimed = 0;
  int64_t longest_out_ms = 0;  // the longest time from a grant to its settle
  int64_t settled_by_ms = 0;   // when the last slice was settled after demand stopped
  bool reference_refused = false;
  bool over = false;
  uint64_t stale_local = 0;  // local decisions from a slice past its term or already settled (must be 0)
  uint64_t lost = 0;         // units of reclaimed slices their holders never used (under-admission)
  uint64_t deferred = 0;     // events that waited for a stopped holder (the pause happened)
};

// Everything on one simulated steady clock (the nodes' clocks run at one rate); the limiter's time is the
// same clock plus kEpoch. Events in time order, ties in insertion order.
class Cluster {
 public:
  explicit Cluster(ClusterOptions o) : o_(std::move(o)), rng_(o_.seed), owner_(Owner(1)) {
    for (int i = 0; i < o_.holders; ++i) {
      GrantOptions g = o_.grants;
      g.incarnation = static_cast<uint32_t>(100 + i);
      holders_.push_back(std::make_unique<GrantPlanner>(g));
    }
    capacity_ = o_.spec.burst > 0 ? o_.spec.burst : o_.spec.limit;
  }

  ClusterResult Run() {
    for (int i = 0; i < o_.holders; ++i) {
      At(NextArrival(i, T(0)), [this, i] { Arrive(i); });
    }
    if (o_.pause_holder >= 0 && o_.fence_on_resume) {
      const int h = o_.pause_holder;
      At(T(o_.pause_at_ms + o_.pause_for_ms), [this, h] { Apply(h, holder(h).Fence(now_, now_ + 500ms)); });
    }
    if (o_.failover_at_ms >= 0) {
      At(T(o_.failover_at_ms), [this] {
        owner_ = Owner(2);
        std::vector<GrantId> out;
        for (const limiter::GrantRecord& g : ledger_.records) {
          if (!g.settled) out.push_back(g.id);
        }
        ApplyOwner(owner_->Adopt(now_, "k", out));
      });
    }
    while (!events_.empty()) {
      auto it = events_.begin();
      now_ = it->first.first;
      auto fn = std::move(it->second);
      events_.erase(it);
      fn();
    }
    // Every slice is back: the owner admits what is left, one unit at a time.
    r_.settled_by_ms = std::chrono::duration_cast<std::chrono::milliseconds>(last_settle_).count();
    EXPECT_TRUE(lent_at_.empty()) << "slices still out";
    r_.admitted_during_demand = r_.admitted;
    for (;;) {
      const limiter::Request req = Req(1);
      if (Effective() + 1 > capacity_ || !limiter::Check(o_.spec, state_, req).allowed) break;
      Admit(1);
    }
    r_.final_admitted = r_.admitted;
    r_.recalls = owner_->stats().recalls;
    return r_;
  }

 private:
  std::unique_ptr<GrantPlanner> Owner(uint32_t incarnation) {
    GrantOptions g = o_.grants;
    g.incarnation = incarnation;
    return std::make_unique<GrantPlanner>(g);
  }
  GrantPlanner& holder(int i) { return *holders_[static_cast<size_t>(i)]; }
  // Runs `fn` for holder `i` at `t` -- unless it was killed by then, and later if it is stopped then.
  void AtHolder(int i, MonoTime t, std::function<void()> fn) {
    At(t, [this, i, fn = std::move(fn)]() mutable {
      if (i == o_.crash_holder && now_ >= T(o_.crash_at_ms)) return;
      if (i == o_.pause_holder && now_ >= T(o_.pause_at_ms) && now_ < T(o_.pause_at_ms + o_.pause_for_ms)) {
        ++r_.deferred;
        AtHolder(i, T(o_.pause_at_ms + o_.pause_for_ms), std::move(fn));
        return;
      }
      fn();
    });
  }
  limiter::Request Req(uint64_t cost) const {
    limiter::Request r;
    r.now = kEpoch + now_.count();
    r.cost = cost;
    return r;
  }
  void At(MonoTime t, std::function<void()> fn) { events_.emplace(std::make_pair(t, seq_++), std::move(fn)); }
  MonoTime Delay() { return std::chrono::microseconds(200 + static_cast<int64_t>(rng_() % 2800)); }
  MonoTime NextArrival(int i, MonoTime from) {
    const double rate = o_.rates[static_cast<size_t>(i) % o_.rates.size()];
    std::exponential_distribution<double> gap(rate);
    return from + std::chrono::nanoseconds(static_cast<int64_t>(gap(rng_) * 1e9) + 1);
  }
  double Rate(int i) const { return o_.rates[static_cast<size_t>(i) % o_.rates.size()]; }
  std::string Name(int i) const { return "h" + std::to_string(i); }

  // The owner's effective consumption E: the state's used units (ceiled) + the unsettled slices.
  uint64_t Effective() const {
    const limiter::Request peek = Req(0);
    const limiter::Decision d = limiter::Peek(o_.spec, state_, peek);
    const uint64_t used = capacity_ - std::min(capacity_, d.remaining);
    return used + limiter::Outstanding(o_.spec, ledger_, state_, peek.now);
  }
  KeyBudget BudgetNow() const {
    const limiter::Request peek = Req(0);
    return KeyBudget{capacity_, Effective(),
                     std::chrono::nanoseconds(limiter::GrantTermCap(o_.spec, state_, kEpoch + now_.count())),
                     limiter::Lends(o_.spec),
                     o_.charge_at_grant ? 0 : limiter::Outstanding(o_.spec, ledger_, state_, peek.now)};
  }

  // Ground truth: every admission, at its true instant, through one reference limiter.
  void Admit(uint64_t cost) {
    r_.admitted += cost;
    const limiter::Decision d = limiter::Check(o_.spec, reference_, Req(cost));
    if (!d.allowed) r_.reference_refused = true;
    if (o_.spec.algorithm == limiter::Algorithm::kFixedWindow && r_.admitted > o_.spec.limit) r_.over = true;
  }

  // The clients' checks entering holder `i` (a chain of arrivals, whatever happens to the holder).
  void Arrive(int i) {
    if (now_ >= T(o_.demand_ms)) return;
    At(NextArrival(i, now_), [this, i] { Arrive(i); });
    AtHolder(i, now_, [this, i] { HolderChecks(i); });
  }

  void HolderChecks(int i) {
    ++r_.offered;
    GrantActions a = holder(i).Check(now_, "k", 1, Rate(i), limiter::Lends(o_.spec));
    if (a.local) {
      const GrantId g = *a.local;
      const auto& [lent, term] = lend_info_[g];
      if (settled_.contains(g) || now_ >= lent + term) ++r_.stale_local;
      ++used_by_grant_[g];
      Admit(1);
      ++r_.local;
    } else {
      At(now_ + Delay(), [this] { OwnerDecides(1); });
    }
    Apply(i, std::move(a));
  }

  void OwnerDecides(uint64_t cost) {
    if (Effective() + cost <= capacity_) {
      const limiter::Decision d = limiter::Check(o_.spec, state_, Req(cost));
      EXPECT_TRUE(d.allowed);
      Admit(cost);
    }
    ApplyOwner(owner_->OwnerChecked(now_, "k", BudgetNow()));
  }

  void Settle(const cluster::Settle& s) {
    const uint64_t charge = limiter::SettleGrant(ledger_, s.grant, s.used);
    if (charge > 0) {
      const limiter::Decision d = limiter::Check(o_.spec, state_, Req(charge));
      EXPECT_TRUE(d.allowed) << "a settle must fit: its units were counted already";
    }
    if (!s.used) {
      r_.reclaimed += charge;
      if (charge > 0) r_.lost += charge - used_by_grant_[s.grant];
    }
    settled_.insert(s.grant);
    if (auto it = lent_at_.find(s.grant); it != lent_at_.end()) {
      r_.longest_out_ms =
          std::max<int64_t>(r_.longest_out_ms,
                            std::chrono::duration_cast<std::chrono::milliseconds>(now_ - it->second).count());
      lent_at_.erase(it);
    }
    last_settle_ = now_;
  }

  void ApplyOwner(GrantActions a) {
    for (const Lend& l : a.lends) {
      // The grant record is written (and, in a cluster, acknowledged) before the reply goes out.
      if (o_.charge_at_grant) {
        EXPECT_TRUE(limiter::Check(o_.spec, state_, Req(l.units)).allowed);
      } else {
        EXPECT_TRUE(limiter::AddGrant(ledger_, l.grant, l.units, kEpoch + now_.count()).ok());
      }
      lent_at_[l.grant] = now_;
      lend_info_[l.grant] = {now_, l.term};
      const int h = std::stoi(l.to.substr(1));
      AtHolder(h, now_ + Delay(), [this, h, l] {
        Apply(h, holder(h).GrantReplied(now_, l.key, l.request, l.grant, l.units, l.term));
      });
    }
    for (const Refuse& f : a.refusals) {
      const int h = std::stoi(f.to.substr(1));
      AtHolder(h, now_ + Delay(), [this, h, f] { Apply(h, holder(h).GrantRefused(now_, f.key, f.request)); });
    }
    for (const cluster::Settle& s : a.settles) Settle(s);
    for (const SendRecall& c : a.recalls) {
      const int h = std::stoi(c.to.substr(1));
      AtHolder(h, now_ + Delay(), [this, h, c] { Apply(h, holder(h).RecallReceived(now_, c.key, c.grant)); });
    }
    if (a.wake_at) Arm(-1, *a.wake_at);
  }

  // One timer per planner (-1: the owner): arming replaces the earlier instant; a stale firing is skipped.
  void Arm(int node, MonoTime at) {
    const uint64_t gen = ++timer_gen_[node];
    if (node < 0) {
      At(at, [this, gen] {
        if (timer_gen_[-1] == gen) ApplyOwner(owner_->Timer(now_));
      });
    } else {
      AtHolder(node, at, [this, node, gen] {
        if (timer_gen_[node] == gen) Apply(node, holder(node).Timer(now_));
      });
    }
  }

  void Apply(int i, GrantActions a) {
    for (const SendRequest& q : a.requests) {
      At(now_ + Delay(), [this, i, q] {
        ApplyOwner(owner_->GrantRequested(now_, Name(i), q.key, q.request, q.want, q.term, BudgetNow()));
      });
    }
    for (const SendRelease& r : a.releases) {
      if (o_.drop_releases > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < o_.drop_releases)
        continue;
      At(now_ + Delay(), [this, r] { ApplyOwner(owner_->ReleaseReceived(now_, r.key, r.grant, r.used)); });
    }
    if (a.wake_at) Arm(i, *a.wake_at);
  }

  ClusterOptions o_;
  std::mt19937_64 rng_;
  std::unique_ptr<GrantPlanner> owner_;
  std::vector<std::unique_ptr<GrantPlanner>> holders_;
  uint64_t capacity_ = 0;
  limiter::State state_{};
  limiter::State reference_{};
  limiter::GrantLedger ledger_;
  std::map<GrantId, MonoTime> lent_at_;                                         // grants not settled yet
  std::map<GrantId, std::pair<MonoTime, std::chrono::nanoseconds>> lend_info_;  // every grant: when, term
  std::map<GrantId, uint64_t> used_by_grant_;  // units decided from each slice (the truth)
  std::set<GrantId> settled_;
  MonoTime last_settle_{};
  std::map<std::pair<MonoTime, uint64_t>, std::function<void()>> events_;
  uint64_t seq_ = 0;
  std::map<int, uint64_t> timer_gen_;
  MonoTime now_{};
  ClusterResult r_;
};

limiter::LimitSpec Spec(limiter::Algorithm a, uint64_t limit, limiter::DurationNs window) {
  limiter::LimitSpec s;
  s.algorithm = a;
  s.limit = limit;
  s.window = window;
  return s;
}

TEST(GrantCluster, NeverOverTheLimitAcrossManyHoldersAndExactOnceEverySliceIsBack) {
  uint64_t admitted = 0, local = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ClusterOptions o;
    o.spec = Spec(limiter::Algorithm::kFixedWindow, 30'000, 86'400 * limiter::kSecond);
    o.holders = 8;
    o.rates = {300, 500, 800, 1200};  // 5,600 checks/s offered in all: the limit is reached after ~5.4 s
    o.demand_ms = 8'000;
    o.seed = seed;
    const ClusterResult r = Cluster(o).Run();
    EXPECT_FALSE(r.over) << seed;
    EXPECT_FALSE(r.reference_refused) << seed;
    EXPECT_EQ(r.final_admitted, 30'000u) << seed;  // exact: nothing lost, nothing over
    EXPECT_GT(r.recalls, 0u) << seed;              // the key neared its limit with slices out
    admitted += r.admitted;
    local += r.local;
  }
  // Most of the admissions were decided where they entered.
  EXPECT_GT(local * 10, admitted * 7);
  std::printf("[ info ] fixed_window: %llu of %llu admissions decided locally\n",
              static_cast<unsigned long long>(local), static_cast<unsigned long long>(admitted));
}

TEST(GrantCluster, ATokenBucketsAdmissionsAllFitOneReferenceBucketAtTheirTrueInstants) {
  // Demand over the rate all along: every admission, owner's or holder's, at its true instant, must fit
  // one ideal bucket (slices held undrained while out, used units draining from the settle).
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ClusterOptions o;
    o.spec = Spec(limiter::Algorithm::kTokenBucket, 2'000, limiter::kSecond);  // 2,000/s, burst 2,000
    o.holders = 5;
    o.rates = {400, 700};  // ~2,700 checks/s offered
    o.demand_ms = 8'000;
    o.seed = seed;
    const ClusterResult r = Cluster(o).Run();
    EXPECT_FALSE(r.reference_refused) << seed;
    // Not refusing its way to safety: most of what one bucket allows over the run is admitted.
    EXPECT_GE(r.admitted_during_demand, 18'000u * 85 / 100) << seed;
    std::printf(
        "[ info ] token_bucket over its rate, seed %llu: admitted %llu in 8 s (one bucket: at most "
        "%d), %llu locally\n",
        static_cast<unsigned long long>(seed), static_cast<unsigned long long>(r.admitted_during_demand),
        2'000 + 2'000 * 8, static_cast<unsigned long long>(r.local));
  }
}

TEST(GrantCluster, SlicesThatDrainFromTheGrantWouldOverAdmitABucket) {
  // Why a slice is held undrained: charged at the grant and draining from there, the bucket refills behind
  // slices not used yet, and the admissions no longer fit one bucket (the same check as above can fail).
  int refused = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ClusterOptions o;
    o.spec = Spec(limiter::Algorithm::kTokenBucket, 2'000, limiter::kSecond);
    o.holders = 5;
    o.rates = {400, 700};
    o.demand_ms = 8'000;
    o.seed = seed;
    o.charge_at_grant = true;
    // Slices held until idle or expiry, as in the first planner: with spent slices released at once they
    // turn over too fast for this configuration to show the refill within 8 s.
    o.grants.release_spent = false;
    refused += Cluster(o).Run().reference_refused ? 1 : 0;
  }
  EXPECT_GT(refused, 0);
}

TEST(GrantCluster, DemandAtEightyPercentOfTheRateOverThreeHoldersIsAdmittedAndMostlyLocal) {
  // Issue 34's under-admission criterion: demand at 80 % of the limit's rate spread over 3 nodes admits
  // >= 95 % of it.
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ClusterOptions o;
    o.spec = Spec(limiter::Algorithm::kTokenBucket, 3'000, limiter::kSecond);
    o.holders = 3;
    o.rates = {800};  // 2,400 checks/s: 80 % of 3,000/s
    o.demand_ms = 10'000;
    o.seed = seed;
    const ClusterResult r = Cluster(o).Run();
    EXPECT_FALSE(r.reference_refused) << seed;
    std::printf(
        "[ info ] token_bucket at 80 %%, seed %llu: offered %llu, admitted during demand %llu, "
        "%llu locally\n",
        static_cast<unsigned long long>(seed), static_cast<unsigned long long>(r.offered),
        static_cast<unsigned long long>(r.admitted_during_demand), static_cast<unsigned long long>(r.local));
    EXPECT_GE(r.admitted_during_demand * 100, r.offered * 95) << seed;
    EXPECT_GT(r.local * 10, r.admitted_during_demand * 7) << seed;
  }
}

TEST(GrantCluster, IdleBudgetComesBackWithinTwoTermsAlsoWhenReleasesAreLost) {
  for (double drop : {0.0, 0.5, 1.0}) {
    ClusterOptions o;
    o.spec = Spec(limiter::Algorithm::kFixedWindow, 1'000'000, 86'400 * limiter::kSecond);
    o.holders = 4;
    o.rates = {500, 900};
    o.demand_ms = 3'000;
    o.drop_releases = drop;
    const ClusterResult r = Cluster(o).Run();
    EXPECT_FALSE(r.over);
    EXPECT_LE(r.longest_out_ms, 2 * 1000) << drop;         // no slice out longer than 2 x term
    EXPECT_LE(r.settled_by_ms, 3'000 + 2 * 1000) << drop;  // all back within 2 x term of the last check
    if (drop == 1.0) {
      EXPECT_GT(r.reclaimed, 0u);  // the fault happened: every slice came back by reclaim
    } else if (drop == 0.0) {
      EXPECT_EQ(r.reclaimed, 0u);
      EXPECT_EQ(r.final_admitted, 1'000'000u);
    }
  }
}

ClusterOptions FaultRun(uint64_t seed) {
  ClusterOptions o;
  o.spec = Spec(limiter::Algorithm::kFixedWindow, 30'000, 86'400 * limiter::kSecond);
  o.holders = 6;
  o.rates = {500, 900, 1200};  // 5,200 checks/s: the limit is reached after ~6 s
  o.demand_ms = 9'000;
  o.seed = seed;
  return o;
}

TEST(GrantCluster, AKilledHolderLosesOnlyTheUnusedPartOfItsSlices) {
  uint64_t lost = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ClusterOptions o = FaultRun(seed);
    o.crash_holder = 2;
    o.crash_at_ms = 2'000;
    const ClusterResult r = Cluster(o).Run();
    EXPECT_FALSE(r.over) << seed;
    EXPECT_EQ(r.stale_local, 0u) << seed;
    // Exact up to what the dead holder took with it: admitted = limit - its unused units.
    EXPECT_EQ(r.final_admitted + r.lost, 30'000u) << seed;
    EXPECT_GT(r.lost, 0u) << seed;          // it held a slice when it died
    EXPECT_LE(r.lost, 2 * 1'200u) << seed;  // at most its two slices of rate x term
    lost += r.lost;
  }
  std::printf("[ info ] killed holder: %llu units lost over 6 runs of 30,000\n",
              static_cast<unsigned long long>(lost));
}

TEST(GrantCluster, AHolderStoppedPastItsTermDecidesNothingFromItsSlices) {
  for (bool fence : {false, true}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      ClusterOptions o = FaultRun(seed);
      o.pause_holder = 1;
      o.pause_at_ms = 2'000;
      o.pause_for_ms = 3'000;  // past term + margin: the owner has reclaimed its slices when it resumes
      o.fence_on_resume = fence;
      const ClusterResult r = Cluster(o).Run();
      EXPECT_GT(r.deferred, 0u) << seed;   // the pause happened, with checks waiting for it
      EXPECT_GT(r.reclaimed, 0u) << seed;  // ... and the owner reclaimed what it held
      EXPECT_EQ(r.stale_local, 0u) << "fence " << fence << " seed " << seed;
      EXPECT_FALSE(r.over) << seed;
      EXPECT_EQ(r.final_admitted + r.lost, 30'000u) << seed;
    }
  }
}

TEST(GrantCluster, AnOwnerFailoverAdoptsTheSlicesOutAndStaysExact) {
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    ClusterOptions o = FaultRun(seed);
    o.failover_at_ms = 2'500;
    const ClusterResult r = Cluster(o).Run();
    EXPECT_FALSE(r.over) << seed;
    EXPECT_EQ(r.stale_local, 0u) << seed;
    EXPECT_EQ(r.final_admitted + r.lost, 30'000u) << seed;
  }
}

}  // namespace
}  // namespace ringlimit::cluster
