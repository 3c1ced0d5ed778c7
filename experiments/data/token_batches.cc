// Training and validation batches from token files (see token_batches.h).
#include "experiments/data/token_batches.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "base/splitmix.h"
#include "base/thread_pool.h"
#include "experiments/crc32c/crc32c.h"

namespace lmf::experiments {
namespace {

// Copies window [start, start + T + 1) into one row of inputs and targets.
absl::Status ReadWindow(const tokenizer::TokenFileReader& file, uint64_t start, int64_t context_length,
                        std::vector<int32_t>* scratch, int32_t* inputs, int32_t* targets) {
  scratch->resize(context_length + 1);
  if (absl::Status s = file.Read(start, context_length + 1, scratch->data()); !s.ok()) return s;
  for (int64_t t = 0; t < context_length; ++t) {
    inputs[t] = (*scratch)[t];
    targets[t] = (*scratch)[t + 1];
  }
  return absl::OkStatus();
}

// Every id of tokens [0, count) below the header's vocab_size (so below the model's): a corrupt or
// mislabelled file is an error here, naming the first bad position, rather than a model error after hours of
// training. One pass over the mapped ids, split over the CPU threads.
absl::Status CheckIds(const tokenizer::TokenFileReader& file, uint64_t count) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  const uint32_t vocab = file.header().vocab_size;
  const int64_t chunks = static_cast<int64_t>((count + kChunk - 1) / kChunk);
  std::vector<uint64_t> first_bad(static_cast<size_t>(chunks));
  ThreadPool::Default().RunTasks(chunks, [&](int64_t c) {
    const uint64_t begin = static_cast<uint64_t>(c) * kChunk, end = std::min(count, begin + kChunk);
    first_bad[c] = file.FirstIdAtOrAbove(vocab, begin, end);
    if (first_bad[c] == end) first_bad[c] = count;  // none in this chunk
  });
  for (int64_t c = 0; c < chunks; ++c) {
    if (first_bad[c] < count) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), ": token id ", file.at(first_bad[c]), " at position ", first_bad[c],
                       " is not below the file's vocab_size ", vocab, " (a corrupt token file)"));
    }
  }
  return absl::OkStatus();
}

std::string DecimalString(unsigned __int128 value) {
  std::string digits;
  do {
    digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(value % 10)));
    value /= 10;
  } while (value != 0);
  return digits;
}

}  // namespace

absl::StatusOr<tokenizer::TokenFileReader> OpenTokenFile(const std::string& path,
                                                         const TokenFileExpectations& expect) {
  LMF_CHECK_GT(expect.context_length, 0);
  LMF_CHECK_GT(expect.batch_size, 0);
  absl::StatusOr<tokenizer::TokenFileReader> file = tokenizer::TokenFileReader::Open(path);
  if (!file.ok()) return file.status();
  const tokenizer::TokenFileHeader& header = file->header();
  if (static_cast<int64_t>(header.vocab_size) > expect.model_vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the token file's tokenizer has vocab_size=",
                                                   header.vocab_size, ", more than model.vocab_size=",
                                                   expect.model_vocab_size));
  }
  if (expect.tokenizer_hash.has_value() && header.tokenizer_hash != *expect.tokenizer_hash) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the token file was written by a different tokenizer (header tokenizer_hash=",
                     absl::Hex(header.tokenizer_hash, absl::kZeroPad16), ", ", expect.tokenizer_hash_source,
                     " has hash ", absl::Hex(*expect.tokenizer_hash, absl::kZeroPad16), ")"));
  }
  // One batch of B windows that share no target: B * T + 1 ids. Fewer would make every batch repeat
  // tokens within itself, which is almost certainly a wrong file or a wrong batch size. Compared as
  // B <= (N - 1) / T, since B * T may not fit in 64 bits.
  const uint64_t windows = header.num_tokens == 0 ? 0 : (header.num_tokens - 1) / expect.context_length;
  if (static_cast<uint64_t>(expect.batch_size) > windows) {
    const unsigned __int128 needs =
        static_cast<unsigned __int128>(expect.batch_size) * static_cast<uint64_t>(expect.context_length) + 1;
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", header.num_tokens, " tokens are too few for one batch: ", expect.batch_size_source,
        " * model.context_length + 1 = ", expect.batch_size, " * ", expect.context_length,
        " + 1 = ", DecimalString(needs), " tokens"));
  }
  return file;
}

TrainBatchSampler::TrainBatchSampler(std::vector<tokenizer::TokenFileReader> files,
                                     std::vector<double> cumulative, const TokenFileExpectations& expect,
                                     uint64_t seed)
    : files_(std::move(files)),
      cumulative_(std::move(cumulative)),
      batch_size_(expect.batch_size),
      context_length_(expect.context_length) {
  state_.seed = seed;
}

absl::StatusOr<TrainBatchSampler> TrainBatchSampler::Open(const std::string& path,
                                                          const TokenFileExpectations& expect, uint64_t seed) {
  return Open(std::vector<TrainSource>{{path, 1.0}}, expect, seed);
}

absl::StatusOr<TrainBatchSampler> TrainBatchSampler::Open(const std::vector<TrainSource>& sources,
                                                          const TokenFileExpectations& expect,
                                                          uint64_t seed) {
  LMF_CHECK(!sources.empty());
  std::vector<tokenizer::TokenFileReader> files;
  std::vector<double> cumulative;
  double total = 0;
  for (const TrainSource& source : sources) {
    LMF_CHECK(source.weight > 0 && std::isfinite(source.weight))
        << source.path << " weight " << source.weight;
    absl::StatusOr<tokenizer::TokenFileReader> file = OpenTokenFile(source.path, expect);
    if (!file.ok()) return file.status();
    if (absl::Status s = CheckIds(*file, file->size()); !s.ok()) return s;  // any window may be drawn
    if (!files.empty() && file->header().tokenizer_hash != files.front().header().tokenizer_hash) {
      return absl::InvalidArgumentError(absl::StrCat(
          source.path, ": tokenizer_hash ", absl::Hex(file->header().tokenizer_hash, absl::kZeroPad16),
          " differs from the mixture's first file ", sources.front().path, " (",
          absl::Hex(files.front().header().tokenizer_hash, absl::kZeroPad16),
          "): the sources of one mixture must be encoded with one tokenizer"));
    }
    files.push_back(*std::move(file));
    total += source.weight;
    cumulative.push_back(total);
  }
  LMF_CHECK(std::isfinite(total)) << "the mixture's weights sum to infinity (config validation refuses it)";
  return TrainBatchSampler(std::move(files), std::move(cumulative), expect, seed);
}

uint32_t TokenFileFingerprint(const tokenizer::TokenFileReader& file) {
  const tokenizer::TokenFileHeader& h = file.header();
  const uint32_t crc =
      Crc32c(absl::StrCat(h.num_tokens, ":", h.vocab_size, ":", h.tokenizer_hash, ":", h.bytes_per_token));
  constexpr uint64_t kSamples = 4096;
  std::string ids;
  for (uint64_t i = 0; i < kSamples && file.size() > 0; ++i) {
    const uint64_t position =
        static_cast<uint64_t>((static_cast<unsigned __int128>(i) * file.size()) / kSamples);
    const uint32_t id = file.at(position);
    ids.append(reinterpret_cast<const char*>(&id), sizeof(id));
  }
  return Crc32c(ids, crc);
}

std::vector<uint32_t> TrainBatchSampler::Fingerprints() const {
  std::vector<uint32_t> out;
  for (const tokenizer::TokenFileReader& file : files_) out.push_back(TokenFileFingerprint(file));
  return out;
}

size_t TrainBatchSampler::WindowSource(uint64_t seed, uint64_t index, const std::vector<double>& cumulative) {
  if (cumulative.size() <= 1) return 0;
  // 53 random bits (a stream apart from the starts') -> u uniform in [0, total); the first s with u below
  // cumulative[s].
  const uint64_t bits = SplitMix64(SplitMix64(seed ^ 0x5EED50A7CE5ull) ^ index);
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53 * cumulative.back();
  const size_t s =
      static_cast<size_t>(std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin());
  return std::min(s, cumulative.size() - 1);
}

uint64_t TrainBatchSampler::WindowStart(uint64_t seed, uint64_t index, uint64_t num_tokens,
                                        int64_t context_length) {
  // Starts 0 .. num_tokens - T - 1 inclusive; the multiply-high maps 64 random bits onto that range with a
  // bias below range / 2^64.
  const uint64_t range = num_tokens - static_cast<uint64_t>(context_length);
  const uint64_t bits = SplitMix64(SplitMix64(seed) ^ index);
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * range) >> 64);
}

absl::Status TrainBatchSampler::Next(int32_t* inputs, int32_t* targets) {
  std::vector<int32_t> scratch;
  for (int64_t b = 0; b < batch_size_; ++b) {
    const tokenizer::TokenFileReader& file =
        files_[WindowSource(state_.seed, state_.windows_drawn, cumulative_)];
    const uint64_t start = WindowStart(state_.seed, state_.windows_drawn, file.size(), context_length_);
    if (absl::Status s = ReadWindow(file, start, context_length_, &scratch, inputs + b * context_length_,
                                    targets + b * context_length_);
        !s.ok()) {
      return s;
    }
    ++state_.windows_drawn;
  }
  return absl::OkStatus();
}

ValidationBatches::ValidationBatches(tokenizer::TokenFileReader file, const TokenFileExpectations& expect,
                                     int64_t num_batches)
    : file_(std::move(file)),
      batch_size_(expect.batch_size),
      context_length_(expect.context_length),
      num_batches_(num_batches) {}

absl::StatusOr<ValidationBatches> ValidationBatches::Open(const std::string& path,
                                                          const TokenFileExpectations& expect,
                                                          int64_t eval_tokens) {
  absl::StatusOr<tokenizer::TokenFileReader> file = OpenTokenFile(path, expect);
  if (!file.ok()) return file.status();
  const int64_t batch_tokens = expect.batch_size * expect.context_length;
  const int64_t num_batches = eval_tokens / batch_tokens;
  if (num_batches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": an evaluation budget of ", eval_tokens,
                                                   " tokens is less than one batch of ", batch_tokens, " tokens"));
  }
  const uint64_t needed = static_cast<uint64_t>(num_batches * batch_tokens) + 1;
  if (file->size() < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", file->size(), " tokens are too few for the validation budget: ", num_batches, " batch",
        num_batches == 1 ? "" : "es", " of ", expect.batch_size, " x ", expect.context_length,
        " tokens need ", needed, " (lower run.eval_tokens or use a larger file)"));
  }
  if (absl::Status s = CheckIds(*file, needed); !s.ok()) return s;  // the part validation reads
  return ValidationBatches(std::move(*file), expect, num_batches);
}

absl::Status ValidationBatches::Get(int64_t i, int32_t* inputs, int32_t* targets) const {
  LMF_CHECK(i >= 0 && i < num_batches_) << "validation batch " << i << " of " << num_batches_;
  std::vector<int32_t> scratch;
  for (int64_t b = 0; b < batch_size_; ++b) {
    const uint64_t start = static_cast<uint64_t>((i * batch_size_ + b) * context_length_);
    if (absl::Status s = ReadWindow(file_, start, context_length_, &scratch, inputs + b * context_length_,
                                    targets + b * context_length_);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace lmf::experiments
