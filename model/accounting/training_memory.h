// The memory a model takes while it trains (or evaluates), counted from its config before anything is
// allocated: fp32 master weights plus the compute copies of bf16 activations, fp32 gradients, AdamW's two
// fp32 moments and the activations one forward keeps for the backward (accounting.h's
// CountActivationBytesPerToken). The one formula the trainer's up-front memory check
// (experiments/trainer/memory_check.h) and the config accounting (scaling/accounting) both print.
//
// The counts are lower bounds: what LanguageModel allocates per parameter (value and gradient), what the
// trainer's AdamW adds and the saved activations, without workspaces or allocator slack. Counted in double:
// a config can ask for more than 2^63 bytes.
#ifndef LMFORGE_MODEL_ACCOUNTING_TRAINING_MEMORY_H_
#define LMFORGE_MODEL_ACCOUNTING_TRAINING_MEMORY_H_

#include <cstdint>

#include "kernels/core/dtype.h"
#include "model/config/config.h"

namespace lmf::model {

struct ModelMemory {
  double parameters = 0;   // count, not bytes
  double weights = 0;      // fp32 master values, plus the compute copies for bf16 activations
  double gradients = 0;    // fp32 (LanguageModel allocates them for every model, trained or not)
  double optimizer = 0;    // AdamW's two fp32 moments; 0 unless training
  double activations = 0;  // what one forward over `tokens` tokens keeps
  double total() const { return weights + gradients + optimizer + activations; }
};

// For a forward over `tokens` tokens (B * T, one micro-batch; 0: the model alone) with activations of
// type `activations`; `training` adds the AdamW moments.
ModelMemory CountModelMemory(const ModelConfig& config, kernels::DType activations, int64_t tokens,
                             bool training);

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_ACCOUNTING_TRAINING_MEMORY_H_
