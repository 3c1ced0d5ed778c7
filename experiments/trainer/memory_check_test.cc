// The memory counts (parameters from model/accounting, scaled past what int64 holds) and the fit check's
// message; trainer_test checks that train refuses a model too large for the machine before allocating it.
#include "experiments/trainer/memory_check.h"

#include <string>

#include "gtest/gtest.h"
#include "model/accounting/accounting.h"
#include "model/config/config.h"

namespace lmf::experiments {
namespace {

// (vocab, context, d_model, layers, heads, d_ff): tiny's shape.
model::ModelConfig Tiny(int64_t n_layers = 2) { return model::Cs336Config(512, 32, 64, n_layers, 4, 172); }

TEST(MemoryCheck, CountsWhatTheModelAndAdamWAllocate) {
  const model::ModelConfig c = Tiny();
  const double params = static_cast<double>(model::CountParameters(c).total());
  const ModelMemory training = CountModelMemory(c, kernels::DType::kF32, 16 * 32, /*training=*/true);
  EXPECT_EQ(training.parameters, params);
  EXPECT_EQ(training.weights, 4 * params);
  EXPECT_EQ(training.gradients, 4 * params);
  EXPECT_EQ(training.optimizer, 8 * params);
  EXPECT_EQ(training.activations,
            static_cast<double>(model::CountActivationBytesPerToken(c).total() * 16 * 32));
  EXPECT_EQ(training.total(), 16 * params + training.activations);
  const ModelMemory inference = CountModelMemory(c, kernels::DType::kBF16, 0, /*training=*/false);
  EXPECT_EQ(inference.weights, 6 * params);  // fp32 values and bf16 compute copies
  EXPECT_EQ(inference.optimizer, 0);
  EXPECT_EQ(inference.activations, 0);
}

// 2^48 layers: more bytes than int64 counts; the count scales one layer's in double.
TEST(MemoryCheck, CountsPastSixtyFourBits) {
  const model::ParameterCounts one = model::CountParameters(Tiny(1));
  const ModelMemory m = CountModelMemory(Tiny(int64_t{1} << 48), kernels::DType::kF32, 512, true);
  EXPECT_EQ(m.parameters,
            static_cast<double>(one.total() - one.blocks) + 0x1p48 * static_cast<double>(one.blocks));
  EXPECT_GT(m.total(), 0x1p63);
}

TEST(MemoryCheck, RefusesWhatDoesNotFitNamingEachPart) {
  ModelMemory need;
  need.parameters = 1e9;
  need.weights = 4e9, need.gradients = 4e9, need.optimizer = 8e9, need.activations = 2.5e6;
  EXPECT_TRUE(CheckFitsInMemory(need, 1, 16.0025e9, "x").ok());
  EXPECT_TRUE(CheckFitsInMemory(need, 1, 0, "x").ok());  // unknown memory: not checked
  const absl::Status refused = CheckFitsInMemory(need, 1, 16e9, "experiment \"big\"");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "experiment \"big\" needs at least 16 GB (16002500000 bytes) of memory, more than this machine's "
            "16 GB (memory and swap): "
            "1e+09 parameters (weights 4 GB, gradients 4 GB, AdamW moments 8 GB, activations 2.5 MB)");
  EXPECT_EQ(
      CheckFitsInMemory(need, 2, 25e9, "x").message(),
      "x needs at least 32 GB (32005000000 bytes) of memory, more than this machine's 25 GB (memory and "
      "swap): 2 processes of "
      "1e+09 parameters (weights 4 GB, gradients 4 GB, AdamW moments 8 GB, activations 2.5 MB)");
}

TEST(MemoryCheck, TheMachinesMemoryIsKnownHere) { EXPECT_GT(MemoryBytes(), 1e8); }

}  // namespace
}  // namespace lmf::experiments
