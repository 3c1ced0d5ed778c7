// Tests of the Tokenizer on small hand-made vocabularies: merge order, specials, decoding (U+FFFD, unknown
// ids), validation errors, round trips on random bytes and Unicode, the tokenizer file and its hash.
#include "tokenizer/tokenizer.h"

#include <random>

#include "absl/strings/match.h"
#include "base/damaged_copies.h"
#include "base/file.h"
#include "gtest/gtest.h"
#include "tokenizer/test_util.h"
#include "tokenizer/tokenizer_file.h"

namespace lmf::tokenizer {
namespace {

using testing::MakeTokenizer;
using testing::TempPath;

std::vector<std::string> Strings(const Tokenizer& t, const std::vector<uint32_t>& ids) {
  std::vector<std::string> out;
  for (uint32_t id : ids) out.push_back(t.vocab()[id]);
  return out;
}
using V = std::vector<std::string>;

TEST(TokenizerTest, MergesApplyByRankWithinEachPretoken) {
  // Rank order: "t"+"h", "th"+"e", " "+"th"... "he" exists but ranks after "th".
  Tokenizer t = MakeTokenizer({{"t", "h"}, {"th", "e"}, {" ", "the"}, {"h", "e"}, {"e", "r"}}, {});
  EXPECT_EQ(Strings(t, t.Encode("the there")), (V{"the", " the", "r", "e"}));
  // "he" merges only where "th" did not take the h first.
  EXPECT_EQ(Strings(t, t.Encode("hehe")), (V{"he", "he"}));
  // Merges never cross pre-token boundaries: "e" and " t" are in different pieces.
  EXPECT_EQ(Strings(t, t.Encode("he th")), (V{"he", " ", "th"}));
}

TEST(TokenizerTest, EqualRanksMergeLeftmostFirst) {
  Tokenizer t = MakeTokenizer({{"a", "a"}, {"aa", "a"}}, {});
  EXPECT_EQ(Strings(t, t.Encode("aaa")), (V{"aaa"}));       // aa+a, not a+aa
  EXPECT_EQ(Strings(t, t.Encode("aaaa")), (V{"aa", "aa"}));  // (aa)(aa): both aa merges come before aa+a
  EXPECT_EQ(Strings(t, t.Encode("aaaaa")), (V{"aa", "aaa"}));
}

// The definition of BPE encoding, written plainly: merge the lowest-ranked adjacent pair (leftmost on
// ties) until none is left.
std::vector<uint32_t> ReferenceMerge(const Tokenizer& t, const std::string& piece) {
  std::vector<uint32_t> ids;
  for (unsigned char c : piece) ids.push_back(t.ByteId(c));
  while (true) {
    uint32_t best_rank = UINT32_MAX, best_result = 0;
    size_t best = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      uint32_t rank, result;
      if (t.FindMerge(ids[i], ids[i + 1], &rank, &result) && rank < best_rank) {
        best_rank = rank;
        best_result = result;
        best = i;
      }
    }
    if (best_rank == UINT32_MAX) return ids;
    ids[best] = best_result;
    ids.erase(ids.begin() + best + 1);
  }
}

TEST(TokenizerTest, ShortAndLongPiecesMergeByTheDefinition) {
  // One letter run is one pre-token; runs over 96 bytes take the heap path, shorter ones the linear one.
  Tokenizer t = MakeTokenizer({{"a", "b"}, {"ab", "ab"}, {"abab", "c"}, {"b", "c"}, {"c", "c"}, {"a", "a"},
                               {"cc", "ab"}, {"aa", "a"}, {"bc", "bc"}},
                              {});
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::string piece(1 + rng() % 400, 'a');
    for (char& c : piece) c = "abc"[rng() % 3];
    ASSERT_EQ(t.Encode(piece), ReferenceMerge(t, piece)) << piece;
  }
  Tokenizer sp = MakeTokenizer({{" ", " "}, {"  ", "  "}}, {});
  EXPECT_EQ(sp.Encode(std::string(500, ' ')).size(), 125u);
}

TEST(TokenizerTest, SpecialsAreNeverMergedAndLongestWins) {
  Tokenizer t = MakeTokenizer({{"<", "|"}, {"e", "n"}}, {"<|endoftext|>", "<|endoftext|><|endoftext|>"});
  const int64_t eot = t.SpecialId("<|endoftext|>");
  const int64_t double_eot = t.SpecialId("<|endoftext|><|endoftext|>");
  ASSERT_GE(eot, 0);
  ASSERT_GE(double_eot, 0);
  std::vector<uint32_t> ids = t.Encode("en<|endoftext|><|endoftext|>en<|endoftext|>");
  EXPECT_EQ(ids, (std::vector<uint32_t>{static_cast<uint32_t>(t.TokenId("en")), static_cast<uint32_t>(double_eot),
                                        static_cast<uint32_t>(t.TokenId("en")), static_cast<uint32_t>(eot)}));
  // EncodeOrdinary treats them as text.
  EXPECT_EQ(Strings(t, t.EncodeOrdinary("<|endoftext|>")), (V{"<|", "en", "d", "o", "f", "t", "e", "x", "t", "|", ">"}));
}

TEST(TokenizerTest, DecodeReplacesInvalidUtf8AndRejectsUnknownIds) {
  Tokenizer t = MakeTokenizer({}, {});
  EXPECT_EQ(*t.Decode({0x68, 0x69}), "hi");
  EXPECT_EQ(*t.Decode({0xC3, 0xA9}), "é");
  EXPECT_EQ(*t.Decode({0xC3}), "\xEF\xBF\xBD");
  EXPECT_EQ(*t.Decode({0xFF, 0x41}), "\xEF\xBF\xBD" "A");
  // A truncated 4-byte sequence is one U+FFFD (its maximal valid prefix), like Python's errors="replace".
  EXPECT_EQ(*t.Decode({0xF0, 0x9F, 0x98, 0x41}), "\xEF\xBF\xBD" "A");
  // E0 80: 80 is not a valid second byte after E0, so two replacements.
  EXPECT_EQ(*t.Decode({0xE0, 0x80}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(*t.Decode({0xED, 0xA0, 0x80}), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  auto bad = t.Decode({0x41, 256});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("token id 256 at position 1"), std::string::npos) << bad.status();
}

TEST(TokenizerTest, RoundTripsRandomBytesAndUnicode) {
  Tokenizer t = MakeTokenizer({{"t", "h"}, {" ", "a"}, {"\xC3", "\xA9"}, {"e", "\xCC"}}, {"<|endoftext|>"});
  std::mt19937 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    std::string bytes(rng() % 200, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
    ASSERT_EQ(*t.DecodeBytes(t.Encode(bytes)), bytes);
  }
  const char* atoms[] = {"th", " a", "é", "e\u0301", "日本", "😀", " ", "\n", "<|endoftext|>", "x", "'s", "١"};
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    for (int i = rng() % 30; i > 0; --i) text += atoms[rng() % 12];
    ASSERT_EQ(*t.Decode(t.Encode(text)), text);
  }
}

TEST(TokenizerTest, CreateRejectsBadVocabularies) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, static_cast<char>(b)));
  auto missing = Tokenizer::Create(std::vector<std::string>(bytes.begin(), bytes.end() - 1), {}, {});
  EXPECT_FALSE(missing.ok());
  std::vector<std::string> dup = bytes;
  dup.push_back("a");
  EXPECT_FALSE(Tokenizer::Create(dup, {}, {}).ok());
  EXPECT_FALSE(Tokenizer::Create(bytes, {{1, 2}}, {}).ok());  // merged bytes not in the vocab
  std::vector<std::string> with_ab = bytes;
  with_ab.push_back("ab");
  EXPECT_TRUE(Tokenizer::Create(with_ab, {{'a', 'b'}}, {}).ok());
  EXPECT_FALSE(Tokenizer::Create(with_ab, {{'a', 'b'}, {'a', 'b'}}, {}).ok());
  EXPECT_FALSE(Tokenizer::Create(with_ab, {{'a', 300}}, {}).ok());
  EXPECT_FALSE(Tokenizer::Create(with_ab, {}, {999}).ok());
  // A multi-byte token no merge produces could never be encoded: refused unless it is special.
  std::vector<std::string> extra = with_ab;
  extra.push_back("abc");
  auto unreachable = Tokenizer::Create(extra, {{'a', 'b'}}, {});
  ASSERT_FALSE(unreachable.ok());
  EXPECT_EQ(
      unreachable.status().message(),
      "1 multi-byte token(s) are produced by no merge and are not special, first token 257 (hex 616263) "
      "of 258 with 1 merges: a truncated merges list, or added tokens that must be declared special");
  EXPECT_TRUE(Tokenizer::Create(extra, {{'a', 'b'}}, {257}).ok());
  EXPECT_TRUE(Tokenizer::Create(extra, {{'a', 'b'}, {256, 'c'}}, {}).ok());
}

TEST(TokenizerFileTest, SaveLoadRoundTripKeepsHash) {
  Tokenizer t = MakeTokenizer({{"t", "h"}, {"th", "e"}}, {"<|endoftext|>"});
  const std::string path = TempPath("tok.lmftok");
  ASSERT_TRUE(SaveTokenizer(t, path).ok());
  auto loaded = LoadTokenizer(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->vocab(), t.vocab());
  EXPECT_EQ(loaded->merges(), t.merges());
  EXPECT_EQ(loaded->special_ids(), t.special_ids());
  EXPECT_EQ(loaded->Hash(), t.Hash());
  EXPECT_EQ(loaded->Encode("the<|endoftext|>"), t.Encode("the<|endoftext|>"));
  // The hash changes with any change of the tokenizer.
  Tokenizer other = MakeTokenizer({{"t", "h"}, {"h", "e"}}, {"<|endoftext|>"});
  EXPECT_NE(other.Hash(), t.Hash());
  EXPECT_EQ(t.Hash(), Fnv1a64(t.Serialize()));
}

TEST(TokenizerFileTest, CorruptFilesGiveErrorsNamingFileAndLine) {
  Tokenizer t = MakeTokenizer({{"t", "h"}}, {"<|endoftext|>"});
  const std::string good = t.Serialize();
  auto expect_error = [](const std::string& data, const std::string& needle) {
    auto r = ParseTokenizer(data, "x.tok");
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  };
  expect_error("", "x.tok:0: corrupt tokenizer file");
  expect_error("hello\n", "not a tokenizer file");
  expect_error("lmforge-tokenizer 7\n", "format version 7 is not supported");
  expect_error(good.substr(0, good.find("\n41\n") + 1), "vocab count larger than the file can hold");
  expect_error(good.substr(0, good.size() - 4), "ends inside the specials");
  std::string bad_hex = good;
  bad_hex.replace(bad_hex.find("\n00\n") + 1, 2, "zz");
  expect_error(bad_hex, "x.tok:3:");
  std::string bad_merge = good;
  bad_merge.replace(bad_merge.find("116 104"), 7, "116 999");
  expect_error(bad_merge, "outside the vocab");
  expect_error(good + "junk\n", "unexpected content");
  std::string crlf;
  for (char c : good) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  expect_error(crlf, "x.tok: tokenizer file has Windows (CRLF) line ends");
  EXPECT_TRUE(ParseTokenizer(good, "x.tok").ok());
}

// Every truncation and 3000 seeded edits of a tokenizer file: an error that names the file, or a tokenizer
// that encodes and decodes text back to the same bytes. Never a crash (or, under --config=asan, a bad read).
TEST(TokenizerFileTest, DamagedFilesGiveErrorsOrWorkingTokenizers) {
  const Tokenizer t = MakeTokenizer({{"t", "h"}, {"th", "e"}, {" ", "t"}, {"e", "r"}}, {"<|endoftext|>"});
  static constexpr char kText[] = "the other\n\xff\0 <|endoftext|>there";  // a NUL and a special inside
  const std::string text(kText, sizeof(kText) - 1);
  int errors = 0, parsed = 0;
  for (const std::string& bad : DamagedCopies(t.Serialize(), /*seed=*/11, /*edits=*/3000)) {
    absl::StatusOr<Tokenizer> r = ParseTokenizer(bad, "x.tok");
    if (!r.ok()) {
      ++errors;
      EXPECT_TRUE(absl::StartsWith(r.status().message(), "x.tok")) << r.status() << "\n" << Escaped(bad);
      continue;
    }
    ++parsed;
    absl::StatusOr<std::string> back = r->DecodeBytes(r->Encode(text));
    ASSERT_TRUE(back.ok()) << back.status() << "\n" << Escaped(bad);
    EXPECT_EQ(*back, text) << Escaped(bad);
  }
  EXPECT_GT(errors, 1000);
  EXPECT_GT(parsed, 10);  // edits that keep the file valid (another byte in a vocab line's hex, say)
}

}  // namespace
}  // namespace lmf::tokenizer
