// The story grammar: an opening, a middle of event, description, feeling and dialogue sentences about one
// protagonist (sometimes a friend and an object of the story), and an ending. Every word choice draws a
// rank from a Zipf-Mandelbrot law over its list (P(r) ~ 1/(r + 2.7)^1.1).
#include "experiments/synthetic_corpus/story_generator.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <string_view>
#include <vector>

#include "base/file.h"
#include "experiments/synthetic_corpus/words.h"

namespace lmf::corpus {

uint64_t Rng::Next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

int Rng::Below(int n) { return static_cast<int>(Uniform() * n); }

namespace {

// Cumulative Zipf-Mandelbrot weights for a list of n words, built once per list size.
class ZipfTable {
 public:
  explicit ZipfTable(int n) : cdf_(n) {
    double total = 0;
    for (int r = 0; r < n; ++r) {
      total += 1.0 / std::pow(r + 2.7, 1.1);
      cdf_[r] = total;
    }
    for (double& c : cdf_) c /= total;
  }
  int Draw(Rng& rng) const {
    const double u = rng.Uniform();
    const int r = static_cast<int>(std::upper_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
    return std::min(r, static_cast<int>(cdf_.size()) - 1);
  }

 private:
  std::vector<double> cdf_;
};

template <typename T>
const T& Pick(Rng& rng, const T* items, int n) {
  static thread_local std::vector<std::pair<int, ZipfTable>> tables;
  for (const auto& [size, table] : tables) {
    if (size == n) return items[table.Draw(rng)];
  }
  tables.emplace_back(n, ZipfTable(n));
  return items[tables.back().second.Draw(rng)];
}

std::string_view Name(Rng& r) { return Pick(r, Words().names, Words().num_names); }
std::string_view Noun(Rng& r) { return Pick(r, Words().nouns, Words().num_nouns); }
std::string_view Place(Rng& r) { return Pick(r, Words().places, Words().num_places); }
std::string_view Adj(Rng& r) { return Pick(r, Words().adjectives, Words().num_adjectives); }
std::string_view Adverb(Rng& r) { return Pick(r, Words().adverbs, Words().num_adverbs); }
std::string_view Feeling(Rng& r) { return Pick(r, Words().feelings, Words().num_feelings); }
std::string_view Time(Rng& r) { return Pick(r, Words().times, Words().num_times); }
const Verb& AnyVerb(Rng& r) { return Pick(r, Words().verbs, Words().num_verbs); }

const Verb& VerbOf(Rng& r, bool transitive) {
  for (int tries = 0; tries < 64; ++tries) {
    const Verb& v = AnyVerb(r);
    if (v.transitive == transitive) return v;
  }
  return Words().verbs[0];  // "see": transitive; the loop above practically never falls through
}

bool Chance(Rng& r, double p) { return r.Uniform() < p; }

std::string Article(std::string_view next_word) {
  return std::string(std::strchr("aeiou", std::tolower(next_word[0])) != nullptr ? "an " : "a ");
}

// "a big dog", "the dog", "an old owl": an optional adjective and an article that agrees with it.
std::string NounPhrase(Rng& r, bool definite) {
  std::string adj = Chance(r, 0.55) ? std::string(Adj(r)) + " " : "";
  std::string noun(Noun(r));
  if (definite) return "the " + adj + noun;
  return Article(adj.empty() ? noun : adj) + adj + noun;
}

std::string Plural(std::string_view noun) {
  std::string s(noun);
  const char last = s.back();
  if (last == 's' || last == 'x' || last == 'h') return s + "es";
  if (last == 'y' && s.size() > 1 && !std::strchr("aeiou", s[s.size() - 2])) return s.substr(0, s.size() - 1) + "ies";
  return s + "s";
}

struct Cast {
  std::string hero;
  std::string friend_name;
  std::string pronoun;  // "she" / "he"
  std::string possessive;  // "her" / "his"
  std::string object;      // "her" / "him"
  std::string thing;    // the object the story is about, without article
};

std::string Capitalize(std::string s) {
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(s[0]));
  return s;
}

std::string Subject(Rng& r, const Cast& c) { return Chance(r, 0.6) ? c.hero : c.pronoun; }

std::string Opening(Rng& r, const Cast& c) {
  switch (r.Below(4)) {
    case 0: return "Once upon a time, there was " + Article(c.thing) + c.thing + " that belonged to " + c.hero + ".";
    case 1: return Capitalize(std::string(Time(r))) + ", " + c.hero + " went to " + std::string(Place(r)) + ".";
    case 2: return c.hero + " had " + Article(c.thing) + c.thing + " and loved it very much.";
    default: {
      const std::string adj(Adj(r));
      return "There was once " + Article(adj) + adj + " child named " + c.hero + " who lived near " + std::string(Place(r)) + ".";
    }
  }
}

std::string MiddleSentence(Rng& r, const Cast& c) {
  switch (r.Below(10)) {
    case 0: {
      const Verb& v = VerbOf(r, true);
      std::string s = Subject(r, c) + " " + std::string(v.past) + " " + NounPhrase(r, Chance(r, 0.4));
      if (Chance(r, 0.4)) s += " in " + std::string(Place(r));
      return s + ".";
    }
    case 1: {
      const Verb& v = VerbOf(r, false);
      return Subject(r, c) + " " + std::string(v.past) + " " + std::string(Adverb(r)) + " to " + std::string(Place(r)) + ".";
    }
    case 2: return "The " + c.thing + " was very " + std::string(Adj(r)) + ".";
    case 3: return c.hero + " felt " + std::string(Feeling(r)) + " because the " + std::string(Noun(r)) + " was " + std::string(Adj(r)) + ".";
    case 4: return "\"Can we " + std::string(VerbOf(r, true).base) + " the " + c.thing + "?\" asked " + c.friend_name + ".";
    case 5: return "\"Look at the " + std::string(Adj(r)) + " " + std::string(Noun(r)) + "!\" said " + c.hero + ".";
    case 6: return c.hero + " and " + c.friend_name + " " + std::string(VerbOf(r, false).past) + " together.";
    case 7: {
      const Verb& v = AnyVerb(r);
      return "Then " + c.pronoun + " saw " + NounPhrase(r, false) + " " + std::string(v.gerund) + " near " + std::string(Place(r)) + ".";
    }
    case 8: return Capitalize(c.possessive) + " friend " + c.friend_name + " gave " + c.object + " " +
                   std::to_string(2 + r.Below(9)) + " " + Plural(Noun(r)) + ".";
    default: return c.hero + " liked to " + std::string(VerbOf(r, false).base) + " with the " + c.thing + " every day.";
  }
}

std::string Ending(Rng& r, const Cast& c) {
  switch (r.Below(4)) {
    case 0: return "In the end, " + c.hero + " was very " + std::string(Feeling(r)) + ".";
    case 1: return "From that day on, " + c.hero + " and " + c.friend_name + " were best friends.";
    case 2: return c.hero + " smiled and went home with the " + c.thing + ".";
    default: return "It was the best day ever, and " + c.pronoun + " never forgot the " + std::string(Adj(r)) + " " + c.thing + ".";
  }
}

}  // namespace

std::string GenerateStory(Rng& rng) {
  Cast c;
  const int hero = rng.Below(Words().num_names);  // heroes uniform, friends Zipfian: both kinds of names occur
  c.hero = std::string(Words().names[hero]);
  do {
    c.friend_name = std::string(Name(rng));
  } while (c.friend_name == c.hero);
  const bool she = hero % 2 == 0;
  c.pronoun = she ? "she" : "he";
  c.possessive = she ? "her" : "his";
  c.object = she ? "her" : "him";
  c.thing = std::string(Noun(rng));

  std::string story = Opening(rng, c);
  const int middle = 3 + rng.Below(6);
  for (int i = 0; i < middle; ++i) {
    std::string sentence = MiddleSentence(rng, c);
    sentence[0] = static_cast<char>(std::toupper(sentence[0]));
    story += " " + sentence;
  }
  story += " " + Ending(rng, c);
  return story;
}

absl::Status StreamStoryCorpus(const StoryCorpusOptions& options,
                               const std::function<absl::Status(std::string_view)>& emit,
                               StoryCorpusStats* stats) {
  Rng rng(options.seed);
  StoryCorpusStats local;
  std::string buffer;
  while (local.bytes + buffer.size() < options.target_bytes) {
    if (local.stories > 0) buffer += "\n" + options.separator + "\n";
    buffer += GenerateStory(rng);
    ++local.stories;
    if (buffer.size() >= (1 << 20)) {
      if (absl::Status s = emit(buffer); !s.ok()) return s;
      local.bytes += buffer.size();
      buffer.clear();
    }
  }
  buffer += "\n";
  if (absl::Status s = emit(buffer); !s.ok()) return s;
  local.bytes += buffer.size();
  if (stats != nullptr) *stats = local;
  return absl::OkStatus();
}

std::string GenerateStoryCorpus(const StoryCorpusOptions& options, StoryCorpusStats* stats) {
  std::string out;
  const absl::Status s = StreamStoryCorpus(
      options,
      [&](std::string_view chunk) {
        out.append(chunk);
        return absl::OkStatus();
      },
      stats);
  (void)s;  // appending to a string cannot fail
  return out;
}

absl::StatusOr<StoryCorpusStats> WriteStoryCorpus(const std::string& path, const StoryCorpusOptions& options) {
  auto writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  StoryCorpusStats stats;
  absl::Status s = StreamStoryCorpus(
      options, [&](std::string_view chunk) { return writer->Write(chunk); }, &stats);
  if (s.ok()) s = writer->Commit();
  if (!s.ok()) return s;
  return stats;
}

}  // namespace lmf::corpus
