// The `bpe` command line: train a byte-level BPE tokenizer, encode text files into token files, decode
// token files, and print statistics.
//
//   bazel run //tokenizer:bpe -- train  --input=corpus.txt --vocab_size=10000 --output=tok.lmftok
//   bazel run //tokenizer:bpe -- encode --tokenizer=tok.lmftok --input=corpus.txt --output=corpus.tok
//   bazel run //tokenizer:bpe -- decode --tokenizer=tok.lmftok --input=corpus.tok --output=corpus.txt
//   bazel run //tokenizer:bpe -- stats  --tokenizer=tok.lmftok [--input=corpus.tok]
//
// GPT-2's published tokenizer can stand in for --tokenizer: --gpt2_vocab=vocab.json --gpt2_merges=merges.txt.
// Errors (bad flags, missing files, corrupt files, a token file from another tokenizer) are printed as
// one line naming the file or flag, with exit status 1.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/flags.h"
#include "base/thread_pool.h"
#include "tokenizer/bpe_train.h"
#include "tokenizer/encode_file.h"
#include "tokenizer/gpt2_format.h"
#include "tokenizer/token_file.h"
#include "tokenizer/tokenizer_file.h"

ABSL_FLAG(std::vector<std::string>, input, {},
          "train, encode: the text files, comma-separated; decode, stats: the token file");
ABSL_FLAG(
    std::string, output, "",
    "train: the tokenizer to write; encode: the token file to write; decode: the text file (none: stdout)");
ABSL_FLAG(int64_t, vocab_size, 0, "the vocabulary size: 256 bytes + specials + merges");
ABSL_FLAG(std::vector<std::string>, specials, {"<|endoftext|>"},
          "the special tokens, comma-separated (--specials= for none)");
ABSL_FLAG(std::string, gpt2_vocab_out, "", "also write GPT-2's vocab.json (with --gpt2_merges_out)");
ABSL_FLAG(std::string, gpt2_merges_out, "", "also write GPT-2's merges.txt (with --gpt2_vocab_out)");
ABSL_FLAG(int64_t, threads, 0, "threads; 0: LMF_NUM_THREADS, else one per hardware thread");
ABSL_FLAG(int64_t, chunk_mb, 1, "the text each thread reads at a time, in MB");
ABSL_FLAG(std::string, tokenizer, "", "the tokenizer file (or GPT-2's files: --gpt2_vocab, --gpt2_merges)");
ABSL_FLAG(std::string, gpt2_vocab, "", "instead of --tokenizer: GPT-2's vocab.json (with --gpt2_merges)");
ABSL_FLAG(std::string, gpt2_merges, "", "instead of --tokenizer: GPT-2's merges.txt (with --gpt2_vocab)");
ABSL_FLAG(std::vector<std::string>, gpt2_specials, {"<|endoftext|>"},
          "with --gpt2_vocab: the vocab entries that are special tokens, comma-separated");

namespace lmf::tokenizer {
namespace {

using Clock = std::chrono::steady_clock;

// --chunk_mb's bound: a chunk is read whole into memory by each thread.
constexpr int64_t kMaxChunkMb = 4096;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr char kUsage[] =
    "Trains byte-level BPE tokenizers, encodes text files into token files, decodes them, prints "
    "statistics.\n"
    "usage: bpe VERB [--flag=value ...]\n"
    "  train   --input=FILE[,FILE...] --vocab_size=N --output=TOKENIZER [--specials=<|endoftext|>[,...]]\n"
    "          [--gpt2_vocab_out=vocab.json --gpt2_merges_out=merges.txt] [--threads=N] [--chunk_mb=1]\n"
    "  encode  (--tokenizer=FILE | --gpt2_vocab=F --gpt2_merges=F) --input=FILE[,FILE...] --output=TOKENS\n"
    "          [--threads=N] [--chunk_mb=1]\n"
    "  decode  (--tokenizer=FILE | --gpt2_vocab=F --gpt2_merges=F) --input=TOKENS [--output=FILE (default "
    "stdout)]\n"
    "  stats   (--tokenizer=FILE | --gpt2_vocab=F --gpt2_merges=F) [--input=TOKENS]\n"
    "--specials is a comma-separated list (default <|endoftext|>; --specials= for none). With GPT-2 files,\n"
    "--gpt2_specials (default <|endoftext|>) names the vocab entries that are special tokens.\n"
    "--threads defaults to LMF_NUM_THREADS, else one per hardware thread; --chunk_mb is the text each\n"
    "thread reads at a time (default 1). Errors name the file or flag and exit 1.";

// The verbs and the flags each takes.
FlagsOptions Verbs() {
  const std::vector<std::string> tokenizer = {"tokenizer", "gpt2_vocab", "gpt2_merges", "gpt2_specials"};
  const auto with_tokenizer = [&](std::vector<std::string> flags) {
    flags.insert(flags.end(), tokenizer.begin(), tokenizer.end());
    return flags;
  };
  FlagsOptions options;
  options.verbs = {
      {"train",
       "Trains a byte-level BPE tokenizer on text files.",
       {"input", "vocab_size", "output", "specials", "gpt2_vocab_out", "gpt2_merges_out", "threads",
        "chunk_mb"}},
      {"encode", "Encodes text files into one token file.",
       with_tokenizer({"input", "output", "threads", "chunk_mb"})},
      {"decode", "Decodes a token file into text.", with_tokenizer({"input", "output"})},
      {"stats", "Prints a tokenizer's statistics, and a token file's.", with_tokenizer({"input"})}};
  options.checks = {InRange(FLAGS_vocab_size, 256, INT32_MAX),  // the 256 bytes at least (+ specials, below)
                    InRange(FLAGS_threads, 0, ThreadPool::kMaxThreads),  // 0: the default pool
                    InRange(FLAGS_chunk_mb, 1, kMaxChunkMb)};
  return options;
}

// A flag given with an empty value (`--tokenizer=`) is an error, but the lists where empty means none.
absl::Status CheckNoEmptyValues(const FlagsVerb& verb) {
  for (const std::string& name : verb.flags) {
    if (name == "specials" || name == "gpt2_specials" || !FlagGiven(name)) continue;
    if (absl::FindCommandLineFlag(name)->CurrentValue().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, "= has no value"));
    }
  }
  return absl::OkStatus();
}

// A comma-separated list's parts, the empty ones dropped ("a,,b" is a and b).
std::vector<std::string> Parts(const std::vector<std::string>& list) {
  std::vector<std::string> parts;
  for (const std::string& part : list) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

std::string NameOf(const absl::Flag<std::string>& flag) {
  return std::string(absl::GetFlagReflectionHandle(flag).Name());
}

// The value of a flag the verb needs.
absl::StatusOr<std::string> Required(const absl::Flag<std::string>& flag) {
  if (!FlagGiven(flag)) {
    return absl::InvalidArgumentError(absl::StrCat("missing --", NameOf(flag)));
  }
  return absl::GetFlag(flag);
}

// --input of decode and stats: one token file (commas are part of its name there).
std::string TokenFileInput() { return absl::StrJoin(absl::GetFlag(FLAGS_input), ","); }

// A progress line: a bar redrawn in place on a terminal, else a plain line every few seconds.
class ProgressLine {
 public:
  explicit ProgressLine(std::string what) : what_(std::move(what)), tty_(::isatty(STDERR_FILENO) == 1) {}

  void Update(double done, double total, const std::string& rate) {
    const double now = SecondsSince(start_);
    if (now - last_ < (tty_ ? 0.1 : 5.0) && done < total) return;
    last_ = now;
    const double frac = total > 0 ? std::min(1.0, done / total) : 1.0;
    if (tty_) {
      const int width = 30, filled = static_cast<int>(frac * width);
      std::fprintf(stderr, "\r%s [%s%s] %5.1f%% %s   ", what_.c_str(), std::string(filled, '#').c_str(),
                   std::string(width - filled, ' ').c_str(), 100 * frac, rate.c_str());
      drawn_ = true;
    } else {
      std::fprintf(stderr, "%s: %.1f%% %s\n", what_.c_str(), 100 * frac, rate.c_str());
    }
  }
  void Done() {
    if (drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  std::string what_;
  bool tty_;
  bool drawn_ = false;
  Clock::time_point start_ = Clock::now();
  double last_ = -1e9;
};

absl::StatusOr<Tokenizer> LoadFromFlags() {
  if (FlagGiven(FLAGS_tokenizer)) {
    if (FlagGiven(FLAGS_gpt2_vocab) || FlagGiven(FLAGS_gpt2_merges)) {
      return absl::InvalidArgumentError("give either --tokenizer or --gpt2_vocab/--gpt2_merges, not both");
    }
    if (FlagGiven(FLAGS_gpt2_specials)) {
      return absl::InvalidArgumentError(
          "--gpt2_specials applies to --gpt2_vocab/--gpt2_merges; a --tokenizer file carries its own "
          "specials");
    }
    return LoadTokenizer(absl::GetFlag(FLAGS_tokenizer));
  }
  if (FlagGiven(FLAGS_gpt2_vocab) || FlagGiven(FLAGS_gpt2_merges)) {
    auto vocab = Required(FLAGS_gpt2_vocab);
    if (!vocab.ok()) return vocab.status();
    auto merges = Required(FLAGS_gpt2_merges);
    if (!merges.ok()) return merges.status();
    return LoadGpt2(*vocab, *merges, Parts(absl::GetFlag(FLAGS_gpt2_specials)));
  }
  return absl::InvalidArgumentError("missing --tokenizer (or --gpt2_vocab and --gpt2_merges)");
}

// The pool of --threads=N threads, or ThreadPool::Default() (LMF_NUM_THREADS, else all cores).
class PoolFromFlags {
 public:
  PoolFromFlags() {
    const int64_t threads = absl::GetFlag(FLAGS_threads);  // 0: the default pool
    if (threads > 0) owned_ = std::make_unique<ThreadPool>(static_cast<int>(threads));
  }
  ThreadPool* get() const { return owned_ ? owned_.get() : &ThreadPool::Default(); }

 private:
  std::unique_ptr<ThreadPool> owned_;
};

absl::Status Train() {
  if (!FlagGiven(FLAGS_input)) return absl::InvalidArgumentError("missing --input");
  auto output = Required(FLAGS_output);
  if (!output.ok()) return output.status();
  if (!FlagGiven(FLAGS_vocab_size)) return absl::InvalidArgumentError("missing --vocab_size");
  PoolFromFlags pool;
  if (FlagGiven(FLAGS_gpt2_vocab_out) != FlagGiven(FLAGS_gpt2_merges_out)) {
    return absl::InvalidArgumentError("give both --gpt2_vocab_out and --gpt2_merges_out, or neither");
  }

  TrainOptions options;
  options.vocab_size = static_cast<uint32_t>(absl::GetFlag(FLAGS_vocab_size));
  options.special_tokens = Parts(absl::GetFlag(FLAGS_specials));
  options.pool = pool.get();
  options.chunk_bytes = absl::GetFlag(FLAGS_chunk_mb) << 20;
  const auto start = Clock::now();
  ProgressLine counting("pre-tokenizing"), merging("merging");
  Clock::time_point merge_start;
  options.progress = [&](const TrainProgress& p) {
    if (p.phase == TrainProgress::Phase::kCounting) {
      counting.Update(static_cast<double>(p.bytes_done), static_cast<double>(p.bytes_total),
                      absl::StrFormat("%.1f MB/s", p.bytes_done / 1e6 / std::max(1e-9, SecondsSince(start))));
    } else {
      merging.Update(static_cast<double>(p.merges_done), static_cast<double>(p.merges_total),
                     absl::StrFormat("%d/%d merges, %.0f merges/s", p.merges_done, p.merges_total,
                                     p.merges_done / std::max(1e-9, SecondsSince(merge_start))));
    }
  };
  if (absl::Status s = ValidateTrainOptions(options); !s.ok()) return s;
  // The outputs are written after training: a path that cannot be written must fail now, not after it.
  for (const absl::Flag<std::string>* flag : {&FLAGS_output, &FLAGS_gpt2_vocab_out, &FLAGS_gpt2_merges_out}) {
    if (!FlagGiven(*flag)) continue;
    if (absl::Status s = CheckFileCanBeWritten(absl::GetFlag(*flag)); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("--", NameOf(*flag), "=", absl::GetFlag(*flag), ": ", s.message()));
    }
  }
  const std::vector<std::string> paths = Parts(absl::GetFlag(FLAGS_input));
  auto counts = CountPretokensInFiles(paths, options);
  if (!counts.ok()) return counts.status();
  counting.Done();
  const double count_seconds = SecondsSince(start);
  merge_start = Clock::now();
  auto tokenizer = TrainBpeFromCounts(*counts, options);
  if (!tokenizer.ok()) return tokenizer.status();
  merging.Done();
  const double total_seconds = SecondsSince(start);
  if (absl::Status s = SaveTokenizer(*tokenizer, *output); !s.ok()) return s;
  if (FlagGiven(FLAGS_gpt2_vocab_out)) {
    if (absl::Status s =
            SaveGpt2(*tokenizer, absl::GetFlag(FLAGS_gpt2_vocab_out), absl::GetFlag(FLAGS_gpt2_merges_out));
        !s.ok()) {
      return s;
    }
  }
  std::printf("trained %u tokens (%zu merges, %zu specials) from %zu distinct pre-tokens in %.2f s "
              "(pre-tokenizing %.2f s, merging %.2f s, %d threads)\n",
              tokenizer->vocab_size(), tokenizer->merges().size(), tokenizer->special_ids().size(), counts->size(),
              total_seconds, count_seconds, total_seconds - count_seconds, pool.get()->num_threads());
  if (tokenizer->vocab_size() < options.vocab_size) {
    std::printf("note: the corpus ran out of pairs before reaching --vocab_size=%u\n", options.vocab_size);
  }
  std::printf("wrote %s (hash %016llx)\n", output->c_str(), static_cast<unsigned long long>(tokenizer->Hash()));
  return absl::OkStatus();
}

absl::Status Encode() {
  auto tokenizer = LoadFromFlags();
  if (!tokenizer.ok()) return tokenizer.status();
  if (!FlagGiven(FLAGS_input)) return absl::InvalidArgumentError("missing --input");
  auto output = Required(FLAGS_output);
  if (!output.ok()) return output.status();
  PoolFromFlags pool;
  EncodeFileOptions options;
  options.pool = pool.get();
  options.chunk_bytes = absl::GetFlag(FLAGS_chunk_mb) << 20;
  const auto start = Clock::now();
  ProgressLine progress("encoding");
  options.progress = [&](uint64_t done, uint64_t total, uint64_t tokens) {
    progress.Update(static_cast<double>(done), static_cast<double>(total),
                    absl::StrFormat("%.1f MB/s, %d tokens", done / 1e6 / std::max(1e-9, SecondsSince(start)), tokens));
  };
  auto stats = EncodeFilesToTokenFile(*tokenizer, Parts(absl::GetFlag(FLAGS_input)), *output, options);
  if (!stats.ok()) return stats.status();
  progress.Done();
  const double seconds = SecondsSince(start);
  std::printf("encoded %llu bytes into %llu tokens in %.2f s (%.1f MB/s, %d threads); compression %.3f bytes/token\n",
              static_cast<unsigned long long>(stats->bytes), static_cast<unsigned long long>(stats->tokens), seconds,
              stats->bytes / 1e6 / std::max(1e-9, seconds), pool.get()->num_threads(),
              stats->tokens ? static_cast<double>(stats->bytes) / stats->tokens : 0.0);
  std::printf("wrote %s (%s ids)\n", output->c_str(), tokenizer->vocab_size() <= 65536 ? "uint16" : "uint32");
  return absl::OkStatus();
}

// A token file's id past the vocabulary: the file is damaged (its header matched the tokenizer).
absl::Status IdOutOfVocab(const std::string& path, uint64_t position, uint32_t id,
                          const Tokenizer& tokenizer) {
  return absl::DataLossError(absl::StrCat(path, ": token ", position, " has id ", id,
                                          ", past the vocab size ", tokenizer.vocab_size(),
                                          " (a damaged token file)"));
}

// Standard output could not take what was written (a full disk, a closed pipe): the output is incomplete.
absl::Status StdoutError() {
  return absl::DataLossError(absl::StrCat("writing to standard output failed: ", std::strerror(errno),
                                          "; the output is incomplete"));
}

// Opens a token file and checks that `tokenizer` wrote it.
absl::StatusOr<TokenFileReader> OpenMatching(const std::string& path, const Tokenizer& tokenizer,
                                             const std::string& tokenizer_name) {
  auto reader = TokenFileReader::Open(path);
  if (!reader.ok()) return reader.status();
  const TokenFileHeader& h = reader->header();
  if (h.vocab_size != tokenizer.vocab_size() || h.tokenizer_hash != tokenizer.Hash()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: token file header does not match the tokenizer %s: file has vocab_size %d and tokenizer hash %016x, "
        "the tokenizer has vocab_size %d and hash %016x",
        path, tokenizer_name, h.vocab_size, h.tokenizer_hash, tokenizer.vocab_size(), tokenizer.Hash()));
  }
  return reader;
}

std::string TokenizerName() {
  return FlagGiven(FLAGS_tokenizer) ? absl::GetFlag(FLAGS_tokenizer) : absl::GetFlag(FLAGS_gpt2_vocab);
}

absl::Status Decode() {
  auto tokenizer = LoadFromFlags();
  if (!tokenizer.ok()) return tokenizer.status();
  if (!FlagGiven(FLAGS_input)) return absl::InvalidArgumentError("missing --input");
  const std::string input = TokenFileInput();
  auto reader = OpenMatching(input, *tokenizer, TokenizerName());
  if (!reader.ok()) return reader.status();
  const std::string output = FlagGiven(FLAGS_output) ? absl::GetFlag(FLAGS_output) : "-";
  std::unique_ptr<AtomicFileWriter> file;
  if (output != "-") {
    auto w = AtomicFileWriter::Create(output);
    if (!w.ok()) return w.status();
    file = std::make_unique<AtomicFileWriter>(std::move(*w));
  }
  // Decoded a block of ids at a time; bytes of a character split across blocks are carried over so that
  // U+FFFD replacement only hits truly invalid bytes.
  constexpr uint64_t kBlock = 1 << 20;
  std::string carry;
  std::vector<int32_t> block;
  std::vector<uint32_t> ids;
  for (uint64_t start = 0; start < reader->size(); start += kBlock) {
    const uint64_t n = std::min<uint64_t>(kBlock, reader->size() - start);
    block.resize(n);
    if (absl::Status s = reader->Read(start, n, block.data()); !s.ok()) return s;
    ids.assign(block.begin(), block.end());
    for (uint64_t i = 0; i < n; ++i) {
      if (ids[i] >= tokenizer->vocab_size()) return IdOutOfVocab(input, start + i, ids[i], *tokenizer);
    }
    auto bytes = tokenizer->DecodeBytes(ids);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(input, ": ", std::string(bytes.status().message())));
    }
    std::string text = carry + *bytes;
    // Keep an incomplete trailing UTF-8 sequence (at most 3 bytes) for the next block.
    size_t keep = 0;
    const bool last = start + n == reader->size();
    if (!last) {
      for (size_t k = 1; k <= 3 && k <= text.size(); ++k) {
        const unsigned char c = static_cast<unsigned char>(text[text.size() - k]);
        if ((c & 0xC0) == 0x80) continue;
        const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (need > k) keep = k;
        break;
      }
    }
    carry = text.substr(text.size() - keep);
    text.resize(text.size() - keep);
    const std::string out = ReplaceInvalidUtf8(text);
    if (file) {
      if (absl::Status s = file->Write(out); !s.ok()) return s;
    } else if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size()) {
      return StdoutError();
    }
  }
  if (file) return file->Commit();
  return absl::OkStatus();  // Main flushes and checks stdout
}

absl::Status Stats() {
  auto tokenizer = LoadFromFlags();
  if (!tokenizer.ok()) return tokenizer.status();
  const Tokenizer& t = *tokenizer;
  size_t longest = 0;
  for (const std::string& token : t.vocab()) longest = std::max(longest, token.size());
  std::printf(
      "tokenizer %s: vocab %u (256 bytes, %zu merges, %zu specials), longest token %zu bytes, hash %016llx\n",
      TokenizerName().c_str(), t.vocab_size(), t.merges().size(), t.special_ids().size(), longest,
      static_cast<unsigned long long>(t.Hash()));
  for (uint32_t id : t.special_ids()) std::printf("  special %u: %s\n", id, t.vocab()[id].c_str());
  if (!FlagGiven(FLAGS_input)) return absl::OkStatus();
  const std::string input = TokenFileInput();
  auto reader = OpenMatching(input, t, TokenizerName());
  if (!reader.ok()) return reader.status();
  std::vector<uint64_t> freq(t.vocab_size(), 0);
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < reader->size(); ++i) {
    const uint32_t id = reader->at(i);
    if (id >= t.vocab_size()) return IdOutOfVocab(input, i, id, t);
    ++freq[id];
    bytes += t.vocab()[id].size();
  }
  uint64_t distinct = 0, documents = 0;
  for (uint32_t id = 0; id < t.vocab_size(); ++id) distinct += freq[id] > 0;
  for (uint32_t id : t.special_ids()) documents += freq[id];
  std::printf(
      "token file %s: %llu tokens (uint%u), %llu distinct ids, %llu special tokens, %llu bytes of text, "
      "%.3f bytes/token\n",
      input.c_str(), static_cast<unsigned long long>(reader->size()), 8 * reader->header().bytes_per_token,
      static_cast<unsigned long long>(distinct), static_cast<unsigned long long>(documents),
      static_cast<unsigned long long>(bytes),
      reader->size() ? static_cast<double>(bytes) / reader->size() : 0.0);
  return absl::OkStatus();
}

// `path` spelled canonically when its folder exists: the folder through realpath, then the file name, so
// `out.txt` and `./out.txt` compare equal even before either exists. Otherwise `path` itself.
std::string CanonicalPath(const std::string& path) {
  const std::string dir = DirName(path);
  const std::string name = path.substr(path.rfind('/') + 1);  // npos + 1 == 0: a bare name is all name
  char resolved[PATH_MAX];
  if (name.empty() || name == "." || name == ".." || ::realpath(dir.c_str(), resolved) == nullptr)
    return path;
  return absl::StrCat(resolved, std::string(resolved) == "/" ? "" : "/", name);
}

// An output flag naming a file that is also an input (or another output) would replace that input with the
// atomic rename: `encode --input=corpus.txt --output=corpus.txt` destroyed the corpus. Compared by device and
// inode where both exist, so other spellings and links count, else by canonical path (two outputs that do not
// exist yet: `--output=y --gpt2_vocab_out=./y` wrote the vocab over the tokenizer).
absl::Status CheckOutputsAreNotInputs() {
  std::vector<std::pair<std::string, std::string>> inputs;  // (flag, path)
  if (FlagGiven(FLAGS_input)) {
    for (const std::string& path : Parts(absl::GetFlag(FLAGS_input))) inputs.emplace_back("input", path);
  }
  for (const absl::Flag<std::string>* flag : {&FLAGS_tokenizer, &FLAGS_gpt2_vocab, &FLAGS_gpt2_merges}) {
    if (FlagGiven(*flag)) inputs.emplace_back(NameOf(*flag), absl::GetFlag(*flag));
  }
  std::vector<std::pair<std::string, std::string>> outputs;
  for (const absl::Flag<std::string>* flag : {&FLAGS_output, &FLAGS_gpt2_vocab_out, &FLAGS_gpt2_merges_out}) {
    if (FlagGiven(*flag) && absl::GetFlag(*flag) != "-") {
      outputs.emplace_back(NameOf(*flag), absl::GetFlag(*flag));
    }
  }
  auto same_file = [](const std::string& a, const std::string& b) {
    struct stat sa, sb;
    if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) {
      return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    }
    return CanonicalPath(a) == CanonicalPath(b);
  };
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (const auto& [flag, path] : inputs) {
      if (same_file(outputs[i].second, path)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", outputs[i].first, "=", outputs[i].second, " is the --", flag, " file ", path,
                         ": writing it would destroy the input; choose another path"));
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (same_file(outputs[i].second, outputs[j].second)) {
        return absl::InvalidArgumentError(absl::StrCat("--", outputs[j].first, " and --", outputs[i].first,
                                                       " name the same file ", outputs[i].second));
      }
    }
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  // Ctrl-C during an encode of a large corpus would leave a token file's worth of temp file behind.
  RemoveTempFilesOnSignals();
  // Under `bazel run` the binary starts in its runfiles folder: relative paths are the caller's.
  if (const std::string dir = UserWorkingDirectory(); !dir.empty() && ::chdir(dir.c_str()) != 0) {
    std::fprintf(stderr, "bpe: cannot change to the working directory %s\n", dir.c_str());
    return 1;
  }
  absl::SetProgramUsageMessage(kUsage);
  const FlagsOptions options = Verbs();
  const std::string verb = ParseFlags(argc, argv, options).verb;
  const std::map<std::string, absl::Status (*)()> runs = {
      {"train", Train}, {"encode", Encode}, {"decode", Decode}, {"stats", Stats}};
  absl::Status status;
  for (const FlagsVerb& v : options.verbs) {
    if (v.name == verb) status = CheckNoEmptyValues(v);
  }
  if (status.ok()) status = CheckOutputsAreNotInputs();
  if (status.ok()) status = runs.at(verb)();
  // Whatever a verb printed must have reached its destination: a full disk or closed stdout loses output.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    if (status.ok()) status = StdoutError();
  }
  if (!status.ok()) {
    std::fprintf(stderr, "bpe %s: error: %s\n", verb.c_str(), std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace lmf::tokenizer

int main(int argc, char** argv) { return lmf::tokenizer::Main(argc, argv); }
