// The scaling analysis behind the report (see analysis.h).
#include "scaling/reporting/analysis.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace lmf::scaling {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::vector<std::string> AbsentRecipeColumns(const ResultsTable& table) {
  std::vector<std::string> absent;
  for (const char* column : {"d_model", "n_layers", "n_heads", "batch_size", "lr"}) {
    if (!table.Has(column)) absent.push_back(column);
  }
  return absent;
}

absl::StatusOr<Recipe> RecipeFromBestRuns(double params, double /*tokens*/, double flops,
                                          const ResultsTable& table, const ObservationChoice& choice) {
  if (const std::vector<std::string> absent = AbsentRecipeColumns(table); !absent.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the table has no ", absl::StrJoin(absent, ", "), " column", absent.size() > 1 ? "s" : "",
        ": a recipe takes the shape, batch size and learning rate of each budget's best run, so only N_opt and "
        "D_opt are recommended (a sweep that records them, or a model config through a RecipeHook, gives the rest)"));
  }
  auto loss = [&](const RunResult& r) { return choice.best_loss ? r.best_val_loss : r.final_loss; };
  std::map<double, const RunResult*> best;
  for (const RunResult& r : table.runs) {
    if (r.status != RunStatus::kFinished || !(r.budget_flops > 0)) continue;
    const RunResult*& b = best[r.budget_flops];
    if (b == nullptr || loss(r) < loss(*b)) b = &r;
  }
  if (best.size() < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("extrapolating batch size and learning rate needs the best runs of 2 IsoFLOP budgets; the table "
                     "has ", best.size()));
  }
  std::vector<double> c, batch, lr, aspect, head;
  for (const auto& [budget, run] : best) {
    c.push_back(budget);
    batch.push_back(static_cast<double>(run->batch_size));
    lr.push_back(run->lr);
    aspect.push_back(static_cast<double>(run->d_model) / run->n_layers);
    head.push_back(static_cast<double>(run->d_model) / run->n_heads);
  }
  absl::StatusOr<PowerLaw> batch_law = FitPowerLaw(c, batch);
  absl::StatusOr<PowerLaw> lr_law = FitPowerLaw(c, lr);
  if (!batch_law.ok()) return batch_law.status();
  if (!lr_law.ok()) return lr_law.status();
  // A value every budget's best run shares was not varied (or did not matter): say so rather than quote a
  // power law of exponent 0 as an extrapolation.
  auto constant = [](const std::vector<double>& values) {
    return std::all_of(values.begin(), values.end(), [&](double v) { return v == values[0]; });
  };
  auto describe = [&](const char* name, const std::vector<double>& values, const PowerLaw& law) {
    if (constant(values)) {
      return absl::StrFormat("%s %.3g as in every budget's best run (constant, not extrapolated)", name,
                             values[0]);
    }
    return absl::StrFormat("%s = %.3g C^%.3f", name, law.coefficient, law.exponent);
  };
  // Every whole number of the recipe must be one a double holds exactly (up to 2^53): a power law taken far
  // past the swept budgets leaves that range, and a recipe that wrapped or clamped it would be wrong.
  constexpr double kMaxWhole = 9007199254740992.0;  // 2^53
  auto beyond = [&](const std::string& what, double value) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s at %g FLOP is %g, beyond 2^53 (the whole numbers a recipe can state exactly): the swept budgets "
        "(%g to %g FLOP) do not extrapolate that far",
        what, flops, value, c.front(), c.back()));
  };
  Recipe recipe;
  if (constant(batch)) {
    recipe.batch_size = static_cast<int64_t>(batch[0]);
  } else {
    const double sequences = batch_law->At(flops);
    if (!(sequences <= kMaxWhole)) {
      return beyond(absl::StrCat("the batch size ", describe("batch", batch, *batch_law)), sequences);
    }
    // Batch sizes are kept to powers of two (at least 1).
    recipe.batch_size = int64_t{1} << std::max(0, static_cast<int>(std::lround(std::log2(sequences))));
  }
  recipe.lr = constant(lr) ? lr[0] : lr_law->At(flops);
  if (!(recipe.lr > 0) || !std::isfinite(recipe.lr)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the learning rate %s gives %g at %g FLOP: not a usable learning rate (the swept "
                        "budgets span %g to %g FLOP)",
                        describe("lr", lr, *lr_law), recipe.lr, flops, c.front(), c.back()));
  }
  const double ratio = Median(aspect), head_size = Median(head);
  // 12 L d^2 = N with d = ratio L  =>  L = (N / (12 ratio^2))^(1/3).
  const double layers = std::max(1.0, std::round(std::cbrt(params / (12 * ratio * ratio))));
  if (!(layers <= kMaxWhole)) return beyond("n_layers for N_opt", layers);
  recipe.n_layers = static_cast<int64_t>(layers);
  const double d = std::sqrt(params / (12.0 * layers));
  const int64_t h = std::max<int64_t>(1, std::llround(head_size));
  const double heads = std::max(1.0, std::round(d / h));
  if (!(heads * h <= kMaxWhole)) return beyond("d_model for N_opt", heads * h);
  recipe.n_heads = static_cast<int64_t>(heads);
  recipe.d_model = recipe.n_heads * h;
  recipe.basis =
      absl::StrCat("from the best run of each of the ", best.size(),
                   " budgets: ", describe("batch", batch, *batch_law), ", ", describe("lr", lr, *lr_law),
                   "; shape: median d_model/n_layers = ", absl::StrFormat("%.1f", ratio), ", head size ", h,
                   ", sized by 12 n_layers d_model^2 = N (no model config given)");
  return recipe;
}

namespace {

// What the report says about a table that lacked columns (a published sweep's N, D or C, and loss).
std::string TableNote(const ResultsTable& table) {
  std::vector<std::string> absent;  // in the order the results table lists them (curve_file is optional anyway)
  for (const char* column : {"run", "budget_flops", "params", "non_embedding_params", "best_val_loss", "d_model",
                             "n_layers", "n_heads", "batch_size", "lr", "status"}) {
    if (!table.Has(column)) absent.push_back(column);
  }
  std::string note;
  if (!absent.empty()) {
    absl::StrAppend(&note, "The table has no ", absl::StrJoin(absent, ", "), " column", absent.size() > 1 ? "s" : "",
                    ".");
  }
  const char* n = table.Has("params") ? "params" : "non_embedding_params";
  const char* space = note.empty() ? "" : " ";
  if (!table.Has("tokens")) absl::StrAppend(&note, space, "Tokens are derived as D = flops / (6 ", n, ").");
  if (!table.Has("flops")) absl::StrAppend(&note, space, "Compute is derived as C = 6 ", n, " tokens.");
  return note;
}

// The batch x lr grid of each IsoFLOP budget: its finished runs at the model size with the most runs there
// (a sweep that also varies N at a budget keeps its grid at one size, as DeepSeek LLM does; runs of other
// sizes differ in loss for another reason).
std::vector<HyperparameterRun> GridRuns(const ResultsTable& table, const ObservationChoice& choice) {
  std::map<double, std::map<double, std::vector<const RunResult*>>> by_budget;  // budget -> N -> runs
  for (const RunResult& r : table.runs) {
    if (r.status != RunStatus::kFinished || !(r.budget_flops > 0)) continue;
    by_budget[r.budget_flops][ParamCount(r, choice)].push_back(&r);
  }
  std::vector<HyperparameterRun> runs;
  for (const auto& [budget, sizes] : by_budget) {
    const std::vector<const RunResult*>* grid = nullptr;
    for (const auto& [n, members] : sizes)
      if (grid == nullptr || members.size() > grid->size()) grid = &members;
    for (const RunResult* r : *grid) {
      runs.push_back({budget, static_cast<double>(r->batch_size), r->lr, choice.best_loss ? r->best_val_loss : r->final_loss});
    }
  }
  return runs;
}

// The table the N/D fits see: where an IsoFLOP budget has several finished runs of one model size (a point
// grid's batch x lr settings, experiments/sweep), only the best of them by the loss `choice` reads, each size
// at its best setting; the batch/lr fits see them all. `left_out` counts the runs dropped.
ResultsTable BestRunPerModel(const ResultsTable& table, const ObservationChoice& choice, int* left_out) {
  auto loss = [&](const RunResult& r) { return choice.best_loss ? r.best_val_loss : r.final_loss; };
  std::map<std::tuple<double, double, double>, size_t> best;  // (budget, N, non-embedding N) -> run index
  for (size_t i = 0; i < table.runs.size(); ++i) {
    const RunResult& r = table.runs[i];
    if (r.status != RunStatus::kFinished || !(r.budget_flops > 0)) continue;
    const auto [it, fresh] = best.insert({{r.budget_flops, r.params, r.non_embedding_params}, i});
    if (!fresh && loss(r) < loss(table.runs[it->second])) it->second = i;
  }
  ResultsTable out = table;
  out.runs.clear();
  *left_out = 0;
  for (size_t i = 0; i < table.runs.size(); ++i) {
    const RunResult& r = table.runs[i];
    const bool grouped = r.status == RunStatus::kFinished && r.budget_flops > 0;
    if (grouped && best.at({r.budget_flops, r.params, r.non_embedding_params}) != i) {
      ++*left_out;
      continue;
    }
    out.runs.push_back(r);
  }
  return out;
}

// The batch/lr laws, when the table has batch_size and lr and some budget's grid has 3 or more of each.
void FitHyperparameters(const ResultsTable& table, const ReportOptions& options, ScalingAnalysis* a) {
  if (!table.Has("batch_size") || !table.Has("lr")) {
    a->hyperparameters_error = "the table has no batch_size and lr columns";
    return;
  }
  a->hyperparameter_runs = GridRuns(table, options.choice);
  std::map<double, std::pair<std::set<double>, std::set<double>>> settings;  // budget -> batch sizes, lrs
  for (const HyperparameterRun& r : a->hyperparameter_runs) {
    settings[r.budget].first.insert(r.batch_size);
    settings[r.budget].second.insert(r.lr);
  }
  const bool grid = std::any_of(settings.begin(), settings.end(), [](const auto& budget) {
    return budget.second.first.size() >= 3 && budget.second.second.size() >= 3;
  });
  if (!grid) {
    a->hyperparameters_error =
        "no IsoFLOP budget's runs at one model size form a batch size x learning rate grid (3 or more of each)";
    return;
  }
  absl::StatusOr<HyperparameterFit> fit = FitHyperparameterLaws(a->hyperparameter_runs, options.hyperparameters);
  if (!fit.ok()) {
    a->hyperparameters_error = std::string(fit.status().message());
    return;
  }
  a->hyperparameters = *fit;
  if (options.bootstrap.resamples > 0) {
    absl::StatusOr<HyperparameterUncertainty> ci = BootstrapHyperparameterLaws(
        a->hyperparameter_runs, *fit, options.target_flops, options.bootstrap, options.hyperparameters);
    if (ci.ok()) a->hyperparameters_ci = *ci;
  }
}

// The recipe with its batch size and learning rate from the fitted laws at `flops` (batch rounded to a power
// of two, as RecipeFromBestRuns does), its basis saying so.
absl::StatusOr<Recipe> WithHyperparameterLaws(const HyperparameterFit& fit, double flops, Recipe recipe) {
  const double batch = fit.batch_law.At(flops), lr = fit.lr_law.At(flops);
  if (!(batch <= 9007199254740992.0) || !(lr > 0) || !std::isfinite(lr)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the batch/lr laws give batch %g and lr %g at %g FLOP: not a usable setting (beyond 2^53, or not a "
        "positive learning rate)", batch, lr, flops));
  }
  recipe.batch_size = int64_t{1} << std::max(0, static_cast<int>(std::lround(std::log2(batch))));
  recipe.lr = lr;
  absl::StrAppend(&recipe.basis, "; batch size and lr then replaced by the grids' laws B_opt = ",
                  absl::StrFormat("%.3g C^%.3f, lr_opt = %.3g C^%.3f", fit.batch_law.coefficient,
                                  fit.batch_law.exponent, fit.lr_law.coefficient, fit.lr_law.exponent),
                  " (", fit.budgets_used, " budgets) at the target, the batch rounded to a power of two");
  return recipe;
}

}  // namespace

std::vector<std::string> FittedApproaches(const ScalingAnalysis& a) {
  std::vector<std::string> fitted;
  if (a.parametric) fitted.push_back("Approach 3");
  if (a.isoflop) fitted.push_back("Approach 2");
  if (a.envelope) fitted.push_back("Approach 1");
  if (a.kaplan) fitted.push_back("Kaplan laws");
  if (a.hyperparameters) fitted.push_back("batch/lr laws");
  return fitted;
}

absl::StatusOr<ScalingAnalysis> Analyze(const ResultsTable& table, const ReportOptions& options) {
  if (!(options.target_flops > 0) || !std::isfinite(options.target_flops)) {
    return absl::InvalidArgumentError(absl::StrCat("--target_flops must be a positive number of FLOP, got ",
                                                   options.target_flops));
  }
  if (options.bootstrap.resamples < 0 || options.bootstrap.resamples > kMaxBootstrapResamples) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bootstrap resamples must be 0 to ", kMaxBootstrapResamples, ", got ", options.bootstrap.resamples));
  }
  ScalingAnalysis a;
  a.options = options;
  a.results_path = table.path;
  a.runs = static_cast<int>(table.runs.size());
  a.mixture_of_experts = table.HasMixtureOfExperts();
  for (const RunResult& r : table.runs) {
    a.finished += r.status == RunStatus::kFinished;
    a.failed += r.status == RunStatus::kFailed;
    a.diverged += r.status == RunStatus::kDiverged;
  }
  int left_out = 0;
  const ResultsTable fitted = BestRunPerModel(table, options.choice, &left_out);
  if (left_out > 0) {
    a.selection_note = absl::StrCat("**Batch/lr grids:** the N/D fits take each model size's best run at its "
                                    "budget; ", left_out, " other runs of those sizes (their batch size x "
                                    "learning rate grids) go to the batch/lr fits only.");
  }
  absl::StatusOr<Observations> observations = ToObservations(fitted, options.choice);
  if (!observations.ok()) return observations.status();
  a.observations = std::move(*observations);
  a.table_note = TableNote(table);
  if (a.observations.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(table.path, ": no finished run to fit (", a.failed, " failed, ",
                                                      a.diverged, " diverged)"));
  }

  absl::StatusOr<ParametricFit> p = FitParametric(a.observations, options.parametric);
  if (p.ok()) {
    // Exponents near 0 can push the closed form past double range at the target.
    const Allocation at = OptimalAllocation(p->law, options.target_flops);
    if (!(at.params > 0 && std::isfinite(at.params) && at.tokens > 0 && std::isfinite(at.tokens) &&
          std::isfinite(at.loss))) {
      p = absl::FailedPreconditionError(
          absl::StrFormat("the best fit (alpha = %.3g, beta = %.3g) gives N_opt = %g, D_opt = %g at %g FLOP: "
                          "not a usable allocation",
                          p->law.alpha, p->law.beta, at.params, at.tokens, options.target_flops));
    }
  }
  if (p.ok()) {
    a.parametric = *p;
    if (options.bootstrap.resamples > 0) {
      absl::StatusOr<ParametricUncertainty> ci =
          BootstrapParametric(a.observations, *p, options.target_flops, options.bootstrap, options.parametric);
      if (ci.ok()) a.parametric_ci = *ci;
    }
  } else {
    a.parametric_error = std::string(p.status().message());
  }

  bool grouped = true;
  for (const Observation& o : a.observations) grouped = grouped && o.budget > 0;
  if (grouped) {
    absl::StatusOr<IsoFlopFit> iso = FitIsoFlop(a.observations);
    if (iso.ok()) {
      a.isoflop = *iso;
      if (options.bootstrap.resamples > 0) {
        absl::StatusOr<IsoFlopUncertainty> ci =
            BootstrapIsoFlop(a.observations, *iso, options.target_flops, options.bootstrap);
        if (ci.ok()) a.isoflop_ci = *ci;
      }
    } else {
      a.isoflop_error = std::string(iso.status().message());
    }
  } else {
    a.isoflop_error = table.Has("budget_flops") ? "some finished runs have budget_flops = 0 (no IsoFLOP group)"
                                                : "the table has no budget_flops column (no IsoFLOP groups)";
  }

  absl::StatusOr<std::vector<TrainingCurve>> curves = ReadTrainingCurves(fitted, options.choice);
  if (!curves.ok()) {
    a.envelope_error = std::string(curves.status().message());
  } else if (curves->empty()) {
    a.envelope_error = "no run names a training-curve file (column curve_file)";
  } else {
    a.curves = *curves;
    absl::StatusOr<EnvelopeFit> env = FitEnvelope(a.curves, EnvelopeOptions());
    if (env.ok()) {
      a.envelope = *env;
      if (options.bootstrap.resamples > 0) {
        absl::StatusOr<EnvelopeUncertainty> ci =
            BootstrapEnvelope(a.curves, *env, options.target_flops, options.bootstrap);
        if (ci.ok()) a.envelope_ci = *ci;
      }
    } else {
      a.envelope_error = std::string(env.status().message());
    }
  }

  absl::StatusOr<KaplanLaws> kaplan = FitKaplanLaws(a.observations);
  if (kaplan.ok()) {
    a.kaplan = *kaplan;
  } else {
    a.kaplan_error = std::string(kaplan.status().message());
  }

  FitHyperparameters(table, options, &a);
  if (absl::StatusOr<std::vector<WidthLrCurve>> widths = WidthLrCurves(table, options.choice); widths.ok()) {
    a.width_lr_curves = *std::move(widths);
  } else {
    a.width_lr_error = std::string(widths.status().message());
  }
  if (absl::StatusOr<std::vector<NoiseScaleCurve>> noise = ReadNoiseScaleCurves(table); !noise.ok()) {
    a.noise_error = std::string(noise.status().message());
  } else if (noise->empty()) {
    a.noise_error = "no run logged it (metrics.jsonl beside a run's curve file, with run.grad_accum_steps >= 2)";
  } else {
    a.noise_curves = *std::move(noise);
  }

  // The recommendation: Approach 3 where it fitted, else Approach 2 (Approach 1 only shows its laws: its
  // envelope rests on training curves under one schedule each, not on finished runs).
  double n = 0, d = 0;
  if (a.parametric) {
    const Allocation at = OptimalAllocation(a.parametric->law, options.target_flops);
    n = at.params;
    d = at.tokens;
    a.recommended_by = "Approach 3";
  } else if (a.isoflop) {
    n = a.isoflop->params_law.At(options.target_flops);
    d = a.isoflop->tokens_law.At(options.target_flops);
    a.recommended_by = "Approach 2";
  }
  if (n > 0) {
    absl::StatusOr<Recipe> recipe =
        options.recipe ? options.recipe(n, d, options.target_flops, table, options.choice)
                       : RecipeFromBestRuns(n, d, options.target_flops, table, options.choice);
    if (recipe.ok() && a.hyperparameters) recipe = WithHyperparameterLaws(*a.hyperparameters, options.target_flops, *recipe);
    if (recipe.ok()) {
      a.recipe = *recipe;
    } else {
      a.recipe_error = std::string(recipe.status().message());
    }
  } else {
    a.recipe_error = "neither Approach 3 nor Approach 2 could be fitted";
  }
  return a;
}

}  // namespace lmf::scaling
