// Tests for the readers of the published scaling tables: row counts and conventions from SOURCES.md.
#include "scaling/published.h"

#include <cmath>
#include <set>

#include "base/shared_data.h"
#include "gtest/gtest.h"

namespace lmf::scaling {
namespace {

TEST(PublishedTest, EpochChinchillaDerivesTokensAndDropsFiveHighestLosses) {
  LMF_SHARED_DATA_OR_SKIP(path, "scaling/epoch_chinchilla_svg_extracted_data.csv");
  absl::StatusOr<Observations> obs = ReadEpochChinchilla(path);
  ASSERT_TRUE(obs.ok()) << obs.status();
  ASSERT_EQ(obs->size(), 245u);
  EXPECT_NEAR(6 * (*obs)[0].params * (*obs)[0].tokens / (*obs)[0].flops, 1, 1e-12);
  const Observations kept = DropHighestLoss(*obs, 5);
  EXPECT_EQ(kept.size(), 240u);
  double max_loss = 0;
  for (const Observation& o : kept) max_loss = std::max(max_loss, o.loss);
  EXPECT_LT(max_loss, 5.0);  // SOURCES.md: losses run from 2.08 to 5.01
}

TEST(PublishedTest, Llama3HasTenBudgets) {
  LMF_SHARED_DATA_OR_SKIP(path, "scaling/llama3_isoflops_points.csv");
  absl::StatusOr<Observations> obs = ReadLlama3IsoFlops(path);
  ASSERT_TRUE(obs.ok()) << obs.status();
  EXPECT_EQ(obs->size(), 133u);
  std::set<double> budgets;
  for (const Observation& o : *obs) budgets.insert(o.budget);
  EXPECT_EQ(budgets.size(), 10u);
}

TEST(PublishedTest, MisfittingHasBothParameterCounts) {
  LMF_SHARED_DATA_OR_SKIP(path, "scaling/misfitting_scaling_results_last_ckpt_only.csv");
  absl::StatusOr<Observations> with = ReadMisfitting(path, false);
  absl::StatusOr<Observations> without = ReadMisfitting(path, true);
  ASSERT_TRUE(with.ok()) << with.status();
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(with->size(), 261u);
  EXPECT_GT((*with)[0].params, (*without)[0].params);
}

TEST(PublishedTest, MarinKeepsRegularRunsAndTriplesTheForwardBudget) {
  LMF_SHARED_DATA_OR_SKIP(path, "scaling/marin_202603_isoflop_dclm.csv");
  absl::StatusOr<Observations> obs = ReadMarinIsoFlops(path);
  ASSERT_TRUE(obs.ok()) << obs.status();
  EXPECT_EQ(obs->size(), 85u);  // this export has no validation-optimal runs
  for (const Observation& o : *obs) {
    // The training FLOP W&B logged is 3x the budget in the run's name to 1e-4; 6ND (N with embeddings)
    // is within 0.93-1.35 of it, the embeddings weighing most in the smallest models.
    EXPECT_NEAR(o.flops / o.budget, 1, 1e-4);
    EXPECT_NEAR(6 * o.params * o.tokens / o.budget, 1.14, 0.21);
  }
  LMF_SHARED_DATA_OR_SKIP(comma, "scaling/marin_202603_isoflop_comma.csv");
  obs = ReadMarinIsoFlops(comma);
  ASSERT_TRUE(obs.ok()) << obs.status();
  EXPECT_EQ(obs->size(), 85u);  // 92 rows minus 7 validation-optimal runs
}

TEST(PublishedTest, OpenAthenaSelectsOneExperimentAndDropsOutliers) {
  LMF_SHARED_DATA_OR_SKIP(path, "scaling/openathena_isoflops_combined.csv");
  absl::StatusOr<Observations> all = ReadOpenAthenaIsoFlops(path, "epochai_chinchilla__massivetext__chinchilla", true);
  absl::StatusOr<Observations> clean =
      ReadOpenAthenaIsoFlops(path, "epochai_chinchilla__massivetext__chinchilla", false);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_TRUE(clean.ok());
  EXPECT_EQ(all->size(), 123u);
  EXPECT_LT(clean->size(), all->size());
  for (const Observation& o : *clean) EXPECT_GT(o.budget, 0);
  EXPECT_EQ(ReadOpenAthenaIsoFlops(path, "no_such_experiment", true).status().code(), absl::StatusCode::kNotFound);
}

TEST(PublishedTest, Cs336JsonHas72Runs) {
  LMF_SHARED_DATA_OR_SKIP(path, "scaling/cs336_a3_isoflops_curves_SYNTHETIC.json");
  absl::StatusOr<Observations> obs = ReadCs336IsoFlops(path);
  ASSERT_TRUE(obs.ok()) << obs.status();
  EXPECT_EQ(obs->size(), 72u);
  EXPECT_EQ((*obs)[0].params, 49999999);
  EXPECT_EQ((*obs)[0].budget, 6e18);
}

}  // namespace
}  // namespace lmf::scaling
