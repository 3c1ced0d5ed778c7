// What the loss-curve tests of the trainer share (trainer_cuda_test: CUDA against the CPU; trainer_cpu_bf16_test:
// CPU BF16 against CPU FP32): a ~2M-parameter Llama-style model (2 layers, d_model 256, 4 heads of size 64,
// SwiGLU, RoPE, vocabulary 512, T=64, batch 8) on a learnable token stream, trained kLossCurveSteps steps
// through Train; metrics read back from metrics.jsonl; step-by-step curve comparison; and the tolerances.
//
// Tolerances, from //experiments/trainer:loss_curve_sensitivity (this model, data stream, schedule and
// AdamW on the CPU, 60 steps): moving every initial weight by one fp32 ulp moves the loss curve by at most
// 8.3e-8 relative (training at this size is not chaotic: differences do not blow up), scaling every gradient
// element by 1 + e, |e| <= 2^-19 (a reordered K = 688 sum's typical difference), at every step by at most
// 1.1e-7, and rounding the weights to bf16 before every forward and backward (bf16 weights alone, fp32
// everything else) by at most 4.0e-4.
//   - FP32: the GPU runs the same math with sums in another order (GEMM reductions over K <= 688, the
//     vocabulary's 512 logits, 64 keys); a reordered fp32 sum of K terms differs by at most ~K * 2^-24
//     = 4e-5 relative, so 1e-4 covers it with room.
//   - BF16: activations and activation gradients are also stored in bf16 (2^-9 relative rounding each, on
//     ~10 stored tensors per layer against one weight copy), so about ten times the weight-only 4.0e-4:
//     ~0.4% per step; 2% allows five times that, for the early steps' larger losses and gradients.
//     Averaging the last 10 steps removes most of the per-batch noise, so their means must agree within 1%.
//   - Eval: one forward pass on identical fp32 weights; only the order of the fp32 sums differs (the same
//     ~K * 2^-24 <= 4e-5 bound as one training step, with no accumulation over steps), so FP32 gets the
//     same 1e-4. BF16 rounds weights and activations as in a training step's forward: the 2% per step.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_LOSS_CURVE_TESTING_H_
#define LMFORGE_EXPERIMENTS_TRAINER_LOSS_CURVE_TESTING_H_

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "config/loader.h"
#include "experiments/metrics/metrics_log.h"
#include "experiments/trainer/trainer.h"
#include "experiments/trainer/trainer_testing.h"
#include "gtest/gtest.h"
#include "tokenizer/token_file.h"

namespace lmf::experiments::testing {

constexpr int kLossCurveSteps = 60;
constexpr double kFp32Tolerance = 1e-4;      // relative, per step (see above)
constexpr double kBf16StepTolerance = 0.02;  // relative, per step
constexpr double kBf16MeanTolerance = 0.01;  // relative, mean of the last 10 steps

// 20k tokens of a learnable stream: 9 in 10 tokens follow the previous one by a fixed map, the rest are
// random, so the loss falls from ln(512) ~ 6.2 to below 1 within the run (a curve worth comparing).
inline std::string WriteLearnableTokens() {
  const std::string path = TempPath("learnable_train.tok");
  if (FileExists(path)) return path;
  std::mt19937 rng(11);
  std::vector<uint32_t> ids(20000);
  ids[0] = rng() % 512;
  for (size_t i = 1; i < ids.size(); ++i)
    ids[i] = rng() % 10 == 0 ? rng() % 512 : (ids[i - 1] * 37 + 11) % 512;
  auto writer = tokenizer::TokenFileWriter::Create(path, 512, 1);
  EXPECT_TRUE(writer.ok()) << writer.status();
  EXPECT_TRUE(writer->Append(ids.data(), ids.size()).ok());
  EXPECT_TRUE(writer->Commit().ok());
  return path;
}

// The model above on `device` ("CPU", "CUDA") in `precision` ("FP32", "BF16"), writing into `out`.
inline config::Experiment LossCurveExperiment(const std::string& out, const std::string& device,
                                              const std::string& precision) {
  auto loaded = config::LoadExperiment(
      "experiments/configs/tiny.textproto",
      {"data.train_tokens=" + WriteLearnableTokens(), "run.output_dir=" + out, "model.d_model=256",
       "model.n_heads=4", "model.ffn.d_ff=688", "model.context_length=64", "run.batch_size=8",
       absl::StrCat("run.max_steps=", kLossCurveSteps), "run.checkpoint_interval=10", "run.keep_checkpoints=10",
       "schedule.warmup=10", "run.device=" + device, "run.precision=" + precision});
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return *loaded;
}

inline std::vector<StepMetrics> ReadMetrics(const std::string& run_dir) {
  auto metrics = ReadMetricsLog(run_dir + "/metrics.jsonl");
  EXPECT_TRUE(metrics.ok()) << metrics.status();
  return metrics.ok() ? *std::move(metrics) : std::vector<StepMetrics>{};
}

// Trains (or, with `resume`, continues) and returns the run's metrics; `log` receives the console.
inline std::vector<StepMetrics> TrainRun(const config::Experiment& e, int64_t stop_after = 0, bool resume = false,
                                         const std::string& log = "/dev/null") {
  TrainOptions options;
  options.console = std::fopen(log.c_str(), "w");
  options.stop_after_step = stop_after;
  options.resume = resume;
  auto result = Train(e, options);
  std::fclose(options.console);
  EXPECT_TRUE(result.ok()) << result.status();
  return ReadMetrics(e.run().output_dir());
}

// Step-by-step relative agreement of `run` with `reference` on steps [first, last] (1-based).
inline void ExpectCurvesAgree(const std::vector<StepMetrics>& run, const std::vector<StepMetrics>& reference,
                              double tolerance, int first, int last, const std::string& what) {
  ASSERT_GE(static_cast<int>(run.size()), last) << what;
  ASSERT_GE(static_cast<int>(reference.size()), last) << what;
  for (int step = first; step <= last; ++step) {
    const StepMetrics& a = run[step - 1];
    const StepMetrics& b = reference[step - 1];
    ASSERT_EQ(a.step, step) << what;
    EXPECT_NEAR(a.loss, b.loss, tolerance * b.loss) << what << ", step " << step;
  }
}

inline double MeanLossOfLastSteps(const std::vector<StepMetrics>& metrics, int n) {
  double sum = 0;
  for (size_t i = metrics.size() - n; i < metrics.size(); ++i) sum += metrics[i].loss;
  return sum / n;
}

}  // namespace lmf::experiments::testing

#endif  // LMFORGE_EXPERIMENTS_TRAINER_LOSS_CURVE_TESTING_H_
