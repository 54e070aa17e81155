#include "replication/handoff_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ringlimit::replication {
namespace {

using namespace std::chrono_literals;
using ring::Token;
using ring::TokenRange;

RingPtr Ring(const std::vector<std::string>& ids, uint64_t version = 1) {
  std::vector<ring::RingMember> members;
  for (const std::string& id : ids) members.push_back({id, 16});
  return ring::RingView::Create(version, std::move(members)).value();
}

// A token in the middle of `range`.
Token Inside(const TokenRange& range) { return range.first + (range.last - range.first) / 2; }

// Whether `id` is in the preference list of length `r` of `t` on `ring`.
bool Holds(const ring::RingView& ring, std::string_view id, size_t r, Token t) {
  const auto list = ring.PreferenceList(t, r);
  return std::any_of(list.begin(), list.end(), [&](const ring::RingMember* m) { return m->id == id; });
}

// `ranges` (sorted) are the tokens where `in` holds, as far as 20,000 random tokens and both ends and the
// middle of every range (and the tokens just outside them) tell.
void ExpectExactly(const std::vector<TokenRange>& ranges, const std::function<bool(Token)>& in) {
  std::mt19937_64 random(7);
  for (int i = 0; i < 20'000; ++i) {
    const Token t = random();
    ASSERT_EQ(InSortedRanges(ranges, t), in(t)) << "token " << t;
  }
  for (const TokenRange& r : ranges) {
    for (Token t : {r.first, Inside(r), r.last}) ASSERT_TRUE(in(t)) << "token " << t;
    if (r.first > 0 && !InSortedRanges(ranges, r.first - 1)) {
      ASSERT_FALSE(in(r.first - 1));
    }
    if (r.last < UINT64_MAX && !InSortedRanges(ranges, r.last + 1)) {
      ASSERT_FALSE(in(r.last + 1));
    }
  }
}

class HandoffPlannerTest : public ::testing::Test {
 protected:
  ClusterView View(std::string_view self) {
    return ClusterView{self, nullptr,
                       [this](std::string_view id) { return !gone_.contains(std::string(id)); }, nullptr};
  }

  // Answers every push window of `a` (and those that follow at once) with `keys` keys, until none is left.
  static HandoffActions AckWindows(HandoffPlanner& p, MonoTime now, HandoffActions a, uint64_t keys = 10) {
    while (!a.push.empty()) {
      const PushWindow w = a.push.front();
      a = p.PushWindowDone(now, w.handoff, w.attempt, true, keys, 0);
    }
    return a;
  }

  // Runs every re-replication job to its end, each slice pushing nothing.
  static void DrainReplication(HandoffPlanner& p, MonoTime now) {
    for (int i = 0; i < 10'000; ++i) {
      HandoffActions a = p.ReplicationPump(now);
      if (!a.replicate.has_value()) return;
      static_cast<void>(p.ReplicationSliceScanned(now, a.replicate->job, 0, 0));
    }
    FAIL() << "re-replication does not end";
  }

  HandoffOptions Options() const {
    HandoffOptions o;
    o.replicas = 1;
    o.scan_slices = 4;
    return o;
  }

  // Three copies of every key, with take-over reads (majority acknowledgement).
  HandoffOptions ReadingOptions() const {
    HandoffOptions o = Options();
    o.replicas = 3;
    o.majority_read = true;
    return o;
  }

  MonoTime now_{1'000'000'000'000};
  std::set<std::string> gone_;  // unreachable members
};

// The outgoing side of a join, phase by phase: push windows, the switch (hold, fence), flush,
// HandoffDone, acknowledgement.
TEST_F(HandoffPlannerTest, JoinPushesThenSwitchesThenCompletes) {
  HandoffPlanner a("a", Options());
  const RingPtr one = Ring({"a"});
  const RingPtr two = Ring({"a", "b"}, 2);
  HandoffActions first = a.RingChanged(now_, View("a"), nullptr, one);
  EXPECT_EQ(first.ring, one);
  ASSERT_NE(first.overrides, nullptr);
  EXPECT_TRUE(first.overrides->empty());
  EXPECT_TRUE(first.push.empty());
  EXPECT_TRUE(first.send_done.empty());  // nobody else to tell

  HandoffActions change = a.RingChanged(now_, View("a"), one, two);
  EXPECT_EQ(change.ring, two);
  const std::vector<TokenRange> moved = two->Arcs("b");
  ASSERT_FALSE(moved.empty());
  // While pushing, a decides the moving ranges itself.
  ASSERT_NE(change.overrides, nullptr);
  ASSERT_EQ(change.overrides->entries.size(), moved.size());
  for (const auto& e : change.overrides->entries) {
    EXPECT_EQ(e.target, "a");
    EXPECT_FALSE(e.hold);
  }
  ASSERT_EQ(change.push.size(), 1u);  // one window at a time
  EXPECT_EQ(change.push[0].to, "b");
  EXPECT_EQ(change.push[0].ranges, moved);
  const uint64_t id = change.push[0].handoff;
  EXPECT_FALSE(a.Holding(Inside(moved[0])).has_value());
  auto views = a.Views(now_ + 1s);
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].phase, "pushing");
  EXPECT_DOUBLE_EQ(views[0].seconds, 1.0);

  // Every window acknowledged: the switch. The overrides name b and hold; the fence is asked for.
  HandoffActions switched = AckWindows(a, now_, change);
  ASSERT_EQ(switched.fence, std::vector<uint64_t>{id});
  ASSERT_NE(switched.overrides, nullptr);
  for (const auto& e : switched.overrides->entries) {
    EXPECT_EQ(e.target, "b");
    EXPECT_TRUE(e.hold);
  }
  EXPECT_EQ(a.Holding(Inside(moved[0])), id);
  EXPECT_EQ(a.Views(now_)[0].phase, "flushing");
  // A report of another phase is ignored.
  EXPECT_TRUE(a.FlushDone(now_, id, true).send_done.empty());

  HandoffActions flush = a.FenceDone(now_ + 10ms, id);
  ASSERT_EQ(flush.flush.size(), 1u);
  EXPECT_EQ(flush.flush[0].handoff, id);
  EXPECT_EQ(flush.flush[0].wait, HandoffPlanner::kMaxFlushWait);

  HandoffActions sent = a.FlushDone(now_ + 20ms, id, true);
  ASSERT_EQ(sent.send_done.size(), 1u);
  EXPECT_EQ(sent.send_done[0].handoff, id);
  EXPECT_EQ(sent.send_done[0].to, "b");
  EXPECT_EQ(sent.send_done[0].ranges, moved);
  EXPECT_EQ(sent.send_done[0].fingerprint, two->fingerprint());
  EXPECT_EQ(a.Views(now_)[0].phase, "done-sent");
  EXPECT_TRUE(a.Holding(Inside(moved[0])).has_value());

  HandoffActions done = a.DoneAcked(now_ + 30ms, id, true);
  EXPECT_EQ(done.resume, std::vector<uint64_t>{id});
  ASSERT_NE(done.overrides, nullptr);
  EXPECT_TRUE(done.overrides->empty());
  EXPECT_FALSE(a.Holding(Inside(moved[0])).has_value());
  EXPECT_TRUE(a.Views(now_).empty());
  EXPECT_EQ(a.stats().handoffs_completed, 1u);
  EXPECT_EQ(a.stats().handed_off_keys, sent.send_done[0].keys);
  EXPECT_EQ(a.stats().in_progress, 0u);
}

// The incoming side of a join: checks pass to the previous owner until its HandoffDone arrives; a
// joining node tells the others at once that it has nothing to hand off.
// The progress of a push: keys counted per window when it starts, each window's count replaced by the keys
// it sent once acknowledged; sent + left == total throughout, and sent == total at the switch.
TEST_F(HandoffPlannerTest, PushProgressCountsKeysSentAndLeft) {
  HandoffPlanner a("a", Options());
  const RingPtr one = Ring({"a"});
  const RingPtr three = Ring({"a", "b", "c"}, 2);
  static_cast<void>(a.RingChanged(now_, View("a"), nullptr, one));
  HandoffActions change = a.RingChanged(now_, View("a"), one, three);
  ASSERT_EQ(change.push.size(), 2u);  // one window at a time, to each of b and c
  ASSERT_EQ(change.count.size(), 2u);
  const CountKeys count = change.count[0];
  const PushWindow first = change.push[0];
  ASSERT_EQ(count.handoff, first.handoff);
  EXPECT_EQ(count.attempt, first.attempt);
  EXPECT_EQ(count.windows.front(), first.window);
  EXPECT_EQ(count.ranges, first.ranges);
  const size_t n = count.windows.size();
  ASSERT_GE(n, 2u) << "the arcs of one member span several windows";

  auto view_of = [&](uint64_t id) {
    for (const HandoffView& v : a.Views(now_)) {
      if (v.peer == first.to) return v;
    }
    ADD_FAILURE() << "no view of handoff " << id;
    return HandoffView{};
  };
  HandoffView v = view_of(first.handoff);
  EXPECT_EQ(v.windows_total, n);
  EXPECT_EQ(v.windows_done, 0u);
  EXPECT_EQ(v.keys_total, 0u);  // not counted yet
  EXPECT_DOUBLE_EQ(v.done, 0.0);

  std::vector<uint64_t> counts;
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    counts.push_back(10 * (i + 1));
    total += counts.back();
  }
  // Counts of another attempt, or of another number of windows, are ignored.
  static_cast<void>(a.KeysCounted(now_, first.handoff, first.attempt + 1000, counts));
  static_cast<void>(a.KeysCounted(now_, first.handoff, first.attempt, {1}));
  EXPECT_EQ(view_of(first.handoff).keys_total, 0u);
  static_cast<void>(a.KeysCounted(now_, first.handoff, first.attempt, counts));
  v = view_of(first.handoff);
  EXPECT_EQ(v.keys_total, total);
  EXPECT_EQ(v.keys_left, total);
  EXPECT_EQ(v.keys, 0u);
  EXPECT_DOUBLE_EQ(v.done, 0.0);
  EXPECT_EQ(a.stats().keys_left, total);  // c's handoff is not counted: it adds nothing

  // The first window sends 12 keys where 10 were counted (a key was added meanwhile).
  HandoffActions next = a.PushWindowDone(now_, first.handoff, first.attempt, true, 12, 1200);
  ASSERT_EQ(next.push.size(), 1u);
  v = view_of(first.handoff);
  EXPECT_EQ(v.windows_done, 1u);
  EXPECT_EQ(v.keys, 12u);
  EXPECT_EQ(v.bytes, 1200u);
  EXPECT_EQ(v.keys_total, total + 2);
  EXPECT_EQ(v.keys_left, total - 10);
  EXPECT_EQ(v.keys + v.keys_left, v.keys_total);
  EXPECT_DOUBLE_EQ(v.done, 12.0 / static_cast<double>(total + 2));
  EXPECT_EQ(a.stats().keys_left, total - 10);
  // A late count does not undo what an acknowledged window sent.
  static_cast<void>(a.KeysCounted(now_, first.handoff, first.attempt, counts));
  EXPECT_EQ(view_of(first.handoff).keys_total, total + 2);

  // Every other window sends what was counted: the switch shows everything sent.
  for (size_t i = 1; i < n; ++i) {
    ASSERT_EQ(next.push.size(), 1u);
    next = a.PushWindowDone(now_, first.handoff, first.attempt, true, counts[i], 100 * counts[i]);
  }
  EXPECT_EQ(next.fence, std::vector<uint64_t>{first.handoff});
  v = view_of(first.handoff);
  EXPECT_EQ(v.phase, "flushing");
  EXPECT_EQ(v.windows_done, n);
  EXPECT_EQ(v.keys, total + 2);
  EXPECT_EQ(v.bytes, 100 * (total + 2));
  EXPECT_EQ(v.keys_total, v.keys);
  EXPECT_EQ(v.keys_left, 0u);
  EXPECT_DOUBLE_EQ(v.done, 1.0);
  EXPECT_EQ(a.stats().keys_left, 0u);

  // A failed window: the push starts over, and its figures with it.
  const PushWindow other = change.push[1];
  static_cast<void>(a.KeysCounted(now_, other.handoff, other.attempt,
                                  std::vector<uint64_t>(change.count[1].windows.size(), 7)));
  EXPECT_GT(a.stats().keys_left, 0u);
  static_cast<void>(a.PushWindowDone(now_, other.handoff, other.attempt, false, 0, 0));
  EXPECT_EQ(a.stats().keys_left, 0u);
  for (const HandoffView& w : a.Views(now_)) {
    if (w.peer != other.to) continue;
    EXPECT_EQ(w.keys_total, 0u);
    EXPECT_DOUBLE_EQ(w.done, 0.0);
  }
}

TEST_F(HandoffPlannerTest, IncomingIsReleasedByHandoffDone) {
  HandoffPlanner b("b", Options());
  const RingPtr two = Ring({"a", "b"}, 2);
  HandoffActions joined = b.RingChanged(now_, View("b"), nullptr, two);
  const std::vector<TokenRange> mine = two->Arcs("b");
  ASSERT_NE(joined.overrides, nullptr);
  ASSERT_EQ(joined.overrides->entries.size(), mine.size());
  for (const auto& e : joined.overrides->entries) EXPECT_EQ(e.target, "a");
  ASSERT_EQ(joined.send_done.size(), 1u);
  EXPECT_EQ(joined.send_done[0].handoff, 0u);  // no answer expected
  EXPECT_EQ(joined.send_done[0].to, "a");
  EXPECT_EQ(joined.send_done[0].ranges, two->Arcs("a"));
  EXPECT_EQ(joined.wake_at, now_ + HandoffPlanner::kHandoffQueryAfter);
  ASSERT_EQ(b.Views(now_).size(), 1u);
  EXPECT_EQ(b.Views(now_)[0].direction, "in");

  // A HandoffDone of another sender releases nothing.
  HandoffActions other = b.HandoffDoneReceived(now_, "c", mine, two->fingerprint(), 0);
  EXPECT_EQ(other.overrides->entries.size(), mine.size());

  HandoffActions released = b.HandoffDoneReceived(now_ + 5ms, "a", mine, two->fingerprint(), 7, true);
  ASSERT_NE(released.overrides, nullptr);
  EXPECT_TRUE(released.overrides->empty());  // synced too: a held them synced
  // The released keys would be re-replicated by a job limited to them, but with R = 1 no key of b has a
  // member new to its preference list: nothing is scanned (ReplicationScansOnlyRangesWhoseHoldersChanged).
  EXPECT_FALSE(b.ReplicationPump(now_).replicate.has_value());
  EXPECT_EQ(b.stats().incoming_completed, mine.size());
  EXPECT_EQ(b.stats().incoming_abandoned, 0u);
  EXPECT_TRUE(b.Views(now_).empty());
}

TEST_F(HandoffPlannerTest, IncomingIsReleasedWhenThePreviousOwnerIsGone) {
  HandoffPlanner b("b", Options());
  const RingPtr two = Ring({"a", "b"}, 2);
  static_cast<void>(b.RingChanged(now_, View("b"), nullptr, two));
  EXPECT_FALSE(b.Views(now_).empty());
  EXPECT_EQ(b.MembersChanged(now_, View("b")).overrides, nullptr);  // a still there: nothing changes
  gone_.insert("a");
  HandoffActions released = b.MembersChanged(now_ + 1ms, View("b"));
  ASSERT_NE(released.overrides, nullptr);
  EXPECT_TRUE(released.overrides->entries.empty());
  EXPECT_EQ(released.overrides->unsynced, two->Arcs("b"));  // nobody pushed them: not decided here yet
  EXPECT_EQ(b.stats().incoming_abandoned, two->Arcs("b").size());
  EXPECT_TRUE(b.Views(now_).empty());
}

TEST_F(HandoffPlannerTest, IncomingIsReleasedAfterDoneTimeout) {
  HandoffPlanner b("b", Options());
  const RingPtr two = Ring({"a", "b"}, 2);
  HandoffActions joined = b.RingChanged(now_, View("b"), nullptr, two);
  ASSERT_EQ(joined.wake_at, now_ + HandoffPlanner::kHandoffQueryAfter);
  EXPECT_EQ(b.Timer(now_ + Options().done_timeout - 1ns, View("b")).overrides, nullptr);
  HandoffActions released = b.Timer(now_ + Options().done_timeout, View("b"));
  ASSERT_NE(released.overrides, nullptr);
  EXPECT_TRUE(released.overrides->entries.empty());
  EXPECT_EQ(b.stats().incoming_abandoned, two->Arcs("b").size());
  EXPECT_EQ(b.stats().incoming_completed, 0u);
}

// Members that saw different rings on the way to the same one (a partition healing) can each expect
// the other to hand a range over. An incoming range still waiting after kHandoffQueryAfter makes the node
// ask its previous owner; an owner that, on the same ring, neither owns the range nor hands it off has
// nothing (more) to push: the range is released at once, not after done_timeout.
TEST_F(HandoffPlannerTest, AWaitingRangeIsReleasedWhenItsPreviousOwnerDoesNotHandItOff) {
  HandoffPlanner b("b", Options());
  const RingPtr two = Ring({"a", "b"}, 2);
  const std::vector<TokenRange> mine = two->Arcs("b");
  HandoffActions joined = b.RingChanged(now_, View("b"), nullptr, two);
  // The joining node's sync round (its ranges are unsynced) asks a on its newest ring too; a, handing
  // them off, answers with its copy only.
  ASSERT_EQ(joined.pull.size(), 1u);
  EXPECT_EQ(joined.pull[0].fingerprint, two->fingerprint());
  EXPECT_EQ(
      b.SyncPulled(now_, joined.pull[0].round, "a", std::vector<TokenRange>{}, {}).overrides->entries.size(),
      mine.size());
  EXPECT_TRUE(b.Timer(now_ + HandoffPlanner::kHandoffQueryAfter - 1ns, View("b")).pull.empty());
  HandoffActions asked = b.Timer(now_ + HandoffPlanner::kHandoffQueryAfter, View("b"));
  ASSERT_EQ(asked.pull.size(), 1u);
  EXPECT_EQ(asked.pull[0].to, "a");
  EXPECT_EQ(asked.pull[0].ranges, mine);
  EXPECT_EQ(asked.pull[0].fingerprint, two->fingerprint());
  // One query at a time per previous owner.
  EXPECT_TRUE(b.Timer(now_ + 3 * HandoffPlanner::kHandoffQueryAfter, View("b")).pull.empty());

  // a, having handed b's ranges off on its way to `two`, is handing them: it says nothing of them.
  HandoffPlanner handing("a", Options());
  static_cast<void>(handing.RingChanged(now_, View("a"), Ring({"a"}, 1), two));
  EXPECT_TRUE(handing.NotHandedOf(mine, two->fingerprint()).empty());
  // a, having reached `two` another way (here: it joined it afresh), owns none of them and hands none off;
  // on another ring it says nothing.
  HandoffPlanner other_way("a", Options());
  static_cast<void>(other_way.RingChanged(now_, View("a"), nullptr, two));
  EXPECT_EQ(other_way.NotHandedOf(mine, two->fingerprint()), mine);
  EXPECT_TRUE(other_way.NotHandedOf(mine, two->fingerprint() + 1).empty());

  // Its answer releases the ranges (synced: it held them synced).
  HandoffActions released =
      b.SyncPulled(now_ + 3 * HandoffPlanner::kHandoffQueryAfter, asked.pull[0].round, "a", mine, mine);
  ASSERT_NE(released.overrides, nullptr);
  EXPECT_TRUE(released.overrides->empty());
  EXPECT_EQ(b.stats().incoming_completed, mine.size());
  EXPECT_EQ(b.stats().incoming_abandoned, 0u);
  EXPECT_TRUE(b.Views(now_).empty());
}

// A HandoffDone that arrives before its ring change is kept (for that ring only, for done_timeout).
TEST_F(HandoffPlannerTest, EarlyHandoffDoneIsKeptForItsRing) {
  const RingPtr one = Ring({"a"});
  const RingPtr two = Ring({"a", "b"}, 2);
  {
    HandoffPlanner b("b", Options());
    static_cast<void>(b.HandoffDoneReceived(now_, "a", two->Arcs("b"), two->fingerprint(), 3, true));
    HandoffActions joined = b.RingChanged(now_ + 1ms, View("b"), nullptr, two);
    EXPECT_TRUE(joined.overrides->empty());
    EXPECT_TRUE(b.Views(now_).empty());
    EXPECT_EQ(b.stats().incoming_completed, 1u);
  }
  {
    HandoffPlanner b("b", Options());  // the early HandoffDone names another ring: b waits
    static_cast<void>(b.HandoffDoneReceived(now_, "a", two->Arcs("b"), one->fingerprint(), 3));
    static_cast<void>(b.RingChanged(now_ + 1ms, View("b"), nullptr, two));
    EXPECT_EQ(b.Views(now_).size(), 1u);
  }
  {
    HandoffPlanner b("b", Options());  // expired before the ring change came
    HandoffActions early = b.HandoffDoneReceived(now_, "a", two->Arcs("b"), two->fingerprint(), 3);
    EXPECT_EQ(early.wake_at, now_ + Options().done_timeout);
    EXPECT_FALSE(b.Timer(now_ + Options().done_timeout, View("b")).wake_at.has_value());
    static_cast<void>(b.RingChanged(now_ + Options().done_timeout, View("b"), nullptr, two));
    EXPECT_EQ(b.Views(now_).size(), 1u);
  }
}

// A failed window restarts the push after kRetryDelay, as a new attempt: the old attempt's late
// answers are ignored. push_timeout abandons it.
TEST_F(HandoffPlannerTest, PushRetriesThenTimesOut) {
  HandoffPlanner a("a", Options());
  const RingPtr one = Ring({"a"});
  const RingPtr two = Ring({"a", "b"}, 2);
  static_cast<void>(a.RingChanged(now_, View("a"), nullptr, one));
  HandoffActions change = a.RingChanged(now_, View("a"), one, two);
  ASSERT_EQ(change.push.size(), 1u);
  const PushWindow w = change.push[0];
  HandoffActions failed = a.PushWindowDone(now_ + 1ms, w.handoff, w.attempt, false, 5, 0);
  EXPECT_TRUE(failed.push.empty());
  EXPECT_EQ(failed.wake_at, now_ + 1ms + HandoffPlanner::kRetryDelay);
  EXPECT_EQ(a.Views(now_)[0].phase, "pushing");
  EXPECT_TRUE(a.Timer(now_ + 100ms, View("a")).push.empty());  // not yet

  HandoffActions retry = a.Timer(now_ + 1ms + HandoffPlanner::kRetryDelay, View("a"));
  ASSERT_EQ(retry.push.size(), 1u);
  EXPECT_EQ(retry.push[0].handoff, w.handoff);
  EXPECT_NE(retry.push[0].attempt, w.attempt);
  EXPECT_EQ(retry.push[0].window, w.window);  // from the first window again
  // The first attempt's late answer changes nothing.
  HandoffActions stale = a.PushWindowDone(now_ + 300ms, w.handoff, w.attempt, true, 5, 0);
  EXPECT_TRUE(stale.push.empty());
  EXPECT_TRUE(stale.fence.empty());

  HandoffActions timeout = a.Timer(now_ + Options().push_timeout, View("a"));
  ASSERT_NE(timeout.overrides, nullptr);
  EXPECT_TRUE(timeout.overrides->empty());
  EXPECT_TRUE(timeout.resume.empty());  // nothing was held: it never switched
  EXPECT_EQ(a.stats().handoffs_failed, 1u);
  EXPECT_TRUE(a.Views(now_).empty());
}

TEST_F(HandoffPlannerTest, UnreachableTargetFailsAtOnce) {
  HandoffPlanner a("a", Options());
  const RingPtr one = Ring({"a"});
  static_cast<void>(a.RingChanged(now_, View("a"), nullptr, one));
  gone_.insert("b");
  HandoffActions change = a.RingChanged(now_, View("a"), one, Ring({"a", "b"}, 2));
  EXPECT_TRUE(change.push.empty());
  ASSERT_NE(change.overrides, nullptr);
  EXPECT_TRUE(change.overrides->empty());
  EXPECT_EQ(a.stats().handoffs_failed, 1u);
}

// An unacknowledged HandoffDone is sent again while the target is reachable; the switch holds
// meanwhile. When the target goes, the handoff is abandoned and its held checks resumed.
TEST_F(HandoffPlannerTest, HandoffDoneIsRetriedWhileTheTargetIsReachable) {
  HandoffPlanner a("a", Options());
  const RingPtr one = Ring({"a"});
  const RingPtr two = Ring({"a", "b"}, 2);
  static_cast<void>(a.RingChanged(now_, View("a"), nullptr, one));
  HandoffActions switched = AckWindows(a, now_, a.RingChanged(now_, View("a"), one, two));
  const uint64_t id = switched.fence.at(0);
  static_cast<void>(a.FenceDone(now_, id));
  ASSERT_EQ(a.FlushDone(now_, id, false).send_done.size(), 1u);  // a failed flush still sends
  HandoffActions lost = a.DoneAcked(now_ + 1ms, id, false);
  EXPECT_TRUE(lost.resume.empty());
  EXPECT_EQ(lost.wake_at, now_ + 1ms + HandoffPlanner::kRetryDelay);
  EXPECT_EQ(a.Views(now_)[0].phase, "done-sent");
  EXPECT_TRUE(a.Holding(Inside(two->Arcs("b")[0])).has_value());
  HandoffActions again = a.Timer(now_ + 1ms + HandoffPlanner::kRetryDelay, View("a"));
  ASSERT_EQ(again.send_done.size(), 1u);
  EXPECT_EQ(again.send_done[0].handoff, id);
  ASSERT_TRUE(a.DoneAcked(now_ + 2ms, id, false).resume.empty());
  gone_.insert("b");
  HandoffActions abandoned = a.MembersChanged(now_ + 3ms, View("a"));
  EXPECT_EQ(abandoned.resume, std::vector<uint64_t>{id});
  EXPECT_TRUE(abandoned.overrides->empty());
  EXPECT_EQ(a.stats().handoffs_failed, 1u);
}

// A ring change that takes the ranges back before the handoff finished supersedes it: neither end
// pushes or waits for them; a switch in progress resumes its held checks.
TEST_F(HandoffPlannerTest, LaterRingChangeSupersedesAHandoff) {
  const RingPtr one = Ring({"a"}, 1);
  const RingPtr two = Ring({"a", "b"}, 2);
  const RingPtr back = Ring({"a"}, 3);
  {
    HandoffPlanner a("a", Options());  // mid-push
    static_cast<void>(a.RingChanged(now_, View("a"), nullptr, one));
    HandoffActions change = a.RingChanged(now_, View("a"), one, two);
    const PushWindow w = change.push.at(0);
    HandoffActions superseded = a.RingChanged(now_ + 1ms, View("a"), two, back);
    EXPECT_EQ(superseded.ring, back);
    EXPECT_TRUE(superseded.overrides->empty());
    EXPECT_TRUE(superseded.resume.empty());
    EXPECT_TRUE(superseded.push.empty());
    EXPECT_EQ(a.stats().handoffs_failed, 1u);
    EXPECT_TRUE(a.Views(now_).empty());
    HandoffActions late = a.PushWindowDone(now_ + 2ms, w.handoff, w.attempt, true, 1, 0);
    EXPECT_TRUE(late.push.empty());
    EXPECT_TRUE(late.fence.empty());
  }
  {
    HandoffPlanner a("a", Options());  // mid-switch
    static_cast<void>(a.RingChanged(now_, View("a"), nullptr, one));
    const uint64_t id = AckWindows(a, now_, a.RingChanged(now_, View("a"), one, two)).fence.at(0);
    HandoffActions superseded = a.RingChanged(now_ + 1ms, View("a"), two, back);
    EXPECT_EQ(superseded.resume, std::vector<uint64_t>{id});
    EXPECT_TRUE(superseded.overrides->empty());
    EXPECT_TRUE(a.FenceDone(now_ + 2ms, id).flush.empty());
  }
  {
    HandoffPlanner b("b", Options());  // the incoming end: what b never got, it does not push back
    static_cast<void>(b.RingChanged(now_, View("b"), nullptr, two));
    HandoffActions superseded = b.RingChanged(now_ + 1ms, View("b"), two, back);
    EXPECT_TRUE(superseded.overrides->empty());
    EXPECT_TRUE(superseded.push.empty());
    EXPECT_TRUE(b.Views(now_).empty());
  }
}

// Graceful leave: every range goes to its owner on the ring without this node; a range handed over is
// routed there at once; the end is reported once.
TEST_F(HandoffPlannerTest, LeaveHandsEverythingOver) {
  HandoffPlanner c("c", Options());
  const RingPtr three = Ring({"a", "b", "c"}, 3);
  const RingPtr without = Ring({"a", "b"}, 3);
  static_cast<void>(c.RingChanged(now_, View("c"), nullptr, three));
  static_cast<void>(c.HandoffDoneReceived(now_, "a", three->Arcs("c"), three->fingerprint(), 0));
  static_cast<void>(c.HandoffDoneReceived(now_, "b", three->Arcs("c"), three->fingerprint(), 0));
  ASSERT_TRUE(c.Views(now_).empty());

  std::optional<HandoffActions> leave = c.Leave(now_, View("c"), nullptr);
  ASSERT_TRUE(leave.has_value());
  EXPECT_FALSE(c.Leave(now_, View("c"), nullptr).has_value());  // a second leave is refused
  ASSERT_EQ(leave->push.size(), 2u);                            // to a and to b
  ASSERT_NE(leave->overrides, nullptr);
  ASSERT_NE(leave->overrides->left_ring, nullptr);
  EXPECT_EQ(leave->overrides->left_ring->fingerprint(), without->fingerprint());

  std::vector<uint64_t> ids;
  for (const PushWindow& w : leave->push) {
    HandoffActions a = AckWindows(c, now_, c.PushWindowDone(now_, w.handoff, w.attempt, true, 1, 0));
    ids.push_back(a.fence.at(0));
  }
  for (uint64_t id : ids) {
    static_cast<void>(c.FenceDone(now_, id));
    HandoffActions sent = c.FlushDone(now_, id, true);
    ASSERT_EQ(sent.send_done.size(), 1u);
    EXPECT_EQ(sent.send_done[0].fingerprint, without->fingerprint());
  }
  HandoffActions first = c.DoneAcked(now_, ids[0], true);
  EXPECT_FALSE(first.leave_done.has_value());
  HandoffActions last = c.DoneAcked(now_, ids[1], true);
  EXPECT_EQ(last.leave_done, true);
  ASSERT_NE(last.overrides, nullptr);
  EXPECT_TRUE(last.overrides->entries.empty());
  ASSERT_NE(last.overrides->left_ring, nullptr);
  // After the leave, a later ring keeps routing every check to the others.
  HandoffActions later = c.RingChanged(now_, View("c"), three, Ring({"a", "b", "c", "d"}, 4));
  EXPECT_TRUE(later.push.empty());
  ASSERT_NE(later.overrides->left_ring, nullptr);
  EXPECT_EQ(later.overrides->left_ring->Find("c"), nullptr);
}

TEST_F(HandoffPlannerTest, LeaveWithNothingToHandOffEndsAtOnce) {
  HandoffPlanner a("a", Options());
  std::optional<HandoffActions> leave = a.Leave(now_, View("a"), Ring({"a"}));
  ASSERT_TRUE(leave.has_value());
  EXPECT_EQ(leave->leave_done, true);
  EXPECT_TRUE(leave->push.empty());
}

// A member that restarted without leaving the ring is handed its ranges back (the cluster reports it as
// a change from the ring without it): its current owner pushes them.
TEST_F(HandoffPlannerTest, RestartedMemberIsHandedItsRangesBack) {
  HandoffPlanner a("a", Options());
  const RingPtr two = Ring({"a", "b"}, 2);
  static_cast<void>(a.RingChanged(now_, View("a"), nullptr, two));
  HandoffActions restart = a.RingChanged(now_ + 1s, View("a"), Ring({"a"}, 0), two);
  EXPECT_EQ(restart.ring, two);
  ASSERT_EQ(restart.push.size(), 1u);
  EXPECT_EQ(restart.push[0].to, "b");
  EXPECT_EQ(restart.push[0].ranges, two->Arcs("b"));
}

// After a ring change the owner pushes each key to the members new in its preference list, one slice
// per pump; the next slice waits until the pushes of the previous one are answered.
TEST_F(HandoffPlannerTest, ReplicatesToNewPreferenceListMembers) {
  HandoffOptions options = Options();
  options.replicas = 2;
  HandoffPlanner a("a", options);
  const RingPtr two = Ring({"a", "b"}, 2);
  const RingPtr three = Ring({"a", "b", "c"}, 3);
  static_cast<void>(a.RingChanged(now_, View("a"), nullptr, two));
  static_cast<void>(a.HandoffDoneReceived(now_, "b", two->Arcs("a"), two->fingerprint(), 0));
  DrainReplication(a, now_);
  static_cast<void>(a.RingChanged(now_, View("a"), two, three));
  HandoffActions pump = a.ReplicationPump(now_);
  ASSERT_TRUE(pump.replicate.has_value());
  const ReplicateSlice& slice = *pump.replicate;
  // The first slice with a key whose preference list gained c; only those tokens of it are read.
  ASSERT_TRUE(slice.limit.has_value());
  const std::vector<TokenRange> moved = ReplicationRanges(*two, *three, "a", 2);
  EXPECT_EQ(*slice.limit, ScanParts(slice.slice, moved));
  EXPECT_FALSE(slice.limit->empty());
  EXPECT_EQ(slice.before, two);
  EXPECT_EQ(slice.after, three);
  EXPECT_FALSE(pump.pump);  // one slice at a time
  HandoffActions scanned = a.ReplicationSliceScanned(now_, slice.job, 2, 11);
  EXPECT_FALSE(scanned.pump);  // waits for the two pushes
  EXPECT_FALSE(a.ReplicationPushDone(now_, slice.job, 5, true).pump);
  EXPECT_TRUE(a.ReplicationPushDone(now_, slice.job, 6, false).pump);
  EXPECT_EQ(a.stats().rereplicated_keys, 5u);
  EXPECT_EQ(a.stats().scanned_states, 11u);

  // Which keys go where: a key a owns on both rings goes to c if c joined its preference list.
  auto yes = [](std::string_view) { return true; };
  int checked = 0;
  for (Token t = 0; checked < 200 && t < (Token{1} << 63); t += Token{1} << 52) {
    const auto before = two->PreferenceList(t, 2);
    const auto after = three->PreferenceList(t, 2);
    if (!InSortedRanges({slice.slice}, t)) continue;  // the driver scans only the slice
    if (!InSortedRanges(*slice.limit, t)) {  // not read: nobody joined its preference list, or a not owner
      EXPECT_TRUE(ReplicationTargets(slice, "a", 2, t, yes).empty());
      continue;
    }
    const std::vector<std::string> targets = ReplicationTargets(slice, "a", 2, t, yes);
    if (after[0]->id != "a") {
      EXPECT_TRUE(targets.empty());
      continue;
    }
    ++checked;
    std::vector<std::string> expected;
    for (const ring::RingMember* m : after) {
      if (m->id == "a") continue;
      if (std::none_of(before.begin(), before.end(),
                       [&](const ring::RingMember* b) { return b->id == m->id; }))
        expected.push_back(m->id);
    }
    EXPECT_EQ(targets, expected);
    EXPECT_TRUE(ReplicationTargets(slice, "a", 2, t, [](std::string_view) { return false; }).empty());
  }
  EXPECT_GT(checked, 0);
}

// The drop: drop_delay after the last ring change, only with no handoff or re-replication in progress.
TEST_F(HandoffPlannerTest, DropsOnlyAfterDropDelayWithNothingInProgress) {
  HandoffOptions options = Options();
  // The full scan: every ring change re-replicates (b's keys have nobody new to go to with R = 1, so only
  // the full scan has anything to run here), and every drop reads every token.
  options.scan_moved_only = false;
  HandoffPlanner b("b", options);
  const RingPtr two = Ring({"a", "b"}, 2);
  HandoffActions joined = b.RingChanged(now_, View("b"), nullptr, two);
  EXPECT_EQ(joined.wake_at, now_ + HandoffPlanner::kHandoffQueryAfter);  // not the drop: b waits for a
  EXPECT_FALSE(b.Timer(now_ + options.drop_delay, View("b")).drop.has_value());
  static_cast<void>(
      b.HandoffDoneReceived(now_ + options.drop_delay, "a", two->Arcs("b"), two->fingerprint(), 0, true));
  EXPECT_FALSE(b.Timer(now_ + options.drop_delay, View("b")).drop.has_value());  // re-replication still runs
  DrainReplication(b, now_ + options.drop_delay);
  HandoffActions idle = b.Timer(now_ + options.drop_delay + 1ms, View("b"));
  ASSERT_TRUE(idle.drop.has_value());
  EXPECT_EQ(idle.drop->ring, two);
  EXPECT_FALSE(idle.drop->ranges.has_value());  // the first drop since the start reads every token
  EXPECT_FALSE(idle.wake_at.has_value());
  static_cast<void>(b.Dropped(now_ + options.drop_delay + 2ms, 42, 100));
  EXPECT_EQ(b.stats().dropped_states, 42u);
  EXPECT_EQ(b.stats().scanned_states, 100u);
  EXPECT_FALSE(b.Timer(now_ + 1h, View("b")).drop.has_value());  // once per ring change

  // A ring change restarts the delay.
  HandoffActions change = b.RingChanged(now_ + 2h, View("b"), two, two);
  EXPECT_EQ(change.wake_at, now_ + 2h + options.drop_delay);
  EXPECT_FALSE(b.Timer(now_ + 2h + options.drop_delay - 1ns, View("b")).drop.has_value());
  EXPECT_TRUE(b.Timer(now_ + 2h + options.drop_delay, View("b")).drop.has_value());
}

// Issue 33 item 5: after a join, each owner's re-replication reads only the tokens it owns whose preference
// list gained a member, yet every key still reaches each member new to its preference list: the owners on
// the new ring (the old members, and the joining one once its ranges are released) send each key to
// exactly those members, and no key whose holders did not change is read. The full scan
// (scan_moved_only = false) reads every slice. 3 -> 4 and 4 -> 5 members, R = 3.
TEST_F(HandoffPlannerTest, ReplicationScansOnlyRangesWhoseHoldersChanged) {
  for (size_t n : {3u, 4u}) {
    std::vector<std::string> ids;
    for (size_t i = 0; i < n; ++i) ids.push_back(std::string(1, static_cast<char>('a' + i)));
    std::vector<std::string> grown = ids;
    grown.push_back(std::string(1, static_cast<char>('a' + n)));
    const RingPtr before = Ring(ids, 1);
    const RingPtr after = Ring(grown, 2);
    // The slices each member's planner asks to scan after the join.
    auto slices_of = [&](const std::string& id, const HandoffOptions& options) {
      HandoffPlanner p(id, options);
      const MonoTime later = now_ + 1s;
      if (id != grown.back()) {  // an old member: on `before` first, its ranges received
        static_cast<void>(p.RingChanged(now_, View(id), nullptr, before));
        for (const std::string& other : ids) {
          static_cast<void>(
              p.HandoffDoneReceived(now_, other, before->Arcs(id), before->fingerprint(), 0, true));
        }
        DrainReplication(p, now_);
        static_cast<void>(p.RingChanged(later, View(id), before, after));
      } else {  // the joining member: its ranges released (re-replicated from then on)
        static_cast<void>(p.RingChanged(later, View(id), nullptr, after));
        for (const std::string& other : ids) {
          static_cast<void>(
              p.HandoffDoneReceived(later, other, after->Arcs(id), after->fingerprint(), 0, true));
        }
      }
      std::vector<ReplicateSlice> slices;
      for (int i = 0; i < 10'000; ++i) {
        HandoffActions a = p.ReplicationPump(later);
        if (!a.replicate.has_value()) break;
        slices.push_back(*a.replicate);
        static_cast<void>(p.ReplicationSliceScanned(later, a.replicate->job, 0, 0));
      }
      return slices;
    };
    HandoffOptions options;
    options.replicas = 3;
    std::map<std::string, std::vector<ReplicateSlice>> slices;
    for (const std::string& id : grown) slices[id] = slices_of(id, options);
    // The slice of `id` that reads `t`, or null.
    auto reader = [&](const std::string& id, Token t) -> const ReplicateSlice* {
      for (const ReplicateSlice& s : slices[id]) {
        if (s.limit.has_value() && InSortedRanges(*s.limit, t)) return &s;
      }
      return nullptr;
    };
    auto yes = [](std::string_view) { return true; };
    std::mt19937_64 random(n);
    int moved = 0;
    for (int i = 0; i < 20'000; ++i) {
      const Token t = random();
      const std::string owner = after->Owner(t)->id;
      std::vector<std::string> joined;  // members new to t's preference list, but its owner
      for (const ring::RingMember* m : after->PreferenceList(t, 3)) {
        if (m->id != owner && !Holds(*before, m->id, 3, t)) joined.push_back(m->id);
      }
      for (const std::string& id : grown) {
        ASSERT_EQ(reader(id, t) != nullptr, id == owner && !joined.empty())
            << id << " reads token " << t << " (owner " << owner << ", " << joined.size() << " joined)";
      }
      if (joined.empty()) continue;
      ++moved;
      EXPECT_EQ(ReplicationTargets(*reader(owner, t), owner, 3, t, yes), joined) << "token " << t;
    }
    EXPECT_GT(moved, 1'000);
    // What "a" reads: well under the whole ring; the full scan reads every slice of it.
    double read = 0;
    for (const ReplicateSlice& s : slices["a"]) {
      for (const TokenRange& r : *s.limit) read += r.Fraction();
    }
    HandoffOptions full = options;
    full.scan_moved_only = false;
    const std::vector<ReplicateSlice> all = slices_of("a", full);
    ASSERT_EQ(all.size(), full.scan_slices);
    for (const ReplicateSlice& s : all) EXPECT_FALSE(s.limit.has_value());
    std::printf("%zu -> %zu members: a's re-replication reads %.3f of the ring (the full scan: 1)\n", n,
                n + 1, read);
    EXPECT_GT(read, 0.02);
    EXPECT_LT(read, 0.3);
  }
}

// ReplicationRanges is exactly where ReplicationTargets can name a member, for any ring change: members
// joining, leaving, or both in one change, several at once, R = 1 to 3 -- so a scan limited to it pushes
// what the full scan pushes. Tokens at both ends of every range and just outside are checked (a range's
// ends are vnode positions of either ring), with 20,000 random ones.
TEST(ReplicationRangesTest, AreWhereReplicationTargetsNameAnyoneOnAnyRingChange) {
  std::mt19937_64 random(99);
  const std::vector<std::string> pool{"a", "b", "c", "d", "e", "f", "g"};
  int changes = 0;
  while (changes < 120) {
    std::vector<std::string> before_ids;
    std::vector<std::string> after_ids;
    for (const std::string& id : pool) {
      if (random() % 2 == 0) before_ids.push_back(id);
      if (random() % 2 == 0) after_ids.push_back(id);
    }
    if (before_ids.empty() || after_ids.empty() || before_ids == after_ids) continue;
    ++changes;
    const RingPtr before = Ring(before_ids, 1);
    const RingPtr after = Ring(after_ids, 2);
    const uint32_t replicas = 1 + static_cast<uint32_t>(random() % 3);
    const std::string self = after_ids[random() % after_ids.size()];
    ReplicateSlice all;  // the whole token space, no limit: the full scan
    all.slice = {0, UINT64_MAX};
    all.before = before;
    all.after = after;
    SCOPED_TRACE(::testing::Message() << "change " << changes << ": " << before_ids.size() << " -> "
                                      << after_ids.size() << " members, self " << self << ", R " << replicas);
    ExpectExactly(ReplicationRanges(*before, *after, self, replicas), [&](Token t) {
      return !ReplicationTargets(all, self, replicas, t, [](std::string_view) { return true; }).empty();
    });
    if (HasFatalFailure()) return;
  }
}

// The drop after a change reads only the ranges held on the rings left behind since the last drop and no
// longer held (two changes before a drop: both rings' ranges), never a range held on the newest ring.
TEST_F(HandoffPlannerTest, DropReadsOnlyRangesNoLongerHeld) {
  HandoffOptions options;
  options.replicas = 3;
  HandoffPlanner a("a", options);
  const RingPtr three = Ring({"a", "b", "c"}, 1);
  const RingPtr four = Ring({"a", "b", "c", "d"}, 2);
  const RingPtr five = Ring({"a", "b", "c", "d", "e"}, 3);
  static_cast<void>(a.RingChanged(now_, View("a"), nullptr, three));
  for (const char* other : {"b", "c"}) {
    static_cast<void>(a.HandoffDoneReceived(now_, other, three->Arcs("a"), three->fingerprint(), 0, true));
  }
  DrainReplication(a, now_);
  HandoffActions first = a.Timer(now_ + options.drop_delay, View("a"));
  ASSERT_TRUE(first.drop.has_value());
  EXPECT_FALSE(first.drop->ranges.has_value());  // since the start: every token
  static_cast<void>(a.Dropped(now_ + options.drop_delay, 0, 0));
  // The same ring again (a restart noticed): nothing left a, nothing to read.
  static_cast<void>(a.RingChanged(now_ + 1min, View("a"), three, three));
  EXPECT_FALSE(a.Timer(now_ + 1min + options.drop_delay, View("a")).drop.has_value());

  gone_ = {"d", "e"};  // a's handoffs to them fail at once: the drop is not held up
  MonoTime t = now_ + 1h;
  static_cast<void>(a.RingChanged(t, View("a"), three, four));
  DrainReplication(a, t);
  HandoffActions one = a.Timer(t + options.drop_delay, View("a"));
  ASSERT_TRUE(one.drop.has_value());
  EXPECT_EQ(one.drop->ring, four);
  ASSERT_TRUE(one.drop->ranges.has_value());
  ExpectExactly(*one.drop->ranges,
                [&](Token x) { return Holds(*three, "a", 3, x) && !Holds(*four, "a", 3, x); });
  static_cast<void>(a.Dropped(t + options.drop_delay, 0, 0));

  // Two changes (e joins, then b is gone), then one drop: what either ring left behind held, and the
  // newest does not.
  gone_.insert("b");  // a's incoming ranges from b are released at once
  const RingPtr without_b = Ring({"a", "c", "d", "e"}, 4);
  t += 1h;
  static_cast<void>(a.RingChanged(t, View("a"), four, five));
  static_cast<void>(a.RingChanged(t + 1s, View("a"), five, without_b));
  DrainReplication(a, t + 1s);
  HandoffActions two = a.Timer(t + 1s + options.drop_delay, View("a"));
  ASSERT_TRUE(two.drop.has_value());
  ASSERT_TRUE(two.drop->ranges.has_value());
  ExpectExactly(*two.drop->ranges, [&](Token x) {
    return (Holds(*four, "a", 3, x) || Holds(*five, "a", 3, x)) && !Holds(*without_b, "a", 3, x);
  });
}

TEST(HandoffOptionsValidateTest, RejectsWhatViolatesRequires) {
  EXPECT_TRUE(Validate(HandoffOptions{}).ok());
  HandoffOptions o;
  o.push_timeout = 0ms;
  EXPECT_FALSE(Validate(o).ok());
  o = {};
  o.drop_delay = -1ms;
  EXPECT_FALSE(Validate(o).ok());
}

// ------------------------------------------------------------------------------------- unsynced ranges

// Every range a joining node holds is unsynced until a holder with its copy pushed it: the node asks
// each holder, and one answer "synced" is enough.
TEST_F(HandoffPlannerTest, AJoiningNodePullsTheRangesItHolds) {
  HandoffOptions options = Options();
  options.replicas = 2;
  HandoffPlanner c("c", options);
  const RingPtr three = Ring({"a", "b", "c"}, 3);
  const std::vector<TokenRange> held = three->HeldRanges("c", 2);
  HandoffActions joined = c.RingChanged(now_, View("c"), nullptr, three);
  ASSERT_NE(joined.overrides, nullptr);
  EXPECT_EQ(joined.overrides->unsynced, held);
  EXPECT_TRUE(c.Unsynced(Inside(held[0])));
  ASSERT_EQ(joined.pull.size(), 2u);  // a and b hold everything on the ring without c
  std::set<std::string> asked;
  for (const PullSync& p : joined.pull) {
    asked.insert(p.to);
    EXPECT_EQ(p.ranges, held);
  }
  EXPECT_EQ(asked, (std::set<std::string>{"a", "b"}));
  const uint64_t round = joined.pull[0].round;
  // A stale answer (another round) changes nothing.
  EXPECT_EQ(c.SyncPulled(now_, round + 100, "a", held).overrides, nullptr);
  // a holds them synced; the round ends with b's answer (here: b failed).
  EXPECT_EQ(c.SyncPulled(now_ + 1ms, round, "a", held).overrides, nullptr);
  HandoffActions synced = c.SyncPulled(now_ + 2ms, round, "b", std::nullopt);
  ASSERT_NE(synced.overrides, nullptr);
  EXPECT_TRUE(synced.overrides->unsynced.empty());
  EXPECT_FALSE(c.Unsynced(Inside(held[0])));
  EXPECT_EQ(c.stats().unsynced_ranges, 0u);
  EXPECT_GT(c.stats().synced_ranges, 0u);
  EXPECT_EQ(c.SyncedOf({{0, ~Token{0}}}), held);
}

// A cluster that starts (or a range whose every copy is gone): every holder answers, none with the copy --
// nothing to wait for.
TEST_F(HandoffPlannerTest, RangesAreSyncedWhenEveryHolderAnsweredWithoutACopy) {
  HandoffOptions options = Options();
  options.replicas = 2;
  HandoffPlanner c("c", options);
  const RingPtr three = Ring({"a", "b", "c"}, 3);
  HandoffActions joined = c.RingChanged(now_, View("c"), nullptr, three);
  ASSERT_EQ(joined.pull.size(), 2u);
  static_cast<void>(c.SyncPulled(now_, joined.pull[0].round, "a", std::vector<TokenRange>{}));
  HandoffActions synced = c.SyncPulled(now_, joined.pull[0].round, "b", std::vector<TokenRange>{});
  ASSERT_NE(synced.overrides, nullptr);
  EXPECT_TRUE(synced.overrides->unsynced.empty());
}

// A node that becomes a holder after the range's previous holders were declared dead: they may hold
// admissions nobody else has, so it stays unsynced (its keys are not decided here) until one answers,
// or until resync_timeout.
TEST_F(HandoffPlannerTest, ANewHolderWhosePreviousHoldersAreGoneStaysUnsynced) {
  HandoffOptions options = Options();
  options.replicas = 1;
  HandoffPlanner a("a", options);
  const RingPtr one = Ring({"a"}, 1);
  const RingPtr two = Ring({"a", "b"}, 2);
  const RingPtr back = Ring({"a"}, 3);
  HandoffActions alone = a.RingChanged(now_, View("a"), nullptr, one);
  ASSERT_NE(alone.overrides, nullptr);
  EXPECT_TRUE(alone.overrides->unsynced.empty());  // nobody else holds anything: synced at once
  HandoffActions joined = AckWindows(a, now_, a.RingChanged(now_, View("a"), one, two));
  // b's handoff is done; then b is declared dead: its ranges come back to a without b's admissions.
  ASSERT_EQ(joined.fence.size(), 1u);
  const uint64_t id = joined.fence[0];
  static_cast<void>(a.FenceDone(now_, id));
  static_cast<void>(a.FlushDone(now_, id, true));
  static_cast<void>(a.DoneAcked(now_, id, true));
  gone_.insert("b");
  const MonoTime dead = now_ + 3s;
  HandoffActions lost = a.RingChanged(dead, View("a"), two, back);
  ASSERT_NE(lost.overrides, nullptr);
  EXPECT_EQ(lost.overrides->unsynced, two->Arcs("b"));
  EXPECT_TRUE(lost.pull.empty());  // b is out of reach: nobody to ask
  ASSERT_TRUE(lost.wake_at.has_value());
  // Retried while b stays away; expired at resync_timeout.
  HandoffActions retry = a.Timer(*lost.wake_at, View("a"));
  EXPECT_TRUE(retry.pull.empty());
  EXPECT_EQ(retry.overrides, nullptr);
  HandoffActions expired = a.Timer(dead + options.resync_timeout, View("a"));
  ASSERT_NE(expired.overrides, nullptr);
  EXPECT_TRUE(expired.overrides->unsynced.empty());
  EXPECT_EQ(a.stats().resync_expired, two->Arcs("b").size());
}

// The previous owner's HandoffDone syncs the ranges only when it held them synced itself.
TEST_F(HandoffPlannerTest, HandoffDoneSyncsOnlyWhenItsSenderWasSynced) {
  HandoffPlanner b("b", Options());
  const RingPtr two = Ring({"a", "b"}, 2);
  HandoffActions joined = b.RingChanged(now_, View("b"), nullptr, two);
  ASSERT_EQ(joined.overrides->unsynced, two->Arcs("b"));
  HandoffActions unsure = b.HandoffDoneReceived(now_, "a", two->Arcs("b"), two->fingerprint(), 0, false);
  EXPECT_TRUE(unsure.overrides->entries.empty());  // released, but not synced
  EXPECT_EQ(unsure.overrides->unsynced, two->Arcs("b"));
  HandoffPlanner b2("b", Options());
  static_cast<void>(b2.RingChanged(now_, View("b"), nullptr, two));
  HandoffActions sure = b2.HandoffDoneReceived(now_, "a", two->Arcs("b"), two->fingerprint(), 0, true);
  EXPECT_TRUE(sure.overrides->empty());
}

// An outgoing HandoffDone says whether this node held the ranges synced.
TEST_F(HandoffPlannerTest, OutgoingHandoffDoneCarriesWhetherTheRangesWereSynced) {
  HandoffPlanner a("a", Options());
  const RingPtr one = Ring({"a"}, 1);
  const RingPtr two = Ring({"a", "b"}, 2);
  static_cast<void>(a.RingChanged(now_, View("a"), nullptr, one));
  const uint64_t id = AckWindows(a, now_, a.RingChanged(now_, View("a"), one, two)).fence.at(0);
  static_cast<void>(a.FenceDone(now_, id));
  HandoffActions sent = a.FlushDone(now_, id, true);
  ASSERT_EQ(sent.send_done.size(), 1u);
  EXPECT_TRUE(sent.send_done[0].synced);
}

// ------------------------------------------------------------------------------------- take-over reads

// Answers every pull of `a` to a member in `answering` (pushed and answered); returns the members asked.
std::set<std::string> AnswerPulls(HandoffPlanner& p, MonoTime now, const HandoffActions& a,
                                  const std::set<std::string>& answering) {
  std::set<std::string> asked;
  for (const PullSync& pull : a.pull) {
    asked.insert(pull.to);
    if (answering.contains(pull.to)) {
      static_cast<void>(p.SyncPulled(now, pull.round, pull.to, std::vector<TokenRange>{}, {}));
    }
  }
  return asked;
}

// With majority_read, a holder whose range's holders changed (d declared dead) reads it from a majority of
// the holders it had before -- itself counted when it was one -- and publishes it as `reading`, with the
// ring before, until then and for read_hold after; never asking a member out of reach.
TEST_F(HandoffPlannerTest, MajorityReadPullsTheEarlierHoldersUntilAMajorityPushed) {
  const HandoffOptions options = ReadingOptions();
  HandoffPlanner a("a", options);
  const RingPtr four = Ring({"a", "b", "c", "d"}, 1);
  const RingPtr three = Ring({"a", "b", "c"}, 2);
  // A cluster that starts: a holds its ranges on `four` with the same holders as on the ring without it
  // minus nothing -- it reads them from the others like a joining node, at once.
  HandoffActions start = a.RingChanged(now_, View("a"), nullptr, four);
  static_cast<void>(AnswerPulls(a, now_, start, {"b", "c", "d"}));
  HandoffActions settled = a.Timer(now_ + options.read_hold, View("a"));
  ASSERT_NE(settled.overrides, nullptr);
  EXPECT_TRUE(settled.overrides->reading.empty());

  gone_.insert("d");
  const MonoTime dead = now_ + 5s;
  HandoffActions lost = a.RingChanged(dead, View("a"), four, three);
  ASSERT_NE(lost.overrides, nullptr);
  ASSERT_FALSE(lost.overrides->reading.empty());
  for (const RouteOverrides::Reading& r : lost.overrides->reading) {
    EXPECT_EQ(r.before, four);
    // Only ranges d held before: the others kept their holders.
    std::vector<std::string> before;
    for (const ring::RingMember* m : four->PreferenceList(Inside(r.range), 3)) before.push_back(m->id);
    EXPECT_NE(std::find(before.begin(), before.end(), "d"), before.end());
  }
  // (Pulls of the unsynced ranges a gained go to the same members: answered alike.)
  EXPECT_EQ(AnswerPulls(a, dead, lost, {"b"}), (std::set<std::string>{"b", "c"}));  // not d: out of reach
  // After b's answer the ranges a and b both held before are read (two of three); the others are not.
  HandoffActions held = a.Timer(dead + options.read_hold, View("a"));
  ASSERT_NE(held.overrides, nullptr);
  ASSERT_FALSE(held.overrides->reading.empty());
  for (const RouteOverrides::Reading& r : held.overrides->reading) {
    std::vector<std::string> before;
    for (const ring::RingMember* m : four->PreferenceList(Inside(r.range), 3)) before.push_back(m->id);
    const bool a_held = std::find(before.begin(), before.end(), "a") != before.end();
    const bool b_held = std::find(before.begin(), before.end(), "b") != before.end();
    EXPECT_FALSE(a_held && b_held);
  }
  // c was asked already (its pull is not answered: a lost answer): asked again once that fails.
  HandoffActions retry = a.Timer(dead + options.read_hold + 1s, View("a"));
  EXPECT_TRUE(retry.pull.empty());  // still under way
  EXPECT_GT(a.stats().reading_ranges, 0u);
  for (const PullSync& pull : lost.pull) {
    if (pull.to == "c") static_cast<void>(a.SyncPulled(dead + 3500ms, pull.round, "c", std::nullopt, {}));
  }
  HandoffActions again = a.Timer(dead + 4s, View("a"));
  EXPECT_TRUE(AnswerPulls(a, dead + 4s, again, {"c"}).contains("c"));
  // Read, and past read_hold already: no longer published.
  EXPECT_EQ(a.stats().reading_ranges, 0u);
  EXPECT_EQ(a.stats().reads_expired, 0u);
}

// A read no majority of the earlier holders can answer (two of three gone) stays until resync_timeout.
TEST_F(HandoffPlannerTest, AMajorityReadWithoutAMajorityExpiresAtResyncTimeout) {
  const HandoffOptions options = ReadingOptions();
  HandoffPlanner a("a", options);
  const RingPtr five = Ring({"a", "b", "c", "d", "e"}, 1);
  const RingPtr three = Ring({"a", "b", "c"}, 2);
  static_cast<void>(
      AnswerPulls(a, now_, a.RingChanged(now_, View("a"), nullptr, five), {"b", "c", "d", "e"}));
  static_cast<void>(a.Timer(now_ + options.read_hold, View("a")));
  gone_ = {"d", "e"};
  const MonoTime dead = now_ + 5s;
  HandoffActions lost = a.RingChanged(dead, View("a"), five, three);
  static_cast<void>(AnswerPulls(a, dead, lost, {"b", "c"}));
  HandoffActions held = a.Timer(dead + options.read_hold, View("a"));
  ASSERT_NE(held.overrides, nullptr);
  ASSERT_FALSE(held.overrides->reading.empty());  // the ranges held by d, e and one other before
  HandoffActions expired = a.Timer(dead + options.resync_timeout, View("a"));
  ASSERT_NE(expired.overrides, nullptr);
  EXPECT_TRUE(expired.overrides->reading.empty());
  EXPECT_GT(a.stats().reads_expired, 0u);
}

// A node that was a range's only earlier holder (a cluster that grew from it alone) has read it already: a
// majority of one is itself, and nobody else could have decided there. Such a read completes at once (it
// waited for resync_timeout before: an answer that could never come), and ends after read_hold.
TEST_F(HandoffPlannerTest, AReadWhoseOnlyEarlierHolderIsThisNodeCompletesAtOnce) {
  const HandoffOptions options = ReadingOptions();
  HandoffPlanner a("a", options);
  const RingPtr one = Ring({"a"}, 1);
  const RingPtr two = Ring({"a", "b"}, 2);
  static_cast<void>(a.RingChanged(now_, View("a"), nullptr, one));
  static_cast<void>(a.Timer(now_ + options.read_hold, View("a")));
  const MonoTime joined = now_ + 5s;
  HandoffActions grown = a.RingChanged(joined, View("a"), one, two);
  ASSERT_NE(grown.overrides, nullptr);
  EXPECT_FALSE(grown.overrides->reading.empty()) << "held for read_hold: b may not decide meanwhile";
  for (const PullSync& pull : grown.pull) {
    for (const TokenRange& range : pull.ranges) {
      // What a pulls from b is what it gained unsynced, never a read: a was the only earlier holder.
      std::vector<std::string> before;
      for (const ring::RingMember* m : one->PreferenceList(range.first, 3)) before.push_back(m->id);
      EXPECT_EQ(before, std::vector<std::string>{"a"});
    }
  }
  EXPECT_EQ(a.stats().reads_completed, a.stats().reading_ranges);
  HandoffActions held = a.Timer(joined + options.read_hold, View("a"));
  ASSERT_NE(held.overrides, nullptr);
  EXPECT_TRUE(held.overrides->reading.empty());
  EXPECT_EQ(a.stats().reading_ranges, 0u);
  EXPECT_EQ(a.stats().reads_expired, 0u);
}

// A node back from being declared dead (its catch-up: the ring without it -> the ring) gains its ranges
// unsynced and reads them from their earlier holders. One holder's synced copy (b) does not sync them while
// the read lacks its majority (b alone of b, c, d): b's copy may lack what c and d acknowledged, and a
// decision from it would be refused. They are synced once c's copy makes the majority.
TEST_F(HandoffPlannerTest, AGainedRangeStaysUnsyncedUntilItsReadHasAMajority) {
  const HandoffOptions options = ReadingOptions();
  HandoffPlanner a("a", options);
  const RingPtr four = Ring({"a", "b", "c", "d"}, 1);
  const RingPtr without = Ring({"b", "c", "d"}, 1);
  static_cast<void>(AnswerPulls(a, now_, a.RingChanged(now_, View("a"), nullptr, four), {"b", "c", "d"}));
  static_cast<void>(a.Timer(now_ + options.read_hold, View("a")));
  ASSERT_EQ(a.stats().unsynced_ranges, 0u);
  ASSERT_EQ(a.stats().reading_ranges, 0u);

  const MonoTime back = now_ + 10s;
  HandoffActions caught = a.RingChanged(back, View("a"), without, four);
  const std::vector<TokenRange> held = four->HeldRanges("a", 3);
  ASSERT_NE(caught.overrides, nullptr);
  ASSERT_EQ(caught.overrides->unsynced, held);
  ASSERT_FALSE(caught.overrides->reading.empty());
  // b answers every pull holding everything synced; c's and d's pulls fail.
  for (const PullSync& pull : caught.pull) {
    const std::optional<std::vector<TokenRange>> synced =
        pull.to == "b" ? std::optional<std::vector<TokenRange>>(pull.ranges) : std::nullopt;
    static_cast<void>(a.SyncPulled(back + 1ms, pull.round, pull.to, synced, {}));
  }
  EXPECT_TRUE(a.Unsynced(Inside(held[0]))) << "synced from b's copy alone, before the read's majority";
  EXPECT_EQ(a.stats().unsynced_ranges, held.size());
  // The read asks c and d again; c's copy completes the majority: synced.
  HandoffActions again = a.Timer(back + 1s, View("a"));
  bool synced_now = false;
  for (const PullSync& pull : again.pull) {
    if (pull.to != "c") continue;
    HandoffActions answered = a.SyncPulled(back + 1s, pull.round, "c", std::vector<TokenRange>{}, {});
    synced_now = synced_now || (answered.overrides != nullptr && answered.overrides->unsynced.empty());
  }
  EXPECT_TRUE(synced_now);
  EXPECT_FALSE(a.Unsynced(Inside(held[0])));
  EXPECT_EQ(a.stats().unsynced_ranges, 0u);
}

// Without majority_read nothing is read.
TEST_F(HandoffPlannerTest, NoMajorityReadWithoutTheOption) {
  HandoffOptions options = Options();
  options.replicas = 3;
  HandoffPlanner a("a", options);
  const RingPtr four = Ring({"a", "b", "c", "d"}, 1);
  const RingPtr three = Ring({"a", "b", "c"}, 2);
  static_cast<void>(a.RingChanged(now_, View("a"), nullptr, four));
  gone_.insert("d");
  HandoffActions lost = a.RingChanged(now_ + 5s, View("a"), four, three);
  ASSERT_NE(lost.overrides, nullptr);
  EXPECT_TRUE(lost.overrides->reading.empty());
}

}  // namespace
}  // namespace ringlimit::replication
