// Tokenizer: validation of vocab/merges/specials, byte-level BPE encoding with a per-thread pre-token
// cache, decoding with U+FFFD for invalid UTF-8, and the canonical serialization behind Hash().
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <queue>

#include "absl/strings/str_cat.h"

namespace lmf::tokenizer {
namespace {

constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();
// Pre-tokens longer than this merge with a heap (n log n) instead of repeated linear scans (n^2).
constexpr size_t kLargePiece = 96;
// Pre-tokens longer than this are not cached (rare, and they would crowd the cache).
constexpr size_t kMaxCachedPiece = 64;

std::string Hex(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

}  // namespace

uint64_t Fnv1a64(std::string_view data) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

absl::StatusOr<Tokenizer> Tokenizer::Create(std::vector<std::string> vocab,
                                            std::vector<std::pair<uint32_t, uint32_t>> merges,
                                            std::vector<uint32_t> special_ids) {
  Tokenizer t;
  if (vocab.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("vocab of ", vocab.size(), " tokens is larger than 2^31-1"));
  }
  const uint32_t n = static_cast<uint32_t>(vocab.size());
  std::vector<bool> is_special(n, false);
  for (uint32_t id : special_ids) {
    if (id >= n) return absl::InvalidArgumentError(absl::StrCat("special token id ", id, " is not in the vocab of ", n));
    if (is_special[id]) return absl::InvalidArgumentError(absl::StrCat("special token id ", id, " is listed twice"));
    is_special[id] = true;
  }
  t.bytes_to_id_.reserve(n);
  for (uint32_t id = 0; id < n; ++id) {
    if (vocab[id].empty()) return absl::InvalidArgumentError(absl::StrCat("token ", id, " is empty"));
    auto [it, inserted] = t.bytes_to_id_.emplace(vocab[id], id);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("tokens ", it->second, " and ", id, " have the same bytes (hex ",
                                                     Hex(vocab[id]), ")"));
    }
  }
  for (int b = 0; b < 256; ++b) {
    auto it = t.bytes_to_id_.find(std::string(1, static_cast<char>(b)));
    if (it == t.bytes_to_id_.end() || is_special[it->second]) {
      return absl::InvalidArgumentError(
          absl::StrCat("the vocab has no ordinary token for byte 0x", Hex(std::string(1, static_cast<char>(b))),
                       ": a byte-level BPE vocab needs all 256 single bytes"));
    }
    t.byte_ids_[b] = it->second;
  }
  t.merge_map_.reserve(merges.size());
  std::vector<bool> produced(n, false);
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto [a, b] = merges[r];
    if (a >= n || b >= n) {
      return absl::InvalidArgumentError(absl::StrCat("merge ", r, " (", a, ", ", b, ") names an id outside the vocab of ", n));
    }
    if (is_special[a] || is_special[b]) {
      return absl::InvalidArgumentError(absl::StrCat("merge ", r, " (", a, ", ", b, ") uses a special token"));
    }
    auto it = t.bytes_to_id_.find(vocab[a] + vocab[b]);
    if (it == t.bytes_to_id_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("merge ", r, " (", a, ", ", b, "): the merged bytes (hex ",
                                                     Hex(vocab[a] + vocab[b]), ") are not a token"));
    }
    if (is_special[it->second]) {
      return absl::InvalidArgumentError(absl::StrCat("merge ", r, " produces special token ", it->second));
    }
    const uint64_t value = (uint64_t{static_cast<uint32_t>(r)} << 32) | it->second;
    if (!t.merge_map_.emplace(PairKey(a, b), value).second) {
      return absl::InvalidArgumentError(absl::StrCat("merge ", r, " (", a, ", ", b, ") is listed twice"));
    }
    produced[it->second] = true;
  }
  // A multi-byte token that no merge produces can never appear in an encoding: the files disagree (a
  // truncated merges list, or an added token not declared special), and encoding would silently differ
  // from the tokenizer they came from.
  int64_t unreachable = 0, first = -1;
  for (uint32_t id = 0; id < n; ++id) {
    if (!is_special[id] && !produced[id] && vocab[id].size() > 1 && ++unreachable == 1) first = id;
  }
  if (unreachable > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        unreachable, " multi-byte token(s) are produced by no merge and are not special, first token ", first,
        " (hex ", Hex(vocab[first]), ") of ", n, " with ", merges.size(),
        " merges: a truncated merges list, or added tokens that must be declared special"));
  }
  std::vector<std::string> special_texts;
  for (uint32_t id : special_ids) special_texts.push_back(vocab[id]);
  t.splitter_ = SpecialTokenSplitter(special_texts);
  for (const std::string& s : t.splitter_.specials()) t.splitter_ids_.push_back(t.bytes_to_id_.at(s));
  t.vocab_ = std::move(vocab);
  t.merges_ = std::move(merges);
  t.special_ids_ = std::move(special_ids);
  return t;
}

int64_t Tokenizer::SpecialId(std::string_view text) const {
  for (uint32_t id : special_ids_) {
    if (vocab_[id] == text) return id;
  }
  return -1;
}

int64_t Tokenizer::TokenId(std::string_view bytes) const {
  auto it = bytes_to_id_.find(absl::string_view(bytes.data(), bytes.size()));
  return it == bytes_to_id_.end() ? -1 : it->second;
}

std::vector<uint32_t> Tokenizer::Encode(std::string_view text) const {
  Encoder encoder(*this, 1 << 14);
  std::vector<uint32_t> out;
  encoder.Encode(text, /*allow_specials=*/true, &out);
  return out;
}

std::vector<uint32_t> Tokenizer::EncodeOrdinary(std::string_view text) const {
  Encoder encoder(*this, 1 << 14);
  std::vector<uint32_t> out;
  encoder.Encode(text, /*allow_specials=*/false, &out);
  return out;
}

absl::StatusOr<std::string> Tokenizer::DecodeBytes(const std::vector<uint32_t>& ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= vocab_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " is not in the vocab (size ", vocab_.size(), ")"));
    }
    out += vocab_[ids[i]];
  }
  return out;
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<uint32_t>& ids) const {
  auto bytes = DecodeBytes(ids);
  if (!bytes.ok()) return bytes.status();
  return ReplaceInvalidUtf8(*bytes);
}

std::string Tokenizer::Serialize() const {
  std::string out = absl::StrCat("lmforge-tokenizer ", kTokenizerFormatVersion, "\nvocab ", vocab_.size(), "\n");
  for (const std::string& token : vocab_) absl::StrAppend(&out, Hex(token), "\n");
  absl::StrAppend(&out, "merges ", merges_.size(), "\n");
  for (const auto& [a, b] : merges_) absl::StrAppend(&out, a, " ", b, "\n");
  absl::StrAppend(&out, "specials ", special_ids_.size(), "\n");
  for (uint32_t id : special_ids_) absl::StrAppend(&out, id, "\n");
  return out;
}

uint64_t Tokenizer::Hash() const { return Fnv1a64(Serialize()); }

std::string ReplaceInvalidUtf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  std::string out;
  out.reserve(n);
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    // Expected length and the allowed range of the second byte (Unicode Table 3-7).
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    size_t good = 1;  // bytes of the longest valid prefix
    if (len > 0) {
      while (good < len && i + good < n) {
        const unsigned char d = s[i + good];
        const unsigned char l = good == 1 ? lo : 0x80, h = good == 1 ? hi : 0xBF;
        if (d < l || d > h) break;
        ++good;
      }
    }
    if (len > 0 && good == len) {
      out.append(bytes.data() + i, len);
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += good;
  }
  return out;
}

Encoder::Encoder(const Tokenizer& tokenizer, size_t max_cache_entries)
    : tok_(tokenizer), max_cache_entries_(max_cache_entries), cache_(256) {}

void Encoder::Encode(std::string_view text, bool allow_specials, std::vector<uint32_t>* out) {
  auto encode_text = [&](std::string_view segment) {
    ForEachPretoken(segment, [&](std::string_view piece) { EncodePiece(piece, out); });
  };
  if (!allow_specials || tok_.splitter_.empty()) {
    encode_text(text);
    return;
  }
  tok_.splitter_.Split(text, encode_text, [&](int index) { out->push_back(tok_.splitter_ids_[index]); });
}

void Encoder::EncodePiece(std::string_view piece, std::vector<uint32_t>* out) {
  if (piece.size() == 1) {
    out->push_back(tok_.byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (piece.size() > kMaxCachedPiece) {
    if (piece.size() > kLargePiece) {
      MergeLarge(piece, out);
    } else {
      MergeSmall(piece, out);
    }
    return;
  }
  bool inserted;
  uint64_t* entry = cache_.FindOrInsert(piece, &inserted);
  if (!inserted) {
    const uint32_t* cached = cache_ids_.data() + (*entry >> 8);
    out->insert(out->end(), cached, cached + (*entry & 0xff));
    return;
  }
  const size_t before = out->size();
  MergeSmall(piece, out);
  *entry = (uint64_t{cache_ids_.size()} << 8) | (out->size() - before);
  cache_ids_.insert(cache_ids_.end(), out->begin() + before, out->end());
  if (cache_.size() >= max_cache_entries_) {
    cache_.Clear();
    cache_ids_.clear();
  }
}

// Repeatedly merges the lowest-ranked adjacent pair (leftmost on ties), keeping the rank of every adjacent
// pair so that a merge only re-ranks its two neighbours.
void Encoder::MergeSmall(std::string_view piece, std::vector<uint32_t>* out) {
  const size_t n = piece.size();
  ids_.resize(n);
  for (size_t i = 0; i < n; ++i) ids_[i] = tok_.byte_ids_[static_cast<unsigned char>(piece[i])];
  // ranks_[i] and results_[i]: the merge of the pair at i (kNoRank: none; results_[i] then unused).
  ranks_.resize(n - 1);
  results_.resize(n - 1);
  auto look_up = [&](size_t i) {
    if (!tok_.FindMerge(ids_[i], ids_[i + 1], &ranks_[i], &results_[i])) ranks_[i] = kNoRank;
  };
  for (size_t i = 0; i + 1 < n; ++i) look_up(i);
  size_t m = n;
  while (m > 1) {
    size_t best = 0;
    uint32_t best_rank = ranks_[0];
    for (size_t i = 1; i + 1 < m; ++i) {
      if (ranks_[i] < best_rank) {
        best_rank = ranks_[i];
        best = i;
      }
    }
    if (best_rank == kNoRank) break;
    ids_[best] = results_[best];
    std::memmove(&ids_[best + 1], &ids_[best + 2], (m - best - 2) * sizeof(uint32_t));
    std::memmove(&ranks_[best], &ranks_[best + 1], (m - best - 2) * sizeof(uint32_t));
    std::memmove(&results_[best], &results_[best + 1], (m - best - 2) * sizeof(uint32_t));
    --m;
    if (best > 0) look_up(best - 1);
    if (best + 1 < m) look_up(best);
  }
  out->insert(out->end(), ids_.begin(), ids_.begin() + m);
}

// The same merge order with a heap of (rank, position) over a linked list of tokens: entries that a merge
// made stale are skipped when popped.
void Encoder::MergeLarge(std::string_view piece, std::vector<uint32_t>* out) {
  const size_t n = piece.size();
  std::vector<uint32_t> id(n);
  std::vector<int64_t> next(n), prev(n);
  for (size_t i = 0; i < n; ++i) {
    id[i] = tok_.byte_ids_[static_cast<unsigned char>(piece[i])];
    next[i] = i + 1 < n ? static_cast<int64_t>(i + 1) : -1;
    prev[i] = static_cast<int64_t>(i) - 1;
  }
  struct Entry {
    uint32_t rank;
    uint32_t pos;
    uint32_t left, right;  // the ids the pair had when pushed
    uint32_t result;       // and the id they merge into
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int64_t i) {
    if (i < 0 || next[i] < 0) return;
    uint32_t rank, result;
    if (tok_.FindMerge(id[i], id[next[i]], &rank, &result)) {
      heap.push({rank, static_cast<uint32_t>(i), id[i], id[next[i]], result});
    }
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int64_t>(i));
  std::vector<bool> alive(n, true);
  while (!heap.empty()) {
    const Entry e = heap.top();
    heap.pop();
    const int64_t i = e.pos;
    if (!alive[i] || next[i] < 0 || id[i] != e.left || id[next[i]] != e.right) continue;
    const int64_t j = next[i];
    id[i] = e.result;  // the pair is still (left, right), so its merge is the one pushed
    alive[j] = false;
    next[i] = next[j];
    if (next[j] >= 0) prev[next[j]] = i;
    push(prev[i]);
    push(i);
  }
  for (int64_t i = 0; i >= 0; i = next[i]) out->push_back(id[i]);
}

}  // namespace lmf::tokenizer
