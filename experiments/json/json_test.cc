// The JSON reader on the shapes the trainer reads (safetensors headers, metrics lines), its errors, and the
// writers' escaping and shortest round-trip numbers.
#include "experiments/json/json.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

TEST(Json, ParsesSafetensorsHeaderShape) {
  auto v = ParseJson(R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->kind, JsonValue::Kind::kObject);
  EXPECT_EQ(v->Find("__metadata__")->Find("format")->text, "pt");
  const JsonValue* w = v->Find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->Find("dtype")->text, "F32");
  int64_t dim;
  ASSERT_TRUE(w->Find("shape")->array[1].AsInt64(&dim));
  EXPECT_EQ(dim, 3);
  uint64_t end;
  ASSERT_TRUE(w->Find("data_offsets")->array[1].AsUint64(&end));
  EXPECT_EQ(end, 24u);
  EXPECT_EQ(v->Find("missing"), nullptr);
}

TEST(Json, DecodesEscapesAndUnicode) {
  auto v = ParseJson(R"(["a\"b\\c\n", "\u00e9\ud83d\ude00", true, false, null, -1.5e3])");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->array[0].text, "a\"b\\c\n");
  EXPECT_EQ(v->array[1].text, "\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_TRUE(v->array[2].boolean);
  EXPECT_EQ(v->array[4].kind, JsonValue::Kind::kNull);
  double d;
  ASSERT_TRUE(v->array[5].AsDouble(&d));
  EXPECT_EQ(d, -1500);
}

TEST(Json, ReportsErrorsWithOffset) {
  EXPECT_EQ(ParseJson("{\"a\": 1,}").status().message(), "JSON at byte 8: expected a string key in object");
  EXPECT_EQ(ParseJson("[1 2]").status().message(), "JSON at byte 3: expected ',' or ']' in array");
  EXPECT_EQ(ParseJson("{\"a\":1,\"a\":2}").status().message(), "JSON at byte 10: duplicate key \"a\"");
  EXPECT_EQ(ParseJson("\"abc").status().message(), "JSON at byte 4: unterminated string");
  EXPECT_EQ(ParseJson("1 x").status().message(), "JSON at byte 2: trailing characters after the JSON value");
}

TEST(Json, QuoteEscapesWhatJsonRequires) {
  EXPECT_EQ(JsonQuote("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  auto back = ParseJson(JsonQuote("tab\there \x7f \xc3\xa9"));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->text, "tab\there \x7f \xc3\xa9");
}

TEST(Json, NumbersRoundTripShortest) {
  EXPECT_EQ(JsonNumber(0.1), "0.1");
  EXPECT_EQ(JsonNumber(3e-4), "0.0003");
  EXPECT_EQ(JsonNumber(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(JsonNumber(-std::numeric_limits<double>::infinity()), "null");
  const double x = 2.718281828459045;
  EXPECT_EQ(std::strtod(JsonNumber(x).c_str(), nullptr), x);
}

}  // namespace
}  // namespace lmf::experiments
