// Training one run of a sweep, inside the process the runner started for it: load the run's config,
// train (resuming from the run's newest checkpoint if an earlier attempt was killed), then leave in the
// run folder what the runner collects: result.textproto (SweepRunResult) and curve.csv (the validation
// loss at each evaluation, for Approach 1 fits).
#ifndef LMFORGE_EXPERIMENTS_SWEEP_TRAIN_RUN_H_
#define LMFORGE_EXPERIMENTS_SWEEP_TRAIN_RUN_H_

#include <string>

#include "absl/status/status.h"
#include "experiments/sweep/plan.h"

namespace lmf::sweep {

// Trains the run whose config is `config_path` and writes its result file; returns the training error,
// if any, after recording it (FAILED, or DIVERGED for a NaN/Inf stop or a validation loss that was not
// finite) in the result file.
absl::Status TrainSweepRun(const std::string& config_path);

// Parameters and training FLOPs per token of an experiment's model, from model/accounting.
absl::StatusOr<ModelSize> SizeOfModel(const config::Experiment& experiment);

}  // namespace lmf::sweep

#endif  // LMFORGE_EXPERIMENTS_SWEEP_TRAIN_RUN_H_
