// The incremental forward (KvCache, Prefill, DecodeStep) on CUDA against the CPU's (tag gpu; every case
// skips without a device). The same model, initialised from the same seed, prefills a 7-token prompt for
// B = 2 sequences and decodes to the end of the context (57 steps; 89 for the windowed config, which decodes
// past its context), on the CPU in fp32 and on CUDA, for a GPT-2-like config (LayerNorm, GELU, learned
// positions, biases, tied padded head) and a Llama-like one (RMSNorm, SwiGLU, RoPE, GQA, untied head), both
// with head size 64, and their block-structure variants:
// - CUDA f32 logits at every position equal the CPU's within 1e-4 of their scale;
// - CUDA bf16 logits are within ten times the error of the CPU's fp32 model on bf16-rounded weights (both
//   against the CPU's fp32 logits), the rule language_model_cuda_test applies to the full forward;
// - the full cache refuses one more token on the device too.
// The CPU's incremental logits equal its full forward's (language_model_decode_test), so these also tie the
// CUDA decode to LanguageModel::Forward.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test_util.h"
#include "kernels/memory/memory.h"
#include "model/language_model/language_model.h"
#include "model/testing/cuda_configs.h"

namespace lmf::model {
namespace {

using kernels::DType;

using testing::CudaTestConfigs;  // the GPT-2-like and Llama-like configs (model/testing/cuda_configs.h)
using testing::CudaTestConfigsWithBlockStructures;
using testing::CudaTestIds;
using testing::Gpt2Like;
using testing::LlamaLike;

constexpr uint64_t kSeed = 11;
constexpr int64_t kB = 2, kPrompt = 7;

std::vector<float> ToHostFloats(const kernels::Context& ctx, const kernels::Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  kernels::CopyToHostAsFloats(ctx, out.data(), t.data(), t.dtype(), t.numel());
  return out;
}

std::unique_ptr<LanguageModel> MakeModel(const ModelConfig& config, const kernels::Context& ctx, DType dtype,
                                         bool round_weights = false) {
  absl::StatusOr<std::unique_ptr<LanguageModel>> model = LanguageModel::Create(config, ctx, dtype);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  (*model)->InitializeParameters(kSeed);
  if (round_weights) {  // CPU fp32 only: the master weights rounded to bf16, the values bf16 compute copies
                        // hold
    (*model)->VisitParameters([](const std::string&, const Parameter& p) {
      float* w = p.data();
      for (int64_t i = 0; i < p.value.numel(); ++i) w[i] = kernels::BF16ToFloat(kernels::FloatToBF16(w[i]));
    });
  }
  return std::move(*model);
}

// Where Decode stops: the end of the context, or half a context past it for a model that decodes past its
// context (every layer windowed: the rings keep wrapping).
int64_t DecodeEnd(const ModelConfig& config) {
  return config.decodes_past_context() ? config.context_length * 3 / 2 : config.context_length;
}

// Prefill of the first kPrompt ids of each sequence, then one decode step per position to DecodeEnd (the ids
// (B, context) read again from the start past the context) -> the logits of positions kPrompt-1 .. end-1,
// each (B, vocab_rows), concatenated.
std::vector<float> Decode(LanguageModel& model, const std::vector<int32_t>& ids) {
  const int64_t t = model.config().context_length, end = DecodeEnd(model.config());
  std::vector<float> all;
  absl::StatusOr<KvCache> cache = model.NewKvCache(kB);
  EXPECT_TRUE(cache.ok()) << cache.status();
  if (!cache.ok()) return all;
  std::vector<int32_t> prompt;
  for (int64_t b = 0; b < kB; ++b)
    prompt.insert(prompt.end(), ids.begin() + b * t, ids.begin() + b * t + kPrompt);
  absl::Status status = model.Prefill(prompt.data(), kB, kPrompt, *cache);
  EXPECT_TRUE(status.ok()) << status;
  for (int64_t pos = kPrompt - 1; pos < end && status.ok(); ++pos) {
    if (pos >= kPrompt) {
      const int32_t next[kB] = {ids[pos % t], ids[t + pos % t]};
      status = model.DecodeStep(next, *cache);
      EXPECT_TRUE(status.ok()) << status;
    }
    const std::vector<float> logits = ToHostFloats(model.context(), model.logits_tensor());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  if (end == t) {  // full
    const int32_t more[kB] = {0, 0};
    EXPECT_EQ(model.DecodeStep(more, *cache).code(), absl::StatusCode::kFailedPrecondition);
  }
  return all;
}

double MaxAbs(const std::vector<float>& x) {
  double m = 0;
  for (float v : x) m = std::max(m, std::fabs(static_cast<double>(v)));
  return m;
}

// ||got - want|| / ||want||.
double RelativeL2(const std::vector<float>& got, const std::vector<float>& want) {
  double dd = 0, ww = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    dd += d * d, ww += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(dd / ww);
}

class LanguageModelDecodeCudaTest : public kernels::cuda::testing::GpuTest {};

// fp32 on CUDA against fp32 on the CPU: 1e-4 of the logits' scale, the full forward's tolerance in
// language_model_cuda_test (both sides round every op in fp32 and sum in other orders: cuBLASLt's tiles vs
// oneDNN's panels, the GPU attention's online softmax over the cached keys vs the CPU's blocks). A wrong
// cache row, position or head moves logits by 1e-2 of the scale or more.
TEST_F(LanguageModelDecodeCudaTest, F32MatchesTheCpuAtEveryPosition) {
  for (const auto& [name, config] : CudaTestConfigsWithBlockStructures()) {
    SCOPED_TRACE(name);
    const std::vector<int32_t> ids = CudaTestIds(config, kB * config.context_length);
    std::unique_ptr<LanguageModel> cpu = MakeModel(config, kernels::Context::Cpu(), DType::kF32);
    std::unique_ptr<LanguageModel> gpu = MakeModel(config, ctx(), DType::kF32);
    ASSERT_NE(cpu, nullptr);
    ASSERT_NE(gpu, nullptr);
    const std::vector<float> want = Decode(*cpu, ids);
    const std::vector<float> got = Decode(*gpu, ids);
    ASSERT_EQ(got.size(), want.size());
    ASSERT_EQ(want.size(), static_cast<size_t>((DecodeEnd(config) - kPrompt + 1) * kB * config.vocab_rows()));
    const double scale = MaxAbs(want);
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
      if (!(err <= worst)) worst = err;  // NaN too
    }
    EXPECT_LE(worst, 1e-4 * scale) << "max abs error " << worst << ", scale " << scale;
    std::printf("%s f32 decode: max abs error %.3g of scale %.3g\n", name, worst, scale);
  }
}

// bf16 on CUDA against fp32 on the CPU, by STYLE.md's rule as language_model_cuda_test applies it to the full
// forward: the relative L2 error of all the decoded logits may be at most 10 times that of the CPU's fp32
// model on bf16-rounded weights (weights-only rounding; the CUDA model also rounds every activation, the
// cached keys and values among them, to bf16, ~10 roundings per layer of the same size). The measured
// errors are printed, for calibration on the device.
TEST_F(LanguageModelDecodeCudaTest, Bf16IsWithinTenTimesTheErrorOfBf16Weights) {
  constexpr double kMultiple = 10;
  for (const auto& [name, config] : CudaTestConfigs()) {
    SCOPED_TRACE(name);
    const std::vector<int32_t> ids = CudaTestIds(config, kB * config.context_length);
    std::unique_ptr<LanguageModel> cpu = MakeModel(config, kernels::Context::Cpu(), DType::kF32);
    std::unique_ptr<LanguageModel> naive =
        MakeModel(config, kernels::Context::Cpu(), DType::kF32, /*round_weights=*/true);
    std::unique_ptr<LanguageModel> gpu = MakeModel(config, ctx(), DType::kBF16);
    ASSERT_NE(cpu, nullptr);
    ASSERT_NE(naive, nullptr);
    ASSERT_NE(gpu, nullptr);
    const std::vector<float> want = Decode(*cpu, ids);
    const std::vector<float> rounded = Decode(*naive, ids);
    const std::vector<float> got = Decode(*gpu, ids);
    ASSERT_EQ(got.size(), want.size());
    for (float v : got) ASSERT_TRUE(std::isfinite(v));
    const double error = RelativeL2(got, want), naive_error = RelativeL2(rounded, want);
    EXPECT_LE(error, kMultiple * naive_error);
    std::printf("%s bf16 decode: logits relative L2 %.5f (bf16 weights %.5f)\n", name, error, naive_error);
  }
}

}  // namespace
}  // namespace lmf::model
