// Chinchilla Approach 1: the lower envelope of loss over compute taken from whole training curves. At
// each of a log-spaced grid of FLOP values the run with the lowest loss (curves interpolated linearly in
// log FLOP) gives that compute's N_opt and D_opt (the tokens it had seen there); power laws N_opt = k C^a
// and D_opt = k' C^b are fitted to the envelope in log-log.
#ifndef LMFORGE_SCALING_FIT_ENVELOPE_H_
#define LMFORGE_SCALING_FIT_ENVELOPE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scaling/fit/power_law.h"

namespace lmf::scaling {

struct CurvePoint {
  double tokens = 0;  // tokens seen so far
  double flops = 0;   // FLOP spent so far
  double loss = 0;    // loss at this point
};

struct TrainingCurve {
  std::string run;
  double params = 0;  // N of the run
  std::vector<CurvePoint> points;  // by increasing flops
};

struct EnvelopePoint {
  double flops = 0;
  double loss = 0;
  double params = 0;
  double tokens = 0;
  int run = 0;  // index into the curves
};

struct EnvelopeOptions {
  int flops_points = 250;  // size of the log-spaced FLOP grid
};

struct EnvelopeFit {
  std::vector<EnvelopePoint> envelope;  // by increasing flops
  PowerLaw params_law;                  // N_opt = k C^a
  PowerLaw tokens_law;                  // D_opt = k' C^b
  int runs_on_envelope = 0;
};

// `run_weights` (empty: all ones) selects runs: a run with weight 0 is left out (a bootstrap resample).
// Fails on a curve with non-positive or non-increasing flops, non-finite loss, or fewer than 2 points, or
// when fewer than 2 runs ever reach the envelope (N_opt would have no slope).
absl::StatusOr<EnvelopeFit> FitEnvelope(const std::vector<TrainingCurve>& curves, const EnvelopeOptions& options,
                                        const std::vector<double>& run_weights = {});

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_FIT_ENVELOPE_H_
