// The process-level gray-failure tests of issue 13, each asserting that a key never admits more than its
// limit (one-day windows: nothing refills during a test) and, where a holder of the key stayed reachable,
// that no request failed. The scenarios themselves live in gray_scenarios.{h,cc}; bench/nemesis/
// gray_report runs the same ones and prints what each admitted.
//
// In ctest (tests/gray/CMakeLists.txt, gray.sync_closed.*, one entry each), all with --replication sync
// --failure-mode closed, the mode that promises exactness: the owner paused past and within failure
// detection, a forwarded check retried, two of three holders stalled, a partial partition, a half-cut link
// (relayed), the isolated minority, the clock skewed. With asynchronous replication or --failure-mode open
// the paused and partitioned cases are bounded, not exact; see docs/gray-failures.md for the measured table.
// The clock skewed: ±1 h, and +1 day (issue 35 item 4's case).
// Run them by hand:
//
//   scripts/build --target gray_test
//   build/release/tests/gray/gray_test                       # all (under a minute)
//   build/release/tests/gray/gray_test --gtest_filter='*Partition*'
//   RINGLIMIT_GRAY_NODE_FLAGS='--failure-mode closed' build/release/tests/gray/gray_test
//
// Every scenario also asserts (issue 32) that it cannot pass vacuously: the faults it injected were seen
// (a cut refuses connections, an isolated side is declared dead, a skewed clock is measured at the offset
// injected by the other nodes and judged skewed by its own), at least 99 % of the checks expected answered
// were answered at every entry node in every phase (the checks a scenario may or must see refused are
// named with their reason; those it must see refused were refused), and each key admitted at least its
// floor (KeyFigures::floor: everything answered until the limit, less failed checks that may have been
// charged).
//
// The partition scenarios need root (a network namespace per node, nftables) and skip otherwise; the
// clock-skew ones need libfaketime (Debian `faketime`) and skip otherwise. With
// RINGLIMIT_REQUIRE_ROOT_SCENARIOS=1 (scripts/test) they fail instead of skipping.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "tests/gray/gray_scenarios.h"

namespace ringlimit::testing::gray {
namespace {

class GrayTest : public ::testing::TestWithParam<std::string> {};

// Skips the test when scenario `name` cannot run here, or fails it when this run requires it.
#define GRAY_SKIP_OR_FAIL_UNLESS_SUPPORTED(name)                           \
  do {                                                                     \
    if (auto required = RequiredButUnsupported(name)) FAIL() << *required; \
    if (auto why = Unsupported(name)) GTEST_SKIP() << *why;                \
  } while (false)

std::string Describe(const ScenarioResult& r) {
  std::string out = r.name + ": checks " + std::to_string(r.checks) + ", admitted " +
                    std::to_string(r.admitted) + " for a limit of " + std::to_string(r.limit) + ", failed " +
                    std::to_string(r.failed) + ", rollbacks " + std::to_string(r.rollbacks);
  if (r.charged_extra) out += ", charged beyond admitted " + std::to_string(*r.charged_extra);
  if (!r.note.empty()) out += " (" + r.note + ")";
  for (const auto& [what, at] : r.marks) out += "\n" + what + " at " + std::to_string(at) + " ms";
  if (r.skew) {
    out += "\nclock of " + r.skew->node + ": injected " + std::to_string(r.skew->injected_ms) +
           " ms, judged " + r.skew->own_state + " by itself";
    for (const auto& [observer, ms] : r.skew->seen_ms)
      out += ", " + std::to_string(ms) + " ms at " + observer;
  }
  for (const KeyFigures& k : r.keys) {
    out += "\n" + k.key + ": checks " + std::to_string(k.checks) + ", answered " +
           std::to_string(k.answered) + ", admitted " + std::to_string(k.admitted) + ", floor " +
           std::to_string(k.floor());
  }
  out += "\n" + DescribeShares(r.shares);
  std::map<std::string, int64_t> failures;  // failed checks expected answered, by phase, entry and error
  for (const Decision& d : r.decisions) {
    if (d.expect == Expect::kAnswered && d.failed()) {
      ++failures[d.phase + " at " + d.entry + ": " + std::to_string(d.status) + " " + d.error.substr(0, 200)];
    }
  }
  for (const auto& [what, count] : failures)
    out += "failed, expected answered: " + std::to_string(count) + " x " + what + "\n";
  out += "\nadmitted checks (ms, phase, entry, owner, remaining):\n";
  for (const auto& d : r.decisions) {
    if (d.allowed) {
      out += "  " + std::to_string(d.at_ms) + " " + d.phase + " " + d.entry + " " + d.owner + " " +
             std::to_string(d.remaining) + "\n";
    }
  }
  return out;
}

// What every scenario asserts in every mode: its faults were injected and seen, the answered share, the
// refusals it expects, the per-key floor; for a skewed clock, the offset the other nodes measured, the
// skewed node saying it does not decide while ready, that checks entered it, and that it decided none.
void ExpectRealFaultsAndAvailability(const ScenarioResult& r) {
  for (const std::string& what : r.unverified)
    ADD_FAILURE() << "fault not verified: " << what << "\n" << Describe(r);
  for (const std::string& what : AvailabilityFailures(r.shares, r.keys))
    ADD_FAILURE() << what << "\n" << Describe(r);
  if (r.name.rfind("one node's clock", 0) != 0) return;
  ASSERT_TRUE(r.skew.has_value()) << Describe(r);
  EXPECT_EQ(r.skew->own_state, "skewed") << Describe(r);
  EXPECT_EQ(r.skew->seen_ms.size(), 3u) << Describe(r);
  for (const auto& [observer, ms] : r.skew->seen_ms) {
    EXPECT_NEAR(ms, r.skew->injected_ms, 1000) << observer << " measures " << r.skew->node << "'s clock\n"
                                               << Describe(r);
  }
  EXPECT_FALSE(r.skew->own_deciding) << Describe(r);
  EXPECT_EQ(r.skew->own_fence_reason, "clock_offset") << Describe(r);
  EXPECT_EQ(r.skew->readyz_status, 200) << r.skew->readyz_body;
  EXPECT_NE(r.skew->readyz_body.find(R"("reason":"clock_offset")"), std::string::npos) << r.skew->readyz_body;
  // Steps back, not out (issue 35 item 4): checks entering it are answered (the share above), decided
  // elsewhere.
  int64_t entered = 0;
  for (const Decision& d : r.decisions) {
    if (d.entry == r.skew->node) ++entered;
    EXPECT_NE(d.owner, r.skew->node) << d.key << " at " << d.entry << " in " << d.phase
                                     << ": decided by the skewed node\n"
                                     << Describe(r);
  }
  EXPECT_GE(entered, 50) << "too few checks were sent to the skewed node\n" << Describe(r);
}

TEST_P(GrayTest, AdmitsNoMoreThanTheLimit) {
  GRAY_SKIP_OR_FAIL_UNLESS_SUPPORTED(GetParam());
  auto result = RunScenario(GetParam());
  ASSERT_TRUE(result) << result.error();
  ExpectRealFaultsAndAvailability(*result);
  for (const auto& key : result->keys) {
    EXPECT_LE(key.admitted, static_cast<int64_t>(key.limit)) << key.key << "\n" << Describe(*result);
  }
  EXPECT_EQ(result->rollbacks, 0) << Describe(*result);
  EXPECT_EQ(result->healed_over, 0) << Describe(*result);
  // Only the isolated minority and the cut-off holders may fail requests they are expected to answer (the
  // side that reaches no holder with the key's copy, under --failure-mode closed; the 99 % share above
  // bounds them); everywhere else a holder was reachable, directly or through a relay.
  if (GetParam() != "isolated_minority" && GetParam() != "holders_cut_off") {
    int64_t failed = 0;
    for (const Decision& d : result->decisions) failed += d.expect == Expect::kAnswered && d.failed() ? 1 : 0;
    EXPECT_EQ(failed, 0) << Describe(*result);
  }
  if (result->charged_extra) {
    EXPECT_EQ(*result->charged_extra, 0) << Describe(*result);
  }
}

// --failure-mode open (the default) with asynchronous replication: the isolated minority is bounded, not
// exact. Both sides hold a copy of the key (the owner and the next holder are cut off, the third holder is
// with the majority), so each side decides from its copy and admits at most the limit: the bound is one
// limit per side, with no failed request anywhere. Once healed, the copies merge and the key admits nothing
// more until the merged count allows. Registered separately in ctest (no RINGLIMIT_GRAY_NODE_FLAGS).
TEST(GrayOpenTest, IsolatedMinorityIsBoundedPerSideAndHealsToTheMergedCount) {
  GRAY_SKIP_OR_FAIL_UNLESS_SUPPORTED("isolated_minority");
  if (const char* flags = std::getenv("RINGLIMIT_GRAY_NODE_FLAGS"); flags != nullptr && *flags != '\0') {
    GTEST_SKIP() << "measures the default mode; RINGLIMIT_GRAY_NODE_FLAGS is set";
  }
  auto result = RunScenario("isolated_minority", {.node_args = {"--failure-mode", "open"}});
  ASSERT_TRUE(result) << result.error();
  ExpectRealFaultsAndAvailability(*result);
  ASSERT_EQ(result->keys.size(), 1u);
  const KeyFigures& key = result->keys[0];
  constexpr int64_t kSides = 2;
  EXPECT_LE(key.admitted, kSides * static_cast<int64_t>(key.limit)) << Describe(*result);
  EXPECT_EQ(key.healed_over(), 0) << Describe(*result);
  EXPECT_EQ(result->failed, 0) << Describe(*result);
  EXPECT_GT(key.checks - key.admitted_after_heal, 0) << Describe(*result);
}

// Every scenario in the default mode (async, --failure-mode open): bounded, not exact. What each bound is
// (docs/gray-failures.md): a holder on each side of a cut decides from its own copy (at most the limit
// per side), nodes that reach no holder decide from theirs (`without_copy`, where measured), async
// replication forgets what an owner admitted in its last interval before it stopped. What holds in every
// case: once the faults are over and the copies met, nothing more is admitted until the merged count
// allows (healed_over = 0), and no copy rolls another back in a way that lets a key admit twice the same
// count after healing. In ctest as gray.default_mode_every.*.
class GrayOpenHealTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GrayOpenHealTest, BoundedAndNothingAdmittedAfterHealingBeyondTheMergedCount) {
  GRAY_SKIP_OR_FAIL_UNLESS_SUPPORTED(GetParam());
  if (const char* flags = std::getenv("RINGLIMIT_GRAY_NODE_FLAGS"); flags != nullptr && *flags != '\0') {
    GTEST_SKIP() << "measures the default mode; RINGLIMIT_GRAY_NODE_FLAGS is set";
  }
  auto result = RunScenario(GetParam());
  ASSERT_TRUE(result) << result.error();
  ExpectRealFaultsAndAvailability(*result);
  EXPECT_EQ(result->healed_over, 0) << Describe(*result);
  for (const KeyFigures& key : result->keys) {
    // One limit per side that holds a copy (two sides at most in these scenarios), plus what nodes holding
    // no copy admitted.
    // A skewed clock splits nothing: exact in this mode too (issue 35 item 4).
    const int64_t bound = GetParam().rfind("clock_skew", 0) == 0
                              ? static_cast<int64_t>(key.limit)
                              : 2 * static_cast<int64_t>(key.limit) + result->without_copy.value_or(0);
    EXPECT_LE(key.admitted, bound) << key.key << "\n" << Describe(*result);
  }
}

INSTANTIATE_TEST_SUITE_P(Issue13, GrayOpenHealTest, ::testing::ValuesIn(ScenarioNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(Issue13, GrayTest, ::testing::ValuesIn(ScenarioNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace ringlimit::testing::gray
