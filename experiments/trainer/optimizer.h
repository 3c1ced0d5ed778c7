// The trainer's optimizer: AdamW over a LanguageModel's parameters with global gradient-norm clipping, the
// math in //kernels/adamw and //kernels/grad_norm (torch.optim.AdamW and clip_grad_norm_), the state (first
// and second moments, step count) kept by parameter name so checkpoints store it under
// "<parameter>.exp_avg" / "<parameter>.exp_avg_sq" (PyTorch's names) and restore it exactly.
//
// Device-generic: the moments are fp32 tensors on the model's device (from its context's allocator). A step
// is one GlobalGradNorm (a host double, for the log and the finite check) and one MultiTensorAdamW per
// weight-decay group over every parameter, which also writes the bf16 compute copy of each updated weight
// when the model's activations are bf16. Gradient accumulation's mean over micro-batches is folded into the
// norm and AdamW's grad_scale, so no pass over the gradients scales them. State moves in and out of
// checkpoints through host copies (StateTensors, Restore), so a CPU run's state resumes on a GPU and back.
//
// Weight decay applies to matrices (rank >= 2: linear weights, embeddings) and, with
// optimizer.adamw.decay_vectors, to biases and norm gains too. Each parameter's learning rate is the step's
// times LanguageModel::LearningRateScale (muP's 1 / m for the blocks' matrices and the LM head; else 1);
// decoupled weight decay is multiplied by that learning rate, as in PyTorch's param groups.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_OPTIMIZER_H_
#define LMFORGE_EXPERIMENTS_TRAINER_OPTIMIZER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "config/optimizer.pb.h"
#include "experiments/checkpoint/safetensors.h"
#include "experiments/trainer/weights.h"
#include "kernels/core/context.h"
#include "kernels/core/tensor.h"
#include "model/language_model/language_model.h"

namespace lmf::experiments {

class ModelOptimizer {
 public:
  // Zero moments for every parameter of `model`, on its device.
  ModelOptimizer(const config::OptimizerConfig& config, const model::LanguageModel& model);

  // The parameters' gradients hold the sum of `micro_batches` mean-loss gradients (gradient accumulation);
  // the step uses their mean. Returns the global L2 norm of that mean (before clipping). When it is finite,
  // clips to optimizer.grad_clip and applies one AdamW update at `lr` (refreshing bf16 compute copies);
  // when it is NaN or infinite, changes nothing.
  double Step(model::LanguageModel& model, double lr, int64_t micro_batches = 1);

  int64_t step() const { return step_; }

  // Host copies of every moment tensor: "<parameter>.exp_avg" and "<parameter>.exp_avg_sq", with its shape.
  HostTensors StateTensors() const;

  // Loads the moments written from StateTensors and the step count; every moment must be present with the
  // parameter's shape.
  absl::Status Restore(const SafetensorsReader& state, int64_t step);

 private:
  struct Moments {
    std::vector<int64_t> shape;
    bool decay = true;
    double lr_scale = 1;   // LanguageModel::LearningRateScale (muP)
    kernels::Tensor m, v;  // fp32, on the model's device
  };
  config::OptimizerConfig config_;
  kernels::Context ctx_;
  int64_t step_ = 0;
  std::map<std::string, Moments> moments_;
};

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_OPTIMIZER_H_
