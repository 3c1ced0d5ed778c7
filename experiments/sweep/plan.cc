// Sweep expansion (see plan.h): base experiment + sweep-wide overrides + each run's own overrides, then
// the same validation and default resolution a single training run gets.
#include "experiments/sweep/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "config/loader.h"
#include "config/overrides.h"
#include "config/run_length.h"
#include "config/validation.h"
#include "experiments/schedule/lr_schedule.h"
#include "experiments/sweep/grid.h"

namespace lmf::sweep {
namespace {

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string Absolute(const std::string& base, const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  return absl::StrCat(base, "/", path);
}

absl::Status Error(const std::string& source, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", message));
}

// "C1e15", "C3.2e17": a folder-friendly budget.
std::string BudgetTag(double flops) {
  const int exponent = static_cast<int>(std::floor(std::log10(flops)));
  const double mantissa = flops / std::pow(10.0, exponent);
  std::string m = absl::StrFormat("%.3g", mantissa);
  return absl::StrCat("C", m, "e", exponent);
}

// Folder-safe run name: letters, digits, '.', '_', '-', '=', ',' kept; anything else becomes '_'.
std::string SafeName(const std::string& name) {
  std::string out = name;
  for (char& c : out) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
                    c == '=' || c == ',' || c == '+';
    if (!ok) c = '_';
  }
  return out;
}

}  // namespace

namespace {

// How the base experiment shares key/value heads, which every member of the family keeps.
struct KvSharing {
  enum Kind { kMultiHead, kMultiQuery, kGrouped } kind = kMultiHead;
  int64_t group = 1;  // query heads per key/value head (kGrouped); widths step by head_size * group
};

KvSharing BaseKvSharing(const config::Experiment& base) {
  const auto& m = base.model();
  KvSharing k;
  if (m.n_kv_heads() <= 0 || m.n_heads() <= 1 || m.n_kv_heads() >= m.n_heads()) return k;
  if (m.n_kv_heads() == 1) {
    k.kind = KvSharing::kMultiQuery;
  } else {
    k.kind = KvSharing::kGrouped;
    // CheckFamilyBounds refuses a base whose n_kv_heads does not divide its n_heads.
    k.group = m.n_heads() / m.n_kv_heads();
  }
  return k;
}

}  // namespace

std::vector<ModelShape> FamilyShapes(const config::ShapeFamily& family, const config::Experiment& base) {
  const auto& m = base.model();
  const double base_ffn_ratio = m.d_model() > 0 && m.has_ffn() && m.ffn().d_ff() > 0
                                    ? static_cast<double>(m.ffn().d_ff()) / m.d_model()
                                    : 4.0;
  const double ffn_ratio = family.ffn_ratio() > 0 ? family.ffn_ratio() : base_ffn_ratio;
  const int64_t head = family.head_size();
  const KvSharing kv = BaseKvSharing(base);
  const int64_t unit = head * kv.group;  // widths are multiples of this: whole groups of heads
  std::vector<ModelShape> shapes;
  for (int64_t layers = family.min_layers(); layers <= family.max_layers(); ++layers) {
    const double center = family.aspect_ratio() * layers;
    const int64_t center_width = std::max<int64_t>(unit, std::llround(center / unit) * unit);
    std::vector<int64_t> widths = {center_width};
    if (family.aspect_spread() > 1) {
      const int64_t lo =
          std::max<int64_t>(1, static_cast<int64_t>(std::ceil(center / family.aspect_spread() / unit)));
      const int64_t hi = static_cast<int64_t>(std::floor(center * family.aspect_spread() / unit));
      for (int64_t k = lo; k <= hi; ++k) {
        if (k * unit != center_width) widths.push_back(k * unit);
      }
    }
    for (const int64_t d : widths) {
      ModelShape s;
      s.d_model = d;
      s.n_layers = layers;
      s.n_heads = d / head;
      s.n_kv_heads = kv.kind == KvSharing::kMultiQuery ? 1 : s.n_heads / kv.group;
      s.d_ff = (static_cast<int64_t>(std::ceil(ffn_ratio * d)) + 15) / 16 * 16;
      shapes.push_back(s);
    }
  }
  return shapes;
}

double FamilyShapeCount(const config::ShapeFamily& family, const config::Experiment& base,
                        double stop_above) {
  const double unit =
      static_cast<double>(family.head_size()) * static_cast<double>(BaseKvSharing(base).group);
  double shapes = 0;
  // Each depth has at least one shape, so this stops within stop_above + 1 depths.
  for (int64_t layers = family.min_layers(); layers <= family.max_layers() && shapes <= stop_above;
       ++layers) {
    // As FamilyShapes, in double: the center width, and the multiples of the width unit in the aspect band.
    const double c = family.aspect_ratio() * static_cast<double>(layers);
    const double center_k = std::max(1.0, std::round(c / unit));
    double widths = 1;
    if (family.aspect_spread() > 1) {
      const double lo = std::max(1.0, std::ceil(c / family.aspect_spread() / unit));
      const double hi = std::floor(c * family.aspect_spread() / unit);
      widths = std::max(0.0, hi - lo + 1) + (center_k >= lo && center_k <= hi ? 0 : 1);
    }
    shapes += widths;
  }
  return shapes;
}

absl::Status CheckFamilyBounds(const config::ShapeFamily& family, const config::Experiment& base,
                               const std::string& where) {
  const double head = family.head_size();
  if (!(family.head_size() > 0 && family.aspect_ratio() > 0 && std::isfinite(family.aspect_ratio()) &&
        family.min_layers() >= 1 && family.max_layers() >= family.min_layers() &&
        family.aspect_spread() >= 1 && std::isfinite(family.aspect_spread()) && family.ffn_ratio() >= 0 &&
        std::isfinite(family.ffn_ratio()))) {
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     " needs head_size > 0, a finite aspect_ratio > 0, a finite aspect_spread >= 1, a finite "
                     "ffn_ratio >= 0 (0: the base's) and 1 <= min_layers <= max_layers; got head_size ",
                     family.head_size(), ", aspect_ratio ", family.aspect_ratio(), ", aspect_spread ",
                     family.aspect_spread(), ", ffn_ratio ", family.ffn_ratio(), ", min_layers ",
                     family.min_layers(), ", max_layers ", family.max_layers()));
  }
  const auto& m = base.model();
  if (m.n_kv_heads() > 1 && m.n_kv_heads() < m.n_heads() && m.n_heads() % m.n_kv_heads() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": the base's model.n_kv_heads=", m.n_kv_heads(),
        " does not divide its model.n_heads=", m.n_heads(),
        "; the family keeps the base's query heads per key/value head, which must be a whole number"));
  }
  // The widest shape is at max_layers, the top of its aspect band; its d_model, n_heads and d_ff go into
  // 32-bit config fields.
  constexpr double kMaxField = 2147483647.0;
  const double unit = head * static_cast<double>(BaseKvSharing(base).group);
  const double center = family.aspect_ratio() * family.max_layers();
  const double widest = std::max(
      {unit, std::round(center / unit) * unit,
       family.aspect_spread() > 1 ? std::floor(center * family.aspect_spread() / unit) * unit : 0.0});
  if (!(widest <= kMaxField)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: its widest shape (aspect_ratio %g x max_layers %d x aspect_spread %g) has d_model %.4g; "
        "model.d_model is a 32-bit field (at most %.0f)",
        where, family.aspect_ratio(), family.max_layers(), family.aspect_spread(), widest, kMaxField));
  }
  const double ffn_ratio = family.ffn_ratio() > 0 ? family.ffn_ratio()
                           : m.d_model() > 0 && m.has_ffn() && m.ffn().d_ff() > 0
                               ? static_cast<double>(m.ffn().d_ff()) / m.d_model()
                               : 4.0;
  if (!(std::ceil(ffn_ratio * widest) + 15 <= kMaxField)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: its widest shape (d_model %.0f) has d_ff = %g x d_model = %.4g; model.ffn.d_ff "
                        "is a 32-bit field (at most %.0f)",
                        where, widest, ffn_ratio, ffn_ratio * widest, kMaxField));
  }
  // Every shape is built and sized before planning: count them first.
  if (FamilyShapeCount(family, base, kMaxFamilyShapes) > kMaxFamilyShapes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s has more than %d shapes (layers %d..%d; each depth has the widths within a factor aspect_spread "
        "%g of aspect_ratio %g x layers, in steps of head_size %d), and each is sized before planning: lower "
        "max_layers or aspect_spread, or raise head_size",
        where, static_cast<int>(kMaxFamilyShapes), family.min_layers(), family.max_layers(),
        family.aspect_spread(), family.aspect_ratio(), family.head_size()));
  }
  return absl::OkStatus();
}

config::Experiment WithoutBranchWiring(const config::Experiment& experiment) {
  config::Experiment identity = experiment;
  identity.mutable_run()->clear_init_from();
  identity.mutable_run()->clear_checkpoint_steps();
  identity.mutable_run()->clear_eval_steps();  // a trunk's evaluations for its branches' curves
  return identity;
}

std::vector<std::string> ShapeOverrides(const ModelShape& s) {
  return {absl::StrCat("model.d_model=", s.d_model), absl::StrCat("model.n_layers=", s.n_layers),
          absl::StrCat("model.n_heads=", s.n_heads), absl::StrCat("model.n_kv_heads=", s.n_kv_heads),
          absl::StrCat("model.ffn.d_ff=", s.d_ff)};
}

namespace {

absl::Status ApplyAll(const std::vector<std::string>& assignments, config::Experiment* e,
                      const std::string& where) {
  for (const std::string& a : assignments) {
    if (absl::Status s = config::ApplyOverride(a, e); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

// Validates and resolves one run and fills its size, steps, tokens and FLOPs.
absl::Status FinishRun(const std::string& source, const std::string& sweep_name,
                       const std::string& output_dir, int evals_per_run, const ModelSizer& sizer,
                       PlannedRun* run) {
  config::Experiment& e = run->experiment;
  e.set_name(absl::StrCat(sweep_name, "/", run->name));
  e.mutable_run()->set_output_dir(absl::StrCat(output_dir, "/runs/", run->name));
  const std::string where = absl::StrCat(source, " (run ", run->name, ")");
  if (evals_per_run > 0) {
    e.mutable_run()->set_eval_interval(std::max<int64_t>(1, config::TotalSteps(e) / evals_per_run));
  }
  if (absl::Status s = config::ValidateExperiment(e, where); !s.ok()) return s;
  if (e.run().eval_tokens() <= 0) {
    // Refused here, not after the run has trained: the results table and the fits need validation losses.
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": run.eval_tokens=", e.run().eval_tokens(),
        ": a sweep records each run's validation loss; set data.val_tokens and run.eval_tokens in the base "
        "experiment or the sweep's `set`"));
  }
  config::ResolveDefaults(&e);
  auto size = sizer(e);
  if (!size.ok()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", size.status().message()));
  run->size = *size;
  run->steps = config::TotalSteps(e);
  run->tokens = static_cast<double>(run->steps) * static_cast<double>(config::TokensPerStep(e));
  run->flops = run->tokens * run->size.training_flops_per_token;
  return absl::OkStatus();
}

// Why a grid axis (sweep.grid, or with `isoflop` sweep.isoflop.point_grid) may not be over `field`: the
// sweep sets it in every run itself, and an axis over it would be overwritten without a word. "" where it may.
std::string SweepSetsField(const config::Sweep& sweep, bool isoflop, const std::string& field) {
  if (field == "name") return "each run is named <sweep name>/<run name>";
  if (field == "run.output_dir") return "each run's folder is <sweep output_dir>/runs/<run name>";
  if (field == "run.eval_interval" && sweep.evals_per_run() > 0) {
    return "sweep.evals_per_run sets it from each run's length";
  }
  if (sweep.wsd_branches() && (field == "run.init_from" || field == "run.checkpoint_steps" || field == "run.eval_steps")) {
    return "sweep.wsd_branches sets it to wire branches to their trunks";
  }
  if (isoflop && absl::StartsWith(field, "model.")) {
    return "the IsoFLOP design sets each run's model shape, and the sizes and token counts follow from it";
  }
  if (isoflop && (field == "run.max_steps" || field == "run.max_tokens")) {
    return "the IsoFLOP design sets each run's length from its budget";
  }
  return "";
}

absl::Status PlanGrid(const config::Sweep& sweep, const std::string& source, const config::Experiment& base,
                      std::vector<PlannedRun>* runs) {
  absl::StatusOr<std::vector<GridPoint>> points = ExpandGrid(
      sweep.grid(), source, "sweep.grid",
      [&](const std::string& field) { return SweepSetsField(sweep, /*isoflop=*/false, field); }, 10000);
  if (!points.ok()) return points.status();
  absl::StatusOr<std::vector<config::Experiment>> configs = ApplyGrid(base, *points, source, "sweep.grid");
  if (!configs.ok()) return configs.status();
  for (size_t i = 0; i < points->size(); ++i) {
    PlannedRun run;
    run.name = SafeName((*points)[i].name);
    run.experiment = std::move((*configs)[i]);
    runs->push_back(std::move(run));
  }
  return absl::OkStatus();
}

// Tokens per optimizer step before defaults are resolved: run.batch_size x run.grad_accum_steps (at least 1)
// x model.context_length.
int64_t TokensPerStepOf(const config::Experiment& e) {
  return static_cast<int64_t>(e.run().batch_size()) * std::max(1, e.run().grad_accum_steps()) *
         e.model().context_length();
}

// grid_lr_prior (sweep.proto): with a point grid, a finite exponent and a positive reference budget. That
// the grid has an optimizer.lr axis to scale, ScaleAxis checks.
absl::Status CheckLrPrior(const config::IsoFlopDesign& design, const std::string& source) {
  if (!design.has_grid_lr_prior()) return absl::OkStatus();
  const config::PowerLawPrior& prior = design.grid_lr_prior();
  if (!design.has_point_grid()) {
    return Error(source, "sweep.isoflop.grid_lr_prior scales the point grid's optimizer.lr axis, but "
                         "sweep.isoflop has no point_grid");
  }
  if (!prior.has_exponent() || !std::isfinite(prior.exponent())) {
    return Error(source, absl::StrCat("sweep.isoflop.grid_lr_prior.exponent=",
                                      prior.has_exponent() ? absl::StrCat(prior.exponent()) : "(unset)",
                                      " must be a finite number (a pilot sweep's fitted lr_opt(C) exponent)"));
  }
  if (!(prior.reference_flops() > 0) || !std::isfinite(prior.reference_flops())) {
    return Error(source, absl::StrCat("sweep.isoflop.grid_lr_prior.reference_flops=",
                                      prior.has_reference_flops() ? absl::StrCat(prior.reference_flops()) : "(unset)",
                                      " must be a positive FLOP budget (where the lr axis's values hold as written)"));
  }
  return absl::OkStatus();
}

absl::Status PlanIsoFlop(const config::Sweep& sweep, const std::string& source,
                         const config::Experiment& base, const ModelSizer& sizer,
                         std::vector<PlannedRun>* runs) {
  const auto& design = sweep.isoflop();
  if (design.budgets_size() == 0)
    return Error(source, "sweep.isoflop.budgets is empty; give at least one FLOP budget");
  const auto& family = design.family();
  if (absl::Status s = CheckFamilyBounds(family, base, absl::StrCat(source, ": sweep.isoflop.family"));
      !s.ok()) {
    return s;
  }
  if (design.models_per_budget() < 3) {
    return Error(source, absl::StrCat("sweep.isoflop.models_per_budget=", design.models_per_budget(),
                                      ": a parabola needs at least 3 models per budget"));
  }
  if (!(design.min_tokens_per_param() > 0 && design.max_tokens_per_param() > design.min_tokens_per_param())) {
    return Error(source, "sweep.isoflop needs 0 < min_tokens_per_param < max_tokens_per_param");
  }
  const int64_t tokens_per_step = TokensPerStepOf(base);
  if (tokens_per_step <= 0) {
    return Error(source,
                 "the base experiment needs run.batch_size and model.context_length for an IsoFLOP design");
  }
  const bool non_embedding = design.params() == config::IsoFlopDesign::NON_EMBEDDING;
  if (design.has_point_grid()) {
    if (!(design.grid_fit_window() > 0 && design.grid_fit_window() <= 1)) {
      return Error(source, absl::StrCat("sweep.isoflop.grid_fit_window=", design.grid_fit_window(),
                                        " must be a fraction of the best loss in (0, 1]"));
    }
    if (!(design.grid_tokens_per_param() > 0) || !std::isfinite(design.grid_tokens_per_param())) {
      return Error(source, absl::StrCat("sweep.isoflop.grid_tokens_per_param=", design.grid_tokens_per_param(),
                                        " must be a positive tokens-per-parameter ratio"));
    }
  }
  if (absl::Status s = CheckLrPrior(design, source); !s.ok()) return s;
  // Each budget's point grid, its lr axis scaled by grid_lr_prior if given.
  std::vector<std::vector<GridPoint>> point_grids(design.budgets_size());
  for (int b = 0; design.has_point_grid() && b < design.budgets_size(); ++b) {
    config::Grid grid = design.point_grid();
    if (design.has_grid_lr_prior()) {
      const config::PowerLawPrior& prior = design.grid_lr_prior();
      const double factor = std::pow(design.budgets(b) / prior.reference_flops(), prior.exponent());
      absl::StatusOr<config::Grid> scaled =
          ScaleAxis(grid, "optimizer.lr", factor, source,
                    absl::StrFormat("sweep.isoflop.point_grid (grid_lr_prior at budgets[%d]=%g)", b,
                                    design.budgets(b)));
      if (!scaled.ok()) return scaled.status();
      grid = *std::move(scaled);
    }
    absl::StatusOr<std::vector<GridPoint>> points = ExpandGrid(
        grid, source, "sweep.isoflop.point_grid",
        [&](const std::string& field) { return SweepSetsField(sweep, /*isoflop=*/true, field); }, 1000);
    if (!points.ok()) return points.status();
    point_grids[b] = *std::move(points);
  }

  struct Candidate {
    ModelShape shape;
    ModelSize size;
    double n;
  };
  std::vector<Candidate> candidates;
  for (const ModelShape& shape : FamilyShapes(family, base)) {
    config::Experiment e = base;
    if (absl::Status s = ApplyAll(ShapeOverrides(shape), &e, absl::StrCat(source, ": sweep.isoflop.family"));
        !s.ok()) {
      return s;
    }
    auto size = sizer(e);
    if (!size.ok()) return Error(source, absl::StrCat("sweep.isoflop.family: ", size.status().message()));
    candidates.push_back({shape, *size, non_embedding ? size->non_embedding_params : size->params});
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.n < b.n; });
  auto per_token_of = [&](const Candidate& c) {
    return design.tokens() == config::IsoFlopDesign::SIX_N ? 6.0 * c.n : c.size.training_flops_per_token;
  };

  std::vector<std::vector<const Candidate*>> feasible_at(design.budgets_size());
  for (int b = 0; b < design.budgets_size(); ++b) {
    const double budget = design.budgets(b);
    if (!(budget > 0) || !std::isfinite(budget)) {
      return Error(source, absl::StrCat("sweep.isoflop.budgets[", b, "]=", budget,
                                        " must be a positive number of FLOP"));
    }
    std::vector<const Candidate*> feasible;
    int too_few_tokens = 0, too_many_tokens = 0;
    for (const Candidate& c : candidates) {
      const double tokens = budget / per_token_of(c);
      // In double: a large budget's step count can pass the int64 range (1e28 FLOP wrapped to a negative
      // count and was reported as too few tokens).
      const double steps = std::floor(tokens / static_cast<double>(tokens_per_step));
      if (tokens / c.n < design.min_tokens_per_param() || steps < static_cast<double>(design.min_steps())) {
        ++too_few_tokens;
      } else if (tokens / c.n > design.max_tokens_per_param()) {
        ++too_many_tokens;
      } else {
        feasible.push_back(&c);
      }
    }
    if (feasible.size() < 3) {
      const Candidate& smallest = candidates.front();
      const double smallest_needs =
          std::max(design.min_tokens_per_param() * smallest.n,
                   static_cast<double>(design.min_steps() * tokens_per_step)) *
          per_token_of(smallest);
      std::string why;
      const int total = static_cast<int>(candidates.size());
      if (too_few_tokens == total) {
        why = absl::StrFormat(
            "is too small for the model family: even the smallest model (N=%.3g) needs at least %.3g FLOP "
            "for %g tokens per parameter and %d steps",
            smallest.n, smallest_needs, design.min_tokens_per_param(), design.min_steps());
      } else if (too_many_tokens == total) {
        why = absl::StrFormat("is too large for the model family: raise family.max_layers (largest N=%.3g)",
                              candidates.back().n);
      } else {
        why = absl::StrFormat(
            "leaves %d model size(s) of the family within %g..%g tokens per parameter and at least %d steps; "
            "a parabola needs 3 (%d sizes get too few tokens, %d too many): raise the budget, widen the "
            "bounds, or set family.aspect_spread for finer sizes",
            static_cast<int>(feasible.size()), design.min_tokens_per_param(), design.max_tokens_per_param(),
            design.min_steps(), too_few_tokens, too_many_tokens);
      }
      return Error(source, absl::StrFormat("sweep.isoflop.budgets[%d]=%g %s", b, budget, why));
    }
    feasible_at[b] = std::move(feasible);
  }

  // shared_sizes: each budget's targets snap to one lattice in log N (anchored at the smallest feasible
  // size, spaced by the budgets' median spacing), so that budgets whose windows overlap pick the same sizes.
  const int k = design.models_per_budget();
  double lattice_origin = INFINITY, lattice_step = 0;
  if (design.shared_sizes()) {
    std::vector<double> steps;
    for (const auto& feasible : feasible_at) {
      lattice_origin = std::min(lattice_origin, std::log(feasible.front()->n));
      steps.push_back((std::log(feasible.back()->n) - std::log(feasible.front()->n)) / (k - 1));
    }
    std::sort(steps.begin(), steps.end());
    lattice_step = steps[steps.size() / 2];
  }
  for (int b = 0; b < design.budgets_size(); ++b) {
    const double budget = design.budgets(b);
    const std::vector<const Candidate*>& feasible = feasible_at[b];
    // Pick models_per_budget shapes evenly spread in log N (all of them if there are no more).
    std::vector<const Candidate*> chosen;
    if (static_cast<int>(feasible.size()) <= k) {
      chosen = feasible;
    } else {
      const double lo = std::log(feasible.front()->n), hi = std::log(feasible.back()->n);
      std::set<size_t> used;
      for (int j = 0; j < k; ++j) {
        double target = lo + (hi - lo) * j / (k - 1);
        if (lattice_step > 0) {
          target = lattice_origin + lattice_step * std::round((target - lattice_origin) / lattice_step);
        }
        size_t best = 0;
        double best_gap = INFINITY;
        for (size_t i = 0; i < feasible.size(); ++i) {
          const double gap = std::fabs(std::log(feasible[i]->n) - target);
          if (!used.count(i) && gap < best_gap) best = i, best_gap = gap;
        }
        used.insert(best);
      }
      for (size_t i : used) chosen.push_back(feasible[i]);
    }
    // point_grid: the models that carry it, every one or the one nearest grid_tokens_per_param.
    const Candidate* nearest = nullptr;
    double nearest_gap = INFINITY;
    for (const Candidate* c : chosen) {
      const double gap = std::fabs(std::log(budget / per_token_of(*c) / c->n / design.grid_tokens_per_param()));
      if (gap < nearest_gap) nearest = c, nearest_gap = gap;
    }
    for (const Candidate* c : chosen) {
      PlannedRun point;
      point.budget_flops = budget;
      point.name = absl::StrCat(BudgetTag(budget), "_d", c->shape.d_model, "_L", c->shape.n_layers);
      point.experiment = base;
      if (absl::Status s = ApplyAll(ShapeOverrides(c->shape), &point.experiment, absl::StrCat(source, ": sweep.isoflop"));
          !s.ok()) {
        return s;
      }
      std::vector<PlannedRun> point_runs;
      const bool gridded = design.has_point_grid() &&
                           (design.grid_models() == config::IsoFlopDesign::EVERY_MODEL || c == nearest);
      if (gridded) {
        const std::vector<GridPoint>& point_grid = point_grids[b];
        absl::StatusOr<std::vector<config::Experiment>> configs =
            ApplyGrid(point.experiment, point_grid, source, "sweep.isoflop.point_grid");
        if (!configs.ok()) return configs.status();
        for (size_t i = 0; i < point_grid.size(); ++i) {
          PlannedRun run = point;
          run.name = absl::StrCat(point.name, "_", SafeName(point_grid[i].name));
          run.experiment = std::move((*configs)[i]);
          point_runs.push_back(std::move(run));
        }
      } else {
        point_runs.push_back(std::move(point));
      }
      for (PlannedRun& run : point_runs) {
        // A point grid's batch axis changes the tokens per step; the budget, and so D, stays.
        const double whole_steps =
            std::floor(budget / per_token_of(*c) / static_cast<double>(TokensPerStepOf(run.experiment)));
        // 2^53: the step counts a double holds exactly (and far below int64's range).
        if (!(whole_steps <= 9007199254740992.0)) {
          return Error(source,
                       absl::StrFormat("sweep.isoflop.budgets[%d]=%g would train %s (N=%.3g) for %.3g steps, "
                                       "more than 2^53: lower the budget or max_tokens_per_param",
                                       b, budget, run.name, c->n, whole_steps));
        }
        if (gridded && whole_steps < static_cast<double>(design.min_steps())) {
          return Error(source, absl::StrFormat("sweep.isoflop.point_grid: run %s would train %.0f steps at %d "
                                               "tokens per step, fewer than sweep.isoflop.min_steps=%d: lower the "
                                               "grid's batch sizes or raise the budget",
                                               run.name, whole_steps, TokensPerStepOf(run.experiment),
                                               design.min_steps()));
        }
        if (absl::Status s = ApplyAll({absl::StrCat("run.max_steps=", static_cast<int64_t>(whole_steps))},
                                      &run.experiment, absl::StrCat(source, ": sweep.isoflop"));
            !s.ok()) {
          return s;
        }
        runs->push_back(std::move(run));
      }
    }
  }
  return absl::OkStatus();
}

// wsd_branches (sweep.proto): groups the runs whose configs differ only in their length; in each group the
// longest run is the trunk, and every shorter one starts from the trunk's checkpoint after the last step at
// which both schedules give the same learning rate (its decay start, or the step after it where the decay's
// first rate is still the peak). Runs must be finished (FinishRun): resolved, with their folders.
absl::Status PlanWsdBranches(const std::string& source, std::vector<PlannedRun>* runs) {
  std::map<std::string, std::vector<size_t>> groups;  // by the config without its length
  for (size_t i = 0; i < runs->size(); ++i) {
    const config::Experiment& e = (*runs)[i].experiment;
    const std::string where = absl::StrCat(source, " (run ", (*runs)[i].name, "): sweep.wsd_branches");
    if (e.schedule().kind() != config::ScheduleConfig::WSD) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " needs schedule.kind: WSD (the runs share a stable phase); this run's is ",
                       config::ScheduleConfig::Kind_Name(e.schedule().kind())));
    }
    if (e.schedule().decay_end() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " needs schedule.decay_end: 0 (each run decays at its own end); this run's is ",
                       e.schedule().decay_end()));
    }
    if (!e.run().init_from().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " sets each run's run.init_from itself; this run already starts from ",
                       e.run().init_from()));
    }
    config::Experiment key = WithoutBranchWiring(e);
    key.clear_name();
    key.mutable_run()->clear_length();
    key.mutable_run()->clear_output_dir();
    key.mutable_run()->clear_eval_interval();  // evals_per_run sets it by the run's length
    groups[config::ExperimentToText(key)].push_back(i);
  }
  for (const auto& [key, members] : groups) {
    size_t trunk = members.front();
    for (const size_t i : members) {
      if ((*runs)[i].steps > (*runs)[trunk].steps) trunk = i;
    }
    PlannedRun& t = (*runs)[trunk];
    const experiments::LrSchedule trunk_lr(t.experiment.schedule(), t.experiment.optimizer().lr(), t.steps,
                                           config::TokensPerStep(t.experiment));
    std::set<int64_t> branch_steps, eval_steps;
    for (const size_t i : members) {
      PlannedRun& r = (*runs)[i];
      if (i == trunk) continue;
      const experiments::LrSchedule lr(r.experiment.schedule(), r.experiment.optimizer().lr(), r.steps,
                                       config::TokensPerStep(r.experiment));
      int64_t shared = 0;
      while (shared < r.steps && lr.At(shared) == trunk_lr.At(shared)) ++shared;
      // Branch only where the shared steps are at least half the run: a branch waits for its trunk to reach
      // the branch point, on a slot it could have trained in from the start.
      if (2 * shared < r.steps || shared >= r.steps) continue;
      r.trunk = t.name;
      r.branch_step = shared;
      r.experiment.mutable_run()->set_init_from(
          absl::StrFormat("%s/checkpoints/step_%08d", t.experiment.run().output_dir(), shared));
      branch_steps.insert(shared);
      // The trunk evaluates where this run would have up to the branch point (its curve's first points).
      const int64_t interval = r.experiment.run().eval_interval();
      for (int64_t step = interval; interval > 0 && step <= shared; step += interval) {
        const int64_t trunk_interval = t.experiment.run().eval_interval();
        if (trunk_interval <= 0 || step % trunk_interval != 0) eval_steps.insert(step);
      }
    }
    for (const int64_t step : branch_steps) t.experiment.mutable_run()->add_checkpoint_steps(step);
    for (const int64_t step : eval_steps) t.experiment.mutable_run()->add_eval_steps(step);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<config::Sweep> ParseSweepText(const std::string& text, const std::string& source) {
  config::Sweep sweep;
  if (absl::Status s = config::ParseTextProto(text, source, &sweep); !s.ok()) return s;
  return sweep;
}

absl::StatusOr<config::Sweep> LoadSweep(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseSweepText(*text, path);
}

absl::StatusOr<SweepPlan> PlanSweep(const config::Sweep& sweep, const std::string& source,
                                    const std::string& working_dir, const ModelSizer& sizer) {
  SweepPlan plan;
  plan.source = source;
  plan.name = sweep.name().empty() ? "sweep" : sweep.name();
  if (sweep.output_dir().empty()) return Error(source, "sweep.output_dir is required (the sweep's folder)");
  plan.output_dir = Absolute(working_dir, sweep.output_dir());
  if (sweep.parallel_runs() < 1) {
    return Error(source, absl::StrCat("sweep.parallel_runs=", sweep.parallel_runs(), " must be at least 1"));
  }
  plan.parallel_runs = sweep.parallel_runs();
  plan.estimate_flops_per_second = sweep.estimate_flops_per_second();
  if (!(sweep.estimate_flops_per_second() > 0) || !std::isfinite(sweep.estimate_flops_per_second())) {
    return Error(source, absl::StrCat("sweep.estimate_flops_per_second=", sweep.estimate_flops_per_second(),
                                      " must be a positive FLOP/s"));
  }
  if (!(sweep.target_flops() >= 0) || !std::isfinite(sweep.target_flops())) {
    return Error(source, absl::StrCat("sweep.target_flops=", sweep.target_flops(),
                                      " must be a positive FLOP count (0: 100x the largest budget)"));
  }
  if (sweep.evals_per_run() < 0) {
    return Error(source, absl::StrCat("sweep.evals_per_run=", sweep.evals_per_run(), " must be 0 or more"));
  }

  config::Experiment base;
  switch (sweep.base_case()) {
    case config::Sweep::kBaseExperiment: {
      const std::string path = Absolute(DirName(source), sweep.base_experiment());
      auto text = ReadFile(path);
      if (!text.ok()) return Error(source, absl::StrCat("sweep.base_experiment: ", text.status().message()));
      auto parsed = config::ParseExperimentText(*text, path);
      if (!parsed.ok()) return parsed.status();
      base = *parsed;
      break;
    }
    case config::Sweep::kExperiment:
      base = sweep.experiment();
      break;
    case config::Sweep::BASE_NOT_SET:
      return Error(source,
                   "the sweep needs a base: `base_experiment: \"file.textproto\"` or `experiment { ... }`");
  }
  if (absl::Status s =
          ApplyAll({sweep.set().begin(), sweep.set().end()}, &base, absl::StrCat(source, ": sweep.set"));
      !s.ok()) {
    return s;
  }
  config::MakePathsAbsolute(working_dir, &base);

  plan.report_active_params = sweep.report_active_params();
  switch (sweep.design_case()) {
    case config::Sweep::kGrid:
      if (absl::Status s = PlanGrid(sweep, source, base, &plan.runs); !s.ok()) return s;
      break;
    case config::Sweep::kIsoflop:
      if (absl::Status s = PlanIsoFlop(sweep, source, base, sizer, &plan.runs); !s.ok()) return s;
      plan.non_embedding_params = sweep.isoflop().params() == config::IsoFlopDesign::NON_EMBEDDING;
      plan.hyperparameter_fit_window = sweep.isoflop().grid_fit_window();
      break;
    case config::Sweep::DESIGN_NOT_SET:
      return Error(source, "the sweep needs a design: `grid { ... }` or `isoflop { ... }`");
  }
  std::set<std::string> names;
  double max_flops = 0;
  for (PlannedRun& run : plan.runs) {
    if (!names.insert(run.name).second)
      return Error(source, absl::StrCat("two runs are both named ", run.name));
    if (absl::Status s = FinishRun(source, plan.name, plan.output_dir, sweep.evals_per_run(), sizer, &run);
        !s.ok())
      return s;
    max_flops = std::max({max_flops, run.flops, run.budget_flops});
  }
  if (sweep.wsd_branches()) {
    if (absl::Status s = PlanWsdBranches(source, &plan.runs); !s.ok()) return s;
    if (std::none_of(plan.runs.begin(), plan.runs.end(),
                     [](const PlannedRun& r) { return !r.trunk.empty(); })) {
      plan.notes.push_back(
          "note: wsd_branches shares nothing here: no two runs differ only in their length (or the shorter "
          "ones never reach their decay before the longer one's)");
    }
  }
  plan.target_flops = sweep.target_flops() > 0 ? sweep.target_flops() : 100 * max_flops;
  plan.base = base;
  if (sweep.has_isoflop()) plan.family = sweep.isoflop().family();
  return plan;
}

std::vector<std::string> TrainingTokenFiles(const config::DataConfig& data) {
  if (data.train_mixture_size() == 0) return {data.train_tokens()};
  std::vector<std::string> paths;
  for (const config::TokenSource& source : data.train_mixture()) paths.push_back(source.path());
  return paths;
}

std::string FormatPlan(const SweepPlan& plan) {
  std::string out = absl::StrFormat("sweep %s: %d runs into %s (%d at a time)\n", plan.name, plan.runs.size(),
                                    plan.output_dir, plan.parallel_runs);
  const bool branches =
      std::any_of(plan.runs.begin(), plan.runs.end(), [](const PlannedRun& r) { return !r.trunk.empty(); });
  out += absl::StrFormat("%-28s %10s %10s %10s %7s %7s %10s %9s%s\n", "run", "budget", "N", "D", "D/N",
                         "steps", "FLOP", "est. time", branches ? "  starts from" : "");
  double total_flops = 0, own_flops = 0;
  for (const PlannedRun& r : plan.runs) {
    const double n = plan.non_embedding_params ? r.size.non_embedding_params : r.size.params;
    const double seconds = r.OwnFlops() / plan.estimate_flops_per_second;
    out += absl::StrFormat("%-28s %10s %10.3g %10.3g %7.1f %7d %10.3g %8.0fs%s\n", r.name,
                           r.budget_flops > 0 ? absl::StrFormat("%.3g", r.budget_flops) : "-", n, r.tokens,
                           r.tokens / n, r.steps, r.flops, seconds,
                           r.trunk.empty() ? "" : absl::StrFormat("  %s step %d", r.trunk, r.branch_step));
    total_flops += r.flops;
    own_flops += r.OwnFlops();
  }
  const double total_seconds = own_flops / plan.estimate_flops_per_second;
  // With branches, a trunk up to a branch point and then the branch run one after the other, whatever the
  // parallelism.
  double chain_flops = 0;
  for (const PlannedRun& trunk : plan.runs) {
    chain_flops = std::max(chain_flops, trunk.OwnFlops());
    for (const PlannedRun& r : plan.runs) {
      if (r.trunk != trunk.name) continue;
      const double to_branch = trunk.OwnFlops() * static_cast<double>(r.branch_step) / trunk.steps;
      chain_flops = std::max(chain_flops, to_branch + r.OwnFlops());
    }
  }
  const double chain_seconds = chain_flops / plan.estimate_flops_per_second;
  const double wall_seconds = std::max(total_seconds / plan.parallel_runs, chain_seconds);
  if (branches) {
    out += absl::StrFormat(
        "WSD branches: the runs' %.3g FLOP take %.3g of training (%.0f%%): each branch trains from its "
        "trunk's checkpoint on\n",
        total_flops, own_flops, 100 * own_flops / total_flops);
  }
  out += absl::StrFormat(
      "total: %.3g FLOP, about %.0f s of training at %.3g FLOP/s (%.0f s wall with %d at a time)\n",
      own_flops, total_seconds, plan.estimate_flops_per_second, wall_seconds, plan.parallel_runs);
  for (const std::string& note : plan.notes) out += note + "\n";
  return out;
}

}  // namespace lmf::sweep
