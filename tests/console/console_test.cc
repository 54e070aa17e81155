// The web console (issue 18): GET /ui in a headless Chromium (Debian `chromium`, installed by
// scripts/bootstrap) against a real 3-node cluster. The page is loaded with --dump-dom after it has
// polled the node (--virtual-time-budget), and the test reads the DOM's hooks: the members' rows
// (data-member, data-state), the ring's arcs (path.arc[data-owner]), a key lookup's owner (#owner). Then a
// node joins (four members, its arcs drawn) and one is killed (shown suspect or dead). Screenshots of each
// step are saved under build/<type>/console-screenshots. The page fetches nothing from outside the cluster.
#include <stdio.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/cluster/cluster_test_util.h"

namespace ringlimit::testing {
namespace {

using std::chrono::milliseconds;

// The browser's path, or "" when none is installed.
std::string Browser() {
  for (const char* candidate : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"}) {
    if (std::filesystem::exists(candidate)) return candidate;
  }
  return "";
}

// Runs the headless browser on `url` with `mode` ("--dump-dom" or "--screenshot=PATH") after letting the
// page run for `budget_ms` of virtual time; returns what it printed (the DOM for --dump-dom).
std::string RunBrowser(const std::string& url, const std::string& mode, int budget_ms = 4000) {
  const std::string command =
      "timeout 90 " + Browser() +
      " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --hide-scrollbars"
      " --no-first-run --window-size=1400,1000 --virtual-time-budget=" +
      std::to_string(budget_ms) + " " + mode + " '" + url + "' 2>/dev/null";
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[65536];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  pclose(pipe);
  return out;
}

// Every value of attribute `second` that directly follows `first`="..." in the DOM
// (`first`="A" `second`="B" -> {A, B}); `first` alone with an empty `second` gives {A, ""}.
std::vector<std::pair<std::string, std::string>> AttributePairs(const std::string& dom,
                                                                const std::string& first,
                                                                const std::string& second) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string a = first + "=\"";
  for (size_t at = dom.find(a); at != std::string::npos; at = dom.find(a, at + 1)) {
    const size_t start = at + a.size();
    const size_t end = dom.find('"', start);
    if (end == std::string::npos) break;
    std::string value = dom.substr(start, end - start);
    std::string next;
    const std::string b = " " + second + "=\"";
    if (!second.empty() && dom.compare(end + 1, b.size(), b) == 0) {
      const size_t nstart = end + 1 + b.size();
      next = dom.substr(nstart, dom.find('"', nstart) - nstart);
    }
    out.emplace_back(std::move(value), std::move(next));
  }
  return out;
}

// Member id -> state, from the DOM's member rows (<tr data-member="n1" data-state="alive">).
std::map<std::string, std::string> MemberStates(const std::string& dom) {
  std::map<std::string, std::string> out;
  for (auto& [id, state] : AttributePairs(dom, "data-member", "data-state")) {
    if (!state.empty()) out[id] = state;
  }
  return out;
}

// The owners that have at least one arc drawn on the ring (<path ... class="arc" data-owner="n1">).
std::set<std::string> ArcOwners(const std::string& dom) {
  std::set<std::string> out;
  for (auto& [cls, owner] : AttributePairs(dom, "class", "data-owner")) {
    if (cls == "arc" && !owner.empty()) out.insert(owner);
  }
  return out;
}

std::string Shot(const std::string& name) {
  std::filesystem::create_directories(RINGLIMIT_CONSOLE_SHOTS);
  return std::string(RINGLIMIT_CONSOLE_SHOTS) + "/" + name + ".png";
}

class ConsoleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Browser().empty()) GTEST_SKIP() << "no chromium (scripts/bootstrap installs it)";
  }
};

TEST_F(ConsoleTest, ShowsTheMembersTheRingAndAKeyAndFollowsJoinsAndDeaths) {
  auto started = Cluster::Start({.nodes = 3, .args = {"--threads", "2", "--suspicion-timeout-ms", "1000"}});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  HttpClient n2(cluster.http_port(1));
  auto checked = PostCheck(n2, "console-key", CheckSpec{.limit = 10});
  ASSERT_TRUE(checked) << checked.error();
  ASSERT_EQ(checked->status, 200) << checked->body;
  auto ring = FetchRing(cluster.http_port(0), "console-key");
  ASSERT_TRUE(ring) << ring.error();

  // The page itself: self-contained.
  HttpClient n1(cluster.http_port(0));
  auto page = n1.Get("/ui");
  ASSERT_TRUE(page) << page.error().message();
  ASSERT_EQ(page->result_int(), 200);
  EXPECT_NE(page->at(boost::beast::http::field::content_type).find("text/html"), std::string::npos);
  EXPECT_EQ(page->body().find("https://"), std::string::npos) << "nothing fetched from outside";
  EXPECT_EQ(page->body().find("<script src"), std::string::npos);
  EXPECT_EQ(page->body().find("<link"), std::string::npos);

  const std::string base = "http://127.0.0.1:" + std::to_string(cluster.http_port(0)) + "/ui";
  std::string dom = RunBrowser(base + "?key=console-key", "--dump-dom");
  ASSERT_FALSE(dom.empty()) << "the browser printed nothing";
  EXPECT_EQ(MemberStates(dom),
            (std::map<std::string, std::string>{{"n1", "alive"}, {"n2", "alive"}, {"n3", "alive"}}))
      << dom.substr(0, 4000);
  EXPECT_EQ(ArcOwners(dom), (std::set<std::string>{"n1", "n2", "n3"}));
  EXPECT_NE(dom.find(R"(id="owner">)" + ring->owner + "<"), std::string::npos) << "the key's owner";
  EXPECT_NE(dom.find(R"(<tr data-name="t")"), std::string::npos) << "the key's state as its owner has it";
  EXPECT_NE(dom.find(R"(id="status" class="live")"), std::string::npos);
  EXPECT_NE(dom.find("quota grants are off"), std::string::npos) << "the hot keys' section without --grants";
  (void)RunBrowser(base + "?key=console-key", "--screenshot=" + Shot("1-three-nodes"));

  auto added = cluster.AddNode();
  ASSERT_TRUE(added) << added.error();
  auto converged = cluster.WaitConverged(milliseconds(20'000 * kSlowdown));
  ASSERT_TRUE(converged) << converged.error();
  dom = RunBrowser(base, "--dump-dom");
  EXPECT_EQ(MemberStates(dom).size(), 4u) << dom.substr(0, 4000);
  EXPECT_EQ(MemberStates(dom)["n4"], "alive");
  EXPECT_EQ(ArcOwners(dom), (std::set<std::string>{"n1", "n2", "n3", "n4"}));
  // The join moved ranges to n4: the members' finished handoffs are shown.
  int completed = -1;
  for (auto& [id, count] : AttributePairs(dom, "id", "data-completed")) {
    if (id == "handoff-totals" && !count.empty()) completed = std::stoi(count);
  }
  EXPECT_GE(completed, 1) << "handoffs completed, as the page shows them\n" << dom.substr(0, 4000);
  (void)RunBrowser(base, "--screenshot=" + Shot("2-four-nodes"));

  ASSERT_TRUE(cluster.Kill(1));
  auto seen = cluster.WaitSeenAs(1, {"suspect", "dead"}, false, milliseconds(20'000 * kSlowdown));
  ASSERT_TRUE(seen) << seen.error();
  dom = RunBrowser(base, "--dump-dom");
  const std::string state = MemberStates(dom)["n2"];
  EXPECT_TRUE(state == "suspect" || state == "dead") << "n2 shown " << state;
  EXPECT_NE(dom.find(R"(<b>n2</b>)"), std::string::npos) << "an event for n2 in the timeline";
  (void)RunBrowser(base, "--screenshot=" + Shot("3-one-killed"));
}

// With --grants on and one key checked hard through every node, the page marks it hot: a row in the hot
// keys' table with its owner (data-hot-key, data-owner), and the looked-up key's mark (#hot.hot).
TEST_F(ConsoleTest, MarksAHotKeyWithSlicesOutAndItsOwner) {
  auto started = Cluster::Start(
      {.nodes = 3,
       .args = {"--threads", "2", "--grants", "on", "--grant-threshold", "20", "--grant-term-ms", "2000"}});
  ASSERT_TRUE(started) << started.error();
  Cluster& cluster = **started;
  const std::string key = "console-hot";
  auto ring = FetchRing(cluster.http_port(0), key);
  ASSERT_TRUE(ring) << ring.error();

  // The load: two clients per node, until the page has been read.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> failed{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c) {
    clients.emplace_back([&, c] {
      HttpClient client(cluster.http_port(c % 3), std::chrono::seconds(10 * kSlowdown));
      while (!stop.load()) {
        auto outcome =
            PostCheck(client, key,
                      CheckSpec{.algorithm = "fixed_window", .limit = 1'000'000'000, .window_ms = 3'600'000});
        if (!outcome || outcome->status != 200) failed.fetch_add(1);
      }
    });
  }
  // Slices are out before the page is read (the page itself is not the test's clock).
  auto lent = WaitFor("slices of the hot key out", milliseconds(20'000 * kSlowdown), [&](std::string* why) {
    const std::optional<double> out =
        MetricSample(cluster.http_port(std::stoi(ring->owner.substr(1)) - 1), "ringlimit_grants_units_out");
    *why = "units out at the owner: " + std::to_string(out.value_or(-1));
    return out.value_or(0) > 0;
  });
  const std::string base = "http://127.0.0.1:" + std::to_string(cluster.http_port(0)) + "/ui";
  std::string dom;
  if (lent) dom = RunBrowser(base + "?key=" + key, "--dump-dom");
  if (lent) (void)RunBrowser(base + "?key=" + key, "--screenshot=" + Shot("4-hot-key"));
  stop.store(true);
  for (auto& t : clients) t.join();
  ASSERT_TRUE(lent) << lent.error();
  EXPECT_EQ(failed.load(), 0u);
  ASSERT_FALSE(dom.empty()) << "the browser printed nothing";
  std::string owner_shown;
  for (auto& [k, owner] : AttributePairs(dom, "data-hot-key", "data-owner")) {
    if (k == key) owner_shown = owner;
  }
  EXPECT_EQ(owner_shown, ring->owner) << "the hot key's row and its owner\n" << dom.substr(0, 6000);
  EXPECT_NE(dom.find(R"(id="hot" class="hot")"), std::string::npos) << "the looked-up key is marked hot";
}

}  // namespace
}  // namespace ringlimit::testing
