// Benchmark binary for the tokenizer: times BPE training on files (wall time and peak memory), GPT-2
// encoding of a text held in memory (MB/s at a given thread count), and the CS336 corpus.en vocab-500
// run. It prints one `key=value` line per measurement; tools/tokenizer/bpe_benchmark.py runs it next to
// HF tokenizers and tiktoken on the same bytes and thread count and prints the ratios.
//
//   bpe_benchmark train --input=english.txt --vocab_size=10000 --threads=2
//   bpe_benchmark encode --gpt2_vocab=vocab.json --gpt2_merges=merges.txt --input=english.txt --threads=1
//   bpe_benchmark corpus_en --input=corpus.en
//   bpe_benchmark pretokenize --input=english.txt     (our scanner vs PCRE2 JIT, one thread)
#include <pcre2.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "base/file.h"
#include "base/flags.h"
#include "base/thread_pool.h"
#include "tokenizer/bpe_train.h"
#include "tokenizer/gpt2_format.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"

ABSL_FLAG(std::string, input, "", "the text file (corpus_en: CS336's corpus.en)");
ABSL_FLAG(int64_t, threads, 0, "threads; 0: LMF_NUM_THREADS, else one per hardware thread");
ABSL_FLAG(int64_t, vocab_size, 10000, "the vocabulary to train");
ABSL_FLAG(std::string, gpt2_vocab, "", "GPT-2's vocab.json");
ABSL_FLAG(std::string, gpt2_merges, "", "GPT-2's merges.txt");
ABSL_FLAG(int64_t, max_bytes, 0, "encode only the first N bytes of --input; 0: all");

namespace lmf::tokenizer {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Peak resident memory of this process in MB (VmHWM), from /proc/self/status.
double PeakRssMb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  }
  return -1;
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "bpe_benchmark: %s\n", message.c_str());
  return 1;
}

int Train() {
  const std::string input = absl::GetFlag(FLAGS_input);
  ThreadPool pool(static_cast<int>(absl::GetFlag(FLAGS_threads)));
  TrainOptions options;
  options.vocab_size = static_cast<uint32_t>(absl::GetFlag(FLAGS_vocab_size));
  options.special_tokens = {"<|endoftext|>"};
  options.pool = &pool;
  const auto start = Clock::now();
  auto counts = CountPretokensInFiles({input}, options);
  if (!counts.ok()) return Fail(std::string(counts.status().message()));
  const double count_seconds = Seconds(start);
  auto tokenizer = TrainBpeFromCounts(*counts, options);
  if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));
  const double seconds = Seconds(start);
  std::printf("mode=train threads=%d seconds=%.3f pretokenize_seconds=%.3f merge_seconds=%.3f peak_rss_mb=%.1f "
              "vocab=%u distinct_pretokens=%zu\n",
              pool.num_threads(), seconds, count_seconds, seconds - count_seconds, PeakRssMb(),
              tokenizer->vocab_size(), counts->size());
  return 0;
}

int Encode() {
  auto tokenizer =
      LoadGpt2(absl::GetFlag(FLAGS_gpt2_vocab), absl::GetFlag(FLAGS_gpt2_merges), {"<|endoftext|>"});
  if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));
  auto text = ReadFile(absl::GetFlag(FLAGS_input));
  if (!text.ok()) return Fail(std::string(text.status().message()));
  const size_t max_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_max_bytes));
  if (max_bytes > 0 && text->size() > max_bytes) text->resize(max_bytes);
  ThreadPool pool(static_cast<int>(absl::GetFlag(FLAGS_threads)));
  // Chunks cut where pre-tokenization is unaffected, so the ids equal those of encoding the whole text.
  const SpecialTokenSplitter none;
  std::vector<size_t> cuts = {0};
  while (cuts.back() < text->size()) {
    cuts.push_back(NextSafeCut(*text, std::min(text->size(), cuts.back() + (1 << 20)), none));
  }
  const size_t chunks = cuts.size() - 1;
  std::vector<std::vector<uint32_t>> ids(chunks);
  std::vector<std::unique_ptr<Encoder>> encoders;
  for (int t = 0; t < pool.num_threads(); ++t) encoders.push_back(std::make_unique<Encoder>(*tokenizer));
  std::atomic<int> next_encoder{0};
  const auto start = Clock::now();
  // One chunk range per thread, each with its own encoder (and cache), as the streaming encoder does.
  pool.RunTasks(pool.num_threads(), [&](int64_t t) {
    Encoder& encoder = *encoders[next_encoder++];
    for (size_t c = t; c < chunks; c += pool.num_threads()) {
      encoder.Encode(std::string_view(*text).substr(cuts[c], cuts[c + 1] - cuts[c]), /*allow_specials=*/false, &ids[c]);
    }
  });
  const double seconds = Seconds(start);
  size_t tokens = 0;
  for (const auto& v : ids) tokens += v.size();
  std::printf("mode=encode threads=%d bytes=%zu tokens=%zu seconds=%.3f mb_per_s=%.2f\n", pool.num_threads(),
              text->size(), tokens, seconds, text->size() / 1e6 / seconds);
  return 0;
}

int CorpusEn() {
  const std::string input = absl::GetFlag(FLAGS_input);
  ThreadPool pool(static_cast<int>(absl::GetFlag(FLAGS_threads)));
  TrainOptions options;
  options.vocab_size = 500;
  options.special_tokens = {"<|endoftext|>"};
  options.pool = &pool;
  double best = 1e9;
  for (int run = 0; run < 5; ++run) {
    const auto start = Clock::now();
    auto tokenizer = TrainBpeOnFiles({input}, options);
    if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()));
    best = std::min(best, Seconds(start));
  }
  std::printf("mode=corpus_en threads=%d best_of_5_seconds=%.4f\n", pool.num_threads(), best);
  return 0;
}

// The hand-written scanner against PCRE2 (JIT, UTF + UCP) with the GPT-2 pattern on the same text: the
// speed of each, and whether they cut the text at exactly the same places (checked piece by piece).
int PretokenizeVsPcre2() {
  auto text = ReadFile(absl::GetFlag(FLAGS_input));
  if (!text.ok()) return Fail(std::string(text.status().message()));
  const char* pattern = R"('(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (re == nullptr) return Fail("pcre2_compile failed");
  if (pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) != 0) return Fail("pcre2_jit_compile failed");
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(re, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text->data());

  std::vector<uint32_t> ours_ends;
  auto start = Clock::now();
  size_t pieces = 0;
  ForEachPretoken(*text, [&](std::string_view piece) {
    ++pieces;
    ours_ends.push_back(static_cast<uint32_t>(piece.data() + piece.size() - text->data()));
  });
  const double ours_seconds = Seconds(start);

  start = Clock::now();
  size_t pos = 0, pcre_pieces = 0, mismatches = 0;
  while (pos < text->size()) {
    const int rc = pcre2_jit_match(re, subject, text->size(), pos, PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc < 0) return Fail("PCRE2 found no match at byte " + std::to_string(pos) + " (invalid UTF-8?)");
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
    if (ovector[0] != pos) ++mismatches;  // the pattern always matches at the current position
    if (pcre_pieces < ours_ends.size() && ours_ends[pcre_pieces] != ovector[1]) ++mismatches;
    ++pcre_pieces;
    pos = ovector[1];
  }
  const double pcre_seconds = Seconds(start);
  pcre2_match_data_free(match);
  pcre2_code_free(re);
  std::printf("mode=pretokenize bytes=%zu pieces=%zu pcre2_pieces=%zu mismatches=%zu scanner_mb_per_s=%.1f "
              "pcre2_jit_mb_per_s=%.1f speedup=%.2f\n",
              text->size(), pieces, pcre_pieces, mismatches, text->size() / 1e6 / ours_seconds,
              text->size() / 1e6 / pcre_seconds, pcre_seconds / ours_seconds);
  return 0;
}

// The verbs (the measurements) and the flags each takes.
FlagsOptions Verbs() {
  FlagsOptions options;
  options.verbs = {{"train",
                    "Times BPE training on a file (<|endoftext|> special): wall time and peak memory.",
                    {"input", "vocab_size", "threads"}},
                   {"encode",
                    "Times GPT-2 encoding of a text held in memory: MB/s at a thread count.",
                    {"gpt2_vocab", "gpt2_merges", "input", "max_bytes", "threads"}},
                   {"corpus_en",
                    "Times the CS336 corpus.en vocab-500 training: the best of 5 runs.",
                    {"input", "threads"}},
                   {"pretokenize",
                    "Our pre-tokenizer against PCRE2 JIT with the GPT-2 pattern, one thread: speed and cuts.",
                    {"input"}}};
  options.checks = {InRange(FLAGS_threads, 0, ThreadPool::kMaxThreads), AtLeast(FLAGS_vocab_size, 256),
                    AtLeast(FLAGS_max_bytes, 0)};
  return options;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Times the tokenizer: one measurement per verb, printed as one key=value line "
      "(tools/tokenizer/bpe_benchmark.py runs it beside HF tokenizers and tiktoken).\n"
      "usage: bpe_benchmark train|encode|corpus_en|pretokenize --input=FILE [--flag=value ...]");
  const std::string verb = ParseFlags(argc, argv, Verbs()).verb;
  if (verb == "train") return Train();
  if (verb == "encode") return Encode();
  if (verb == "corpus_en") return CorpusEn();
  return PretokenizeVsPcre2();
}

}  // namespace
}  // namespace lmf::tokenizer

int main(int argc, char** argv) { return lmf::tokenizer::Main(argc, argv); }
