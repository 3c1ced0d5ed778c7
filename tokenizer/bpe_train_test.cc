// Tests of BPE training: hand-checked tie-breaking and special-token rules, agreement with a naive trainer
// (full recount per merge) on random corpora, chunked file counting equal to whole-text counting, and the
// CS336 reference: corpus.en with vocab 500 and <|endoftext|> gives exactly the reference merges in order
// and the reference vocab (as a set).
#include "tokenizer/bpe_train.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "base/file.h"
#include "base/shared_data.h"
#include "gtest/gtest.h"
#include "tokenizer/gpt2_format.h"
#include "tokenizer/test_util.h"

namespace lmf::tokenizer {
namespace {

using MergeBytes = std::vector<std::pair<std::string, std::string>>;

MergeBytes MergesAsBytes(const Tokenizer& t) {
  MergeBytes out;
  for (const auto& [a, b] : t.merges()) out.emplace_back(t.vocab()[a], t.vocab()[b]);
  return out;
}

TrainOptions Options(uint32_t vocab_size, std::vector<std::string> specials = {}) {
  TrainOptions o;
  o.vocab_size = vocab_size;
  o.special_tokens = std::move(specials);
  return o;
}

// BPE training by its definition: recount every pair each step, take the most frequent, ties to the
// lexicographically greater pair of byte strings.
MergeBytes NaiveTrain(const PretokenCounts& counts, int num_merges) {
  std::vector<std::pair<std::vector<std::string>, uint64_t>> words;
  for (const auto& [piece, count] : counts) {
    std::vector<std::string> w;
    for (char c : piece) w.push_back(std::string(1, c));
    words.emplace_back(w, count);
  }
  MergeBytes merges;
  for (int m = 0; m < num_merges; ++m) {
    std::map<std::pair<std::string, std::string>, uint64_t> pairs;
    for (const auto& [w, count] : words) {
      for (size_t i = 0; i + 1 < w.size(); ++i) pairs[{w[i], w[i + 1]}] += count;
    }
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it) {
      if (it->second > best->second || (it->second == best->second && it->first > best->first)) best = it;
    }
    merges.push_back(best->first);
    for (auto& [w, count] : words) {
      std::vector<std::string> out;
      for (size_t i = 0; i < w.size();) {
        if (i + 1 < w.size() && w[i] == best->first.first && w[i + 1] == best->first.second) {
          out.push_back(w[i] + w[i + 1]);
          i += 2;
        } else {
          out.push_back(w[i++]);
        }
      }
      w = out;
    }
  }
  return merges;
}

TEST(BpeTrainTest, MostFrequentPairWinsAndTiesGoToTheGreaterPair) {
  PretokenCounts counts = {{"ab", 1}, {"cd", 1}, {"xy", 3}};
  auto t = TrainBpeFromCounts(counts, Options(259));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(MergesAsBytes(*t), (MergeBytes{{"x", "y"}, {"c", "d"}, {"a", "b"}}));
  // Equal first halves: the greater second half wins.
  auto t2 = TrainBpeFromCounts({{"ab", 2}, {"ac", 2}}, Options(257));
  EXPECT_EQ(MergesAsBytes(*t2), (MergeBytes{{"a", "c"}}));
}

TEST(BpeTrainTest, VocabIsBytesThenSpecialsThenMerges) {
  auto t = TrainBpeOnText("low lower lowest", Options(260, {"<|endoftext|>"}));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->vocab_size(), 260u);
  EXPECT_EQ(t->vocab()[97], "a");
  EXPECT_EQ(t->vocab()[256], "<|endoftext|>");
  EXPECT_EQ(t->special_ids(), std::vector<uint32_t>{256});
  // "l"+"o" and "o"+"w" both occur 3 times; ("o", "w") is the greater pair, so it is merged first.
  EXPECT_EQ(t->vocab()[257], "ow");
}

TEST(BpeTrainTest, SpecialTokensAreNeverMergedIntoOrAcross) {
  std::string text;
  for (int i = 0; i < 50; ++i) text += "ab<|endoftext|>";
  auto t = TrainBpeOnText(text, Options(300, {"<|endoftext|>"}));
  ASSERT_TRUE(t.ok()) << t.status();
  // Only "ab" is ever a pair: training stops early when no pair is left.
  EXPECT_EQ(MergesAsBytes(*t), (MergeBytes{{"a", "b"}}));
  EXPECT_EQ(t->vocab_size(), 258u);
}

TEST(BpeTrainTest, VocabSmallerThanBytesPlusSpecialsIsAnError) {
  auto t = TrainBpeOnText("abc", Options(256, {"<|endoftext|>"}));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("smaller than the 256 byte tokens + 1 special tokens = 257"), std::string::npos)
      << t.status();
  EXPECT_FALSE(TrainBpeOnText("abc", Options(300, {"xy", "xy"})).ok());
  EXPECT_FALSE(TrainBpeOnText("abc", Options(300, {"\n"})).ok());
  EXPECT_FALSE(TrainBpeOnText("abc", Options(300, {""})).ok());
  EXPECT_FALSE(TrainBpeOnFiles({"/nonexistent/corpus.txt"}, Options(300)).ok());
}

TEST(BpeTrainTest, BadSpecialTokensAreErrorsNamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "must not be empty"},
      {"x", "\"x\" is a single byte"},
      {"<|a|>", "\"<|a|>\" is given twice"},
      {"<|\xff|>", "is not valid UTF-8"},  // vocab.json (GPT-2 export) could not hold it
  };
  for (const auto& [special, expected] : cases) {
    const absl::Status s = ValidateTrainOptions(Options(400, {"<|a|>", special}));
    ASSERT_FALSE(s.ok()) << special;
    EXPECT_NE(s.message().find(expected), std::string::npos) << s;
  }
  EXPECT_TRUE(ValidateTrainOptions(Options(400, {"<|a|>", "<|日本|>"})).ok());
}

TEST(BpeTrainTest, IncrementalUpdatesMatchAFullRecountEveryMerge) {
  std::mt19937 rng(17);
  const char* atoms[] = {"a", "b", "c", "ab", "ba", "aa", " ", " the", "\n", "é", "x"};
  for (int trial = 0; trial < 20; ++trial) {
    std::string text;
    for (int i = 0; i < 400; ++i) text += atoms[rng() % 11];
    const PretokenCounts counts = CountPretokensInText(text, Options(400));
    auto t = TrainBpeFromCounts(counts, Options(256 + 60));
    ASSERT_TRUE(t.ok());
    ASSERT_EQ(MergesAsBytes(*t), NaiveTrain(counts, 60)) << "trial " << trial;
  }
}

TEST(BpeTrainTest, ChunkedFileCountsEqualWholeTextCounts) {
  LMF_SHARED_DATA_OR_SKIP(corpus, "cs336/assignment1-basics/tests/fixtures/tinystories_sample.txt");
  const std::string text = *ReadFile(corpus);
  TrainOptions small_chunks = Options(500, {"<|endoftext|>"});
  small_chunks.chunk_bytes = 97;  // many chunks, cut at newlines and specials
  auto from_file = CountPretokensInFiles({corpus, corpus}, small_chunks);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  TrainOptions whole = Options(500, {"<|endoftext|>"});
  whole.chunk_bytes = 1 << 30;
  PretokenCounts expected = CountPretokensInText(text, whole);
  for (auto& [piece, count] : expected) count *= 2;
  EXPECT_EQ(*from_file, expected);
  EXPECT_EQ(CountPretokensInText(text, small_chunks), CountPretokensInText(text, whole));
}

TEST(BpeTrainTest, CorpusEnMatchesTheCs336Reference) {
  const std::string dir = "cs336/assignment1-basics/tests/fixtures/";
  LMF_SHARED_DATA_OR_SKIP(corpus, dir + "corpus.en");
  LMF_SHARED_DATA_OR_SKIP(ref_vocab, dir + "train-bpe-reference-vocab.json");
  LMF_SHARED_DATA_OR_SKIP(ref_merges, dir + "train-bpe-reference-merges.txt");
  auto t = TrainBpeOnFiles({corpus}, Options(500, {"<|endoftext|>"}));
  ASSERT_TRUE(t.ok()) << t.status();
  auto ref = LoadGpt2(ref_vocab, ref_merges, {"<|endoftext|>"});
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(t->merges().size(), ref->merges().size());
  EXPECT_EQ(MergesAsBytes(*t), MergesAsBytes(*ref));
  EXPECT_EQ(t->vocab_size(), ref->vocab_size());
  EXPECT_EQ(std::set<std::string>(t->vocab().begin(), t->vocab().end()),
            std::set<std::string>(ref->vocab().begin(), ref->vocab().end()));
}

}  // namespace
}  // namespace lmf::tokenizer
