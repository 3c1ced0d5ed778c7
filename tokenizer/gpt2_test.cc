// Tests of the GPT-2 import/export: the bytes-to-unicode mapping, and, with GPT-2's published vocab.json +
// merges.txt from the reference data, ids equal to tiktoken's `gpt2` (expected ids committed under
// testdata/, made by tools/tokenizer/make_expected_ids.py) on the CS336 texts and Unicode edge cases.
#include <sstream>

#include "absl/strings/match.h"
#include "base/damaged_copies.h"
#include "base/file.h"
#include "base/shared_data.h"
#include "gtest/gtest.h"
#include "tokenizer/gpt2_format.h"
#include "tokenizer/test_util.h"

namespace lmf::tokenizer {
namespace {

using testing::FromHex;
using testing::ParseIds;
using testing::TempPath;

constexpr char kFixtures[] = "cs336/assignment1-basics/tests/fixtures/";

TEST(Gpt2MappingTest, BytesToUnicodeMatchesGpt2) {
  EXPECT_EQ(Gpt2CharOfByte(' '), "Ġ");
  EXPECT_EQ(Gpt2CharOfByte('\n'), "Ċ");
  EXPECT_EQ(Gpt2CharOfByte('a'), "a");
  EXPECT_EQ(Gpt2CharOfByte(0), "Ā");
  EXPECT_EQ(Gpt2CharOfByte(0xAD), "Ń");  // the soft hyphen is not printable in GPT-2's table
  for (int b = 0; b < 256; ++b) {
    const std::string s(1, static_cast<char>(b));
    EXPECT_EQ(*Gpt2StringToBytes(BytesToGpt2String(s)), s);
  }
  EXPECT_FALSE(Gpt2StringToBytes("中").ok());
}

TEST(Gpt2FormatTest, ExportThenImportGivesTheSameTokenizer) {
  Tokenizer t = testing::MakeTokenizer({{" ", "t"}, {" t", "h"}, {"\"", "\\"}, {"\n", "\n"}}, {"<|endoftext|>"});
  const std::string vocab = TempPath("vocab.json"), merges = TempPath("merges.txt");
  ASSERT_TRUE(SaveGpt2(t, vocab, merges).ok());
  auto back = LoadGpt2(vocab, merges, {"<|endoftext|>"});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->vocab(), t.vocab());
  EXPECT_EQ(back->merges(), t.merges());
  EXPECT_EQ(back->special_ids(), t.special_ids());
}

TEST(Gpt2FormatTest, BadFilesGiveClearErrors) {
  EXPECT_FALSE(ParseGpt2("{\"a\": 0", "", {}, "v.json", "m.txt").ok());
  auto missing_special = ParseGpt2("{}", "", {"<|endoftext|>"}, "v.json", "m.txt");
  ASSERT_FALSE(missing_special.ok());
  EXPECT_NE(missing_special.status().message().find("not in the vocab"), std::string::npos);
  auto no_bytes = ParseGpt2("{\"a\": 0}", "", {}, "v.json", "m.txt");
  ASSERT_FALSE(no_bytes.ok());
  EXPECT_NE(no_bytes.status().message().find("256 single bytes"), std::string::npos) << no_bytes.status();
}

// A bad merges line is quoted escaped and cut short: a file with CR-only line endings is one line of the
// whole file, which the error printed in full; raw bytes (a BOM) reached the terminal as they were.
TEST(Gpt2FormatTest, BadMergesLinesAreQuotedShortAndEscaped) {
  const std::string vocab = Gpt2VocabJson(testing::MakeTokenizer({}, {}));
  std::string cr_only;
  for (int i = 0; i < 1000; ++i) cr_only += "a b\r";
  auto long_line = ParseGpt2(vocab, cr_only, {}, "v.json", "m.txt");
  ASSERT_FALSE(long_line.ok());
  EXPECT_LT(long_line.status().message().size(), 400u) << long_line.status();  // 80 bytes, each at most \xNN
  EXPECT_NE(long_line.status().message().find("m.txt:1: expected"), std::string::npos) << long_line.status();
  EXPECT_NE(long_line.status().message().find("(3999 bytes)"), std::string::npos) << long_line.status();
  auto bom = ParseGpt2(vocab, "\xEF\xBB\xBFx y\n", {}, "v.json", "m.txt");
  ASSERT_FALSE(bom.ok());
  EXPECT_NE(bom.status().message().find("\\ufeffx y"), std::string::npos) << bom.status();
  // GPT-2's own characters stay readable; a byte that is not UTF-8 and a tab are escaped.
  auto gpt2_chars = ParseGpt2(vocab, "\xC4\xA0t \xC4\xA0he\xFF\tx\n", {}, "v.json", "m.txt");
  ASSERT_FALSE(gpt2_chars.ok());
  EXPECT_NE(gpt2_chars.status().message().find("\"\xC4\xA0t \xC4\xA0he\\xff\\x09x\""), std::string::npos)
      << gpt2_chars.status();
}

TEST(Gpt2FormatTest, VocabErrorsNameTheFileAndWhatWasExpected) {
  auto message = [](std::string_view vocab_json) {
    auto t = ParseGpt2(vocab_json, "", {}, "v.json", "m.txt");
    return t.ok() ? std::string("ok") : std::string(t.status().message());
  };
  EXPECT_EQ(message("{\"a\": 0"),
            "v.json: bad GPT-2 vocab.json: JSON at byte 7: expected ',' or '}' in object");
  EXPECT_EQ(message("{\"a\": 0, \"a\": 1}"),
            "v.json: bad GPT-2 vocab.json: JSON at byte 12: duplicate key \"a\"");
  EXPECT_EQ(message("{\"\\ud800\": 0}"),
            "v.json: bad GPT-2 vocab.json: JSON at byte 8: unpaired surrogate in \\u escape");
  EXPECT_EQ(message("[0]"),
            "v.json: bad GPT-2 vocab.json: expected a JSON object of token string -> id, found an array");
  EXPECT_EQ(message("{\"a\": -1}"),
            "v.json: bad GPT-2 vocab.json: token \"a\": expected a non-negative integer id, found -1");
  EXPECT_EQ(message("{\"a\": \"0\"}"),
            "v.json: bad GPT-2 vocab.json: token \"a\": expected a non-negative integer id, found the string "
            "\"0\"");
  EXPECT_EQ(message("{\"a\": 1}"), "v.json: ids must be 0..0 each used once; \"a\" has id 1");
  // A surrogate pair decodes to U+1F600, which GPT-2's byte mapping does not contain.
  EXPECT_EQ(message("{\"\\ud83d\\ude00\": 0}"),
            "v.json: token \"\xf0\x9f\x98\x80\" (id 0): character U+1f600 is not in GPT-2's bytes-to-unicode "
            "mapping");
}

class Gpt2ReferenceTest : public ::testing::Test {
 protected:
  // Loads GPT-2 once for all tests of the suite.
  static const Tokenizer* Gpt2(const std::string& vocab_path, const std::string& merges_path) {
    static const Tokenizer* tokenizer = [&]() -> const Tokenizer* {
      auto t = LoadGpt2(vocab_path, merges_path, {"<|endoftext|>"});
      EXPECT_TRUE(t.ok()) << t.status();
      return t.ok() ? new Tokenizer(*std::move(t)) : nullptr;
    }();
    return tokenizer;
  }
};

TEST_F(Gpt2ReferenceTest, EncodesReferenceTextsLikeTiktoken) {
  LMF_SHARED_DATA_OR_SKIP(vocab, std::string(kFixtures) + "gpt2_vocab.json");
  LMF_SHARED_DATA_OR_SKIP(merges, std::string(kFixtures) + "gpt2_merges.txt");
  const Tokenizer* t = Gpt2(vocab, merges);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->vocab_size(), 50257u);
  EXPECT_EQ(t->SpecialId("<|endoftext|>"), 50256);
  for (const char* name : {"corpus.en", "tinystories_sample.txt", "address.txt", "german.txt",
                           "special_token_trailing_newlines.txt", "special_token_double_newlines_non_whitespace.txt"}) {
    LMF_SHARED_DATA_OR_SKIP(path, std::string(kFixtures) + name);
    auto text = ReadFile(path);
    ASSERT_TRUE(text.ok());
    auto expected = ReadFile(std::string("tokenizer/testdata/tiktoken_gpt2_") + name + ".ids");
    ASSERT_TRUE(expected.ok()) << expected.status();
    const std::vector<uint32_t> ids = t->Encode(*text);
    EXPECT_EQ(ids, ParseIds(*expected)) << name;
    EXPECT_EQ(*t->Decode(ids), *text) << name;
  }
}

TEST_F(Gpt2ReferenceTest, EncodesUnicodeEdgeCasesLikeTiktoken) {
  LMF_SHARED_DATA_OR_SKIP(vocab, std::string(kFixtures) + "gpt2_vocab.json");
  LMF_SHARED_DATA_OR_SKIP(merges, std::string(kFixtures) + "gpt2_merges.txt");
  const Tokenizer* t = Gpt2(vocab, merges);
  ASSERT_NE(t, nullptr);
  auto cases = ReadFile("tokenizer/testdata/tiktoken_gpt2_unicode_cases.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  std::istringstream lines(*cases);
  std::string line;
  int checked = 0;
  while (std::getline(lines, line)) {
    const size_t space = line.find(' ');
    const std::string text = FromHex(line.substr(0, space));
    EXPECT_EQ(t->Encode(text), ParseIds(line.substr(space + 1))) << "text: " << text;
    EXPECT_EQ(*t->Decode(t->Encode(text)), text);
    ++checked;
  }
  EXPECT_EQ(checked, 226);
}

TEST_F(Gpt2ReferenceTest, ExportReproducesThePublishedFiles) {
  LMF_SHARED_DATA_OR_SKIP(vocab, std::string(kFixtures) + "gpt2_vocab.json");
  LMF_SHARED_DATA_OR_SKIP(merges, std::string(kFixtures) + "gpt2_merges.txt");
  const Tokenizer* t = Gpt2(vocab, merges);
  ASSERT_NE(t, nullptr);
  auto back = ParseGpt2(Gpt2VocabJson(*t), Gpt2MergesTxt(*t), {"<|endoftext|>"}, "exported vocab", "exported merges");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Hash(), t->Hash());
  // merges.txt is the published one plus our "#version" line.
  EXPECT_EQ(Gpt2MergesTxt(*t).substr(std::string("#version: 0.2\n").size()), *ReadFile(merges));
}

// A merges.txt cut short (an interrupted download) leaves most of vocab.json unreachable: an error, not a
// tokenizer that silently encodes differently from GPT-2. Without the special, <|endoftext|> is one too.
TEST_F(Gpt2ReferenceTest, TruncatedMergesOrAnUndeclaredAddedTokenIsAnError) {
  LMF_SHARED_DATA_OR_SKIP(vocab, std::string(kFixtures) + "gpt2_vocab.json");
  LMF_SHARED_DATA_OR_SKIP(merges, std::string(kFixtures) + "gpt2_merges.txt");
  auto vocab_text = ReadFile(vocab);
  auto merges_text = ReadFile(merges);
  ASSERT_TRUE(vocab_text.ok() && merges_text.ok());
  size_t cut = 0;
  for (int line = 0; line < 1000; ++line) cut = merges_text->find('\n', cut) + 1;
  auto truncated = ParseGpt2(*vocab_text, merges_text->substr(0, cut), {"<|endoftext|>"}, "v.json", "m.txt");
  ASSERT_FALSE(truncated.ok());
  EXPECT_TRUE(absl::StartsWith(truncated.status().message(),
                               "v.json + m.txt: 49000 multi-byte token(s) are produced by no merge"))
      << truncated.status();
  auto undeclared = ParseGpt2(*vocab_text, *merges_text, {}, "v.json", "m.txt");
  ASSERT_FALSE(undeclared.ok());
  EXPECT_TRUE(
      absl::StartsWith(undeclared.status().message(),
                       "v.json + m.txt: 1 multi-byte token(s) are produced by no merge and are not special, "
                       "first token 50256 "))
      << undeclared.status();
}

// Every truncation and 2000 seeded edits of vocab.json (with merges.txt intact), then the same of merges.txt:
// an error that names the damaged file, or a tokenizer that encodes and decodes text back to the same
// bytes. Never a crash (or, under --config=asan, a bad read).
TEST(Gpt2FormatTest, DamagedFilesGiveErrorsNamingTheFileOrWorkingTokenizers) {
  const Tokenizer t = testing::MakeTokenizer(
      {{" ", "t"}, {" t", "h"}, {"\"", "\\"}, {"\n", "\n"}, {"e", "r"}}, {"<|endoftext|>"});
  const std::string vocab = Gpt2VocabJson(t), merges = Gpt2MergesTxt(t);
  const std::string text = "\n\n th\"\\er<|endoftext|>\xff\xc3\xa9";
  for (const bool damage_vocab : {true, false}) {
    int errors = 0;
    for (const std::string& bad : DamagedCopies(damage_vocab ? vocab : merges, /*seed=*/17, /*edits=*/2000)) {
      absl::StatusOr<Tokenizer> r = damage_vocab
                                        ? ParseGpt2(bad, merges, {"<|endoftext|>"}, "v.json", "m.txt")
                                        : ParseGpt2(vocab, bad, {"<|endoftext|>"}, "v.json", "m.txt");
      if (!r.ok()) {
        ++errors;
        EXPECT_TRUE(absl::StrContains(r.status().message(), damage_vocab ? "v.json" : "m.txt"))
            << r.status() << "\n"
            << Escaped(bad);
        continue;
      }
      absl::StatusOr<std::string> back = r->DecodeBytes(r->Encode(text));
      ASSERT_TRUE(back.ok()) << back.status() << "\n" << Escaped(bad);
      EXPECT_EQ(*back, text) << Escaped(bad);
    }
    EXPECT_GT(errors, 500) << (damage_vocab ? "vocab.json" : "merges.txt");
  }
}

}  // namespace
}  // namespace lmf::tokenizer
