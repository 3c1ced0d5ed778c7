// The scaling report: a Markdown file with SVG figures beside it, made from a results table. It states
// the recommended model size and tokens for a target budget (with bootstrap intervals), the fitted
// parameters of every approach, and a recipe (shape, batch, learning rate) where one can be given.
#ifndef LMFORGE_SCALING_REPORTING_REPORT_H_
#define LMFORGE_SCALING_REPORTING_REPORT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "scaling/reporting/analysis.h"

namespace lmf::scaling {

struct ReportFiles {
  // (file name relative to the output folder, contents); report.md first.
  std::vector<std::pair<std::string, std::string>> files;
};

// How the report prints a number: 4 significant digits, whole numbers from 1,000 to 99,999, and outside
// [1e-3, 1e5) a mantissa and a power of ten ("1.234e9"; 9.99996e8 is "1e9", not "10e8"); "n/a" when not
// finite.
std::string FormatNumber(double v);

// The Markdown and figures for an analysis.
ReportFiles RenderReport(const ScalingAnalysis& analysis);

// Every file name a report may have: report.md and its figures.
std::vector<std::string> ReportFileNames();

// Writes the report into `out_dir` (made with its parents if missing). Every file is first written in full
// under a temp name and flushed, so a run that fails while writing (a full disk) leaves the previous report
// as it was; the temp files a killed run left are removed.
// Then the earlier report.md and the earlier figures this report does not draw are deleted, the figures
// renamed into place and report.md last: the folder never holds a report.md beside figures of another
// analysis (a run killed among the renames leaves no report.md). Other files in `out_dir` are left alone.
absl::Status WriteReport(const ReportFiles& report, const std::string& out_dir);

// Deletes the report files (ReportFileNames) in `out_dir` that are there, and the folder if that leaves it
// empty: for a results table that no longer has a report (no finished run), so an earlier one does not
// stand for it.
absl::Status RemoveReport(const std::string& out_dir);

// Reads, analyses, renders and writes (WriteReport): what `//scaling:report` runs. When reading or
// analysing fails, nothing in `out_dir` changes.
absl::StatusOr<ScalingAnalysis> MakeReport(const std::string& results_path, const ReportOptions& options,
                                           const std::string& out_dir);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_REPORTING_REPORT_H_
