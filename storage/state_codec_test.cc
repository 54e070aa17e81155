// The RocksDB value of a state (storage/state_codec.h).
#include "storage/state_codec.h"

#include <gtest/gtest.h>

#include "state.pb.h"

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
  s.state.algorithm = limiter::Algorithm::kSlidingWindow;
  s.state.word[0] = 1'700'000'000LL * limiter::kSecond;
  s.state.word[1] = 7;
  s.state.tail = {1, 2, 3, 4, 5, 6, 7};
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
  s.state = limiter::State{};
  std::optional<StoredState> back = DecodeStateValue("api", EncodeStateValue(s, 0));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->state, limiter::State{});
}

TEST(StateCodec, UnknownEnumNumbersAndInvalidSpecsAreRejected) {
  state::StoredState good;
  StateToProto(Sample(), 0, &good);
  ASSERT_TRUE(StateFromProto("api", good));

  state::StoredState m = good;
  m.set_state_algorithm(static_cast<state::Algorithm>(8));  // written by a newer algorithm
  EXPECT_FALSE(DecodeStateValue("api", m.SerializeAsString()));
  m = good;
  m.mutable_spec()->set_algorithm(static_cast<state::Algorithm>(8));
  EXPECT_FALSE(DecodeStateValue("api", m.SerializeAsString()));
  m = good;
  m.mutable_spec()->set_mode(static_cast<state::Mode>(4));
  EXPECT_FALSE(DecodeStateValue("api", m.SerializeAsString()));
  m = good;
  m.mutable_spec()->set_limit(0);
  EXPECT_FALSE(DecodeStateValue("api", m.SerializeAsString()));
  m = good;
  m.add_word(0);  // 4 words
  EXPECT_FALSE(DecodeStateValue("api", m.SerializeAsString()));
  EXPECT_FALSE(DecodeStateValue("api", "\xff\xff not a message"));
}

}  // namespace
}  // namespace ringlimit::storage
