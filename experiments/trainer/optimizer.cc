// The trainer's AdamW: config conversion and checkpointable state (see optimizer.h).
#include "experiments/trainer/optimizer.h"

#include <string>
#include <utility>
#include <vector>

#include "config/optimizer_conversion.h"

namespace lmf::experiments {

ModelOptimizer::ModelOptimizer(const config::OptimizerConfig& config, const model::LanguageModel& model,
                               model::AdamW::Owns owns)
    : ctx_(model.context()), adamw_(config::ToAdamWConfig(config), model, std::move(owns)) {}

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
