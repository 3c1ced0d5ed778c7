// The training-memory count (see training_memory.h).
#include "model/accounting/training_memory.h"

#include "model/accounting/accounting.h"
#include "model/layers/mixers.h"

namespace lmf::model {

ModelMemory CountModelMemory(const ModelConfig& config, kernels::DType activations, int64_t tokens,
                             bool training) {
  // Each distinct layer's counts times how many there are, in double: the int64 counts of a whole model can
  // overflow. The rest (embeddings, final norm, head, logits) from the model without its blocks.
  ModelConfig no_blocks = config;
  no_blocks.n_layers = 0;
  double block_parameters = 0, block_bytes_per_token = 0;
  for (const ModelConfig::LayerGroup& group : config.layer_groups()) {
    const LayerCost cost = CountLayerCost(config, group.spec, 1, activations);
    block_parameters += static_cast<double>(cost.parameters) * static_cast<double>(group.count);
    block_bytes_per_token += static_cast<double>(cost.saved_bytes_per_token) * static_cast<double>(group.count);
  }
  ModelMemory m;
  m.parameters = static_cast<double>(CountParameters(no_blocks).total()) + block_parameters;
  const double compute_copy = activations == kernels::DType::kF32 ? 0 : kernels::DTypeSize(activations);
  m.weights = (4 + compute_copy) * m.parameters;
  m.gradients = 4 * m.parameters;
  m.optimizer = training ? 8 * m.parameters : 0;
  m.activations = (block_bytes_per_token +
                   static_cast<double>(CountActivationBytesPerToken(no_blocks, activations).final_and_head)) *
                  static_cast<double>(tokens);
  return m;
}

}  // namespace lmf::model
