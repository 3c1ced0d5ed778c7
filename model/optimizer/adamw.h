// AdamW over a LanguageModel's parameters, with global gradient-norm clipping: the project's one optimizer
// implementation (the trainer's experiments/trainer/optimizer.h only converts its config and moves its state
// in and out of checkpoints). TrainStep: one full training step (zero grads, forward with loss, backward,
// clip, AdamW update).
//
// The update is torch.optim.AdamW's (decoupled weight decay p *= 1 - lr*wd, bias-corrected moments); the
// clipping is torch.nn.utils.clip_grad_norm_'s (scale by max_norm / (norm + 1e-6) when norm > max_norm),
// checked against PyTorch in adamw_test. Device-generic: the moments are fp32 tensors on the model's device
// (from its context's allocator); a step is one GlobalGradNorm and one MultiTensorAdamW per parameter group
// (kernels/adamw), which also writes the bf16 compute copy of each weight of a bf16 model. Moments are kept
// per parameter name, so they survive reordering and are checkpointed by name ("<parameter>.exp_avg",
// "<parameter>.exp_avg_sq", PyTorch's names).
//
// Groups (PyTorch's param groups): weight decay applies to matrices and embeddings (rank >= 2) and, with
// decay_vectors, to biases and norm gains too (torch's single default group, CS336); each parameter's
// learning rate is the step's times LanguageModel::LearningRateScale (muP's 1 / m for the blocks' matrices
// and the LM head; else 1), and decoupled weight decay is multiplied by that learning rate.
#ifndef LMFORGE_MODEL_OPTIMIZER_ADAMW_H_
#define LMFORGE_MODEL_OPTIMIZER_ADAMW_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/core/context.h"
#include "kernels/core/tensor.h"
#include "model/language_model/language_model.h"
#include "model/optimizer/adamw_config.h"

namespace lmf::model {

// The global L2 norm of every parameter gradient of `model` (kernels/grad_norm, on its device).
double GradientNorm(const LanguageModel& model);

// What an optimizer step leaves in the gradients: kept as they were, or set to zero in the update's own pass
// (the next step's ZeroGrad then has nothing to do: one pass over every gradient fewer per step). Zeroing
// happens on CPU models with an optimizer that owns every parameter (not ZeRO-1) and a finite norm; else the
// gradients are kept and the next ZeroGrad clears them as usual.
enum class GradsAfterStep { kKept, kZeroed };

class AdamW {
 public:
  // Which parameters this optimizer updates and keeps moments for (ZeRO-1: the ones this rank owns).
  using Owns = std::function<bool(const std::string& name)>;
  // Zero moments for every parameter of `model` that `owns` (null: every one), on its device.
  AdamW(const AdamWConfig& config, const LanguageModel& model, Owns owns = nullptr);

  // The parameters' gradients hold the sum of `micro_batches` mean-loss gradients (gradient accumulation);
  // the step uses their mean (folded into the norm and AdamW's gradient scale, so no pass scales them).
  // Returns the global L2 norm of that mean, before clipping, over every parameter (owned or not: the
  // gradients are the whole model's). When it is finite, clips to max_grad_norm and updates the owned
  // parameters at learning rate `lr`; when it is NaN or infinite, changes nothing.
  double Step(LanguageModel& model, double lr, int64_t micro_batches = 1,
              GradsAfterStep after = GradsAfterStep::kKept);
  // The same step with the norm of the mean gradient given: a model split over processes (pipeline stages)
  // has the global norm only from all of them together.
  double StepWithNorm(LanguageModel& model, double lr, int64_t micro_batches, double norm,
                      GradsAfterStep after = GradsAfterStep::kKept);

  int64_t step() const { return step_; }
  // Bytes of the moments this optimizer holds.
  int64_t state_bytes() const;

  // ZeRO-1 checkpoints (as torch's ZeroRedundancyOptimizer.consolidate_state_dict): the moments of a
  // parameter another rank owns, given in host memory, held (and visited by VisitState) until
  // DropAdopted; Step never updates them.
  void AdoptState(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& m,
                  const std::vector<float>& v);
  void DropAdopted();
  // Host copies of a held parameter's moments; false when this optimizer holds none for it.
  bool ReadState(const std::string& name, std::vector<float>* m, std::vector<float>* v) const;
  // Every moment tensor on the model's device: "<parameter>.exp_avg" and "<parameter>.exp_avg_sq".
  void VisitState(const std::function<void(const std::string& name, const kernels::Tensor& t)>& visit) const;
  // Loads every moment through `read` (name and shape -> host floats, or the reader's error) and the step
  // count. Every tensor is read and checked before any is replaced: a bad checkpoint leaves the state as it
  // was.
  using StateReader =
      std::function<absl::StatusOr<std::vector<float>>(const std::string& name, const std::vector<int64_t>& shape)>;
  absl::Status Restore(const StateReader& read, int64_t step);

 private:
  struct Moments {
    std::vector<int64_t> shape;
    bool decay = true;
    double lr_scale = 1;   // LanguageModel::LearningRateScale (muP)
    kernels::Tensor m, v;  // fp32, on the model's device
  };
  AdamWConfig config_;
  kernels::Context ctx_;
  Owns owns_;
  int64_t step_ = 0;
  std::map<std::string, Moments> moments_;
};

struct TrainStepResult {
  double loss = 0;
  double grad_norm = 0;  // before clipping
};

// ZeroGrad, ForwardWithLoss(ids, targets (B, T)) as a training forward (seed 0, the optimizer's step),
// Backward, AdamW step (`after`: by default kZeroed, the gradients it leaves are zero on a CPU model; kKept
// for a caller that reads them). Bad batches give the model's error.
absl::StatusOr<TrainStepResult> TrainStep(LanguageModel& model, AdamW& optimizer, const int32_t* ids,
                                          const int32_t* targets, int64_t b, int64_t t, double lr,
                                          GradsAfterStep after = GradsAfterStep::kZeroed);

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_OPTIMIZER_ADAMW_H_
