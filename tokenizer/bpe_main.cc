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

#include <cctype>
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

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "base/thread_pool.h"
#include "tokenizer/bpe_train.h"
#include "tokenizer/encode_file.h"
#include "tokenizer/gpt2_format.h"
#include "tokenizer/token_file.h"
#include "tokenizer/tokenizer_file.h"

namespace lmf::tokenizer {
namespace {

using Clock = std::chrono::steady_clock;

// --chunk_mb's bound: a chunk is read whole into memory by each thread.
constexpr int64_t kMaxChunkMb = 4096;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr char kUsage[] =
    "usage: bpe <verb> [--flag=value ...]\n"
    "  train   --input=FILE[,FILE...] --vocab_size=N --output=TOKENIZER [--specials=<|endoftext|>[,...]]\n"
    "          [--gpt2_vocab_out=vocab.json --gpt2_merges_out=merges.txt] [--threads=N] [--chunk_mb=1]\n"
    "  encode  (--tokenizer=FILE | --gpt2_vocab=F --gpt2_merges=F) --input=FILE[,FILE...] --output=TOKENS\n"
    "          [--threads=N] [--chunk_mb=1]\n"
    "  decode  (--tokenizer=FILE | --gpt2_vocab=F --gpt2_merges=F) --input=TOKENS [--output=FILE (default stdout)]\n"
    "  stats   (--tokenizer=FILE | --gpt2_vocab=F --gpt2_merges=F) [--input=TOKENS]\n"
    "--specials is a comma-separated list (default <|endoftext|>; --specials= for none). With GPT-2 files,\n"
    "--gpt2_specials (default <|endoftext|>) names the vocab entries that are special tokens.\n"
    "--threads defaults to LMF_NUM_THREADS, else one per hardware thread; --chunk_mb is the text each\n"
    "thread reads at a time (default 1).\n";

// --name=value flags of one verb. Unknown flags, a flag given twice (which one was meant?) and an empty
// value (except the lists where empty means none) are errors.
class Flags {
 public:
  static absl::StatusOr<Flags> Parse(int argc, char** argv, const std::vector<std::string>& known) {
    Flags f;
    for (int i = 2; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0 || arg.find('=') == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("expected --flag=value, found \"", arg, "\""));
      }
      const std::string name = arg.substr(2, arg.find('=') - 2);
      const std::string value = arg.substr(arg.find('=') + 1);
      bool ok = false;
      for (const std::string& k : known) ok |= (k == name);
      if (!ok) return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " for \"", argv[1], "\""));
      if (f.Has(name)) {
        const bool list = name == "input" || name == "specials" || name == "gpt2_specials";
        return absl::InvalidArgumentError(absl::StrCat("--", name, " is given twice (", f.Get(name), " and ",
                                                       value, "); give it once",
                                                       list ? " (a list is comma-separated)" : ""));
      }
      if (value.empty() && name != "specials" && name != "gpt2_specials") {
        return absl::InvalidArgumentError(absl::StrCat("--", name, "= has no value"));
      }
      f.values_[name] = value;
    }
    return f;
  }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback = "") const {
    auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  absl::StatusOr<std::string> Required(const std::string& name) const {
    if (!Has(name) || Get(name).empty()) return absl::InvalidArgumentError(absl::StrCat("missing --", name));
    return Get(name);
  }
  // A decimal integer in [lo, hi] (no sign, no spaces), or `fallback` when the flag is absent.
  absl::StatusOr<int64_t> Int(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
    if (!Has(name)) return fallback;
    const std::string v = Get(name);
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || !std::isdigit(static_cast<unsigned char>(v[0])) || *end != '\0' || errno == ERANGE ||
        x < lo || x > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", v, ": expected an integer from ", lo, " to ", hi));
    }
    return static_cast<int64_t>(x);
  }

 private:
  std::map<std::string, std::string> values_;
};

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size() && !s.empty()) {
    const size_t comma = s.find(',', pos);
    const std::string part = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

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

absl::StatusOr<Tokenizer> LoadFromFlags(const Flags& flags) {
  if (flags.Has("tokenizer")) {
    if (flags.Has("gpt2_vocab") || flags.Has("gpt2_merges")) {
      return absl::InvalidArgumentError("give either --tokenizer or --gpt2_vocab/--gpt2_merges, not both");
    }
    if (flags.Has("gpt2_specials")) {
      return absl::InvalidArgumentError(
          "--gpt2_specials applies to --gpt2_vocab/--gpt2_merges; a --tokenizer file carries its own "
          "specials");
    }
    return LoadTokenizer(flags.Get("tokenizer"));
  }
  if (flags.Has("gpt2_vocab") || flags.Has("gpt2_merges")) {
    auto vocab = flags.Required("gpt2_vocab");
    if (!vocab.ok()) return vocab.status();
    auto merges = flags.Required("gpt2_merges");
    if (!merges.ok()) return merges.status();
    return LoadGpt2(*vocab, *merges, SplitCommas(flags.Get("gpt2_specials", "<|endoftext|>")));
  }
  return absl::InvalidArgumentError("missing --tokenizer (or --gpt2_vocab and --gpt2_merges)");
}

// The pool of --threads=N threads, or ThreadPool::Default() (LMF_NUM_THREADS, else all cores).
class PoolFromFlags {
 public:
  absl::Status Init(const Flags& flags) {
    auto threads = flags.Int("threads", 0, 0, ThreadPool::kMaxThreads);  // 0: the default pool
    if (!threads.ok()) return threads.status();
    if (*threads > 0) owned_ = std::make_unique<ThreadPool>(static_cast<int>(*threads));
    return absl::OkStatus();
  }
  ThreadPool* get() const { return owned_ ? owned_.get() : &ThreadPool::Default(); }

 private:
  std::unique_ptr<ThreadPool> owned_;
};

absl::Status Train(const Flags& flags) {
  auto inputs = flags.Required("input");
  if (!inputs.ok()) return inputs.status();
  auto output = flags.Required("output");
  if (!output.ok()) return output.status();
  if (!flags.Has("vocab_size")) return absl::InvalidArgumentError("missing --vocab_size");
  auto vocab_size = flags.Int("vocab_size", 0, 256, INT32_MAX);  // the 256 bytes at least (+ specials, below)
  if (!vocab_size.ok()) return vocab_size.status();
  auto chunk_mb = flags.Int("chunk_mb", 1, 1, kMaxChunkMb);
  if (!chunk_mb.ok()) return chunk_mb.status();
  PoolFromFlags pool;
  if (absl::Status s = pool.Init(flags); !s.ok()) return s;
  if (flags.Has("gpt2_vocab_out") != flags.Has("gpt2_merges_out")) {
    return absl::InvalidArgumentError("give both --gpt2_vocab_out and --gpt2_merges_out, or neither");
  }

  TrainOptions options;
  options.vocab_size = static_cast<uint32_t>(*vocab_size);
  options.special_tokens = SplitCommas(flags.Get("specials", "<|endoftext|>"));
  options.pool = pool.get();
  options.chunk_bytes = *chunk_mb << 20;
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
  for (const char* name : {"output", "gpt2_vocab_out", "gpt2_merges_out"}) {
    if (!flags.Has(name)) continue;
    if (absl::Status s = CheckFileCanBeWritten(flags.Get(name)); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("--", name, "=", flags.Get(name), ": ", s.message()));
    }
  }
  const std::vector<std::string> paths = SplitCommas(*inputs);
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
  if (flags.Has("gpt2_vocab_out")) {
    if (absl::Status s = SaveGpt2(*tokenizer, flags.Get("gpt2_vocab_out"), flags.Get("gpt2_merges_out")); !s.ok()) {
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

absl::Status Encode(const Flags& flags) {
  auto tokenizer = LoadFromFlags(flags);
  if (!tokenizer.ok()) return tokenizer.status();
  auto inputs = flags.Required("input");
  if (!inputs.ok()) return inputs.status();
  auto output = flags.Required("output");
  if (!output.ok()) return output.status();
  auto chunk_mb = flags.Int("chunk_mb", 1, 1, kMaxChunkMb);
  if (!chunk_mb.ok()) return chunk_mb.status();
  PoolFromFlags pool;
  if (absl::Status s = pool.Init(flags); !s.ok()) return s;
  EncodeFileOptions options;
  options.pool = pool.get();
  options.chunk_bytes = *chunk_mb << 20;
  const auto start = Clock::now();
  ProgressLine progress("encoding");
  options.progress = [&](uint64_t done, uint64_t total, uint64_t tokens) {
    progress.Update(static_cast<double>(done), static_cast<double>(total),
                    absl::StrFormat("%.1f MB/s, %d tokens", done / 1e6 / std::max(1e-9, SecondsSince(start)), tokens));
  };
  auto stats = EncodeFilesToTokenFile(*tokenizer, SplitCommas(*inputs), *output, options);
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

std::string TokenizerName(const Flags& flags) {
  return flags.Has("tokenizer") ? flags.Get("tokenizer") : flags.Get("gpt2_vocab");
}

absl::Status Decode(const Flags& flags) {
  auto tokenizer = LoadFromFlags(flags);
  if (!tokenizer.ok()) return tokenizer.status();
  auto input = flags.Required("input");
  if (!input.ok()) return input.status();
  auto reader = OpenMatching(*input, *tokenizer, TokenizerName(flags));
  if (!reader.ok()) return reader.status();
  const std::string output = flags.Get("output", "-");
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
      if (ids[i] >= tokenizer->vocab_size()) return IdOutOfVocab(*input, start + i, ids[i], *tokenizer);
    }
    auto bytes = tokenizer->DecodeBytes(ids);
    if (!bytes.ok()) return absl::InvalidArgumentError(absl::StrCat(*input, ": ", std::string(bytes.status().message())));
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

absl::Status Stats(const Flags& flags) {
  auto tokenizer = LoadFromFlags(flags);
  if (!tokenizer.ok()) return tokenizer.status();
  const Tokenizer& t = *tokenizer;
  size_t longest = 0;
  for (const std::string& token : t.vocab()) longest = std::max(longest, token.size());
  std::printf("tokenizer %s: vocab %u (256 bytes, %zu merges, %zu specials), longest token %zu bytes, hash %016llx\n",
              TokenizerName(flags).c_str(), t.vocab_size(), t.merges().size(), t.special_ids().size(), longest,
              static_cast<unsigned long long>(t.Hash()));
  for (uint32_t id : t.special_ids()) std::printf("  special %u: %s\n", id, t.vocab()[id].c_str());
  if (!flags.Has("input")) return absl::OkStatus();
  auto reader = OpenMatching(flags.Get("input"), t, TokenizerName(flags));
  if (!reader.ok()) return reader.status();
  std::vector<uint64_t> freq(t.vocab_size(), 0);
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < reader->size(); ++i) {
    const uint32_t id = reader->at(i);
    if (id >= t.vocab_size()) return IdOutOfVocab(flags.Get("input"), i, id, t);
    ++freq[id];
    bytes += t.vocab()[id].size();
  }
  uint64_t distinct = 0, documents = 0;
  for (uint32_t id = 0; id < t.vocab_size(); ++id) distinct += freq[id] > 0;
  for (uint32_t id : t.special_ids()) documents += freq[id];
  std::printf("token file %s: %llu tokens (uint%u), %llu distinct ids, %llu special tokens, %llu bytes of text, "
              "%.3f bytes/token\n",
              flags.Get("input").c_str(), static_cast<unsigned long long>(reader->size()),
              8 * reader->header().bytes_per_token, static_cast<unsigned long long>(distinct),
              static_cast<unsigned long long>(documents), static_cast<unsigned long long>(bytes),
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
absl::Status CheckOutputsAreNotInputs(const Flags& flags) {
  std::vector<std::pair<std::string, std::string>> inputs;  // (flag, path)
  for (const char* name : {"input", "tokenizer", "gpt2_vocab", "gpt2_merges"}) {
    if (!flags.Has(name)) continue;
    for (const std::string& path : std::string(name) == "input" ? SplitCommas(flags.Get(name))
                                                                : std::vector<std::string>{flags.Get(name)}) {
      inputs.emplace_back(name, path);
    }
  }
  std::vector<std::pair<std::string, std::string>> outputs;
  for (const char* name : {"output", "gpt2_vocab_out", "gpt2_merges_out"}) {
    if (flags.Has(name) && flags.Get(name) != "-") outputs.emplace_back(name, flags.Get(name));
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
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 1 : 0;
  }
  const std::string verb = argv[1];
  const std::vector<std::string> tokenizer_flags = {"tokenizer", "gpt2_vocab", "gpt2_merges", "gpt2_specials"};
  std::vector<std::string> known;
  absl::Status (*run)(const Flags&) = nullptr;
  if (verb == "train") {
    known = {"input", "vocab_size", "output", "specials", "gpt2_vocab_out", "gpt2_merges_out", "threads", "chunk_mb"};
    run = Train;
  } else if (verb == "encode") {
    known = {"input", "output", "threads", "chunk_mb"};
    run = Encode;
  } else if (verb == "decode") {
    known = {"input", "output"};
    run = Decode;
  } else if (verb == "stats") {
    known = {"input"};
    run = Stats;
  } else {
    std::fprintf(stderr, "bpe: unknown verb \"%s\"\n%s", verb.c_str(), kUsage);
    return 1;
  }
  if (verb != "train") known.insert(known.end(), tokenizer_flags.begin(), tokenizer_flags.end());
  auto flags = Flags::Parse(argc, argv, known);
  absl::Status status = !flags.ok() ? flags.status() : CheckOutputsAreNotInputs(*flags);
  if (status.ok()) status = run(*flags);
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
