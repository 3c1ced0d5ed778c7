// The sweep's report and its family-based recipe (see sweep_report.h).
#include "experiments/sweep/sweep_report.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "config/overrides.h"
#include "scaling/reporting/report.h"

namespace lmf::sweep {

scaling::RecipeHook FamilyRecipe(const SweepPlan& plan, const ModelSizer& sizer) {
  if (!plan.family.has_value()) return nullptr;
  config::ShapeFamily family = *plan.family;
  family.set_max_layers(4 * family.max_layers());  // the target is larger than anything swept
  const config::Experiment base = plan.base;
  return [family, base, sizer](
             double params, double tokens, double flops, const scaling::ResultsTable& table,
             const scaling::ObservationChoice& choice) -> absl::StatusOr<scaling::Recipe> {
    auto recipe = scaling::RecipeFromBestRuns(params, tokens, flops, table, choice);
    if (!recipe.ok()) return recipe.status();
    const ModelShape* best = nullptr;
    double best_gap = INFINITY, best_n = 0;
    const std::vector<ModelShape> shapes = FamilyShapes(family, base);
    for (const ModelShape& shape : shapes) {
      config::Experiment e = base;
      bool ok = true;
      for (const std::string& a : ShapeOverrides(shape)) ok = ok && config::ApplyOverride(a, &e).ok();
      if (!ok) continue;
      auto size = sizer(e);
      if (!size.ok()) continue;
      scaling::RunResult sized;  // N as the fits count it
      sized.params = size->params, sized.non_embedding_params = size->non_embedding_params;
      sized.active_params = size->active_params, sized.active_non_embedding_params = size->active_non_embedding_params;
      const double n = scaling::ParamCount(sized, choice);
      const double gap = std::fabs(std::log(n / params));
      if (gap < best_gap) best = &shape, best_gap = gap, best_n = n;
    }
    if (best == nullptr) return absl::NotFoundError("no shape of the sweep's model family could be sized");
    recipe->d_model = best->d_model;
    recipe->n_layers = best->n_layers;
    recipe->n_heads = best->n_heads;
    // Keep the batch and learning-rate part of the default basis; the shape part is ours.
    const size_t shape_part = recipe->basis.find("; shape:");
    recipe->basis = absl::StrCat(
        recipe->basis.substr(0, shape_part),
        absl::StrFormat("; shape: the member of the sweep's model family (d_model/n_layers %g, head size %d) "
                        "closest to N_opt, exactly %.4g parameters%s",
                        family.aspect_ratio(), family.head_size(), best_n,
                        best_gap > std::log(1.5) ? " (the family has nothing closer)" : ""));
    return *recipe;
  };
}

absl::StatusOr<scaling::ScalingAnalysis> WriteSweepReport(const SweepPlan& plan,
                                                          const std::string& results_csv,
                                                          const std::string& data_note,
                                                          const ModelSizer& sizer) {
  scaling::ReportOptions options;
  options.target_flops = plan.target_flops;
  options.choice.non_embedding = plan.non_embedding_params;
  options.choice.active = plan.report_active_params;
  options.hyperparameters.fit_window = plan.hyperparameter_fit_window;
  options.data_note = data_note;
  options.recipe = FamilyRecipe(plan, sizer);
  const std::string report_dir = plan.output_dir + "/report";
  absl::StatusOr<scaling::ScalingAnalysis> analysis = scaling::MakeReport(results_csv, options, report_dir);
  if (!analysis.ok()) {
    // The folder's report, if any, is of an earlier state of the sweep: it must not stand for this one.
    const bool had_report = FileExists(report_dir + "/report.md");
    if (absl::Status s = scaling::RemoveReport(report_dir); !s.ok()) return s;
    return absl::Status(analysis.status().code(),
                        absl::StrCat(analysis.status().message(),
                                     had_report ? absl::StrCat(" (removed the earlier report in ", report_dir,
                                                               ": it described other results)")
                                                : ""));
  }
  return analysis;
}

}  // namespace lmf::sweep
