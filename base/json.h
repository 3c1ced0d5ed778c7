// A small JSON reader and the escaping JSON writers need, shared by the experiments (safetensors headers:
// objects of strings, integer arrays and a string map; metrics.jsonl lines) and the tokenizer (GPT-2's
// vocab.json: one object of ~50k string -> id members). Numbers keep their text so integers up to 2^64 and
// doubles both come back exactly. Strings come back as UTF-8, \u escapes (surrogate pairs included) decoded.
#ifndef LMFORGE_BASE_JSON_H_
#define LMFORGE_BASE_JSON_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace lmf {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // the number's literal text, or the decoded string
  std::vector<JsonValue> array;
  // Object members in file order (safetensors headers may carry duplicate-free keys in any order).
  std::vector<std::pair<std::string, JsonValue>> object;

  // Object member, or nullptr. A linear scan: iterate `object` instead when reading every member of a
  // large object.
  const JsonValue* Find(std::string_view key) const;
  bool AsInt64(int64_t* out) const;                    // integral number that fits
  bool AsUint64(uint64_t* out) const;
  bool AsDouble(double* out) const;
};

// Parses exactly one JSON value (surrounding whitespace allowed). Errors give the byte offset (past the first
// line also the line and column: "JSON at byte 40 (line 3, column 5): ...") and what was expected there.
// Duplicate object keys and unpaired surrogates in \u escapes are errors.
absl::StatusOr<JsonValue> ParseJson(std::string_view text);

// `s` as a JSON string literal, quotes included (control characters, quote and backslash escaped; other
// bytes, UTF-8 included, are kept).
std::string JsonQuote(std::string_view s);

// Appends the UTF-8 encoding of the code point `cp` (at most 0x10FFFF) to `out`.
void AppendUtf8(uint32_t cp, std::string* out);

// A finite double as the shortest JSON number that reads back to the same double; NaN and infinities,
// which JSON lacks, as null.
std::string JsonNumber(double value);

}  // namespace lmf

#endif  // LMFORGE_BASE_JSON_H_
