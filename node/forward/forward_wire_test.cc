#include "node/forward/forward_wire.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace ringlimit::cluster {
namespace {

peer::ForwardedResult Result(peer::CheckStatus status) {
  peer::ForwardedResult result;
  result.set_check_id(7);
  result.set_status(status);
  result.set_owner("n2");
  result.set_allowed(status == peer::CHECK_OK);
  peer::LimitDecision* d = result.add_decisions();
  d->set_allowed(true);
  d->set_limit(100);
  d->set_remaining(99);
  d->set_reset_after_ns(1'000'000'000);
  d->set_retry_after_ns(INT64_MAX);
  if (status != peer::CHECK_OK) result.set_error("why");
  return result;
}

std::string Response(std::initializer_list<peer::ForwardedResult> results, std::string from = "n2") {
  peer::ForwardCheckResponse response;
  response.set_from(from);
  response.set_ring_fingerprint(0x1234'5678'9abc'def0ULL);
  for (const peer::ForwardedResult& r : results) *response.add_results() = r;
  return response.SerializeAsString();
}

// Both routes give the same answer; returns it.
std::optional<peer::ForwardedResult> Both(const std::string& payload) {
  const std::optional<peer::ForwardedResult> fast = DecidedResultOf(payload);
  const std::optional<peer::ForwardedResult> slow = DecidedResultByProtobuf(payload);
  EXPECT_EQ(fast.has_value(), slow.has_value());
  if (fast && slow) {
    EXPECT_EQ(fast->SerializeAsString(), slow->SerializeAsString());
  }
  return fast;
}

TEST(ForwardWireTest, ReadsTheOneDecidedResult) {
  const peer::ForwardedResult ok = Result(peer::CHECK_OK);
  const std::optional<peer::ForwardedResult> got = Both(Response({ok}));
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->SerializeAsString(), ok.SerializeAsString());
  EXPECT_EQ(got->owner(), "n2");
  ASSERT_EQ(got->decisions_size(), 1);
  EXPECT_EQ(got->decisions(0).remaining(), 99u);
}

TEST(ForwardWireTest, AnUnackedResultIsDecidedARefusalIsNot) {
  EXPECT_TRUE(Both(Response({Result(peer::CHECK_UNACKED)})).has_value());
  EXPECT_FALSE(Both(Response({Result(peer::CHECK_UNAVAILABLE)})).has_value());
  EXPECT_FALSE(Both(Response({Result(peer::CHECK_INVALID)})).has_value());
}

TEST(ForwardWireTest, NoResultOrSeveralIsNoAnswer) {
  EXPECT_FALSE(Both(Response({})).has_value());
  EXPECT_FALSE(Both(Response({Result(peer::CHECK_OK), Result(peer::CHECK_OK)})).has_value());
}

TEST(ForwardWireTest, UnknownFieldsAreSkippedAsProtobufKeepsThem) {
  std::string payload = Response({Result(peer::CHECK_OK)});
  payload += std::string("\x48\x05", 2);                       // field 9, varint 5
  payload += std::string("\x52\x02xy", 4);                     // field 10, 2 bytes
  payload += std::string("\x59", 1) + std::string(8, '\x01');  // field 11, fixed64
  EXPECT_TRUE(Both(payload).has_value());
}

TEST(ForwardWireTest, WhatTheReaderLeavesToProtobufGetsProtobufsVerdict) {
  // A sender id that is not plain ASCII: valid UTF-8 parses, invalid UTF-8 does not.
  EXPECT_TRUE(Both(Response({Result(peer::CHECK_OK)}, "n\xc3\xa9")).has_value());
  Both(Response({Result(peer::CHECK_OK)}, "n\xff"));
  // Truncated, a bad tag, a group.
  const std::string good = Response({Result(peer::CHECK_OK)});
  for (size_t n = 0; n < good.size(); ++n) Both(good.substr(0, n));
  EXPECT_FALSE(Both(std::string("\x00\x01", 2)).has_value());
  Both(std::string("\x0b\x0c", 2) + good);
  // A result whose own bytes are malformed.
  EXPECT_FALSE(Both(std::string("\x1a\x02\x08\x80", 4)).has_value());
}

// The writers make the bytes Protobuf serializes for the same request, whatever is left out or set.
TEST(ForwardWireTest, TheRequestWritersMakeProtobufsBytes) {
  peer::ForwardedCheck check;
  check.set_check_id(3);
  check.set_key("user:42");
  check.set_cost(1);
  check.set_hops(1);
  check.add_limits()->set_name("api/minute");
  struct Case {
    std::string from, owner;
    uint64_t fingerprint;
    int64_t sent;
    int64_t wait_ms;
    std::vector<std::string> tried;
  };
  for (const Case& c : std::vector<Case>{
           {"n1", "n2", 0xfedc'ba98'7654'3210ULL, 1'790'000'000'123'456'789, 2000, {}},
           {"", "", 0, 0, 0, {}},                                 // every field at its zero value
           {"n1", "n3", 1, -5, int64_t{1} << 40, {"n2", ""}},     // a negative stamp, a wait clamped
           {std::string(300, 'x'), "n2", 7, 1, 1, {"n3", "n4"}},  // a length of two varint bytes
       }) {
    peer::ForwardCheckRequest request;
    request.set_from(c.from);
    request.set_owner(c.owner);
    request.set_ring_fingerprint(c.fingerprint);
    *request.add_checks() = check;
    request.set_sent_wall_ns(c.sent);
    request.set_wait_ms(static_cast<uint32_t>(std::min<int64_t>(c.wait_ms, UINT32_MAX)));
    for (const std::string& t : c.tried) request.add_tried(t);

    std::string bytes;
    AppendForwardRequestHead(c.from, c.owner, c.fingerprint, bytes);
    std::string entry;
    check.SerializeToString(&entry);
    bytes += std::string(1, '\x22') + static_cast<char>(entry.size()) + entry;  // checks = 4, short entry
    AppendDeadlineStamp(c.sent, std::chrono::milliseconds(c.wait_ms), bytes);
    for (const std::string& t : c.tried) AppendTried(t, bytes);
    EXPECT_EQ(bytes, request.SerializeAsString()) << c.from.size() << " " << c.sent;

    // A second stamp sets the fields anew.
    AppendDeadlineStamp(99, std::chrono::milliseconds(5), bytes);
    peer::ForwardCheckRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(bytes));
    EXPECT_EQ(parsed.sent_wall_ns(), 99);
    EXPECT_EQ(parsed.wait_ms(), 5u);
    EXPECT_EQ(parsed.checks_size(), 1);
  }
}

// The Forwarder writes its answer from the outcomes by hand: the bytes Protobuf writes for the same
// ForwardCheckResponse, zeros left out, negative and never-ending durations in ten bytes.
TEST(ForwardWireTest, AnAnswerWrittenFromOutcomesIsWhatProtobufWrites) {
  std::vector<node::ForwardedOutcome> outcomes(4);
  outcomes[0].check_id = 0;
  outcomes[0].owner = "n1";
  outcomes[0].allowed = true;
  limiter::Decision d;
  d.allowed = true;
  d.limit = 10;
  d.remaining = 9;
  d.reset_after = 60 * limiter::kSecond;
  outcomes[0].decisions = {d, d};
  outcomes[1].check_id = UINT64_MAX;
  outcomes[1].owner = std::string(300, 'o');
  d.allowed = false;
  d.would_deny = true;
  d.beyond_limit = true;
  d.retry_after = limiter::kNever;
  d.delay = -5;
  d.reset_after = -1;
  outcomes[1].decisions = {d};
  outcomes[2].status = peer::CHECK_UNACKED;
  outcomes[2].error = "not acknowledged";
  outcomes[3].status = peer::CHECK_INVALID;
  outcomes[3].error = std::string(200, 'e');
  for (const std::string_view from : {std::string_view("n2"), std::string_view()}) {
    peer::ForwardCheckResponse expected;
    expected.set_from(std::string(from));
    for (const node::ForwardedOutcome& o : outcomes) {
      peer::ForwardedResult* result = expected.add_results();
      result->set_check_id(o.check_id);
      result->set_status(o.status);
      result->set_owner(o.owner);
      result->set_allowed(o.allowed);
      for (const limiter::Decision& decision : o.decisions) {
        peer::LimitDecision* limit = result->add_decisions();
        limit->set_allowed(decision.allowed);
        limit->set_would_deny(decision.would_deny);
        limit->set_beyond_limit(decision.beyond_limit);
        limit->set_limit(decision.limit);
        limit->set_remaining(decision.remaining);
        limit->set_reset_after_ns(decision.reset_after);
        limit->set_retry_after_ns(decision.retry_after);
        limit->set_delay_ns(decision.delay);
      }
      result->set_error(o.error);
    }
    std::string out = "before|";
    AppendForwardResponse(from, outcomes, out);
    EXPECT_EQ(out, "before|" + expected.SerializeAsString());
  }
}

}  // namespace
}  // namespace ringlimit::cluster
