// The trainer's optimizer: AdamW over a LanguageModel's parameters with global gradient-norm clipping, the
// math in //kernels/adamw and //kernels/grad_norm (torch.optim.AdamW and clip_grad_norm_), the state (first
// and second moments, step count) kept by parameter name so checkpoints store it under
// "<parameter>.exp_avg" / "<parameter>.exp_avg_sq" (PyTorch's names) and restore it exactly.
//
// Weight decay applies to matrices (rank >= 2: linear weights, embeddings) and, with
// optimizer.adamw.decay_vectors, to biases and norm gains too.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_OPTIMIZER_H_
#define LMFORGE_EXPERIMENTS_TRAINER_OPTIMIZER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "experiments/checkpoint/safetensors.h"
#include "experiments/proto/optimizer.pb.h"
#include "kernels/core/context.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {

class ModelOptimizer {
 public:
  // Zero moments for every parameter of `model`.
  ModelOptimizer(const config::OptimizerConfig& config, const model::LanguageModel& model);

  // The global L2 norm of the accumulated gradients (before clipping). When it is finite, clips to
  // optimizer.grad_clip and applies one AdamW update at `lr`; when it is NaN or infinite, changes nothing.
  double Step(const kernels::Context& ctx, model::LanguageModel& model, double lr);

  int64_t step() const { return step_; }

  // Every moment tensor: "<parameter>.exp_avg" and "<parameter>.exp_avg_sq", with its shape.
  void VisitState(const std::function<void(const std::string& name, const std::vector<int64_t>& shape,
                                           const float* data)>& visit) const;

  // Loads the moments written by VisitState and the step count; every moment must be present with the
  // parameter's shape.
  absl::Status Restore(const SafetensorsReader& state, int64_t step);

 private:
  struct Moments {
    std::vector<int64_t> shape;
    bool decay = true;
    std::vector<float> m, v;
  };
  config::OptimizerConfig config_;
  int64_t step_ = 0;
  std::map<std::string, Moments> moments_;
};

// Every gradient of `model` multiplied by `scale` (gradient accumulation averages micro-batches).
void ScaleGradients(const model::LanguageModel& model, float scale);

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_OPTIMIZER_H_
