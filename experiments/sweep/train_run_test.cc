// One sweep run trained in this process (TrainSweepRun, the sweep binary's --train_one) on the tiny config:
// its result and curve come from its metrics.jsonl, and an evaluation that was not finite makes the run
// DIVERGED, never FINISHED with the last finite evaluation as its loss.
#include "experiments/sweep/train_run.h"

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "base/file.h"
#include "experiments/config/loader.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/sweep/runner.h"
#include "gtest/gtest.h"
#include "tokenizer/token_file.h"

namespace lmf::sweep {
namespace {

std::string TmpDir() { return std::getenv("TEST_TMPDIR"); }

// A trained tiny run folder (4 steps, evaluated at 2 and 4) and the path of its config.
std::string TrainTinyRun(const std::string& name) {
  const std::string tokens = TmpDir() + "/" + name + ".tok";
  auto writer = tokenizer::TokenFileWriter::Create(tokens, 512, 1);
  EXPECT_TRUE(writer.ok()) << writer.status();
  std::mt19937 rng(7);
  std::vector<uint32_t> ids(2000);
  for (uint32_t& id : ids) id = rng() % 512;
  EXPECT_TRUE(writer->Append(ids.data(), ids.size()).ok());
  EXPECT_TRUE(writer->Commit().ok());
  auto experiment = experiments::LoadExperiment(
      "experiments/configs/tiny.textproto",
      {"data.train_tokens=" + tokens, "data.val_tokens=" + tokens, "run.eval_tokens=256",
       "run.eval_interval=2", "run.max_steps=4", "schedule.warmup=1", "run.output_dir=" + TmpDir() + "/" + name});
  EXPECT_TRUE(experiment.ok()) << experiment.status();
  const std::string config = TmpDir() + "/" + name + ".textproto";
  EXPECT_TRUE(experiments::WriteExperiment(*experiment, config).ok());
  EXPECT_TRUE(TrainSweepRun(config).ok());
  return config;
}

TEST(TrainSweepRun, FinishedRunTakesItsLossesFromTheCurve) {
  TrainTinyRun("finished");
  auto result = ReadRunResult(TmpDir() + "/finished");
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->status(), config::SweepRunResult::FINISHED);
  EXPECT_TRUE(std::isfinite(result->final_loss()));
  EXPECT_LE(result->best_val_loss(), result->final_loss());
  EXPECT_TRUE(FileExists(TmpDir() + "/finished/curve.csv"));
}

// The last evaluation came out NaN (the metrics line as the trainer writes one): the run diverged. Read
// again on the finished run (TrainSweepRun resumes it, with nothing left to train).
TEST(TrainSweepRun, NonFiniteEvaluationIsDiverged) {
  const std::string config = TrainTinyRun("nan_eval");
  const std::string run_dir = TmpDir() + "/nan_eval";
  auto metrics = experiments::ReadMetricsLog(run_dir + "/metrics.jsonl");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  ASSERT_EQ(metrics->size(), 4u);
  ASSERT_TRUE(metrics->back().val_loss.has_value());
  metrics->back().val_loss = NAN;
  std::string text;
  for (const experiments::StepMetrics& m : *metrics) text += experiments::MetricsJsonLine(m);
  ASSERT_TRUE(WriteFileAtomically(run_dir + "/metrics.jsonl", text).ok());

  const absl::Status trained = TrainSweepRun(config);
  EXPECT_TRUE(absl::IsAborted(trained)) << trained;
  auto result = ReadRunResult(run_dir);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->status(), config::SweepRunResult::DIVERGED);
  EXPECT_EQ(result->message(), "validation loss is nan at step 4");
}

}  // namespace
}  // namespace lmf::sweep
