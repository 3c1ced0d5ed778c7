// Reading and writing the project's tokenizer file (format in tokenizer_file.h).
#include "tokenizer/tokenizer_file.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file.h"

namespace lmf::tokenizer {
namespace {

// Reads the file line by line and turns every problem into an error naming the file and line.
class LineReader {
 public:
  LineReader(std::string_view data, const std::string& name) : data_(data), name_(name) {}

  bool Next(std::string_view* line) {
    if (pos_ >= data_.size()) return false;
    const size_t end = data_.find('\n', pos_);
    if (end == std::string_view::npos) {
      *line = data_.substr(pos_);
      pos_ = data_.size();
    } else {
      *line = data_.substr(pos_, end - pos_);
      pos_ = end + 1;
    }
    ++line_number_;
    return true;
  }
  bool AtEnd() const { return pos_ >= data_.size(); }

  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(name_, ":", line_number_, ": corrupt tokenizer file: ", what));
  }

  // A line "<keyword> <count>".
  absl::StatusOr<uint64_t> Header(const std::string& keyword) {
    std::string_view line;
    if (!Next(&line)) return Error(absl::StrCat("ends where \"", keyword, " <count>\" was expected"));
    const std::string prefix = keyword + " ";
    if (line.substr(0, prefix.size()) != prefix) {
      return Error(absl::StrCat("expected \"", keyword, " <count>\", found \"", std::string(line.substr(0, 40)), "\""));
    }
    uint64_t value;
    if (!ParseUint(line.substr(prefix.size()), &value)) return Error(absl::StrCat("bad ", keyword, " count"));
    return value;
  }

  static bool ParseUint(std::string_view s, uint64_t* out) {
    if (s.empty() || s.size() > 19) return false;
    uint64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    *out = v;
    return true;
  }

 private:
  std::string_view data_;
  const std::string& name_;
  size_t pos_ = 0;
  int64_t line_number_ = 0;
};

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

absl::StatusOr<Tokenizer> ParseTokenizer(std::string_view data, const std::string& name) {
  LineReader reader(data, name);
  std::string_view line;
  if (!reader.Next(&line) || line.substr(0, 18) != "lmforge-tokenizer ") {
    return reader.Error("does not start with \"lmforge-tokenizer <version>\" (not a tokenizer file?)");
  }
  if (!line.empty() && line.back() == '\r') {
    // An editor or a Windows checkout turned the line ends into CRLF. The file's exact bytes are what token
    // files record the hash of, so it is refused rather than read as if it were the LF original.
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": tokenizer file has Windows (CRLF) line ends; lmforge tokenizer files end their lines with LF "
              "alone (token files record the hash of these exact bytes). Convert it back, e.g. with "
              "`sed -i 's/\\r$//' ", name, "` or dos2unix"));
  }
  uint64_t version;
  if (!LineReader::ParseUint(line.substr(18), &version)) return reader.Error("bad format version");
  if (version != kTokenizerFormatVersion) {
    return reader.Error(absl::StrCat("format version ", version, " is not supported (this build reads version ",
                                     kTokenizerFormatVersion, ")"));
  }
  // Counts are bounded by the file size (each entry takes at least two bytes), so a corrupt count cannot
  // make us reserve absurd memory.
  auto vocab_size = reader.Header("vocab");
  if (!vocab_size.ok()) return vocab_size.status();
  if (*vocab_size > data.size() / 2) return reader.Error("vocab count larger than the file can hold");
  std::vector<std::string> vocab(*vocab_size);
  for (uint64_t id = 0; id < *vocab_size; ++id) {
    if (!reader.Next(&line)) return reader.Error(absl::StrCat("ends inside the vocab (token ", id, ")"));
    if (line.empty() || line.size() % 2 != 0) return reader.Error(absl::StrCat("token ", id, ": expected hex bytes"));
    std::string& bytes = vocab[id];
    bytes.resize(line.size() / 2);
    for (size_t i = 0; i < bytes.size(); ++i) {
      const int hi = HexDigit(line[2 * i]), lo = HexDigit(line[2 * i + 1]);
      if (hi < 0 || lo < 0) return reader.Error(absl::StrCat("token ", id, ": expected lowercase hex bytes"));
      bytes[i] = static_cast<char>(hi * 16 + lo);
    }
  }
  auto num_merges = reader.Header("merges");
  if (!num_merges.ok()) return num_merges.status();
  if (*num_merges > data.size() / 2) return reader.Error("merge count larger than the file can hold");
  std::vector<std::pair<uint32_t, uint32_t>> merges(*num_merges);
  for (uint64_t r = 0; r < *num_merges; ++r) {
    if (!reader.Next(&line)) return reader.Error(absl::StrCat("ends inside the merges (merge ", r, ")"));
    const size_t space = line.find(' ');
    uint64_t a, b;
    if (space == std::string_view::npos || !LineReader::ParseUint(line.substr(0, space), &a) ||
        !LineReader::ParseUint(line.substr(space + 1), &b) || a > UINT32_MAX || b > UINT32_MAX) {
      return reader.Error(absl::StrCat("merge ", r, ": expected \"<left id> <right id>\""));
    }
    merges[r] = {static_cast<uint32_t>(a), static_cast<uint32_t>(b)};
  }
  auto num_specials = reader.Header("specials");
  if (!num_specials.ok()) return num_specials.status();
  if (*num_specials > data.size() / 2) return reader.Error("special count larger than the file can hold");
  std::vector<uint32_t> specials(*num_specials);
  for (uint64_t k = 0; k < *num_specials; ++k) {
    uint64_t id;
    if (!reader.Next(&line)) return reader.Error(absl::StrCat("ends inside the specials (special ", k, ")"));
    if (!LineReader::ParseUint(line, &id) || id > UINT32_MAX) {
      return reader.Error(absl::StrCat("special ", k, ": expected a token id"));
    }
    specials[k] = static_cast<uint32_t>(id);
  }
  if (!reader.AtEnd()) return reader.Error("unexpected content after the specials");
  auto tokenizer = Tokenizer::Create(std::move(vocab), std::move(merges), std::move(specials));
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": corrupt tokenizer file: ", std::string(tokenizer.status().message())));
  }
  return tokenizer;
}

absl::StatusOr<Tokenizer> LoadTokenizer(const std::string& path) {
  auto data = ReadFile(path);
  if (!data.ok()) return data.status();
  return ParseTokenizer(*data, path);
}

absl::Status SaveTokenizer(const Tokenizer& tokenizer, const std::string& path) {
  return WriteFileAtomically(path, tokenizer.Serialize());
}

}  // namespace lmf::tokenizer
