// Chinchilla Approach 2 (see isoflop.h).
#include "scaling/fit/isoflop.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "scaling/fit/least_squares.h"

namespace lmf::scaling {

absl::StatusOr<Parabola> FitParabola(const std::vector<double>& x, const std::vector<double>& y,
                                     const std::vector<double>& weights) {
  if (x.size() != y.size() || (!weights.empty() && weights.size() != x.size())) {
    return absl::InvalidArgumentError("parabola fit: x, y and weights differ in length");
  }
  // Centre and scale x so the normal equations stay well conditioned, solve, then map back.
  double sw = 0, sx = 0, lo = INFINITY, hi = -INFINITY;
  int used = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double w = weights.empty() ? 1.0 : weights[i];
    if (!std::isfinite(x[i]) || !std::isfinite(y[i]) || !(w >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("parabola fit: point ", i, " is not finite"));
    }
    if (w == 0) continue;
    sw += w;
    sx += w * x[i];
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    ++used;
  }
  if (used < 3 || !(hi > lo)) {
    return absl::InvalidArgumentError(absl::StrCat("parabola fit: need 3 points at distinct x, got ", used));
  }
  const double mid = sx / sw, scale = (hi - lo) / 2;
  std::vector<std::vector<double>> features;  // 1, t, t^2 in t = (x - mid) / scale
  std::vector<double> seen;
  for (size_t i = 0; i < x.size(); ++i) {
    const double w = weights.empty() ? 1.0 : weights[i];
    if (w > 0 && std::find(seen.begin(), seen.end(), x[i]) == seen.end()) seen.push_back(x[i]);
    const double t = (x[i] - mid) / scale;
    features.push_back({1, t, t * t});
  }
  if (seen.size() < 3) return absl::InvalidArgumentError("parabola fit: need 3 distinct x values");
  absl::StatusOr<std::vector<double>> q = WeightedLeastSquares(features, y, weights);
  if (!q.ok()) return absl::InvalidArgumentError(absl::StrCat("parabola fit: ", q.status().message()));
  const double q0 = (*q)[0], q1 = (*q)[1], q2 = (*q)[2];
  // y = q0 + q1 t + q2 t^2 with t = (x - mid) / scale.
  Parabola p;
  p.c2 = q2 / (scale * scale);
  p.c1 = q1 / scale - 2 * q2 * mid / (scale * scale);
  p.c0 = q0 - q1 * mid / scale + q2 * mid * mid / (scale * scale);
  return p;
}

absl::StatusOr<IsoFlopFit> FitIsoFlop(const Observations& observations, const std::vector<double>& weights) {
  if (!weights.empty() && weights.size() != observations.size()) {
    return absl::InvalidArgumentError("IsoFLOP fit: weights and observations differ in length");
  }
  std::map<double, std::vector<int>> groups;
  for (size_t i = 0; i < observations.size(); ++i) {
    const Observation& o = observations[i];
    if (!(o.budget > 0) || !(o.params > 0) || !(o.tokens > 0) || !std::isfinite(o.loss)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "IsoFLOP fit: run ", i, " has budget=", o.budget, " params=", o.params, " tokens=", o.tokens,
          " loss=", o.loss, "; Approach 2 needs every run in a budget group with positive params and tokens"));
    }
    groups[o.budget].push_back(static_cast<int>(i));
  }
  IsoFlopFit fit;
  std::vector<double> budgets, opt_n, opt_d, opt_l;
  for (const auto& [budget, runs] : groups) {
    IsoFlopCurve curve;
    curve.budget = budget;
    curve.runs = runs;
    std::vector<double> ln_n, ln_d, loss, w;
    double lo = INFINITY, hi = -INFINITY;
    for (int i : runs) {
      ln_n.push_back(std::log(observations[i].params));
      ln_d.push_back(std::log(observations[i].tokens));
      loss.push_back(observations[i].loss);
      w.push_back(weights.empty() ? 1.0 : weights[i]);
      if (w.back() > 0) {
        lo = std::min(lo, ln_n.back());
        hi = std::max(hi, ln_n.back());
      }
    }
    absl::StatusOr<Parabola> pn = FitParabola(ln_n, loss, w);
    absl::StatusOr<Parabola> pd = FitParabola(ln_d, loss, w);
    if (!pn.ok() || !pd.ok()) {
      curve.reason = std::string(pn.ok() ? pd.status().message() : pn.status().message());
    } else if (!(pn->c2 > 0) || !(pd->c2 > 0)) {
      curve.loss_vs_log_params = *pn;
      curve.loss_vs_log_tokens = *pd;
      curve.reason = "the parabola opens downwards: no minimum";
    } else if (!(pn->At(pn->Vertex()) > 0)) {
      // A loss is positive: a minimum at or below 0 is the parabola extrapolated far beyond the sampled sizes
      // (losses that barely bend), not a compute-optimal point. It would also break the power law of the
      // minimum loss in C, and with it the whole fit.
      curve.loss_vs_log_params = *pn;
      curve.loss_vs_log_tokens = *pd;
      curve.reason = absl::StrFormat(
          "the parabola's minimum, at N = %.3g (sampled %.3g to %.3g), predicts a loss of %.3g: it lies far "
          "outside the sampled sizes",
          std::exp(pn->Vertex()), std::exp(lo), std::exp(hi), pn->At(pn->Vertex()));
    } else {
      curve.loss_vs_log_params = *pn;
      curve.loss_vs_log_tokens = *pd;
      const double vn = pn->Vertex();
      curve.opt_params = std::exp(vn);
      curve.opt_tokens = std::exp(pd->Vertex());
      curve.opt_loss = pn->At(vn);
      curve.vertex_inside = vn >= lo && vn <= hi;
      curve.used = true;
      budgets.push_back(budget);
      opt_n.push_back(curve.opt_params);
      opt_d.push_back(curve.opt_tokens);
      opt_l.push_back(curve.opt_loss);
    }
    fit.curves.push_back(curve);
  }
  fit.budgets_used = static_cast<int>(budgets.size());
  if (budgets.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("IsoFLOP fit: only ", budgets.size(), " of ", groups.size(),
                                                   " budgets have a parabola with a minimum; need 2"));
  }
  absl::StatusOr<PowerLaw> law = FitPowerLaw(budgets, opt_n);
  if (!law.ok()) return law.status();
  fit.params_law = *law;
  law = FitPowerLaw(budgets, opt_d);
  if (!law.ok()) return law.status();
  fit.tokens_law = *law;
  law = FitPowerLaw(budgets, opt_l);
  if (!law.ok()) return law.status();
  fit.loss_law = *law;
  return fit;
}

}  // namespace lmf::scaling
