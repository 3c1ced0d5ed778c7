// Optimal batch size and learning rate per compute budget, and their power laws (see hyperparameter.h).
#include "scaling/fit/hyperparameter.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "scaling/fit/least_squares.h"

namespace lmf::scaling {
namespace {

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void Add(double x) { lo = std::min(lo, x), hi = std::max(hi, x); }
  bool Contains(double x) const { return lo <= x && x <= hi; }
};

// Fits the quadratic surface to the runs `fitted` of one budget; sets the optimum or the reason there is none.
void FitSurface(const std::vector<HyperparameterRun>& runs, const std::vector<int>& fitted,
                const std::vector<double>& weights, HyperparameterOptimum* out) {
  // Centre and scale ln batch and ln lr so the normal equations stay well conditioned.
  double sw = 0, su = 0, sv = 0;
  Range u_range, v_range;
  for (int i : fitted) {
    const double w = weights.empty() ? 1.0 : weights[i], u = std::log(runs[i].batch_size), v = std::log(runs[i].lr);
    sw += w, su += w * u, sv += w * v;
    u_range.Add(u);
    v_range.Add(v);
  }
  const double mid_u = su / sw, mid_v = sv / sw;
  const double half_u = (u_range.hi - u_range.lo) / 2, half_v = (v_range.hi - v_range.lo) / 2;
  std::vector<std::vector<double>> features;
  std::vector<double> loss, w;
  for (int i : fitted) {
    const double s = (std::log(runs[i].batch_size) - mid_u) / half_u, t = (std::log(runs[i].lr) - mid_v) / half_v;
    features.push_back({1, s, t, s * s, s * t, t * t});
    loss.push_back(runs[i].loss);
    w.push_back(weights.empty() ? 1.0 : weights[i]);
  }
  absl::StatusOr<std::vector<double>> q = WeightedLeastSquares(features, loss, w);
  if (!q.ok()) {
    out->reason = absl::StrCat("the quadratic surface could not be fitted: ", q.status().message());
    return;
  }
  // loss = q0 + q1 s + q2 t + q3 s^2 + q4 s t + q5 t^2: a minimum where the Hessian [[2 q3, q4], [q4, 2 q5]]
  // is positive definite, at Hessian^-1 (-q1, -q2).
  const std::vector<double>& c = *q;
  const double det = 4 * c[3] * c[5] - c[4] * c[4];
  if (!(c[3] > 0 && det > 0)) {
    out->reason = "the fitted surface has no minimum (it does not curve upwards in every direction)";
    return;
  }
  const double s = (-2 * c[5] * c[1] + c[4] * c[2]) / det, t = (-2 * c[3] * c[2] + c[4] * c[1]) / det;
  const double u = mid_u + half_u * s, v = mid_v + half_v * t;
  out->batch_size = std::exp(u);
  out->lr = std::exp(v);
  out->loss = c[0] + c[1] * s + c[2] * t + c[3] * s * s + c[4] * s * t + c[5] * t * t;
  out->inside = u_range.Contains(u) && v_range.Contains(v);
  out->used = true;
}

HyperparameterOptimum FitBudget(const std::vector<HyperparameterRun>& runs, const std::vector<int>& members,
                                const std::vector<double>& weights, const HyperparameterFitOptions& options) {
  HyperparameterOptimum out;
  out.budget = runs[members[0]].budget;
  auto weight = [&](int i) { return weights.empty() ? 1.0 : weights[i]; };
  double best = INFINITY;
  for (int i : members) {
    if (weight(i) <= 0) continue;
    ++out.runs;
    best = std::min(best, runs[i].loss);
  }
  if (out.runs == 0) {
    out.reason = "no runs";
    return out;
  }
  Range flat_batch, flat_lr;
  std::vector<int> fitted;
  std::set<double> batches, lrs;
  for (int i : members) {
    if (weight(i) <= 0) continue;
    if (runs[i].loss <= best * (1 + options.flat_tolerance)) flat_batch.Add(runs[i].batch_size), flat_lr.Add(runs[i].lr);
    if (runs[i].loss <= best * (1 + options.fit_window)) {
      fitted.push_back(i);
      batches.insert(runs[i].batch_size);
      lrs.insert(runs[i].lr);
    }
  }
  out.flat_batch_min = flat_batch.lo, out.flat_batch_max = flat_batch.hi;
  out.flat_lr_min = flat_lr.lo, out.flat_lr_max = flat_lr.hi;
  out.runs_fitted = static_cast<int>(fitted.size());
  if (fitted.size() < 6 || batches.size() < 3 || lrs.size() < 3) {
    out.reason = absl::StrFormat(
        "%d run(s) within %g%% of the best loss, over %d batch size(s) and %d learning rate(s); the quadratic "
        "surface needs 6 runs over 3 of each",
        out.runs_fitted, 100 * options.fit_window, batches.size(), lrs.size());
    return out;
  }
  FitSurface(runs, fitted, weights, &out);
  return out;
}

}  // namespace

absl::StatusOr<HyperparameterFit> FitHyperparameterLaws(const std::vector<HyperparameterRun>& runs,
                                                        const HyperparameterFitOptions& options,
                                                        const std::vector<double>& weights) {
  if (!weights.empty() && weights.size() != runs.size()) {
    return absl::InvalidArgumentError("batch/lr fit: weights and runs differ in length");
  }
  std::map<double, std::vector<int>> groups;
  for (size_t i = 0; i < runs.size(); ++i) {
    const HyperparameterRun& r = runs[i];
    const bool ok = r.budget > 0 && r.batch_size > 0 && r.lr > 0 && std::isfinite(r.budget) &&
                    std::isfinite(r.batch_size) && std::isfinite(r.lr) && std::isfinite(r.loss);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("batch/lr fit: run ", i, " has budget=", r.budget, " batch=",
                                                     r.batch_size, " lr=", r.lr, " loss=", r.loss,
                                                     "; every run needs a positive budget, batch size and lr"));
    }
    groups[r.budget].push_back(static_cast<int>(i));
  }
  HyperparameterFit fit;
  std::vector<double> budgets, batch, lr;
  std::vector<std::string> reasons;
  for (const auto& [budget, members] : groups) {
    fit.budgets.push_back(FitBudget(runs, members, weights, options));
    const HyperparameterOptimum& b = fit.budgets.back();
    if (!b.used) {
      if (b.runs > 0) reasons.push_back(absl::StrFormat("%g FLOP: %s", budget, b.reason));
      continue;
    }
    budgets.push_back(budget);
    batch.push_back(b.batch_size);
    lr.push_back(b.lr);
  }
  fit.budgets_used = static_cast<int>(budgets.size());
  if (budgets.size() < 2) {
    return absl::FailedPreconditionError(absl::StrCat(
        "batch/lr laws need 2 budgets whose batch x lr grid has a minimum; ", budgets.size(), " of ",
        groups.size(), " had one", reasons.empty() ? "" : absl::StrCat(" (", absl::StrJoin(reasons, "; "), ")")));
  }
  absl::StatusOr<PowerLaw> batch_law = FitPowerLaw(budgets, batch);
  if (!batch_law.ok()) return batch_law.status();
  absl::StatusOr<PowerLaw> lr_law = FitPowerLaw(budgets, lr);
  if (!lr_law.ok()) return lr_law.status();
  fit.batch_law = *batch_law;
  fit.lr_law = *lr_law;
  return fit;
}

}  // namespace lmf::scaling
