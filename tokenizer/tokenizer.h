// A byte-level BPE tokenizer: a vocab of byte strings (every single byte among them), merges in rank order,
// and special tokens. Encoding splits text on specials (longest first), pre-tokenizes the rest with the
// GPT-2 pattern and applies the merges by rank within each pre-token (lowest rank first, leftmost on
// ties: GPT-2's definition); decoding joins the bytes of the ids. Also the canonical serialization that
// the tokenizer file stores and Hash() (FNV-1a 64 of it), which token files record.
#ifndef LMFORGE_TOKENIZER_TOKENIZER_H_
#define LMFORGE_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tokenizer/piece_table.h"
#include "tokenizer/pretokenize.h"

namespace lmf::tokenizer {

inline constexpr uint32_t kTokenizerFormatVersion = 1;

class Tokenizer {
 public:
  // vocab[id] is the byte string of token id. merges[r] = (left id, right id) is the merge of rank r; the
  // merged bytes must be in the vocab. special_ids name vocab entries that are special tokens. Errors name
  // the first entry that is wrong (missing byte, duplicate bytes, merge of unknown ids, ...).
  static absl::StatusOr<Tokenizer> Create(std::vector<std::string> vocab,
                                          std::vector<std::pair<uint32_t, uint32_t>> merges,
                                          std::vector<uint32_t> special_ids);

  uint32_t vocab_size() const { return static_cast<uint32_t>(vocab_.size()); }
  const std::vector<std::string>& vocab() const { return vocab_; }
  const std::vector<std::pair<uint32_t, uint32_t>>& merges() const { return merges_; }
  const std::vector<uint32_t>& special_ids() const { return special_ids_; }
  const SpecialTokenSplitter& specials() const { return splitter_; }
  // Id of the special token with these bytes, or -1.
  int64_t SpecialId(std::string_view text) const;
  // Id of the token with exactly these bytes, or -1.
  int64_t TokenId(std::string_view bytes) const;

  // Token ids of text; specials in the text become their ids.
  std::vector<uint32_t> Encode(std::string_view text) const;
  // Token ids of text with specials treated as ordinary text.
  std::vector<uint32_t> EncodeOrdinary(std::string_view text) const;

  // The bytes of the ids joined; an id >= vocab_size() is an error naming it and its position.
  absl::StatusOr<std::string> DecodeBytes(const std::vector<uint32_t>& ids) const;
  // DecodeBytes, then invalid UTF-8 replaced by U+FFFD (one per maximal invalid subsequence, as Python's
  // bytes.decode("utf-8", errors="replace")).
  absl::StatusOr<std::string> Decode(const std::vector<uint32_t>& ids) const;

  // The canonical serialization (the tokenizer file's contents) and FNV-1a 64 of it.
  std::string Serialize() const;
  uint64_t Hash() const;

  // Merge of (left, right): rank and resulting id, or false.
  bool FindMerge(uint32_t left, uint32_t right, uint32_t* rank, uint32_t* result) const {
    auto it = merge_map_.find(PairKey(left, right));
    if (it == merge_map_.end()) return false;
    *rank = static_cast<uint32_t>(it->second >> 32);
    *result = static_cast<uint32_t>(it->second);
    return true;
  }
  uint32_t ByteId(unsigned char b) const { return byte_ids_[b]; }

  static uint64_t PairKey(uint32_t left, uint32_t right) { return (uint64_t{left} << 32) | right; }

 private:
  Tokenizer() = default;
  std::vector<std::string> vocab_;
  std::vector<std::pair<uint32_t, uint32_t>> merges_;
  std::vector<uint32_t> special_ids_;
  SpecialTokenSplitter splitter_;
  std::vector<uint32_t> splitter_ids_;  // splitter_.specials()[i] has id splitter_ids_[i]
  absl::flat_hash_map<std::string, uint32_t> bytes_to_id_;
  absl::flat_hash_map<uint64_t, uint64_t> merge_map_;  // PairKey -> rank << 32 | result id
  uint32_t byte_ids_[256] = {};

  friend class Encoder;
};

// Encodes with a cache of pre-tokens seen before; one per thread (not thread-safe), all sharing one const
// Tokenizer. The cache is bounded: it is cleared when it passes max_cache_entries.
class Encoder {
 public:
  explicit Encoder(const Tokenizer& tokenizer, size_t max_cache_entries = 1 << 18);

  // Appends the ids of text to out; specials are recognised when `allow_specials`.
  void Encode(std::string_view text, bool allow_specials, std::vector<uint32_t>* out);
  // Appends the ids of one pre-token (merges by rank) to out.
  void EncodePiece(std::string_view piece, std::vector<uint32_t>* out);

 private:
  void MergeSmall(std::string_view piece, std::vector<uint32_t>* out);
  void MergeLarge(std::string_view piece, std::vector<uint32_t>* out);

  const Tokenizer& tok_;
  size_t max_cache_entries_;
  // piece -> (offset in cache_ids_ << 8) | number of ids.
  PieceTable cache_;
  std::vector<uint32_t> cache_ids_;
  std::vector<uint32_t> ids_;      // scratch
  std::vector<uint32_t> ranks_;    // scratch
  std::vector<uint32_t> results_;  // scratch
};

// Replaces invalid UTF-8 in bytes with U+FFFD (one per maximal invalid subsequence).
std::string ReplaceInvalidUtf8(std::string_view bytes);

// FNV-1a 64 of data.
uint64_t Fnv1a64(std::string_view data);

}  // namespace lmf::tokenizer

#endif  // LMFORGE_TOKENIZER_TOKENIZER_H_
