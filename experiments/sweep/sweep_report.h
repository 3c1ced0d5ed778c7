// The report that ends a sweep: scaling-law fits of its results table (scaling/reporting), written to
// <output_dir>/report/report.md, with a recipe whose model shape comes from the sweep's own model family
// and whose parameter count is the exact one of that shape (model/accounting), not a 12 L d^2 estimate.
#ifndef LMFORGE_EXPERIMENTS_SWEEP_SWEEP_REPORT_H_
#define LMFORGE_EXPERIMENTS_SWEEP_SWEEP_REPORT_H_

#include <string>

#include "absl/status/statusor.h"
#include "experiments/sweep/plan.h"
#include "scaling/reporting/analysis.h"

namespace lmf::sweep {

// Batch size and learning rate extrapolated from the best runs (scaling::RecipeFromBestRuns); the shape
// is the family member (depth up to 4x the sweep's deepest) whose exact parameter count is closest to the
// recommended N. Without a family (grid sweeps) the hook is empty and the report uses its default.
scaling::RecipeHook FamilyRecipe(const SweepPlan& plan, const ModelSizer& sizer);

// Writes the report of a finished sweep into <output_dir>/report; `data_note` is one line about the data.
// When no report can be made (e.g. no run finished), the folder's earlier report is removed and the error
// says so: a report never describes other results than the sweep's current ones.
absl::StatusOr<scaling::ScalingAnalysis> WriteSweepReport(const SweepPlan& plan,
                                                          const std::string& results_csv,
                                                          const std::string& data_note,
                                                          const ModelSizer& sizer);

}  // namespace lmf::sweep

#endif  // LMFORGE_EXPERIMENTS_SWEEP_SWEEP_REPORT_H_
