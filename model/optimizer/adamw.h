// AdamW over a LanguageModel's parameters, with global gradient-norm clipping, and TrainStep: one full
// training step (zero grads, forward with loss, backward, clip, AdamW update).
//
// The update is torch.optim.AdamW's (decoupled weight decay p *= 1 - lr*wd, bias-corrected moments); the
// clipping is torch.nn.utils.clip_grad_norm_'s (scale by max_norm / (norm + 1e-6) when norm > max_norm).
// Moments are kept per parameter name, so they survive reordering and can be checkpointed by name.
// This is the reference optimizer for f32 models on the CPU (checked against PyTorch in adamw_test); the
// trainer's device-generic optimizer (experiments/trainer/optimizer.h) is checked against it.
#ifndef LMFORGE_MODEL_OPTIMIZER_ADAMW_H_
#define LMFORGE_MODEL_OPTIMIZER_ADAMW_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/context.h"
#include "kernels/core/tensor.h"
#include "model/language_model/language_model.h"

namespace lmf::model {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  // Decay only matrices (rank >= 2: linear weights, embeddings), not biases and norm gains (nanoGPT);
  // false decays every parameter (torch's single default group, CS336).
  bool decay_matrices_only = true;
  double max_grad_norm = 1.0;  // <= 0 turns clipping off

  absl::Status Validate() const;
};

class AdamW {
 public:
  explicit AdamW(const AdamWConfig& config) : config_(config) {}

  // Clips the model's accumulated gradients (if enabled) and applies one update at learning rate `lr`.
  // Returns the global gradient L2 norm before clipping. The model must be an f32 CPU model (aborts
  // otherwise: a program error, not bad input).
  double Step(const kernels::Context& ctx, LanguageModel& model, double lr);

  int64_t step() const { return step_; }
  // "<parameter>.exp_avg" and "<parameter>.exp_avg_sq" for every parameter updated so far.
  void VisitState(const std::function<void(const std::string& name, const kernels::Tensor& t)>& visit) const;

 private:
  struct Moments {
    kernels::Tensor m, v;
  };
  AdamWConfig config_;
  int64_t step_ = 0;
  std::map<std::string, Moments> moments_;
};

struct TrainStepResult {
  double loss = 0;
  double grad_norm = 0;  // before clipping
};

// ZeroGrad, ForwardWithLoss(ids, targets (B, T)), Backward, AdamW step. Bad batches give the model's error.
absl::StatusOr<TrainStepResult> TrainStep(const kernels::Context& ctx, LanguageModel& model, AdamW& optimizer,
                                          const int32_t* ids, const int32_t* targets, int64_t b, int64_t t,
                                          double lr);

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_OPTIMIZER_ADAMW_H_
