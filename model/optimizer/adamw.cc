// AdamW with global-norm clipping over a LanguageModel, and the training step.
#include "model/optimizer/adamw.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/adamw/adamw.h"
#include "kernels/grad_norm/grad_norm.h"

namespace lmf::model {

absl::Status AdamWConfig::Validate() const {
  const auto bad = [](const std::string& what) { return absl::InvalidArgumentError("adamw: " + what); };
  if (!(beta1 >= 0 && beta1 < 1)) return bad(absl::StrCat("beta1=", beta1, " must be in [0, 1)"));
  if (!(beta2 >= 0 && beta2 < 1)) return bad(absl::StrCat("beta2=", beta2, " must be in [0, 1)"));
  if (!(eps > 0)) return bad(absl::StrCat("eps=", eps, " must be positive"));
  if (!(weight_decay >= 0)) return bad(absl::StrCat("weight_decay=", weight_decay, " must be >= 0"));
  return absl::OkStatus();
}

double AdamW::Step(const kernels::Context& ctx, LanguageModel& model, double lr) {
  LMF_CHECK(model.context().device.is_cpu() && model.activation_dtype() == kernels::DType::kF32)
      << "model::AdamW runs on f32 CPU models; this one is on " << model.context().device << " with "
      << model.activation_dtype() << " activations (use experiments/trainer's optimizer)";
  std::vector<kernels::GradSpan> grads;
  model.VisitParameters([&](const std::string&, const Parameter& p) {
    grads.push_back(kernels::GradSpan{p.grad_data(), p.grad.numel()});
  });
  kernels::GradNormParams norm_params;
  norm_params.grads = grads.data();
  norm_params.num_grads = static_cast<int64_t>(grads.size());
  const float norm = kernels::GlobalGradNorm(ctx, norm_params);
  // Clipping is folded into the update as a gradient scale (torch's clip_grad_norm_ factor).
  const float grad_scale =
      config_.max_grad_norm > 0 ? kernels::ClipScale(norm, static_cast<float>(config_.max_grad_norm)) : 1.0f;
  ++step_;
  model.VisitParameters([&](const std::string& name, const Parameter& p) {
    Moments& state = moments_[name];
    if (!state.m.defined()) {
      state.m = kernels::Tensor::Zeros(p.value.shape(), kernels::DType::kF32);
      state.v = kernels::Tensor::Zeros(p.value.shape(), kernels::DType::kF32);
    }
    const bool decay = !config_.decay_matrices_only || p.value.rank() >= 2;
    kernels::AdamWParams update;
    update.n = p.value.numel();
    update.param = p.data();
    update.grad = p.grad_data();
    update.m = state.m.data<float>();
    update.v = state.v.data<float>();
    update.lr = static_cast<float>(lr);
    update.beta1 = static_cast<float>(config_.beta1);
    update.beta2 = static_cast<float>(config_.beta2);
    update.eps = static_cast<float>(config_.eps);
    update.weight_decay = decay ? static_cast<float>(config_.weight_decay) : 0.0f;
    update.step = step_;
    update.grad_scale = grad_scale;
    kernels::AdamWStep(ctx, update);
  });
  return norm;
}

void AdamW::VisitState(const std::function<void(const std::string& name, const kernels::Tensor& t)>& visit) const {
  for (const auto& [name, state] : moments_) {
    visit(name + ".exp_avg", state.m);
    visit(name + ".exp_avg_sq", state.v);
  }
}

absl::StatusOr<TrainStepResult> TrainStep(const kernels::Context& ctx, LanguageModel& model, AdamW& optimizer,
                                          const int32_t* ids, const int32_t* targets, int64_t b, int64_t t,
                                          double lr) {
  model.ZeroGrad();
  absl::StatusOr<double> loss = model.ForwardWithLoss(ids, targets, b, t);
  if (!loss.ok()) return loss.status();
  model.Backward();
  TrainStepResult result;
  result.loss = *loss;
  result.grad_norm = optimizer.Step(ctx, model, lr);
  return result;
}

}  // namespace lmf::model
