// AdamW with global-norm clipping over a LanguageModel, on any device, and the training step.
#include "model/optimizer/adamw.h"

#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/adamw/adamw.h"
#include "kernels/grad_norm/grad_norm.h"
#include "kernels/memory/memory.h"

namespace lmf::model {

AdamW::AdamW(const AdamWConfig& config, const LanguageModel& model, Owns owns)
    : config_(config), ctx_(model.context()), owns_(std::move(owns)) {
  model.VisitParameters([&](const std::string& name, const Parameter& p) {
    if (owns_ && !owns_(name)) return;
    Moments& moments = moments_[name];
    for (int i = 0; i < p.value.rank(); ++i) moments.shape.push_back(p.value.dim(i));
    moments.decay = p.value.rank() >= 2 || config_.decay_vectors;
    moments.lr_scale = model.LearningRateScale(name, p);
    for (kernels::Tensor* t : {&moments.m, &moments.v}) {
      *t = kernels::Tensor::Empty(p.value.shape(), kernels::DType::kF32, ctx_.allocator);
      kernels::FillZero(ctx_, t->data(), t->nbytes());
    }
  });
}

double GradientNorm(const LanguageModel& model) {
  std::vector<kernels::GradSpan> spans;
  model.VisitParameters([&](const std::string&, const Parameter& p) {
    spans.push_back({p.grad.data(), p.grad.numel()});
  });
  kernels::GradNormParams norm_params;
  norm_params.dtype = kernels::DType::kF32;
  norm_params.grads = spans.data();
  norm_params.num_grads = static_cast<int64_t>(spans.size());
  return static_cast<double>(kernels::GlobalGradNorm(model.context(), norm_params));
}

double AdamW::Step(LanguageModel& model, double lr, int64_t micro_batches, GradsAfterStep after) {
  LMF_CHECK_GE(micro_batches, 1);
  // The gradients hold a sum over micro-batches; the norm of their mean is the norm of the sum divided.
  return StepWithNorm(model, lr, micro_batches, GradientNorm(model) / static_cast<double>(micro_batches), after);
}

double AdamW::StepWithNorm(LanguageModel& model, double lr, int64_t micro_batches, double norm,
                           GradsAfterStep after) {
  LMF_CHECK_GE(micro_batches, 1);
  if (!std::isfinite(norm)) return norm;

  ++step_;
  const float clip = config_.max_grad_norm > 0 ? kernels::ClipScale(static_cast<float>(norm),
                                                                   static_cast<float>(config_.max_grad_norm))
                                               : 1.0f;
  const float grad_scale = clip / static_cast<float>(micro_batches);
  // The CUDA AdamW does not zero (a memset there is one asynchronous call); with ZeRO-1 the other ranks'
  // gradients are not visited here.
  const bool zero_grads = after == GradsAfterStep::kZeroed && !owns_ && ctx_.device.is_cpu();
  // One MultiTensorAdamW call per group of (weight decay or not, learning-rate scale): two, or four with
  // muP's scaled matrices; each also writes the bf16 compute copy of the tensors it updates when the model
  // computes in bf16.
  std::map<std::pair<bool, double>, std::vector<kernels::AdamWTensor>> groups;
  model.VisitParameters([&](const std::string& name, const Parameter& p) {
    if (owns_ && !owns_(name)) return;  // another rank's (ZeRO-1), even while adopted
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
  for (auto& [key, tensors] : groups) {
    const auto [decay, lr_scale] = key;
    kernels::MultiTensorAdamWParams params;
    params.grad_dtype = kernels::DType::kF32;
    params.tensors = tensors.data();
    params.num_tensors = static_cast<int64_t>(tensors.size());
    params.lr = static_cast<float>(lr * lr_scale);
    params.beta1 = static_cast<float>(config_.beta1);
    params.beta2 = static_cast<float>(config_.beta2);
    params.eps = static_cast<float>(config_.eps);
    params.weight_decay = decay ? static_cast<float>(config_.weight_decay) : 0.0f;
    params.step = step_;
    params.grad_scale = grad_scale;
    params.zero_grads = zero_grads;
    kernels::MultiTensorAdamW(ctx_, params);
  }
  if (zero_grads) model.GradsZeroedByOptimizer();
  return norm;
}

int64_t AdamW::state_bytes() const {
  int64_t bytes = 0;
  for (const auto& [name, moments] : moments_) bytes += static_cast<int64_t>(moments.m.nbytes() + moments.v.nbytes());
  return bytes;
}

void AdamW::AdoptState(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& m,
                       const std::vector<float>& v) {
  Moments& moments = moments_[name];
  moments.shape = shape;
  for (auto [t, values] : {std::make_pair(&moments.m, &m), std::make_pair(&moments.v, &v)}) {
    *t = kernels::Tensor::Empty(kernels::Shape::FromArray(shape.data(), static_cast<int>(shape.size())),
                                kernels::DType::kF32, ctx_.allocator);
    LMF_CHECK_EQ(static_cast<size_t>(t->numel()), values->size()) << name;
    kernels::CopyToDevice(ctx_, t->data(), values->data(), values->size() * sizeof(float));
  }
}

void AdamW::DropAdopted() {
  if (!owns_) return;
  for (auto it = moments_.begin(); it != moments_.end();) it = owns_(it->first) ? std::next(it) : moments_.erase(it);
}

bool AdamW::ReadState(const std::string& name, std::vector<float>* m, std::vector<float>* v) const {
  const auto it = moments_.find(name);
  if (it == moments_.end()) return false;
  for (auto [t, out] : {std::make_pair(&it->second.m, m), std::make_pair(&it->second.v, v)}) {
    out->resize(static_cast<size_t>(t->numel()));
    kernels::CopyToHost(ctx_, out->data(), t->data(), out->size() * sizeof(float));
  }
  return true;
}

void AdamW::VisitState(const std::function<void(const std::string& name, const kernels::Tensor& t)>& visit) const {
  for (const auto& [name, moments] : moments_) {
    visit(name + ".exp_avg", moments.m);
    visit(name + ".exp_avg_sq", moments.v);
  }
}

absl::Status AdamW::Restore(const StateReader& read, int64_t step) {
  std::vector<std::pair<kernels::Tensor*, std::vector<float>>> loaded;
  for (auto& [name, moments] : moments_) {
    absl::StatusOr<std::vector<float>> m = read(name + ".exp_avg", moments.shape);
    if (!m.ok()) return m.status();
    absl::StatusOr<std::vector<float>> v = read(name + ".exp_avg_sq", moments.shape);
    if (!v.ok()) return v.status();
    loaded.emplace_back(&moments.m, *std::move(m));
    loaded.emplace_back(&moments.v, *std::move(v));
  }
  for (auto& [tensor, values] : loaded) {
    kernels::CopyToDevice(ctx_, tensor->data(), values.data(), values.size() * sizeof(float));
  }
  step_ = step;
  return absl::OkStatus();
}

absl::StatusOr<TrainStepResult> TrainStep(LanguageModel& model, AdamW& optimizer, const int32_t* ids,
                                          const int32_t* targets, int64_t b, int64_t t, double lr,
                                          GradsAfterStep after) {
  model.ZeroGrad();
  absl::StatusOr<double> loss =
      model.ForwardWithLoss(ids, targets, b, t, ForwardMode::Training(/*seed=*/0, optimizer.step(), 0));
  if (!loss.ok()) return loss.status();
  model.Backward();
  TrainStepResult result;
  result.loss = *loss;
  result.grad_norm = optimizer.Step(model, lr, /*micro_batches=*/1, after);
  return result;
}

}  // namespace lmf::model
