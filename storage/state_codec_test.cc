// The RocksDB value of a state (storage/state_codec.h).
#include "storage/state_codec.h"

#include <gtest/gtest.h>

#include "limiter/spec_wire.h"
#include "limiter/test_util.h"
#include "state.pb.h"
#include "storage/proto_append.h"
#include "storage/testing/charge.h"

using ringlimit::storage_testing::ChargeMerged;

namespace ringlimit::storage {
namespace {

StoredState Sample() {
  StoredState s;
  s.name = "api";
  s.spec.algorithm = limiter::Algorithm::kSlidingWindow;
  s.spec.limit = 100;
  s.spec.window = 60 * limiter::kSecond;
  s.spec.buckets = 6;
  s.spec.mode = limiter::Mode::kSoft;
  s.spec.soft_pct = 10;
  for (int i = 0; i < 7; ++i) {
    ChargeMerged(s.spec, s.state, {1, 1'700'000'000LL * limiter::kSecond + i * limiter::kSecond, 0.});
  }
  s.version = 42;
  return s;
}

TEST(StateCodec, RoundTrip) {
  const StoredState s = Sample();
  const std::string value = EncodeStateValue(s, 123);
  std::optional<StoredState> back = DecodeStateValue("api", value);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->name, s.name);
  EXPECT_EQ(back->spec, s.spec);
  EXPECT_EQ(back->state, s.state);
  EXPECT_EQ(back->version, s.version);
  EXPECT_EQ(DecodeExpiry(value), 123);
}

TEST(StateCodec, AStateNeverWrittenKeepsNoAlgorithm) {
  StoredState s = Sample();
  s.state = limiter::MergeState{};
  std::optional<StoredState> back = DecodeStateValue("api", EncodeStateValue(s, 0));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->state, limiter::MergeState{});
}

TEST(StateCodec, UnknownEnumNumbersAndInvalidSpecsAreRejected) {
  state::StoredState good;
  StateToProto(Sample(), 0, &good);
  ASSERT_TRUE(StateFromProto("api", good));

  state::StoredState m = good;
  m.set_state_algorithm(static_cast<state::Algorithm>(9));  // written by a newer algorithm
  EXPECT_FALSE(DecodeStateValue("api", m.SerializeAsString()));
  m = good;
  m.mutable_spec()->set_algorithm(static_cast<state::Algorithm>(9));
  EXPECT_FALSE(DecodeStateValue("api", m.SerializeAsString()));
  m = good;
  m.mutable_spec()->set_mode(static_cast<state::Mode>(4));
  EXPECT_FALSE(DecodeStateValue("api", m.SerializeAsString()));
  m = good;
  m.mutable_spec()->set_limit(0);
  EXPECT_FALSE(DecodeStateValue("api", m.SerializeAsString()));
  m = good;
  m.mutable_merged()->pop_back();  // cut short
  EXPECT_FALSE(DecodeStateValue("api", m.SerializeAsString()));
  m = good;
  m.clear_merged();
  for (int i = 0; i < 4; ++i) m.add_word(0);  // a row from before merged states, with 4 words
  EXPECT_FALSE(DecodeStateValue("api", m.SerializeAsString()));
  EXPECT_FALSE(DecodeStateValue("api", "\xff\xff not a message"));
}

// A row written before states were mergeable (plain words, no merged bytes) reads back as a merged
// state that decides exactly as the plain one would, for every algorithm.
TEST(StateCodec, ARowFromBeforeMergedStatesDecidesAsItDid) {
  const limiter::TimeNs t0 = 1'700'000'000LL * limiter::kSecond;
  for (limiter::Algorithm a :
       {limiter::Algorithm::kFixedWindow, limiter::Algorithm::kSlidingLog, limiter::Algorithm::kSlidingWindow,
        limiter::Algorithm::kSlidingWindowApprox, limiter::Algorithm::kTokenBucket,
        limiter::Algorithm::kLeakyBucket, limiter::Algorithm::kGcra}) {
    SCOPED_TRACE(std::string(limiter::AlgorithmName(a)));
    limiter::LimitSpec spec;
    spec.algorithm = a;
    spec.limit = 10;
    spec.window = 60 * limiter::kSecond;
    if (a == limiter::Algorithm::kSlidingWindow) spec.buckets = 6;
    limiter::State plain;
    // Spread over two windows, so the approximation's previous window and the buckets' drain count.
    for (int i = 0; i < 14; ++i) limiter::Check(spec, plain, {1, t0 + i * 7 * limiter::kSecond, 0.});
    state::StoredState row;
    limiter::SpecToProto(spec, row.mutable_spec());
    row.set_state_algorithm(limiter::AlgorithmToProto(plain.algorithm));
    for (int64_t w : plain.word) row.add_word(w);
    row.mutable_tail()->Add(plain.tail.begin(), plain.tail.end());
    row.set_version(77);
    std::optional<StoredState> back = DecodeStateValue("api", row.SerializeAsString());
    ASSERT_TRUE(back);
    EXPECT_EQ(back->version, 77u);
    for (int k = 0; k < 30; ++k) {
      const limiter::TimeNs at = t0 + 98 * limiter::kSecond + k * 3 * limiter::kSecond;
      const limiter::Decision want = limiter::Check(spec, plain, {1, at, 0.});
      const limiter::Decision got = ChargeMerged(spec, back->state, {1, at, 0.});
      ASSERT_EQ(got.allowed, want.allowed) << "check " << k;
      ASSERT_EQ(got.remaining, want.remaining) << "check " << k;
    }
  }
}

TEST(StateCodec, AppendStateMessageWritesWhatProtobufWrites) {
  StoredState s = Sample();
  for (const limiter::TimeNs expiry : {limiter::TimeNs{0}, limiter::TimeNs{123}, limiter::TimeNs{-5}}) {
    state::StoredState message;
    StateToProto(s, expiry, &message);
    std::string bytes = "prefix";
    AppendStateMessage(s, expiry, bytes);
    EXPECT_EQ(bytes, "prefix" + message.SerializeAsString()) << expiry;
  }
  StoredState never;  // a state never written: no merged records, version 0
  never.spec = s.spec;
  state::StoredState message;
  StateToProto(never, 0, &message);
  std::string bytes;
  AppendStateMessage(never, 0, bytes);
  EXPECT_EQ(bytes, message.SerializeAsString());
}

// Specs of every algorithm and mode, with the optional fields set and not.
std::vector<StoredState> Varied() {
  std::vector<StoredState> out;
  for (const limiter::Algorithm a : limiter::testing::AllAlgorithms()) {
    for (int variant = 0; variant < 4; ++variant) {
      StoredState s;
      s.name = "k";
      s.spec.algorithm = a;
      s.spec.limit = variant == 3 && a != limiter::Algorithm::kSlidingLog ? 1'000'000'000 : 10 + variant;
      s.spec.window = (1 + variant) * limiter::kSecond;
      s.spec.buckets = a == limiter::Algorithm::kSlidingWindow ? 6 : 60;
      s.spec.burst = variant == 1 ? 5 : 0;
      s.spec.max_delay = variant == 2 && a == limiter::Algorithm::kLeakyBucket ? limiter::kSecond : 0;
      s.spec.count_denied = variant == 1;
      s.spec.mode = static_cast<limiter::Mode>(variant);
      if (s.spec.mode == limiter::Mode::kSoft) s.spec.soft_pct = 25;
      if (s.spec.mode == limiter::Mode::kDynamic) s.spec.dynamic_limit = s.spec.limit * 2;
      const auto invalid = limiter::Validate(s.spec);
      EXPECT_FALSE(invalid.has_value()) << limiter::AlgorithmName(a) << " " << variant << ": "
                                        << (invalid ? invalid->field + " " + invalid->message : "");
      for (int i = 0; i < variant; ++i) {
        ChargeMerged(s.spec, s.state, {1, 1'700'000'000LL * limiter::kSecond + i * limiter::kSecond, 0.});
      }
      s.version = static_cast<uint64_t>(variant) * 1000;
      out.push_back(std::move(s));
    }
  }
  return out;
}

TEST(StateCodec, AppendStateMessageWritesWhatProtobufWritesForEverySpec) {
  for (const StoredState& s : Varied()) {
    state::StoredState message;
    StateToProto(s, 9, &message);
    std::string bytes;
    AppendStateMessage(s, 9, bytes);
    EXPECT_EQ(bytes, message.SerializeAsString()) << limiter::AlgorithmName(s.spec.algorithm);
  }
}

bool Same(const std::optional<StoredState>& a, const std::optional<StoredState>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a.has_value() ||
         (a->name == b->name && a->spec == b->spec && a->state == b->state && a->version == b->version);
}

// The in-place decoder answers what Protobuf's parser answers: for every state, and for the bytes around
// them that it leaves to Protobuf (unknown fields, a spec in two parts, truncations, a bad tag).
TEST(StateCodec, DecodeStateValueAnswersWhatProtobufAnswers) {
  namespace pa = proto_append;
  int cases = 0;
  auto same = [&](const std::string& value, const std::string& what) {
    ++cases;
    EXPECT_TRUE(Same(DecodeStateValue("k", value), DecodeStateValueByProtobuf("k", value))) << what;
    state::StoredState m;
    const bool parses = m.ParseFromString(value);
    EXPECT_EQ(DecodeExpiry(value), parses ? std::optional<limiter::TimeNs>(m.expiry_ns()) : std::nullopt)
        << what;
  };
  for (const StoredState& s : Varied()) {
    const std::string value = EncodeStateValue(s, 77);
    ASSERT_TRUE(DecodeStateValue("k", value).has_value());
    same(value, "as written");
    std::string unknown = value;
    pa::Tag(unknown, 99, pa::kVarint);
    pa::Varint(unknown, 5);
    pa::Fixed64(unknown, 98, 5);
    pa::Bytes(unknown, 97, "x");
    same(unknown, "unknown fields");
    std::string twice = value;
    pa::Bytes(twice, 1, "");  // a second, empty spec: merged into the first
    same(twice, "spec twice");
    std::string later = value;
    pa::Tag(later, 6, pa::kVarint);  // a scalar given again: the last one counts
    pa::Varint(later, 5);
    same(later, "version twice");
    std::string wrong = value;
    pa::Tag(wrong, 6, pa::kFixed64);  // a known field with another wire type: an unknown field to Protobuf
    wrong.append(8, '\1');
    same(wrong, "wrong wire type");
    for (size_t cut = 0; cut < value.size(); cut += 3) same(value.substr(0, cut), "truncated");
    same(value + std::string(1, '\0'), "a zero tag");
    same(std::string(1, '\0') + value, "a leading zero tag");
  }
  same("", "empty");
  EXPECT_GT(cases, 100);
}

}  // namespace
}  // namespace ringlimit::storage
