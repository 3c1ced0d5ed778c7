// The trainer's AdamW: config conversion and checkpointable state (see optimizer.h).
#include "experiments/trainer/optimizer.h"

#include <string>
#include <vector>

namespace lmf::experiments {

model::AdamWConfig ToAdamWConfig(const config::OptimizerConfig& config) {
  model::AdamWConfig c;
  c.beta1 = config.adamw().beta1();
  c.beta2 = config.adamw().beta2();
  c.eps = config.adamw().eps();
  c.weight_decay = config.adamw().weight_decay();
  c.decay_vectors = config.adamw().decay_vectors();
  c.max_grad_norm = config.grad_clip();
  return c;
}

ModelOptimizer::ModelOptimizer(const config::OptimizerConfig& config, const model::LanguageModel& model)
    : ctx_(model.context()), adamw_(ToAdamWConfig(config), model) {}

HostTensors ModelOptimizer::StateTensors() const {
  HostTensors out;
  adamw_.VisitState([&](const std::string& name, const kernels::Tensor& t) {
    std::vector<int64_t> shape;
    for (int i = 0; i < t.rank(); ++i) shape.push_back(t.dim(i));
    out.AddFromDevice(ctx_, name, shape, t.data<float>());
  });
  return out;
}

absl::Status ModelOptimizer::Restore(const SafetensorsReader& state, int64_t step) {
  return adamw_.Restore(
      [&state](const std::string& name, const std::vector<int64_t>& shape) { return state.ReadFloat(name, shape); },
      step);
}

}  // namespace lmf::experiments
