// Batches of training and validation windows from memory-mapped token files (//tokenizer:token_file).
//
// Training: each sequence of a batch is a window of T+1 consecutive ids starting at a uniformly random
// offset; inputs are its first T ids, targets its last T. Offsets come from a counter-based generator
// (SplitMix64 of seed and window index), so the sampler's whole state is {seed, windows drawn}: saved in a
// checkpoint, it makes a resumed run draw exactly the windows an uninterrupted run would have drawn.
// Validation: windows read in order, T apart, from the start of the file, for a fixed token budget.
//
// Both check the file against what the run expects: its tokenizer's vocab fits the model, its tokenizer
// hash matches (when known), and it holds at least one batch of B windows that share no target (B * T + 1
// ids). Opening a sampler or validation batches also checks that every id they can read is below the file's
// vocab (one pass over the mapped ids at open, over the CPU threads: the whole training file, the validation
// budget's prefix).
#ifndef LMFORGE_EXPERIMENTS_DATA_TOKEN_BATCHES_H_
#define LMFORGE_EXPERIMENTS_DATA_TOKEN_BATCHES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tokenizer/token_file.h"

namespace lmf::experiments {

// What the run expects of a token file.
struct TokenFileExpectations {
  int64_t model_vocab_size = 0;                // ids must be < this: the file's vocab_size may not exceed it
  std::optional<uint64_t> tokenizer_hash;      // when set, the file's header must carry this hash
  std::string tokenizer_hash_source = "data.tokenizer";  // where that hash came from, for the message
  int64_t batch_size = 0;                      // B
  std::string batch_size_source =
      "run.batch_size";                        // where B came from, for the messages (eval: --batch_size)
  int64_t context_length = 0;                  // T
};

// The fingerprint of a token file's contents that --resume compares with a checkpoint's (and a sweep with a
// finished run's): CRC-32C of the header's fields and of 4096 ids at evenly spaced positions. Cheap (4096
// reads) and changed by any re-encoding with other text or another tokenizer.
uint32_t TokenFileFingerprint(const tokenizer::TokenFileReader& file);

// Opens and checks a token file against `expect` (vocab, hash, at least one batch: B * T + 1 ids). Past
// this check B * T is below the file's size, so batch arithmetic in int64 cannot overflow however large B is.
absl::StatusOr<tokenizer::TokenFileReader> OpenTokenFile(const std::string& path,
                                                         const TokenFileExpectations& expect);

struct SamplerState {
  uint64_t seed = 0;
  uint64_t windows_drawn = 0;
};

// One file of a training mixture and its relative weight (> 0).
struct TrainSource {
  std::string path;
  double weight = 1;
};

class TrainBatchSampler {
 public:
  static absl::StatusOr<TrainBatchSampler> Open(const std::string& path, const TokenFileExpectations& expect,
                                                uint64_t seed);
  // A mixture: window i comes from source s with probability weight_s / (sum of weights), picked from
  // (seed, i), then starts at WindowStart(seed, i, that source's size, T). One source is Open(path). Every
  // file is checked by OpenTokenFile; all must carry the first one's tokenizer hash. The weights are
  // positive with a finite sum, as config validation (data.train_mixture) ensures; aborts otherwise.
  static absl::StatusOr<TrainBatchSampler> Open(const std::vector<TrainSource>& sources,
                                                const TokenFileExpectations& expect, uint64_t seed);

  // Fills inputs and targets, each (B, T) row-major, with the next B random windows.
  absl::Status Next(int32_t* inputs, int32_t* targets);
  // Passes over the next B windows (another data-parallel process's micro-batch) without reading them.
  void Skip() { state_.windows_drawn += static_cast<uint64_t>(batch_size_); }

  const SamplerState& state() const { return state_; }
  // Continues from a saved state (a checkpoint of a run with the same data and seed).
  void Restore(const SamplerState& state) { state_ = state; }

  // The start offset of window `index` for `seed` in a file of `num_tokens` ids (exposed for tests).
  static uint64_t WindowStart(uint64_t seed, uint64_t index, uint64_t num_tokens, int64_t context_length);
  // The source window `index` comes from, for cumulative weights cumulative[s] = w_0 + ... + w_s (exposed
  // for tests).
  static size_t WindowSource(uint64_t seed, uint64_t index, const std::vector<double>& cumulative);

  // The tokenizer hash every source carries.
  uint64_t tokenizer_hash() const { return files_.front().header().tokenizer_hash; }
  // A cheap content check of each source, in order: CRC-32C of its header and of 4096 ids at evenly spaced
  // positions (a file replaced at the same path almost surely changes it; no full read).
  std::vector<uint32_t> Fingerprints() const;
  const std::vector<tokenizer::TokenFileReader>& files() const { return files_; }

 private:
  TrainBatchSampler(std::vector<tokenizer::TokenFileReader> files, std::vector<double> cumulative,
                    const TokenFileExpectations& expect, uint64_t seed);
  std::vector<tokenizer::TokenFileReader> files_;
  std::vector<double> cumulative_;  // cumulative weights, one per file
  int64_t batch_size_;
  int64_t context_length_;
  SamplerState state_;
};

class ValidationBatches {
 public:
  // `eval_tokens` is the budget per evaluation: eval_tokens / (B * T) batches (at least one).
  static absl::StatusOr<ValidationBatches> Open(const std::string& path, const TokenFileExpectations& expect,
                                                int64_t eval_tokens);

  int64_t num_batches() const { return num_batches_; }
  // Batch i (0 <= i < num_batches): windows i*B .. i*B+B-1, window w starting at id w*T.
  absl::Status Get(int64_t i, int32_t* inputs, int32_t* targets) const;

 private:
  ValidationBatches(tokenizer::TokenFileReader file, const TokenFileExpectations& expect, int64_t num_batches);
  tokenizer::TokenFileReader file_;
  int64_t batch_size_;
  int64_t context_length_;
  int64_t num_batches_;
};

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_DATA_TOKEN_BATCHES_H_
