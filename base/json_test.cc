// The JSON reader on the shapes its users read (safetensors headers, metrics lines, GPT-2's vocab.json: a
// large object of strings with \u escapes), its errors, the UTF-8 encoder, and the writers' escaping and
// shortest round-trip numbers.
#include "base/json.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/damaged_copies.h"
#include "gtest/gtest.h"

namespace lmf {
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

TEST(Json, RejectsUnpairedSurrogates) {
  EXPECT_EQ(ParseJson(R"("\ud83d")").status().message(), "JSON at byte 7: unpaired surrogate in \\u escape");
  EXPECT_EQ(ParseJson(R"("\ud83dx")").status().message(), "JSON at byte 7: unpaired surrogate in \\u escape");
  EXPECT_EQ(ParseJson(R"("\ud83d\u0041")").status().message(),
            "JSON at byte 13: unpaired surrogate in \\u escape");
  EXPECT_EQ(ParseJson(R"("\ude00")").status().message(), "JSON at byte 7: unpaired surrogate in \\u escape");
  EXPECT_EQ(ParseJson(R"("\u12zz")").status().message(), "JSON at byte 3: bad \\u escape");
  EXPECT_EQ(ParseJson(R"("\u12")").status().message(), "JSON at byte 3: truncated \\u escape");
}

// GPT-2's vocab.json shape at its size: one object of 50,257 string -> id members in file order.
TEST(Json, ReadsAVocabSizedObjectAndFindsALateDuplicate) {
  constexpr int kMembers = 50257;
  std::string text = "{";
  for (int i = 0; i < kMembers; ++i) absl::StrAppend(&text, i ? ", " : "", "\"tok\\u0120", i, "\": ", i);
  auto v = ParseJson(text + "}");
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->object.size(), static_cast<size_t>(kMembers));
  EXPECT_EQ(v->object[kMembers - 1].first, absl::StrCat("tok\xc4\xa0", kMembers - 1));
  uint64_t id;
  ASSERT_TRUE(v->object[kMembers - 1].second.AsUint64(&id));
  EXPECT_EQ(id, static_cast<uint64_t>(kMembers - 1));
  auto duplicate = ParseJson(text + ", \"tok\\u01207\": 7}");
  ASSERT_FALSE(duplicate.ok());
  EXPECT_NE(duplicate.status().message().find("duplicate key \"tok\xc4\xa0"
                                              "7\""),
            std::string::npos)
      << duplicate.status();
}

TEST(Json, AppendUtf8EncodesEachLengthAtItsBounds) {
  std::string s;
  for (uint32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) AppendUtf8(cp, &s);
  EXPECT_EQ(
      s, std::string("\x00\x7f\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf0\x90\x80\x80\xf4\x8f\xbf\xbf", 20));
}

TEST(Json, ReportsErrorsWithOffset) {
  EXPECT_EQ(ParseJson("{\"a\": 1,}").status().message(), "JSON at byte 8: expected a string key in object");
  EXPECT_EQ(ParseJson("[1 2]").status().message(), "JSON at byte 3: expected ',' or ']' in array");
  EXPECT_EQ(ParseJson("{\"a\":1,\"a\":2}").status().message(), "JSON at byte 10: duplicate key \"a\"");
  EXPECT_EQ(ParseJson("\"abc").status().message(), "JSON at byte 4: unterminated string");
  EXPECT_EQ(ParseJson("1 x").status().message(), "JSON at byte 2: trailing characters after the JSON value");
  // Past the first line, the line and column (1-based) too.
  EXPECT_EQ(ParseJson("[\n  {\"a\": 1},\n  {\"a\" 2}\n]").status().message(),
            "JSON at byte 21 (line 3, column 8): expected ':' after object key");
  EXPECT_EQ(ParseJson("[1,\n").status().message(),
            "JSON at byte 4 (line 2, column 1): unexpected end of input");
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

// Every truncation and 3000 seeded edits of a JSON text with each kind of value: an error that says at which
// byte, or a value. Never a crash (or, under --config=asan, a bad read).
TEST(Json, DamagedTextsGiveErrorsWithOffsetOrValues) {
  const std::string valid =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("s":"a\"b\\\u00e9\ud83d\ude00\n","n":-1.5e-3,"big":18446744073709551615,"t":true,"f":false,)"
      R"("z":null,"nest":[[],{},[{"k":[1,2.5E+2]}]]})";
  ASSERT_TRUE(ParseJson(valid).ok()) << ParseJson(valid).status();
  int errors = 0;
  for (const std::string& bad : DamagedCopies(valid, /*seed=*/5, /*edits=*/3000)) {
    absl::StatusOr<JsonValue> r = ParseJson(bad);
    if (r.ok()) continue;
    ++errors;
    EXPECT_TRUE(absl::StartsWith(r.status().message(), "JSON at byte ")) << r.status() << "\n"
                                                                         << Escaped(bad);
  }
  EXPECT_GT(errors, 1000);
}

}  // namespace
}  // namespace lmf
