// The trainer on a GPU against the trainer on the CPU (tag "gpu"; skips without a CUDA device): the same
// ~2M-parameter Llama-style model (2 layers, d_model 256, 4 heads of size 64, SwiGLU, RoPE, vocabulary 512,
// T=64), seed, data and schedule, trained 60 steps with run.device CPU/FP32, CUDA/FP32 and CUDA/BF16
// through Train (the experiments:train path). Checks:
//   - CUDA FP32 follows the CPU loss curve step by step within 1e-4 relative;
//   - CUDA BF16 follows it within 2% per step, and the last 10 steps' mean loss within 1%;
//   - a checkpoint written by the CPU run resumes on CUDA and continues the CPU curve, and one written by a
//     CUDA BF16 run resumes on the CPU and continues it too (fp32 master weights under the same names);
//   - a CUDA BF16 run killed and resumed on CUDA repeats the uninterrupted run bit for bit (the kernels are
//     deterministic for a fixed seed, and the checkpoint restores everything);
//   - the log names the GPU, and MFU is logged (> 0 on a GPU with a known peak);
//   - the CPU run's final checkpoint, evaluated as experiments:eval does (LoadModelFromCheckpoint with a
//     placement, then ValidationLoss) on CUDA FP32, gives the CPU's validation loss within 1e-4 relative,
//     and on CUDA BF16 within the bf16 per-step tolerance.
//
// Tolerances: see loss_curve_testing.h.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "config/loader.h"
#include "experiments/data/token_batches.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/model_loading.h"
#include "experiments/trainer/loss_curve_testing.h"
#include "experiments/trainer/trainer.h"
#include "experiments/trainer/training_device.h"
#include "experiments/trainer/weights.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_context.h"
#include "tokenizer/token_file.h"

namespace lmf::experiments {
namespace {

using testing::ExpectCurvesAgree;
using testing::kBf16MeanTolerance;
using testing::kBf16StepTolerance;
using testing::kFp32Tolerance;
using testing::MeanLossOfLastSteps;
using testing::TempPath;
using testing::TrainRun;
using testing::WriteLearnableTokens;

constexpr int kSteps = testing::kLossCurveSteps;

config::Experiment Experiment(const std::string& out, const std::string& device, const std::string& precision) {
  return testing::LossCurveExperiment(out, device, precision);
}

class TrainerCudaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (kernels::cuda::CudaDeviceCount() == 0) return;
    cpu_ = new std::vector<StepMetrics>(TrainRun(Experiment(TempPath("cpu_fp32"), "CPU", "FP32")));
  }
  static void TearDownTestSuite() {
    delete cpu_;
    cpu_ = nullptr;
  }
  void SetUp() override {
    if (kernels::cuda::CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cpu_->size(), static_cast<size_t>(kSteps));
    // The CPU run must have learned something, or the comparison says little.
    EXPECT_LT(cpu_->back().loss, 0.5 * cpu_->front().loss);
  }
  static const std::vector<StepMetrics>& cpu() { return *cpu_; }

 private:
  static std::vector<StepMetrics>* cpu_;
};

std::vector<StepMetrics>* TrainerCudaTest::cpu_ = nullptr;

TEST_F(TrainerCudaTest, Fp32FollowsTheCpuLossCurve) {
  const std::string log = TempPath("cuda_fp32.log");
  const std::vector<StepMetrics> gpu =
      TrainRun(Experiment(TempPath("cuda_fp32"), "CUDA", "FP32"), 0, false, log);
  ExpectCurvesAgree(gpu, cpu(), kFp32Tolerance, 1, kSteps, "CUDA FP32 vs CPU FP32");

  auto cuda = kernels::cuda::CudaContext::Create(0);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  const std::string name = (*cuda)->properties().name;
  auto text = ReadFile(log);
  ASSERT_TRUE(text.ok());
  EXPECT_TRUE(absl::StrContains(*text, "device: " + name + " (cuda:0), FP32")) << *text;
  if (GpuPeakFlops(name, config::RunConfig::FP32).has_value()) {
    for (const StepMetrics& m : gpu) EXPECT_GT(m.mfu, 0) << "step " << m.step;
  } else {
    EXPECT_TRUE(absl::StrContains(*text, "set run.peak_flops to log MFU")) << *text;
  }
}

TEST_F(TrainerCudaTest, Bf16FollowsTheCpuLossCurveWithinBf16Tolerance) {
  const std::vector<StepMetrics> gpu = TrainRun(Experiment(TempPath("cuda_bf16"), "CUDA", "BF16"));
  ExpectCurvesAgree(gpu, cpu(), kBf16StepTolerance, 1, kSteps, "CUDA BF16 vs CPU FP32");
  const double gpu_mean = MeanLossOfLastSteps(gpu, 10), cpu_mean = MeanLossOfLastSteps(cpu(), 10);
  EXPECT_NEAR(gpu_mean, cpu_mean, kBf16MeanTolerance * cpu_mean);
  auto cuda = kernels::cuda::CudaContext::Create(0);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  if (GpuPeakFlops((*cuda)->properties().name, config::RunConfig::BF16).has_value()) {
    for (const StepMetrics& m : gpu) EXPECT_GT(m.mfu, 0) << "step " << m.step;
  }
}

TEST_F(TrainerCudaTest, CpuCheckpointResumesOnCudaAndContinuesTheCurve) {
  const std::string out = TempPath("cpu_then_cuda");
  // Killed after step 35: the last checkpoint is step 30; the CUDA run redoes 31..60 from it.
  const std::vector<StepMetrics> first = TrainRun(Experiment(out, "CPU", "FP32"), 35);
  ASSERT_EQ(first.size(), 35u);
  const std::vector<StepMetrics> resumed = TrainRun(Experiment(out, "CUDA", "FP32"), 0, true);
  ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps));
  ExpectCurvesAgree(resumed, cpu(), 0, 1, 30, "CPU part before the checkpoint (bit-identical)");
  ExpectCurvesAgree(resumed, cpu(), kFp32Tolerance, 31, kSteps, "CUDA FP32 continuing a CPU checkpoint");
}

TEST_F(TrainerCudaTest, CudaBf16CheckpointResumesOnTheCpuAndContinuesTheCurve) {
  const std::string out = TempPath("cuda_then_cpu");
  const std::vector<StepMetrics> first = TrainRun(Experiment(out, "CUDA", "BF16"), 35);
  ASSERT_EQ(first.size(), 35u);
  const std::vector<StepMetrics> resumed = TrainRun(Experiment(out, "CPU", "FP32"), 0, true);
  ASSERT_EQ(resumed.size(), static_cast<size_t>(kSteps));
  ExpectCurvesAgree(resumed, cpu(), kBf16StepTolerance, 1, 30, "CUDA BF16 part before the checkpoint");
  // The CPU continues from bf16-trained fp32 master weights: the curve stays within the bf16 tolerance of
  // the all-CPU run.
  ExpectCurvesAgree(resumed, cpu(), kBf16StepTolerance, 31, kSteps,
                    "CPU FP32 continuing a CUDA BF16 checkpoint");
}

TEST_F(TrainerCudaTest, CudaResumeRepeatsTheUninterruptedRunBitForBit) {
  const std::vector<StepMetrics> straight = TrainRun(Experiment(TempPath("cuda_straight"), "CUDA", "BF16"));
  const std::string out = TempPath("cuda_killed");
  ASSERT_EQ(TrainRun(Experiment(out, "CUDA", "BF16"), 35).size(), 35u);
  const std::vector<StepMetrics> resumed = TrainRun(Experiment(out, "CUDA", "BF16"), 0, true);
  ExpectCurvesAgree(resumed, straight, 0, 1, kSteps, "CUDA BF16 resumed vs uninterrupted");
  for (size_t i = 0; i < std::min(resumed.size(), straight.size()); ++i) {
    EXPECT_EQ(resumed[i].grad_norm, straight[i].grad_norm) << "step " << straight[i].step;
  }
  auto weights_a = ReadFile(TempPath("cuda_straight") + "/checkpoints/step_00000060/model.safetensors");
  auto weights_b = ReadFile(out + "/checkpoints/step_00000060/model.safetensors");
  ASSERT_TRUE(weights_a.ok() && weights_b.ok());
  EXPECT_TRUE(*weights_a == *weights_b) << "final weights differ";
}

// Loads the CPU run's newest checkpoint on `placement` and returns its validation loss on the training
// stream's first 8 batches, as experiments:eval computes it.
double EvalLoss(const ModelPlacement& placement) {
  absl::StatusOr<LoadedModel> loaded = LoadModelFromCheckpoint(TempPath("cpu_fp32"), placement);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (!loaded.ok()) return NAN;
  EXPECT_EQ(loaded->model->context().device.is_cuda(), placement.device == config::RunConfig::CUDA);
  const config::Experiment& e = loaded->experiment;
  TokenFileExpectations expect;
  expect.model_vocab_size = e.model().vocab_size();
  expect.batch_size = e.run().batch_size();
  expect.context_length = e.model().context_length();
  absl::StatusOr<ValidationBatches> batches =
      ValidationBatches::Open(WriteLearnableTokens(), expect, 8 * expect.batch_size * expect.context_length);
  EXPECT_TRUE(batches.ok()) << batches.status();
  if (!batches.ok()) return NAN;
  absl::StatusOr<double> loss = ValidationLoss(*loaded->model, *batches, expect.batch_size, expect.context_length);
  EXPECT_TRUE(loss.ok()) << loss.status();
  return loss.ok() ? *loss : NAN;
}

TEST_F(TrainerCudaTest, EvalOnCudaGivesTheCpuLossOfACheckpoint) {
  const double cpu_loss = EvalLoss(ModelPlacement{});
  ASSERT_TRUE(std::isfinite(cpu_loss));
  const double fp32 = EvalLoss(ModelPlacement{config::RunConfig::CUDA, 0, config::RunConfig::FP32});
  EXPECT_NEAR(fp32, cpu_loss, kFp32Tolerance * cpu_loss) << "CUDA FP32 eval vs CPU eval";
  const double bf16 = EvalLoss(ModelPlacement{config::RunConfig::CUDA, 0, config::RunConfig::BF16});
  EXPECT_NEAR(bf16, cpu_loss, kBf16StepTolerance * cpu_loss) << "CUDA BF16 eval vs CPU eval";
}

TEST_F(TrainerCudaTest, OpProfileWritesEveryOpOfTheProfiledSteps) {
  config::Experiment e = Experiment(TempPath("cuda_op_profile"), "CUDA", "BF16");
  e.mutable_run()->set_max_steps(5);
  e.mutable_run()->set_op_profile_steps(3);
  const std::string log = TempPath("cuda_op_profile.log");
  ASSERT_EQ(TrainRun(e, 0, false, log).size(), 5u);
  absl::StatusOr<std::string> profile = ReadFile(e.run().output_dir() + "/op_profile.txt");
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_TRUE(absl::StrContains(*profile, "steps 2-4 on ")) << *profile;
  for (const char* op : {"Matmul", "MatmulBackward", "AttentionForward", "AttentionBackward", "MultiTensorAdamW",
                         "CrossEntropyForward", "EmbeddingBackward", "window"}) {
    EXPECT_TRUE(absl::StrContains(*profile, op)) << op << " missing from\n" << *profile;
  }
  absl::StatusOr<std::string> console = ReadFile(log);
  ASSERT_TRUE(console.ok()) << console.status();
  EXPECT_TRUE(absl::StrContains(*console, "op profile of steps 2-4: ")) << *console;
}

}  // namespace
}  // namespace lmf::experiments
