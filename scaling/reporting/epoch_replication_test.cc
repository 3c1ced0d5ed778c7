// Besiroglu et al. 2024 ("Chinchilla Scaling: A replication attempt", arXiv:2404.10102) reproduced through
// the report's analysis (Analyze, what //scaling:report runs) on their own table (Epoch's reconstruction of
// Chinchilla's runs, ../shared/data/scaling): their five published parameters and their bootstrap standard
// errors. Their notebook (epoch-research/analyzing-chinchilla, data_analysis.ipynb) takes the estimates
// from the Huber likelihood with a fitted scale (--parametric_objective=huber_likelihood) and the standard
// errors from 4,000 bootstrap refits of the summed Huber loss (the default objective); so does this test.
#include <cmath>
#include <string>
#include <vector>

#include "base/shared_data.h"
#include "gtest/gtest.h"
#include "scaling/published.h"
#include "scaling/reporting/analysis.h"

namespace lmf::scaling {
namespace {

// Epoch's 240 runs (the 5 highest losses dropped, as they do) as a results table: N, D = C / (6N), C, loss.
ResultsTable EpochTable(const std::string& path) {
  absl::StatusOr<Observations> all = ReadEpochChinchilla(path);
  EXPECT_TRUE(all.ok()) << all.status();
  ResultsTable table;
  table.path = path;
  const Observations kept = DropHighestLoss(*all, 5);
  for (size_t i = 0; i < kept.size(); ++i) {
    RunResult r;
    r.run = "epoch" + std::to_string(i);
    r.params = r.non_embedding_params = kept[i].params;
    r.tokens = kept[i].tokens;
    r.flops = kept[i].flops;
    r.final_loss = r.best_val_loss = kept[i].loss;
    table.runs.push_back(r);
  }
  return table;
}

ReportOptions EpochOptions(ParametricObjective objective, int resamples) {
  ReportOptions options;
  options.target_flops = 5.76e23;  // Chinchilla's budget
  options.bootstrap.resamples = resamples;
  options.parametric.objective = objective;
  return options;
}

// The Monte Carlo standard deviation of a standard deviation estimated from n draws, relative to it:
// sqrt((kurtosis - 1) / (4 n)) (the delta method on the sample variance).
double RelativeSpreadOfStdDev(const std::vector<double>& draws) {
  const double n = static_cast<double>(draws.size());
  double mean = 0, m2 = 0, m4 = 0;
  for (double x : draws) mean += x / n;
  for (double x : draws) m2 += std::pow(x - mean, 2) / n, m4 += std::pow(x - mean, 4) / n;
  return std::sqrt((m4 / (m2 * m2) - 1) / (4 * n));
}

// Their table, rounded as printed: A = 482.01, B = 2085.43, E = 1.8172, alpha = 0.3478, beta = 0.3658. Every
// one agrees with ours to one unit in its 4th significant digit. E = 1.8172 is the summed-Huber fit's (their
// notebook's likelihood fit, the one behind A, B, alpha and beta, prints E = 1.81686, which ours matches to
// 6 digits); beta = 0.3658 is their 0.36585 rounded again.
TEST(EpochReplicationTest, PublishedParametersToFourSignificantDigits) {
  LMF_SHARED_DATA_OR_SKIP(path, "scaling/epoch_chinchilla_svg_extracted_data.csv");
  absl::StatusOr<ScalingAnalysis> a = Analyze(EpochTable(path), EpochOptions(ParametricObjective::kHuberLikelihood, 0));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->parametric.has_value()) << a->parametric_error;
  const ParametricLaw& law = a->parametric->law;
  EXPECT_NEAR(law.A, 482.01, 0.1);
  EXPECT_NEAR(law.B, 2085.43, 1);
  EXPECT_NEAR(law.E, 1.8172, 0.001);
  EXPECT_NEAR(law.alpha, 0.3478, 1e-4);
  EXPECT_NEAR(law.beta, 0.3658, 1e-4);
  // Their notebook's own printout, to the digits it prints.
  EXPECT_NEAR(law.A, 482.00572, 482 * 1e-8);
  EXPECT_NEAR(law.B, 2085.43420, 2085 * 1e-8);
  EXPECT_NEAR(law.E, 1.81686, 5e-6);
  EXPECT_NEAR(law.alpha, 0.34781, 5e-6);
  EXPECT_NEAR(law.beta, 0.36585, 5e-6);
  // The summed Huber loss, the report's default, does not give them (B differs by 3%).
  absl::StatusOr<ScalingAnalysis> sum = Analyze(EpochTable(path), EpochOptions(ParametricObjective::kHuberSum, 0));
  ASSERT_TRUE(sum.ok() && sum->parametric.has_value());
  EXPECT_GT(std::fabs(sum->parametric->law.B / 2085.43 - 1), 0.02);
}

// Their standard errors (paper: A 124.58, B 1293.23; notebook, which the paper rounds: E 0.02566,
// alpha 0.01540, beta 0.02060) against ours from 4,000 resamples of the summed Huber loss as their
// notebook refits it. The draws are not theirs (their NumPy generator), so the two are independent Monte
// Carlo estimates of one bootstrap standard error: each is off by a relative sqrt((kurtosis - 1) / (4 n))
// (1% for alpha and E, 1.5% for beta, 4-5% for B, whose resampled values are heavy-tailed, kurtosis ~30),
// and they may differ by 3 standard deviations of the difference, sqrt(2) times that. Measured over 6
// seeds, ours are 2-4% below theirs for A, 0-3% for E, 1.5-3% for alpha, within 2% for beta, and 2-13%
// above for B. Refitting
// the resamples with the likelihood instead gives 3-5% larger errors (least absolute deviations is the
// less efficient estimator here), which fails this test for alpha.
TEST(EpochReplicationTest, PublishedBootstrapStandardErrors) {
  LMF_SHARED_DATA_OR_SKIP(path, "scaling/epoch_chinchilla_svg_extracted_data.csv");
  absl::StatusOr<ScalingAnalysis> a = Analyze(EpochTable(path), EpochOptions(ParametricObjective::kHuberSum, 4000));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(a->parametric_ci.has_value());
  const ParametricUncertainty& ci = *a->parametric_ci;
  ASSERT_EQ(ci.failed, 0);
  std::vector<double> draws[5];
  for (const ParametricLaw& l : ci.resampled) {
    const double values[5] = {l.A, l.B, l.E, l.alpha, l.beta};
    for (int k = 0; k < 5; ++k) draws[k].push_back(values[k]);
  }
  const char* names[5] = {"A", "B", "E", "alpha", "beta"};
  const double ours[5] = {ci.A.std_error, ci.B.std_error, ci.E.std_error, ci.alpha.std_error, ci.beta.std_error};
  const double theirs[5] = {124.58, 1293.23, 0.02566, 0.01540, 0.02060};
  for (int k = 0; k < 5; ++k) {
    const double tolerance = 3 * std::sqrt(2.0) * RelativeSpreadOfStdDev(draws[k]);
    EXPECT_NEAR(ours[k] / theirs[k], 1, tolerance) << names[k] << ": ours " << ours[k] << ", theirs " << theirs[k];
  }
}

}  // namespace
}  // namespace lmf::scaling
