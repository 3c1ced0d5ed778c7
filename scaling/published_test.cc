// Tests for the readers of the published scaling tables: row counts and conventions from SOURCES.md.
#include "scaling/published.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

#include "base/file.h"
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

// A damaged or reshaped file is an error naming the file and where: the JSON position (line and column)
// for text that is no JSON, the run's index for a run of the wrong shape.
TEST(PublishedTest, Cs336JsonErrorsNameTheFileAndTheRun) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/isoflops.json";
  const auto read = [&](const std::string& text) {
    EXPECT_TRUE(WriteFileAtomically(path, text).ok());
    return std::string(ReadCs336IsoFlops(path).status().message());
  };
  const std::string run = R"({"parameters": 5e7, "compute_budget": 6e18, "final_loss": 7.2})";
  EXPECT_EQ(read("[\n  " + run + ",\n  {\"parameters\" 1}\n]"),
            path + ": JSON at byte 84 (line 3, column 17): expected ':' after object key");
  EXPECT_EQ(read("{}"), path + ": expected a JSON array of {parameters, compute_budget, final_loss}");
  EXPECT_EQ(
      read("[" + run + ", 3]"),
      path + ": run 1 (0-based) of the array: expected an object {parameters, compute_budget, final_loss}");
  EXPECT_EQ(read(R"([{"parameters": 5e7, "budget": 6e18}])"),
            path + ": run 0 (0-based) of the array: unknown key 'budget'");
  EXPECT_EQ(read(R"([{"parameters": "5e7"}])"),
            path + ": run 0 (0-based) of the array: expected a number for key 'parameters'");
  EXPECT_EQ(read(R"([{"parameters": 5e7, "compute_budget": 6e18}])"),
            path +
                ": run 0 (0-based) of the array: a run lacks a positive parameters, compute_budget or a "
                "final_loss");
  const absl::StatusOr<Observations> one = [&] {
    EXPECT_TRUE(WriteFileAtomically(path, "[" + run + "]").ok());
    return ReadCs336IsoFlops(path);
  }();
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].tokens, 6e18 / (6 * 5e7));
  EXPECT_EQ((*one)[0].loss, 7.2);
}

}  // namespace
}  // namespace lmf::scaling
