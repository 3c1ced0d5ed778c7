// A small RFC 4180 CSV reader for the scaling tables (results written by sweeps, training curves, the
// published reference tables): quoted fields with "" escapes and embedded newlines, CRLF or LF line ends,
// a header row. Every error names the file, the line and the column, so a hand-edited table is easy to fix.
#ifndef LMFORGE_SCALING_CSV_H_
#define LMFORGE_SCALING_CSV_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace lmf::scaling {

struct CsvRow {
  int line = 0;  // 1-based line where the row starts
  std::vector<std::string> fields;
};

struct CsvTable {
  std::string path;  // for messages
  std::vector<std::string> header;
  std::vector<CsvRow> rows;

  // Index of the column called `name`, or -1.
  int Column(std::string_view name) const;
  // Index of `name`, or an error naming the file and the columns it does have.
  absl::StatusOr<int> RequireColumn(std::string_view name) const;
  // The indices of all of `names`, in order, or RequireColumn's error for the first one missing.
  absl::StatusOr<std::vector<int>> RequireColumns(const std::vector<std::string_view>& names) const;
  // "path:line:column (name)" for messages about one cell.
  std::string Where(const CsvRow& row, int column) const;
  // The cell parsed as a finite or infinite double ("nan" and "" are errors unless allow_empty, where ""
  // gives NaN).
  absl::StatusOr<double> Double(const CsvRow& row, int column, bool allow_empty = false) const;
  // The cell parsed as a finite number > 0 (an error naming the cell otherwise).
  absl::StatusOr<double> PositiveDouble(const CsvRow& row, int column) const;
  // The cell parsed as a whole number (a value like "1e3" or "64.0" is accepted when it is integral).
  absl::StatusOr<int64_t> Integer(const CsvRow& row, int column) const;
};

// Parses `text`; `path` is only used in messages. Fails on an unterminated quote, a stray quote inside an
// unquoted field, a row whose field count differs from the header's, an empty or duplicate header name, or
// an empty file. Blank lines are skipped.
absl::StatusOr<CsvTable> ParseCsv(std::string_view text, const std::string& path);
absl::StatusOr<CsvTable> ReadCsv(const std::string& path);

// The field quoted when it needs to be (comma, quote, CR or LF inside).
std::string CsvField(std::string_view field);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_CSV_H_
