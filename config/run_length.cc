// Run length and schedule phases (see run_length.h).
#include "config/run_length.h"

#include <algorithm>
#include <cmath>

namespace lmf::config {

int64_t TokensPerStep(const Experiment& experiment) {
  return static_cast<int64_t>(experiment.run().batch_size()) * experiment.run().grad_accum_steps() *
         experiment.model().context_length();
}

int64_t TotalSteps(const Experiment& experiment) {
  if (experiment.run().has_max_steps()) return experiment.run().max_steps();
  const int64_t per_step = TokensPerStep(experiment);
  return per_step > 0 ? experiment.run().max_tokens() / per_step : 0;
}

int64_t WsdDecayStart(int64_t warmup, int64_t decay_end, double decay_fraction) {
  return std::max<int64_t>(warmup, decay_end - std::llround(decay_fraction * static_cast<double>(decay_end)));
}

}  // namespace lmf::config
