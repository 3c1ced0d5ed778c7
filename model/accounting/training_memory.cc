// The training-memory count (see training_memory.h).
#include "model/accounting/training_memory.h"

#include "model/accounting/accounting.h"

namespace lmf::model {

ModelMemory CountModelMemory(const ModelConfig& config, kernels::DType activations, int64_t tokens,
                             bool training) {
  // One layer's counts scaled by n_layers in double: the int64 counts of a whole model can overflow.
  ModelConfig one_layer = config;
  one_layer.n_layers = 1;
  const ParameterCounts counts = CountParameters(one_layer);
  const double layers = static_cast<double>(config.n_layers);
  ModelMemory m;
  m.parameters =
      static_cast<double>(counts.total() - counts.blocks) + static_cast<double>(counts.blocks) * layers;
  const double compute_copy = activations == kernels::DType::kF32 ? 0 : kernels::DTypeSize(activations);
  m.weights = (4 + compute_copy) * m.parameters;
  m.gradients = 4 * m.parameters;
  m.optimizer = training ? 8 * m.parameters : 0;
  const ActivationBytesPerToken per_token = CountActivationBytesPerToken(one_layer, activations);
  m.activations =
      (static_cast<double>(per_token.per_block) * layers + static_cast<double>(per_token.final_and_head)) *
      static_cast<double>(tokens);
  return m;
}

}  // namespace lmf::model
