// Expanding a Sweep (sweep.proto) into the list of runs it stands for, each a complete, validated
// Experiment with its own output folder, plus the numbers the plan prints and the results table records
// (parameters, tokens, FLOPs per run, estimated time).
//
// Grid: the Cartesian product of the axes, every run named by its values ("lr=3e-4,d_model=256").
// IsoFLOP: for each budget C, the family's shapes that can spend C with a sane tokens-per-parameter
// ratio and enough optimizer steps; `models_per_budget` of them, evenly spread in log N, are planned.
// A budget with fewer than 3 such shapes is an error that says whether C is too small or too large.
// wsd_branches: runs that differ only in length share their WSD stable phase (trunk and branches).
#ifndef LMFORGE_EXPERIMENTS_SWEEP_PLAN_H_
#define LMFORGE_EXPERIMENTS_SWEEP_PLAN_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/experiment.pb.h"
#include "experiments/sweep/sweep.pb.h"

namespace lmf::sweep {

// What the planner needs to know of a model: its size and its cost per training token.
struct ModelSize {
  double params = 0;                // all parameters
  double non_embedding_params = 0;  // without token/position embeddings
  double training_flops_per_token = 0;
  // A mixture of experts: the two counts with only the experts a token uses; NaN for a dense model.
  double active_params = NAN, active_non_embedding_params = NAN;
};
using ModelSizer = std::function<absl::StatusOr<ModelSize>(const config::Experiment&)>;

struct PlannedRun {
  std::string name;               // unique in the sweep; also its folder name under runs/
  config::Experiment experiment;  // resolved and validated; run.output_dir is the run's folder
  double budget_flops = 0;        // the IsoFLOP budget, 0 for grid runs
  ModelSize size;
  int64_t steps = 0;
  double tokens = 0;  // steps * tokens per step
  double flops = 0;   // tokens * training FLOPs per token
  // wsd_branches: the run whose checkpoint at `branch_step` this one starts from (run.init_from); "" and 0
  // for a run that trains from scratch. The run trains steps branch_step..steps itself.
  std::string trunk;
  int64_t branch_step = 0;

  // The training FLOPs this run spends itself (its share after the trunk's checkpoint).
  double OwnFlops() const { return steps > 0 ? flops * static_cast<double>(steps - branch_step) / steps : 0; }
};

struct SweepPlan {
  std::string name;
  std::string source;      // the sweep file (for messages)
  std::string output_dir;  // absolute
  int parallel_runs = 1;
  double estimate_flops_per_second = 0;
  double target_flops = 0;                    // resolved: never 0
  bool non_embedding_params = false;          // which N the fits should use (IsoFLOP ParamCount)
  bool report_active_params = false;          // mixture-of-experts runs: the fits' N counts active experts only
  double hyperparameter_fit_window = 0.05;    // the report's batch/lr fit window (isoflop.grid_fit_window)
  std::optional<config::ShapeFamily> family;  // the IsoFLOP design's model family, if any
  config::Experiment base;                    // the base experiment after the sweep-wide overrides
  std::vector<PlannedRun> runs;
  std::vector<std::string> notes;  // what the plan prints under its table (e.g. wsd_branches sharing nothing)
};

// The config without the WSD branch wiring wsd_branches adds (run.init_from, run.checkpoint_steps,
// run.eval_steps): what a run's result depends on, since a branch ends where the same run trained alone ends.
config::Experiment WithoutBranchWiring(const config::Experiment& experiment);

// One model shape of a ShapeFamily (see sweep.proto).
struct ModelShape {
  int64_t d_model = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, d_ff = 0;
};

// Every shape of `family`, with n_kv_heads and d_ff derived from `base` as sweep.proto describes (each
// member shares key/value heads as the base does: multi-head, multi-query, or grouped with the base's query
// heads per key/value head, widths then in steps of head_size x that group). Check the family with
// CheckFamilyBounds first: a family can stand for billions of shapes.
std::vector<ModelShape> FamilyShapes(const config::ShapeFamily& family, const config::Experiment& base);

// The most shapes a family may have (each is built and sized when the sweep is planned; 100,000 take about a
// second).
inline constexpr double kMaxFamilyShapes = 100000;

// How many shapes FamilyShapes gives, counted without building them; counting stops once past `stop_above`.
double FamilyShapeCount(const config::ShapeFamily& family, const config::Experiment& base, double stop_above);

// OK when `family`'s fields are in range, the base's n_kv_heads divides its n_heads, its widest d_model and
// d_ff fit their 32-bit config fields and it has at most kMaxFamilyShapes shapes; else InvalidArgument
// starting with `where`, naming the fields.
absl::Status CheckFamilyBounds(const config::ShapeFamily& family, const config::Experiment& base,
                               const std::string& where);

// The --set style assignments that give an experiment this shape.
std::vector<std::string> ShapeOverrides(const ModelShape& shape);

// Reads a sweep textproto (errors at file:line:column; unknown fields are errors).
absl::StatusOr<config::Sweep> LoadSweep(const std::string& path);
absl::StatusOr<config::Sweep> ParseSweepText(const std::string& text, const std::string& source);

// Expands `sweep` into runs. `source` names the sweep file in every error and anchors a relative
// base_experiment; `working_dir` anchors relative output and data paths.
absl::StatusOr<SweepPlan> PlanSweep(const config::Sweep& sweep, const std::string& source,
                                    const std::string& working_dir, const ModelSizer& sizer);

// The plan as a table: one row per run (name, budget, N, D, D/N, steps, FLOPs, estimated time) and
// the totals.
std::string FormatPlan(const SweepPlan& plan);

// The token files a run trains on: data.train_tokens, or each data.train_mixture source's path in order.
std::vector<std::string> TrainingTokenFiles(const config::DataConfig& data);

}  // namespace lmf::sweep

#endif  // LMFORGE_EXPERIMENTS_SWEEP_PLAN_H_
