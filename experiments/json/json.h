// A small JSON reader and the escaping JSON writers need: enough for safetensors headers (objects of
// strings, integer arrays and a string map), metrics.jsonl lines, and tests that read them back. Numbers
// keep their text so integers up to 2^64 and doubles both come back exactly.
#ifndef LMFORGE_EXPERIMENTS_JSON_JSON_H_
#define LMFORGE_EXPERIMENTS_JSON_JSON_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace lmf::experiments {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;  // the number's literal text, or the decoded string
  std::vector<JsonValue> array;
  // Object members in file order (safetensors headers may carry duplicate-free keys in any order).
  std::vector<std::pair<std::string, JsonValue>> object;

  const JsonValue* Find(std::string_view key) const;  // object member, or nullptr
  bool AsInt64(int64_t* out) const;                    // integral number that fits
  bool AsUint64(uint64_t* out) const;
  bool AsDouble(double* out) const;
};

// Parses exactly one JSON value (surrounding whitespace allowed). Errors give the byte offset.
absl::StatusOr<JsonValue> ParseJson(std::string_view text);

// `s` as a JSON string literal, quotes included (control characters, quote and backslash escaped; other
// bytes, UTF-8 included, are kept).
std::string JsonQuote(std::string_view s);

// A finite double as the shortest JSON number that reads back to the same double; NaN and infinities,
// which JSON lacks, as null.
std::string JsonNumber(double value);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_JSON_JSON_H_
