// The trainer's optimizer: model/optimizer's AdamW (the project's one implementation, checked against
// torch.optim.AdamW with clip_grad_norm_) configured from the experiment's optimizer message, with its state
// moved in and out of checkpoints: "<parameter>.exp_avg" / "<parameter>.exp_avg_sq" (PyTorch's names)
// through host copies, so a CPU run's state resumes on a GPU and back.
#ifndef LMFORGE_EXPERIMENTS_TRAINER_OPTIMIZER_H_
#define LMFORGE_EXPERIMENTS_TRAINER_OPTIMIZER_H_

#include <cstdint>

#include "absl/status/status.h"
#include "config/optimizer.pb.h"
#include "experiments/checkpoint/safetensors.h"
#include "experiments/trainer/weights.h"
#include "kernels/core/context.h"
#include "model/language_model/language_model.h"
#include "model/optimizer/adamw.h"

namespace lmf::experiments {

class ModelOptimizer {
 public:
  // Zero moments for every parameter of `model` that `owns` (null: all; ZeRO-1: this rank's), on its device.
  ModelOptimizer(const config::OptimizerConfig& config, const model::LanguageModel& model,
                 model::AdamW::Owns owns = nullptr);

  // See model::AdamW::Step: the gradients hold the sum of `micro_batches` mean-loss gradients; returns the
  // global norm of their mean before clipping, and updates only when it is finite.
  double Step(model::LanguageModel& model, double lr, int64_t micro_batches = 1) {
    return adamw_.Step(model, lr, micro_batches);
  }
  int64_t step() const { return adamw_.step(); }
  model::AdamW& adamw() { return adamw_; }

  // Host copies of every moment tensor, with its shape.
  HostTensors StateTensors() const;
  // Loads the moments written from StateTensors and the step count; every moment must be present with the
  // parameter's shape.
  absl::Status Restore(const SafetensorsReader& state, int64_t step);

 private:
  kernels::Context ctx_;
  model::AdamW adamw_;
};

}  // namespace lmf::experiments

#endif  // LMFORGE_EXPERIMENTS_TRAINER_OPTIMIZER_H_
