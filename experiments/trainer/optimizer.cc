// The trainer's AdamW with clipping and checkpointable state (see optimizer.h).
#include "experiments/trainer/optimizer.h"

#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/adamw/adamw.h"
#include "kernels/grad_norm/grad_norm.h"
#include "kernels/memory/memory.h"

namespace lmf::experiments {

ModelOptimizer::ModelOptimizer(const config::OptimizerConfig& config, const model::LanguageModel& model)
    : config_(config), ctx_(model.context()) {
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    Moments& moments = moments_[name];
    for (int i = 0; i < p.value.rank(); ++i) moments.shape.push_back(p.value.dim(i));
    moments.decay = p.value.rank() >= 2 || config_.adamw().decay_vectors();
    moments.lr_scale = model.LearningRateScale(name, p);
    for (kernels::Tensor* t : {&moments.m, &moments.v}) {
      *t = kernels::Tensor::Empty(p.value.shape(), kernels::DType::kF32, ctx_.allocator);
      kernels::FillZero(ctx_, t->data(), t->nbytes());
    }
  });
}

double ModelOptimizer::Step(model::LanguageModel& model, double lr, int64_t micro_batches) {
  LMF_CHECK_GE(micro_batches, 1);
  std::vector<kernels::GradSpan> spans;
  model.VisitParameters([&](const std::string&, const model::Parameter& p) {
    spans.push_back({p.grad.data(), p.grad.numel()});
  });
  kernels::GradNormParams norm_params;
  norm_params.dtype = kernels::DType::kF32;
  norm_params.grads = spans.data();
  norm_params.num_grads = static_cast<int64_t>(spans.size());
  // The gradients hold a sum over micro-batches; the norm of their mean is the norm of the sum divided.
  const double norm =
      static_cast<double>(kernels::GlobalGradNorm(ctx_, norm_params)) / static_cast<double>(micro_batches);
  if (!std::isfinite(norm)) return norm;

  ++step_;
  const float clip = config_.grad_clip() > 0 ? kernels::ClipScale(static_cast<float>(norm),
                                                                  static_cast<float>(config_.grad_clip()))
                                             : 1.0f;
  const float grad_scale = clip / static_cast<float>(micro_batches);
  // One MultiTensorAdamW call per group of (weight decay or not, learning-rate scale) (PyTorch's param
  // groups: two, or four with muP's scaled matrices); each also writes the bf16 compute copy of the tensors
  // it updates when the model computes in bf16.
  std::map<std::pair<bool, double>, std::vector<kernels::AdamWTensor>> groups;
  model.VisitParameters([&](const std::string& name, const model::Parameter& p) {
    auto it = moments_.find(name);
    LMF_CHECK(it != moments_.end()) << "parameter " << name << " appeared after the optimizer was built";
    Moments& moments = it->second;
    kernels::AdamWTensor t;
    t.n = p.value.numel();
    t.param = p.value.data<float>();
    t.grad = p.grad.data();
    t.m = moments.m.data<float>();
    t.v = moments.v.data<float>();
    t.param_copy = p.compute.dtype() == kernels::DType::kBF16 ? p.compute.data() : nullptr;
    groups[{moments.decay, moments.lr_scale}].push_back(t);
  });
  const config::AdamWConfig& adamw = config_.adamw();
  for (auto& [key, tensors] : groups) {
    const auto [decay, lr_scale] = key;
    kernels::MultiTensorAdamWParams params;
    params.grad_dtype = kernels::DType::kF32;
    params.tensors = tensors.data();
    params.num_tensors = static_cast<int64_t>(tensors.size());
    params.lr = static_cast<float>(lr * lr_scale);
    params.beta1 = static_cast<float>(adamw.beta1());
    params.beta2 = static_cast<float>(adamw.beta2());
    params.eps = static_cast<float>(adamw.eps());
    params.weight_decay = decay ? static_cast<float>(adamw.weight_decay()) : 0.0f;
    params.step = step_;
    params.grad_scale = grad_scale;
    kernels::MultiTensorAdamW(ctx_, params);
  }
  return norm;
}

HostTensors ModelOptimizer::StateTensors() const {
  HostTensors out;
  for (const auto& [name, moments] : moments_) {
    out.AddFromDevice(ctx_, name + ".exp_avg", moments.shape, moments.m.data<float>());
    out.AddFromDevice(ctx_, name + ".exp_avg_sq", moments.shape, moments.v.data<float>());
  }
  return out;
}

absl::Status ModelOptimizer::Restore(const SafetensorsReader& state, int64_t step) {
  std::vector<std::pair<kernels::Tensor*, std::vector<float>>> loaded;
  for (auto& [name, moments] : moments_) {
    absl::StatusOr<std::vector<float>> m = state.ReadFloat(name + ".exp_avg", moments.shape);
    if (!m.ok()) return m.status();
    absl::StatusOr<std::vector<float>> v = state.ReadFloat(name + ".exp_avg_sq", moments.shape);
    if (!v.ok()) return v.status();
    loaded.emplace_back(&moments.m, *std::move(m));
    loaded.emplace_back(&moments.v, *std::move(v));
  }
  // Every tensor read and checked before any is replaced: a bad checkpoint leaves the state as it was.
  for (auto& [tensor, values] : loaded) {
    kernels::CopyToDevice(ctx_, tensor->data(), values.data(), values.size() * sizeof(float));
  }
  step_ = step;
  return absl::OkStatus();
}

}  // namespace lmf::experiments
