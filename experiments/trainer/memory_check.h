// The memory a model takes on the CPU, counted from its config before anything is allocated, and the check
// that it fits in the machine: a clear error up front instead of the CPU allocator's abort ("out of memory
// allocating 13 TB") or a process that grows until the kernel kills it. train checks the model, its AdamW
// moments and one micro-batch's activations; eval the model and one forward's; generate the model.
//
// The counts are lower bounds: what LanguageModel allocates per parameter (fp32 value and gradient), what the
// trainer's AdamW adds (two fp32 moments) and the activations a forward keeps for the backward
// (model/accounting's CountActivationBytesPerToken), without workspaces or allocator slack. So a model
// refused here could not have run, and the check never refuses one that could. Counted in double: a config
// can ask for more than 2^63 bytes.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_MEMORY_CHECK_H_
#define LMFORGE_EXPERIMENTS_TRAINER_MEMORY_CHECK_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "model/config/config.h"

namespace lmf::experiments {

struct ModelMemory {
  double parameters = 0;   // count, not bytes
  double weights = 0;      // fp32 master values, plus the compute copies for bf16 activations
  double gradients = 0;    // fp32 (LanguageModel allocates them for every model, trained or not)
  double optimizer = 0;    // AdamW's two fp32 moments; 0 unless training
  double activations = 0;  // what one forward over `tokens` tokens keeps
  double total() const { return weights + gradients + optimizer + activations; }
};

// For a forward over `tokens` tokens (B * T; 0: the model alone); `training` adds the AdamW moments.
ModelMemory CountModelMemory(const model::ModelConfig& config, kernels::DType activations, int64_t tokens,
                             bool training);

// The machine's memory in bytes, physical and swap (sysinfo); 0 where it cannot be read.
double MemoryBytes();

// ResourceExhausted when `processes` copies of `need` take more than `available` bytes (0: unknown, no
// check), naming `what` (the config's fields and the batch), the bytes needed and each part.
absl::Status CheckFitsInMemory(const ModelMemory& need, int processes, double available,
                               const std::string& what);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_MEMORY_CHECK_H_
