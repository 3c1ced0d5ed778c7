// AdamW with global-norm clipping over a LanguageModel, and the training step.
#include "model/optimizer/adamw.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/ops/ops.h"

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
  double sum_sq = 0;
  model.VisitParameters([&](const std::string&, const Parameter& p) {
    sum_sq += ops::SumOfSquares(ctx, p.grad.numel(), p.grad_data());
  });
  const double norm = std::sqrt(sum_sq);
  if (config_.max_grad_norm > 0 && norm > config_.max_grad_norm) {
    const float scale = static_cast<float>(config_.max_grad_norm / (norm + 1e-6));
    model.VisitParameters(
        [&](const std::string&, const Parameter& p) { ops::Scale(ctx, p.grad.numel(), scale, p.grad_data()); });
  }
  ++step_;
  model.VisitParameters([&](const std::string& name, const Parameter& p) {
    Moments& state = moments_[name];
    if (!state.m.defined()) {
      state.m = kernels::Tensor::Zeros(p.value.shape(), kernels::DType::kF32);
      state.v = kernels::Tensor::Zeros(p.value.shape(), kernels::DType::kF32);
    }
    const bool decay = !config_.decay_matrices_only || p.value.rank() >= 2;
    const ops::AdamWHyper hyper{static_cast<float>(lr),
                                static_cast<float>(config_.beta1),
                                static_cast<float>(config_.beta2),
                                static_cast<float>(config_.eps),
                                decay ? static_cast<float>(config_.weight_decay) : 0.0f,
                                step_};
    ops::AdamWUpdate(ctx, hyper, p.value.numel(), p.data(), p.grad_data(), state.m.data<float>(),
                     state.v.data<float>());
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
