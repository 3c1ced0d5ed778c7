// Markdown rendering and writing of the scaling report (see report.h).
#include "scaling/reporting/report.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/check.h"
#include "base/file.h"
#include "scaling/reporting/figures.h"

namespace lmf::scaling {
namespace {

std::string Fmt(double v) { return FormatNumber(v); }

std::string WithInterval(const Interval& i, bool have) {
  if (!have) return Fmt(i.estimate);
  return absl::StrCat(Fmt(i.estimate), " [", Fmt(i.lower), ", ", Fmt(i.upper), "]");
}

// Every file a report may write, report.md first, then the figures in the order the report shows them.
const char* const kReportFiles[] = {"report.md",           "isoflop.svg",   "optimal_params.svg",
                                    "optimal_tokens.svg",  "loss_vs_compute.svg", "residuals.svg",
                                    "noise_scale.svg",     "width_transfer.svg"};

absl::Status RemoveFileIfPresent(const std::string& path) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cannot delete ", path, ": ", std::strerror(errno)));
}

std::string Flops(double c) {
  std::string s = PowerOfTenLabel(c);
  const size_t caret = s.find('^');
  if (caret != std::string::npos) s = s.substr(0, caret) + "<sup>" + s.substr(caret + 1) + "</sup>";
  return s;
}

}  // namespace

std::string FormatNumber(double v) {
  if (!std::isfinite(v)) return "n/a";
  const double m = std::fabs(v);
  if (m >= 1e3 && std::round(m) < 1e5) return absl::StrFormat("%.0f", v);  // %.4g would switch to 8.994e+04
  if (m == 0 || (m >= 1e-3 && m < 1e3)) return absl::StrFormat("%.4g", v);
  int e = static_cast<int>(std::floor(std::log10(m)));
  std::string mantissa = absl::StrFormat("%.4g", v / std::pow(10.0, e));
  if (std::fabs(std::strtod(mantissa.c_str(), nullptr)) >= 10) {  // 9.99996e8 rounds up to the next power
    ++e;
    mantissa = absl::StrFormat("%.4g", v / std::pow(10.0, e));
  }
  return absl::StrCat(mantissa, "e", e);
}

namespace {

// How far the recommendation reaches beyond the runs, and how much the approaches that gave one differ:
// the bootstrap intervals measure only the noise of the runs under each fit's functional form, so a reader
// deciding on a budget needs these two as well.
std::string ExtrapolationNote(const ScalingAnalysis& a, double largest_swept) {
  const double target = a.options.target_flops;
  std::string note;
  if (largest_swept > 0 && std::isfinite(largest_swept)) {
    const double ratio = target / largest_swept;
    if (ratio > 1.0001) {
      note = absl::StrCat("**Extrapolation:** the target is ", Fmt(ratio), "x the largest budget swept (",
                          absl::StrFormat("%.1f", std::log10(ratio)), " decades beyond it). The intervals are "
                          "the spread over resampled runs under each fit's form, not the error of that form "
                          "so far out.");
    } else {
      note = "**Extrapolation:** none: the target lies within the budgets swept.";
    }
  }
  std::vector<std::pair<std::string, double>> n_opts;
  if (a.parametric) n_opts.push_back({"Approach 3", OptimalAllocation(a.parametric->law, target).params});
  if (a.isoflop) n_opts.push_back({"Approach 2", a.isoflop->params_law.At(target)});
  if (a.envelope) n_opts.push_back({"Approach 1", a.envelope->params_law.At(target)});
  double lo = INFINITY, hi = 0;
  for (const auto& [name, n] : n_opts) {
    if (!(n > 0) || !std::isfinite(n)) continue;
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  if (n_opts.size() >= 2 && hi > 0 && std::isfinite(lo)) {
    absl::StrAppend(&note, note.empty() ? "" : " ", "The approaches' N_opt differ by a factor of ",
                    absl::StrFormat("%.2g", hi / lo), " (", Fmt(lo), " to ", Fmt(hi), ").");
  }
  return note.empty() ? note : note + "\n\n";
}

// " **The intervals are unreliable:** ..." where more batch/lr resamples failed than the intervals leave in
// their tails (the failed draws are the extreme ones), else "".
std::string HyperparameterReliability(const ScalingAnalysis& a) {
  if (!a.hyperparameters_ci.has_value() || a.hyperparameters_ci->Reliable(a.options.bootstrap.confidence)) return "";
  const HyperparameterUncertainty& u = *a.hyperparameters_ci;
  return absl::StrCat(" **The intervals are unreliable:** ", u.failed, " of ", u.resamples,
                      " resamples had fewer than 2 budgets whose grid had a minimum, more than the ",
                      Fmt(100 * (1 - a.options.bootstrap.confidence)),
                      "% the intervals leave in their tails (more runs per grid, or grids centred on the optimum, "
                      "make them firm).");
}

// Batch size and learning rate: the optimum of each budget's grid, its flat region, and the power laws.
std::string HyperparameterSection(const ScalingAnalysis& a, const std::string& level) {
  std::string md = "## Batch size and learning rate\n\n";
  if (!a.hyperparameters) return absl::StrCat(md, "Not fitted: ", a.hyperparameters_error, ".\n\n");
  const HyperparameterFit& f = *a.hyperparameters;
  const HyperparameterFitOptions& o = a.options.hyperparameters;
  absl::StrAppend(&md, "| budget (FLOP) | runs | fitted | B_opt | lr_opt | loss at optimum | optimum inside grid | "
                       "flat region (", Fmt(100 * o.flat_tolerance), "%): batch | flat region: lr | used |\n"
                       "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const HyperparameterOptimum& b : f.budgets) {
    absl::StrAppend(&md, "| ", Flops(b.budget), " | ", b.runs, " | ", b.runs_fitted, " | ",
                    b.used ? Fmt(b.batch_size) : "n/a", " | ", b.used ? Fmt(b.lr) : "n/a", " | ",
                    b.used ? Fmt(b.loss) : "n/a", " | ", b.used ? (b.inside ? "yes" : "**no: extrapolated**") : "n/a",
                    " | ", Fmt(b.flat_batch_min), " to ", Fmt(b.flat_batch_max), " | ", Fmt(b.flat_lr_min), " to ",
                    Fmt(b.flat_lr_max), " | ", b.used ? "yes" : "no: " + b.reason, " |\n");
  }
  const bool ci = a.hyperparameters_ci.has_value() && !a.hyperparameters_ci->batch_laws.empty();
  const HyperparameterUncertainty* u = ci ? &*a.hyperparameters_ci : nullptr;
  absl::StrAppend(&md, "\nB_opt = k C<sup>a</sup>: k = ",
                  WithInterval(u ? u->batch_coefficient : Interval{f.batch_law.coefficient}, ci), ", a = ",
                  WithInterval(u ? u->batch_exponent : Interval{f.batch_law.exponent}, ci), ".  \n");
  absl::StrAppend(&md, "lr_opt = k' C<sup>b</sup>: k' = ",
                  WithInterval(u ? u->lr_coefficient : Interval{f.lr_law.coefficient}, ci), ", b = ",
                  WithInterval(u ? u->lr_exponent : Interval{f.lr_law.exponent}, ci), ".  \n");
  absl::StrAppend(&md, "At ", Flops(a.options.target_flops), " FLOP: B_opt ",
                  WithInterval(u ? u->batch_at_target : Interval{f.batch_law.At(a.options.target_flops)}, ci),
                  ", lr_opt ", WithInterval(u ? u->lr_at_target : Interval{f.lr_law.At(a.options.target_flops)}, ci),
                  ".  \n");
  absl::StrAppend(&md, "Each budget's optimum is the minimum of a quadratic in (ln batch, ln lr) fitted to its runs "
                       "within ", Fmt(100 * o.fit_window), "% of its best loss; the flat region is the runs within ",
                  Fmt(100 * o.flat_tolerance), "% of it (DeepSeek LLM's near-optimal band); ", level,
                  " intervals from resampling runs within each budget", u ? absl::StrCat(" (", u->failed, " of ",
                  u->resamples, " resamples failed)") : "", ".", HyperparameterReliability(a), "\n\n");
  return md;
}

// What the recipe's batch size and learning rate rest on: the grids' power laws extrapolated to the target
// (with intervals and how far beyond the grids), or the reason there are none.
std::string RecipeExtrapolation(const ScalingAnalysis& a, const std::string& level) {
  if (!a.hyperparameters) {
    return absl::StrCat("**Batch size and learning rate: not extrapolated by laws** (", a.hyperparameters_error,
                        "): the recipe's come from its basis above. A sweep whose IsoFLOP points carry a batch "
                        "size x learning rate grid (sweep.isoflop.point_grid) fits B_opt(C) and lr_opt(C).\n\n");
  }
  const HyperparameterFit& f = *a.hyperparameters;
  const bool ci = a.hyperparameters_ci.has_value() && !a.hyperparameters_ci->batch_laws.empty();
  const HyperparameterUncertainty* u = ci ? &*a.hyperparameters_ci : nullptr;
  const double target = a.options.target_flops;
  double lo = INFINITY, hi = 0;
  for (const HyperparameterOptimum& b : f.budgets) {
    if (!b.used) continue;
    lo = std::min(lo, b.budget);
    hi = std::max(hi, b.budget);
  }
  return absl::StrCat(
      "**Extrapolated batch size and learning rate:** B_opt(C) = ", Fmt(f.batch_law.coefficient), " C<sup>",
      WithInterval(u ? u->batch_exponent : Interval{f.batch_law.exponent}, ci), "</sup> sequences and lr_opt(C) = ",
      Fmt(f.lr_law.coefficient), " C<sup>", WithInterval(u ? u->lr_exponent : Interval{f.lr_law.exponent}, ci),
      "</sup>, fitted to the optima of ", f.budgets_used, " budgets' batch x lr grids (", Flops(lo), " to ", Flops(hi),
      " FLOP), give at ", Flops(target), " FLOP (", Fmt(target / hi), "x the largest grid budget): B_opt ",
      WithInterval(u ? u->batch_at_target : Interval{f.batch_law.At(target)}, ci), ", lr_opt ",
      WithInterval(u ? u->lr_at_target : Interval{f.lr_law.At(target)}, ci), ci ? absl::StrCat(" (", level, " intervals)") : "",
      ". The recipe takes these, the batch rounded to a power of two.", HyperparameterReliability(a), "\n\n");
}

// The gradient noise scale at the end of each budget's runs beside the budget's fitted B_opt.
std::string NoiseScaleSection(const ScalingAnalysis& a) {
  std::string md = "## Gradient noise scale\n\n";
  if (a.noise_curves.empty()) return absl::StrCat(md, "Not measured: ", a.noise_error, ".\n\n");
  std::map<double, std::vector<double>> last;  // budget -> each run's B_simple at its last estimate
  for (const NoiseScaleCurve& c : a.noise_curves) last[c.budget].push_back(c.b_simple.back());
  absl::StrAppend(&md, "| budget (FLOP) | runs | B_simple at the end (median) | range | fitted B_opt |\n"
                       "|---|---|---|---|---|\n");
  for (auto& [budget, values] : last) {
    std::sort(values.begin(), values.end());
    std::string b_opt = "n/a";
    if (a.hyperparameters) {
      for (const HyperparameterOptimum& b : a.hyperparameters->budgets) {
        if (b.budget == budget && b.used) b_opt = Fmt(b.batch_size);
      }
    }
    absl::StrAppend(&md, "| ", budget > 0 ? Flops(budget) : "none", " | ", values.size(), " | ",
                    Fmt(values[values.size() / 2]), " | ", Fmt(values.front()), " to ", Fmt(values.back()), " | ",
                    b_opt, " |\n");
  }
  absl::StrAppend(&md, "\nB_simple = tr(Σ) / |G|<sup>2</sup> in sequences (McCandlish et al. 2018), from each "
                       "step's two batch sizes (its first micro-batch and the whole step; runs with "
                       "run.grad_accum_steps >= 2), as the ratio of their moving averages; the figure "
                       "noise_scale.svg plots it against the training loss beside each budget's B_opt. It "
                       "predicts the critical batch size, which grows as the loss falls.\n\n");
  return md;
}

// The best learning rate of each width, and how far it moves from the smallest width to the largest.
std::string WidthTransferSection(const ScalingAnalysis& a) {
  std::string md = "## Learning rate across widths\n\n";
  if (a.width_lr_curves.empty()) return absl::StrCat(md, "Not measured: ", a.width_lr_error, ".\n\n");
  absl::StrAppend(&md, "| d_model | learning rates | best lr (grid) | loss there |\n|---|---|---|---|\n");
  for (const WidthLrCurve& c : a.width_lr_curves) {
    absl::StrAppend(&md, "| ", c.d_model, " | ", c.lr.size(), " | ", Fmt(c.best_lr), " | ", Fmt(c.best_loss), " |\n");
  }
  const WidthLrCurve& small = a.width_lr_curves.front();
  const WidthLrCurve& large = a.width_lr_curves.back();
  const double shift = large.best_lr / small.best_lr;
  absl::StrAppend(&md, "\nFrom d_model ", small.d_model, " to ", large.d_model, " (", Fmt(static_cast<double>(large.d_model) / small.d_model),
                  "x wider) the best learning rate moves by a factor ", Fmt(shift), shift == 1 ? " (it stays)" : "",
                  ": under muP it should stay within the grid's spacing, under standard parametrization it falls "
                  "with width. The figure width_transfer.svg shows each width's loss against lr.\n\n");
  return md;
}

// Whether each approach has bootstrap intervals to show (some resample survived).
bool HasParametricIntervals(const ScalingAnalysis& a) {
  return a.parametric_ci.has_value() && !a.parametric_ci->resampled.empty();
}
bool HasIsoFlopIntervals(const ScalingAnalysis& a) { return a.isoflop_ci.has_value() && !a.isoflop_ci->resampled.empty(); }
bool HasEnvelopeIntervals(const ScalingAnalysis& a) {
  return a.envelope_ci.has_value() && a.envelope_ci->failed < a.envelope_ci->resamples;
}

// Approach 3: the parametric law's table, how it was fitted and its bootstrap.
std::string ParametricSection(const ScalingAnalysis& a, const std::string& level) {
  const ReportOptions& o = a.options;
  const bool ci3 = HasParametricIntervals(a);
  std::string md;
  absl::StrAppend(&md, "## Approach 3: L(N, D) = E + A / N<sup>α</sup> + B / D<sup>β</sup>\n\n");
  if (a.parametric) {
    const ParametricLaw& law = a.parametric->law;
    absl::StrAppend(&md, "| parameter | estimate | ", level, " interval | bootstrap s.e. |\n|---|---|---|---|\n");
    auto row = [&](const char* name, double est, const Interval* i) {
      absl::StrAppend(&md, "| ", name, " | ", Fmt(est), " | ",
                      ci3 ? absl::StrCat("[", Fmt(i->lower), ", ", Fmt(i->upper), "]") : "n/a", " | ",
                      ci3 ? Fmt(i->std_error) : "n/a", " |\n");
    };
    const ParametricUncertainty* u = ci3 ? &*a.parametric_ci : nullptr;
    row("E", law.E, u ? &u->E : nullptr);
    row("A", law.A, u ? &u->A : nullptr);
    row("B", law.B, u ? &u->B : nullptr);
    row("α", law.alpha, u ? &u->alpha : nullptr);
    row("β", law.beta, u ? &u->beta : nullptr);
    row("a = β/(α+β) (N_opt ∝ C<sup>a</sup>)", ParamsExponent(law), u ? &u->params_exponent : nullptr);
    row("b = α/(α+β) (D_opt ∝ C<sup>b</sup>)", TokensExponent(law), u ? &u->tokens_exponent : nullptr);
    if (o.parametric.objective == ParametricObjective::kHuberLikelihood) {
      absl::StrAppend(&md, "\nFitted on ln L with the log-sum-exp form by maximum likelihood with Huber-distributed "
                      "errors (δ = ", Fmt(o.parametric.huber_delta), ") of fitted scale s = ", Fmt(a.parametric->scale),
                      " (as Besiroglu et al.'s published fit; in effect least absolute deviations, δ s = ",
                      Fmt(o.parametric.huber_delta * a.parametric->scale), "), from the best of ", a.parametric->starts,
                      " L-BFGS (Ceres) starts on the summed Huber loss (", a.parametric->starts_converged,
                      " converged); negative log-likelihood ", Fmt(a.parametric->objective), ".");
    } else {
      absl::StrAppend(&md, "\nFitted on ln L with the log-sum-exp form and a Huber loss (δ = ", Fmt(o.parametric.huber_delta),
                      ", summed over runs) by L-BFGS (Ceres) from ", a.parametric->starts, " starts (",
                      a.parametric->starts_converged, " converged); objective ", Fmt(a.parametric->objective), ".");
    }
    if (a.parametric_ci.has_value() && a.parametric_ci->resamples > 0 && !ci3) {
      // Not one resample could be fitted: there are no intervals, and the reader must know why.
      const ParametricUncertainty& ci = *a.parametric_ci;
      absl::StrAppend(&md, " Bootstrap: all ", ci.resamples, " resamples of the runs were dropped (",
                      ci.unidentifiable, " whose runs could not identify the law, ", ci.failed - ci.unidentifiable,
                      " whose fit had α <= 0, β <= 0 or failed), so there are no intervals: the runs barely "
                      "identify the law (add sizes or token counts).");
    }
    if (ci3) {
      const ParametricUncertainty& ci = *a.parametric_ci;
      absl::StrAppend(&md, " Bootstrap: ", ci.resamples, " resamples of the runs, each refitted from the "
                      "full-data optimum; ", ci.failed, " dropped (", ci.unidentifiable,
                      " whose runs could not identify the law: fewer than 3 distinct N or D, or along one line; ",
                      ci.failed - ci.unidentifiable, " whose fit had α <= 0, β <= 0 or failed).");
      if (!ci.Reliable(o.bootstrap.confidence)) {
        absl::StrAppend(&md, " **The intervals are unreliable:** ", ci.failed, " of ", ci.resamples,
                        " resamples were dropped, more than the ", Fmt(100 * (1 - o.bootstrap.confidence)),
                        "% the intervals leave in their tails, so percentile intervals over the rest understate "
                        "the uncertainty (the runs barely identify the law: add sizes or token counts).");
      }
    }
    absl::StrAppend(&md, " N_opt(C) = G (C/6)<sup>a</sup> with G = (αA / βB)<sup>1/(α+β)</sup>, D_opt = C / (6 N_opt).\n\n");
  } else {
    absl::StrAppend(&md, "Not fitted: ", a.parametric_error, ".\n\n");
  }
  return md;
}

// Approach 2: the per-budget minima and the power laws through them.
std::string IsoFlopSection(const ScalingAnalysis& a) {
  const bool ci2 = HasIsoFlopIntervals(a);
  std::string md;
  absl::StrAppend(&md, "## Approach 2: IsoFLOP parabolas\n\n");
  if (a.isoflop) {
    absl::StrAppend(&md, "| budget (FLOP) | runs | N_opt | D_opt | loss at minimum | minimum inside sampled N | used |\n"
                         "|---|---|---|---|---|---|---|\n");
    for (const IsoFlopCurve& c : a.isoflop->curves) {
      absl::StrAppend(&md, "| ", Flops(c.budget), " | ", c.runs.size(), " | ", c.used ? Fmt(c.opt_params) : "n/a",
                      " | ", c.used ? Fmt(c.opt_tokens) : "n/a", " | ", c.used ? Fmt(c.opt_loss) : "n/a", " | ",
                      c.used ? (c.vertex_inside ? "yes" : "**no: extrapolated**") : "n/a", " | ",
                      c.used ? "yes" : "no: " + c.reason, " |\n");
    }
    const IsoFlopFit& f = *a.isoflop;
    const IsoFlopUncertainty* u = ci2 ? &*a.isoflop_ci : nullptr;
    absl::StrAppend(&md, "\nN_opt = k C<sup>a</sup>: k = ", WithInterval(u ? u->params_coefficient : Interval{f.params_law.coefficient}, ci2),
                    ", a = ", WithInterval(u ? u->params_exponent : Interval{f.params_law.exponent}, ci2), ".  \n");
    absl::StrAppend(&md, "D_opt = k' C<sup>b</sup>: k' = ", WithInterval(u ? u->tokens_coefficient : Interval{f.tokens_law.coefficient}, ci2),
                    ", b = ", WithInterval(u ? u->tokens_exponent : Interval{f.tokens_law.exponent}, ci2), ".  \n");
    absl::StrAppend(&md, "Parabolas in ln N give N_opt and in ln D give D_opt; the bootstrap resamples runs within each "
                         "budget.\n\n");
  } else {
    absl::StrAppend(&md, "Not fitted: ", a.isoflop_error, ".\n\n");
  }
  return md;
}

// Approach 1: the power laws through the lower envelope of the training curves.
std::string EnvelopeSection(const ScalingAnalysis& a) {
  const bool ci1 = HasEnvelopeIntervals(a);
  std::string md;
  absl::StrAppend(&md, "## Approach 1: lower envelope of the training curves\n\n");
  if (a.envelope) {
    const EnvelopeFit& f = *a.envelope;
    const EnvelopeUncertainty* u = ci1 ? &*a.envelope_ci : nullptr;
    absl::StrAppend(&md, a.curves.size(), " curves; ", f.runs_on_envelope, " runs reach the envelope.  \n");
    absl::StrAppend(&md, "N_opt = k C<sup>a</sup>: k = ", WithInterval(u ? u->params_coefficient : Interval{f.params_law.coefficient}, ci1),
                    ", a = ", WithInterval(u ? u->params_exponent : Interval{f.params_law.exponent}, ci1), ".  \n");
    absl::StrAppend(&md, "D_opt = k' C<sup>b</sup>: k' = ", WithInterval(u ? u->tokens_coefficient : Interval{f.tokens_law.coefficient}, ci1),
                    ", b = ", WithInterval(u ? u->tokens_exponent : Interval{f.tokens_law.exponent}, ci1), ".  \n");
    absl::StrAppend(&md, "The bootstrap resamples whole runs (curves).\n\n");
  } else {
    absl::StrAppend(&md, "Not fitted: ", a.envelope_error, ".\n\n");
  }
  return md;
}

// Kaplan's single power laws in N, D and C.
std::string KaplanSection(const ScalingAnalysis& a) {
  std::string md;
  absl::StrAppend(&md, "## Kaplan single power laws L(X) = (X<sub>c</sub> / X)<sup>α<sub>X</sub></sup>\n\n");
  if (a.kaplan) {
    absl::StrAppend(&md, "| law | X<sub>c</sub> | α<sub>X</sub> | frontier runs |\n|---|---|---|---|\n");
    const std::pair<const char*, const KaplanLaw*> laws[] = {
        {"L(N)", &a.kaplan->params}, {"L(D)", &a.kaplan->tokens}, {"L(C)", &a.kaplan->flops}};
    for (const auto& [name, law] : laws) {
      absl::StrAppend(&md, "| ", name, " | ", Fmt(law->critical), " | ", Fmt(law->alpha), " | ", law->frontier.size(),
                      " |\n");
    }
    absl::StrAppend(&md, "\nEach is fitted to the runs whose loss beats every run with a smaller X.\n\n");
  } else {
    absl::StrAppend(&md, "Not fitted: ", a.kaplan_error, ".\n\n");
  }
  return md;
}

}  // namespace

ReportFiles RenderReport(const ScalingAnalysis& a) {
  const ReportOptions& o = a.options;
  const bool ci3 = HasParametricIntervals(a);
  const bool ci2 = HasIsoFlopIntervals(a);
  const std::string level = absl::StrFormat("%g%%", 100 * o.bootstrap.confidence);
  std::string md;
  absl::StrAppend(&md, "# Scaling-law report\n\n");
  absl::StrAppend(&md, "Results: `", a.results_path, "`: ", a.runs, " runs (", a.finished, " finished, ", a.failed,
                  " failed, ", a.diverged, " diverged). ");
  double n_lo = INFINITY, n_hi = 0, c_lo = INFINITY, c_hi = 0;
  std::set<double> budgets;
  for (const Observation& ob : a.observations) {
    n_lo = std::min(n_lo, ob.params);
    n_hi = std::max(n_hi, ob.params);
    c_lo = std::min(c_lo, ob.flops);
    c_hi = std::max(c_hi, ob.flops);
    if (ob.budget > 0) budgets.insert(ob.budget);
  }
  absl::StrAppend(&md, "N (", o.choice.non_embedding ? "non-embedding" : "with embeddings",
                  !a.mixture_of_experts ? ""
                  : o.choice.active     ? "; mixture-of-experts runs: active parameters, the experts a token uses"
                                        : "; mixture-of-experts runs: total parameters, every expert",
                  ") spans ", Fmt(n_lo),
                  " to ", Fmt(n_hi), ", compute ", Fmt(c_lo), " to ", Fmt(c_hi), " FLOP over ", budgets.size(),
                  " IsoFLOP budgets; the loss is the ", o.choice.best_loss ? "best" : "final", " validation loss.\n\n");
  if (!a.table_note.empty()) absl::StrAppend(&md, a.table_note, "\n\n");
  if (!a.selection_note.empty()) absl::StrAppend(&md, a.selection_note, "\n\n");
  if (!o.data_note.empty()) absl::StrAppend(&md, "**Data:** ", o.data_note, "\n\n");

  // Recommendation.
  absl::StrAppend(&md, "## Recommendation at C = ", Flops(o.target_flops), " FLOP\n\n");
  absl::StrAppend(&md, "Brackets: ", level, " bootstrap intervals (", o.bootstrap.resamples, " resamples).\n\n");
  absl::StrAppend(&md, "| | Approach 3 (parametric) | Approach 2 (IsoFLOP) | Approach 1 (envelope) |\n|---|---|---|---|\n");
  // Approach 2 gives no loss at the target: a power law through the minima has no irreducible term.
  std::string n3 = "n/a", d3 = "n/a", l3 = "n/a", r3 = "n/a", n2 = "n/a", d2 = "n/a", r2 = "n/a";
  if (a.parametric) {
    const Allocation at = OptimalAllocation(a.parametric->law, o.target_flops);
    Interval n{at.params, 0, 0, 0}, d{at.tokens, 0, 0, 0}, l{at.loss, 0, 0, 0};
    if (ci3) {
      n = a.parametric_ci->target.params;
      d = a.parametric_ci->target.tokens;
      l = a.parametric_ci->target.loss;
    }
    // Intervals over too few surviving resamples are marked where they are read (see Approach 3 below).
    const std::string mark = ci3 && !a.parametric_ci->Reliable(o.bootstrap.confidence) ? " (unreliable)" : "";
    n3 = WithInterval(n, ci3) + mark;
    d3 = WithInterval(d, ci3) + mark;
    l3 = WithInterval(l, ci3) + mark;
    r3 = Fmt(at.tokens / at.params);
  }
  if (a.isoflop) {
    Interval n{a.isoflop->params_law.At(o.target_flops), 0, 0, 0}, d{a.isoflop->tokens_law.At(o.target_flops), 0, 0, 0};
    if (ci2) {
      n = a.isoflop_ci->target.params;
      d = a.isoflop_ci->target.tokens;
    }
    n2 = WithInterval(n, ci2);
    d2 = WithInterval(d, ci2);
    r2 = Fmt(d.estimate / n.estimate);
  }
  std::string n1 = "n/a", d1 = "n/a", r1 = "n/a";
  const bool ci1 = HasEnvelopeIntervals(a);
  if (a.envelope) {
    Interval n{a.envelope->params_law.At(o.target_flops)}, d{a.envelope->tokens_law.At(o.target_flops)};
    if (ci1) {
      n = a.envelope_ci->target.params;
      d = a.envelope_ci->target.tokens;
    }
    n1 = WithInterval(n, ci1);
    d1 = WithInterval(d, ci1);
    r1 = Fmt(d.estimate / n.estimate);
  }
  absl::StrAppend(&md, "| parameters N_opt | ", n3, " | ", n2, " | ", n1, " |\n");
  absl::StrAppend(&md, "| tokens D_opt | ", d3, " | ", d2, " | ", d1, " |\n");
  absl::StrAppend(&md, "| tokens per parameter | ", r3, " | ", r2, " | ", r1, " |\n");
  absl::StrAppend(&md, "| predicted loss | ", l3, " | n/a | n/a |\n\n");
  absl::StrAppend(&md, ExtrapolationNote(a, budgets.empty() ? c_hi : *budgets.rbegin()));
  if (a.recommended_by == "Approach 2") {
    absl::StrAppend(
        &md, "The recipe is for Approach 2's N_opt and D_opt: Approach 3 could not be used (see below).\n\n");
  }
  if (a.recipe) {
    const Recipe& r = *a.recipe;
    absl::StrAppend(&md, "**Recipe:** d_model ", r.d_model, ", n_layers ", r.n_layers, ", n_heads ", r.n_heads,
                    ", batch size ", r.batch_size, " sequences, peak learning rate ", Fmt(r.lr), ". Basis: ", r.basis,
                    ".\n\n");
  } else {
    absl::StrAppend(&md, "**Recipe:** not available: ", a.recipe_error, ".\n\n");
  }
  absl::StrAppend(&md, RecipeExtrapolation(a, level));

  absl::StrAppend(&md, ParametricSection(a, level), IsoFlopSection(a), EnvelopeSection(a), KaplanSection(a),
                  HyperparameterSection(a, level), NoiseScaleSection(a),
                  WidthTransferSection(a));

  // Figures, in the order of ReportFileNames().
  ReportFiles report;
  report.files.push_back({"report.md", ""});
  absl::StrAppend(&md, "## Figures\n\n");
  const std::pair<std::string, std::string> figures[] = {
      {kReportFiles[1], IsoFlopFigure(a)},
      {kReportFiles[2], OptimalAllocationFigure(a, 0)},
      {kReportFiles[3], OptimalAllocationFigure(a, 1)},
      {kReportFiles[4], LossVsComputeFigure(a)},
      {kReportFiles[5], ResidualFigure(a)},
      {kReportFiles[6], NoiseScaleFigure(a)},
      {kReportFiles[7], WidthTransferFigure(a)},
  };
  for (const auto& [name, svg] : figures) {
    if (svg.empty()) continue;
    absl::StrAppend(&md, "![", name, "](", name, ")\n\n");
    report.files.push_back({name, svg});
  }
  report.files[0].second = md;
  return report;
}

std::vector<std::string> ReportFileNames() { return {std::begin(kReportFiles), std::end(kReportFiles)}; }

absl::Status WriteReport(const ReportFiles& report, const std::string& out_dir) {
  LMF_CHECK(!report.files.empty() && report.files[0].first == "report.md");  // committed last, below
  if (absl::Status s = MakeDirs(out_dir); !s.ok()) return s;
  const std::vector<std::string> own = ReportFileNames();
  // What an earlier report run killed while writing left: its temp files (<report file>.tmp.<pid>, the
  // pid no longer running), which no later run would otherwise remove.
  if (absl::StatusOr<std::vector<std::string>> names = ListFolder(out_dir); names.ok()) {
    for (const std::string& name : *names) {
      for (const std::string& file : own) {
        const std::string prefix = file + ".tmp.";
        int pid = 0;
        if (absl::StartsWith(name, prefix) && absl::SimpleAtoi(name.substr(prefix.size()), &pid) && pid > 0 &&
            ::kill(pid, 0) != 0 && errno == ESRCH) {
          if (absl::Status s = RemoveFileIfPresent(out_dir + "/" + name); !s.ok()) return s;
        }
      }
    }
  }
  // Stage 1, which changes nothing the reader sees: every file written in full and flushed to the disk
  // under its temp name, so a full disk or quota fails here and leaves the previous report as it was (the
  // temp files go with their writers); and every earlier report file this one will delete checked to be a
  // plain file, so that stage 2 cannot fail half-way on one.
  std::vector<AtomicFileWriter> staged;
  std::set<std::string> writing;
  for (const auto& [name, content] : report.files) {
    absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(out_dir + "/" + name);
    if (!writer.ok()) return writer.status();
    if (absl::Status s = writer->Write(content); !s.ok()) return s;
    if (absl::Status s = writer->Sync(); !s.ok()) return s;
    staged.push_back(*std::move(writer));
    writing.insert(name);
  }
  std::vector<std::string> stale;
  for (const std::string& name : own) {
    if (writing.count(name) && name != "report.md") continue;
    struct stat st;
    const std::string path = out_dir + "/" + name;
    if (::lstat(path.c_str(), &st) != 0) continue;  // not there
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is not a file: the report writes a file of that name; move it away"));
    }
    stale.push_back(path);
  }
  // Stage 2, unlinks and renames only: the earlier report.md goes, and the figures of the earlier report
  // that this one does not draw (an approach that no longer fits); then the new figures take their names,
  // and report.md comes last. So the folder never holds a report.md beside figures of another analysis: a
  // run killed among these steps leaves a folder without report.md, which the next run completes. Other
  // files in the folder (the user's) are never touched, and the folder itself (its permissions, a mount, a
  // link to it) stays as it is.
  for (const std::string& path : stale) {
    if (absl::Status s = RemoveFileIfPresent(path); !s.ok()) return s;
  }
  for (size_t i = staged.size(); i-- > 0;) {  // report.files[0], report.md, last
    if (absl::Status s = staged[i].Commit(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status RemoveReport(const std::string& out_dir) {
  // report.md first: a reader never finds it without its figures.
  for (const std::string& name : ReportFileNames()) {
    if (absl::Status s = RemoveFileIfPresent(out_dir + "/" + name); !s.ok()) return s;
  }
  ::rmdir(out_dir.c_str());  // when nothing else is in it; a folder with other files stays
  return absl::OkStatus();
}

absl::StatusOr<ScalingAnalysis> MakeReport(const std::string& results_path, const ReportOptions& options,
                                           const std::string& out_dir) {
  absl::StatusOr<ResultsTable> table = ReadResults(results_path);
  if (!table.ok()) return table.status();
  absl::StatusOr<ScalingAnalysis> analysis = Analyze(*table, options);
  if (!analysis.ok()) return analysis.status();
  absl::Status s = WriteReport(RenderReport(*analysis), out_dir);
  if (!s.ok()) return s;
  return analysis;
}

}  // namespace lmf::scaling
