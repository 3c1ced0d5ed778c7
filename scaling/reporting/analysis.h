// Everything the scaling report shows, computed once from a results table: Approach 1 (when runs have
// training curves), Approach 2 (when runs form IsoFLOP groups), Approach 3, the Kaplan single laws, the
// bootstrap intervals, and the recommended recipe at the target budget. An approach that cannot be fitted
// on this table records why instead of failing the whole analysis.
#ifndef LMFORGE_SCALING_REPORTING_ANALYSIS_H_
#define LMFORGE_SCALING_REPORTING_ANALYSIS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scaling/fit/bootstrap.h"
#include "scaling/fit/envelope.h"
#include "scaling/fit/hyperparameter.h"
#include "scaling/fit/isoflop.h"
#include "scaling/fit/parametric.h"
#include "scaling/fit/power_law.h"
#include "scaling/fit/uncertainty.h"
#include "scaling/reporting/noise_scale.h"
#include "scaling/reporting/width_transfer.h"
#include "scaling/results.h"

namespace lmf::scaling {

// A full training recipe for the target budget.
struct Recipe {
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t batch_size = 0;  // sequences per step
  double lr = 0;           // peak learning rate
  std::string basis;       // how the numbers were obtained, shown in the report
};

// Turns the recommended (N, D) at `flops` into a recipe. The trainer, which knows the model config and
// counts parameters exactly, can supply one; without it the report uses RecipeFromBestRuns.
// `choice` is the report's: which loss ranks the runs.
using RecipeHook = std::function<absl::StatusOr<Recipe>(
    double params, double tokens, double flops, const ResultsTable& table, const ObservationChoice& choice)>;

// The recipe columns (d_model, n_layers, n_heads, batch_size, lr) the table lacks.
std::vector<std::string> AbsentRecipeColumns(const ResultsTable& table);

// A recipe extrapolated from the sweep itself: the best finished run of each budget (lowest loss of the
// kind `choice` names, final or best validation loss, as the fits use) gives a
// (budget, batch size, learning rate, d_model / n_layers, head size) point; batch and learning rate follow
// power laws in compute fitted to those points (DeepSeek LLM's practice), the shape keeps the median
// aspect ratio and head size of those runs and is sized so 12 n_layers d_model^2 = params (the
// non-embedding count of a standard block). Needs 2 budgets, and the recipe columns (a published table
// without them gets FailedPrecondition naming the columns it lacks).
absl::StatusOr<Recipe> RecipeFromBestRuns(double params, double tokens, double flops,
                                          const ResultsTable& table, const ObservationChoice& choice);

struct ReportOptions {
  double target_flops = 0;
  ObservationChoice choice;
  BootstrapOptions bootstrap;       // resamples, seed, confidence
  ParametricFitOptions parametric;  // Approach 3 settings (grid of starts, Huber delta)
  HyperparameterFitOptions hyperparameters;  // batch/lr grids: fit window, flat-region tolerance
  std::string data_note;            // one line about the data (e.g. that the corpus is synthetic)
  RecipeHook recipe;                // empty: RecipeFromBestRuns
};

struct ScalingAnalysis {
  ReportOptions options;
  std::string results_path;
  std::string table_note;  // the columns the table lacked and what was derived; "" for a sweep's own table
  // Where a budget's model size has several runs (a batch x lr grid): that the N/D fits (observations,
  // curves) took each size's best run there, and how many they left out; else "".
  std::string selection_note;
  int runs = 0, finished = 0, failed = 0, diverged = 0;
  bool mixture_of_experts = false;  // some run is one: N is the total or active count (options.choice.active)
  Observations observations;

  std::optional<ParametricFit> parametric;
  std::optional<ParametricUncertainty> parametric_ci;
  std::string parametric_error;

  std::optional<IsoFlopFit> isoflop;
  std::optional<IsoFlopUncertainty> isoflop_ci;
  std::string isoflop_error;

  std::vector<TrainingCurve> curves;
  std::optional<EnvelopeFit> envelope;
  std::optional<EnvelopeUncertainty> envelope_ci;
  std::string envelope_error;

  std::optional<KaplanLaws> kaplan;
  std::string kaplan_error;

  // Batch size and learning rate laws, where the table has batch_size and lr columns and some budget's runs
  // form a grid (3 or more of each); else the reason. The grid of a budget is its runs at the model size
  // with the most runs there.
  std::vector<HyperparameterRun> hyperparameter_runs;
  std::optional<HyperparameterFit> hyperparameters;
  std::optional<HyperparameterUncertainty> hyperparameters_ci;
  std::string hyperparameters_error;

  // The gradient noise scale of the runs that logged it (noise_scale.h); empty with the reason when none did.
  std::vector<NoiseScaleCurve> noise_curves;
  std::string noise_error;

  // Loss against lr per width (width_transfer.h), where the table has such runs; else the reason.
  std::vector<WidthLrCurve> width_lr_curves;
  std::string width_lr_error;

  // Which approach the recommended N and D (and so the recipe) come from: "Approach 3" where it was fitted,
  // else "Approach 2" where that was, else "" (no recommendation).
  std::string recommended_by;
  std::optional<Recipe> recipe;
  std::string recipe_error;
};

// The fits the analysis has, in the report's order: "Approach 3", "Approach 2", "Approach 1", "Kaplan laws",
// "batch/lr laws".
std::vector<std::string> FittedApproaches(const ScalingAnalysis& analysis);

// Fails only on bad options, when the table lacks the column `options.choice` reads (ToObservations), or
// when it has no finished run.
absl::StatusOr<ScalingAnalysis> Analyze(const ResultsTable& table, const ReportOptions& options);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_REPORTING_ANALYSIS_H_
