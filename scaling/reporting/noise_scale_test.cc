// The gradient noise scale in the report: B_simple from metrics.jsonl's estimates (its units and moving
// averages), and a small synthetic sweep folder (IsoFLOP budgets whose middle size carries a batch x lr
// grid, every grid run with a metrics.jsonl) rendered into the noise-scale section and figure beside the
// fitted B_opt, with the recipe stating the batch/lr laws it extrapolated.
#include "scaling/reporting/noise_scale.h"

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file.h"
#include "gtest/gtest.h"
#include "scaling/fit/parametric_testing.h"
#include "scaling/reporting/figures.h"
#include "scaling/reporting/report.h"

namespace lmf::scaling {
namespace {

using experiments::StepMetrics;

// metrics.jsonl steps 1..steps of a run of `batch` sequences of 16 tokens whose per-step estimates give
// B_simple = b_at(step) sequences exactly (|G|^2 = 2, tr(Sigma) = 2 x 16 b tokens).
std::vector<StepMetrics> Metrics(int steps, int64_t batch, const std::function<double(int)>& b_at) {
  std::vector<StepMetrics> out;
  for (int s = 1; s <= steps; ++s) {
    StepMetrics m;
    m.step = s;
    m.tokens = s * batch * 16;
    m.loss = 4.0 - 0.03 * s;
    m.noise_grad_sq = 2.0;
    m.noise_trace = 2.0 * 16 * b_at(s);
    out.push_back(m);
  }
  return out;
}

TEST(NoiseScale, ConstantEstimatesGiveTheirRatioInSequences) {
  const NoiseScaleCurve c = NoiseScaleFromMetrics(Metrics(30, 8, [](int) { return 20.0; }), 8);
  ASSERT_EQ(c.b_simple.size(), 30u - kNoiseScaleWarmupEstimates + 1);
  for (double b : c.b_simple) EXPECT_NEAR(b, 20.0, 1e-9);
  // The loss average is bias-corrected: at the first plotted step, a weighted mean of steps 1..5's losses.
  EXPECT_LT(c.loss.front(), 4.0 - 0.03);
  EXPECT_GT(c.loss.front(), 4.0 - 0.03 * kNoiseScaleWarmupEstimates);
  // A step without estimates (one micro-batch) is skipped, not read as zero.
  std::vector<StepMetrics> gaps = Metrics(30, 8, [](int) { return 20.0; });
  gaps[10].noise_trace.reset();
  gaps[10].noise_grad_sq.reset();
  const NoiseScaleCurve g = NoiseScaleFromMetrics(gaps, 8);
  EXPECT_EQ(g.b_simple.size(), c.b_simple.size() - 1);
  for (double b : g.b_simple) EXPECT_NEAR(b, 20.0, 1e-9);
}

TEST(NoiseScale, GrowingEstimatesGiveAGrowingAverageWithinTheirRange) {
  const NoiseScaleCurve c = NoiseScaleFromMetrics(Metrics(40, 4, [](int s) { return 4.0 + s; }), 4);
  ASSERT_FALSE(c.b_simple.empty());
  for (size_t i = 1; i < c.b_simple.size(); ++i) EXPECT_GT(c.b_simple[i], c.b_simple[i - 1]);
  EXPECT_GT(c.b_simple.back(), 4.0 + 1);
  EXPECT_LT(c.b_simple.back(), 4.0 + 40);
}

// Budgets 1e18, 1e19, 1e20: 7 sizes around the optimum of a Chinchilla law, the middle one as a 3 x 3 grid of
// batch (B_opt = 16 (C/1e18)^0.3 times 1/2, 1, 2) x lr (lr_opt = 3e-3 (C/1e18)^-0.1 times 1/2, 1, 2) whose
// loss is quadratic in (ln batch, ln lr); each grid run has a curve and a metrics.jsonl with B_simple
// growing from 4 to 4 + steps sequences.
std::string WriteSweepFolder(const std::string& dir) {
  const ParametricLaw truth{1.69, 406.4, 410.7, 0.34, 0.28};
  const PowerLaw batch_law{16 * std::pow(1e18, -0.3), 0.3}, lr_law{3e-3 * std::pow(1e18, 0.1), -0.1};
  ResultsTable table;
  int b = 0;
  for (double c : {1e18, 1e19, 1e20}) {
    const double n_opt = OptimalAllocation(truth, c).params;
    for (int k = -3; k <= 3; ++k) {
      RunResult r;
      r.budget_flops = r.flops = c;
      r.non_embedding_params = r.params = std::round(n_opt * std::pow(10.0, 0.25 * k));
      r.tokens = c / (6 * r.params);
      r.d_model = 64, r.n_layers = 2, r.n_heads = 1, r.batch_size = 32, r.lr = 1e-3;
      const double base = truth.Loss(r.params, r.tokens);
      if (k != 0) {
        r.run = absl::StrFormat("c%d_k%d", b, k);
        r.final_loss = r.best_val_loss = base;
        table.runs.push_back(r);
        continue;
      }
      for (int i = -1; i <= 1; ++i) {
        for (int j = -1; j <= 1; ++j) {
          RunResult g = r;
          g.run = absl::StrFormat("c%d_grid_%d_%d", b, i + 1, j + 1);
          g.batch_size = std::llround(batch_law.At(c) * std::pow(2.0, i));
          g.lr = lr_law.At(c) * std::pow(2.0, j);
          const double du = std::log(g.batch_size / batch_law.At(c)), dv = std::log(g.lr / lr_law.At(c));
          g.final_loss = g.best_val_loss = base * (1 + 0.004 * du * du + 0.008 * dv * dv);
          const std::string run_dir = absl::StrCat(dir, "/runs/", g.run);
          EXPECT_TRUE(MakeDirs(run_dir).ok());
          g.curve_file = absl::StrCat("runs/", g.run, "/curve.csv");
          std::string curve = "step,tokens,flops,loss\n", metrics;
          const int steps = 30;
          for (int s = 1; s <= steps; ++s) {
            const double t = g.tokens * s / steps;
            absl::StrAppend(&curve, s, ",", t, ",", 6 * g.params * t, ",", truth.Loss(g.params, t), "\n");
          }
          for (const StepMetrics& m : Metrics(steps, g.batch_size, [](int s) { return 4.0 + s; })) {
            metrics += experiments::MetricsJsonLine(m);
          }
          EXPECT_TRUE(WriteFileAtomically(run_dir + "/curve.csv", curve).ok());
          EXPECT_TRUE(WriteFileAtomically(run_dir + "/metrics.jsonl", metrics).ok());
          table.runs.push_back(g);
        }
      }
    }
    ++b;
  }
  EXPECT_TRUE(WriteResults(dir + "/results.csv", table).ok());
  return dir + "/results.csv";
}

TEST(NoiseScale, TheReportPlotsItBesideBoptAndStatesTheExtrapolatedLaws) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/sweep";
  const std::string results = WriteSweepFolder(dir);
  ReportOptions options;
  options.target_flops = 1e22;
  options.bootstrap.resamples = 20;
  options.parametric = FewParametricStarts();
  absl::StatusOr<ScalingAnalysis> a = MakeReport(results, options, dir + "/report");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->noise_curves.size(), 27u) << a->noise_error;
  for (const NoiseScaleCurve& c : a->noise_curves) {
    EXPECT_GT(c.b_simple.back(), 5.0) << c.run;
    EXPECT_LT(c.b_simple.back(), 34.0) << c.run;
  }
  // The N/D fits see each size once: the grid size's best run, not its 9 settings.
  EXPECT_EQ(a->observations.size(), 3u * 7);
  EXPECT_EQ(a->hyperparameter_runs.size(), 27u);
  ASSERT_TRUE(a->hyperparameters.has_value()) << a->hyperparameters_error;
  EXPECT_NEAR(a->hyperparameters->batch_law.exponent, 0.3, 0.03);  // batch sizes rounded to whole sequences
  EXPECT_NEAR(a->hyperparameters->lr_law.exponent, -0.1, 1e-6);

  absl::StatusOr<std::string> md = ReadFile(dir + "/report/report.md");
  ASSERT_TRUE(md.ok()) << md.status();
  EXPECT_NE(md->find("**Batch/lr grids:** the N/D fits take each model size's best run at its budget; 24 other "
                     "runs"),
            std::string::npos)
      << *md;
  EXPECT_NE(md->find("## Gradient noise scale\n\n| budget (FLOP) | runs | B_simple at the end (median)"),
            std::string::npos)
      << *md;
  // Each budget's row: 9 runs, and the fitted B_opt beside the measured noise scale.
  for (const HyperparameterOptimum& o : a->hyperparameters->budgets) {
    EXPECT_NE(md->find(absl::StrCat(" | 9 | ")), std::string::npos);
    EXPECT_NE(md->find(absl::StrCat(" | ", FormatNumber(o.batch_size), " |\n")), std::string::npos) << *md;
  }
  EXPECT_NE(md->find("![noise_scale.svg](noise_scale.svg)"), std::string::npos);
  absl::StatusOr<std::string> svg = ReadFile(dir + "/report/noise_scale.svg");
  ASSERT_TRUE(svg.ok()) << svg.status();
  EXPECT_NE(svg->find("Gradient noise scale against loss"), std::string::npos);
  EXPECT_NE(svg->find("B_opt per budget"), std::string::npos);
  int lines = 0;  // one per run, and each budget's flat region
  for (size_t at = svg->find("<polyline"); at != std::string::npos; at = svg->find("<polyline", at + 1)) ++lines;
  EXPECT_GE(lines, 27 + 3);
  // The recipe says what it extrapolated: both laws with intervals, over which budgets, to which target.
  EXPECT_NE(md->find("**Extrapolated batch size and learning rate:** B_opt(C) = "), std::string::npos) << *md;
  EXPECT_NE(md->find("fitted to the optima of 3 budgets' batch x lr grids (10<sup>18</sup> to 10<sup>20</sup> "
                     "FLOP), give at 10<sup>22</sup> FLOP (100x the largest grid budget): B_opt "),
            std::string::npos)
      << *md;
  EXPECT_NE(md->find("(95% intervals)"), std::string::npos) << *md;
  // A resampled 3 x 3 grid can lose a batch size or lr and with it its minimum: more such draws than the
  // intervals' tails (5%) mark the intervals unreliable, in the recipe's statement and the batch/lr section.
  ASSERT_TRUE(a->hyperparameters_ci.has_value());
  const HyperparameterUncertainty& u = *a->hyperparameters_ci;
  const std::string unreliable = absl::StrCat("**The intervals are unreliable:** ", u.failed, " of ", u.resamples,
                                              " resamples had fewer than 2 budgets whose grid had a minimum");
  const size_t first = md->find(unreliable);
  if (u.failed > 0.05 * u.resamples) {
    ASSERT_NE(first, std::string::npos) << *md;
    EXPECT_NE(md->find(unreliable, first + 1), std::string::npos) << *md;
  } else {
    EXPECT_EQ(md->find("**The intervals are unreliable:**"), std::string::npos) << *md;
  }
}

TEST(NoiseScale, WithoutLogsTheReportSaysWhy) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/no_logs";
  ASSERT_TRUE(MakeDirs(dir).ok());
  ResultsTable table;
  for (int k = 0; k < 4; ++k) {
    RunResult r;
    r.run = absl::StrCat("r", k);
    r.params = r.non_embedding_params = 1e6 * (k + 1);
    r.tokens = 2e7;
    r.flops = 6 * r.params * r.tokens;
    r.final_loss = r.best_val_loss = 3.0 - 0.1 * k;
    r.d_model = 64, r.n_layers = 2, r.n_heads = 1, r.batch_size = 8, r.lr = 1e-3;
    table.runs.push_back(r);
  }
  ASSERT_TRUE(WriteResults(dir + "/results.csv", table).ok());
  ReportOptions options;
  options.target_flops = 1e20;
  options.bootstrap.resamples = 0;
  options.parametric = FewParametricStarts();
  absl::StatusOr<ScalingAnalysis> a = MakeReport(dir + "/results.csv", options, dir + "/report");
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<std::string> md = ReadFile(dir + "/report/report.md");
  ASSERT_TRUE(md.ok());
  EXPECT_NE(md->find("## Gradient noise scale\n\nNot measured: no run logged it"), std::string::npos) << *md;
  EXPECT_FALSE(FileExists(dir + "/report/noise_scale.svg"));
  EXPECT_NE(md->find("**Batch size and learning rate: not extrapolated by laws**"), std::string::npos) << *md;
}

}  // namespace
}  // namespace lmf::scaling
