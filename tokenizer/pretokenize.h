// Pre-tokenization with exactly the semantics of the GPT-2 pattern
//   '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// over full Unicode, as a hand-written scanner over UTF-8 with code point classes generated from Python's
// `regex` module (unicode_classes.inc), plus the splitting of text on special tokens (longest first) that
// comes before it. Bytes that are not valid UTF-8 are single "other" characters (class of
// [^\s\p{L}\p{N}]), so any byte string pre-tokenizes and the pieces always concatenate back to the input.
#ifndef LMFORGE_TOKENIZER_PRETOKENIZE_H_
#define LMFORGE_TOKENIZER_PRETOKENIZE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lmf::tokenizer {

enum class CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// Class of code point cp (0..0x10FFFF) for the GPT-2 pattern.
CharClass ClassOfCodePoint(uint32_t cp);

// The end (exclusive byte offset) of the pre-token that starts at byte `begin` of `text` (begin < size).
size_t PretokenEnd(std::string_view text, size_t begin);

// Calls fn(piece) for every pre-token of text, in order (no special-token handling).
template <typename Fn>
void ForEachPretoken(std::string_view text, Fn&& fn) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t end = PretokenEnd(text, i);
    fn(text.substr(i, end - i));
    i = end;
  }
}

std::vector<std::string_view> Pretokenize(std::string_view text);

// Splits text on special tokens: at each position the leftmost occurrence of any special wins, and among
// specials starting there the longest (so "<|a|><|a|>" with specials {"<|a|>", "<|a|><|a|>"} is one token,
// and "<|a|><|a|>" with only "<|a|>" is two).
class SpecialTokenSplitter {
 public:
  SpecialTokenSplitter() = default;
  explicit SpecialTokenSplitter(std::vector<std::string> specials);

  bool empty() const { return specials_.empty(); }
  const std::vector<std::string>& specials() const { return specials_; }
  size_t max_length() const { return max_length_; }

  // The first special occurrence at or after `from`: its start and its index in specials(), or
  // {npos, -1} when there is none.
  std::pair<size_t, int> FindNext(std::string_view text, size_t from) const;

  // Calls on_text(segment) for the text between specials (non-empty segments only) and on_special(index)
  // for each special, in order.
  template <typename OnText, typename OnSpecial>
  void Split(std::string_view text, OnText&& on_text, OnSpecial&& on_special) const {
    size_t pos = 0;
    while (pos < text.size()) {
      const auto [start, index] = FindNext(text, pos);
      if (index < 0) break;
      if (start > pos) on_text(text.substr(pos, start - pos));
      on_special(index);
      pos = start + specials_[index].size();
    }
    if (pos < text.size()) on_text(text.substr(pos));
  }

 private:
  std::vector<std::string> specials_;
  size_t max_length_ = 0;
  bool first_byte_[256] = {};
  int single_first_byte_ = -1;  // the first byte shared by all specials, or -1
};

// A byte offset p in [from, text.size()] at which text can be cut into two parts that pre-tokenize (and
// split on specials) exactly as the whole does: the start of a special-token occurrence, or a '\n' right
// after an ASCII non-whitespace byte and not inside a special. Returns the first such cut at or after
// `from`, or text.size() when there is none. Used to split corpora into chunks for parallel work.
size_t NextSafeCut(std::string_view text, size_t from, const SpecialTokenSplitter& specials);

}  // namespace lmf::tokenizer

#endif  // LMFORGE_TOKENIZER_PRETOKENIZE_H_
