// The project's tokenizer file: the canonical serialization of a Tokenizer (Tokenizer::Serialize()), a
// small text format that diffs well and whose FNV-1a 64 is the hash token files record:
//
//   lmforge-tokenizer 1        format version
//   vocab <V>                  then V lines: the bytes of token id 0, 1, ... in lowercase hex
//   merges <M>                 then M lines "<left id> <right id>", in rank order
//   specials <K>               then K lines: the id of each special token
//
// Loading checks every line and reports the file, the line number and what was expected.
#ifndef LMFORGE_TOKENIZER_TOKENIZER_FILE_H_
#define LMFORGE_TOKENIZER_TOKENIZER_FILE_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace lmf::tokenizer {

// Parses the serialization; `name` (usually the path) prefixes error messages.
absl::StatusOr<Tokenizer> ParseTokenizer(std::string_view data, const std::string& name);

absl::StatusOr<Tokenizer> LoadTokenizer(const std::string& path);
// Writes tokenizer.Serialize() atomically.
absl::Status SaveTokenizer(const Tokenizer& tokenizer, const std::string& path);

}  // namespace lmf::tokenizer

#endif  // LMFORGE_TOKENIZER_TOKENIZER_FILE_H_
