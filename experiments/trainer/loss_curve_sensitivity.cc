// How far small numerical perturbations move the loss curve of trainer_cuda_test's model: the calibration
// behind that test's tolerances, on the CPU. Four runs of the same model (tiny.textproto with the test's
// overrides: 2 layers, d_model 256, head size 64, T=64, batch 8), seed, data stream, schedule and AdamW:
//   baseline   fp32 as the trainer runs it;
//   ulp        every initial weight moved by one fp32 ulp (random sign): the size of the differences a
//              reordered fp32 computation introduces;
//   reorder    every gradient element scaled by 1 + e, e uniform in [-2^-19, 2^-19], at EVERY step: the
//              typical relative difference of a reordered fp32 sum of K <= 688 terms (sqrt(688) * 2^-24 ~
//              2^-19.3), which a GPU's GEMMs and reductions bring into each step's gradients anew, not once;
//   bf16       the weights rounded to bf16 before every forward and backward (the master weights, gradients,
//              moments and activations stay fp32): the weight half of what bf16 training changes.
// Prints the loss every 10 steps and the largest per-step |loss - baseline| / baseline of each run.
//
//   ./bazelw run //experiments/trainer:loss_curve_sensitivity -- [--steps=60]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "base/flags.h"
#include "config/loader.h"
#include "config/model_conversion.h"
#include "config/run_length.h"
#include "experiments/schedule/lr_schedule.h"
#include "experiments/trainer/optimizer.h"
#include "kernels/core/context.h"
#include "kernels/core/dtype.h"
#include "model/language_model/language_model.h"

ABSL_FLAG(int, steps, 60, "optimizer steps per run (trainer_cuda_test runs 60)");

namespace lmf::experiments {
namespace {

enum class Perturbation { kNone, kOneUlp, kReorderEveryStep, kBf16Weights };

// The token stream of trainer_cuda_test: 9 in 10 tokens follow the previous one by a fixed map.
std::vector<int32_t> Tokens() {
  std::mt19937 rng(11);
  std::vector<int32_t> ids(20000);
  ids[0] = static_cast<int32_t>(rng() % 512);
  for (size_t i = 1; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>(rng() % 10 == 0 ? rng() % 512 : (ids[i - 1] * 37 + 11) % 512);
  }
  return ids;
}

std::vector<double> LossCurve(const config::Experiment& experiment, Perturbation perturbation, int steps) {
  const model::ModelConfig model_config = *config::ToModelConfig(experiment.model());
  std::unique_ptr<model::LanguageModel> model =
      *model::LanguageModel::Create(model_config, kernels::Context::Cpu());
  model->InitializeParameters(experiment.run().seed());
  if (perturbation == Perturbation::kOneUlp) {
    std::mt19937 rng(5);
    model->VisitParameters([&](const std::string&, const model::Parameter& p) {
      float* w = p.data();
      for (int64_t i = 0; i < p.value.numel(); ++i) {
        w[i] = std::nextafter(w[i], rng() % 2 == 0 ? INFINITY : -INFINITY);
      }
    });
  }
  ModelOptimizer optimizer(experiment.optimizer(), *model);
  const LrSchedule schedule(experiment.schedule(), experiment.optimizer().lr(), steps,
                            config::TokensPerStep(experiment));
  const std::vector<int32_t> tokens = Tokens();
  const int64_t b = experiment.run().batch_size(), t = experiment.model().context_length();
  std::vector<int32_t> inputs(b * t), targets(b * t);
  std::mt19937 windows(3);
  std::mt19937 noise(9);
  std::uniform_real_distribution<double> relative(-0x1p-19, 0x1p-19);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    for (int64_t row = 0; row < b; ++row) {
      const size_t start = windows() % (tokens.size() - t - 1);
      for (int64_t i = 0; i < t; ++i) {
        inputs[row * t + i] = tokens[start + i];
        targets[row * t + i] = tokens[start + i + 1];
      }
    }
    std::vector<std::vector<float>> master;
    if (perturbation == Perturbation::kBf16Weights) {
      model->VisitParameters([&](const std::string&, const model::Parameter& p) {
        float* w = p.data();
        master.emplace_back(w, w + p.value.numel());
        for (int64_t i = 0; i < p.value.numel(); ++i) w[i] = kernels::BF16ToFloat(kernels::FloatToBF16(w[i]));
      });
    }
    model->ZeroGrad();
    losses.push_back(*model->ForwardWithLoss(inputs.data(), targets.data(), b, t));
    model->Backward();
    if (perturbation == Perturbation::kReorderEveryStep) {
      model->VisitParameters([&](const std::string&, const model::Parameter& p) {
        float* g = p.grad_data();
        for (int64_t i = 0; i < p.grad.numel(); ++i)
          g[i] = static_cast<float>(g[i] * (1.0 + relative(noise)));
      });
    }
    if (perturbation == Perturbation::kBf16Weights) {
      size_t k = 0;
      model->VisitParameters([&](const std::string&, const model::Parameter& p) {
        std::copy(master[k].begin(), master[k].end(), p.data());
        ++k;
      });
    }
    optimizer.Step(*model, schedule.At(step));
  }
  return losses;
}

int Main() {
  const int steps = absl::GetFlag(FLAGS_steps);
  absl::StatusOr<config::Experiment> experiment =
      config::LoadExperiment("experiments/configs/tiny.textproto",
                     {"data.train_tokens=unused.tok", "run.output_dir=unused", "model.d_model=256",
                      "model.n_heads=4", "model.ffn.d_ff=688", "model.context_length=64", "run.batch_size=8",
                      absl::StrCat("run.max_steps=", steps), "schedule.warmup=10"});
  if (!experiment.ok()) {
    std::fprintf(stderr, "loss_curve_sensitivity: %s\n", std::string(experiment.status().message()).c_str());
    return 1;
  }
  const std::vector<double> base = LossCurve(*experiment, Perturbation::kNone, steps);
  const std::vector<double> ulp = LossCurve(*experiment, Perturbation::kOneUlp, steps);
  const std::vector<double> reorder = LossCurve(*experiment, Perturbation::kReorderEveryStep, steps);
  const std::vector<double> bf16 = LossCurve(*experiment, Perturbation::kBf16Weights, steps);
  double max_ulp = 0, max_reorder = 0, max_bf16 = 0;
  std::printf("%5s %10s %12s %12s %12s\n", "step", "loss", "ulp rel", "reorder rel", "bf16 rel");
  for (int s = 0; s < steps; ++s) {
    const double d_ulp = std::fabs(ulp[s] - base[s]) / base[s],
                 d_reorder = std::fabs(reorder[s] - base[s]) / base[s],
                 d_bf16 = std::fabs(bf16[s] - base[s]) / base[s];
    max_ulp = std::max(max_ulp, d_ulp);
    max_reorder = std::max(max_reorder, d_reorder);
    max_bf16 = std::max(max_bf16, d_bf16);
    if (s % 10 == 0 || s == steps - 1)
      std::printf("%5d %10.5f %12.3e %12.3e %12.3e\n", s + 1, base[s], d_ulp, d_reorder, d_bf16);
  }
  std::printf(
      "largest relative difference over %d steps: one ulp %.3e, reordered sums every step %.3e, bf16 weights "
      "%.3e\n",
      steps, max_ulp, max_reorder, max_bf16);
  return 0;
}

}  // namespace
}  // namespace lmf::experiments

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "How far small numerical perturbations move the loss curve of trainer_cuda_test's model "
      "(the calibration of its tolerances), on the CPU.");
  lmf::ParseFlags(argc, argv);
  return lmf::experiments::Main();
}
