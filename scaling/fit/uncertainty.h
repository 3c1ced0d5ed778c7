// Bootstrap confidence intervals for the Approach 2 and Approach 3 fits: every fitted parameter, the
// exponents of N_opt(C) and D_opt(C), and the extrapolated N_opt, D_opt and loss at a target budget. The
// per-resample fits are kept so plots can draw bands at any compute.
#ifndef LMFORGE_SCALING_FIT_UNCERTAINTY_H_
#define LMFORGE_SCALING_FIT_UNCERTAINTY_H_

#include <vector>

#include "absl/status/statusor.h"
#include "base/thread_pool.h"
#include "scaling/fit/bootstrap.h"
#include "scaling/fit/envelope.h"
#include "scaling/fit/hyperparameter.h"
#include "scaling/fit/isoflop.h"
#include "scaling/fit/observation.h"
#include "scaling/fit/parametric.h"

namespace lmf::scaling {

// Extrapolation at one compute budget.
struct AllocationIntervals {
  double flops = 0;
  Interval params;  // N_opt
  Interval tokens;  // D_opt
  Interval loss;    // predicted loss at (N_opt, D_opt)
};

struct ParametricUncertainty {
  Interval E, A, B, alpha, beta;
  Interval params_exponent;  // a in N_opt ∝ C^a
  Interval tokens_exponent;  // b in D_opt ∝ C^b
  AllocationIntervals target;
  std::vector<ParametricLaw> resampled;  // one law per successful resample
  int resamples = 0;
  // Resamples dropped, for the same reasons the full fit would be refused: their runs cannot identify the
  // law (`unidentifiable`, CheckParametricIdentifiable: a draw with fewer than 3 distinct N or D, or along
  // one line), or their fit has alpha <= 0, beta <= 0 or no finite objective. `failed` counts both.
  int failed = 0;
  int unidentifiable = 0;
  // Percentile intervals over the resamples kept are conditional on the fit succeeding: when more resamples
  // are dropped than the interval leaves out in its tails (1 - confidence), the dropped ones, which are the
  // extreme draws, could lie on either side of it and the interval understates the uncertainty. It is then
  // reported as unreliable.
  bool Reliable(double confidence) const {
    return resamples == 0 || failed <= (1 - confidence) * resamples;
  }
};

// Resamples the runs (all together) and refits each resample with L-BFGS from the full-data solution
// `fit.solution` (as Besiroglu et al. do: the full grid per resample would cost 4,500 times more and the
// resampled optimum lies next to the full-data one), plus `extra_starts` starts drawn from the grid. A
// resample that cannot identify the law is dropped before it is fitted (ParametricUncertainty).
absl::StatusOr<ParametricUncertainty> BootstrapParametric(const Observations& observations, const ParametricFit& fit,
                                                          double target_flops, const BootstrapOptions& options,
                                                          const ParametricFitOptions& fit_options,
                                                          int extra_starts = 0, ThreadPool* pool = nullptr);

struct IsoFlopUncertainty {
  Interval params_coefficient, params_exponent;  // N_opt = k C^a
  Interval tokens_coefficient, tokens_exponent;  // D_opt = k' C^b
  AllocationIntervals target;                    // loss from the power law through the parabola minima
  std::vector<IsoFlopFit> resampled;             // power laws only (curves cleared), per successful resample
  int resamples = 0;
  int failed = 0;
};

// Resamples runs within each budget (so every budget keeps its number of runs) and refits Approach 2.
absl::StatusOr<IsoFlopUncertainty> BootstrapIsoFlop(const Observations& observations, const IsoFlopFit& fit,
                                                    double target_flops, const BootstrapOptions& options,
                                                    ThreadPool* pool = nullptr);

struct EnvelopeUncertainty {
  Interval params_coefficient, params_exponent;  // N_opt = k C^a
  Interval tokens_coefficient, tokens_exponent;  // D_opt = k' C^b
  AllocationIntervals target;                    // loss not estimated (the envelope has no law for it)
  int resamples = 0;
  int failed = 0;
};

// Resamples whole runs (curves) and refits Approach 1.
absl::StatusOr<EnvelopeUncertainty> BootstrapEnvelope(const std::vector<TrainingCurve>& curves, const EnvelopeFit& fit,
                                                      double target_flops, const BootstrapOptions& options,
                                                      ThreadPool* pool = nullptr);

struct HyperparameterUncertainty {
  Interval batch_coefficient, batch_exponent;  // B_opt = k C^a
  Interval lr_coefficient, lr_exponent;        // lr_opt = k' C^b
  double flops = 0;                            // the target budget
  Interval batch_at_target, lr_at_target;
  std::vector<PowerLaw> batch_laws, lr_laws;   // per successful resample
  int resamples = 0;
  int failed = 0;  // resamples in which fewer than 2 budgets' grids had a minimum
  // As ParametricUncertainty::Reliable: no more failed resamples than the intervals leave in their tails.
  bool Reliable(double confidence) const { return resamples == 0 || failed <= (1 - confidence) * resamples; }
};

// Resamples runs within each budget (so every grid keeps its number of runs) and refits the batch-size and
// learning-rate laws.
absl::StatusOr<HyperparameterUncertainty> BootstrapHyperparameterLaws(const std::vector<HyperparameterRun>& runs,
                                                                      const HyperparameterFit& fit,
                                                                      double target_flops,
                                                                      const BootstrapOptions& options,
                                                                      const HyperparameterFitOptions& fit_options,
                                                                      ThreadPool* pool = nullptr);

// Percentile band of a quantity over resampled fits, at each x: band[i] = {lower, upper}.
struct Band {
  std::vector<double> x, lower, upper;
};
Band ParametricBand(const std::vector<ParametricLaw>& laws, const std::vector<double>& flops, int which,
                    double confidence);  // which: 0 = N_opt, 1 = D_opt, 2 = loss at the optimum
Band PowerLawBand(const std::vector<PowerLaw>& laws, const std::vector<double>& x, double confidence);

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_FIT_UNCERTAINTY_H_
