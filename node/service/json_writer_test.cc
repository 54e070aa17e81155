#include "node/service/json_writer.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace ringlimit::node {
namespace {

TEST(JsonWriterTest, WritesNestedValuesWithCommas) {
  std::string out;
  JsonWriter w(&out);
  w.BeginObject();
  w.Field("s", "a\"b\\c\n\x01");
  w.FieldInt("i", -5);
  w.FieldUint("u", 18446744073709551615ULL);
  w.FieldBool("b", true);
  w.FieldDouble("d", 0.25);
  w.Key("arr");
  w.BeginArray();
  w.Int(1);
  w.BeginObject();
  w.EndObject();
  w.String("x");
  w.EndArray();
  w.EndObject();
  EXPECT_EQ(out,
            R"({"s":"a\"b\\c\n\u0001","i":-5,"u":18446744073709551615,"b":true,"d":0.25,"arr":[1,{},"x"]})");
  EXPECT_EQ(boost::json::parse(out).at("s").as_string(), "a\"b\\c\n\x01");
}

TEST(JsonWriterTest, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_FALSE(IsValidUtf8("\xC3"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // above U+10FFFF
}

TEST(JsonWriterTest, ToValidUtf8ReplacesInvalidBytes) {
  EXPECT_EQ(ToValidUtf8("h\xC3\xA9llo \xE2\x82\xAC"), "h\xC3\xA9llo \xE2\x82\xAC");
  EXPECT_EQ(ToValidUtf8(std::string("a\xFF") + "b\xC3"), std::string("a\xEF\xBF\xBD") + "b\xEF\xBF\xBD");
  EXPECT_TRUE(IsValidUtf8(ToValidUtf8("\xC0\xAF\xED\xA0\x80")));
}

TEST(AppenderTest, WritesPiecesAfterWhatWasThereAndGrowsPastItsRoom) {
  std::string out = "head|";
  {
    Appender a(out, 4);  // far less room than needed: every kind of piece has to grow it
    a.Put("abc");
    a.Put('-');
    a.Uint(18446744073709551615u);
    a.Put(' ');
    a.Int(-9223372036854775807 - 1);
    a.Put(' ');
    a.JsonString("plain");
    a.JsonString("q\"\n\x01");
    a.Put(std::string(300, 'x'));
    a.Put(std::string_view());
  }
  EXPECT_EQ(out, "head|abc-18446744073709551615 -9223372036854775808 \"plain\"\"q\\\"\\n\\u0001\"" +
                     std::string(300, 'x'));
}

TEST(AppenderTest, CloseCutsTheStringToWhatWasWrittenOnce) {
  std::string out;
  Appender a(out, 100);
  a.Put("xy");
  a.Close();
  EXPECT_EQ(out, "xy");
  a.Close();
  EXPECT_EQ(out, "xy");
}

}  // namespace
}  // namespace ringlimit::node
