// The RocksDB value of a state (storage/state_codec.h).
#include "storage/state_codec.h"

#include <gtest/gtest.h>

#include "limiter/spec_wire.h"
#include "state.pb.h"
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

}  // namespace
}  // namespace ringlimit::storage
