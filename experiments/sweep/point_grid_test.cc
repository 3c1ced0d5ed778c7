// IsoFLOP designs whose points carry a batch size x learning rate grid (sweep.isoflop.point_grid): which
// models carry it, that every run still spends its budget when the batch changes, the errors a bad point
// grid or lr prior gets (naming the field), that a prior (isoflop.grid_lr_prior) moves the lr axis with the
// budget, that with sweep.wsd_branches only runs of one model, batch size and lr share a WSD stable phase,
// and that such sweeps resume like any other (fake_train_for_test trains); and grid axes over several fields
// at once (GridAxis.fields).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "experiments/sweep/plan.h"
#include "experiments/sweep/runner.h"
#include "experiments/sweep/sweep_testing.h"
#include "gtest/gtest.h"

namespace lmf::sweep {
namespace {

std::string TmpDir() { return std::getenv("TEST_TMPDIR"); }

using testing::SimpleSizer;

// `design_extra` goes inside isoflop { }, after the budgets and family; `sweep_extra` at the sweep's top level.
absl::StatusOr<SweepPlan> Plan(const std::string& design_extra, const std::string& out = "out",
                               const std::string& sweep_extra = "") {
  const std::string text = absl::StrCat("name: \"t\"\noutput_dir: \"", TmpDir(), "/", out, "\"\n", sweep_extra, R"pb(
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

// grid_lr_prior: the lr axis's values hold at reference_flops; at budget C they are multiplied by
// (C / reference_flops)^exponent, to 4 significant digits, in the run's config and its name.
const char* kLrPrior = "grid_lr_prior { exponent: -0.5 reference_flops: 2e12 }\n";

TEST(PointGrid, ALrPriorMovesTheLrAxisWithTheBudget) {
  auto plan = Plan(absl::StrCat(kBatchLrGrid, kLrPrior));
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 2u * (3 + 6));  // the prior changes the lrs, not the runs
  std::map<double, std::set<double>> lrs;      // budget -> its grid's lrs
  for (const PlannedRun& r : plan->runs) {
    const double lr = r.experiment.optimizer().lr();
    if (!absl::StrContains(r.name, "_batch_size=")) {
      EXPECT_EQ(lr, 1e-3) << r.name;  // a model without the grid trains at the base's lr
      continue;
    }
    lrs[r.budget_flops].insert(lr);
    EXPECT_TRUE(absl::EndsWith(r.name, absl::StrFormat(",lr=%.4g", lr))) << r.name;
  }
  // At the reference budget the values as written; at 3x the budget each is 3^-0.5 times as large.
  EXPECT_EQ(lrs[2e12], (std::set<double>{1e-3, 3e-3}));
  EXPECT_EQ(lrs[6e12], (std::set<double>{5.774e-4, 1.732e-3}));
  std::set<std::string> names;
  for (const PlannedRun& r : plan->runs) {
    if (const size_t at = r.name.find("_batch_size="); at != std::string::npos) names.insert(r.name.substr(at));
  }
  EXPECT_EQ(names.count("_batch_size=2,lr=0.0005774"), 1u);  // at 6e12
  EXPECT_EQ(names.count("_batch_size=8,lr=0.003"), 1u);      // at 2e12, "3e-3" written with %.4g
}

TEST(PointGrid, BadLrPriorsGetErrorsNamingTheField) {
  auto error_of = [](const std::string& design_extra) {
    auto plan = Plan(design_extra);
    return plan.ok() ? std::string("planned") : std::string(plan.status().message());
  };
  EXPECT_EQ(error_of("grid_lr_prior { exponent: -0.5 reference_flops: 2e12 }"),
            "test.sweep: sweep.isoflop.grid_lr_prior scales the point grid's optimizer.lr axis, but "
            "sweep.isoflop has no point_grid");
  EXPECT_EQ(error_of(absl::StrCat(kBatchLrGrid, "grid_lr_prior { reference_flops: 2e12 }")),
            "test.sweep: sweep.isoflop.grid_lr_prior.exponent=(unset) must be a finite number (a pilot sweep's "
            "fitted lr_opt(C) exponent)");
  EXPECT_EQ(error_of(absl::StrCat(kBatchLrGrid, "grid_lr_prior { exponent: inf reference_flops: 2e12 }")),
            "test.sweep: sweep.isoflop.grid_lr_prior.exponent=inf must be a finite number (a pilot sweep's "
            "fitted lr_opt(C) exponent)");
  for (const std::string reference : {"0", "-1e+12", "nan"}) {
    EXPECT_EQ(error_of(absl::StrCat(kBatchLrGrid, "grid_lr_prior { exponent: -0.5 reference_flops: ", reference,
                                    " }")),
              absl::StrCat("test.sweep: sweep.isoflop.grid_lr_prior.reference_flops=", reference,
                           " must be a positive FLOP budget (where the lr axis's values hold as written)"));
  }
  EXPECT_EQ(error_of(absl::StrCat(kBatchLrGrid, "grid_lr_prior { exponent: -0.5 }")),
            "test.sweep: sweep.isoflop.grid_lr_prior.reference_flops=(unset) must be a positive FLOP budget "
            "(where the lr axis's values hold as written)");
  // Only an axis over optimizer.lr alone is scaled: not a batch axis, not lr set together with another field.
  const std::string no_lr = error_of(absl::StrCat(
      R"pb(point_grid { axis { field: "run.batch_size" values: [ "2", "4" ] } })pb", kLrPrior));
  EXPECT_EQ(no_lr, "test.sweep: sweep.isoflop.point_grid (grid_lr_prior at budgets[0]=2e+12) has no axis over "
                   "optimizer.lr alone (`axis { field: \"optimizer.lr\" values: ... }`) to scale");
  const std::string tuple = error_of(absl::StrCat(
      R"pb(point_grid { axis { fields: [ "optimizer.lr", "run.batch_size" ] values: [ "1e-3,2" ] } })pb",
      kLrPrior));
  EXPECT_TRUE(absl::StrContains(tuple, "has no axis over optimizer.lr alone")) << tuple;
  const std::string word = error_of(absl::StrCat(
      R"pb(point_grid { axis { field: "optimizer.lr" values: [ "1e-3", "fast" ] } })pb", kLrPrior));
  EXPECT_EQ(word, "test.sweep: sweep.isoflop.point_grid (grid_lr_prior at budgets[0]=2e+12).axis[0] value "
                  "\"fast\" (optimizer.lr) times 1 is not a positive finite number");
}

// What a WSD branch may share with its trunk: the model, the batch size and the lr (and all else but length).
struct TrunkKey {
  int64_t d_model, n_layers, batch_size;
  double lr;
  bool operator<(const TrunkKey& o) const {
    return std::tie(d_model, n_layers, batch_size, lr) < std::tie(o.d_model, o.n_layers, o.batch_size, o.lr);
  }
};
TrunkKey KeyOf(const PlannedRun& r) {
  return {r.experiment.model().d_model(), r.experiment.model().n_layers(), r.experiment.run().batch_size(),
          r.experiment.optimizer().lr()};
}

// Checks that `plan`'s WSD branches share only within (model, batch size, lr): every run of such a group but
// the longest starts from the longest's checkpoint, and no run starts from a run with another batch size or
// lr. Returns the number of runs that start from a trunk.
int CheckTrunksShareModelBatchAndLr(const SweepPlan& plan) {
  std::map<std::string, const PlannedRun*> by_name;
  std::map<TrunkKey, std::vector<const PlannedRun*>> groups;
  for (const PlannedRun& r : plan.runs) {
    by_name[r.name] = &r;
    groups[KeyOf(r)].push_back(&r);
  }
  int branches = 0;
  for (const auto& [key, members] : groups) {
    const PlannedRun* longest = members.front();
    for (const PlannedRun* r : members) {
      if (r->steps > longest->steps) longest = r;
    }
    EXPECT_EQ(longest->trunk, "") << longest->name;
    for (const PlannedRun* r : members) {
      if (r == longest) continue;
      // The budgets are 3x apart: a shorter run's stable phase (80% of it) is more than half of it.
      EXPECT_EQ(r->trunk, longest->name) << r->name;
      EXPECT_GT(r->branch_step, r->steps / 2) << r->name;
      EXPECT_LT(r->branch_step, r->steps) << r->name;
    }
  }
  for (const PlannedRun& r : plan.runs) {
    if (r.trunk.empty()) continue;
    ++branches;
    EXPECT_EQ(by_name.count(r.trunk), 1u) << r.name << " starts from " << r.trunk;
    if (by_name.count(r.trunk) == 0) continue;
    const PlannedRun& trunk = *by_name[r.trunk];
    EXPECT_EQ(trunk.experiment.model().d_model(), r.experiment.model().d_model()) << r.name;
    EXPECT_EQ(trunk.experiment.model().n_layers(), r.experiment.model().n_layers()) << r.name;
    EXPECT_EQ(trunk.experiment.run().batch_size(), r.experiment.run().batch_size()) << r.name;
    EXPECT_EQ(trunk.experiment.optimizer().lr(), r.experiment.optimizer().lr()) << r.name;
    EXPECT_GT(trunk.budget_flops, r.budget_flops) << r.name;
    EXPECT_EQ(r.experiment.run().init_from(),
              absl::StrFormat("%s/checkpoints/step_%08d", trunk.experiment.run().output_dir(), r.branch_step));
    const auto& saved = trunk.experiment.run().checkpoint_steps();
    EXPECT_NE(std::find(saved.begin(), saved.end(), r.branch_step), saved.end()) << r.name;
  }
  return branches;
}

const char* kWsdBranches = R"pb(
  wsd_branches: true
  set: [ "schedule.kind=WSD" ]
)pb";

TEST(PointGrid, WsdBranchesShareATrunkOnlyAtTheSameModelBatchSizeAndLr) {
  // Every model carries the grid and sizes recur across budgets: a size at both budgets trains each of its 6
  // grid points' stable phase once, at the larger budget; the 2e12 runs of that point branch off it.
  auto every = Plan(absl::StrCat(kBatchLrGrid, "grid_models: EVERY_MODEL shared_sizes: true"), "wsd_every",
                    kWsdBranches);
  ASSERT_TRUE(every.ok()) << every.status();
  const int branches = CheckTrunksShareModelBatchAndLr(*every);
  EXPECT_GT(branches, 0) << FormatPlan(*every);
  EXPECT_EQ(branches % 6, 0) << FormatPlan(*every);  // a recurring size shares all its grid points
  // The grid only on the model nearest 20 tokens per parameter: the other sizes train at the base's batch
  // size and lr (4, 1e-3), so a gridded size's point at those values shares with the size's plain run at the
  // other budget, and its other points share with nothing.
  auto nearest = Plan(absl::StrCat(kBatchLrGrid, "shared_sizes: true"), "wsd_nearest", kWsdBranches);
  ASSERT_TRUE(nearest.ok()) << nearest.status();
  CheckTrunksShareModelBatchAndLr(*nearest);
  // Without wsd_branches nothing shares.
  auto plain = Plan(absl::StrCat(kBatchLrGrid, "grid_models: EVERY_MODEL shared_sizes: true"), "wsd_plain",
                    R"pb(set: [ "schedule.kind=WSD" ])pb");
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (const PlannedRun& r : plain->runs) EXPECT_EQ(r.trunk, "") << r.name;
}

TEST(PointGrid, WsdBranchesRefuseGridAxesTheyCannotShare) {
  // The branch wiring is the sweep's: an axis over it is refused, naming the axis and field.
  auto wiring = Plan(R"pb(point_grid { axis { field: "run.checkpoint_steps" values: [ "5" ] } })pb", "wsd_wiring",
                     kWsdBranches);
  ASSERT_FALSE(wiring.ok());
  EXPECT_NE(wiring.status().message().find("sweep.isoflop.point_grid.axis[0].field is run.checkpoint_steps, which "
                                           "the sweep sets itself (sweep.wsd_branches sets it"),
            std::string::npos)
      << wiring.status();
  // A point off the WSD schedule has no stable phase to share: the error names the run and the field.
  auto cosine = Plan(R"pb(point_grid { axis { field: "schedule.kind" values: [ "WSD", "COSINE" ] } })pb",
                     "wsd_cosine", kWsdBranches);
  ASSERT_FALSE(cosine.ok());
  EXPECT_NE(cosine.status().message().find("kind=COSINE): sweep.wsd_branches needs schedule.kind: WSD"),
            std::string::npos)
      << cosine.status();
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

// Runs `plan`, 2 runs at a time, with fake_train_for_test as the trainer.
absl::StatusOr<SweepSummary> RunFaked(SweepPlan plan) {
  plan.parallel_runs = 2;
  RunnerOptions runner;
  runner.command = {std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/sweep/fake_train_for_test"};
  return RunSweep(plan, runner);
}

TEST(PointGrid, ASweepWithPointGridsResumesWithoutTrainingAgain) {
  auto plan = Plan(kBatchLrGrid, "resume");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto first = RunFaked(*plan);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->finished, static_cast<int>(plan->runs.size()));
  std::set<int64_t> batches;
  for (const auto& row : first->table.runs) batches.insert(row.batch_size);
  EXPECT_EQ(batches, (std::set<int64_t>{2, 4, 8}));  // the results table records each run's own batch
  auto again = RunFaked(*plan);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->skipped, static_cast<int>(plan->runs.size()));
  EXPECT_EQ(again->finished, static_cast<int>(plan->runs.size()));
}

// With grid_lr_prior the scaled lrs are a function of the file alone: planning it again gives the same run
// names and configs, so a rerun finds every run finished and trains none again.
TEST(PointGrid, ASweepWithALrPriorPlansTheSameRunsAgainAndResumes) {
  auto plan = Plan(absl::StrCat(kBatchLrGrid, kLrPrior), "resume_prior");
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto first = RunFaked(*plan);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->finished, static_cast<int>(plan->runs.size()));
  std::set<double> lrs;
  for (const auto& row : first->table.runs) lrs.insert(row.lr);
  EXPECT_EQ(lrs.count(5.774e-4), 1u);  // the results table records each run's scaled lr
  auto replanned = Plan(absl::StrCat(kBatchLrGrid, kLrPrior), "resume_prior");
  ASSERT_TRUE(replanned.ok()) << replanned.status();
  ASSERT_EQ(replanned->runs.size(), plan->runs.size());
  for (size_t i = 0; i < plan->runs.size(); ++i) {
    EXPECT_EQ(replanned->runs[i].name, plan->runs[i].name);
    EXPECT_EQ(replanned->runs[i].experiment.SerializeAsString(), plan->runs[i].experiment.SerializeAsString())
        << plan->runs[i].name;
  }
  auto again = RunFaked(*replanned);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->skipped, static_cast<int>(plan->runs.size()));
  EXPECT_EQ(again->finished, static_cast<int>(plan->runs.size()));
}

}  // namespace
}  // namespace lmf::sweep
