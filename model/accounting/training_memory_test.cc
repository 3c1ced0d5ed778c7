// The training-memory count: parameters from CountParameters (scaled past what int64 holds), fp32 weights,
// gradients and AdamW moments, bf16 compute copies, and the activations CountActivationBytesPerToken gives.
// (experiments/trainer's memory_check_test checks the fit check's message; scaling's account_test checks the
// activations against a built model's.)
#include "model/accounting/training_memory.h"

#include "gtest/gtest.h"
#include "model/accounting/accounting.h"
#include "model/config/config.h"

namespace lmf::model {
namespace {

// (vocab, context, d_model, layers, heads, d_ff): the tiny config's shape.
ModelConfig Tiny(int64_t n_layers = 2) { return Cs336Config(512, 32, 64, n_layers, 4, 172); }

TEST(TrainingMemory, CountsWhatTheModelAndAdamWAllocate) {
  const ModelConfig c = Tiny();
  const double params = static_cast<double>(CountParameters(c).total());
  const ModelMemory training = CountModelMemory(c, kernels::DType::kF32, 16 * 32, /*training=*/true);
  EXPECT_EQ(training.parameters, params);
  EXPECT_EQ(training.weights, 4 * params);
  EXPECT_EQ(training.gradients, 4 * params);
  EXPECT_EQ(training.optimizer, 8 * params);
  EXPECT_EQ(training.activations, static_cast<double>(CountActivationBytesPerToken(c).total() * 16 * 32));
  EXPECT_EQ(training.total(), 16 * params + training.activations);
  const ModelMemory inference = CountModelMemory(c, kernels::DType::kBF16, 0, /*training=*/false);
  EXPECT_EQ(inference.weights, 6 * params);  // fp32 values and bf16 compute copies
  EXPECT_EQ(inference.optimizer, 0);
  EXPECT_EQ(inference.activations, 0);
  const ModelMemory bf16 = CountModelMemory(c, kernels::DType::kBF16, 512, /*training=*/true);
  EXPECT_EQ(bf16.activations,
            static_cast<double>(CountActivationBytesPerToken(c, kernels::DType::kBF16).total() * 512));
  EXPECT_LT(bf16.activations, training.activations);
}

// 2^48 layers: more bytes than int64 counts; the count scales one layer's in double.
TEST(TrainingMemory, CountsPastSixtyFourBits) {
  const ParameterCounts one = CountParameters(Tiny(1));
  const ModelMemory m = CountModelMemory(Tiny(int64_t{1} << 48), kernels::DType::kF32, 512, true);
  EXPECT_EQ(m.parameters,
            static_cast<double>(one.total() - one.blocks) + 0x1p48 * static_cast<double>(one.blocks));
  EXPECT_GT(m.total(), 0x1p63);
}

}  // namespace
}  // namespace lmf::model
