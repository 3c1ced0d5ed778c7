// One sweep run trained for real in this process (TrainSweepRun, the sweep binary's --train_one: the CPU
// trainer on the tiny model): its result and curve come from its metrics.jsonl; what its result file records
// when the run does not finish; an evaluation that was not finite makes the run DIVERGED, never FINISHED with
// the last finite evaluation as its loss.
#include "experiments/sweep/train_run.h"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "base/file.h"
#include "base/subprocess.h"
#include "config/loader.h"
#include "config/run_length.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/sweep/runner.h"
#include "experiments/sweep/sweep_testing.h"
#include "gtest/gtest.h"

namespace lmf::sweep {
namespace {

using testing::TmpDir;

// The tiny model as a sweep run in TmpDir()/<name>, its config written there; returns the config's path.
std::string WriteRunConfig(const std::string& name, std::vector<std::string> overrides,
                           config::Experiment* experiment) {
  const std::string& train = testing::TinyTokens().train;
  const std::string& val = testing::TinyTokens().val;
  const std::string dir = TmpDir() + "/" + name;
  overrides.insert(overrides.end(), {"data.train_tokens=" + train, "data.val_tokens=" + val,
                                     "run.eval_tokens=256", "run.output_dir=" + dir});
  auto loaded = config::LoadExperiment("experiments/configs/tiny.textproto", overrides);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  *experiment = *loaded;
  EXPECT_TRUE(MakeDirs(dir).ok());
  EXPECT_TRUE(WriteFileAtomically(dir + "/config.textproto", config::ExperimentToText(*loaded)).ok());
  return dir + "/config.textproto";
}

TEST(TrainSweepRun, ADivergedRunRecordsTheTokensItTrainedNotItsPlan) {
  config::Experiment e;
  const std::string config = WriteRunConfig("diverged", {"optimizer.lr=1e30", "run.max_steps=40"}, &e);
  const absl::Status trained = TrainSweepRun(config);
  ASSERT_TRUE(absl::IsAborted(trained)) << trained;  // a NaN or infinite loss
  auto result = ReadRunResult(e.run().output_dir());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->status(), config::SweepRunResult::DIVERGED);
  auto metrics = experiments::ReadMetricsLog(e.run().output_dir() + "/metrics.jsonl");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  const double tokens = metrics->empty() ? 0.0 : static_cast<double>(metrics->back().tokens);
  ASSERT_GT(tokens, 0);                                      // a step or more before the NaN
  ASSERT_LT(tokens, 40.0 * config::TokensPerStep(e));  // and stopped early
  ASSERT_TRUE(result->has_tokens());
  EXPECT_EQ(result->tokens(), tokens);
  auto size = SizeOfModel(e);
  ASSERT_TRUE(size.ok());
  EXPECT_DOUBLE_EQ(result->flops(), tokens * size->training_flops_per_token);
}

// A mixture of experts has active counts below its totals (model/accounting's); a dense model has none.
TEST(TrainSweepRun, SizeOfAMixtureOfExpertsHasItsActiveCounts) {
  config::Experiment e;
  WriteRunConfig("sized", {}, &e);
  auto dense = SizeOfModel(e);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_TRUE(std::isnan(dense->active_params) && std::isnan(dense->active_non_embedding_params));
  WriteRunConfig("sized_moe", {"model.moe.n_experts=8", "model.moe.top_k=2", "model.moe.d_expert=32"}, &e);
  auto moe = SizeOfModel(e);
  ASSERT_TRUE(moe.ok()) << moe.status();
  EXPECT_LT(moe->active_params, moe->params);
  EXPECT_LT(moe->active_non_embedding_params, moe->non_embedding_params);
  EXPECT_EQ(moe->params - moe->active_params, moe->non_embedding_params - moe->active_non_embedding_params)
      << "the inactive experts, with or without embeddings";
}

// A trained tiny run folder (4 steps, evaluated at 2 and 4) and the path of its config.
std::string TrainTinyRun(const std::string& name) {
  config::Experiment e;
  const std::string config =
      WriteRunConfig(name, {"run.eval_interval=2", "run.max_steps=4", "schedule.warmup=1"}, &e);
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
  // It trained all its steps: results.csv shows those tokens, not 0 as for a run that never started.
  ASSERT_TRUE(result->has_tokens());
  EXPECT_EQ(result->tokens(), static_cast<double>(metrics->back().tokens));
}

// Stopped by a signal (the sweep forwards its own to the runs in training), a run checkpoints and says how to
// continue it: by starting its sweep again, which resumes it, not by --resume, which is the trainer's own.
TEST(TrainSweepRun, AStoppedRunSaysItsSweepResumesIt) {
  config::Experiment e;
  const std::string config = WriteRunConfig("stopped", {"run.max_steps=100000"}, &e);
  ChildSpec child;
  child.argv = {std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/sweep/sweep", "--train_one",
                "--config=" + config};
  child.log_path = e.run().output_dir() + "/log.txt";
  absl::StatusOr<pid_t> pid = StartChild(child);
  ASSERT_TRUE(pid.ok()) << pid.status();
  // Signalled once it trains (its stop handling is in place by its first logged step).
  const std::string metrics = e.run().output_dir() + "/metrics.jsonl";
  for (int i = 0; i < 3000; ++i) {
    auto lines = experiments::ReadMetricsLog(metrics);
    if (lines.ok() && !lines->empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(::kill(*pid, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
  auto result = ReadRunResult(e.run().output_dir());
  ASSERT_TRUE(result.ok()) << result.status() << "\n" << ReadFile(child.log_path).value_or("");
  EXPECT_EQ(result->status(), config::SweepRunResult::FAILED);
  EXPECT_NE(result->message().find("stopped by signal"), std::string::npos) << result->message();
  EXPECT_NE(result->message().find("its sweep resumes it"), std::string::npos) << result->message();
  EXPECT_EQ(result->message().find("--resume"), std::string::npos) << result->message();
}

}  // namespace
}  // namespace lmf::sweep
