// One training run as the scaling-law fits see it: model size, tokens, compute and loss. Every fit in
// scaling/fit (Approach 1, 2, 3 and the Kaplan single power laws) takes a list of these, so the fits do not
// depend on how results were stored (scaling/results.h converts a results table into observations).
#ifndef LMFORGE_SCALING_FIT_OBSERVATION_H_
#define LMFORGE_SCALING_FIT_OBSERVATION_H_

#include <vector>

namespace lmf::scaling {

struct Observation {
  double params = 0;  // N: trainable parameters counted by the fit (the caller chooses with or without embeddings)
  double tokens = 0;  // D: training tokens
  double flops = 0;   // C: training compute actually spent (FLOP)
  double budget = 0;  // nominal IsoFLOP budget the run belongs to (FLOP); 0 when the run is in no IsoFLOP group
  double loss = 0;    // final loss (nats per token)
};

using Observations = std::vector<Observation>;

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_FIT_OBSERVATION_H_
