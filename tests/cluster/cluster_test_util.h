// Shared helpers of the multi-process cluster tests (tests/cluster/): checks over HTTP, and the owner
// of a key recomputed in the test from the members a node reports (ring::RingView), so the tests do
// not only trust the node's own answer.
#ifndef RINGLIMIT_TESTS_CLUSTER_CLUSTER_TEST_UTIL_H_
#define RINGLIMIT_TESTS_CLUSTER_CLUSTER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ring/ring_view.h"
#include "ring/token.h"
#include "tests/cluster/cluster_harness.h"

namespace ringlimit::testing {

// Sanitizer builds run several times slower on CI's 2 cores: time bounds are scaled by this.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr int kSlowdown = 3;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr int kSlowdown = 3;
#else
inline constexpr int kSlowdown = 1;
#endif
#else
inline constexpr int kSlowdown = 1;
#endif

// What one check came back with.
struct CheckOutcome {
  int status = 0;  // HTTP status
  bool allowed = false;
  uint64_t remaining = 0;
  std::string owner;  // "owner" of the result (POST) or the RateLimit-Owner header (GET)
  std::string body;   // for failure messages
};

// The limit every test check uses unless it says otherwise: a hard fixed window of one hour.
struct CheckSpec {
  std::string algorithm = "fixed_window";
  uint64_t limit = 1000;
  int64_t window_ms = 3'600'000;
  uint64_t cost = 1;   // POST only; 0 = peek (read without charging)
  uint64_t burst = 0;  // POST only, sent when > 0 (a bucket's size; gcra: extra units at once)
};

// POST /v1/check with one check of `key` (state name "t").
inline Result<CheckOutcome> PostCheck(HttpClient& client, const std::string& key,
                                      const CheckSpec& spec = {}) {
  const std::string body = R"({"checks":[{"key":")" + key + R"(","name":"t","algorithm":")" + spec.algorithm +
                           R"(","limit":)" + std::to_string(spec.limit) + R"(,"window_ms":)" +
                           std::to_string(spec.window_ms) + R"(,"cost":)" + std::to_string(spec.cost) +
                           (spec.burst > 0 ? R"(,"burst":)" + std::to_string(spec.burst) : std::string()) +
                           "}]}";
  auto response = client.Post("/v1/check", body);
  if (!response) return "POST /v1/check " + key + ": " + response.error().message();
  CheckOutcome out;
  out.status = response->result_int();
  out.body = response->body();
  if (out.status != 200) return out;
  const auto json = JsonBody(*response);
  try {
    const auto& result = json.at("results").at(0);
    out.allowed = result.at("allowed").as_bool();
    out.remaining = result.at("remaining").to_number<uint64_t>();
    out.owner = StringField(result, "owner");
  } catch (const std::exception& e) {
    return "POST /v1/check " + key + ": unexpected body (" + e.what() + "): " + out.body;
  }
  return out;
}

// GET /v1/check for `key` (200 allowed, 429 denied); the owner comes from the RateLimit-Owner header.
inline Result<CheckOutcome> GetCheck(HttpClient& client, const std::string& key, const CheckSpec& spec = {}) {
  auto response = client.Get("/v1/check?key=" + key + "&name=t&algorithm=" + spec.algorithm + "&limit=" +
                             std::to_string(spec.limit) + "&window_ms=" + std::to_string(spec.window_ms));
  if (!response) return "GET /v1/check " + key + ": " + response.error().message();
  CheckOutcome out;
  out.status = response->result_int();
  out.allowed = out.status == 200;
  out.body = response->body();
  auto owner = response->find("RateLimit-Owner");
  if (owner != response->end()) out.owner = std::string(owner->value());
  return out;
}

// The ring the test computes from the members `view` reports with state "alive" (ids and vnodes).
inline std::shared_ptr<const ring::RingView> RingOfAlive(const ClusterView& view) {
  std::vector<ring::RingMember> members;
  for (const auto& m : view.members) {
    if (m.state == "alive") members.push_back({m.id, m.vnodes, m.peer_address});
  }
  return ring::RingView::Create(1, std::move(members)).value_or(nullptr);
}

// `ring`'s fingerprint as GET /v1/cluster writes it: 16 lowercase hex digits.
inline std::string FingerprintHex(const ring::RingView& ring) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(ring.fingerprint()));
  return buf;
}

// Owner id of `key` in `ring`, "" for an empty ring.
inline std::string OwnerOf(const ring::RingView& ring, const std::string& key) {
  const auto* owner = ring.Owner(ring::RingToken(key));
  return owner == nullptr ? "" : owner->id;
}

// Preference list ids of `key` (owner first), at most `r` entries.
inline std::vector<std::string> PreferenceOf(const ring::RingView& ring, const std::string& key, size_t r) {
  std::vector<std::string> ids;
  for (const auto* m : ring.PreferenceList(ring::RingToken(key), r)) ids.push_back(m->id);
  return ids;
}

// A key (prefix + number) that `ring` places on `owner`. Deterministic; REQUIRES `owner` in the ring.
inline std::string KeyOwnedBy(const ring::RingView& ring, const std::string& owner,
                              const std::string& prefix) {
  for (int i = 0;; ++i) {
    std::string key = prefix + std::to_string(i);
    if (OwnerOf(ring, key) == owner) return key;
  }
}

// The value of the sample `name{labels}` (labels as written, e.g. `what="hits"`; empty: no labels) in
// the node's GET /metrics; nullopt when the node does not answer or has no such sample.
inline std::optional<double> MetricSample(uint16_t http_port, const std::string& name,
                                          const std::string& labels = "") {
  HttpClient client(http_port, std::chrono::milliseconds(2000));
  auto response = client.Get("/metrics");
  if (!response || response->result_int() != 200) return std::nullopt;
  const std::string prefix = labels.empty() ? name + " " : name + "{" + labels + "} ";
  std::istringstream lines(response->body());
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with(prefix)) return std::strtod(line.c_str() + prefix.size(), nullptr);
  }
  return std::nullopt;
}

}  // namespace ringlimit::testing

#endif  // RINGLIMIT_TESTS_CLUSTER_CLUSTER_TEST_UTIL_H_
