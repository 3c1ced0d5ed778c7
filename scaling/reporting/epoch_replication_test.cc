// Besiroglu et al. 2024 ("Chinchilla Scaling: A replication attempt", arXiv:2404.10102) reproduced through
// the report (MakeReport, what //scaling:report runs) on their own table (Epoch's reconstruction of
// Chinchilla's runs, ../shared/data/scaling, written as a results table of N, C and loss into the test's
// temp folder): their five published parameters and their bootstrap standard errors. Their notebook (epoch-research/analyzing-chinchilla, data_analysis.ipynb) takes the estimates
// from the Huber likelihood with a fitted scale (--parametric_objective=huber_likelihood) and the standard
// errors from 4,000 bootstrap refits of the summed Huber loss (the default objective); so does this test.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/file.h"
#include "base/shared_data.h"
#include "gtest/gtest.h"
#include "scaling/published.h"
#include "scaling/reporting/report.h"

namespace lmf::scaling {
namespace {

// Epoch's 240 runs (the 5 highest losses dropped, as they do) as a results table with their columns only:
// params (their "Model Size"), flops ("Training FLOP") and final_loss; the report derives D = C / (6N) as
// they do. Returns the table's path.
std::string WriteEpochResults(const std::string& path) {
  absl::StatusOr<Observations> all = ReadEpochChinchilla(path);
  EXPECT_TRUE(all.ok()) << all.status();
  std::string csv = "params,flops,final_loss\n";
  for (const Observation& o : DropHighestLoss(*all, 5)) {
    csv += absl::StrFormat("%.17g,%.17g,%.17g\n", o.params, o.flops, o.loss);
  }
  const std::string results = std::string(std::getenv("TEST_TMPDIR")) + "/epoch/results.csv";
  EXPECT_TRUE(MakeDirs(std::string(std::getenv("TEST_TMPDIR")) + "/epoch").ok());
  EXPECT_TRUE(WriteFileAtomically(results, csv).ok());
  return results;
}

ReportOptions EpochOptions(ParametricObjective objective, int resamples) {
  ReportOptions options;
  options.target_flops = 5.76e23;  // Chinchilla's budget
  options.choice.non_embedding = false;  // their N counts every parameter (--params=total)
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
  const std::string results = WriteEpochResults(path);
  const std::string out = std::string(std::getenv("TEST_TMPDIR")) + "/epoch/likelihood";
  absl::StatusOr<ScalingAnalysis> a =
      MakeReport(results, EpochOptions(ParametricObjective::kHuberLikelihood, 0), out);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->observations.size(), 240u);
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
  // The report prints them to 4 significant digits.
  absl::StatusOr<std::string> md = ReadFile(out + "/report.md");
  ASSERT_TRUE(md.ok());
  for (const char* row : {"| E | 1.817 |", "| A | 482 |", "| B | 2085 |", "| α | 0.3478 |", "| β | 0.3659 |"}) {
    EXPECT_NE(md->find(row), std::string::npos) << row << " not in\n" << *md;
  }
  absl::StatusOr<ScalingAnalysis> sum =
      MakeReport(results, EpochOptions(ParametricObjective::kHuberSum, 0), out + "_sum");
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
  absl::StatusOr<ScalingAnalysis> a = MakeReport(WriteEpochResults(path), EpochOptions(ParametricObjective::kHuberSum, 4000),
                                                 std::string(std::getenv("TEST_TMPDIR")) + "/epoch/sum");
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
