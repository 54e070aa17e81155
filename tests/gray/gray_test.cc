// The process-level gray-failure tests of issue 13, each asserting that a key never admits more than its
// limit (one-day windows: nothing refills during a test) and, where a holder of the key stayed reachable,
// that no request failed. The scenarios themselves live in gray_scenarios.{h,cc}; bench/nemesis/
// gray_report runs the same ones and prints what each admitted.
//
// In ctest (tests/gray/CMakeLists.txt, GrayTest.SyncClosed), all of them with --replication sync
// --failure-mode closed, the mode that promises exactness: the owner paused past and within failure
// detection, a forwarded check retried, two of three holders stalled, a partial partition, a half-cut link
// (relayed), the isolated minority, the clock skewed. With asynchronous replication or --failure-mode open
// the paused and partitioned cases are bounded, not exact; see docs/gray-failures.md for the measured table.
// Run them by hand:
//
//   scripts/build --target gray_test
//   build/release/tests/gray/gray_test                       # all (under a minute)
//   build/release/tests/gray/gray_test --gtest_filter='*Partition*'
//   RINGLIMIT_GRAY_NODE_FLAGS='--failure-mode closed' build/release/tests/gray/gray_test
//
// The partition scenarios need root (a network namespace per node, nftables) and skip otherwise; the
// clock-skew ones need libfaketime (Debian `faketime`) and skip otherwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/gray/gray_scenarios.h"

namespace ringlimit::testing::gray {
namespace {

class GrayTest : public ::testing::TestWithParam<std::string> {};

std::string Describe(const ScenarioResult& r) {
  std::string out = r.name + ": checks " + std::to_string(r.checks) + ", admitted " +
                    std::to_string(r.admitted) + " for a limit of " + std::to_string(r.limit) + ", failed " +
                    std::to_string(r.failed) + ", rollbacks " + std::to_string(r.rollbacks);
  if (r.charged_extra) out += ", charged beyond admitted " + std::to_string(*r.charged_extra);
  if (!r.note.empty()) out += " (" + r.note + ")";
  out += "\nadmitted checks (ms, phase, entry, owner, remaining):\n";
  for (const auto& d : r.decisions) {
    if (d.allowed) {
      out += "  " + std::to_string(d.at_ms) + " " + d.phase + " " + d.entry + " " + d.owner + " " +
             std::to_string(d.remaining) + "\n";
    }
  }
  return out;
}

TEST_P(GrayTest, AdmitsNoMoreThanTheLimit) {
  if (auto why = Unsupported(GetParam())) GTEST_SKIP() << *why;
  auto result = RunScenario(GetParam());
  ASSERT_TRUE(result) << result.error();
  for (const auto& key : result->keys) {
    EXPECT_LE(key.admitted, static_cast<int64_t>(key.limit)) << key.key << "\n" << Describe(*result);
  }
  EXPECT_EQ(result->rollbacks, 0) << Describe(*result);
  EXPECT_EQ(result->healed_over, 0) << Describe(*result);
  // Only the isolated minority and the cut-off holders may fail requests (the side that reaches no holder
  // with the key's copy, under --failure-mode closed); everywhere else a holder was reachable, directly or
  // through a relay.
  if (GetParam() != "isolated_minority" && GetParam() != "holders_cut_off") {
    EXPECT_EQ(result->failed, 0) << Describe(*result);
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
  if (auto why = Unsupported("isolated_minority")) GTEST_SKIP() << *why;
  if (const char* flags = std::getenv("RINGLIMIT_GRAY_NODE_FLAGS"); flags != nullptr && *flags != '\0') {
    GTEST_SKIP() << "measures the default mode; RINGLIMIT_GRAY_NODE_FLAGS is set";
  }
  auto result = RunScenario("isolated_minority", {.node_args = {"--failure-mode", "open"}});
  ASSERT_TRUE(result) << result.error();
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
// count after healing. In ctest as GrayTest.DefaultModeEveryScenario.
class GrayOpenHealTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GrayOpenHealTest, BoundedAndNothingAdmittedAfterHealingBeyondTheMergedCount) {
  if (auto why = Unsupported(GetParam())) GTEST_SKIP() << *why;
  if (const char* flags = std::getenv("RINGLIMIT_GRAY_NODE_FLAGS"); flags != nullptr && *flags != '\0') {
    GTEST_SKIP() << "measures the default mode; RINGLIMIT_GRAY_NODE_FLAGS is set";
  }
  auto result = RunScenario(GetParam());
  ASSERT_TRUE(result) << result.error();
  EXPECT_EQ(result->healed_over, 0) << Describe(*result);
  for (const KeyFigures& key : result->keys) {
    // One limit per side that holds a copy (two sides at most in these scenarios), plus what nodes holding
    // no copy admitted.
    const int64_t bound = 2 * static_cast<int64_t>(key.limit) + result->without_copy.value_or(0);
    EXPECT_LE(key.admitted, bound) << key.key << "\n" << Describe(*result);
  }
}

INSTANTIATE_TEST_SUITE_P(Issue13, GrayOpenHealTest, ::testing::ValuesIn(ScenarioNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(Issue13, GrayTest, ::testing::ValuesIn(ScenarioNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace ringlimit::testing::gray
