// GPT-2 vocab.json / merges.txt: the bytes-to-unicode table, reading the vocab's JSON object (through
// base/json, which decodes string escapes including surrogate pairs), the merges parser, and the writers.
#include "tokenizer/gpt2_format.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "base/json.h"

namespace lmf::tokenizer {
namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 to U+0100.. in order.
const std::array<uint32_t, 256>& ByteToCodePoint() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

// Decodes one UTF-8 code point at s[*i], advancing *i; false on invalid UTF-8.
bool NextCodePoint(std::string_view s, size_t* i, uint32_t* cp) {
  const auto c = static_cast<unsigned char>(s[*i]);
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || *i + len > s.size()) return false;
  uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < len; ++k) {
    const auto d = static_cast<unsigned char>(s[*i + k]);
    if ((d & 0xC0) != 0x80) return false;
    v = (v << 6) | (d & 0x3F);
  }
  *i += len;
  *cp = v;
  return true;
}

// How an error names a JSON value that should have been an id.
std::string DescribeJsonValue(const JsonValue& value) {
  switch (value.kind) {
    case JsonValue::Kind::kNull:
      return "null";
    case JsonValue::Kind::kBool:
      return value.boolean ? "true" : "false";
    case JsonValue::Kind::kNumber:
      return value.text;
    case JsonValue::Kind::kString:
      return absl::StrCat("the string ", JsonQuote(value.text));
    case JsonValue::Kind::kArray:
      return "an array";
    case JsonValue::Kind::kObject:
      return "an object";
  }
  return "an unknown value";
}

// The members of vocab.json, a JSON object of GPT-2 token string -> id, in file order. Errors name the file
// and say what was expected (and, for JSON syntax, at which byte).
absl::Status ReadVocabJson(std::string_view text, const std::string& name,
                           std::vector<std::pair<std::string, uint64_t>>* entries) {
  const std::string context = absl::StrCat(name, ": bad GPT-2 vocab.json: ");
  absl::StatusOr<JsonValue> json = ParseJson(text);
  if (!json.ok()) return absl::InvalidArgumentError(absl::StrCat(context, json.status().message()));
  if (json->kind != JsonValue::Kind::kObject) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, "expected a JSON object of token string -> id, found ", DescribeJsonValue(*json)));
  }
  entries->reserve(json->object.size());
  for (auto& [key, value] : json->object) {
    uint64_t id;
    if (!value.AsUint64(&id)) {
      return absl::InvalidArgumentError(absl::StrCat(context, "token ", JsonQuote(key),
                                                     ": expected a non-negative integer id, found ",
                                                     DescribeJsonValue(value)));
    }
    entries->emplace_back(std::move(key), id);
  }
  return absl::OkStatus();
}

// A line of merges.txt for an error message: its first 80 bytes, with control characters, bytes that are not
// UTF-8 and the invisible U+FEFF (a BOM) escaped, and GPT-2's own characters (Ġ, Ċ, ...) as they are (a file
// with CR-only line endings is one 450 KB "line"; a BOM's raw bytes reached the terminal).
std::string Excerpt(std::string_view line) {
  constexpr size_t kMax = 80;
  const std::string_view head = line.substr(0, kMax);
  std::string out;
  for (size_t i = 0; i < head.size();) {
    const size_t start = i;
    uint32_t cp = 0;
    if (!NextCodePoint(head, &i, &cp)) {
      absl::StrAppendFormat(&out, "\\x%02x", static_cast<unsigned char>(head[start]));
      i = start + 1;
    } else if (cp < 0x20 || cp == 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02x", cp);
    } else if (cp == 0xFEFF) {
      out += "\\ufeff";
    } else {
      out.append(head.substr(start, i - start));
    }
  }
  if (line.size() > kMax) absl::StrAppend(&out, "... (", line.size(), " bytes)");
  return out;
}

}  // namespace

std::string Gpt2CharOfByte(unsigned char b) {
  std::string out;
  AppendUtf8(ByteToCodePoint()[b], &out);
  return out;
}

std::string BytesToGpt2String(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) AppendUtf8(ByteToCodePoint()[b], &out);
  return out;
}

absl::StatusOr<std::string> Gpt2StringToBytes(std::string_view text) {
  static const absl::flat_hash_map<uint32_t, unsigned char> inverse = [] {
    absl::flat_hash_map<uint32_t, unsigned char> m;
    for (int b = 0; b < 256; ++b) m[ByteToCodePoint()[b]] = static_cast<unsigned char>(b);
    return m;
  }();
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp;
    if (!NextCodePoint(text, &i, &cp)) return absl::InvalidArgumentError("invalid UTF-8 in a GPT-2 token string");
    auto it = inverse.find(cp);
    if (it == inverse.end()) {
      return absl::InvalidArgumentError(absl::StrCat("character U+", absl::Hex(cp, absl::kZeroPad4),
                                                     " is not in GPT-2's bytes-to-unicode mapping"));
    }
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

absl::StatusOr<Tokenizer> ParseGpt2(std::string_view vocab_json, std::string_view merges_txt,
                                    const std::vector<std::string>& specials, const std::string& vocab_name,
                                    const std::string& merges_name) {
  std::vector<std::pair<std::string, uint64_t>> entries;
  if (absl::Status s = ReadVocabJson(vocab_json, vocab_name, &entries); !s.ok()) return s;
  std::vector<std::string> vocab(entries.size());
  std::vector<bool> seen(entries.size(), false);
  std::vector<uint32_t> special_ids;
  absl::flat_hash_map<std::string, uint32_t> gpt2_to_id;
  gpt2_to_id.reserve(entries.size());
  for (auto& [key, id] : entries) {
    if (id >= entries.size() || seen[id]) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_name, ": ids must be 0..", entries.size() - 1,
                                                     " each used once; \"", key, "\" has id ", id));
    }
    seen[id] = true;
    bool is_special = false;
    for (const std::string& sp : specials) is_special |= (sp == key);
    if (is_special) {
      vocab[id] = key;  // specials are stored as their text, not through the byte mapping
      special_ids.push_back(static_cast<uint32_t>(id));
    } else {
      auto bytes = Gpt2StringToBytes(key);
      if (!bytes.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(vocab_name, ": token \"", key, "\" (id ", id, "): ",
                                                       std::string(bytes.status().message())));
      }
      vocab[id] = std::move(*bytes);
    }
    gpt2_to_id[key] = static_cast<uint32_t>(id);
  }
  for (const std::string& sp : specials) {
    if (!gpt2_to_id.contains(sp)) {
      return absl::InvalidArgumentError(absl::StrCat(vocab_name, ": special token \"", sp, "\" is not in the vocab"));
    }
  }
  std::vector<std::pair<uint32_t, uint32_t>> merges;
  size_t pos = 0;
  int64_t line_number = 0;
  while (pos < merges_txt.size()) {
    size_t end = merges_txt.find('\n', pos);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.substr(0, 8) == "#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          merges_name, ":", line_number, ": expected \"<left> <right>\", found \"", Excerpt(line), "\""));
    }
    const std::string left(line.substr(0, space)), right(line.substr(space + 1));
    auto a = gpt2_to_id.find(left), b = gpt2_to_id.find(right);
    if (a == gpt2_to_id.end() || b == gpt2_to_id.end()) {
      return absl::InvalidArgumentError(absl::StrCat(merges_name, ":", line_number, ": merge \"",
                                                     Excerpt(line), "\" names a token that is not in ",
                                                     vocab_name));
    }
    merges.emplace_back(a->second, b->second);
  }
  auto tokenizer = Tokenizer::Create(std::move(vocab), std::move(merges), std::move(special_ids));
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(vocab_name, " + ", merges_name, ": ",
                                                   std::string(tokenizer.status().message())));
  }
  return tokenizer;
}

absl::StatusOr<Tokenizer> LoadGpt2(const std::string& vocab_json_path, const std::string& merges_txt_path,
                                   const std::vector<std::string>& specials) {
  auto vocab = ReadFile(vocab_json_path);
  if (!vocab.ok()) return vocab.status();
  auto merges = ReadFile(merges_txt_path);
  if (!merges.ok()) return merges.status();
  return ParseGpt2(*vocab, *merges, specials, vocab_json_path, merges_txt_path);
}

std::string Gpt2VocabJson(const Tokenizer& tokenizer) {
  std::vector<bool> is_special(tokenizer.vocab_size(), false);
  for (uint32_t id : tokenizer.special_ids()) is_special[id] = true;
  std::string out = "{";
  for (uint32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string& bytes = tokenizer.vocab()[id];
    absl::StrAppend(&out, id == 0 ? "" : ", ", JsonQuote(is_special[id] ? bytes : BytesToGpt2String(bytes)), ": ", id);
  }
  out += "}";
  return out;
}

std::string Gpt2MergesTxt(const Tokenizer& tokenizer) {
  std::string out = "#version: 0.2\n";
  for (const auto& [a, b] : tokenizer.merges()) {
    absl::StrAppend(&out, BytesToGpt2String(tokenizer.vocab()[a]), " ", BytesToGpt2String(tokenizer.vocab()[b]), "\n");
  }
  return out;
}

absl::Status SaveGpt2(const Tokenizer& tokenizer, const std::string& vocab_json_path,
                      const std::string& merges_txt_path) {
  if (absl::Status s = WriteFileAtomically(vocab_json_path, Gpt2VocabJson(tokenizer)); !s.ok()) return s;
  return WriteFileAtomically(merges_txt_path, Gpt2MergesTxt(tokenizer));
}

}  // namespace lmf::tokenizer
