// Expert parallelism through the trainer (expert_parallel.h): tiny_moe (8 experts, top-2, shared experts,
// balancing and router z-losses, gradient clipping) trained 8 steps with run.parallel.expert=2 (the test
// process is rank 0 and starts rank 1 as the train binary) is the single-process run: the same losses and
// aux losses to 1e-5 relative, and a final checkpoint holding every expert under its global name with the
// single-process run's weights to 1e-4 of the largest (measured: 2e-5 absolute against a largest near 3). The
// ranks sum the gradients in another order than one process accumulates them, and the tokens of an expert
// run in another order, so the runs agree to fp32 rounding amplified over 8 AdamW steps (whose first updates
// divide tiny gradients by their own size); a real mistake (a rank's tokens lost, a block's gradient summed
// over the wrong ranks) moves the loss in the second decimal. A run stopped after step 6 and resumed from
// its step-4 checkpoint (each rank taking its own experts from the gathered checkpoint) ends bit-identical to
// the uninterrupted one. With noisy top-k gating (its noise keyed by run.seed, the step and each token's
// index in the step) the two runs agree to the same tolerances.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "config/loader.h"
#include "experiments/checkpoint/checkpoint.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/trainer/trainer.h"
#include "experiments/trainer/trainer_testing.h"
#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

using testing::TempPath;

const std::string& TrainTokens() {
  static const std::string path = testing::WriteRandomTokens("ep_train.tok", 7);
  return path;
}

config::Experiment TinyMoe(const std::string& run, int expert, bool noisy_gating = false) {
  auto loaded = config::LoadExperiment(
      "experiments/configs/tiny_moe.textproto",
      {"data.train_tokens=" + TrainTokens(), "run.output_dir=" + TempPath(run),
       absl::StrCat("run.parallel.expert=", expert), "run.grad_accum_steps=2", "run.batch_size=4", "run.max_steps=8",
       "run.checkpoint_interval=4", "run.keep_checkpoints=3", "schedule.warmup=2",
       absl::StrCat("model.moe.noisy_gating=", noisy_gating ? "true" : "false")});
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return *loaded;
}

TrainOptions Options() {
  TrainOptions options;
  options.console = std::fopen("/dev/null", "w");
  options.data_parallel_command = {std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/train"};
  return options;
}

std::vector<StepMetrics> Metrics(const std::string& run) {
  auto metrics = ReadMetricsLog(TempPath(run) + "/metrics.jsonl");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? *metrics : std::vector<StepMetrics>{};
}

// Name -> values of the final checkpoint's model tensors.
std::map<std::string, std::vector<float>> FinalWeights(const std::string& run) {
  std::map<std::string, std::vector<float>> out;
  auto loaded = LoadCheckpoint(TempPath(run) + "/checkpoints/step_00000008");
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (!loaded.ok()) return out;
  for (const auto& [name, tensor] : loaded->model.tensors()) {
    auto values = loaded->model.ReadFloat(name);
    EXPECT_TRUE(values.ok()) << values.status();
    if (values.ok()) out[name] = *values;
  }
  return out;
}

// Trains `single` in one process and `parallel` on two expert ranks and compares them.
void ExpectTwoExpertRanksTrainTheSingleProcessRun(const std::string& single, const std::string& parallel,
                                                  bool noisy_gating) {
  ASSERT_TRUE(Train(TinyMoe(single, 1, noisy_gating), Options()).ok());
  auto trained = Train(TinyMoe(parallel, 2, noisy_gating), Options());
  ASSERT_TRUE(trained.ok()) << trained.status();
  const std::vector<StepMetrics> one = Metrics(single), two = Metrics(parallel);
  ASSERT_EQ(one.size(), 8u);
  ASSERT_EQ(two.size(), 8u) << "one metrics log, written by rank 0";
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(two[i].loss, one[i].loss, 1e-5 * one[i].loss) << "step " << i + 1;
    ASSERT_TRUE(one[i].aux_loss.has_value() && two[i].aux_loss.has_value());
    EXPECT_NEAR(*two[i].aux_loss, *one[i].aux_loss, 1e-5 * *one[i].aux_loss) << "step " << i + 1;
    EXPECT_NEAR(two[i].grad_norm, one[i].grad_norm, 1e-5 * one[i].grad_norm) << "step " << i + 1;
  }
  const auto a = FinalWeights(single), b = FinalWeights(parallel);
  ASSERT_EQ(a.size(), b.size()) << "the checkpoint holds every expert";
  ASSERT_TRUE(a.count("layers.1.ffn.experts.7.w2.weight") == 1 && b.count("layers.1.ffn.experts.7.w2.weight") == 1);
  double max_diff = 0, max_abs = 0;
  for (const auto& [name, values] : a) {
    ASSERT_EQ(b.count(name), 1u) << name;
    ASSERT_EQ(b.at(name).size(), values.size()) << name;
    for (size_t i = 0; i < values.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(values[i] - b.at(name)[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(values[i])));
    }
  }
  EXPECT_LT(max_diff, 1e-4 * max_abs);
  std::printf("expert parallel (2 ranks) vs one process over 8 steps%s: last loss %.6f vs %.6f, weights within %.3g of %.3g\n",
              noisy_gating ? " (noisy gating)" : "", two.back().loss, one.back().loss, max_diff, max_abs);
}

TEST(ExpertParallelTraining, TwoExpertRanksTrainTheSingleProcessRun) {
  ExpectTwoExpertRanksTrainTheSingleProcessRun("ep_single", "ep_2", false);
}

TEST(ExpertParallelTraining, TwoExpertRanksTrainTheSingleProcessRunWithNoisyGating) {
  ExpectTwoExpertRanksTrainTheSingleProcessRun("ep_single_noisy", "ep_2_noisy", true);
  ASSERT_TRUE(FinalWeights("ep_single_noisy").count("layers.1.ffn.router.noise.weight") == 1);
}

TEST(ExpertParallelTraining, AResumedRunIsBitIdentical) {
  ASSERT_TRUE(Train(TinyMoe("ep_straight", 2), Options()).ok());
  TrainOptions killed = Options();
  killed.stop_after_step = 6;  // every rank ends after step 6; the last checkpoint is at 4
  ASSERT_TRUE(Train(TinyMoe("ep_resumed", 2), killed).ok());
  TrainOptions resume = Options();
  resume.resume = true;
  auto resumed = Train(TinyMoe("ep_resumed", 2), resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    auto x = ReadFile(TempPath("ep_straight/checkpoints/step_00000008/") + file);
    auto y = ReadFile(TempPath("ep_resumed/checkpoints/step_00000008/") + file);
    ASSERT_TRUE(x.ok() && y.ok());
    EXPECT_TRUE(*x == *y) << file << " differs";
  }
}

}  // namespace
}  // namespace lmf::experiments
