// IsoFLOP designs whose points carry a batch size x learning rate grid (sweep.isoflop.point_grid): which
// models carry it, that every run still spends its budget when the batch changes, the errors a bad point
// grid gets (naming the field), and that such a sweep resumes like any other (fake_train_for_test trains);
// and grid axes over several fields at once (GridAxis.fields).
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "experiments/sweep/plan.h"
#include "experiments/sweep/runner.h"
#include "experiments/sweep/sweep_testing.h"
#include "gtest/gtest.h"

namespace lmf::sweep {
namespace {

std::string TmpDir() { return std::getenv("TEST_TMPDIR"); }

using testing::SimpleSizer;

// `design_extra` goes inside isoflop { }, after the budgets and family.
absl::StatusOr<SweepPlan> Plan(const std::string& design_extra, const std::string& out = "out") {
  const std::string text = absl::StrCat("name: \"t\"\noutput_dir: \"", TmpDir(), "/", out, R"pb("
    experiment {
      model { d_model: 64 n_layers: 2 n_heads: 2 vocab_size: 256 context_length: 32 ffn { d_ff: 256 } }
      optimizer { lr: 1e-3 }
      data { train_tokens: "train.tok" val_tokens: "val.tok" }
      run { batch_size: 4 max_steps: 10 output_dir: "unused" eval_tokens: 1024 }
    }
    isoflop {
      budgets: [ 2e12, 6e12 ]
      family { aspect_ratio: 16 head_size: 16 min_layers: 1 max_layers: 12 }
      models_per_budget: 4
      min_tokens_per_param: 1
      max_tokens_per_param: 500
    )pb", design_extra, "}\n");
  auto sweep = ParseSweepText(text, "test.sweep");
  if (!sweep.ok()) return sweep.status();
  return PlanSweep(*sweep, "test.sweep", TmpDir(), SimpleSizer);
}

const char* kBatchLrGrid = R"pb(
  point_grid {
    axis { field: "run.batch_size" values: [ "2", "4", "8" ] }
    axis { field: "optimizer.lr" values: [ "1e-3", "3e-3" ] }
  }
)pb";

// The model a budget's grid sits on: its runs' names share "<budget>_d<width>_L<depth>_".
std::map<double, std::map<std::string, int>> RunsPerModel(const SweepPlan& plan) {
  std::map<double, std::map<std::string, int>> out;
  for (const PlannedRun& r : plan.runs) {
    const size_t l = r.name.find("_L");
    const size_t end = r.name.find('_', l + 2);
    out[r.budget_flops][r.name.substr(0, end)]++;
  }
  return out;
}

TEST(PointGrid, SitsOnTheModelNearestTheTokensPerParameterGuess) {
  auto plan = Plan(absl::StrCat(kBatchLrGrid, "grid_tokens_per_param: 20 grid_fit_window: 0.2"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->hyperparameter_fit_window, 0.2);  // what the sweep's report fits the grids with
  ASSERT_EQ(plan->runs.size(), 2u * (3 + 6));  // per budget: 3 models once, 1 model x 6 grid points
  for (const auto& [budget, models] : RunsPerModel(*plan)) {
    ASSERT_EQ(models.size(), 4u) << budget;
    std::string gridded;
    for (const auto& [model, runs] : models) {
      if (runs == 6) gridded = model;
      else EXPECT_EQ(runs, 1) << model;
    }
    ASSERT_FALSE(gridded.empty()) << budget;
    // The gridded model's D/N is the nearest to 20 of the budget's models (compared in log).
    double best_gap = INFINITY;
    std::string nearest;
    for (const PlannedRun& r : plan->runs) {
      if (r.budget_flops != budget) continue;
      const double gap = std::fabs(std::log(budget / r.size.training_flops_per_token / r.size.params / 20));
      if (gap < best_gap) best_gap = gap, nearest = r.name;
    }
    EXPECT_TRUE(absl::StartsWith(nearest, gridded + "_") || nearest == gridded) << nearest << " " << gridded;
  }
}

TEST(PointGrid, EveryModelCarriesItAndEveryRunSpendsItsBudget) {
  auto plan = Plan(absl::StrCat(kBatchLrGrid, "grid_models: EVERY_MODEL"));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 2u * 4 * 6);
  std::set<std::string> names;
  for (const PlannedRun& r : plan->runs) {
    names.insert(r.name);
    const int64_t batch = r.experiment.run().batch_size();
    EXPECT_TRUE(absl::StrContains(r.name, absl::StrCat("_batch_size=", batch, ",lr="))) << r.name;
    // Whole steps at this run's own batch: the budget minus less than one step's worth.
    const double step_flops = static_cast<double>(batch) * 32 * r.size.training_flops_per_token;
    EXPECT_LE(r.flops, r.budget_flops) << r.name;
    EXPECT_GT(r.flops, r.budget_flops - step_flops) << r.name;
    EXPECT_EQ(r.experiment.run().output_dir(), absl::StrCat(TmpDir(), "/out/runs/", r.name));
  }
  EXPECT_EQ(names.size(), plan->runs.size());
  // Batch 2 trains four times the steps of batch 8 at the same model and budget (within rounding).
  const PlannedRun* b2 = nullptr;
  const PlannedRun* b8 = nullptr;
  for (const PlannedRun& r : plan->runs) {
    if (absl::StartsWith(r.name, plan->runs[0].name.substr(0, plan->runs[0].name.find("_batch"))) &&
        r.experiment.optimizer().lr() == 1e-3) {
      if (r.experiment.run().batch_size() == 2) b2 = &r;
      if (r.experiment.run().batch_size() == 8) b8 = &r;
    }
  }
  ASSERT_TRUE(b2 != nullptr && b8 != nullptr);
  EXPECT_NEAR(static_cast<double>(b2->steps) / b8->steps, 4.0, 4.0 * 2 / b8->steps);
}

TEST(PointGrid, BadPointGridsGetErrorsNamingTheField) {
  auto shape = Plan(R"pb(point_grid { axis { field: "model.d_model" values: [ "32", "64" ] } })pb");
  ASSERT_FALSE(shape.ok());
  EXPECT_TRUE(absl::StartsWith(shape.status().message(),
                               "test.sweep: sweep.isoflop.point_grid.axis[0].field is model.d_model, which the "
                               "sweep sets itself (the IsoFLOP design sets each run's model shape"))
      << shape.status();
  auto length = Plan(R"pb(point_grid { axis { field: "run.max_steps" values: [ "5" ] } })pb");
  ASSERT_FALSE(length.ok());
  EXPECT_NE(length.status().message().find("sweep.isoflop.point_grid.axis[0].field is run.max_steps"),
            std::string::npos)
      << length.status();
  auto empty = Plan("point_grid { }");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(),
            "test.sweep: sweep.isoflop.point_grid has no axis; add `axis { field: ... values: ... }`");
  auto same = Plan(R"pb(point_grid { axis { field: "optimizer.lr" values: [ "1e-3", "0.001" ] } })pb");
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.status().message().find("test.sweep: sweep.isoflop.point_grid: runs lr=1e-3 and lr=0.001 have "
                                         "the same config"),
            std::string::npos)
      << same.status();
  auto guess = Plan(absl::StrCat(kBatchLrGrid, "grid_tokens_per_param: 0"));
  ASSERT_FALSE(guess.ok());
  EXPECT_NE(guess.status().message().find("sweep.isoflop.grid_tokens_per_param=0 must be a positive"),
            std::string::npos)
      << guess.status();
  auto window = Plan(absl::StrCat(kBatchLrGrid, "grid_fit_window: 1.5"));
  ASSERT_FALSE(window.ok());
  EXPECT_NE(window.status().message().find("sweep.isoflop.grid_fit_window=1.5 must be a fraction"),
            std::string::npos)
      << window.status();
  // Batch 65536 leaves a run fewer than min_steps (20) steps: the error names the run and the field.
  auto big = Plan(R"pb(point_grid { axis { field: "run.batch_size" values: [ "4", "65536" ] } })pb");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("test.sweep: sweep.isoflop.point_grid: run C2e12_"), std::string::npos)
      << big.status();
  EXPECT_NE(big.status().message().find("_batch_size=65536 would train"), std::string::npos) << big.status();
  EXPECT_NE(big.status().message().find("fewer than sweep.isoflop.min_steps=20"), std::string::npos)
      << big.status();
}

// An axis over several fields (GridAxis.fields) sets them together: widths at one head size and d_ff ratio.
TEST(GridFields, AnAxisOverSeveralFieldsSetsThemTogether) {
  const std::string head = absl::StrCat("name: \"t\"\noutput_dir: \"", TmpDir(), "/fields\"\n", R"pb(
    experiment {
      model { d_model: 64 n_layers: 2 n_heads: 2 vocab_size: 256 context_length: 32 ffn { d_ff: 256 } }
      optimizer { lr: 1e-3 }
      data { train_tokens: "train.tok" val_tokens: "val.tok" }
      run { batch_size: 4 max_steps: 10 output_dir: "unused" eval_tokens: 1024 }
    }
  )pb");
  auto plan = [&](const std::string& grid) -> absl::StatusOr<SweepPlan> {
    auto sweep = ParseSweepText(head + grid, "test.sweep");
    if (!sweep.ok()) return sweep.status();
    return PlanSweep(*sweep, "test.sweep", TmpDir(), SimpleSizer);
  };
  auto ok = plan(R"pb(grid {
    axis { fields: [ "model.d_model", "model.n_heads" ] values: [ "32,2", "64,4" ] }
    axis { field: "optimizer.lr" values: [ "1e-3", "1e-2" ] }
  })pb");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->runs.size(), 4u);
  EXPECT_EQ(ok->runs[0].name, "d_model=32,n_heads=2,lr=1e-3");
  EXPECT_EQ(ok->runs[3].name, "d_model=64,n_heads=4,lr=1e-2");
  EXPECT_EQ(ok->runs[3].experiment.model().d_model(), 64);
  EXPECT_EQ(ok->runs[3].experiment.model().n_heads(), 4);
  auto parts = plan(R"pb(grid { axis { fields: [ "model.d_model", "model.n_heads" ] values: [ "32" ] } })pb");
  ASSERT_FALSE(parts.ok());
  EXPECT_EQ(parts.status().message(),
            "test.sweep: sweep.grid.axis[0] value \"32\" has 1 comma-separated parts; its 2 fields (model.d_model, "
            "model.n_heads) need one each");
  auto both = plan(R"pb(grid { axis { field: "optimizer.lr" fields: [ "model.d_model" ] values: [ "1" ] } })pb");
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().message(), "test.sweep: sweep.grid.axis[0] has both `field` and `fields`; give one");
  auto twice = plan(R"pb(grid {
    axis { fields: [ "model.d_model", "model.n_heads" ] values: [ "32,2" ] }
    axis { field: "model.n_heads" values: [ "1", "2" ] }
  })pb");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("sweep.grid.axis[1] and axis[0] are both over model.n_heads"),
            std::string::npos)
      << twice.status();
}

std::string FakeTrainer() {
  return std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/sweep/fake_train_for_test";
}

TEST(PointGrid, ASweepWithPointGridsResumesWithoutTrainingAgain) {
  auto plan = Plan(kBatchLrGrid, "resume");
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->parallel_runs = 2;
  RunnerOptions runner;
  runner.command = {FakeTrainer()};
  auto first = RunSweep(*plan, runner);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->finished, static_cast<int>(plan->runs.size()));
  std::set<int64_t> batches;
  for (const auto& row : first->table.runs) batches.insert(row.batch_size);
  EXPECT_EQ(batches, (std::set<int64_t>{2, 4, 8}));  // the results table records each run's own batch
  auto again = RunSweep(*plan, runner);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->skipped, static_cast<int>(plan->runs.size()));
  EXPECT_EQ(again->finished, static_cast<int>(plan->runs.size()));
}

}  // namespace
}  // namespace lmf::sweep
