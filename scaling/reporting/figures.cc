// The report's SVG figures (see figures.h).
#include "scaling/reporting/figures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "scaling/plot/svg_plot.h"

namespace lmf::scaling {
namespace {

using plot::Figure;
using plot::Marker;
using plot::Scale;
using plot::Style;

std::vector<double> LogSpace(double lo, double hi, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(std::exp(std::log(lo) + (std::log(hi) - std::log(lo)) * i / (n - 1)));
  return out;
}

// Compute range of the fits' curves: from below the smallest run to beyond the target.
std::vector<double> ComputeGrid(const ScalingAnalysis& a) {
  double lo = INFINITY, hi = a.options.target_flops;
  for (const Observation& o : a.observations) {
    const double c = o.budget > 0 ? o.budget : o.flops;
    if (c > 0) lo = std::min(lo, c);
    hi = std::max(hi, c);
  }
  if (!std::isfinite(lo)) lo = hi / 1e3;
  return LogSpace(lo / 2, hi * 2, 80);
}

std::string BudgetColor(const ScalingAnalysis& a, double budget) {
  if (!a.isoflop || a.isoflop->curves.size() < 2) return plot::Color(0);
  const auto& curves = a.isoflop->curves;
  const double lo = std::log(curves.front().budget), hi = std::log(curves.back().budget);
  return plot::RampColor(0.1 + 0.85 * (std::log(budget) - lo) / (hi - lo));
}

std::string ConfidenceLabel(const ScalingAnalysis& a) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g%% band", 100 * a.options.bootstrap.confidence);
  return buf;
}

}  // namespace

std::string PowerOfTenLabel(double value) {
  if (!(value > 0)) return "0";
  int exponent = static_cast<int>(std::floor(std::log10(value) + 1e-9));
  char mantissa[32];
  std::snprintf(mantissa, sizeof(mantissa), "%.3g", value / std::pow(10.0, exponent));
  if (std::strtod(mantissa, nullptr) >= 10) {  // 9.996e18 rounds to the next power of ten, not "10·10^18"
    ++exponent;
    std::snprintf(mantissa, sizeof(mantissa), "%.3g", value / std::pow(10.0, exponent));
  }
  char buf[64];
  if (std::strcmp(mantissa, "1") == 0) {
    std::snprintf(buf, sizeof(buf), "10^%d", exponent);
  } else {
    std::snprintf(buf, sizeof(buf), "%s·10^%d", mantissa, exponent);
  }
  return buf;
}

std::string IsoFlopFigure(const ScalingAnalysis& a) {
  if (!a.isoflop) return "";
  Figure fig("IsoFLOP profiles (Approach 2)", 820, 500);
  fig.SetSubtitle("runs of each compute budget, the parabola fitted in ln N, and its minimum");
  const std::string basis = !a.mixture_of_experts ? "" : a.options.choice.active ? "active " : "total ";
  fig.x_axis() = {basis + (a.options.choice.non_embedding ? "non-embedding parameters N" : "parameters N"),
                  Scale::kLog};
  fig.y_axis() = {a.options.choice.best_loss ? "best validation loss" : "final validation loss", Scale::kLinear};
  std::vector<double> min_n, min_l;
  for (const IsoFlopCurve& curve : a.isoflop->curves) {
    const std::string color = BudgetColor(a, curve.budget);
    std::vector<double> n, l;
    double lo = INFINITY, hi = -INFINITY;
    for (int i : curve.runs) {
      n.push_back(a.observations[i].params);
      l.push_back(a.observations[i].loss);
      lo = std::min(lo, std::log(n.back()));
      hi = std::max(hi, std::log(n.back()));
    }
    fig.AddMarkers(n, l, Marker::kCircle, {color, 1, false, 0.9}, "C = " + PowerOfTenLabel(curve.budget), 4);
    if (curve.used || curve.loss_vs_log_params.c2 != 0) {
      std::vector<double> px, py;
      const double pad = 0.08 * (hi - lo);
      for (int k = 0; k <= 60; ++k) {
        const double x = lo - pad + (hi - lo + 2 * pad) * k / 60;
        px.push_back(std::exp(x));
        py.push_back(curve.loss_vs_log_params.At(x));
      }
      fig.AddLine(px, py, {color, 1.6, !curve.used, 0.95});
    }
    if (curve.used) {
      min_n.push_back(curve.opt_params);
      min_l.push_back(curve.opt_loss);
    }
  }
  fig.AddLine(min_n, min_l, {"#444444", 1, true, 0.8});
  fig.AddMarkers(min_n, min_l, Marker::kStar, {"#111111", 1, false, 1}, "parabola minimum", 5);
  return fig.Svg();
}

std::string OptimalAllocationFigure(const ScalingAnalysis& a, int which) {
  if (!a.parametric && !a.isoflop && !a.envelope) return "";
  const bool params = which == 0;
  Figure fig(params ? "Compute-optimal model size N_opt(C)" : "Compute-optimal training tokens D_opt(C)", 820, 500);
  fig.SetSubtitle("fits extrapolated to the target budget (dashed line); bands from the bootstrap");
  fig.x_axis() = {"training compute C (FLOP)", Scale::kLog};
  fig.y_axis() = {params ? "parameters N" : "tokens D", Scale::kLog};
  const std::vector<double> grid = ComputeGrid(a);
  const double target = a.options.target_flops;

  std::vector<double> run_c, run_v;
  for (const Observation& o : a.observations) {
    run_c.push_back(o.budget > 0 ? o.budget : o.flops);
    run_v.push_back(params ? o.params : o.tokens);
  }
  fig.AddMarkers(run_c, run_v, Marker::kCircle, {"#BBBBBB", 1, false, 0.6}, "runs", 2.5);

  if (a.envelope) {
    std::vector<double> c, v;
    for (const EnvelopePoint& p : a.envelope->envelope) {
      c.push_back(p.flops);
      v.push_back(params ? p.params : p.tokens);
    }
    fig.AddMarkers(c, v, Marker::kSquare, {plot::Color(2), 1, false, 0.5}, "Approach 1 envelope", 2);
    const PowerLaw& law = params ? a.envelope->params_law : a.envelope->tokens_law;
    std::vector<double> y;
    for (double c0 : grid) y.push_back(law.At(c0));
    fig.AddLine(grid, y, {plot::Color(2), 1.6, true}, "Approach 1 power law");
  }
  if (a.isoflop) {
    if (a.isoflop_ci && !a.isoflop_ci->resampled.empty()) {
      std::vector<PowerLaw> laws;
      for (const IsoFlopFit& f : a.isoflop_ci->resampled) laws.push_back(params ? f.params_law : f.tokens_law);
      const Band band = PowerLawBand(laws, grid, a.options.bootstrap.confidence);
      fig.AddBand(band.x, band.lower, band.upper, {plot::Color(1), 1, false, 0.15}, "Approach 2 " + ConfidenceLabel(a));
    }
    const PowerLaw& law = params ? a.isoflop->params_law : a.isoflop->tokens_law;
    std::vector<double> y, mc, mv;
    for (double c0 : grid) y.push_back(law.At(c0));
    fig.AddLine(grid, y, {plot::Color(1), 2}, "Approach 2 power law");
    for (const IsoFlopCurve& curve : a.isoflop->curves) {
      if (!curve.used) continue;
      mc.push_back(curve.budget);
      mv.push_back(params ? curve.opt_params : curve.opt_tokens);
    }
    fig.AddMarkers(mc, mv, Marker::kDiamond, {plot::Color(1), 1, false, 1}, "Approach 2 minima", 5);
  }
  if (a.parametric) {
    if (a.parametric_ci && !a.parametric_ci->resampled.empty()) {
      const Band band = ParametricBand(a.parametric_ci->resampled, grid, which, a.options.bootstrap.confidence);
      fig.AddBand(band.x, band.lower, band.upper, {plot::Color(0), 1, false, 0.18}, "Approach 3 " + ConfidenceLabel(a));
    }
    std::vector<double> y;
    for (double c0 : grid) {
      const Allocation at = OptimalAllocation(a.parametric->law, c0);
      y.push_back(params ? at.params : at.tokens);
    }
    fig.AddLine(grid, y, {plot::Color(0), 2.2}, "Approach 3 (parametric)");
    const Allocation at = OptimalAllocation(a.parametric->law, target);
    fig.AddMarkers({target}, {params ? at.params : at.tokens}, Marker::kStar, {plot::Color(0), 1, false, 1},
                   "recommendation", 6);
  }
  fig.AddVerticalLine(target, {"#666666", 1.2, true}, "target " + PowerOfTenLabel(target) + " FLOP");
  return fig.Svg();
}

std::string LossVsComputeFigure(const ScalingAnalysis& a) {
  Figure fig("Loss against compute", 820, 500);
  fig.SetSubtitle("every finished run, the compute-efficient frontier, and the fitted compute-optimal loss");
  fig.x_axis() = {"training compute C (FLOP)", Scale::kLog};
  fig.y_axis() = {a.options.choice.best_loss ? "best validation loss" : "final validation loss", Scale::kLog};
  const std::vector<double> grid = ComputeGrid(a);
  std::vector<double> c, l;
  for (const Observation& o : a.observations) {
    c.push_back(o.flops > 0 ? o.flops : o.budget);
    l.push_back(o.loss);
  }
  fig.AddMarkers(c, l, Marker::kCircle, {"#999999", 1, false, 0.7}, "runs", 3);
  std::vector<double> fc, fl;
  for (int i : LowerFrontier(c, l)) {
    fc.push_back(c[i]);
    fl.push_back(l[i]);
  }
  fig.AddLine(fc, fl, {plot::Color(2), 1.8}, "frontier");
  fig.AddMarkers(fc, fl, Marker::kCircle, {plot::Color(2), 1, false, 1}, "", 3.5);
  if (a.kaplan) {
    std::vector<double> y;
    for (double x : grid) y.push_back(a.kaplan->flops.law.At(x));
    fig.AddLine(grid, y, {plot::Color(3), 1.6, true}, "Kaplan L(C) on the frontier");
  }
  if (a.parametric) {
    if (a.parametric_ci && !a.parametric_ci->resampled.empty()) {
      const Band band = ParametricBand(a.parametric_ci->resampled, grid, 2, a.options.bootstrap.confidence);
      fig.AddBand(band.x, band.lower, band.upper, {plot::Color(0), 1, false, 0.18}, ConfidenceLabel(a));
    }
    std::vector<double> y;
    for (double x : grid) y.push_back(OptimalAllocation(a.parametric->law, x).loss);
    fig.AddLine(grid, y, {plot::Color(0), 2.2}, "Approach 3 optimal loss");
    fig.AddMarkers({a.options.target_flops}, {OptimalAllocation(a.parametric->law, a.options.target_flops).loss},
                   Marker::kStar, {plot::Color(0), 1, false, 1}, "prediction at target", 6);
  }
  fig.AddVerticalLine(a.options.target_flops, {"#666666", 1.2, true}, "");
  return fig.Svg();
}

std::string ResidualFigure(const ScalingAnalysis& a) {
  if (!a.parametric) return "";
  Figure fig("Approach 3 residuals", 820, 420);
  fig.SetSubtitle("ln L(observed) - ln L(fitted) per run; the fit minimises a Huber loss of these");
  fig.x_axis() = {"training compute C (FLOP)", Scale::kLog};
  fig.y_axis() = {"residual (≈ relative error)", Scale::kLinear};
  std::vector<double> c, r;
  double worst = 0;
  for (const Observation& o : a.observations) {
    c.push_back(o.flops > 0 ? o.flops : o.budget);
    r.push_back(std::log(o.loss) - std::log(a.parametric->law.Loss(o.params, o.tokens)));
    worst = std::max(worst, std::fabs(r.back()));
  }
  if (worst == 0) worst = 0.01;
  fig.y_axis().min = -1.1 * worst;
  fig.y_axis().max = 1.1 * worst;
  fig.AddHorizontalLine(0, {"#333333", 1});
  if (a.isoflop) {  // one colour per budget, as in the IsoFLOP figure
    for (const IsoFlopCurve& curve : a.isoflop->curves) {
      std::vector<double> cc, rr;
      for (int i : curve.runs) {
        cc.push_back(c[i]);
        rr.push_back(r[i]);
      }
      fig.AddMarkers(cc, rr, Marker::kCircle, {BudgetColor(a, curve.budget), 1, false, 0.9},
                     "C = " + PowerOfTenLabel(curve.budget), 3.5);
    }
  } else {
    fig.AddMarkers(c, r, Marker::kCircle, {plot::Color(0), 1, false, 0.75}, "runs", 3.5);
  }
  return fig.Svg();
}

}  // namespace lmf::scaling

namespace lmf::scaling {

std::string NoiseScaleFigure(const ScalingAnalysis& a) {
  if (a.noise_curves.empty()) return "";
  Figure fig("Gradient noise scale against loss", 820, 500);
  fig.SetSubtitle("B_simple = tr(Σ) / |G|² per run (moving averages of its estimates), and each budget's fitted "
                  "B_opt at its optimum's validation loss");
  fig.x_axis() = {"loss (training, moving average; B_opt: validation)", Scale::kLinear};
  fig.y_axis() = {"batch size (sequences)", Scale::kLog};
  std::vector<double> budgets;
  for (const NoiseScaleCurve& c : a.noise_curves) budgets.push_back(c.budget);
  std::sort(budgets.begin(), budgets.end());
  budgets.erase(std::unique(budgets.begin(), budgets.end()), budgets.end());
  auto color = [&](double budget) {
    if (budgets.size() < 2 || !(budget > 0)) return plot::Color(0);
    const double lo = std::log(std::max(budgets.front(), 1.0)), hi = std::log(budgets.back());
    return plot::RampColor(0.1 + 0.85 * (std::log(budget) - lo) / (hi - lo));
  };
  std::vector<double> labelled;
  for (const NoiseScaleCurve& c : a.noise_curves) {
    const bool first = std::find(labelled.begin(), labelled.end(), c.budget) == labelled.end();
    if (first) labelled.push_back(c.budget);
    const std::string label =
        !first ? "" : c.budget > 0 ? "B_simple, C = " + PowerOfTenLabel(c.budget) : "B_simple";
    fig.AddLine(c.loss, c.b_simple, {color(c.budget), 1.2, false, 0.75}, label);
  }
  if (a.hyperparameters) {
    std::vector<double> loss, batch;
    for (const HyperparameterOptimum& b : a.hyperparameters->budgets) {
      if (!b.used) continue;
      loss.push_back(b.loss);
      batch.push_back(b.batch_size);
      // The flat region's batch sizes: the near-optimal band at that loss.
      fig.AddLine({b.loss, b.loss}, {b.flat_batch_min, b.flat_batch_max}, {color(b.budget), 3, false, 0.6});
    }
    fig.AddMarkers(loss, batch, Marker::kStar, {"#111111", 1, false, 1}, "B_opt per budget (flat region)", 6);
  }
  return fig.Svg();
}

}  // namespace lmf::scaling

namespace lmf::scaling {

std::string WidthTransferFigure(const ScalingAnalysis& a) {
  if (a.width_lr_curves.empty()) return "";
  Figure fig("Learning rate across widths", 820, 500);
  fig.SetSubtitle("loss against peak learning rate, one curve per width; stars: each width's best run (muP "
                  "keeps it in place, standard parametrization moves it)");
  fig.x_axis() = {"peak learning rate", Scale::kLog};
  fig.y_axis() = {a.options.choice.best_loss ? "best validation loss" : "final validation loss", Scale::kLinear};
  const size_t n = a.width_lr_curves.size();
  std::vector<double> best_lr, best_loss;
  for (size_t i = 0; i < n; ++i) {
    const WidthLrCurve& c = a.width_lr_curves[i];
    const std::string color = plot::RampColor(0.1 + 0.85 * static_cast<double>(i) / static_cast<double>(n - 1));
    fig.AddLine(c.lr, c.loss, {color, 1.8}, "d_model = " + std::to_string(c.d_model));
    fig.AddMarkers(c.lr, c.loss, Marker::kCircle, {color, 1, false, 0.9}, "", 3.5);
    best_lr.push_back(c.best_lr);
    best_loss.push_back(c.best_loss);
  }
  fig.AddMarkers(best_lr, best_loss, Marker::kStar, {"#111111", 1, false, 1}, "best lr of each width", 6);
  return fig.Svg();
}

}  // namespace lmf::scaling
