// JSON reading and writing helpers (see json.h). A recursive-descent parser over RFC 8259's grammar.
#include "base/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace lmf {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    JsonValue value;
    if (!ParseValue(&value, 0)) return Error();
    SkipSpace();
    if (pos_ != text_.size()) {
      error_ = "trailing characters after the JSON value";
      return Error();
    }
    return value;
  }

 private:
  // "JSON at byte 7: ..."; past the first line also its line and column (1-based), for files people read.
  absl::Status Error() const {
    const size_t at = std::min(pos_, text_.size());
    const size_t line_start = text_.rfind('\n', at == 0 ? 0 : at - 1);
    const std::string where =
        line_start == std::string_view::npos || at == 0
            ? ""
            : absl::StrCat(" (line ", std::count(text_.begin(), text_.begin() + at, '\n') + 1, ", column ",
                           at - line_start, ")");
    return absl::InvalidArgumentError(absl::StrCat("JSON at byte ", pos_, where, ": ", error_));
  }
  bool Fail(const std::string& why) {
    error_ = why;
    return false;
  }
  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool Consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool ParseValue(JsonValue* out, int depth) {
    if (depth > kMaxDepth) return Fail("nested too deeply");
    SkipSpace();
    if (pos_ >= text_.size()) return Fail("unexpected end of input");
    const char c = text_[pos_];
    if (c == '{') return ParseObject(out, depth);
    if (c == '[') return ParseArray(out, depth);
    if (c == '"') {
      out->kind = JsonValue::Kind::kString;
      return ParseString(&out->text);
    }
    if (Consume("true")) {
      out->kind = JsonValue::Kind::kBool;
      out->boolean = true;
      return true;
    }
    if (Consume("false")) {
      out->kind = JsonValue::Kind::kBool;
      return true;
    }
    if (Consume("null")) return true;
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(out);
    return Fail(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  bool ParseNumber(JsonValue* out) {
    const size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ > from;
    };
    if (!digits()) return Fail("a number needs digits");
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (!digits()) return Fail("a fraction needs digits");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digits()) return Fail("an exponent needs digits");
    }
    out->kind = JsonValue::Kind::kNumber;
    out->text = std::string(text_.substr(start, pos_ - start));
    return true;
  }

  static int HexDigit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  bool ParseHex4(uint32_t* out) {
    if (pos_ + 4 > text_.size()) return Fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const int d = HexDigit(text_[pos_ + i]);
      if (d < 0) return Fail("bad \\u escape");
      v = v * 16 + d;
    }
    pos_ += 4;
    *out = v;
    return true;
  }

  bool ParseString(std::string* out) {
    ++pos_;  // opening quote
    out->clear();
    while (true) {
      // Append the run of bytes that need no decoding in one go.
      size_t run_end = pos_;
      while (run_end < text_.size() && text_[run_end] != '"' && text_[run_end] != '\\' &&
             static_cast<unsigned char>(text_[run_end]) >= 0x20) {
        ++run_end;
      }
      out->append(text_.data() + pos_, run_end - pos_);
      pos_ = run_end;
      if (pos_ >= text_.size()) return Fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (c != '\\') return Fail("control character in string");
      if (pos_ >= text_.size()) return Fail("unterminated escape");
      const char e = text_[pos_++];
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
          if (!ParseHex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t low;
            if (!Consume("\\u") || !ParseHex4(&low) || low < 0xDC00 || low >= 0xE000) {
              return Fail("unpaired surrogate in \\u escape");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return Fail("unpaired surrogate in \\u escape");  // a low surrogate with no high one before it
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Fail(absl::StrCat("bad escape '\\", std::string(1, e), "'"));
      }
    }
  }

  bool ParseArray(JsonValue* out, int depth) {
    ++pos_;
    out->kind = JsonValue::Kind::kArray;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      out->array.emplace_back();
      if (!ParseValue(&out->array.back(), depth + 1)) return false;
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return true;
      }
      return Fail("expected ',' or ']' in array");
    }
  }

  bool ParseObject(JsonValue* out, int depth) {
    ++pos_;
    out->kind = JsonValue::Kind::kObject;
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return true;
    }
    std::vector<size_t> key_ends;  // where each member's key ends, for the duplicate-key error
    while (true) {
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"') return Fail("expected a string key in object");
      std::string key;
      if (!ParseString(&key)) return false;
      key_ends.push_back(pos_);
      SkipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':') return Fail("expected ':' after object key");
      ++pos_;
      out->object.emplace_back(std::move(key), JsonValue());
      if (!ParseValue(&out->object.back().second, depth + 1)) return false;
      SkipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return CheckUniqueKeys(*out, key_ends);
      }
      return Fail("expected ',' or '}' in object");
    }
  }

  // Fails at the end of the first key (in file order) that repeats an earlier one. Small objects (safetensors
  // tensor entries) compare pairwise; large ones (vocab.json's ~50k members) go through a hash set of views
  // into the finished member list, sized once.
  bool CheckUniqueKeys(const JsonValue& object, const std::vector<size_t>& key_ends) {
    constexpr size_t kMaxPairwise = 8;
    const auto& members = object.object;
    auto duplicate = [&](size_t i) {
      pos_ = key_ends[i];
      return Fail(absl::StrCat("duplicate key \"", members[i].first, "\""));
    };
    if (members.size() <= kMaxPairwise) {
      for (size_t i = 1; i < members.size(); ++i) {
        for (size_t j = 0; j < i; ++j) {
          if (members[i].first == members[j].first) return duplicate(i);
        }
      }
      return true;
    }
    absl::flat_hash_set<std::string_view> keys;
    keys.reserve(members.size());
    for (size_t i = 0; i < members.size(); ++i) {
      if (!keys.insert(members[i].first).second) return duplicate(i);
    }
    return true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

const JsonValue* JsonValue::Find(std::string_view key) const {
  for (const auto& [k, v] : object) {
    if (k == key) return &v;
  }
  return nullptr;
}

bool JsonValue::AsInt64(int64_t* out) const {
  return kind == Kind::kNumber && absl::SimpleAtoi(text, out);
}

bool JsonValue::AsUint64(uint64_t* out) const {
  return kind == Kind::kNumber && absl::SimpleAtoi(text, out);
}

bool JsonValue::AsDouble(double* out) const { return kind == Kind::kNumber && absl::SimpleAtod(text, out); }

absl::StatusOr<JsonValue> ParseJson(std::string_view text) { return Parser(text).ParseDocument(); }

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

std::string JsonQuote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string JsonNumber(double value) {
  if (!std::isfinite(value)) return "null";
  // 17 significant digits always round-trip; try shorter first for readable files.
  char buf[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

}  // namespace lmf
