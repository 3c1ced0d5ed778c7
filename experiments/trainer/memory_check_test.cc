// The fit check's message (the counts it is given: model/accounting's training_memory_test); trainer_test
// checks that train refuses a model too large for the machine before allocating it.
#include "experiments/trainer/memory_check.h"

#include <string>

#include "gtest/gtest.h"
#include "model/accounting/training_memory.h"

namespace lmf::experiments {
namespace {

TEST(MemoryCheck, RefusesWhatDoesNotFitNamingEachPart) {
  model::ModelMemory need;
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
