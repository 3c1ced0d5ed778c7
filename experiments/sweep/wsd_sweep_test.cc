// A WSD sweep trained for real (the sweep binary's --train_one process, the CPU trainer): each branch, which
// trains only its decay from its trunk's checkpoint, ends where the same run trained alone from scratch ends,
// bit for bit (final and best loss, and its evaluation curve), and trains fewer steps itself; so do the
// branched points of an IsoFLOP design's lr grid.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file.h"
#include "experiments/sweep/plan.h"
#include "experiments/sweep/runner.h"
#include "experiments/sweep/sweep_testing.h"
#include "experiments/sweep/train_run.h"
#include "gtest/gtest.h"

namespace lmf::sweep {
namespace {

using testing::TmpDir;

struct Swept {
  SweepPlan plan;
  SweepSummary summary;
};

// The tiny model on a WSD schedule at 8, 16 and 12 steps.
constexpr char kLengths[] = "grid { axis { field: \"run.max_steps\" values: [\"8\", \"16\", \"12\"] } }\n";

// Plans and runs the tiny model on a WSD schedule, its runs as `design` (a grid or isoflop block) says, into
// `name`.
Swept RunWsdSweep(const std::string& name, bool wsd_branches, const std::string& design = kLengths) {
  const std::string& train = testing::TinyTokens().train;
  const std::string& val = testing::TinyTokens().val;
  char cwd[PATH_MAX];
  EXPECT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  const std::string text = absl::StrCat(
      "name: \"", name, "\"\noutput_dir: \"", TmpDir(), "/", name, "\"\nbase_experiment: \"", cwd,
      "/experiments/configs/tiny.textproto\"\nparallel_runs: 2\nevals_per_run: 4\nwsd_branches: ",
      wsd_branches ? "true" : "false", "\nset: [\"data.train_tokens=", train, "\", \"data.val_tokens=", val,
      "\", \"run.eval_tokens=512\", \"schedule.kind=WSD\", \"schedule.warmup=2\", "
      "\"schedule.decay_fraction=0.25\", \"run.checkpoint_interval=0\"]\n",
      design);
  Swept swept;
  auto sweep = ParseSweepText(text, name + ".sweep");
  EXPECT_TRUE(sweep.ok()) << sweep.status();
  auto plan = PlanSweep(*sweep, name + ".sweep", TmpDir(), SizeOfModel);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return swept;
  swept.plan = *plan;
  RunnerOptions options;
  options.command = {std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/sweep/sweep", "--train_one"};
  options.threads_per_run = 1;
  auto summary = RunSweep(swept.plan, options);
  EXPECT_TRUE(summary.ok()) << summary.status();
  if (summary.ok()) swept.summary = *summary;
  return swept;
}

TEST(WsdSweep, BranchesEndWhereTheRunsTrainedAloneEnd) {
  const Swept branched = RunWsdSweep("branched", true), alone = RunWsdSweep("alone", false);
  ASSERT_EQ(branched.summary.finished, 3);
  ASSERT_EQ(alone.summary.finished, 3);
  int branches = 0;
  for (size_t i = 0; i < branched.plan.runs.size(); ++i) {
    const PlannedRun& run = branched.plan.runs[i];
    SCOPED_TRACE(run.name);
    auto a = ReadRunResult(branched.plan.output_dir + "/runs/" + run.name);
    auto b = ReadRunResult(alone.plan.output_dir + "/runs/" + run.name);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->final_loss(), b->final_loss());
    EXPECT_EQ(a->best_val_loss(), b->best_val_loss());
    EXPECT_EQ(a->tokens(), b->tokens());
    EXPECT_EQ(a->flops(), b->flops());
    // What the run trained itself: one metrics line per step from its branch point on.
    auto metrics = ReadFile(branched.plan.output_dir + "/runs/" + run.name + "/metrics.jsonl");
    ASSERT_TRUE(metrics.ok());
    const size_t lines = std::vector<std::string>(absl::StrSplit(*metrics, '\n', absl::SkipEmpty())).size();
    EXPECT_EQ(lines, static_cast<size_t>(run.steps - run.branch_step));
    if (run.steps == 16) {
      EXPECT_EQ(run.trunk, "");
      continue;
    }
    ++branches;
    EXPECT_EQ(run.trunk, "max_steps=16");
    EXPECT_GT(run.branch_step, 0);
    EXPECT_LT(run.branch_step, run.steps);
    // Its curve (for Approach 1): the trunk's evaluations up to the branch point, at this run's steps (the
    // trunk evaluated there too), then its own; the same points as the run trained alone.
    auto curve = ReadFile(branched.plan.output_dir + "/runs/" + run.name + "/curve.csv");
    auto alone_curve = ReadFile(alone.plan.output_dir + "/runs/" + run.name + "/curve.csv");
    ASSERT_TRUE(curve.ok() && alone_curve.ok());
    EXPECT_EQ(*curve, *alone_curve);
    std::vector<std::string> rows = absl::StrSplit(*curve, '\n', absl::SkipEmpty());
    int from_trunk = 0, own = 0;
    for (size_t r = 1; r < rows.size(); ++r) {
      (std::stoll(rows[r].substr(0, rows[r].find(','))) <= run.branch_step ? from_trunk : own) += 1;
    }
    EXPECT_GE(from_trunk, 1) << *curve;
    EXPECT_GE(own, 1) << *curve;
  }
  EXPECT_EQ(branches, 2);
}

// An IsoFLOP design whose every model carries a 2-point lr grid, sizes shared across 2 budgets: a size at
// both budgets trains each lr's stable phase once, at 2e9 FLOP, and its 1e9 run at that lr branches off it.
// Every run, branched or not, ends where it ends trained alone, bit for bit.
TEST(WsdSweep, BranchedGridPointsEndWhereTheyEndTrainedAlone) {
  const std::string design = R"pb(
    isoflop {
      budgets: [ 1e9, 2e9 ]
      family { aspect_ratio: 16 head_size: 16 min_layers: 1 max_layers: 4 aspect_spread: 2 }
      models_per_budget: 3
      shared_sizes: true
      min_tokens_per_param: 0.05
      max_tokens_per_param: 100
      min_steps: 10
      grid_models: EVERY_MODEL
      point_grid { axis { field: "optimizer.lr" values: [ "3e-3", "6e-3" ] } }
    }
  )pb";
  const Swept branched = RunWsdSweep("grid_branched", true, design);
  const Swept alone = RunWsdSweep("grid_alone", false, design);
  ASSERT_EQ(branched.plan.runs.size(), 12u);
  ASSERT_EQ(branched.summary.finished, 12);
  ASSERT_EQ(alone.summary.finished, 12);
  int branches = 0;
  for (const PlannedRun& run : branched.plan.runs) {
    SCOPED_TRACE(run.name);
    auto a = ReadRunResult(branched.plan.output_dir + "/runs/" + run.name);
    auto b = ReadRunResult(alone.plan.output_dir + "/runs/" + run.name);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->final_loss(), b->final_loss());
    EXPECT_EQ(a->best_val_loss(), b->best_val_loss());
    auto curve = ReadFile(branched.plan.output_dir + "/runs/" + run.name + "/curve.csv");
    auto alone_curve = ReadFile(alone.plan.output_dir + "/runs/" + run.name + "/curve.csv");
    ASSERT_TRUE(curve.ok() && alone_curve.ok());
    EXPECT_EQ(*curve, *alone_curve);
    if (run.trunk.empty()) continue;
    ++branches;
    // Its trunk: the same size and lr at the larger budget ("C1e9_<size>_lr=..." -> "C2e9_<size>_lr=...").
    EXPECT_EQ(run.trunk, "C2e9" + run.name.substr(run.name.find('_')));
  }
  EXPECT_EQ(branches, 4);  // 2 sizes at both budgets x 2 lrs
}

// A branch keeps its trunk's evaluations from when it started: the trunk trained again later (here: its log
// cut back to one line, as when a changed trunk restarts) does not take them from a branch that runs again
// from its own state; its curve is still the run's trained alone.
TEST(WsdSweep, ABranchKeepsItsTrunksEvaluationsWhenTheTrunkTrainsAgain) {
  const Swept branched = RunWsdSweep("kept", true), alone = RunWsdSweep("kept_alone", false);
  ASSERT_EQ(branched.summary.finished, 3);
  const std::string runs = branched.plan.output_dir + "/runs/";
  auto trunk_log = ReadFile(runs + "max_steps=16/metrics.jsonl");
  ASSERT_TRUE(trunk_log.ok());
  ASSERT_TRUE(WriteFileAtomically(runs + "max_steps=16/metrics.jsonl",
                                  trunk_log->substr(0, trunk_log->find('\n') + 1))
                  .ok());
  ASSERT_EQ(::unlink((runs + "max_steps=8/result.textproto").c_str()), 0);
  RunnerOptions options;
  options.command = {std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/sweep/sweep",
                     "--train_one"};
  options.threads_per_run = 1;
  auto again = RunSweep(branched.plan, options);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->skipped, 2);
  auto curve = ReadFile(runs + "max_steps=8/curve.csv");
  auto alone_curve = ReadFile(alone.plan.output_dir + "/runs/max_steps=8/curve.csv");
  ASSERT_TRUE(curve.ok() && alone_curve.ok());
  EXPECT_EQ(*curve, *alone_curve);
}

}  // namespace
}  // namespace lmf::sweep
