// End-to-end test of the scaling report on a synthetic sweep drawn from a known Chinchilla law: the
// recommendation recovers the law's compute-optimal size, every figure is written, and errors in the
// inputs are reported instead of producing a report.
#include "scaling/reporting/report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>

#include "absl/strings/str_format.h"
#include "base/file.h"
#include "gtest/gtest.h"
#include "scaling/fit/parametric_testing.h"
#include "scaling/reporting/figures.h"
#include "scaling/results.h"

namespace lmf::scaling {
namespace {

const ParametricLaw kTruth{1.69, 406.4, 410.7, 0.34, 0.28};

// An IsoFLOP sweep: 5 budgets x 7 shapes (n_layers = d_model / 64, N = 12 n_layers d_model^2), loss from
// kTruth with 0.5% noise, one curve file per run, and one failed run.
std::string WriteSweep(const std::string& dir) {
  EXPECT_TRUE(MakeDirs(dir + "/curves").ok());
  std::mt19937_64 rng(3);
  std::normal_distribution<double> eps(0, 0.005);
  ResultsTable table;
  int budget_index = 0;
  for (double c : {1e18, 3e18, 1e19, 3e19, 1e20}) {
    const double n_opt = OptimalAllocation(kTruth, c).params;
    for (int k = -3; k <= 3; ++k) {
      const double target_n = n_opt * std::pow(10.0, 0.25 * k);
      RunResult r;
      r.n_layers = std::max<int64_t>(2, std::llround(std::cbrt(target_n / (12.0 * 64 * 64))));
      r.d_model = 64 * r.n_layers;
      r.n_heads = r.d_model / 64;
      r.non_embedding_params = 12.0 * r.n_layers * r.d_model * r.d_model;
      r.params = r.non_embedding_params + 32000.0 * r.d_model;
      r.budget_flops = c;
      r.tokens = c / (6 * r.non_embedding_params);
      r.flops = c;
      r.final_loss = kTruth.Loss(r.non_embedding_params, r.tokens) * std::exp(eps(rng));
      r.best_val_loss = r.final_loss;
      r.batch_size = int64_t{32} << budget_index;
      r.lr = 3e-3 * std::pow(c / 1e18, -0.1);
      r.run = "c" + std::to_string(budget_index) + "_L" + std::to_string(r.n_layers);
      r.curve_file = "curves/" + r.run + ".csv";
      std::string curve = "step,tokens,flops,loss\n";
      for (int s = 1; s <= 40; ++s) {
        const double t = r.tokens * s / 40;
        curve += std::to_string(s) + "," + std::to_string(t) + "," + std::to_string(6 * r.non_embedding_params * t) +
                 "," + std::to_string(kTruth.Loss(r.non_embedding_params, t)) + "\n";
      }
      EXPECT_TRUE(WriteFileAtomically(dir + "/" + r.curve_file, curve).ok());
      table.runs.push_back(r);
    }
    ++budget_index;
  }
  RunResult failed = table.runs[0];
  failed.run = "crashed";
  failed.status = RunStatus::kFailed;
  failed.final_loss = failed.best_val_loss = NAN;
  failed.curve_file = "";
  table.runs.push_back(failed);
  const std::string path = dir + "/results.csv";
  EXPECT_TRUE(WriteResults(path, table).ok());
  return path;
}

TEST(ReportTest, RecommendsTheTrueOptimumAndWritesEveryFigure) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/sweep";
  const std::string results = WriteSweep(dir);
  ReportOptions options;
  options.target_flops = 1e22;
  options.bootstrap.resamples = 200;
  options.data_note = "synthetic runs drawn from Hoffmann et al.'s law";
  absl::StatusOr<ScalingAnalysis> a = MakeReport(results, options, dir + "/report");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->finished, 35);
  EXPECT_EQ(a->failed, 1);
  ASSERT_TRUE(a->parametric.has_value());
  ASSERT_TRUE(a->isoflop.has_value()) << a->isoflop_error;
  ASSERT_TRUE(a->envelope.has_value()) << a->envelope_error;
  ASSERT_TRUE(a->recipe.has_value()) << a->recipe_error;
  const Allocation truth = OptimalAllocation(kTruth, 1e22);
  const Allocation fit = OptimalAllocation(a->parametric->law, 1e22);
  // Two decades of extrapolation from 0.5%-noise runs: the bootstrap band of N_opt is about +-30% wide
  // here, so the point estimate must be within a factor 1.5 and the interval must hold the truth.
  EXPECT_NEAR(std::log(fit.params / truth.params), 0, std::log(1.5));
  ASSERT_TRUE(a->parametric_ci.has_value());
  EXPECT_TRUE(a->parametric_ci->target.params.Contains(truth.params));
  EXPECT_NEAR(std::log(a->isoflop->params_law.At(1e22) / truth.params), 0, std::log(1.5));
  // The recipe extrapolates lr = 3e-3 (C / 1e18)^-0.1 and batch = 32 x 3^(budget index) ... exactly.
  EXPECT_NEAR(a->recipe->lr, 3e-3 * std::pow(1e4, -0.1), 1e-9);
  EXPECT_EQ(a->recipe->d_model % a->recipe->n_heads, 0);

  for (const char* name : {"report.md", "isoflop.svg", "optimal_params.svg", "optimal_tokens.svg",
                           "loss_vs_compute.svg", "residuals.svg"}) {
    EXPECT_TRUE(FileExists(dir + "/report/" + name)) << name;
  }
  absl::StatusOr<std::string> md = ReadFile(dir + "/report/report.md");
  ASSERT_TRUE(md.ok());
  for (const char* section : {"## Recommendation at C = 10<sup>22</sup> FLOP", "## Approach 3", "## Approach 2",
                              "## Approach 1", "## Kaplan", "![isoflop.svg](isoflop.svg)", "**Recipe:** d_model",
                              "36 runs (35 finished, 1 failed, 0 diverged)", "synthetic runs",
                              " whose runs could not identify the law"}) {
    EXPECT_NE(md->find(section), std::string::npos) << section;
  }
  EXPECT_EQ(md->find("unreliable"), std::string::npos);  // 35 well-spread runs: nearly every resample fits
  // How far the target lies beyond the budgets swept (1e22 against 1e20), and how far apart the approaches are.
  EXPECT_NE(md->find("**Extrapolation:** the target is 100x the largest budget swept (2.0 decades beyond it)"),
            std::string::npos)
      << *md;
  const size_t factor = md->find("The approaches' N_opt differ by a factor of ");
  ASSERT_NE(factor, std::string::npos) << *md;
  const double n3 = fit.params, n2 = a->isoflop->params_law.At(1e22), n1 = a->envelope->params_law.At(1e22);
  const double spread = std::max({n1, n2, n3}) / std::min({n1, n2, n3});
  EXPECT_EQ(md->substr(factor + 44, md->find(' ', factor + 44) - factor - 44), absl::StrFormat("%.2g", spread));
  ScalingAnalysis inside = *a;
  inside.options.target_flops = 3e19;
  EXPECT_NE(RenderReport(inside).files[0].second.find("**Extrapolation:** none: the target lies within the "
                                                       "budgets swept."),
            std::string::npos);

  // Were a quarter of the resamples dropped (more than the 5% the 95% intervals leave in their tails), the
  // report would say how many and why, and mark Approach 3's intervals unreliable where they are read.
  ScalingAnalysis dropping = *a;
  dropping.parametric_ci->failed = 50;
  dropping.parametric_ci->unidentifiable = 40;
  const std::string text = RenderReport(dropping).files[0].second;
  for (const char* said : {"50 dropped (40 whose runs could not identify the law",
                           "10 whose fit had α <= 0, β <= 0 or failed",
                           "**The intervals are unreliable:** 50 of 200 resamples were dropped"}) {
    EXPECT_NE(text.find(said), std::string::npos) << said << "\n" << text;
  }
  // Were every resample dropped, there would be no intervals, and the report would say why.
  ScalingAnalysis all_dropped = *a;
  all_dropped.parametric_ci->resampled.clear();
  all_dropped.parametric_ci->failed = 200;
  all_dropped.parametric_ci->unidentifiable = 150;
  const std::string none = RenderReport(all_dropped).files[0].second;
  EXPECT_NE(none.find("Bootstrap: all 200 resamples of the runs were dropped (150 whose runs could not identify "
                      "the law, 50 whose fit had"),
            std::string::npos)
      << none;
  const size_t row = text.find("| parameters N_opt | ");
  ASSERT_NE(row, std::string::npos);
  EXPECT_NE(text.substr(row, text.find('\n', row) - row).find("(unreliable)"), std::string::npos) << text;
}

// One run at each of the budgets 1e12, 1e13, 1e14 (the same N and D, the loss falling by 1 per budget), with
// lr 4e-3 and batch size `batch_size(i)` at the i-th.
ResultsTable ThreeBudgets(const std::function<int64_t(int)>& batch_size) {
  ResultsTable table;
  for (int i = 0; i < 3; ++i) {
    RunResult r;
    r.run = "r" + std::to_string(i);
    r.budget_flops = 1e12 * std::pow(10.0, i);
    r.params = r.non_embedding_params = 1e6;
    r.tokens = 1e6;
    r.flops = r.budget_flops;
    r.final_loss = r.best_val_loss = 3.0 - i;
    r.d_model = 128, r.n_layers = 4, r.n_heads = 4;
    r.batch_size = batch_size(i);
    r.lr = 4e-3;
    table.runs.push_back(r);
  }
  return table;
}

// A sweep that did not vary batch size or learning rate (the quickstart's) gets them as they were, said to
// be constant, not a power law of exponent 0 presented as an extrapolation; a varied one is extrapolated.
TEST(ReportTest, RecipeSaysWhatWasConstantAndExtrapolatesWhatVaried) {
  ResultsTable table = ThreeBudgets([](int) { return int64_t{16}; });
  absl::StatusOr<Recipe> constant = RecipeFromBestRuns(1e7, 1e8, 1e16, table, ObservationChoice());
  ASSERT_TRUE(constant.ok()) << constant.status();
  EXPECT_EQ(constant->batch_size, 16);
  EXPECT_EQ(constant->lr, 4e-3);
  EXPECT_NE(
      constant->basis.find("batch 16 as in every budget's best run (constant, not extrapolated), lr 0.004 as "
                           "in every budget's best run (constant, not extrapolated)"),
      std::string::npos)
      << constant->basis;
  for (int i = 0; i < 3; ++i) table.runs[i].lr = 4e-3 * std::pow(10.0, -0.1 * i);  // lr = k C^-0.1
  absl::StatusOr<Recipe> varied = RecipeFromBestRuns(1e7, 1e8, 1e16, table, ObservationChoice());
  ASSERT_TRUE(varied.ok()) << varied.status();
  EXPECT_NEAR(varied->lr, 4e-3 * std::pow(1e4, -0.1), 1e-12);
  EXPECT_NE(varied->basis.find("C^-0.100"), std::string::npos) << varied->basis;
}

// With the best validation loss chosen, each budget's best run is the one with the lowest best loss (it was
// picked by final loss whatever the report used).
TEST(ReportTest, RecipeRanksRunsByTheLossTheReportUses) {
  ResultsTable table;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      RunResult r;
      r.run = "b" + std::to_string(i) + "_" + std::to_string(j);
      r.budget_flops = 1e12 * std::pow(10.0, i);
      r.params = r.non_embedding_params = 1e6;
      r.tokens = 1e6;
      r.flops = r.budget_flops;
      // Run j = 0 ends lowest, run j = 1 dipped lowest before its end.
      r.final_loss = j == 0 ? 3.0 - i : 3.2 - i;
      r.best_val_loss = j == 0 ? 2.9 - i : 2.8 - i;
      r.d_model = 128, r.n_layers = 4, r.n_heads = 4;
      r.batch_size = 16;
      r.lr = j == 0 ? 1e-3 : 4e-3;
      table.runs.push_back(r);
    }
  }
  ObservationChoice final_loss, best_loss;
  best_loss.best_loss = true;
  absl::StatusOr<Recipe> by_final = RecipeFromBestRuns(1e7, 1e8, 1e14, table, final_loss);
  absl::StatusOr<Recipe> by_best = RecipeFromBestRuns(1e7, 1e8, 1e14, table, best_loss);
  ASSERT_TRUE(by_final.ok() && by_best.ok()) << by_final.status() << by_best.status();
  EXPECT_EQ(by_final->lr, 1e-3);
  EXPECT_EQ(by_best->lr, 4e-3);
}

// A batch size extrapolated past what a whole number can state (a batch growing as C^1.5 taken to 1e25 FLOP
// wrapped to 4096 before; at 1e300 the shape came out as d_model 8) is refused with the value and the swept
// range, not wrapped.
TEST(ReportTest, RecipeRefusesExtrapolationsBeyondWholeNumbers) {
  ResultsTable table = ThreeBudgets([](int i) {  // 16, 512, 16000
    return 16 * static_cast<int64_t>(std::pow(10.0, 1.5 * i) + 0.5);
  });
  absl::StatusOr<Recipe> near = RecipeFromBestRuns(1e7, 1e8, 1e16, table, ObservationChoice());
  ASSERT_TRUE(near.ok()) << near.status();
  EXPECT_EQ(near->batch_size, int64_t{1} << 24);  // 16 (1e4)^1.5 = 1.6e7 ~ 2^23.9
  for (double flops : {1e25, 1e300}) {
    absl::StatusOr<Recipe> far = RecipeFromBestRuns(1e7, 1e8, flops, table, ObservationChoice());
    ASSERT_FALSE(far.ok()) << flops << ": batch " << far->batch_size;
    EXPECT_NE(far.status().message().find("beyond 2^53"), std::string::npos) << far.status();
    EXPECT_NE(far.status().message().find("the batch size batch = "), std::string::npos) << far.status();
  }
  for (RunResult& r : table.runs) r.batch_size = 16;  // a constant batch: only the shape overflows
  absl::StatusOr<Recipe> huge = RecipeFromBestRuns(1e300, 1e300, 1e300, table, ObservationChoice());
  ASSERT_FALSE(huge.ok()) << "d_model " << huge->d_model << ", n_layers " << huge->n_layers;
  EXPECT_NE(huge.status().message().find("n_layers for N_opt at 1e+300 FLOP is"), std::string::npos)
      << huge.status();
}

TEST(ReportTest, ReportsMissingFitsInsteadOfFailing) {
  // Runs outside any IsoFLOP group and without curves: only Approach 3 and the Kaplan laws apply.
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/ungrouped";
  ASSERT_TRUE(MakeDirs(dir).ok());
  ResultsTable table;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      RunResult r;
      r.run = "r" + std::to_string(i) + std::to_string(j);
      r.non_embedding_params = r.params = std::pow(10.0, 7 + i);
      r.tokens = std::pow(10.0, 9 + j);
      r.flops = 6 * r.params * r.tokens;
      r.final_loss = r.best_val_loss = kTruth.Loss(r.params, r.tokens);
      r.d_model = r.n_layers = r.n_heads = r.batch_size = 1;
      r.lr = 1e-3;
      table.runs.push_back(r);
    }
  }
  ASSERT_TRUE(WriteResults(dir + "/results.csv", table).ok());
  ReportOptions options;
  options.target_flops = 1e21;
  options.bootstrap.resamples = 20;
  absl::StatusOr<ScalingAnalysis> a = MakeReport(dir + "/results.csv", options, dir + "/report");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->parametric.has_value());
  EXPECT_FALSE(a->isoflop.has_value());
  EXPECT_FALSE(a->envelope.has_value());
  EXPECT_EQ(FittedApproaches(*a), (std::vector<std::string>{"Approach 3", "Kaplan laws"}));
  EXPECT_FALSE(a->recipe.has_value());
  absl::StatusOr<std::string> md = ReadFile(dir + "/report/report.md");
  ASSERT_TRUE(md.ok());
  EXPECT_NE(md->find("Not fitted: some finished runs have budget_flops = 0"), std::string::npos);
  EXPECT_NE(md->find("**Recipe:** not available: extrapolating batch size"), std::string::npos);
  EXPECT_FALSE(FileExists(dir + "/report/isoflop.svg"));
}

// Approach 3 from two starts near the truth rather than the 4,500-start grid: for the tests below, which are
// about the table and the report rather than the fit (the full grid finds the same optimum on these
// noiseless runs), and keep the test within its time under the sanitizers.
// A published sweep's table, N, C and the loss only (as Epoch's Chinchilla reconstruction has): the report
// fits Approach 3 and the Kaplan laws, says which columns were missing and that D was derived from C, and
// the recipe says what it lacks instead of a shape, batch size and learning rate nobody measured.
TEST(ReportTest, APublishedTableOfNCAndLossIsReported) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/published";
  ASSERT_TRUE(MakeDirs(dir).ok());
  std::string csv = "params,flops,final_loss\n";
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 5; ++j) {
      const double n = std::pow(10.0, 7 + 0.75 * i), d = std::pow(10.0, 9 + 0.75 * j);
      csv += absl::StrFormat("%.17g,%.17g,%.17g\n", n, 6 * n * d, kTruth.Loss(n, d));
    }
  }
  ASSERT_TRUE(WriteFileAtomically(dir + "/results.csv", csv).ok());
  ReportOptions options;
  options.target_flops = 1e21;
  options.bootstrap.resamples = 20;
  options.parametric = FewParametricStarts();
  // N is the params column: the default (non-embedding N) is refused with the flag to use.
  absl::StatusOr<ScalingAnalysis> a = MakeReport(dir + "/results.csv", options, dir + "/report");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("no non_embedding_params column to take N from; use the params column "
                                      "(--params=total)"),
            std::string::npos)
      << a.status();
  options.choice.non_embedding = false;
  a = MakeReport(dir + "/results.csv", options, dir + "/report");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->parametric.has_value()) << a->parametric_error;
  EXPECT_NEAR(a->parametric->law.alpha, kTruth.alpha, 0.01);  // noiseless runs
  EXPECT_NEAR(a->parametric->law.beta, kTruth.beta, 0.01);
  EXPECT_EQ(FittedApproaches(*a), (std::vector<std::string>{"Approach 3", "Kaplan laws"}));
  EXPECT_FALSE(a->recipe.has_value());
  absl::StatusOr<std::string> md = ReadFile(dir + "/report/report.md");
  ASSERT_TRUE(md.ok());
  EXPECT_NE(md->find("The table has no run, budget_flops, non_embedding_params, best_val_loss, d_model, n_layers, "
                     "n_heads, batch_size, lr, status columns."),
            std::string::npos)
      << *md;
  EXPECT_NE(md->find("Tokens are derived as D = flops / (6 params)."), std::string::npos);
  EXPECT_NE(md->find("**Recipe:** not available: the table has no d_model, n_layers, n_heads, batch_size, lr "
                     "columns: a recipe takes the shape"),
            std::string::npos);
  EXPECT_NE(md->find("Not fitted: the table has no budget_flops column (no IsoFLOP groups)"), std::string::npos);
}

// IsoFLOP runs from kTruth (no noise, no curves) at the given budgets, 7 sizes each around the optimum.
ResultsTable IsoFlopTable(const std::vector<double>& budgets) {
  ResultsTable table;
  for (size_t b = 0; b < budgets.size(); ++b) {
    const double n_opt = OptimalAllocation(kTruth, budgets[b]).params;
    for (int k = -3; k <= 3; ++k) {
      RunResult r;
      r.run = "c" + std::to_string(b) + "_" + std::to_string(k + 3);
      r.budget_flops = budgets[b];
      r.non_embedding_params = r.params = std::round(n_opt * std::pow(10.0, 0.25 * k));
      r.tokens = budgets[b] / (6 * r.params);
      r.flops = budgets[b];
      r.final_loss = r.best_val_loss = kTruth.Loss(r.params, r.tokens);
      r.d_model = 64, r.n_layers = 2, r.n_heads = 1, r.batch_size = 32;
      r.lr = 1e-3;
      table.runs.push_back(r);
    }
  }
  return table;
}

// An IsoFLOP sweep whose budgets each carry a 5 x 5 batch x learning-rate grid at a size near their
// compute-optimal one, the loss there exactly quadratic in (ln batch, ln lr) around B_opt = 16 (C/1e18)^0.3 sequences and
// lr_opt = 3e-3 (C/1e18)^-0.1: the report fits both laws from the grids (not from the other sizes' runs),
// shows them, and its recipe takes batch size and lr from them.
TEST(ReportTest, BatchAndLearningRateGridsGiveTheirLawsAndTheRecipe) {
  const std::vector<double> budgets = {1e18, 1e19, 1e20};
  ResultsTable table = IsoFlopTable(budgets);
  const PowerLaw batch_law{16 * std::pow(1e18, -0.3), 0.3}, lr_law{3e-3 * std::pow(1e18, 0.1), -0.1};
  for (size_t b = 0; b < budgets.size(); ++b) {
    // Near the optimal size, apart from the IsoFLOP runs' sizes (10^(k/4) N_opt).
    const double c = budgets[b], n = std::round(1.1 * OptimalAllocation(kTruth, c).params), d = c / (6 * n);
    const int center = static_cast<int>(std::lround(std::log2(batch_law.At(c))));
    for (int i = -2; i <= 2; ++i) {
      for (int j = -2; j <= 2; ++j) {
        RunResult r = table.runs[b * 7];
        r.run = absl::StrFormat("grid%d_%d_%d", b, i + 2, j + 2);
        r.non_embedding_params = r.params = n;
        r.tokens = d;
        r.batch_size = int64_t{1} << (center + i);
        r.lr = lr_law.At(c) * std::pow(2.0, j + 0.3);
        const double du = std::log(r.batch_size / batch_law.At(c)), dv = std::log(r.lr / lr_law.At(c));
        r.final_loss = r.best_val_loss = kTruth.Loss(n, d) * (1 + 0.004 * du * du + 0.008 * dv * dv);
        table.runs.push_back(r);
      }
    }
  }
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/grids";
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteResults(dir + "/results.csv", table).ok());
  ReportOptions options;
  options.target_flops = 1e22;
  options.bootstrap.resamples = 20;
  options.parametric = FewParametricStarts();
  absl::StatusOr<ScalingAnalysis> a = MakeReport(dir + "/results.csv", options, dir + "/report");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->hyperparameters.has_value()) << a->hyperparameters_error;
  EXPECT_EQ(a->hyperparameter_runs.size(), 75u);  // the grids only
  EXPECT_EQ(a->hyperparameters->budgets_used, 3);
  // Noiseless quadratic grids: the laws to round-off.
  EXPECT_NEAR(a->hyperparameters->batch_law.exponent, 0.3, 1e-8);
  EXPECT_NEAR(a->hyperparameters->lr_law.exponent, -0.1, 1e-8);
  ASSERT_TRUE(a->recipe.has_value()) << a->recipe_error;
  EXPECT_EQ(a->recipe->batch_size, int64_t{1} << std::lround(std::log2(batch_law.At(1e22))));
  EXPECT_NEAR(a->recipe->lr / lr_law.At(1e22), 1, 1e-6);
  EXPECT_NE(a->recipe->basis.find("batch size and lr then replaced by the grids' laws B_opt = "), std::string::npos);
  absl::StatusOr<std::string> md = ReadFile(dir + "/report/report.md");
  ASSERT_TRUE(md.ok());
  EXPECT_NE(md->find("## Batch size and learning rate"), std::string::npos);
  EXPECT_NE(md->find("B_opt = k C<sup>a</sup>: k = "), std::string::npos);
  EXPECT_NE(md->find("a = 0.3 ["), std::string::npos) << *md;
  // 5 x 5 grids keep their minimum in every resample: the intervals are not marked unreliable.
  ASSERT_TRUE(a->hyperparameters_ci.has_value());
  EXPECT_TRUE(a->hyperparameters_ci->Reliable(0.95)) << a->hyperparameters_ci->failed;
  EXPECT_EQ(md->find("**The intervals are unreliable:**"), std::string::npos) << *md;
}

// One budget cannot tell the N term from the D term: Approach 3 is refused, with the reason in report.md,
// and nothing is recommended from it. Budgets only 2% apart still give Approach 2 its power laws: the
// recommendation then comes from Approach 2, and the report says so.
TEST(ReportTest, UnidentifiableApproach3IsNotRecommendedFrom) {
  ReportOptions options;
  options.target_flops = 1e21;
  options.bootstrap.resamples = 0;
  absl::StatusOr<ScalingAnalysis> one = Analyze(IsoFlopTable({1e18}), options);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_FALSE(one->parametric.has_value());
  EXPECT_NE(one->parametric_error.find("lie along one line"), std::string::npos) << one->parametric_error;
  EXPECT_EQ(one->recommended_by, "");
  EXPECT_FALSE(one->recipe.has_value());
  const std::string md = RenderReport(*one).files[0].second;
  EXPECT_NE(md.find("Not fitted: the runs lie along one line"), std::string::npos) << md;
  for (const std::string& fitted : FittedApproaches(*one)) EXPECT_NE(fitted, "Approach 3");
  EXPECT_NE(md.find("| parameters N_opt | n/a | n/a | n/a |"), std::string::npos) << md;

  absl::StatusOr<ScalingAnalysis> close = Analyze(IsoFlopTable({1e18, 1.02e18, 1.04e18}), options);
  ASSERT_TRUE(close.ok()) << close.status();
  EXPECT_FALSE(close->parametric.has_value());
  ASSERT_TRUE(close->isoflop.has_value()) << close->isoflop_error;
  EXPECT_EQ(close->recommended_by, "Approach 2");
  EXPECT_NE(RenderReport(*close).files[0].second.find("The recipe is for Approach 2's N_opt and D_opt"),
            std::string::npos);
}

// Loss rising with N at every budget (the hunt's loss_increasing.csv): Approach 3's fit has alpha < 0, no
// allocation; it is reported as not used, and no NaN reaches the report.
TEST(ReportTest, ALawWithoutAnOptimumIsNotRecommendedFrom) {
  ResultsTable table = IsoFlopTable({1e18, 3e18, 1e19});
  for (RunResult& r : table.runs) r.final_loss = r.best_val_loss = 1.5 + 0.05 * std::pow(r.params, 0.1);
  ReportOptions options;
  options.target_flops = 1e21;
  options.bootstrap.resamples = 20;
  absl::StatusOr<ScalingAnalysis> a = Analyze(table, options);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->parametric.has_value());
  EXPECT_NE(a->parametric_error.find("no compute-optimal allocation"), std::string::npos)
      << a->parametric_error;
  EXPECT_NE(a->recommended_by, "Approach 3");
  const std::string md = RenderReport(*a).files[0].second;
  EXPECT_EQ(md.find("nan"), std::string::npos) << md;
  EXPECT_NE(md.find("Not fitted: the best fit has alpha = "), std::string::npos) << md;
}

// A report written over an earlier one leaves none of the earlier figures beside it (an IsoFLOP figure of
// other runs stayed when the new table had no IsoFLOP groups); other files in the folder are left alone.
TEST(ReportTest, ARewrittenReportKeepsNoFileOfTheEarlierOne) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/rewritten";
  ASSERT_TRUE(MakeDirs(dir).ok());
  ReportOptions options;
  options.target_flops = 1e21;
  options.bootstrap.resamples = 0;
  ASSERT_TRUE(WriteResults(dir + "/iso.csv", IsoFlopTable({1e18, 3e18, 1e19})).ok());
  ASSERT_TRUE(MakeReport(dir + "/iso.csv", options, dir + "/report").ok());
  ASSERT_TRUE(FileExists(dir + "/report/isoflop.svg"));
  ASSERT_TRUE(WriteFileAtomically(dir + "/report/notes.txt", "mine").ok());

  ResultsTable ungrouped = IsoFlopTable({1e18, 3e18, 1e19});
  for (RunResult& r : ungrouped.runs) r.budget_flops = 0;
  ASSERT_TRUE(WriteResults(dir + "/ungrouped.csv", ungrouped).ok());
  absl::StatusOr<ScalingAnalysis> a = MakeReport(dir + "/ungrouped.csv", options, dir + "/report");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->isoflop.has_value());
  EXPECT_FALSE(FileExists(dir + "/report/isoflop.svg"));
  absl::StatusOr<std::string> md = ReadFile(dir + "/report/report.md");
  ASSERT_TRUE(md.ok());
  EXPECT_NE(md->find("ungrouped.csv"), std::string::npos);
  for (const std::string& name : ReportFileNames()) {
    // Every report file there is one this report.md shows (or report.md itself).
    EXPECT_EQ(FileExists(dir + "/report/" + name),
              name == "report.md" || md->find("(" + name + ")") != std::string::npos)
        << name;
  }

  ASSERT_TRUE(RemoveReport(dir + "/report").ok());
  for (const std::string& name : ReportFileNames()) EXPECT_FALSE(FileExists(dir + "/report/" + name)) << name;
  EXPECT_TRUE(FileExists(dir + "/report/notes.txt"));
}

// A report that fails while being written leaves the previous one as it was (before, report.md was deleted
// first and the folder held a half-written report), with no temp file left over; the user's files and
// folders in the report folder are never touched.
TEST(ReportTest, AFailedReportLeavesThePreviousOneUntouched) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/atomic";
  ASSERT_TRUE(MakeDirs(dir).ok());
  ReportOptions options;
  options.target_flops = 1e21;
  options.bootstrap.resamples = 0;
  ASSERT_TRUE(WriteResults(dir + "/iso.csv", IsoFlopTable({1e18, 3e18, 1e19})).ok());
  const absl::StatusOr<ScalingAnalysis> a = MakeReport(dir + "/iso.csv", options, dir + "/report");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(WriteFileAtomically(dir + "/report/notes.txt", "mine").ok());
  ASSERT_TRUE(MakeDirs(dir + "/report/plots").ok());
  auto before = ListFolder(dir + "/report");
  ASSERT_TRUE(before.ok());
  const absl::StatusOr<std::string> md = ReadFile(dir + "/report/report.md");
  ASSERT_TRUE(md.ok());

  ReportFiles failing = RenderReport(*a);
  failing.files[0].second = "# another report\n";
  failing.files.push_back({"no_such_folder/figure.svg", "<svg/>"});  // cannot be written: the run fails
  EXPECT_FALSE(WriteReport(failing, dir + "/report").ok());
  EXPECT_EQ(ListFolder(dir + "/report").value(), *before);  // no temp file either
  EXPECT_EQ(ReadFile(dir + "/report/report.md").value(), *md);

  // A folder where an earlier report's figure was (a name the report deletes) fails the run before any
  // file changes, as does a full disk: stage 2 then only unlinks and renames.
  ReportFiles without_residuals = RenderReport(*a);
  without_residuals.files.erase(std::remove_if(without_residuals.files.begin(), without_residuals.files.end(),
                                               [](const auto& f) { return f.first == "residuals.svg"; }),
                                without_residuals.files.end());
  ASSERT_EQ(::unlink((dir + "/report/residuals.svg").c_str()), 0);
  ASSERT_TRUE(MakeDirs(dir + "/report/residuals.svg").ok());
  const absl::Status blocked = WriteReport(without_residuals, dir + "/report");
  EXPECT_EQ(blocked.code(), absl::StatusCode::kFailedPrecondition) << blocked;
  EXPECT_EQ(ReadFile(dir + "/report/report.md").value(), *md);
  ASSERT_EQ(::rmdir((dir + "/report/residuals.svg").c_str()), 0);

  // The temp files of a report run that was killed while writing (its pid gone) are removed by the next.
  const std::string leftover = dir + "/report/isoflop.svg.tmp.999999999";
  ASSERT_TRUE(WriteFileAtomically(leftover, "<svg").ok());
  ASSERT_TRUE(WriteReport(RenderReport(*a), dir + "/report").ok());
  EXPECT_FALSE(FileExists(leftover));
  EXPECT_EQ(ListFolder(dir + "/report").value(), *before);
  EXPECT_EQ(ReadFile(dir + "/report/notes.txt").value(), "mine");
}

// A report folder reached through a symbolic link is written where the link points: the link stays a link
// to the same folder, which holds the new report beside the user's files.
TEST(ReportTest, AReportFolderBehindALinkIsReplacedWhereItIs) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/linked";
  ASSERT_TRUE(MakeDirs(dir + "/real").ok());
  ReportOptions options;
  options.target_flops = 1e21;
  options.bootstrap.resamples = 0;
  ASSERT_TRUE(WriteResults(dir + "/iso.csv", IsoFlopTable({1e18, 3e18, 1e19})).ok());
  ASSERT_EQ(::symlink((dir + "/real").c_str(), (dir + "/report").c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(dir + "/real/notes.txt", "mine").ok());
  const absl::StatusOr<ScalingAnalysis> a = MakeReport(dir + "/iso.csv", options, dir + "/report");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(WriteReport(RenderReport(*a), dir + "/report").ok());  // a second time, over the first
  char target[4096];
  const ssize_t n = ::readlink((dir + "/report").c_str(), target, sizeof(target));
  ASSERT_GT(n, 0) << "report is no longer a link";
  EXPECT_EQ(std::string(target, n), dir + "/real");
  EXPECT_TRUE(FileExists(dir + "/real/report.md"));
  EXPECT_EQ(ReadFile(dir + "/real/notes.txt").value(), "mine");
  EXPECT_EQ(ListFolder(dir).value(), (std::vector<std::string>{"iso.csv", "real", "report"}));
}

// Values just below a power of ten printed as "10e8" (the mantissa rounded up to 10 after the exponent was
// chosen); so did the figures' "10·10^18".
TEST(ReportTest, NumbersJustBelowAPowerOfTenRoundUpToIt) {
  EXPECT_EQ(FormatNumber(9.99996e8), "1e9");
  EXPECT_EQ(FormatNumber(-9.99996e8), "-1e9");
  EXPECT_EQ(FormatNumber(0.00099999), "1e-3");
  EXPECT_EQ(FormatNumber(99999.7), "1e5");
  EXPECT_EQ(FormatNumber(9.9994e8), "9.999e8");
  EXPECT_EQ(FormatNumber(1.2345e9), "1.234e9");  // round-half-even of the binary value, as printf does
  EXPECT_EQ(FormatNumber(89940), "89940");
  EXPECT_EQ(FormatNumber(0.3456), "0.3456");
  EXPECT_EQ(FormatNumber(0), "0");
  EXPECT_EQ(FormatNumber(NAN), "n/a");
  EXPECT_EQ(PowerOfTenLabel(9.999e18), "10^19");
  EXPECT_EQ(PowerOfTenLabel(9.996e18), "10^19");
  EXPECT_EQ(PowerOfTenLabel(9.994e18), "9.99·10^18");
  EXPECT_EQ(PowerOfTenLabel(3e19), "3·10^19");
  EXPECT_EQ(PowerOfTenLabel(1e22), "10^22");
}

// One finished run fits nothing; the report_main summary said "1 finished runs fitted".
TEST(ReportTest, ASingleRunFitsNothing) {
  ResultsTable table = IsoFlopTable({1e18});
  table.runs.resize(1);
  ReportOptions options;
  options.target_flops = 1e21;
  absl::StatusOr<ScalingAnalysis> a = Analyze(table, options);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->finished, 1);
  EXPECT_TRUE(FittedApproaches(*a).empty());
}

TEST(ReportTest, BadInputsAreErrorsNotReports) {
  ReportOptions options;
  options.target_flops = 1e21;
  absl::StatusOr<ScalingAnalysis> a = MakeReport("/nonexistent/results.csv", options, "/tmp/unused");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("/nonexistent/results.csv"), std::string::npos);
  options.target_flops = -1;
  EXPECT_FALSE(Analyze(ResultsTable(), options).ok());
}

// --bootstrap=2000000000 aborted with std::bad_alloc (2e9 resamples x 10 quantities held at once).
TEST(ReportTest, BootstrapResamplesAreBounded) {
  ReportOptions options;
  options.target_flops = 1e21;
  options.bootstrap.resamples = 2000000000;
  absl::StatusOr<ScalingAnalysis> a = Analyze(IsoFlopTable({1e18, 3e18, 1e19}), options);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.status().message(), "bootstrap resamples must be 0 to 100000, got 2000000000");
}

}  // namespace
}  // namespace lmf::scaling
