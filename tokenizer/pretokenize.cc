// The GPT-2 pre-tokenizer as a scanner: at each position the alternatives of the pattern are tried in
// order, exactly as a backtracking regex engine would, but in one pass over the bytes.
#include "tokenizer/pretokenize.h"

#include <algorithm>
#include <cstring>

namespace lmf::tokenizer {
namespace {

#include "tokenizer/unicode_classes.inc"

struct Char {
  CharClass cls;
  uint32_t len;  // bytes
};

// Decodes the character at s[i] (i < n). Invalid UTF-8 (bad lead, bad continuation, overlong, surrogate,
// above U+10FFFF, truncated) is a one-byte "other" character.
inline Char CharAt(const unsigned char* s, size_t i, size_t n) {
  const unsigned char c = s[i];
  if (c < 0x80) return {static_cast<CharClass>(kUnicodeClassStage2[0][c]), 1};
  uint32_t cp;
  uint32_t len;
  if (c >= 0xC2 && c <= 0xDF) {
    if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return {CharClass::kOther, 1};
    cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu);
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return {CharClass::kOther, 1};
    if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F)) return {CharClass::kOther, 1};
    cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
    len = 3;
  } else if (c >= 0xF0 && c <= 0xF4) {
    if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80) {
      return {CharClass::kOther, 1};
    }
    if ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F)) return {CharClass::kOther, 1};
    cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
    len = 4;
  } else {
    return {CharClass::kOther, 1};
  }
  return {ClassOfCodePoint(cp), len};
}

// Classes of the ASCII bytes, the common case, looked up without decoding.
const uint8_t* const kAsciiClass = kUnicodeClassStage2[kUnicodeClassStage1[0]];

// End of the run of characters of class cls starting at i.
inline size_t RunEnd(const unsigned char* s, size_t i, size_t n, CharClass cls) {
  const uint8_t want = static_cast<uint8_t>(cls);
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      if (kAsciiClass[c] != want) break;
      ++i;
      continue;
    }
    const Char ch = CharAt(s, i, n);
    if (ch.cls != cls) break;
    i += ch.len;
  }
  return i;
}

}  // namespace

CharClass ClassOfCodePoint(uint32_t cp) {
  if (cp > 0x10FFFF) return CharClass::kOther;
  return static_cast<CharClass>(kUnicodeClassStage2[kUnicodeClassStage1[cp >> 8]][cp & 0xFF]);
}

size_t PretokenEnd(std::string_view text, size_t begin) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = begin;
  // '(?:[sdmt]|ll|ve|re)
  if (s[i] == '\'' && i + 1 < n) {
    const unsigned char a = s[i + 1];
    if (a == 's' || a == 'd' || a == 'm' || a == 't') return i + 2;
    if (i + 2 < n) {
      const unsigned char b = s[i + 2];
      if ((a == 'l' && b == 'l') || (a == 'v' && b == 'e') || (a == 'r' && b == 'e')) return i + 3;
    }
  }
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+' with the optional leading space.
  if (s[i] == ' ' && i + 1 < n) {
    const Char next = CharAt(s, i + 1, n);
    if (next.cls != CharClass::kSpace) return RunEnd(s, i + 1 + next.len, n, next.cls);
  }
  const Char first = CharAt(s, i, n);
  if (first.cls != CharClass::kSpace) return RunEnd(s, i + first.len, n, first.cls);
  // '\s+(?!\S)' then '\s+': a whitespace run that ends at the end of the text is taken whole; one followed
  // by a non-space leaves its last character (when it has two or more) to start the next token.
  size_t last_start = i;
  size_t chars = 0;
  while (i < n) {
    const Char ch = CharAt(s, i, n);
    if (ch.cls != CharClass::kSpace) break;
    last_start = i;
    i += ch.len;
    ++chars;
  }
  if (i == n || chars < 2) return i;
  return last_start;
}

std::vector<std::string_view> Pretokenize(std::string_view text) {
  std::vector<std::string_view> out;
  ForEachPretoken(text, [&](std::string_view piece) { out.push_back(piece); });
  return out;
}

SpecialTokenSplitter::SpecialTokenSplitter(std::vector<std::string> specials) {
  // Longest first, so the first special that matches at a position is the longest one there.
  std::stable_sort(specials.begin(), specials.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& sp : specials) {
    if (sp.empty() || std::find(specials_.begin(), specials_.end(), sp) != specials_.end()) continue;
    specials_.push_back(sp);
    max_length_ = std::max(max_length_, sp.size());
    first_byte_[static_cast<unsigned char>(sp[0])] = true;
  }
  // When every special starts with the same byte (e.g. '<'), FindNext jumps between its occurrences.
  for (const std::string& sp : specials_) {
    const int b = static_cast<unsigned char>(sp[0]);
    single_first_byte_ = (single_first_byte_ == -1 || single_first_byte_ == b) ? b : -2;
  }
  if (single_first_byte_ < 0) single_first_byte_ = -1;
}

std::pair<size_t, int> SpecialTokenSplitter::FindNext(std::string_view text, size_t from) const {
  if (specials_.empty()) return {std::string_view::npos, -1};
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = from; i < n; ++i) {
    if (single_first_byte_ >= 0) {
      const void* hit = std::memchr(s + i, single_first_byte_, n - i);
      if (hit == nullptr) break;
      i = static_cast<const unsigned char*>(hit) - s;
    } else if (!first_byte_[s[i]]) {
      continue;
    }
    for (size_t k = 0; k < specials_.size(); ++k) {
      const std::string& sp = specials_[k];
      if (sp.size() <= n - i && std::memcmp(s + i, sp.data(), sp.size()) == 0) {
        return {i, static_cast<int>(k)};
      }
    }
  }
  return {std::string_view::npos, -1};
}

size_t NextSafeCut(std::string_view text, size_t from, const SpecialTokenSplitter& specials) {
  const size_t n = text.size();
  if (from >= n) return n;
  if (from == 0) return 0;
  // Specials that start before `from` may cover it: step past any such occurrence first.
  size_t scan = from >= specials.max_length() ? from - specials.max_length() + 1 : 0;
  size_t covered_until = 0;
  while (!specials.empty()) {
    const auto [start, index] = specials.FindNext(text, scan);
    if (index < 0 || start >= from) break;
    covered_until = std::max(covered_until, start + specials.specials()[index].size());
    scan = start + specials.specials()[index].size();
  }
  size_t i = std::max(from, covered_until);
  const auto [next_special, index] = specials.FindNext(text, i);
  const size_t limit = index < 0 ? n : next_special;
  for (; i < limit; ++i) {
    if (text[i] == '\n') {
      const unsigned char prev = static_cast<unsigned char>(text[i - 1]);
      if (prev < 0x80 && prev > 0x20 && prev != 0x7F) return i;
    }
  }
  return limit;
}

}  // namespace lmf::tokenizer
