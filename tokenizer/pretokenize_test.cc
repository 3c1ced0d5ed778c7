// Tests of the GPT-2 pre-tokenizer: hand-checked cases for each alternative of the pattern, a differential
// test against Python's `regex` module on 3,000 random Unicode strings (testdata/pretokenize_cases.txt,
// made by tools/tokenizer/make_pretokenize_cases.py), special-token splitting, and safe chunk cuts.
#include "tokenizer/pretokenize.h"

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "base/file.h"
#include "gtest/gtest.h"

namespace lmf::tokenizer {
namespace {

std::vector<std::string> Pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : Pretokenize(text)) out.emplace_back(p);
  return out;
}

using V = std::vector<std::string>;

TEST(PretokenizeTest, ContractionsAreTheirOwnPieces) {
  EXPECT_EQ(Pieces("don't we'll they've you're I'm he'd it's"),
            (V{"don", "'t", " we", "'ll", " they", "'ve", " you", "'re", " I", "'m", " he", "'d", " it", "'s"}));
  // Only lower case, and only at the start of a piece: "'S" is punctuation then a word.
  EXPECT_EQ(Pieces("IT'S"), (V{"IT", "'", "S"}));
  EXPECT_EQ(Pieces("?'s"), (V{"?'", "s"}));
  EXPECT_EQ(Pieces(" 's"), (V{" '", "s"}));
}

TEST(PretokenizeTest, OptionalLeadingSpaceJoinsLettersNumbersAndPunctuation) {
  EXPECT_EQ(Pieces("Hello world 42 !!"), (V{"Hello", " world", " 42", " !!"}));
  EXPECT_EQ(Pieces("abc123def"), (V{"abc", "123", "def"}));
  EXPECT_EQ(Pieces("a.b,c"), (V{"a", ".", "b", ",", "c"}));
}

TEST(PretokenizeTest, LettersAndNumbersAreUnicodeCategories) {
  EXPECT_EQ(Pieces("héllo wörld"), (V{"héllo", " wörld"}));
  EXPECT_EQ(Pieces("日本語 テキスト"), (V{"日本語", " テキスト"}));
  EXPECT_EQ(Pieces("x٣٤y"), (V{"x", "٣٤", "y"}));         // Arabic-Indic digits are \p{N}
  EXPECT_EQ(Pieces("Ⅻ½"), (V{"Ⅻ½"}));                      // letter numbers and fractions are \p{N}
  EXPECT_EQ(Pieces("e\u0301"), (V{"e", "\u0301"}));         // a combining mark is neither letter nor number
  EXPECT_EQ(Pieces(" 😀🚀"), (V{" 😀🚀"}));
}

// The character classes are Unicode 16.0's, as tiktoken's gpt2 and HF tokenizers have them: characters new
// in Unicode 17 (here U+323B0, CJK Extension J; U+088F, U+1E6C0) are unassigned there, so punctuation-like,
// and "<U+323B0>'s" splits as "<U+323B0>'" + "s" (as a letter it gave "<U+323B0>" + "'s": other ids).
TEST(PretokenizeTest, CharactersNewInUnicode17AreUnassignedAsInTiktoken) {
  EXPECT_EQ(Pieces("\xF0\xB2\x8E\xB0's"), (V{"\xF0\xB2\x8E\xB0'", "s"}));
  EXPECT_EQ(Pieces("a\xE0\xA2\x8F\x62"), (V{"a", "\xE0\xA2\x8F", "b"}));  // U+088F, then b (0x62)
  EXPECT_EQ(Pieces("1\xF0\x9E\x9B\x80 x"), (V{"1", "\xF0\x9E\x9B\x80", " x"}));  // U+1E6C0
  EXPECT_EQ(Pieces("\xF0\xB0\x80\x80's"), (V{"\xF0\xB0\x80\x80", "'s"}));  // U+30000 (Unicode 13): a letter
}

TEST(PretokenizeTest, WhitespaceRunsLeaveTheirLastCharacterToTheNextPiece) {
  EXPECT_EQ(Pieces("a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(Pieces("a\n\nb"), (V{"a", "\n", "\n", "b"}));   // \n then \n: '\s+(?!\S)' then '\s+'
  EXPECT_EQ(Pieces("a\tb"), (V{"a", "\t", "b"}));
  EXPECT_EQ(Pieces("a  \n"), (V{"a", "  \n"}));             // at the end, the run is taken whole
  EXPECT_EQ(Pieces("   "), (V{"   "}));
  EXPECT_EQ(Pieces(" "), (V{" "}));
  EXPECT_EQ(Pieces("a\u3000\u3000b"), (V{"a", "\u3000", "\u3000", "b"}));  // ideographic spaces are \s
  EXPECT_EQ(Pieces("x \u00a0y"), (V{"x", " ", "\u00a0", "y"}));
}

TEST(PretokenizeTest, InvalidUtf8BytesArePunctuation) {
  const std::string text = std::string("ab\xff\xfe cd\xc3", 8);
  EXPECT_EQ(Pieces(text), (V{"ab", "\xff\xfe", " cd", "\xc3"}));
}

TEST(PretokenizeTest, PiecesAlwaysConcatenateToTheInput) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text(rng() % 64, '\0');
    for (char& c : text) c = static_cast<char>(rng() & 0xff);
    std::string joined;
    for (std::string_view p : Pretokenize(text)) {
      ASSERT_FALSE(p.empty());
      joined += p;
    }
    ASSERT_EQ(joined, text);
  }
}

TEST(PretokenizeTest, MatchesPythonRegexOnRandomUnicode) {
  auto cases = ReadFile("tokenizer/testdata/pretokenize_cases.txt");
  ASSERT_TRUE(cases.ok()) << cases.status();
  int checked = 0;
  std::istringstream lines(*cases);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t space = line.find(' ');
    ASSERT_NE(space, std::string::npos) << line;
    std::string text;
    for (size_t i = 0; i + 1 < space; i += 2) {
      text.push_back(static_cast<char>(std::stoi(line.substr(i, 2), nullptr, 16)));
    }
    std::vector<std::string> expected;
    size_t pos = 0;
    std::istringstream lengths(line.substr(space + 1));
    std::string len;
    while (std::getline(lengths, len, ',')) {
      const size_t n = std::stoul(len);
      expected.push_back(text.substr(pos, n));
      pos += n;
    }
    ASSERT_EQ(Pieces(text), expected) << "text (hex) " << line.substr(0, space);
    ++checked;
  }
  EXPECT_EQ(checked, 3000);
}

TEST(SpecialTokenSplitterTest, SplitsOnSpecialsLongestFirst) {
  SpecialTokenSplitter one({"<|endoftext|>"});
  std::vector<std::string> parts;
  auto collect = [&](const SpecialTokenSplitter& s, std::string_view text) {
    parts.clear();
    s.Split(
        text, [&](std::string_view t) { parts.push_back("T:" + std::string(t)); },
        [&](int i) { parts.push_back("S:" + s.specials()[i]); });
    return parts;
  };
  EXPECT_EQ(collect(one, "a<|endoftext|><|endoftext|>b"),
            (V{"T:a", "S:<|endoftext|>", "S:<|endoftext|>", "T:b"}));
  SpecialTokenSplitter two({"<|endoftext|>", "<|endoftext|><|endoftext|>"});
  EXPECT_EQ(collect(two, "a<|endoftext|><|endoftext|>b<|endoftext|>"),
            (V{"T:a", "S:<|endoftext|><|endoftext|>", "T:b", "S:<|endoftext|>"}));
  // A special containing another wins over it; the leftmost start wins over a longer one further on.
  SpecialTokenSplitter nested({"<|x|>", "<|x|>!", "x|>!!"});
  EXPECT_EQ(collect(nested, "<|x|>!!"), (V{"S:<|x|>!", "T:!"}));
  EXPECT_EQ(collect(one, "<|endoftext|"), (V{"T:<|endoftext|"}));
  EXPECT_EQ(collect(one, ""), V{});
}

TEST(NextSafeCutTest, CutsPretokenizeLikeTheWhole) {
  SpecialTokenSplitter specials({"<|endoftext|>"});
  std::mt19937 rng(11);
  const char* atoms[] = {"a", "b", " ", "\n", "\n\n", "  ", "'s", "é", "1", ".", "<|endoftext|>", "<|end", "\t"};
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int len = rng() % 40;
    for (int i = 0; i < len; ++i) text += atoms[rng() % (sizeof(atoms) / sizeof(atoms[0]))];
    auto split_all = [&](std::string_view t) {
      std::vector<std::string> out;
      specials.Split(
          t, [&](std::string_view seg) { for (auto p : Pretokenize(seg)) out.emplace_back(p); },
          [&](int) { out.push_back("<special>"); });
      return out;
    };
    const size_t from = text.empty() ? 0 : rng() % text.size();
    const size_t cut = NextSafeCut(text, from, specials);
    ASSERT_GE(cut, from);
    ASSERT_LE(cut, text.size());
    std::vector<std::string> joined = split_all(std::string_view(text).substr(0, cut));
    for (auto& p : split_all(std::string_view(text).substr(cut))) joined.push_back(p);
    ASSERT_EQ(joined, split_all(text)) << "text=" << text << " cut=" << cut;
  }
}

}  // namespace
}  // namespace lmf::tokenizer
