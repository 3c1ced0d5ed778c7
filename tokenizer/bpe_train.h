// Byte-level BPE training. The vocab is the 256 single bytes (ids 0..255), then the special tokens, then
// one token per merge until vocab_size. Each step merges the most frequent adjacent pair; ties go to the
// lexicographically greater pair of byte strings (the CS336 reference convention).
//
// The corpus is pre-tokenized in parallel chunks cut at safe points (special-token starts, newlines) and
// read a chunk at a time; only the distinct pre-tokens and their counts are kept. Merging keeps pair
// counts and an index from each pair to the words holding it, updated incrementally after each merge,
// with a max-heap of (count, pair) whose stale entries are skipped: no full recount per merge.
#ifndef LMFORGE_TOKENIZER_BPE_TRAIN_H_
#define LMFORGE_TOKENIZER_BPE_TRAIN_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "base/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace lmf::tokenizer {

struct TrainProgress {
  enum class Phase { kCounting, kMerging };
  Phase phase = Phase::kCounting;
  uint64_t bytes_done = 0;  // counting: bytes pre-tokenized so far, of bytes_total
  uint64_t bytes_total = 0;
  uint64_t merges_done = 0;  // merging: merges made so far, of merges_total
  uint64_t merges_total = 0;
};

struct TrainOptions {
  uint32_t vocab_size = 0;                  // 256 + specials + merges
  std::vector<std::string> special_tokens;  // e.g. {"<|endoftext|>"}
  ThreadPool* pool = nullptr;               // null: ThreadPool::Default()
  uint64_t chunk_bytes = 1 << 20;           // target size of a pre-tokenization chunk
  // Called from the training thread now and then (not from workers).
  std::function<void(const TrainProgress&)> progress;
};

// Distinct pre-tokens (specials excluded) and how often each occurs.
using PretokenCounts = absl::flat_hash_map<std::string, uint64_t>;

absl::StatusOr<Tokenizer> TrainBpeOnFiles(const std::vector<std::string>& paths, const TrainOptions& options);
absl::StatusOr<Tokenizer> TrainBpeOnText(std::string_view text, const TrainOptions& options);

// Checks vocab_size >= 256 + specials and that specials are distinct and non-empty.
absl::Status ValidateTrainOptions(const TrainOptions& options);

// The two halves, for tests and benchmarks.
absl::StatusOr<PretokenCounts> CountPretokensInFiles(const std::vector<std::string>& paths,
                                                     const TrainOptions& options);
PretokenCounts CountPretokensInText(std::string_view text, const TrainOptions& options);
absl::StatusOr<Tokenizer> TrainBpeFromCounts(const PretokenCounts& counts, const TrainOptions& options);

}  // namespace lmf::tokenizer

#endif  // LMFORGE_TOKENIZER_BPE_TRAIN_H_
