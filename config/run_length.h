// How long a run is and where its learning-rate schedule's phases fall, from the config alone: tokens per
// optimizer step, the number of steps, and where warmup-stable-decay's decay starts. Validation checks the
// schedule against these (validation.h); the trainer, the sweeps and the accounting count with them.
#ifndef LMFORGE_CONFIG_RUN_LENGTH_H_
#define LMFORGE_CONFIG_RUN_LENGTH_H_

#include <cstdint>

#include "config/experiment.pb.h"

namespace lmf::config {

// Tokens consumed by one optimizer step: batch_size * grad_accum_steps * context_length.
int64_t TokensPerStep(const Experiment& experiment);

// Optimizer steps the run takes: run.max_steps, or max_tokens / TokensPerStep rounded down.
int64_t TotalSteps(const Experiment& experiment);

// Where WSD's decay starts: the last `decay_fraction` of [0, decay_end] (rounded to a step or token), not
// before the warmup's end. Validation refuses a schedule where this is not before decay_end.
int64_t WsdDecayStart(int64_t warmup, int64_t decay_end, double decay_fraction);

}  // namespace lmf::config

#endif  // LMFORGE_CONFIG_RUN_LENGTH_H_
