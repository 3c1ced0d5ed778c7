// BPE training: parallel pre-token counting over chunks, then merges with incremental pair-count updates.
#include "tokenizer/bpe_train.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <queue>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tokenizer/corpus_chunks.h"
#include "tokenizer/piece_table.h"
#include "tokenizer/pretokenize.h"

namespace lmf::tokenizer {
namespace {

ThreadPool& PoolOf(const TrainOptions& options) {
  return options.pool != nullptr ? *options.pool : ThreadPool::Default();
}

}  // namespace

absl::Status ValidateTrainOptions(const TrainOptions& options) {
  std::vector<std::string> seen;
  for (const std::string& s : options.special_tokens) {
    if (s.empty()) return absl::InvalidArgumentError("special tokens must not be empty");
    if (s.size() == 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("special token \"", s, "\" is a single byte, which is already one of the 256 byte tokens"));
    }
    if (ReplaceInvalidUtf8(s) !=
        s) {  // typed text; as raw bytes it would make the exported vocab.json invalid JSON
      return absl::InvalidArgumentError(
          absl::StrCat("special token \"", ReplaceInvalidUtf8(s), "\" is not valid UTF-8"));
    }
    if (std::find(seen.begin(), seen.end(), s) != seen.end()) {
      return absl::InvalidArgumentError(absl::StrCat("special token \"", s, "\" is given twice"));
    }
    seen.push_back(s);
  }
  const uint64_t minimum = 256 + options.special_tokens.size();
  if (options.vocab_size < minimum) {
    return absl::InvalidArgumentError(absl::StrCat("vocab size ", options.vocab_size, " is smaller than the 256 byte tokens + ",
                                                   options.special_tokens.size(), " special tokens = ", minimum));
  }
  return absl::OkStatus();
}

namespace {

void CountInto(std::string_view text, const SpecialTokenSplitter& splitter, PieceTable* counts) {
  auto count_segment = [&](std::string_view segment) {
    ForEachPretoken(segment, [&](std::string_view piece) {
      bool inserted;
      ++*counts->FindOrInsert(piece, &inserted);
    });
  };
  splitter.Split(text, count_segment, [](int) {});
}

// Per-thread count maps: a task takes a free map, counts into it, and gives it back.
class CountSlots {
 public:
  int Acquire() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) {
      maps_.emplace_back();
      return static_cast<int>(maps_.size()) - 1;
    }
    const int slot = free_.back();
    free_.pop_back();
    return slot;
  }
  void Release(int slot) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(slot);
  }
  PieceTable& at(int slot) {
    std::lock_guard<std::mutex> lock(mu_);
    return maps_[slot];
  }
  // The counts of all tables together.
  PretokenCounts Merge() {
    size_t largest = 0;
    for (const PieceTable& t : maps_) largest = std::max(largest, t.size());
    PretokenCounts out;
    out.reserve(largest + largest / 4);
    for (PieceTable& t : maps_) {
      t.ForEach([&](std::string_view piece, uint64_t count) {
        out[absl::string_view(piece.data(), piece.size())] += count;
      });
      t = PieceTable(16);
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::deque<PieceTable> maps_;  // deque: references stay valid while others are added
  std::vector<int> free_;
};

// Max-heap order for (count, pair): higher count first, then the lexicographically greater pair of byte
// strings (first token's bytes, then second's).
struct PairEntry {
  int64_t count;
  uint32_t left, right;
};

}  // namespace

PretokenCounts CountPretokensInText(std::string_view text, const TrainOptions& options) {
  const SpecialTokenSplitter splitter(options.special_tokens);
  std::vector<size_t> cuts = {0};
  while (cuts.back() < text.size()) {
    cuts.push_back(NextSafeCut(text, std::min(text.size(), cuts.back() + options.chunk_bytes), splitter));
  }
  CountSlots slots;
  PoolOf(options).RunTasks(static_cast<int64_t>(cuts.size()) - 1, [&](int64_t i) {
    const int slot = slots.Acquire();
    CountInto(text.substr(cuts[i], cuts[i + 1] - cuts[i]), splitter, &slots.at(slot));
    slots.Release(slot);
  });
  return slots.Merge();
}

absl::StatusOr<PretokenCounts> CountPretokensInFiles(const std::vector<std::string>& paths,
                                                     const TrainOptions& options) {
  const SpecialTokenSplitter splitter(options.special_tokens);
  auto chunks = PlanCorpusChunks(paths, splitter, options.chunk_bytes);
  if (!chunks.ok()) return chunks.status();
  std::vector<CorpusFile> files;
  uint64_t total = 0;
  for (const std::string& path : paths) {
    auto f = CorpusFile::Open(path);
    if (!f.ok()) return f.status();
    total += f->size();
    files.push_back(std::move(*f));
  }
  CountSlots slots;
  std::atomic<uint64_t> done{0};
  std::mutex error_mu;
  absl::Status error;
  const std::thread::id caller = std::this_thread::get_id();
  PoolOf(options).RunTasks(static_cast<int64_t>(chunks->size()), [&](int64_t i) {
    const CorpusChunk& c = (*chunks)[i];
    std::string buffer;
    if (absl::Status s = files[c.file_index].Read(c.begin, c.end, &buffer); !s.ok()) {
      std::lock_guard<std::mutex> lock(error_mu);
      error = s;
      return;
    }
    const int slot = slots.Acquire();
    CountInto(buffer, splitter, &slots.at(slot));
    slots.Release(slot);
    done += c.end - c.begin;
    if (options.progress && std::this_thread::get_id() == caller) {
      TrainProgress p;
      p.bytes_done = done.load();
      p.bytes_total = total;
      options.progress(p);
    }
  });
  if (!error.ok()) return error;
  return slots.Merge();
}

absl::StatusOr<Tokenizer> TrainBpeFromCounts(const PretokenCounts& counts, const TrainOptions& options) {
  if (absl::Status s = ValidateTrainOptions(options); !s.ok()) return s;
  // Each merge shortens some word by a token, so the vocab cannot grow past 256 + specials + the bytes of
  // the words: reserve no more than that (a --vocab_size of 10^9 must not allocate 10^9 strings up front).
  uint64_t reachable = 256 + options.special_tokens.size();
  for (const auto& [piece, count] : counts) reachable += piece.size();
  std::vector<std::string> vocab;
  vocab.reserve(std::min<uint64_t>(options.vocab_size, reachable));
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  std::vector<uint32_t> special_ids;
  for (const std::string& s : options.special_tokens) {
    special_ids.push_back(static_cast<uint32_t>(vocab.size()));
    vocab.push_back(s);
  }
  const uint64_t merges_total = options.vocab_size - vocab.size();

  // Words (distinct pre-tokens of two bytes or more) as runs of token ids in one flat array.
  std::vector<uint32_t> tokens;
  std::vector<uint64_t> word_start;
  std::vector<uint32_t> word_len;
  std::vector<int64_t> word_count;
  for (const auto& [piece, count] : counts) {
    if (piece.size() < 2) continue;
    word_start.push_back(tokens.size());
    word_len.push_back(static_cast<uint32_t>(piece.size()));
    word_count.push_back(static_cast<int64_t>(count));
    for (unsigned char c : piece) tokens.push_back(c);
  }

  absl::flat_hash_map<uint64_t, int64_t> pair_count;
  absl::flat_hash_map<uint64_t, std::vector<uint32_t>> pair_words;
  for (uint32_t w = 0; w < word_start.size(); ++w) {
    const uint32_t* t = &tokens[word_start[w]];
    for (uint32_t i = 0; i + 1 < word_len[w]; ++i) {
      const uint64_t key = Tokenizer::PairKey(t[i], t[i + 1]);
      pair_count[key] += word_count[w];
      std::vector<uint32_t>& words = pair_words[key];
      if (words.empty() || words.back() != w) words.push_back(w);
    }
  }
  auto lower_priority = [&vocab](const PairEntry& x, const PairEntry& y) {
    if (x.count != y.count) return x.count < y.count;
    const int c = vocab[x.left].compare(vocab[y.left]);
    if (c != 0) return c < 0;
    return vocab[x.right] < vocab[y.right];
  };
  std::priority_queue<PairEntry, std::vector<PairEntry>, decltype(lower_priority)> heap(lower_priority);
  for (const auto& [key, count] : pair_count) {
    heap.push({count, static_cast<uint32_t>(key >> 32), static_cast<uint32_t>(key)});
  }

  std::vector<std::pair<uint32_t, uint32_t>> merges;
  absl::flat_hash_map<uint64_t, int64_t> delta;
  while (merges.size() < merges_total && !heap.empty()) {
    const PairEntry top = heap.top();
    heap.pop();
    const uint64_t key = Tokenizer::PairKey(top.left, top.right);
    auto current = pair_count.find(key);
    if (current == pair_count.end() || current->second != top.count) continue;  // stale entry
    const uint32_t a = top.left, b = top.right;
    const uint32_t merged = static_cast<uint32_t>(vocab.size());
    vocab.push_back(vocab[a] + vocab[b]);
    merges.emplace_back(a, b);
    pair_count.erase(current);
    std::vector<uint32_t> words;
    if (auto node = pair_words.find(key); node != pair_words.end()) {
      words = std::move(node->second);
      pair_words.erase(node);
    }
    delta.clear();
    // Each word is rewritten in place; only the pairs next to a merged occurrence change. A pair shared
    // by two adjacent occurrences ("a b a b": the old "b a", the new "X X") is counted once.
    auto add_new_pair = [&](uint32_t w, uint32_t left, uint32_t right, int64_t c) {
      const uint64_t q = Tokenizer::PairKey(left, right);
      delta[q] += c;
      std::vector<uint32_t>& holders = pair_words[q];
      if (holders.empty() || holders.back() != w) holders.push_back(w);
    };
    for (uint32_t w : words) {
      uint32_t* t = &tokens[word_start[w]];
      const uint32_t len = word_len[w];
      const int64_t c = word_count[w];
      uint32_t j = 0;
      bool last_merged = false;  // whether t[j - 1] is a merge made in this pass
      for (uint32_t i = 0; i < len;) {
        if (i + 1 < len && t[i] == a && t[i + 1] == b) {
          if (i > 0 && !last_merged) delta[Tokenizer::PairKey(t[j - 1], a)] -= c;
          if (i + 2 < len) delta[Tokenizer::PairKey(b, t[i + 2])] -= c;
          if (j > 0) add_new_pair(w, t[j - 1], merged, c);
          t[j++] = merged;
          i += 2;
          last_merged = true;
        } else {
          if (last_merged) add_new_pair(w, merged, t[i], c);
          t[j++] = t[i++];
          last_merged = false;
        }
      }
      word_len[w] = j;  // unchanged where the index was stale (an earlier merge took the pair out)
    }
    for (const auto& [q, d] : delta) {
      if (d == 0 || q == key) continue;
      int64_t& count = pair_count[q];
      count += d;
      if (count > 0) {
        heap.push({count, static_cast<uint32_t>(q >> 32), static_cast<uint32_t>(q)});
      } else {
        pair_count.erase(q);
      }
    }
    if (options.progress && (merges.size() % 64 == 0 || merges.size() == merges_total)) {
      TrainProgress p;
      p.phase = TrainProgress::Phase::kMerging;
      p.merges_done = merges.size();
      p.merges_total = merges_total;
      options.progress(p);
    }
  }
  return Tokenizer::Create(std::move(vocab), std::move(merges), std::move(special_ids));
}

absl::StatusOr<Tokenizer> TrainBpeOnText(std::string_view text, const TrainOptions& options) {
  if (absl::Status s = ValidateTrainOptions(options); !s.ok()) return s;
  return TrainBpeFromCounts(CountPretokensInText(text, options), options);
}

absl::StatusOr<Tokenizer> TrainBpeOnFiles(const std::vector<std::string>& paths, const TrainOptions& options) {
  if (absl::Status s = ValidateTrainOptions(options); !s.ok()) return s;
  if (paths.empty()) return absl::InvalidArgumentError("no input files to train on");
  auto counts = CountPretokensInFiles(paths, options);
  if (!counts.ok()) return counts.status();
  return TrainBpeFromCounts(*counts, options);
}

}  // namespace lmf::tokenizer
