// The sweep: planning (grid and IsoFLOP designs, and the errors a bad sweep file gets) and running
// (separate processes, failures recorded, a killed sweep finishing only its missing runs). The training
// command is fake_train_for_test, which evaluates a known loss law instead of training.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/damaged_copies.h"
#include "base/file.h"
#include "config/run_length.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/sweep/plan.h"
#include "experiments/sweep/runner.h"
#include "experiments/sweep/sweep_testing.h"
#include "experiments/sweep/sweep_report.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "tokenizer/token_file.h"

namespace lmf::sweep {
namespace {

std::string TmpDir() { return std::getenv("TEST_TMPDIR"); }

std::string FakeTrainer() {
  return std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/sweep/fake_train_for_test";
}

using testing::SimpleSizer;

const char* kBase = R"pb(
  model {
    d_model: 64
    n_layers: 2
    n_heads: 2
    vocab_size: 256
    context_length: 32
    ffn { d_ff: 256 }
  }
  optimizer { lr: 1e-3 }
  data { train_tokens: "train.tok" val_tokens: "val.tok" }
  run { batch_size: 4 max_steps: 10 output_dir: "unused" eval_tokens: 128 }
)pb";

absl::StatusOr<SweepPlan> Plan(const std::string& sweep_body) {
  const std::string text = std::string("name: \"t\"\noutput_dir: \"") + TmpDir() + "/out\"\nexperiment {" +
                           kBase + "}\n" + sweep_body;
  auto sweep = ParseSweepText(text, "test.sweep");
  if (!sweep.ok()) return sweep.status();
  return PlanSweep(*sweep, "test.sweep", TmpDir(), SimpleSizer);
}

const char* kIsoFlop = R"pb(
  isoflop {
    budgets: [ 2e12, 6e12 ]
    family { aspect_ratio: 16 head_size: 16 min_layers: 1 max_layers: 12 }
    models_per_budget: 4
    min_tokens_per_param: 1
    max_tokens_per_param: 500
  }
)pb";

// A finished run of `r` whose losses follow a known law, 2 + 1e3/sqrt(N) + 1e3/sqrt(D), at batch 4, lr 1e-3.
scaling::RunResult KnownLawRow(const PlannedRun& r) {
  scaling::RunResult row;
  row.run = r.name;
  row.budget_flops = r.budget_flops;
  row.params = r.size.params;
  row.tokens = r.tokens;
  row.flops = r.flops;
  row.final_loss = row.best_val_loss = 2 + 1e3 / std::sqrt(r.size.params) + 1e3 / std::sqrt(r.tokens);
  row.d_model = r.experiment.model().d_model();
  row.n_layers = r.experiment.model().n_layers();
  row.n_heads = r.experiment.model().n_heads();
  row.batch_size = 4;
  row.lr = 1e-3;
  return row;
}

// Every truncation and 1500 seeded edits of a sweep file, with an IsoFLOP design and then with a grid: an
// error that names the file, or a plan. Never a crash or a hang (or, under --config=asan, a bad read).
TEST(SweepPlan, DamagedSweepFilesGiveErrorsNamingTheFileOrPlans) {
  const std::string head =
      std::string("name: \"t\"\noutput_dir: \"") + TmpDir() + "/out\"\nexperiment {" + kBase + "}\n";
  const std::string grid = "grid { axis { field: \"optimizer.lr\" values: [\"1e-3\", \"3e-3\"] } }\n";
  for (const std::string& design : {std::string(kIsoFlop), grid}) {
    int errors = 0;
    for (const std::string& bad :
         DamagedCopies(head + design, /*seed=*/41, /*edits=*/1500, /*max_prefixes=*/512)) {
      absl::StatusOr<config::Sweep> sweep = ParseSweepText(bad, "test.sweep");
      absl::Status status = sweep.status();
      if (sweep.ok()) status = PlanSweep(*sweep, "test.sweep", TmpDir(), SimpleSizer).status();
      if (status.ok()) continue;
      ++errors;
      EXPECT_TRUE(absl::StartsWith(status.message(), "test.sweep")) << status << "\n" << Escaped(bad);
    }
    EXPECT_GT(errors, 500);
  }
}

TEST(SweepPlan, GridIsTheCartesianProductLastAxisFastest) {
  auto plan = Plan(R"pb(grid {
                          axis {
                            field: "optimizer.lr"
                            values: [ "1e-3", "3e-3" ]
                          }
                          axis {
                            field: "model.n_layers"
                            values: [ "1", "2", "3" ]
                          }
                        })pb");
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 6u);
  EXPECT_EQ(plan->runs[0].name, "lr=1e-3,n_layers=1");
  EXPECT_EQ(plan->runs[1].name, "lr=1e-3,n_layers=2");
  EXPECT_EQ(plan->runs[5].name, "lr=3e-3,n_layers=3");
  EXPECT_DOUBLE_EQ(plan->runs[5].experiment.optimizer().lr(), 3e-3);
  EXPECT_EQ(plan->runs[5].experiment.model().n_layers(), 3);
  EXPECT_EQ(plan->runs[5].experiment.run().output_dir(), TmpDir() + "/out/runs/lr=3e-3,n_layers=3");
  EXPECT_EQ(plan->runs[0].experiment.data().train_tokens(), TmpDir() + "/train.tok");  // made absolute
}

TEST(SweepPlan, IsoFlopRunsSpendTheirBudgetWithinRounding) {
  auto plan = Plan(kIsoFlop);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 8u);
  std::set<double> budgets;
  for (const PlannedRun& r : plan->runs) {
    budgets.insert(r.budget_flops);
    // Steps are whole: the run spends the budget minus less than one step's worth.
    const double step_flops = 4 * 32 * r.size.training_flops_per_token;
    EXPECT_LE(r.flops, r.budget_flops) << r.name;
    EXPECT_GT(r.flops, r.budget_flops - step_flops) << r.name;
    EXPECT_GE(r.steps, 20) << r.name;
    const double tpp = r.tokens / r.size.params;
    EXPECT_GE(tpp, 1.0) << r.name;
    EXPECT_LE(tpp, 500.0) << r.name;
    EXPECT_EQ(r.experiment.model().d_model() % 16, 0);
    EXPECT_EQ(r.experiment.model().n_heads() * 16, r.experiment.model().d_model());
  }
  EXPECT_EQ(budgets.size(), 2u);
  EXPECT_EQ(plan->runs[0].experiment.run().eval_interval(), 0);  // evals_per_run unset: the base's
  EXPECT_NE(FormatPlan(*plan).find("C2e12_d"), std::string::npos);
}

TEST(SweepPlan, EvalsPerRunSpreadsEvaluationsOverEachRun) {
  auto plan = Plan(std::string("evals_per_run: 5\n") + kIsoFlop);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const PlannedRun& r : plan->runs) {
    EXPECT_EQ(r.experiment.run().eval_interval(), r.steps / 5) << r.name;
  }
}

TEST(SweepPlan, AspectSpreadGivesFinerSizesWithinTheAspectBand) {
  auto plan =
      Plan(R"pb(isoflop {
                  budgets: 6e12
                  family { aspect_ratio: 16 head_size: 8 min_layers: 1 max_layers: 12 aspect_spread: 1.5 }
                  models_per_budget: 6
                  min_tokens_per_param: 1
                  max_tokens_per_param: 500
                })pb");
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->runs.size(), 6u);
  std::set<double> sizes;
  for (const PlannedRun& r : plan->runs) {
    const double aspect =
        static_cast<double>(r.experiment.model().d_model()) / r.experiment.model().n_layers();
    EXPECT_GE(aspect, 16 / 1.5 - 1e-9) << r.name;
    EXPECT_LE(aspect, 16 * 1.5 + 1e-9) << r.name;
    sizes.insert(r.size.params);
  }
  EXPECT_EQ(sizes.size(), 6u);  // six distinct model sizes
}

// Two model sizes at three lengths on WSD: per size, the 60-step run is the trunk and the others start from
// its checkpoint after the last step where their learning rates agree. A 20-step run with decay_fraction 0.2
// decays from step 16, whose rate is still the peak (the decay's x = 0): it shares steps 0-16 and branches at
// 17; a 40-step run at 33.
const char* kWsdGrid = R"pb(
  set: [ "schedule.kind=WSD", "schedule.decay_fraction=0.2" ]
  wsd_branches: true
  grid {
    axis {
      field: "model.n_layers"
      values: [ "1", "2" ]
    }
    axis {
      field: "run.max_steps"
      values: [ "20", "60", "40" ]
    }
  }
)pb";

TEST(SweepPlan, WsdBranchesStartFromTheLongestRunOfTheirShape) {
  auto plan = Plan(kWsdGrid);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->runs.size(), 6u);
  for (const PlannedRun& r : plan->runs) {
    const std::string trunk = absl::StrCat("n_layers=", r.experiment.model().n_layers(), ",max_steps=60");
    const std::string trunk_dir = TmpDir() + "/out/runs/" + trunk;
    if (r.steps == 60) {
      EXPECT_EQ(r.trunk, "") << r.name;
      EXPECT_EQ(r.experiment.run().init_from(), "") << r.name;
      EXPECT_EQ(std::vector<int64_t>(r.experiment.run().checkpoint_steps().begin(),
                                     r.experiment.run().checkpoint_steps().end()),
                (std::vector<int64_t>{17, 33}))
          << r.name;
      EXPECT_DOUBLE_EQ(r.OwnFlops(), r.flops);
      continue;
    }
    const int64_t branch = r.steps == 20 ? 17 : 33;
    EXPECT_EQ(r.trunk, trunk) << r.name;
    EXPECT_EQ(r.branch_step, branch) << r.name;
    EXPECT_EQ(r.experiment.run().init_from(), absl::StrFormat("%s/checkpoints/step_%08d", trunk_dir, branch));
    EXPECT_EQ(r.experiment.run().checkpoint_steps_size(), 0) << r.name;
    EXPECT_DOUBLE_EQ(r.OwnFlops(), r.flops * (r.steps - branch) / r.steps) << r.name;
  }
  const std::string text = FormatPlan(*plan);
  EXPECT_NE(text.find("  n_layers=1,max_steps=60 step 17\n"), std::string::npos) << text;
  // Per size 20 + 40 + 60 = 120 steps' FLOPs; trained: 60 + (20 - 17) + (40 - 33) = 70 of them.
  EXPECT_NE(text.find("WSD branches: "), std::string::npos) << text;
  EXPECT_NE(text.find(" (58%)"), std::string::npos) << text;

  // Without wsd_branches, nothing starts from anything.
  auto plain = Plan(absl::StrReplaceAll(kWsdGrid, {{"wsd_branches: true", ""}}));
  ASSERT_TRUE(plain.ok()) << plain.status();
  for (const PlannedRun& r : plain->runs) {
    EXPECT_EQ(r.trunk, "");
    EXPECT_EQ(r.experiment.run().checkpoint_steps_size(), 0);
  }
  EXPECT_EQ(FormatPlan(*plain).find("starts from"), std::string::npos);
}

// The number of model shapes planned at more than one budget.
int RecurringShapes(const SweepPlan& plan) {
  std::map<std::pair<int, int>, int> budgets_of;
  for (const PlannedRun& r : plan.runs)
    ++budgets_of[{r.experiment.model().d_model(), r.experiment.model().n_layers()}];
  return static_cast<int>(std::count_if(budgets_of.begin(), budgets_of.end(),
                                        [](const auto& entry) { return entry.second > 1; }));
}

TEST(SweepPlan, SharedSizesRecurAcrossBudgets) {
  const std::string design =
      absl::StrReplaceAll(kIsoFlop, {{"budgets: [ 2e12, 6e12 ]", "budgets: [ 2e12, 4e12, 8e12 ]"},
                                     {"models_per_budget: 4", "models_per_budget: 5"},
                                     {"max_layers: 12", "max_layers: 12 aspect_spread: 2"}});
  auto spread = Plan(design);
  auto shared = Plan(
      absl::StrReplaceAll(design, {{"models_per_budget: 5", "models_per_budget: 5 shared_sizes: true"}}));
  ASSERT_TRUE(spread.ok()) << spread.status();
  ASSERT_TRUE(shared.ok()) << shared.status();
  // As many sizes at each budget (5, or all when fewer are feasible), each within the bounds.
  ASSERT_EQ(shared->runs.size(), spread->runs.size());
  for (const PlannedRun& r : shared->runs) {
    const double tpp = r.tokens / r.size.params;
    EXPECT_GE(tpp, 1.0) << r.name;
    EXPECT_LE(tpp, 500.0) << r.name;
  }
  EXPECT_GT(RecurringShapes(*shared), RecurringShapes(*spread)) << FormatPlan(*spread) << FormatPlan(*shared);
}

TEST(SweepPlan, WsdBranchesNeedWsdRunsThatDecayAtTheirEnd) {
  auto cosine = Plan(absl::StrReplaceAll(kWsdGrid, {{"schedule.kind=WSD", "schedule.kind=COSINE"}}));
  ASSERT_FALSE(cosine.ok());
  EXPECT_EQ(cosine.status().message(),
            "test.sweep (run n_layers=1,max_steps=20): sweep.wsd_branches needs schedule.kind: WSD (the runs "
            "share a stable phase); this run's is COSINE");
  auto fixed_end = Plan(absl::StrReplaceAll(
      kWsdGrid, {{"\"schedule.kind=WSD\"", "\"schedule.kind=WSD\", \"schedule.decay_end=18\""}}));
  ASSERT_FALSE(fixed_end.ok());
  EXPECT_EQ(
      fixed_end.status().message(),
      "test.sweep (run n_layers=1,max_steps=20): sweep.wsd_branches needs schedule.decay_end: 0 (each run "
      "decays at its own end); this run's is 18");
  auto own_init = Plan(absl::StrReplaceAll(
      kWsdGrid, {{"\"schedule.kind=WSD\"", "\"schedule.kind=WSD\", \"run.init_from=x\""}}));
  ASSERT_FALSE(own_init.ok());
  EXPECT_NE(
      own_init.status().message().find("sweep.wsd_branches sets each run's run.init_from itself; this run "
                                       "already starts from "),
      std::string::npos)
      << own_init.status();
}

TEST(SweepPlan, BadSweepsGetClearErrors) {
  auto empty = Plan("grid {}");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().message(),
            "test.sweep: sweep.grid has no axis; add `axis { field: ... values: ... }`");

  auto unknown = Plan(R"pb(grid { axis { field: "model.no_such_field" values: "1" } })pb");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("test.sweep: sweep.grid: "), std::string::npos)
      << unknown.status();
  EXPECT_NE(unknown.status().message().find("no_such_field"), std::string::npos) << unknown.status();

  auto small = Plan(R"pb(isoflop {
                           budgets: 1e6
                           family { head_size: 16 }
                         })pb");
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("sweep.isoflop.budgets[0]=1e+06 is too small for the model family"),
            std::string::npos)
      << small.status();

  auto unknown_sweep_field = ParseSweepText("budgetz: 3", "bad.sweep");
  ASSERT_FALSE(unknown_sweep_field.ok());
  EXPECT_NE(unknown_sweep_field.status().message().find("bad.sweep:1:"), std::string::npos);

  auto no_design = Plan("");
  ASSERT_FALSE(no_design.ok());
  EXPECT_NE(no_design.status().message().find("needs a design"), std::string::npos);

  auto bad_target = Plan(R"pb(target_flops: -1
                              grid { axis { field: "optimizer.lr" values: "1e-3" } })pb");
  ASSERT_FALSE(bad_target.ok());
  EXPECT_EQ(bad_target.status().message(),
            "test.sweep: sweep.target_flops=-1 must be a positive FLOP count (0: 100x the largest budget)");

  // A run without validation would train and then fail for want of a loss: refused when planned.
  auto no_eval = Plan(R"pb(set: "run.eval_tokens=0"
                           grid { axis { field: "optimizer.lr" values: "1e-3" } })pb");
  ASSERT_FALSE(no_eval.ok());
  EXPECT_EQ(no_eval.status().message(),
            "test.sweep (run lr=1e-3): run.eval_tokens=0: a sweep records each run's validation loss; set "
            "data.val_tokens and run.eval_tokens in the base experiment or the sweep's `set`");
}

// Two axes over one field made runs named "n_layers=1,n_layers=2" that trained only the last value; an axis
// over a field the sweep sets itself (run.output_dir) was silently overwritten. Both are refused.
TEST(SweepPlan, GridAxesMustBeOverDistinctFieldsTheSweepDoesNotSet) {
  auto twice = Plan(R"pb(grid {
                           axis {
                             field: "model.n_layers"
                             values: [ "1", "2" ]
                           }
                           axis {
                             field: "optimizer.lr"
                             values: [ "1e-3" ]
                           }
                           axis {
                             field: "model.n_layers"
                             values: [ "3" ]
                           }
                         })pb");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(
      twice.status().message(),
      "test.sweep: sweep.grid.axis[2] and axis[0] are both over model.n_layers: each run would take only "
      "the last axis's value; put all the values in one axis");
  auto folder = Plan(R"pb(grid {
                            axis {
                              field: "run.output_dir"
                              values: [ "a", "b" ]
                            }
                          })pb");
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.status().message(),
            "test.sweep: sweep.grid.axis[0].field is run.output_dir, which the sweep sets itself (each run's "
            "folder is <sweep output_dir>/runs/<run name>): an axis over it would change nothing");
  auto interval = Plan(R"pb(evals_per_run: 4
                            grid {
                              axis {
                                field: "run.eval_interval"
                                values: [ "1", "2" ]
                              }
                            })pb");
  ASSERT_FALSE(interval.ok());
  EXPECT_NE(interval.status().message().find("sweep.evals_per_run sets it"), std::string::npos)
      << interval.status();
  // Without evals_per_run the evaluation interval is the user's to sweep.
  EXPECT_TRUE(Plan(R"pb(grid {
                          axis {
                            field: "run.eval_interval"
                            values: [ "1", "2" ]
                          }
                        })pb")
                  .ok());
}

// Every member of a family shares key/value heads as the base does (sweep.proto): a grouped-query base
// keeps its group size in every member (widths in whole groups); shapes whose heads did not split into the
// base's groups silently became multi-head before. Multi-query stays multi-query, multi-head multi-head.
TEST(SweepPlan, FamilyMembersShareKeyValueHeadsAsTheBaseDoes) {
  config::ShapeFamily family;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "aspect_ratio: 16 head_size: 8 min_layers: 1 max_layers: 6 aspect_spread: 1.5", &family));
  auto shapes_with = [&](int n_heads, int n_kv_heads) {
    config::Experiment base;
    base.mutable_model()->set_n_heads(n_heads);
    if (n_kv_heads > 0) base.mutable_model()->set_n_kv_heads(n_kv_heads);
    std::vector<ModelShape> shapes = FamilyShapes(family, base);
    EXPECT_EQ(FamilyShapeCount(family, base, 1e9), static_cast<double>(shapes.size()));
    return shapes;
  };
  const std::vector<ModelShape> grouped = shapes_with(8, 2);  // 4 query heads per key/value head
  ASSERT_FALSE(grouped.empty());
  std::set<int64_t> depths;
  for (const ModelShape& s : grouped) {
    EXPECT_EQ(s.n_heads % 4, 0) << "d_model " << s.d_model << ", L " << s.n_layers;
    EXPECT_EQ(s.n_kv_heads * 4, s.n_heads) << "d_model " << s.d_model << ", L " << s.n_layers;
    depths.insert(s.n_layers);
  }
  EXPECT_EQ(depths.size(), 6u);  // every depth keeps a member
  for (const ModelShape& s : shapes_with(8, 1)) EXPECT_EQ(s.n_kv_heads, 1) << s.d_model;
  for (const ModelShape& s : shapes_with(8, 0)) EXPECT_EQ(s.n_kv_heads, s.n_heads) << s.d_model;
  for (const ModelShape& s : shapes_with(8, 8)) EXPECT_EQ(s.n_kv_heads, s.n_heads) << s.d_model;

  auto uneven = Plan(R"pb(set: "model.n_heads=8"
                          set: "model.n_kv_heads=3"
                          isoflop {
                            budgets: [ 2e12, 6e12 ]
                            family { aspect_ratio: 16 head_size: 16 min_layers: 1 max_layers: 12 }
                          })pb");
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find(
                "sweep.isoflop.family: the base's model.n_kv_heads=3 does not divide its model.n_heads=8"),
            std::string::npos)
      << uneven.status();
}

// One value written two ways ("1e-3", "0.001") trained the same config twice under two names, and the fits
// counted it twice.
TEST(SweepPlan, GridRunsWithTheSameConfigAreRefused) {
  auto same = Plan(R"pb(grid {
                          axis {
                            field: "optimizer.lr"
                            values: [ "1e-3", "2e-3", "0.001" ]
                          }
                        })pb");
  ASSERT_FALSE(same.ok());
  EXPECT_EQ(
      same.status().message(),
      "test.sweep: sweep.grid: runs lr=1e-3 and lr=0.001 have the same config (axis values that set the "
      "same thing); drop one");
}

// A budget so large that a model's step count passes int64 is "too large for the model family", not "too
// small" (the count wrapped negative); one that plans more than 2^53 steps is refused by name.
TEST(SweepPlan, HugeBudgetsAreTooLargeNotTooSmall) {
  auto huge = Plan(R"pb(isoflop {
                          budgets: [ 2e12, 1e28 ]
                          family { aspect_ratio: 16 head_size: 16 min_layers: 1 max_layers: 12 }
                          models_per_budget: 4
                          min_tokens_per_param: 1
                          max_tokens_per_param: 500
                        })pb");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("sweep.isoflop.budgets[1]=1e+28 is too large for the model family"),
            std::string::npos)
      << huge.status();
  auto endless = Plan(R"pb(isoflop {
                             budgets: [ 1e28 ]
                             family { aspect_ratio: 16 head_size: 16 min_layers: 1 max_layers: 12 }
                             models_per_budget: 3
                             min_tokens_per_param: 1
                             max_tokens_per_param: 1e30
                           })pb");
  ASSERT_FALSE(endless.ok());
  EXPECT_NE(endless.status().message().find("steps, more than 2^53"), std::string::npos) << endless.status();
}

// A family is checked before any of its shapes is built: aspect_ratio 1e9 or max_layers 100000 made the
// planner allocate until std::bad_alloc.
TEST(SweepPlan, FamilyBoundsAreCheckedBeforeItsShapesAreBuilt) {
  auto isoflop = [](const std::string& family) {
    return Plan("isoflop { budgets: [ 2e12, 6e12 ] family { " + family + " } }");
  };
  auto wide = isoflop("aspect_ratio: 1e9 head_size: 8 max_layers: 8 aspect_spread: 1.5");
  ASSERT_FALSE(wide.ok());
  EXPECT_EQ(
      wide.status().message(),
      "test.sweep: sweep.isoflop.family: its widest shape (aspect_ratio 1e+09 x max_layers 8 x aspect_spread "
      "1.5) has d_model 1.2e+10; model.d_model is a 32-bit field (at most 2147483647)");
  auto deep = isoflop("aspect_ratio: 16 head_size: 8 max_layers: 100000 aspect_spread: 1.5");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("test.sweep: sweep.isoflop.family has more than 100000 shapes"),
            std::string::npos)
      << deep.status();
  auto ffn = isoflop("head_size: 16 ffn_ratio: 1e9");
  ASSERT_FALSE(ffn.ok());
  EXPECT_NE(ffn.status().message().find("model.ffn.d_ff is a 32-bit field"), std::string::npos)
      << ffn.status();
  auto negative = isoflop("head_size: 16 ffn_ratio: -2");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("ffn_ratio -2"), std::string::npos) << negative.status();

  // The count is exact, so a family just under the bound is planned.
  config::Experiment base;
  for (const char* text : {"aspect_ratio: 16 head_size: 16 max_layers: 12",
                           "aspect_ratio: 16 head_size: 8 max_layers: 30 aspect_spread: 1.5",
                           "aspect_ratio: 3 head_size: 8 min_layers: 2 max_layers: 9 aspect_spread: 4",
                           "aspect_ratio: 100 head_size: 64 max_layers: 40 aspect_spread: 2.5"}) {
    config::ShapeFamily family;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &family)) << text;
    EXPECT_EQ(FamilyShapeCount(family, base, 1e9), static_cast<double>(FamilyShapes(family, base).size()))
        << text;
  }
}

TEST(SweepReport, RecipeShapeIsTheFamilyMemberClosestToTheRecommendedSize) {
  auto plan = Plan(kIsoFlop);
  ASSERT_TRUE(plan.ok()) << plan.status();
  scaling::ResultsTable table;
  for (const PlannedRun& r : plan->runs) {
    table.runs.push_back(KnownLawRow(r));
  }
  const scaling::RecipeHook hook = FamilyRecipe(*plan, SimpleSizer);
  ASSERT_TRUE(hook);
  auto recipe = hook(2e6, 2e7, 2.4e14, table, scaling::ObservationChoice());
  ASSERT_TRUE(recipe.ok()) << recipe.status();
  // Family: d_model = 16 L (head size 16); SimpleSizer's N = 12 L d^2 + 2 * 256 d. Closest to 2e6 is
  // L=9, d=144 (2.31e6, ln-distance 0.145), not L=8, d=128 (1.64e6, 0.199).
  EXPECT_EQ(recipe->n_layers, 9);
  EXPECT_EQ(recipe->d_model, 144);
  EXPECT_EQ(recipe->n_heads, 9);
  EXPECT_NE(recipe->basis.find("closest to N_opt"), std::string::npos) << recipe->basis;
  EXPECT_EQ(recipe->basis.find("no model config"), std::string::npos) << recipe->basis;  // replaced, not appended
}

// sweep.report_active_params: the report of mixture-of-experts runs fits their active counts (a third to a
// half of each total, the share varying with size, so that the fits differ) and names the basis; without it,
// the totals, named too.
TEST(SweepReport, ReportActiveParamsFitsTheRunsActiveCounts) {
  for (const bool active : {false, true}) {
    auto plan = Plan(std::string(kIsoFlop) + (active ? "report_active_params: true\n" : ""));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->report_active_params, active);
    scaling::ResultsTable table;
    for (size_t i = 0; i < plan->runs.size(); ++i) {
      const PlannedRun& r = plan->runs[i];
      scaling::RunResult row = KnownLawRow(r);
      row.non_embedding_params = r.size.params;
      row.active_params = row.active_non_embedding_params = r.size.params * (0.3 + 0.05 * static_cast<double>(i % 4));
      table.runs.push_back(row);
    }
    ASSERT_TRUE(MakeDirs(plan->output_dir).ok());
    const std::string csv = plan->output_dir + "/results.csv";
    ASSERT_TRUE(scaling::WriteResults(csv, table).ok());
    auto analysis = WriteSweepReport(*plan, csv, "note", SimpleSizer);
    ASSERT_TRUE(analysis.ok()) << analysis.status();
    ASSERT_FALSE(analysis->observations.empty());
    for (size_t i = 0; i < analysis->observations.size(); ++i) {
      const scaling::RunResult& row = table.runs[i];
      EXPECT_EQ(analysis->observations[i].params, active ? row.active_params : row.params) << row.run;
    }
    auto report = ReadFile(plan->output_dir + "/report/report.md");
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_NE(report->find(active ? "mixture-of-experts runs: active parameters, the experts a token uses"
                                  : "mixture-of-experts runs: total parameters, every expert"),
              std::string::npos)
        << *report;
  }
}

// A sweep whose runs no longer finish (a rerun after a config change where every run failed) has no report;
// the earlier report, of other runs, is removed instead of standing for it.
TEST(SweepReport, NoFinishedRunRemovesTheEarlierReport) {
  auto plan = Plan(kIsoFlop);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const std::string report_dir = plan->output_dir + "/report";
  ASSERT_TRUE(MakeDirs(report_dir).ok());
  ASSERT_TRUE(WriteFileAtomically(report_dir + "/report.md", "# an earlier sweep's report\n").ok());
  ASSERT_TRUE(WriteFileAtomically(report_dir + "/isoflop.svg", "<svg/>").ok());
  scaling::ResultsTable table;
  for (const PlannedRun& r : plan->runs) {
    scaling::RunResult row;
    row.run = r.name;
    row.budget_flops = r.budget_flops;
    row.params = row.non_embedding_params = r.size.params;
    row.d_model = row.n_layers = row.n_heads = row.batch_size = 1;
    row.lr = 1e-3;
    row.status = scaling::RunStatus::kFailed;
    table.runs.push_back(row);
  }
  const std::string csv = plan->output_dir + "/results.csv";
  ASSERT_TRUE(scaling::WriteResults(csv, table).ok());
  auto analysis = WriteSweepReport(*plan, csv, "note", SimpleSizer);
  ASSERT_FALSE(analysis.ok());
  EXPECT_NE(analysis.status().message().find("no finished run"), std::string::npos) << analysis.status();
  EXPECT_NE(analysis.status().message().find("removed the earlier report in " + report_dir),
            std::string::npos)
      << analysis.status();
  EXPECT_FALSE(FileExists(report_dir + "/report.md"));
  EXPECT_FALSE(FileExists(report_dir + "/isoflop.svg"));
}

RunnerOptions FakeRunner() {
  RunnerOptions o;
  o.command = {FakeTrainer()};
  return o;
}

int CountLines(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return 0;
  return static_cast<int>(std::count(text->begin(), text->end(), '\n'));
}

TEST(SweepRunner, RunsEverythingThenSkipsFinishedRuns) {
  auto plan = Plan(kIsoFlop);
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->parallel_runs = 2;
  const std::string log = TmpDir() + "/invocations_a.txt";
  ::setenv("FAKE_TRAIN_LOG", log.c_str(), 1);
  RunnerOptions runner = FakeRunner();
  runner.threads_per_run = 3;
  auto summary = RunSweep(*plan, runner);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->finished, 8);
  EXPECT_EQ(summary->failed, 0);
  EXPECT_EQ(CountLines(log), 8);
  EXPECT_NE(ReadFile(log)->find(" threads=3\n"), std::string::npos);  // each run got its share of cores
  auto table = scaling::ReadResults(summary->results_path);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->runs.size(), 8u);
  for (const auto& row : table->runs) EXPECT_GT(row.final_loss, 1.8);

  auto again = RunSweep(*plan, FakeRunner());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->skipped, 8);
  EXPECT_EQ(CountLines(log), 8);  // nothing ran a second time
  ::unsetenv("FAKE_TRAIN_LOG");
}

// The finish hook (the report) runs after results.csv is written and before the folder's lock is released:
// a second sweep on the folder is refused meanwhile. Its error is RunSweep's.
TEST(SweepRunner, FinishRunsUnderTheFolderLock) {
  auto plan = Plan(kIsoFlop);
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->output_dir = TmpDir() + "/finish";
  for (auto& r : plan->runs) r.experiment.mutable_run()->set_output_dir(plan->output_dir + "/runs/" + r.name);
  RunnerOptions runner = FakeRunner();
  int calls = 0;
  runner.finish = [&](const SweepSummary& summary) -> absl::Status {
    ++calls;
    EXPECT_EQ(summary.finished + summary.skipped, 8);
    EXPECT_TRUE(scaling::ReadResults(summary.results_path).ok());
    // A second sweep now: refused, since the first still holds the folder.
    absl::StatusOr<SweepSummary> second = RunSweep(*plan, FakeRunner());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
    EXPECT_NE(second.status().message().find("is in use by another sweep"), std::string::npos)
        << second.status();
    return absl::OkStatus();
  };
  ASSERT_TRUE(RunSweep(*plan, runner).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(RunSweep(*plan, FakeRunner()).ok());  // the lock was released after it

  runner.finish = [](const SweepSummary&) { return absl::InternalError("no room for the report"); };
  absl::StatusOr<SweepSummary> failed = RunSweep(*plan, runner);
  EXPECT_EQ(failed.status(), absl::InternalError("no room for the report"));
}

// A run folder written by an older build (its config.textproto lacks fields added since, at their defaults)
// is still the planned run: skipped, its result kept. A run whose config really changed reruns, and its
// earlier result is moved aside, not deleted (the rerun may fail).
TEST(SweepRunner, OlderBuildsRunsAreSkippedAndChangedRunsKeepTheirResult) {
  auto plan = Plan(kIsoFlop);
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->output_dir = TmpDir() + "/older";
  for (auto& r : plan->runs) r.experiment.mutable_run()->set_output_dir(plan->output_dir + "/runs/" + r.name);
  ASSERT_TRUE(RunSweep(*plan, FakeRunner()).ok());
  const std::string older = plan->output_dir + "/runs/" + plan->runs[0].name;
  const std::string changed = plan->output_dir + "/runs/" + plan->runs[1].name;
  auto text = ReadFile(older + "/config.textproto");
  ASSERT_TRUE(text.ok());
  std::string stripped;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (absl::StrContains(line, "final_logit_softcap") || absl::StrContains(line, "parallel_shared_norm"))
      continue;
    absl::StrAppend(&stripped, line, "\n");
  }
  ASSERT_LT(stripped.size(), text->size());
  ASSERT_TRUE(WriteFileAtomically(older + "/config.textproto", stripped).ok());
  text = ReadFile(changed + "/config.textproto");
  ASSERT_TRUE(text.ok());
  const size_t lr = text->find("lr: ");
  ASSERT_NE(lr, std::string::npos);
  ASSERT_TRUE(WriteFileAtomically(changed + "/config.textproto",
                                  text->substr(0, lr) + "lr: 0.5\n" + text->substr(text->find('\n', lr) + 1))
                  .ok());
  auto before = ReadFile(changed + "/result.textproto");
  ASSERT_TRUE(before.ok());

  std::vector<std::string> lines;
  RunnerOptions runner = FakeRunner();
  runner.progress = [&](const std::string& line) { lines.push_back(line); };
  auto again = RunSweep(*plan, runner);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->skipped, 7);
  EXPECT_EQ(again->finished, 8);  // the 7 skipped and the rerun
  const std::string rerun = absl::StrJoin(lines, "\n");
  EXPECT_NE(rerun.find("[rerun] " + plan->runs[1].name +
                       ": its config or data changed since it finished (modified: optimizer.lr: 0.5 -> "),
            std::string::npos)
      << rerun;
  EXPECT_NE(rerun.find("the earlier run is kept in " + changed + "/superseded-1"), std::string::npos)
      << rerun;
  auto superseded = ReadFile(changed + "/superseded-1/result.textproto");
  ASSERT_TRUE(superseded.ok()) << superseded.status();
  EXPECT_EQ(*superseded, *before);
  EXPECT_FALSE(FileExists(changed + "/superseded-1/config.textproto"));  // the config stays: the rerun's
  // A second change keeps both earlier runs.
  text = ReadFile(changed + "/config.textproto");
  ASSERT_TRUE(text.ok());
  const size_t lr2 = text->find("lr: ");
  ASSERT_TRUE(WriteFileAtomically(changed + "/config.textproto", text->substr(0, lr2) + "lr: 0.25\n" +
                                                                     text->substr(text->find('\n', lr2) + 1))
                  .ok());
  ASSERT_TRUE(RunSweep(*plan, FakeRunner()).ok());
  EXPECT_TRUE(FileExists(changed + "/superseded-1/result.textproto"));
  EXPECT_TRUE(FileExists(changed + "/superseded-2/result.textproto"));

  // A run killed part way (no finished result, checkpoints there) under another config does not resume its
  // checkpoints under this one: they move aside too.
  const std::string killed = plan->output_dir + "/runs/" + plan->runs[2].name;
  config::SweepRunResult failed;
  failed.set_status(config::SweepRunResult::FAILED);
  ASSERT_TRUE(WriteRunResult(killed, failed).ok());
  text = ReadFile(killed + "/config.textproto");
  ASSERT_TRUE(text.ok());
  const size_t lr3 = text->find("lr: ");
  ASSERT_TRUE(WriteFileAtomically(killed + "/config.textproto", text->substr(0, lr3) + "lr: 0.125\n" +
                                                                    text->substr(text->find('\n', lr3) + 1))
                  .ok());
  lines.clear();
  ASSERT_TRUE(RunSweep(*plan, runner).ok());
  EXPECT_NE(absl::StrJoin(lines, "\n")
                .find("[rerun] " + plan->runs[2].name +
                      ": its config or data changed since it last trained (modified: "),
            std::string::npos)
      << absl::StrJoin(lines, "\n");
  EXPECT_TRUE(FileExists(killed + "/superseded-1/checkpoints"));
}

// One sweep per folder: while another holds its lock, RunSweep refuses before it touches any run.
void WriteTokens(const std::string& path, uint32_t first_id) {
  auto writer = tokenizer::TokenFileWriter::Create(path, 256, 0);
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::vector<uint32_t> ids(1000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((first_id + i) % 256);
  ASSERT_TRUE(writer->Append(ids.data(), ids.size()).ok());
  ASSERT_TRUE(writer->Commit().ok());
}

// A token file replaced at the same path (a corpus encoded again) makes the finished runs that read it
// train again, as a config change does: before, the sweep reused them and its table and fits mixed runs of
// two corpora. Unchanged files are read as the same data, so a restart redoes nothing.
TEST(SweepRunner, FinishedRunsWhoseDataChangedTrainAgain) {
  auto plan = Plan(kIsoFlop);
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->output_dir = TmpDir() + "/data_changed";
  const std::string train = TmpDir() + "/dc_train.tok", val = TmpDir() + "/dc_val.tok";
  WriteTokens(train, 0);
  WriteTokens(val, 7);
  for (auto& r : plan->runs) {
    r.experiment.mutable_run()->set_output_dir(plan->output_dir + "/runs/" + r.name);
    r.experiment.mutable_data()->set_train_tokens(train);
    r.experiment.mutable_data()->set_val_tokens(val);
  }
  ASSERT_TRUE(RunSweep(*plan, FakeRunner()).ok());
  auto same = RunSweep(*plan, FakeRunner());
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->skipped, 8);

  // A file that cannot be read now is no evidence of a change: the finished runs stay finished.
  ASSERT_EQ(::rename(train.c_str(), (train + ".away").c_str()), 0);
  auto unreadable = RunSweep(*plan, FakeRunner());
  ASSERT_TRUE(unreadable.ok()) << unreadable.status();
  EXPECT_EQ(unreadable->skipped, 8);
  ASSERT_EQ(::rename((train + ".away").c_str(), train.c_str()), 0);

  WriteTokens(train, 1);  // the same size, other ids
  std::vector<std::string> lines;
  RunnerOptions runner = FakeRunner();
  runner.progress = [&](const std::string& line) { lines.push_back(line); };
  auto again = RunSweep(*plan, runner);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->skipped, 0);
  EXPECT_EQ(again->finished, 8);
  const std::string said = absl::StrJoin(lines, "\n");
  EXPECT_NE(said.find("[rerun] " + plan->runs[0].name +
                      ": its config or data changed since it finished (data: " + train +
                      ": 1000 tokens, fingerprint "),
            std::string::npos)
      << said;
  EXPECT_TRUE(
      FileExists(plan->output_dir + "/runs/" + plan->runs[0].name + "/superseded-1/result.textproto"));
}

TEST(SweepRunner, ASweepFolderInUseIsRefused) {
  auto plan = Plan(kIsoFlop);
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->output_dir = TmpDir() + "/locked_sweep";
  ASSERT_TRUE(MakeDirs(plan->output_dir).ok());
  absl::StatusOr<FileLock> other = FileLock::Acquire(plan->output_dir + "/.sweep.lock");
  ASSERT_TRUE(other.ok()) << other.status();
  auto refused = RunSweep(*plan, FakeRunner());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.status().message())
                .find("sweep output_dir=" + plan->output_dir + " is in use by another sweep: "),
            std::string::npos)
      << refused.status();
  EXPECT_FALSE(FileExists(plan->output_dir + "/plan.txt"));

  // A run still in training (its run folder locked: a trainer an earlier sweep left, or one started by hand).
  other = absl::InternalError("released");
  for (auto& r : plan->runs) r.experiment.mutable_run()->set_output_dir(plan->output_dir + "/runs/" + r.name);
  const std::string busy = plan->output_dir + "/runs/" + plan->runs[2].name;
  ASSERT_TRUE(MakeDirs(busy).ok());
  absl::StatusOr<FileLock> trainer = FileLock::Acquire(busy + "/.lock");
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  refused = RunSweep(*plan, FakeRunner());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(refused.status().message())
                .find("run " + plan->runs[2].name + " is being trained by another process ("),
            std::string::npos)
      << refused.status();
}

// The planned sweep with its folder at `dir` (its runs' folders and their trunks' checkpoints moved along).
void MoveSweep(const std::string& dir, SweepPlan* plan) {
  plan->output_dir = dir;
  for (PlannedRun& r : plan->runs) {
    r.experiment.mutable_run()->set_output_dir(dir + "/runs/" + r.name);
    if (!r.trunk.empty()) {
      r.experiment.mutable_run()->set_init_from(
          absl::StrFormat("%s/runs/%s/checkpoints/step_%08d", dir, r.trunk, r.branch_step));
    }
  }
}

// Every branch starts after its trunk has written its checkpoint (the fake trainer fails a branch whose
// trunk checkpoint is missing), with more runs at once than trunks; as soon as it is there.
TEST(SweepRunner, WsdBranchesRunAfterTheirTrunk) {
  auto plan = Plan(kWsdGrid);
  ASSERT_TRUE(plan.ok()) << plan.status();
  MoveSweep(TmpDir() + "/wsd", &*plan);
  plan->parallel_runs = 4;
  ::setenv("FAKE_TRAIN_SLEEP_MS", "200", 1);
  std::vector<std::string> lines;
  RunnerOptions runner = FakeRunner();
  runner.progress = [&](const std::string& line) { lines.push_back(line); };
  auto summary = RunSweep(*plan, runner);
  ::unsetenv("FAKE_TRAIN_SLEEP_MS");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->finished, 6) << absl::StrJoin(lines, "\n");
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& line) {
    return absl::StartsWith(line, "[start] n_layers=2,max_steps=40 (") &&
           absl::EndsWith(line, " of 6 to run) from n_layers=2,max_steps=60 step 33");
  })) << absl::StrJoin(lines, "\n");

  // A trunk that writes its branch points early: its branches start while it still trains (a slot for each
  // run: which of its branch points a trunk has written when a slot frees is timing, not what is tested).
  MoveSweep(TmpDir() + "/wsd_early", &*plan);
  plan->parallel_runs = 6;
  ::setenv("FAKE_TRAIN_PINNED_FIRST", "1", 1);
  ::setenv("FAKE_TRAIN_SLEEP_MS", "1500", 1);
  lines.clear();
  auto early = RunSweep(*plan, runner);
  ::unsetenv("FAKE_TRAIN_PINNED_FIRST");
  ::unsetenv("FAKE_TRAIN_SLEEP_MS");
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(early->finished, 6);
  // The line saying the 40-step branch started comes before the one saying its trunk finished.
  const auto line_with = [&](const std::string& text) {
    return std::find_if(lines.begin(), lines.end(),
                        [&](const std::string& line) { return absl::StrContains(line, text); }) -
           lines.begin();
  };
  EXPECT_LT(line_with("[start] n_layers=1,max_steps=40 "), line_with("n_layers=1,max_steps=60 finished"))
      << absl::StrJoin(lines, "\n");

  // A trunk that fails before its checkpoints: its branches are recorded as not started.
  MoveSweep(TmpDir() + "/wsd_failing", &*plan);
  ::setenv("FAKE_TRAIN_FAIL", "n_layers=1,max_steps=60", 1);
  auto failing = RunSweep(*plan, FakeRunner());
  ::unsetenv("FAKE_TRAIN_FAIL");
  ASSERT_TRUE(failing.ok()) << failing.status();
  EXPECT_EQ(failing->finished, 3);
  EXPECT_EQ(failing->failed, 3);
  auto branch = ReadRunResult(plan->output_dir + "/runs/n_layers=1,max_steps=20");
  ASSERT_TRUE(branch.ok()) << branch.status();
  EXPECT_EQ(
      branch->message(),
      absl::StrCat("not started: its trunk n_layers=1,max_steps=60 ended FAILED without the checkpoint it "
                   "starts from (",
                   plan->output_dir, "/runs/n_layers=1,max_steps=60/checkpoints/step_00000017)"));

  // A trunk that diverges: so would its branches (they take over its steps).
  MoveSweep(TmpDir() + "/wsd_diverging", &*plan);
  ::setenv("FAKE_TRAIN_DIVERGE", "n_layers=1,max_steps=60", 1);
  auto diverging = RunSweep(*plan, FakeRunner());
  ::unsetenv("FAKE_TRAIN_DIVERGE");
  ASSERT_TRUE(diverging.ok()) << diverging.status();
  EXPECT_EQ(diverging->finished, 3);
  EXPECT_EQ(diverging->diverged, 3);
  EXPECT_EQ(diverging->failed, 0);
  // The trunk's row shows the six steps it trained, though its result (written as by an older build) does
  // not record them; its branches', which never started, show none.
  auto table = scaling::ReadResults(diverging->results_path);
  ASSERT_TRUE(table.ok()) << table.status();
  int diverged_rows = 0;
  for (const scaling::RunResult& row : table->runs) {
    if (row.status != scaling::RunStatus::kDiverged) continue;
    ++diverged_rows;
    const PlannedRun& run = *std::find_if(plan->runs.begin(), plan->runs.end(),
                                          [&](const PlannedRun& r) { return r.name == row.run; });
    EXPECT_EQ(row.tokens, row.run == "n_layers=1,max_steps=60"
                              ? 6.0 * config::TokensPerStep(run.experiment)
                              : 0.0)
        << row.run;
  }
  EXPECT_EQ(diverged_rows, 3);
}

// A finished sweep changed or damaged: a longer run joining makes the longest runs branches without
// training them again; a branch whose trunk checkpoint is gone gets its trunk trained again.
TEST(SweepRunner, WsdSweepsChangeWithoutRedoingFinishedRuns) {
  auto plan = Plan(kWsdGrid);
  ASSERT_TRUE(plan.ok()) << plan.status();
  MoveSweep(TmpDir() + "/wsd_grow", &*plan);
  ASSERT_TRUE(RunSweep(*plan, FakeRunner()).ok());

  auto longer = Plan(absl::StrReplaceAll(
      kWsdGrid, {{"values: [ \"20\", \"60\", \"40\" ]", "values: [ \"20\", \"60\", \"40\", \"80\" ]"}}));
  ASSERT_TRUE(longer.ok()) << longer.status();
  MoveSweep(TmpDir() + "/wsd_grow", &*longer);
  const std::string log = TmpDir() + "/invocations_grow.txt";
  ::setenv("FAKE_TRAIN_LOG", log.c_str(), 1);
  auto grown = RunSweep(*longer, FakeRunner());
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_EQ(grown->skipped,
            6);  // the 60-step runs are branches of the 80-step ones now, finished all the same
  EXPECT_EQ(grown->finished, 8);
  EXPECT_EQ(CountLines(log), 2);  // the two 80-step runs

  // The 40-step run of 1 layer lost its result and checkpoints, and its trunk the checkpoint it starts from
  // (step 33): the trunk trains again from its checkpoint before it (step 17), then the branch.
  const std::string runs = TmpDir() + "/wsd_grow/runs/";
  ASSERT_EQ(::unlink((runs + "n_layers=1,max_steps=40/result.textproto").c_str()), 0);
  ASSERT_TRUE(RemoveFlatFolder(runs + "n_layers=1,max_steps=40/checkpoints/step_00000040").ok());
  ASSERT_EQ(longer->runs[2].name, "n_layers=1,max_steps=40");
  ASSERT_TRUE(RemoveFlatFolder(longer->runs[2].experiment.run().init_from()).ok());
  std::vector<std::string> lines;
  RunnerOptions runner = FakeRunner();
  runner.progress = [&](const std::string& line) { lines.push_back(line); };
  auto repaired = RunSweep(*longer, runner);
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_EQ(repaired->finished, 8);
  EXPECT_EQ(CountLines(log), 4) << absl::StrJoin(lines, "\n");
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& line) {
    return absl::StartsWith(line,
                            "[rewind] n_layers=1,max_steps=80: a branch starts from its checkpoint at step "
                            "33, which it does not have; it trains again from its checkpoint at step 17 (");
  })) << absl::StrJoin(lines, "\n");
  // Each start appends to the run's log.
  auto trunk_log = ReadFile(runs + "n_layers=1,max_steps=80/log.txt");
  ASSERT_TRUE(trunk_log.ok());
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(*trunk_log, "==== ")).size(), 3u) << *trunk_log;

  // A 70-step length joins (branch step 57) while the 2-layer trunk is unfinished (killed after its last
  // checkpoint): each trunk rewinds to its checkpoint before step 57, whether finished or not.
  config::SweepRunResult killed;
  killed.set_status(config::SweepRunResult::FAILED);
  ASSERT_TRUE(WriteRunResult(runs + "n_layers=2,max_steps=80", killed).ok());
  auto longest = Plan(absl::StrReplaceAll(
      kWsdGrid,
      {{"values: [ \"20\", \"60\", \"40\" ]", "values: [ \"20\", \"60\", \"40\", \"80\", \"70\" ]"}}));
  ASSERT_TRUE(longest.ok()) << longest.status();
  MoveSweep(TmpDir() + "/wsd_grow", &*longest);
  lines.clear();
  auto joined = RunSweep(*longest, runner);
  ::unsetenv("FAKE_TRAIN_LOG");
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->finished, 10) << absl::StrJoin(lines, "\n");
  EXPECT_EQ(CountLines(log), 8) << absl::StrJoin(lines, "\n");  // both trunks and both 70-step runs
  for (const char* trunk : {"n_layers=1,max_steps=80", "n_layers=2,max_steps=80"}) {
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [&](const std::string& line) {
      return absl::StartsWith(line, absl::StrCat("[rewind] ", trunk,
                                                 ": a branch starts from its checkpoint at "
                                                 "step 57, which it does not have; it trains "
                                                 "again from its checkpoint at step 49 ("));
    })) << absl::StrJoin(lines, "\n");
  }
}

// A branch to train whose trunk checkpoint is there but damaged: the checkpoint moves into the trunk's
// checkpoints/damaged/ and the trunk trains again to write it, as if it were missing (before, the branch
// started from it and failed on its CRC at every start of the sweep).
TEST(SweepRunner, ADamagedTrunkCheckpointIsWrittenAgain) {
  auto plan = Plan(kWsdGrid);
  ASSERT_TRUE(plan.ok()) << plan.status();
  MoveSweep(TmpDir() + "/wsd_damaged", &*plan);
  ASSERT_TRUE(RunSweep(*plan, FakeRunner()).ok());
  const std::string runs = TmpDir() + "/wsd_damaged/runs/";
  ASSERT_EQ(plan->runs[0].name, "n_layers=1,max_steps=20");
  const std::string from = plan->runs[0].experiment.run().init_from();
  ASSERT_EQ(from, runs + "n_layers=1,max_steps=60/checkpoints/step_00000017");
  // The branch is to train again (its result and checkpoint gone), and one byte of its start is changed.
  ASSERT_EQ(::unlink((runs + "n_layers=1,max_steps=20/result.textproto").c_str()), 0);
  ASSERT_TRUE(RemoveFlatFolder(runs + "n_layers=1,max_steps=20/checkpoints/step_00000020").ok());
  auto weights = ReadFile(from + "/model.safetensors");
  ASSERT_TRUE(weights.ok() && !weights->empty());
  (*weights)[weights->size() - 1] ^= 1;
  ASSERT_TRUE(WriteFileAtomically(from + "/model.safetensors", *weights).ok());

  const std::string log = TmpDir() + "/invocations_damaged.txt";
  ::setenv("FAKE_TRAIN_LOG", log.c_str(), 1);
  std::vector<std::string> lines;
  RunnerOptions runner = FakeRunner();
  runner.progress = [&](const std::string& line) { lines.push_back(line); };
  auto repaired = RunSweep(*plan, runner);
  ::unsetenv("FAKE_TRAIN_LOG");
  ASSERT_TRUE(repaired.ok()) << repaired.status();
  EXPECT_EQ(repaired->finished, 6) << absl::StrJoin(lines, "\n");
  EXPECT_EQ(CountLines(log), 2) << absl::StrJoin(lines, "\n");  // the trunk again, then the branch
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& line) {
    return absl::StartsWith(line, "[damaged] n_layers=1,max_steps=60: the checkpoint n_layers=1,max_steps=20 "
                                  "starts from is damaged (");
  })) << absl::StrJoin(lines, "\n");
  EXPECT_TRUE(
      FileExists(runs + "n_layers=1,max_steps=60/checkpoints/damaged/step_00000017/model.safetensors"));
  EXPECT_TRUE(experiments::VerifyCheckpoint(from).ok());  // written again by the trunk
}

// SIGTERM to the sweep: the runs in training get it too and the sweep returns Cancelled once they end.
TEST(SweepRunner, AStopSignalReachesTheRunsInTraining) {
  auto plan = Plan(kIsoFlop);
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->output_dir = TmpDir() + "/stopped";
  for (auto& r : plan->runs) r.experiment.mutable_run()->set_output_dir(plan->output_dir + "/runs/" + r.name);
  plan->parallel_runs = 2;
  ::setenv("FAKE_TRAIN_SLEEP_MS", "20000", 1);
  absl::StatusOr<SweepSummary> summary;
  const auto start = std::chrono::steady_clock::now();
  std::thread sweep([&] { summary = RunSweep(*plan, FakeRunner()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(::getpid(), SIGTERM);
  sweep.join();
  ::unsetenv("FAKE_TRAIN_SLEEP_MS");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kCancelled) << summary.status();
}

TEST(SweepRunner, AFailedRunIsRecordedAndTheSweepGoesOn) {
  auto plan = Plan(kIsoFlop);
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->output_dir = TmpDir() + "/failing";
  for (auto& r : plan->runs) r.experiment.mutable_run()->set_output_dir(plan->output_dir + "/runs/" + r.name);
  const std::string victim = plan->runs[3].name;
  ::setenv("FAKE_TRAIN_FAIL", victim.c_str(), 1);
  auto summary = RunSweep(*plan, FakeRunner());
  ::unsetenv("FAKE_TRAIN_FAIL");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->finished, 7);
  EXPECT_EQ(summary->failed, 1);
  auto result = ReadRunResult(plan->output_dir + "/runs/" + victim);
  ASSERT_TRUE(result.ok());
  EXPECT_EQ(result->status(), config::SweepRunResult::FAILED);
  EXPECT_NE(result->message().find("failing"), std::string::npos) << result->message();  // the log tail
  // Its row shows what it trained before it failed (6 steps, in its metrics.jsonl), not its planned length.
  const PlannedRun& failed_run = plan->runs[3];
  const double trained = 6.0 * config::TokensPerStep(failed_run.experiment);
  ASSERT_LT(trained, failed_run.tokens);
  auto table = scaling::ReadResults(summary->results_path);
  ASSERT_TRUE(table.ok()) << table.status();
  for (const scaling::RunResult& row : table->runs) {
    if (row.run != victim) continue;
    EXPECT_EQ(row.status, scaling::RunStatus::kFailed);
    EXPECT_EQ(row.tokens, trained);
    EXPECT_DOUBLE_EQ(row.flops, trained * failed_run.size.training_flops_per_token);
  }
  // A second start retries only the failed run.
  const std::string log = TmpDir() + "/invocations_b.txt";
  ::setenv("FAKE_TRAIN_LOG", log.c_str(), 1);
  auto retry = RunSweep(*plan, FakeRunner());
  ::unsetenv("FAKE_TRAIN_LOG");
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->finished, 8);
  EXPECT_EQ(CountLines(log), 1);
}

TEST(SweepRunner, AKilledSweepFinishesOnlyTheMissingRuns) {
  auto plan = Plan(kIsoFlop);
  ASSERT_TRUE(plan.ok()) << plan.status();
  plan->output_dir = TmpDir() + "/killed";
  for (auto& r : plan->runs) r.experiment.mutable_run()->set_output_dir(plan->output_dir + "/runs/" + r.name);
  plan->parallel_runs = 1;
  const std::string first_log = TmpDir() + "/invocations_c.txt";
  ::setenv("FAKE_TRAIN_LOG", first_log.c_str(), 1);
  ::setenv("FAKE_TRAIN_SLEEP_MS", "150", 1);
  const pid_t sweeper = ::fork();
  ASSERT_GE(sweeper, 0);
  if (sweeper == 0) {
    ::setpgid(0, 0);
    ::_exit(RunSweep(*plan, FakeRunner()).ok() ? 0 : 1);
  }
  ::setpgid(sweeper, sweeper);
  // Let a few runs finish, then kill the runner and its current training process together.
  for (int i = 0; i < 200 && CountLines(first_log) < 4; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(-sweeper, SIGKILL);
  int status = 0;
  ::waitpid(sweeper, &status, 0);
  ::unsetenv("FAKE_TRAIN_SLEEP_MS");
  int finished_before = 0;
  for (const auto& r : plan->runs) {
    auto res = ReadRunResult(plan->output_dir + "/runs/" + r.name);
    if (res.ok() && res->status() == config::SweepRunResult::FINISHED) ++finished_before;
  }
  ASSERT_GT(finished_before, 0);
  ASSERT_LT(finished_before, 8);

  const std::string second_log = TmpDir() + "/invocations_d.txt";
  ::setenv("FAKE_TRAIN_LOG", second_log.c_str(), 1);
  auto summary = RunSweep(*plan, FakeRunner());
  ::unsetenv("FAKE_TRAIN_LOG");
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->finished, 8);
  EXPECT_EQ(summary->skipped, finished_before);
  EXPECT_EQ(CountLines(second_log), 8 - finished_before);
}

}  // namespace
}  // namespace lmf::sweep
