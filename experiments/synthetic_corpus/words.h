// Word lists for the synthetic story corpus, ordered from most to least common within each list (the
// generator draws ranks from a Zipf-Mandelbrot law, so list order sets the frequencies). Verbs carry their
// irregular past and -ing forms; regular forms are derived.
#ifndef LMFORGE_EXPERIMENTS_SYNTHETIC_CORPUS_WORDS_H_
#define LMFORGE_EXPERIMENTS_SYNTHETIC_CORPUS_WORDS_H_

#include <string_view>

namespace lmf::corpus {

struct Verb {
  std::string_view base;     // "run"
  std::string_view past;     // "ran"
  std::string_view gerund;   // "running"
  bool transitive;           // takes an object: "found a stone"
};

struct WordLists {
  const std::string_view* names; int num_names;
  const std::string_view* nouns; int num_nouns;          // things and creatures, singular
  const std::string_view* places; int num_places;        // "the forest"-style places (no article)
  const std::string_view* adjectives; int num_adjectives;
  const std::string_view* adverbs; int num_adverbs;
  const std::string_view* feelings; int num_feelings;    // "happy", "scared" (after "felt")
  const std::string_view* times; int num_times;          // "one morning"
  const Verb* verbs; int num_verbs;
};

const WordLists& Words();

}  // namespace lmf::corpus

#endif  // LMFORGE_EXPERIMENTS_SYNTHETIC_CORPUS_WORDS_H_
