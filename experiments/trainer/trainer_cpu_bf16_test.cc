// CPU training in BF16 (bf16 weight copies, activations and activation gradients; fp32 master weights,
// gradients, statistics and losses: kernels/cpu/bf16.h) against CPU FP32, with the model, data and
// tolerances of the CUDA comparison (loss_curve_testing.h). Checks:
//   - CPU BF16 follows the CPU FP32 loss curve within 2% per step and the last 10 steps' mean within 1%, and
//     the log names the precision;
//   - a CPU BF16 run killed at step 35 and resumed repeats the uninterrupted run bit for bit (losses, gradient
//     norms, final weights): the CPU kernels are deterministic and the checkpoint restores everything;
//   - its last checkpoint (step 30) resumes in an FP32 run (fp32 master weights under the same names), which then
//     stays within the bf16 tolerance of the all-FP32 curve.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/file.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/trainer/loss_curve_testing.h"
#include "gtest/gtest.h"

namespace lmf::experiments {
namespace {

using testing::ExpectCurvesAgree;
using testing::kBf16MeanTolerance;
using testing::kBf16StepTolerance;
using testing::kLossCurveSteps;
using testing::LossCurveExperiment;
using testing::MeanLossOfLastSteps;
using testing::TempPath;
using testing::TrainRun;

class TrainerCpuBf16Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fp32_ = new std::vector<StepMetrics>(TrainRun(LossCurveExperiment(TempPath("cpu_fp32"), "CPU", "FP32")));
    bf16_ = new std::vector<StepMetrics>(
        TrainRun(LossCurveExperiment(TempPath("cpu_bf16"), "CPU", "BF16"), 0, false, TempPath("cpu_bf16.log")));
  }
  static void TearDownTestSuite() {
    delete fp32_;
    delete bf16_;
  }
  void SetUp() override {
    ASSERT_EQ(fp32_->size(), static_cast<size_t>(kLossCurveSteps));
    ASSERT_EQ(bf16_->size(), static_cast<size_t>(kLossCurveSteps));
    // The FP32 run must have learned something, or the comparison says little.
    EXPECT_LT(fp32_->back().loss, 0.5 * fp32_->front().loss);
  }
  static const std::vector<StepMetrics>& fp32() { return *fp32_; }
  static const std::vector<StepMetrics>& bf16() { return *bf16_; }

 private:
  static std::vector<StepMetrics>* fp32_;
  static std::vector<StepMetrics>* bf16_;
};

std::vector<StepMetrics>* TrainerCpuBf16Test::fp32_ = nullptr;
std::vector<StepMetrics>* TrainerCpuBf16Test::bf16_ = nullptr;

TEST_F(TrainerCpuBf16Test, Bf16FollowsTheFp32LossCurveWithinBf16Tolerance) {
  ExpectCurvesAgree(bf16(), fp32(), kBf16StepTolerance, 1, kLossCurveSteps, "CPU BF16 vs CPU FP32");
  const double bf16_mean = MeanLossOfLastSteps(bf16(), 10), fp32_mean = MeanLossOfLastSteps(fp32(), 10);
  EXPECT_NEAR(bf16_mean, fp32_mean, kBf16MeanTolerance * fp32_mean);
  // Not the FP32 run under another name: bf16 rounding moves the curve.
  double worst = 0;
  for (int i = 0; i < kLossCurveSteps; ++i)
    worst = std::max(worst, std::fabs(bf16()[i].loss - fp32()[i].loss) / fp32()[i].loss);
  EXPECT_GT(worst, 0) << "the BF16 run gave the FP32 run's losses bit for bit";
  std::printf("CPU BF16 vs FP32: largest per-step relative loss difference %.2e (tolerance %.0e)\n", worst,
              kBf16StepTolerance);
  auto log = ReadFile(TempPath("cpu_bf16.log"));
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_TRUE(absl::StrContains(*log, "threads), BF16")) << *log;
}

TEST_F(TrainerCpuBf16Test, Bf16ResumeRepeatsTheUninterruptedRunBitForBit) {
  const std::string out = TempPath("cpu_bf16_killed");
  ASSERT_EQ(TrainRun(LossCurveExperiment(out, "CPU", "BF16"), 35).size(), 35u);
  const std::vector<StepMetrics> resumed = TrainRun(LossCurveExperiment(out, "CPU", "BF16"), 0, true);
  ExpectCurvesAgree(resumed, bf16(), 0, 1, kLossCurveSteps, "CPU BF16 resumed vs uninterrupted");
  for (size_t i = 0; i < std::min(resumed.size(), bf16().size()); ++i)
    EXPECT_EQ(resumed[i].grad_norm, bf16()[i].grad_norm) << "step " << bf16()[i].step;
  auto weights_a = ReadFile(TempPath("cpu_bf16") + "/checkpoints/step_00000060/model.safetensors");
  auto weights_b = ReadFile(out + "/checkpoints/step_00000060/model.safetensors");
  ASSERT_TRUE(weights_a.ok() && weights_b.ok());
  EXPECT_TRUE(*weights_a == *weights_b) << "final weights differ";
}

TEST_F(TrainerCpuBf16Test, Bf16CheckpointContinuesInAnFp32Run) {
  const std::string out = TempPath("cpu_bf16_then_fp32");
  ASSERT_EQ(TrainRun(LossCurveExperiment(out, "CPU", "BF16"), 35).size(), 35u);
  const std::vector<StepMetrics> resumed = TrainRun(LossCurveExperiment(out, "CPU", "FP32"), 0, true);
  ASSERT_EQ(resumed.size(), static_cast<size_t>(kLossCurveSteps));
  // Killed at 35, the run resumes from its step-30 checkpoint (run.checkpoint_interval=10).
  ExpectCurvesAgree(resumed, bf16(), 0, 1, 30, "CPU BF16 part before the checkpoint");
  ExpectCurvesAgree(resumed, fp32(), kBf16StepTolerance, 31, kLossCurveSteps,
                    "CPU FP32 continuing a CPU BF16 checkpoint");
}

}  // namespace
}  // namespace lmf::experiments
