// A mixture of experts under pipeline parallelism through the trainer (run.parallel.pipeline with
// model.moe): the test process is rank 0 and starts the other ranks as the train binary, one thread each
// (LMF_NUM_THREADS=1 in the BUILD target) so that the GEMMs split their work alike in every layout. The
// model is tiny_moe with 4 layers (layers 1-3 MoE), noisy top-k gating, the auxiliary-loss-free expert bias
// and a capacity that drops assignments, without clipping. Checked: (data=1, pipeline=2) under 1F1B and
// ZB-H1 is the single-process run bit for bit (losses, expert loads, dropped shares, validation loss and
// both checkpoint files, expert biases included), its aux losses to 1e-12 relative (the same doubles summed
// per stage, then over the ranks); a checkpoint written at (1, 2) resumes in one process, and one written
// in one process resumes at (1, 2), with the same next loss (that step reads the same weights, biases and
// data). Pipeline x expert (data=1, pipeline=2, expert=2: each stage's 8 experts over 2 ranks) is the
// single-process run to fp32 rounding (the tolerances of trainer/expert_parallel_test, whose reasons hold:
// an expert's rows arrive in another order and gradients are summed over ranks in another order): losses,
// aux losses and the validation loss to 1e-5 relative, the checkpoint's weights (every expert under its
// global name, gathered from both stages' expert ranks) to 1e-4 of the largest; its checkpoint resumes in one
// process with the same next loss to 1e-6 (the experts' rows grouped differently over the ranks).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

const std::string& Tokens() {
  static const std::string path = testing::WriteRandomTokens("pp_moe_train.tok", 7);
  return path;
}

// tiny_moe with 4 layers at (data, pipeline), 4 micro-batches of 4 sequences a step, a checkpoint after
// step 2 and at the end, the validation loss at the end.
config::Experiment TinyMoe(const std::string& run, int data, int pipeline, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"data.train_tokens=" + Tokens(),
                                "data.val_tokens=" + Tokens(),
                                "run.eval_tokens=512",
                                "run.output_dir=" + TempPath(run),
                                absl::StrCat("run.parallel.data=", data),
                                absl::StrCat("run.parallel.pipeline=", pipeline),
                                "run.parallel.timeout_seconds=20",
                                "run.batch_size=4",
                                "run.grad_accum_steps=4",
                                "run.max_steps=4",
                                "schedule.warmup=2",
                                "run.checkpoint_interval=2",
                                "run.keep_checkpoints=5",
                                "optimizer.grad_clip=0",
                                "model.n_layers=4",
                                "model.moe.noisy_gating=true",
                                "model.moe.expert_bias=true",
                                "model.moe.bias_update_rate=0.01",
                                "model.moe.capacity_factor=1.0"};
  o.insert(o.end(), more.begin(), more.end());
  auto loaded = config::LoadExperiment("experiments/configs/tiny_moe.textproto", o);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return *loaded;
}

TrainOptions Options(int64_t stop_after_step = 0, bool resume = false) {
  TrainOptions options;
  options.console = std::fopen("/dev/null", "w");
  options.data_parallel_command = {std::string(std::getenv("TEST_SRCDIR")) + "/lmforge/experiments/train"};
  options.stop_after_step = stop_after_step;
  options.resume = resume;
  return options;
}

std::vector<StepMetrics> Metrics(const std::string& run) {
  auto metrics = ReadMetricsLog(TempPath(run) + "/metrics.jsonl");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? *metrics : std::vector<StepMetrics>{};
}

std::string File(const std::string& run, const std::string& name) {
  auto text = ReadFile(TempPath(run) + "/checkpoints/step_00000004/" + name);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

TEST(PipelineMoe, TwoStagesTrainTheSingleProcessRunBitForBit) {
  auto single = Train(TinyMoe("pp_moe_single", 1, 1), Options());
  ASSERT_TRUE(single.ok()) << single.status();
  const std::vector<StepMetrics> one = Metrics("pp_moe_single");
  for (const std::string schedule : {"ONE_F_ONE_B", "ZB_H1"}) {
    SCOPED_TRACE(schedule);
    const std::string run = "pp_moe_2_" + schedule;
    auto piped = Train(TinyMoe(run, 1, 2, {"run.parallel.schedule=" + schedule}), Options());
    ASSERT_TRUE(piped.ok()) << piped.status();
    const std::vector<StepMetrics> two = Metrics(run);
    ASSERT_EQ(two.size(), one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(two[i].loss, one[i].loss) << "step " << i + 1;
      ASSERT_TRUE(one[i].aux_loss.has_value() && two[i].aux_loss.has_value()) << "step " << i + 1;
      EXPECT_NEAR(*two[i].aux_loss, *one[i].aux_loss, 1e-12 * *one[i].aux_loss) << "step " << i + 1;
      ASSERT_EQ(one[i].expert_loads.size(), 3u) << "step " << i + 1;  // layers 1, 2 and 3
      EXPECT_EQ(two[i].expert_loads, one[i].expert_loads) << "step " << i + 1;
      EXPECT_EQ(two[i].dropped_share, one[i].dropped_share) << "step " << i + 1;
      EXPECT_EQ(two[i].expert_load_max_over_mean, one[i].expert_load_max_over_mean) << "step " << i + 1;
    }
    EXPECT_GT(*one.back().dropped_share, 0.0);  // the capacity drops some assignments
    ASSERT_TRUE(single->last_val_loss.has_value() && piped->last_val_loss.has_value());
    EXPECT_EQ(*piped->last_val_loss, *single->last_val_loss);
    // One model.safetensors with the single process's names, order and values (the expert biases
    // included); the optimizer's likewise.
    for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
      EXPECT_TRUE(File(run, file) == File("pp_moe_single", file)) << file << " differs";
    }
    EXPECT_NE(File(run, "model.safetensors").find("layers.3.ffn.router.expert_bias"), std::string::npos);
  }
}

// The loss of step 3 after resuming the checkpoint of step 2 at (data, pipeline).
double NextLossResumedAt(const std::string& run, int data, int pipeline) {
  auto resumed = Train(TinyMoe(run, data, pipeline), Options(/*stop_after_step=*/3, /*resume=*/true));
  EXPECT_TRUE(resumed.ok()) << "data=" << data << " pipeline=" << pipeline << ": " << resumed.status();
  return resumed.ok() ? resumed->last_loss : NAN;
}

TEST(PipelineMoe, ACheckpointResumesAcrossLayouts) {
  // Written at (1, 2): step 3 ends the run as a kill would; the checkpoint of step 2 is the newest.
  auto piped = Train(TinyMoe("pp_moe_reshard", 1, 2), Options(/*stop_after_step=*/3));
  ASSERT_TRUE(piped.ok()) << piped.status();
  EXPECT_NEAR(NextLossResumedAt("pp_moe_reshard", 1, 1), piped->last_loss, 1e-12 * piped->last_loss);
  // Written in one process, resumed in two stages.
  auto whole = Train(TinyMoe("pp_moe_reshard_back", 1, 1), Options(/*stop_after_step=*/3));
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_NEAR(NextLossResumedAt("pp_moe_reshard_back", 1, 2), whole->last_loss, 1e-12 * whole->last_loss);
}

TEST(PipelineMoe, PipelineByExpertTrainsTheSingleProcessRunToRounding) {
  auto single = Train(TinyMoe("pp_moe_single_ep", 1, 1), Options());
  ASSERT_TRUE(single.ok()) << single.status();
  auto piped = Train(TinyMoe("pp_moe_2x2", 1, 2, {"run.parallel.expert=2"}), Options());
  ASSERT_TRUE(piped.ok()) << piped.status();
  const std::vector<StepMetrics> one = Metrics("pp_moe_single_ep"), many = Metrics("pp_moe_2x2");
  ASSERT_EQ(many.size(), one.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(many[i].loss, one[i].loss, 1e-5 * one[i].loss) << "step " << i + 1;
    ASSERT_TRUE(one[i].aux_loss.has_value() && many[i].aux_loss.has_value()) << "step " << i + 1;
    EXPECT_NEAR(*many[i].aux_loss, *one[i].aux_loss, 1e-5 * *one[i].aux_loss) << "step " << i + 1;
    ASSERT_EQ(many[i].expert_loads.size(), 3u) << "step " << i + 1;
  }
  ASSERT_TRUE(single->last_val_loss.has_value() && piped->last_val_loss.has_value());
  EXPECT_NEAR(*piped->last_val_loss, *single->last_val_loss, 1e-5 * *single->last_val_loss);
  auto a = LoadCheckpoint(TempPath("pp_moe_single_ep/checkpoints/step_00000004"));
  auto b = LoadCheckpoint(TempPath("pp_moe_2x2/checkpoints/step_00000004"));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->model.tensors().size(), b->model.tensors().size());
  float largest = 0, worst = 0;
  std::string worst_name;
  for (const auto& [name, tensor] : a->model.tensors()) {
    auto x = a->model.ReadFloat(name), y = b->model.ReadFloat(name);
    ASSERT_TRUE(x.ok() && y.ok()) << name << ": " << y.status();
    ASSERT_EQ(x->size(), y->size()) << name;
    for (size_t i = 0; i < x->size(); ++i) {
      largest = std::max(largest, std::fabs((*x)[i]));
      if (std::fabs((*x)[i] - (*y)[i]) > worst) worst = std::fabs((*x)[i] - (*y)[i]), worst_name = name;
    }
  }
  EXPECT_LE(worst, 1e-4f * largest) << worst_name << " (largest weight " << largest << ")";
  std::printf("(data=1, pipeline=2, expert=2) vs one process: last loss %.9g vs %.9g, largest weight difference %g "
              "(%s) of largest %g\n",
              many.back().loss, one.back().loss, worst, worst_name.c_str(), largest);
  // Its checkpoint of step 2, resumed in one process: the same next loss.
  auto stopped = Train(TinyMoe("pp_moe_2x2_reshard", 1, 2, {"run.parallel.expert=2"}), Options(/*stop_after_step=*/3));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_NEAR(NextLossResumedAt("pp_moe_2x2_reshard", 1, 1), stopped->last_loss, 1e-6 * stopped->last_loss);
}

}  // namespace
}  // namespace lmf::experiments
