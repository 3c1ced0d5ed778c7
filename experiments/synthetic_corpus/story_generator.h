// A deterministic generator of simple English stories: the built-in corpus of the quickstart, so a fresh
// machine with no data can train a tokenizer and run a scaling sweep. It is SYNTHETIC text (a small
// grammar of story sentences over ~700 curated words with regular and irregular inflections); word
// frequencies follow a Zipf-Mandelbrot law within each word class, so the unigram distribution looks like
// natural text's. Anything that reports on it must say it is synthetic.
//
//   StoryCorpusOptions opts; opts.target_bytes = 20 << 20;
//   auto stats = WriteStoryCorpus("/tmp/stories.txt", opts);
#ifndef LMFORGE_EXPERIMENTS_SYNTHETIC_CORPUS_STORY_GENERATOR_H_
#define LMFORGE_EXPERIMENTS_SYNTHETIC_CORPUS_STORY_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace lmf::corpus {

// SplitMix64: a tiny generator whose output is the same on every platform and standard library (std's
// distributions are not), so a seed names one corpus everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  double Uniform();                 // [0, 1)
  int Below(int n);                 // [0, n)
 private:
  uint64_t state_;
};

struct StoryCorpusOptions {
  uint64_t seed = 1;
  uint64_t target_bytes = 1 << 20;            // stop after the story that reaches this size
  std::string separator = "<|endoftext|>";    // written between stories, each on its own line
};

struct StoryCorpusStats {
  uint64_t bytes = 0;
  uint64_t stories = 0;
};

// One story (a few sentences ending in a period; no separator).
std::string GenerateStory(Rng& rng);

// Calls emit with consecutive pieces (about 1 MiB each) of the corpus; stops at the first error.
absl::Status StreamStoryCorpus(const StoryCorpusOptions& options,
                               const std::function<absl::Status(std::string_view)>& emit,
                               StoryCorpusStats* stats = nullptr);

// The whole corpus as a string (for tests and small sizes).
std::string GenerateStoryCorpus(const StoryCorpusOptions& options, StoryCorpusStats* stats = nullptr);

// Streams the corpus into `path`, written atomically.
absl::StatusOr<StoryCorpusStats> WriteStoryCorpus(const std::string& path, const StoryCorpusOptions& options);

}  // namespace lmf::corpus

#endif  // LMFORGE_EXPERIMENTS_SYNTHETIC_CORPUS_STORY_GENERATOR_H_
