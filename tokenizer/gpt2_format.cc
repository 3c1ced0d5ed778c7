// GPT-2 vocab.json / merges.txt: the bytes-to-unicode table, a parser for the flat JSON object of the
// vocab (string escapes including surrogate pairs), and the writers.
#include "tokenizer/gpt2_format.h"

#include <array>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"

namespace lmf::tokenizer {
namespace {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

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

// A parser for the one JSON shape vocab.json has: an object of string keys and non-negative integers.
class VocabJsonParser {
 public:
  VocabJsonParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  absl::Status Parse(std::vector<std::pair<std::string, uint64_t>>* entries) {
    SkipSpace();
    if (!Eat('{')) return Error("expected '{'");
    SkipSpace();
    if (Eat('}')) return Trailing();
    while (true) {
      std::string key;
      if (absl::Status st = String(&key); !st.ok()) return st;
      SkipSpace();
      if (!Eat(':')) return Error("expected ':' after a key");
      SkipSpace();
      uint64_t value = 0;
      size_t digits = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9' && digits < 10) {
        value = value * 10 + static_cast<uint64_t>(s_[pos_++] - '0');
        ++digits;
      }
      if (digits == 0) return Error("expected a non-negative integer id");
      entries->emplace_back(std::move(key), value);
      SkipSpace();
      if (Eat(',')) {
        SkipSpace();
        continue;
      }
      if (Eat('}')) return Trailing();
      return Error("expected ',' or '}'");
    }
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": bad GPT-2 vocab.json at byte ", pos_, ": ", what));
  }
  absl::Status Trailing() {
    SkipSpace();
    return pos_ == s_.size() ? absl::OkStatus() : Error("unexpected content after the object");
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool Eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Hex4(uint32_t* v) {
    if (pos_ + 4 > s_.size()) return false;
    *v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[pos_++];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return false;
      *v = *v * 16 + static_cast<uint32_t>(d);
    }
    return true;
  }
  absl::Status String(std::string* out) {
    if (!Eat('"')) return Error("expected a string key");
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return absl::OkStatus();
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return Error("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return Error("bad \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low;
            if (!Eat('\\') || !Eat('u') || !Hex4(&low) || low < 0xDC00 || low > 0xDFFF) {
              return Error("unpaired surrogate in \\u escape");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Error("unpaired surrogate in \\u escape");
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Error(absl::StrCat("unknown escape \\", std::string(1, e)));
      }
    }
  }

  std::string_view s_;
  const std::string& name_;
  size_t pos_ = 0;
};

std::string JsonString(std::string_view utf8) {
  std::string out = "\"";
  for (char c : utf8) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      static const char kDigits[] = "0123456789abcdef";
      out += "\\u00";
      out.push_back(kDigits[(c >> 4) & 15]);
      out.push_back(kDigits[c & 15]);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
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
  if (absl::Status s = VocabJsonParser(vocab_json, vocab_name).Parse(&entries); !s.ok()) return s;
  std::vector<std::string> vocab(entries.size());
  std::vector<bool> seen(entries.size(), false);
  std::vector<uint32_t> special_ids;
  absl::flat_hash_map<std::string, uint32_t> gpt2_to_id;
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
      return absl::InvalidArgumentError(
          absl::StrCat(merges_name, ":", line_number, ": expected \"<left> <right>\", found \"", std::string(line), "\""));
    }
    const std::string left(line.substr(0, space)), right(line.substr(space + 1));
    auto a = gpt2_to_id.find(left), b = gpt2_to_id.find(right);
    if (a == gpt2_to_id.end() || b == gpt2_to_id.end()) {
      return absl::InvalidArgumentError(absl::StrCat(merges_name, ":", line_number, ": merge \"", std::string(line),
                                                     "\" names a token that is not in ", vocab_name));
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
    absl::StrAppend(&out, id == 0 ? "" : ", ", JsonString(is_special[id] ? bytes : BytesToGpt2String(bytes)), ": ", id);
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
