// A sweep's runs checked against their token files before any of them starts, with the trainer's own rules
// (experiments/data/token_batches.h): a corpus too small for one batch, or a validation file too small for
// run.eval_tokens, made every run of a sweep fail with the same error one after another (the quickstart on a
// 3 KB --data: 20 identical failures, then "no finished run to fit"). Each distinct (files, batch, context,
// evaluation budget) is checked once; runs that finished earlier are not (they will not train again).
#ifndef LMFORGE_EXPERIMENTS_SWEEP_DATA_CHECK_H_
#define LMFORGE_EXPERIMENTS_SWEEP_DATA_CHECK_H_

#include "absl/status/status.h"
#include "experiments/sweep/plan.h"

namespace lmf::sweep {

// The first run whose data the trainer would refuse, as "<sweep file> (run NAME): <the trainer's error>".
absl::Status CheckRunsCanReadTheirData(const SweepPlan& plan);

}  // namespace lmf::sweep

#endif  // LMFORGE_EXPERIMENTS_SWEEP_DATA_CHECK_H_
