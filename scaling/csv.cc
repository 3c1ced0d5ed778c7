// RFC 4180 CSV parsing with file:line:column errors (see csv.h).
#include "scaling/csv.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"

namespace lmf::scaling {

int CsvTable::Column(std::string_view name) const {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return static_cast<int>(i);
  return -1;
}

absl::StatusOr<int> CsvTable::RequireColumn(std::string_view name) const {
  const int c = Column(name);
  if (c < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":1: missing column '", std::string(name), "'; the header has: ",
                                                   absl::StrJoin(header, ", ")));
  }
  return c;
}

absl::StatusOr<std::vector<int>> CsvTable::RequireColumns(const std::vector<std::string_view>& names) const {
  std::vector<int> columns;
  for (std::string_view name : names) {
    absl::StatusOr<int> c = RequireColumn(name);
    if (!c.ok()) return c.status();
    columns.push_back(*c);
  }
  return columns;
}

std::string CsvTable::Where(const CsvRow& row, int column) const {
  return absl::StrCat(path, ":", row.line, ":", column + 1, " (", header[column], ")");
}

absl::StatusOr<double> CsvTable::Double(const CsvRow& row, int column, bool allow_empty) const {
  const std::string& s = row.fields[column];
  if (s.empty()) {
    if (allow_empty) return NAN;
    return absl::InvalidArgumentError(absl::StrCat(Where(row, column), ": expected a number, got an empty cell"));
  }
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || errno == ERANGE || std::isnan(v)) {
    return absl::InvalidArgumentError(absl::StrCat(Where(row, column), ": expected a number, got '", s, "'"));
  }
  return v;
}

absl::StatusOr<double> CsvTable::PositiveDouble(const CsvRow& row, int column) const {
  absl::StatusOr<double> v = Double(row, column);
  if (!v.ok()) return v.status();
  if (!(*v > 0) || !std::isfinite(*v)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(row, column), ": expected a positive number, got '", row.fields[column], "'"));
  }
  return v;
}

absl::StatusOr<int64_t> CsvTable::Integer(const CsvRow& row, int column) const {
  absl::StatusOr<double> v = Double(row, column);
  if (!v.ok()) return v.status();
  if (!std::isfinite(*v) || *v != std::floor(*v) || std::fabs(*v) > 9e15) {
    return absl::InvalidArgumentError(
        absl::StrCat(Where(row, column), ": expected a whole number, got '", row.fields[column], "'"));
  }
  return static_cast<int64_t>(*v);
}

absl::StatusOr<CsvTable> ParseCsv(std::string_view text, const std::string& path) {
  CsvTable table;
  table.path = path;
  std::vector<std::vector<std::string>> records;
  std::vector<int> record_lines;
  size_t i = 0;
  int line = 1;
  while (i < text.size()) {
    // One record.
    std::vector<std::string> fields;
    const int start_line = line;
    bool record_done = false;
    while (!record_done) {
      std::string field;
      const int column = static_cast<int>(fields.size()) + 1;
      if (i < text.size() && text[i] == '"') {
        const int quote_line = line;
        ++i;
        bool closed = false;
        while (i < text.size()) {
          const char ch = text[i];
          if (ch == '"') {
            if (i + 1 < text.size() && text[i + 1] == '"') {
              field += '"';
              i += 2;
              continue;
            }
            ++i;
            closed = true;
            break;
          }
          if (ch == '\n') ++line;
          field += ch;
          ++i;
        }
        if (!closed) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ":", quote_line, ":", column, ": a quoted field is never closed"));
        }
        if (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
          return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ":", column,
                                                         ": unexpected text after a closing quote"));
        }
      } else {
        while (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
          if (text[i] == '"') {
            return absl::InvalidArgumentError(absl::StrCat(
                path, ":", line, ":", column, ": a quote inside an unquoted field (quote the whole field)"));
          }
          field += text[i++];
        }
      }
      fields.push_back(std::move(field));
      if (i >= text.size()) {
        record_done = true;
      } else if (text[i] == ',') {
        ++i;
      } else {  // end of line: \n, \r\n or a lone \r
        if (text[i] == '\r') ++i;
        if (i < text.size() && text[i] == '\n') ++i;
        ++line;
        record_done = true;
      }
    }
    const bool blank = fields.size() == 1 && fields[0].empty();
    if (!blank) {
      records.push_back(std::move(fields));
      record_lines.push_back(start_line);
    }
  }
  if (records.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": the file is empty (no header row)"));
  table.header = std::move(records[0]);
  for (size_t c = 0; c < table.header.size(); ++c) {
    if (table.header[c].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", record_lines[0], ":", c + 1, ": empty column name"));
    }
    for (size_t d = 0; d < c; ++d) {
      if (table.header[d] == table.header[c]) {
        return absl::InvalidArgumentError(absl::StrCat(path, ":", record_lines[0], ":", c + 1, ": column '",
                                                       table.header[c], "' appears twice"));
      }
    }
  }
  for (size_t r = 1; r < records.size(); ++r) {
    if (records[r].size() != table.header.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", record_lines[r], ": ", records[r].size(),
                                                     " fields, but the header has ", table.header.size()));
    }
    table.rows.push_back({record_lines[r], std::move(records[r])});
  }
  return table;
}

absl::StatusOr<CsvTable> ReadCsv(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseCsv(*text, path);
}

std::string CsvField(std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(field);
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

}  // namespace lmf::scaling
