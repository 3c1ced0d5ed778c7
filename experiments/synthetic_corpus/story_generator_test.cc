// The synthetic corpus: deterministic per seed, sized as asked, grammatical in the ways the generator
// promises (articles agree, sentences end with punctuation), with a large vocabulary and a Zipf-like
// rank-frequency curve.
#include "experiments/synthetic_corpus/story_generator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <vector>

#include "base/file.h"
#include "gtest/gtest.h"

namespace lmf::corpus {
namespace {

TEST(StoryGenerator, SameSeedSameCorpusOtherSeedOtherCorpus) {
  StoryCorpusOptions a;
  a.target_bytes = 50000;
  StoryCorpusOptions b = a;
  b.seed = 2;
  EXPECT_EQ(GenerateStoryCorpus(a), GenerateStoryCorpus(a));
  EXPECT_NE(GenerateStoryCorpus(a), GenerateStoryCorpus(b));
}

TEST(StoryGenerator, SizeIsTargetPlusLessThanOneStory) {
  StoryCorpusOptions o;
  o.target_bytes = 200000;
  StoryCorpusStats stats;
  const std::string text = GenerateStoryCorpus(o, &stats);
  EXPECT_EQ(text.size(), stats.bytes);
  EXPECT_GE(text.size(), o.target_bytes);
  EXPECT_LT(text.size(), o.target_bytes + 2000);  // a story is a few hundred bytes
  size_t separators = 0;
  for (size_t p = text.find("<|endoftext|>"); p != std::string::npos; p = text.find("<|endoftext|>", p + 1)) {
    ++separators;
  }
  EXPECT_EQ(separators + 1, stats.stories);
}

TEST(StoryGenerator, StreamedFileEqualsInMemoryCorpus) {
  StoryCorpusOptions o;
  o.target_bytes = 3 << 20;  // more than one 1 MiB chunk
  o.seed = 7;
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/stories.txt";
  auto stats = WriteStoryCorpus(path, o);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(*ReadFile(path), GenerateStoryCorpus(o));
}

TEST(StoryGenerator, ArticlesAgreeAndSentencesEnd) {
  Rng rng(3);
  for (int i = 0; i < 500; ++i) {
    const std::string story = GenerateStory(rng);
    ASSERT_TRUE(story.back() == '.' || story.back() == '"') << story;
    std::istringstream words(story);
    std::string prev, w;
    while (words >> w) {
      const char first = static_cast<char>(std::tolower(w[0]));
      const bool vowel = std::string("aeiou").find(first) != std::string::npos;
      if (prev == "a") {
        EXPECT_FALSE(vowel) << "'a " << w << "' in: " << story;
      }
      if (prev == "an") {
        EXPECT_TRUE(vowel) << "'an " << w << "' in: " << story;
      }
      prev = w;
    }
  }
}

TEST(StoryGenerator, LargeVocabularyWithZipfLikeFrequencies) {
  StoryCorpusOptions o;
  o.target_bytes = 2 << 20;
  const std::string text = GenerateStoryCorpus(o);
  std::map<std::string, int64_t> counts;
  std::string word;
  for (char ch : text) {
    if (std::isalpha(static_cast<unsigned char>(ch))) {
      word += static_cast<char>(std::tolower(ch));
    } else if (!word.empty()) {
      ++counts[word];
      word.clear();
    }
  }
  std::vector<int64_t> freq;
  for (const auto& [w, c] : counts) freq.push_back(c);
  std::sort(freq.rbegin(), freq.rend());
  // Hundreds of nouns, verbs in three forms, adjectives, names and plurals.
  EXPECT_GT(freq.size(), 900u);
  // Least-squares slope of log(frequency) against log(rank) over ranks 10..500. Natural English text
  // has a slope near -1; a uniform draw would be near 0 and a handful of words near -3. [-1.6, -0.7]
  // accepts Zipf-like curves only.
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (int r = 10; r <= 500; ++r) {
    const double x = std::log(r), y = std::log(static_cast<double>(freq[r - 1]));
    sx += x, sy += y, sxx += x * x, sxy += x * y, ++n;
  }
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  EXPECT_LT(slope, -0.7);
  EXPECT_GT(slope, -1.6);
}

}  // namespace
}  // namespace lmf::corpus
