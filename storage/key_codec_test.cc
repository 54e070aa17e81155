#include "storage/key_codec.h"

#include <gtest/gtest.h>

#include <string>

namespace ringlimit::storage {
namespace {

TEST(KeyCodecTest, RoundTripsAnyBytes) {
  std::string long_entity(300, 'x');  // a two-byte length prefix
  for (std::string_view entity : {std::string_view("user:42"), std::string_view("a\0b", 3),
                                  std::string_view(long_entity), std::string_view("")}) {
    for (std::string_view name :
         {std::string_view("per_minute"), std::string_view(""), std::string_view("\x80")}) {
      std::string key = EncodeRowKey(0x0102030405060708ULL, entity, name);
      auto row = DecodeRowKey(key);
      ASSERT_TRUE(row.has_value());
      EXPECT_EQ(row->token, 0x0102030405060708ULL);
      EXPECT_EQ(row->entity, entity);
      EXPECT_EQ(row->name, name);
      EXPECT_TRUE(key.starts_with(EntityPrefix(row->token, entity)));
    }
  }
}

TEST(KeyCodecTest, TokenIsBigEndianSoRangesAreContiguous) {
  EXPECT_EQ(TokenPrefix(0x0102030405060708ULL), std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8));
  EXPECT_LT(EncodeRowKey(1, "zzz", "z"), EncodeRowKey(2, "a", "a"));
  EXPECT_LT(EncodeRowKey(0xff, "zzz", "z"), EncodeRowKey(0x100, "a", "a"));
}

TEST(KeyCodecTest, EntityPrefixDoesNotMatchALongerEntity) {
  // "ab" + name "c" must not be taken as a row of entity "abc": the length prefix differs.
  EXPECT_FALSE(EncodeRowKey(7, "abc", "n").starts_with(EntityPrefix(7, "ab")));
}

TEST(KeyCodecTest, RejectsMalformedKeys) {
  EXPECT_FALSE(DecodeRowKey("short").has_value());
  std::string bad = TokenPrefix(1) + "\x05" + "ab";  // length 5, only 2 bytes follow
  EXPECT_FALSE(DecodeRowKey(bad).has_value());
}

}  // namespace
}  // namespace ringlimit::storage
