// Chinchilla Approach 1 (see envelope.h).
#include "scaling/fit/envelope.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"

namespace lmf::scaling {

absl::StatusOr<EnvelopeFit> FitEnvelope(const std::vector<TrainingCurve>& curves, const EnvelopeOptions& options,
                                        const std::vector<double>& run_weights) {
  if (!run_weights.empty() && run_weights.size() != curves.size()) {
    return absl::InvalidArgumentError("envelope fit: run weights and curves differ in length");
  }
  if (options.flops_points < 2) return absl::InvalidArgumentError("envelope fit: flops_points must be at least 2");
  double lo = INFINITY, hi = -INFINITY;
  for (size_t r = 0; r < curves.size(); ++r) {
    const TrainingCurve& c = curves[r];
    if (c.points.size() < 2 || !(c.params > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("envelope fit: run '", c.run, "' has ", c.points.size(),
                                                     " curve points and params=", c.params,
                                                     "; need 2 points and positive params"));
    }
    for (size_t i = 0; i < c.points.size(); ++i) {
      const CurvePoint& p = c.points[i];
      if (!(p.flops > 0) || !std::isfinite(p.loss) || !(p.tokens > 0) || (i > 0 && !(p.flops > c.points[i - 1].flops))) {
        return absl::InvalidArgumentError(absl::StrCat("envelope fit: run '", c.run, "' point ", i, " (flops=", p.flops,
                                                       ", tokens=", p.tokens, ", loss=", p.loss,
                                                       ") must have positive, increasing flops and tokens and a "
                                                       "finite loss"));
      }
    }
    if (!run_weights.empty() && run_weights[r] == 0) continue;
    lo = std::min(lo, c.points.front().flops);
    hi = std::max(hi, c.points.back().flops);
  }
  if (!(hi > lo)) return absl::InvalidArgumentError("envelope fit: need curves spanning a range of compute");

  EnvelopeFit fit;
  std::set<int> on_envelope;
  const double log_lo = std::log(lo), log_hi = std::log(hi);
  for (int g = 0; g < options.flops_points; ++g) {
    const double log_c = log_lo + (log_hi - log_lo) * g / (options.flops_points - 1);
    EnvelopePoint best;
    best.loss = INFINITY;
    for (size_t r = 0; r < curves.size(); ++r) {
      if (!run_weights.empty() && run_weights[r] == 0) continue;
      const std::vector<CurvePoint>& pts = curves[r].points;
      if (log_c < std::log(pts.front().flops) || log_c > std::log(pts.back().flops)) continue;
      // First point at or beyond c, then interpolate in log flops.
      auto it = std::lower_bound(pts.begin(), pts.end(), std::exp(log_c),
                                 [](const CurvePoint& p, double c) { return p.flops < c; });
      if (it == pts.end()) it = pts.end() - 1;
      const CurvePoint& b = *it;
      const CurvePoint& a = it == pts.begin() ? *it : *(it - 1);
      double t = 0;
      if (b.flops > a.flops) t = (log_c - std::log(a.flops)) / (std::log(b.flops) - std::log(a.flops));
      t = std::clamp(t, 0.0, 1.0);
      const double loss = a.loss + t * (b.loss - a.loss);
      if (loss < best.loss) {
        best.loss = loss;
        best.flops = std::exp(log_c);
        best.params = curves[r].params;
        best.tokens = std::exp(std::log(a.tokens) + t * (std::log(b.tokens) - std::log(a.tokens)));
        best.run = static_cast<int>(r);
      }
    }
    if (std::isfinite(best.loss)) {
      fit.envelope.push_back(best);
      on_envelope.insert(best.run);
    }
  }
  fit.runs_on_envelope = static_cast<int>(on_envelope.size());
  if (fit.runs_on_envelope < 2) {
    return absl::InvalidArgumentError(absl::StrCat("envelope fit: only ", fit.runs_on_envelope,
                                                   " run(s) reach the lower envelope; N_opt(C) needs 2"));
  }
  std::vector<double> c, n, d;
  for (const EnvelopePoint& p : fit.envelope) {
    c.push_back(p.flops);
    n.push_back(p.params);
    d.push_back(p.tokens);
  }
  absl::StatusOr<PowerLaw> law = FitPowerLaw(c, n);
  if (!law.ok()) return law.status();
  fit.params_law = *law;
  law = FitPowerLaw(c, d);
  if (!law.ok()) return law.status();
  fit.tokens_law = *law;
  return fit;
}

}  // namespace lmf::scaling
