// Writes the synthetic story corpus (see story_generator.h) to a file.
//   ./bazelw run //experiments/synthetic_corpus:make_stories -- --out=/tmp/stories.txt --bytes=20000000
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "base/flags.h"
#include "experiments/synthetic_corpus/story_generator.h"

ABSL_FLAG(std::string, out, "", "output text file (written atomically)");
ABSL_FLAG(int64_t, bytes, 10 << 20, "approximate size of the corpus in bytes (stops after the story that reaches it)");
ABSL_FLAG(uint64_t, seed, 1, "the corpus is a pure function of the seed and the size");
ABSL_FLAG(std::string, separator, "<|endoftext|>", "line written between stories");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Writes a deterministic synthetic corpus of simple English stories.");
  lmf::ParseFlags(argc, argv);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fprintf(stderr, "make_stories: --out is required (the text file to write)\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_bytes) <= 0) {
    std::fprintf(stderr, "make_stories: --bytes must be positive, got %lld\n",
                 static_cast<long long>(absl::GetFlag(FLAGS_bytes)));
    return 2;
  }
  lmf::corpus::StoryCorpusOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.target_bytes = static_cast<uint64_t>(absl::GetFlag(FLAGS_bytes));
  options.separator = absl::GetFlag(FLAGS_separator);
  auto stats = lmf::corpus::WriteStoryCorpus(out, options);
  if (!stats.ok()) {
    std::fprintf(stderr, "make_stories: %s\n", std::string(stats.status().message()).c_str());
    return 1;
  }
  std::printf("wrote %s: %llu stories, %llu bytes (synthetic, seed %llu)\n", out.c_str(),
              static_cast<unsigned long long>(stats->stories), static_cast<unsigned long long>(stats->bytes),
              static_cast<unsigned long long>(options.seed));
  return 0;
}
