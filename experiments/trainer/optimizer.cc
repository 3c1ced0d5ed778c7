// The trainer's AdamW with clipping and checkpointable state (see optimizer.h).
#include "experiments/trainer/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/adamw/adamw.h"
#include "kernels/grad_norm/grad_norm.h"

namespace lmf::experiments {

ModelOptimizer::ModelOptimizer(const config::OptimizerConfig& config, const model::LanguageModel& model)
    : config_(config) {
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    Moments& moments = moments_[name];
    for (int i = 0; i < p.value.rank(); ++i) moments.shape.push_back(p.value.dim(i));
    moments.decay = p.value.rank() >= 2 || config_.adamw().decay_vectors();
    moments.m.assign(p.value.numel(), 0.0f);
    moments.v.assign(p.value.numel(), 0.0f);
  });
}

double ModelOptimizer::Step(const kernels::Context& ctx, model::LanguageModel& model, double lr) {
  std::vector<kernels::GradSpan> spans;
  model.VisitParameters([&](const std::string&, const model::Parameter& p) {
    spans.push_back({p.grad_data(), p.grad.numel()});
  });
  kernels::GradNormParams norm_params;
  norm_params.grads = spans.data();
  norm_params.num_grads = static_cast<int64_t>(spans.size());
  const double norm = kernels::GlobalGradNorm(ctx, norm_params);
  if (!std::isfinite(norm)) return norm;

  ++step_;
  const float grad_scale =
      config_.grad_clip() > 0 ? kernels::ClipScale(static_cast<float>(norm), static_cast<float>(config_.grad_clip()))
                              : 1.0f;
  const config::AdamWConfig& adamw = config_.adamw();
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    auto it = moments_.find(name);
    LMF_CHECK(it != moments_.end()) << "parameter " << name << " appeared after the optimizer was built";
    Moments& moments = it->second;
    kernels::AdamWParams params;
    params.n = p.value.numel();
    params.param = p.data();
    params.grad = p.grad_data();
    params.m = moments.m.data();
    params.v = moments.v.data();
    params.lr = static_cast<float>(lr);
    params.beta1 = static_cast<float>(adamw.beta1());
    params.beta2 = static_cast<float>(adamw.beta2());
    params.eps = static_cast<float>(adamw.eps());
    params.weight_decay = moments.decay ? static_cast<float>(adamw.weight_decay()) : 0.0f;
    params.step = step_;
    params.grad_scale = grad_scale;
    kernels::AdamWStep(ctx, params);
  });
  return norm;
}

void ModelOptimizer::VisitState(const std::function<void(const std::string& name, const std::vector<int64_t>& shape,
                                                         const float* data)>& visit) const {
  for (const auto& [name, moments] : moments_) {
    visit(name + ".exp_avg", moments.shape, moments.m.data());
    visit(name + ".exp_avg_sq", moments.shape, moments.v.data());
  }
}

absl::Status ModelOptimizer::Restore(const SafetensorsReader& state, int64_t step) {
  for (auto& [name, moments] : moments_) {
    absl::StatusOr<std::vector<float>> m = state.ReadFloat(name + ".exp_avg", moments.shape);
    if (!m.ok()) return m.status();
    absl::StatusOr<std::vector<float>> v = state.ReadFloat(name + ".exp_avg_sq", moments.shape);
    if (!v.ok()) return v.status();
    moments.m = *std::move(m);
    moments.v = *std::move(v);
  }
  step_ = step;
  return absl::OkStatus();
}

void ScaleGradients(const model::LanguageModel& model, float scale) {
  model.VisitParameters([&](const std::string&, const model::Parameter& p) {
    float* g = p.grad_data();
    const int64_t n = p.grad.numel();
    for (int64_t i = 0; i < n; ++i) g[i] *= scale;
  });
}

}  // namespace lmf::experiments
