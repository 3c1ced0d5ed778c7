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

// Replaces the folder `out_dir` (made with its parents if missing) by one holding this report, as a whole:
// the report is written into the sibling folder .<name>.report-new, which then takes the old folder's place
// (the old one is renamed to .<name>.report-old, the new one renamed in, the old one deleted). A run that
// fails or is killed leaves the previous complete report as it was (a kill between the two renames leaves
// it in .report-old, and the next WriteReport puts it back first), and the folder never mixes two analyses'
// files. Plain files in `out_dir` that are not the report's (ReportFileNames) are kept: hard-linked into
// the new folder. Anything else there (a folder, a symbolic link) makes it refuse, changing nothing.
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
