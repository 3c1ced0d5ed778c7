// Import and export of GPT-2's published tokenizer files: vocab.json (a JSON object from token string to
// id) and merges.txt (one merge "left right" per line, in rank order, an optional "#version" first line).
// Token strings use GPT-2's bytes-to-unicode mapping, which maps each byte to a printable character
// (space -> 'Ġ', newline -> 'Ċ', ...) so that tokens contain no whitespace or control characters.
#ifndef LMFORGE_TOKENIZER_GPT2_FORMAT_H_
#define LMFORGE_TOKENIZER_GPT2_FORMAT_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace lmf::tokenizer {

// The UTF-8 of the character GPT-2 maps byte b to.
std::string Gpt2CharOfByte(unsigned char b);
// The GPT-2 string of a byte string, and back (error when a character is not in the mapping).
std::string BytesToGpt2String(std::string_view bytes);
absl::StatusOr<std::string> Gpt2StringToBytes(std::string_view text);

// Builds a Tokenizer from GPT-2 vocab.json and merges.txt contents. Vocab entries whose strings are in
// `specials` (e.g. "<|endoftext|>") are special tokens; a special not in the vocab is an error.
// `vocab_name` and `merges_name` prefix error messages.
absl::StatusOr<Tokenizer> ParseGpt2(std::string_view vocab_json, std::string_view merges_txt,
                                    const std::vector<std::string>& specials, const std::string& vocab_name,
                                    const std::string& merges_name);
absl::StatusOr<Tokenizer> LoadGpt2(const std::string& vocab_json_path, const std::string& merges_txt_path,
                                   const std::vector<std::string>& specials);

// vocab.json and merges.txt contents for a tokenizer (merges.txt with a "#version: 0.2" first line).
std::string Gpt2VocabJson(const Tokenizer& tokenizer);
std::string Gpt2MergesTxt(const Tokenizer& tokenizer);
absl::Status SaveGpt2(const Tokenizer& tokenizer, const std::string& vocab_json_path,
                      const std::string& merges_txt_path);

}  // namespace lmf::tokenizer

#endif  // LMFORGE_TOKENIZER_GPT2_FORMAT_H_
