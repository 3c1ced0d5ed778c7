// Batch size and learning rate as functions of compute, as DeepSeek LLM (2024, section 3.1) fits them:
// each compute budget's runs form a grid of batch sizes x learning rates; a quadratic surface in
// (ln batch, ln lr), fitted to the runs near the grid's minimum, gives that budget's optimal batch size and
// learning rate; power laws B_opt = k C^a and lr_opt = k' C^b are fitted across budgets in log-log. The
// runs within a tolerance of the best loss (DeepSeek: 0.25%) mark the flat region of near-optimal settings,
// reported beside the optimum.
#ifndef LMFORGE_SCALING_FIT_HYPERPARAMETER_H_
#define LMFORGE_SCALING_FIT_HYPERPARAMETER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scaling/fit/power_law.h"

namespace lmf::scaling {

// One finished training run of a batch x learning-rate grid.
struct HyperparameterRun {
  double budget = 0;      // compute budget the run belongs to (FLOP), > 0
  double batch_size = 0;  // in whatever unit the sweep uses (sequences or tokens), > 0
  double lr = 0;          // peak learning rate, > 0
  double loss = 0;
};

struct HyperparameterFitOptions {
  // Runs whose loss is within this fraction of the budget's best are fitted (a quadratic holds only near
  // the minimum; far settings, diverging or barely training, would bend it).
  double fit_window = 0.05;
  // Runs within this fraction of the best loss form the flat region (DeepSeek LLM's 0.25%).
  double flat_tolerance = 0.0025;
};

// A budget's grid: loss = q(u, v), u = ln batch, v = ln lr, a quadratic with a minimum.
struct HyperparameterOptimum {
  double budget = 0;
  int runs = 0;         // runs of this budget (weight > 0)
  int runs_fitted = 0;  // of which within the fit window
  double batch_size = 0, lr = 0, loss = 0;  // at the surface's minimum
  bool inside = false;  // the minimum lies within the fitted runs' range of batch size and of lr
  // The flat region: smallest and largest batch size and lr among the runs within flat_tolerance of the best.
  double flat_batch_min = 0, flat_batch_max = 0, flat_lr_min = 0, flat_lr_max = 0;
  bool used = false;   // false: left out of the power laws, for `reason`
  std::string reason;  // too few runs or settings in the window, no minimum
};

struct HyperparameterFit {
  std::vector<HyperparameterOptimum> budgets;  // by increasing budget
  PowerLaw batch_law;                          // B_opt = k C^a
  PowerLaw lr_law;                             // lr_opt = k' C^b
  int budgets_used = 0;
};

// Fits every budget (a fit needs 6 runs in the window, over 3 batch sizes and 3 learning rates, and a
// surface that curves upwards in every direction), then the power laws over the budgets that gave a
// minimum. `weights` (empty: all ones) weight the runs, as a bootstrap's multiplicities. Fails, naming the
// run, on a run with a non-positive or non-finite value; fails unless 2 budgets give a minimum.
absl::StatusOr<HyperparameterFit> FitHyperparameterLaws(const std::vector<HyperparameterRun>& runs,
                                                        const HyperparameterFitOptions& options,
                                                        const std::vector<double>& weights = {});

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_FIT_HYPERPARAMETER_H_
