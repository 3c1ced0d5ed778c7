// Chinchilla Approach 2: IsoFLOP profiles. The runs of each compute budget are fitted with a parabola
// loss = c0 + c1 x + c2 x^2 in x = ln N (and separately in x = ln D); the vertex gives that budget's
// N_opt (and D_opt); power laws N_opt = k C^a and D_opt = k' C^b are then fitted across budgets in log-log.
//
// The D_opt of a budget comes from the parabola in ln D when the runs have their own token counts (Llama 3
// fits its IsoFLOP curves in tokens); where D = C / (6N) exactly the two parabolas are mirror images and
// give the same answer.
#ifndef LMFORGE_SCALING_FIT_ISOFLOP_H_
#define LMFORGE_SCALING_FIT_ISOFLOP_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "scaling/fit/observation.h"
#include "scaling/fit/power_law.h"

namespace lmf::scaling {

// loss = c0 + c1 x + c2 x^2.
struct Parabola {
  double c0 = 0, c1 = 0, c2 = 0;
  double At(double x) const { return c0 + x * (c1 + x * c2); }
  double Vertex() const { return -c1 / (2 * c2); }
};

// Weighted least-squares parabola; fails unless there are 3 points with positive weight at distinct x.
absl::StatusOr<Parabola> FitParabola(const std::vector<double>& x, const std::vector<double>& y,
                                     const std::vector<double>& weights = {});

struct IsoFlopCurve {
  double budget = 0;
  std::vector<int> runs;         // indices into the observations
  Parabola loss_vs_log_params;   // x = ln N
  Parabola loss_vs_log_tokens;   // x = ln D
  double opt_params = 0;         // exp(vertex) of loss_vs_log_params
  double opt_tokens = 0;         // exp(vertex) of loss_vs_log_tokens
  double opt_loss = 0;           // the parabola in ln N at its vertex
  bool used = false;             // false: left out of the power laws, for the reason below
  std::string reason;            // why not used: too few runs, no minimum (c2 <= 0)
  bool vertex_inside = false;    // the N vertex lies within the sampled N range (else it is extrapolated)
};

struct IsoFlopFit {
  std::vector<IsoFlopCurve> curves;  // by increasing budget
  PowerLaw params_law;               // N_opt = k C^a
  PowerLaw tokens_law;               // D_opt = k' C^b
  PowerLaw loss_law;                 // L_opt = k'' C^c (the parabola minima)
  int budgets_used = 0;
};

// Groups observations by `budget` (runs with budget <= 0 are an error: Approach 2 needs IsoFLOP groups),
// fits each group with at least 3 runs, and fits the power laws over the groups whose parabola opens
// upwards. `weights` (empty: all ones) weight the runs in the parabola fits; a bootstrap passes the
// multiplicities of a resample. Fails unless 2 budgets give a minimum.
absl::StatusOr<IsoFlopFit> FitIsoFlop(const Observations& observations, const std::vector<double>& weights = {});

}  // namespace lmf::scaling

#endif  // LMFORGE_SCALING_FIT_ISOFLOP_H_
