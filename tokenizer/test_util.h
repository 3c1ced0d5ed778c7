// Helpers shared by the tokenizer tests: temp paths, reading committed id files, hex decoding, and a
// small hand-made tokenizer.
#ifndef LMFORGE_TOKENIZER_TEST_UTIL_H_
#define LMFORGE_TOKENIZER_TEST_UTIL_H_

#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lmf::tokenizer::testing {

inline std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name + "." + std::to_string(::getpid());
}

// Ids separated by spaces, commas or newlines.
inline std::vector<uint32_t> ParseIds(const std::string& text) {
  std::vector<uint32_t> ids;
  std::string token;
  for (char c : text + " ") {
    if (c >= '0' && c <= '9') {
      token.push_back(c);
    } else if (!token.empty()) {
      ids.push_back(static_cast<uint32_t>(std::stoul(token)));
      token.clear();
    }
  }
  return ids;
}

inline std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// 256 byte tokens (id = byte), then the given merges (as byte strings, in rank order), then specials.
inline Tokenizer MakeTokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                               const std::vector<std::string>& specials) {
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  auto id_of = [&](const std::string& s) {
    for (size_t i = 0; i < vocab.size(); ++i) {
      if (vocab[i] == s) return static_cast<uint32_t>(i);
    }
    std::abort();
  };
  std::vector<std::pair<uint32_t, uint32_t>> merge_ids;
  for (const auto& [a, b] : merges) {
    merge_ids.emplace_back(id_of(a), id_of(b));
    vocab.push_back(a + b);
  }
  std::vector<uint32_t> special_ids;
  for (const std::string& s : specials) {
    special_ids.push_back(static_cast<uint32_t>(vocab.size()));
    vocab.push_back(s);
  }
  auto t = Tokenizer::Create(vocab, merge_ids, special_ids);
  if (!t.ok()) std::abort();
  return *std::move(t);
}

}  // namespace lmf::tokenizer::testing

#endif  // LMFORGE_TOKENIZER_TEST_UTIL_H_
