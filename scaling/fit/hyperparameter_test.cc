// Tests for the batch-size and learning-rate laws: a grid drawn from a known optimum per budget gives that
// optimum back and the planted power laws, the flat region is the runs within the tolerance, and budgets
// whose grid cannot locate a minimum are left out with the reason.
#include "scaling/fit/hyperparameter.h"

#include <cmath>

#include "gtest/gtest.h"

namespace lmf::scaling {
namespace {

// DeepSeek LLM's fitted laws (batch in tokens): B_opt = 0.292 C^0.3271, lr_opt = 0.3118 C^-0.125.
double BatchOpt(double c) { return 0.292 * std::pow(c, 0.3271); }
double LrOpt(double c) { return 0.3118 * std::pow(c, -0.125); }

// A 5 x 5 grid of batch sizes and learning rates (factors of 2 around the optimum) at each budget; the loss
// is exactly quadratic in (ln batch, ln lr) with a cross term, minimum 2 + 100 C^-0.1 at the optimum.
std::vector<HyperparameterRun> Grid(const std::vector<double>& budgets) {
  std::vector<HyperparameterRun> runs;
  for (double c : budgets) {
    for (int i = -2; i <= 2; ++i) {
      for (int j = -2; j <= 2; ++j) {
        const double du = i * std::log(2.0) + 0.1, dv = j * std::log(2.0) - 0.2;  // optimum off the grid
        const double base = 2 + 100 * std::pow(c, -0.1);
        runs.push_back({c, BatchOpt(c) * std::exp(du), LrOpt(c) * std::exp(dv),
                        base * (1 + 0.004 * du * du + 0.008 * dv * dv + 0.002 * du * dv)});
      }
    }
  }
  return runs;
}

TEST(HyperparameterFitTest, RecoversThePlantedOptimaAndLaws) {
  absl::StatusOr<HyperparameterFit> fit = FitHyperparameterLaws(Grid({1e17, 1e18, 1e19, 1e20}), {});
  ASSERT_TRUE(fit.ok()) << fit.status();
  ASSERT_EQ(fit->budgets.size(), 4u);
  EXPECT_EQ(fit->budgets_used, 4);
  for (const HyperparameterOptimum& b : fit->budgets) {
    ASSERT_TRUE(b.used) << b.reason;
    // The surface is the generator's: the optimum comes back to round-off (~1e-10 of the log-scale).
    EXPECT_NEAR(std::log(b.batch_size / BatchOpt(b.budget)), 0, 1e-8);
    EXPECT_NEAR(std::log(b.lr / LrOpt(b.budget)), 0, 1e-8);
    EXPECT_NEAR(b.loss, 2 + 100 * std::pow(b.budget, -0.1), 1e-9);
    EXPECT_TRUE(b.inside);
    EXPECT_EQ(b.runs, 25);
    // The farthest corner is 4.4% above the optimum, so the 5% window fits nearly every run; the 0.25% flat
    // region holds the runs next to the optimum, on both sides of it in batch size.
    EXPECT_GE(b.runs_fitted, 20);
    EXPECT_LT(b.flat_batch_min, BatchOpt(b.budget));
    EXPECT_GT(b.flat_batch_max, BatchOpt(b.budget));
    EXPECT_LE(b.flat_lr_min, b.flat_lr_max);
  }
  EXPECT_NEAR(fit->batch_law.exponent, 0.3271, 1e-8);
  EXPECT_NEAR(fit->lr_law.exponent, -0.125, 1e-8);
  EXPECT_NEAR(fit->batch_law.coefficient / 0.292, 1, 1e-6);
  EXPECT_NEAR(fit->lr_law.coefficient / 0.3118, 1, 1e-6);
}

TEST(HyperparameterFitTest, BudgetsWithoutAMinimumAreLeftOutWithTheReason) {
  std::vector<HyperparameterRun> runs = Grid({1e17, 1e18, 1e19});
  // 1e20: one learning rate only (a batch-size sweep), so no surface; 1e21: loss falling with lr everywhere
  // (a saddle: the grid stopped short of the optimum learning rate).
  for (int i = -2; i <= 2; ++i) runs.push_back({1e20, 1e6 * std::exp(i), 1e-3, 2.5 + 0.01 * i * i});
  for (int i = -2; i <= 2; ++i)
    for (int j = -2; j <= 2; ++j) runs.push_back({1e21, 1e6 * std::exp(i * 0.2), 1e-3 * std::exp(j * 0.2), 2.4 + 0.001 * i * i - 0.001 * j * j});
  absl::StatusOr<HyperparameterFit> fit = FitHyperparameterLaws(runs, {});
  ASSERT_TRUE(fit.ok()) << fit.status();
  ASSERT_EQ(fit->budgets.size(), 5u);
  EXPECT_EQ(fit->budgets_used, 3);
  EXPECT_FALSE(fit->budgets[3].used);
  EXPECT_EQ(fit->budgets[3].reason,
            "5 run(s) within 5% of the best loss, over 5 batch size(s) and 1 learning rate(s); the quadratic surface "
            "needs 6 runs over 3 of each");
  EXPECT_FALSE(fit->budgets[4].used);
  EXPECT_EQ(fit->budgets[4].reason, "the fitted surface has no minimum (it does not curve upwards in every direction)");
  EXPECT_NEAR(fit->batch_law.exponent, 0.3271, 1e-8);  // from the three good budgets

  // One good budget is not enough for a law; the message lists the others' reasons.
  std::vector<HyperparameterRun> one = Grid({1e17});
  for (int i = -2; i <= 2; ++i) one.push_back({1e20, 1e6 * std::exp(i), 1e-3, 2.5 + 0.01 * i * i});
  fit = FitHyperparameterLaws(one, {});
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.status().message().find("need 2 budgets whose batch x lr grid has a minimum; 1 of 2 had one (1e+20 "
                                        "FLOP: 5 run(s)"),
            std::string::npos)
      << fit.status();
  // A run that cannot be on a grid is named.
  one[3].lr = 0;
  fit = FitHyperparameterLaws(one, {});
  ASSERT_FALSE(fit.ok());
  EXPECT_NE(fit.status().message().find("run 3 has"), std::string::npos);
}

}  // namespace
}  // namespace lmf::scaling
