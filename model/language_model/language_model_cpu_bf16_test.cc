// The whole model in bf16 on the CPU (bf16 weight copies, activations and activation gradients; fp32 master
// weights and gradients: kernels/cpu/bf16.h), by the rule language_model_cuda_test applies to CUDA bf16, on
// the same configs (model/testing/cuda_configs.h: GPT-2-like, Llama-like, and one-layer post-norm, double
// norm with QK-norm and soft-caps, parallel blocks with a window). Against the fp32 model's step:
// - the loss within 0.5%; the logits and every parameter gradient within ten times the relative L2 error of
//   the fp32 model run on bf16-rounded weights (weights-only rounding; bf16 also rounds ~10 stored
//   activations per layer of the same size);
// - decoding (Prefill, then DecodeStep over a bf16 KV cache) gives logits within the same ten times of the
//   fp32 forward's at every position.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/memory/memory.h"
#include "model/language_model/language_model.h"
#include "model/testing/cuda_configs.h"

namespace lmf::model {
namespace {

using kernels::DType;

constexpr uint64_t kSeed = 11;
constexpr int64_t kB = 2, kT = 48;
constexpr double kMultiple = 10;  // the CUDA bf16 tests' multiple (language_model_cuda_test)

struct StepResult {
  double loss = 0;
  std::vector<float> logits;
  std::map<std::string, std::vector<float>> grads;
};

std::vector<float> HostFloats(const kernels::Context& ctx, const kernels::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  kernels::CopyToHostAsFloats(ctx, out.data(), t.data(), t.dtype(), t.numel());
  return out;
}

std::unique_ptr<LanguageModel> MakeModel(const ModelConfig& config, const kernels::Context& ctx, DType dtype,
                                         bool round_weights) {
  absl::StatusOr<std::unique_ptr<LanguageModel>> model = LanguageModel::Create(config, ctx, dtype);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  (*model)->InitializeParameters(kSeed);
  if (round_weights) {  // the values a bf16 model's compute copies hold
    (*model)->VisitParameters([](const std::string&, const Parameter& p) {
      float* w = p.data();
      for (int64_t i = 0; i < p.value.numel(); ++i) w[i] = kernels::BF16ToFloat(kernels::FloatToBF16(w[i]));
    });
  }
  return std::move(*model);
}

StepResult RunStep(LanguageModel& model, const std::vector<int32_t>& ids, const std::vector<int32_t>& targets) {
  StepResult r;
  absl::StatusOr<double> loss = model.ForwardWithLoss(ids.data(), targets.data(), kB, kT);
  EXPECT_TRUE(loss.ok()) << loss.status();
  if (!loss.ok()) return r;
  r.loss = *loss;
  r.logits = HostFloats(model.context(), model.logits_tensor());
  model.ZeroGrad();
  model.Backward();
  model.VisitParameters([&](const std::string& name, const Parameter& p) { r.grads[name] = HostFloats(model.context(), p.grad); });
  return r;
}

// ||got - want|| / ||want||; NaN anywhere gives NaN (and fails every comparison).
double RelativeL2(const std::vector<float>& got, const std::vector<float>& want) {
  double dd = 0, ww = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    dd += d * d, ww += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(dd / ww);
}

TEST(LanguageModelCpuBf16, StepIsWithinTenTimesTheErrorOfBf16Weights) {
  ThreadPool pool(2);
  const kernels::Context ctx = kernels::Context::Cpu(&pool);
  for (const auto& [name, config] : testing::CudaTestConfigsWithBlockStructures()) {
    SCOPED_TRACE(name);
    const std::vector<int32_t> stream = testing::CudaTestIds(config, 2 * kB * kT);
    const std::vector<int32_t> ids(stream.begin(), stream.begin() + kB * kT), targets(stream.begin() + kB * kT, stream.end());
    auto fp32 = MakeModel(config, ctx, DType::kF32, false), naive = MakeModel(config, ctx, DType::kF32, true);
    auto bf16 = MakeModel(config, ctx, DType::kBF16, false);
    ASSERT_TRUE(fp32 && naive && bf16);
    const StepResult want = RunStep(*fp32, ids, targets), rounded = RunStep(*naive, ids, targets),
                     got = RunStep(*bf16, ids, targets);
    EXPECT_NEAR(got.loss, want.loss, 5e-3 * std::fabs(want.loss)) << "loss";
    const double logits = RelativeL2(got.logits, want.logits), naive_logits = RelativeL2(rounded.logits, want.logits);
    EXPECT_LE(logits, kMultiple * naive_logits) << "logits";
    std::printf("%s CPU bf16: loss %.6f vs %.6f; logits relative L2 %.5f (bf16 weights %.5f)\n", name, got.loss,
                want.loss, logits, naive_logits);
    for (const auto& [param, grad] : want.grads) {
      // k_proj.bias's exact gradient is zero (softmax ignores a shift of every score of a query): its
      // computed value is rounding noise, with no relative error to speak of (as in the CUDA test).
      if (param.size() >= 11 && param.compare(param.size() - 11, 11, "k_proj.bias") == 0) continue;
      const double e = RelativeL2(got.grads.at(param), grad), n = RelativeL2(rounded.grads.at(param), grad);
      EXPECT_LE(e, kMultiple * n) << "grad of " << param;
    }
  }
}

TEST(LanguageModelCpuBf16, DecodingIsWithinTenTimesTheErrorOfBf16Weights) {
  ThreadPool pool(2);
  const kernels::Context ctx = kernels::Context::Cpu(&pool);
  for (const auto& [name, config] : testing::CudaTestConfigs()) {
    SCOPED_TRACE(name);
    const int64_t t = config.context_length, v = config.vocab_rows();
    const std::vector<int32_t> ids = testing::CudaTestIds(config, kB * t);
    auto fp32 = MakeModel(config, ctx, DType::kF32, false), naive = MakeModel(config, ctx, DType::kF32, true);
    auto bf16 = MakeModel(config, ctx, DType::kBF16, false);
    ASSERT_TRUE(fp32 && naive && bf16);
    ASSERT_TRUE(fp32->Forward(ids.data(), kB, t).ok());
    const std::vector<float> want = HostFloats(ctx, fp32->logits_tensor());
    ASSERT_TRUE(naive->Forward(ids.data(), kB, t).ok());
    const std::vector<float> rounded = HostFloats(ctx, naive->logits_tensor());
    absl::StatusOr<KvCache> cache = bf16->NewKvCache(kB);
    ASSERT_TRUE(cache.ok()) << cache.status();
    const int32_t first[kB] = {ids[0], ids[t]};
    ASSERT_TRUE(bf16->Prefill(first, kB, 1, *cache).ok());
    std::vector<float> got(want.size());
    for (int64_t pos = 0; pos < t; ++pos) {
      if (pos > 0) {
        const int32_t next[kB] = {ids[pos], ids[t + pos]};
        ASSERT_TRUE(bf16->DecodeStep(next, *cache).ok());
      }
      const std::vector<float> step = HostFloats(ctx, bf16->logits_tensor());  // (B, 1, V)
      for (int64_t b = 0; b < kB; ++b)
        std::copy(step.begin() + b * v, step.begin() + (b + 1) * v, got.begin() + (b * t + pos) * v);
    }
    const double error = RelativeL2(got, want), naive_error = RelativeL2(rounded, want);
    EXPECT_LE(error, kMultiple * naive_error);
    std::printf("%s CPU bf16 decode: logits relative L2 %.5f (bf16 weights %.5f)\n", name, error, naive_error);
  }
}

}  // namespace
}  // namespace lmf::model
