// RMSNorm / LayerNorm module over model/ops.
#include "model/layers/norm.h"

#include "model/ops/ops.h"

namespace lmf::model {

Norm::Norm(NormKind kind, int64_t channels, double eps)
    : kind_(kind), channels_(channels), eps_(static_cast<float>(eps)), weight_(Parameter::Zeros({channels})) {
  if (kind_ == NormKind::kLayerNorm) bias_ = Parameter::Zeros({channels});
}

void Norm::Forward(const kernels::Context& ctx, int64_t n, const float* x) {
  if (n != n_) {
    out_ = kernels::Tensor::Empty({n, channels_}, kernels::DType::kF32);
    rstd_ = kernels::Tensor::Empty({n}, kernels::DType::kF32);
    if (kind_ == NormKind::kLayerNorm) mean_ = kernels::Tensor::Empty({n}, kernels::DType::kF32);
    n_ = n;
  }
  input_ = x;
  if (kind_ == NormKind::kLayerNorm) {
    ops::LayerNormForward(ctx, n, channels_, eps_, x, weight_.data(), bias_.data(), out_.data<float>(),
                          mean_.data<float>(), rstd_.data<float>());
  } else {
    ops::RmsNormForward(ctx, n, channels_, eps_, x, weight_.data(), out_.data<float>(), rstd_.data<float>());
  }
}

void Norm::Backward(const kernels::Context& ctx, const float* dy, float* dx) const {
  if (kind_ == NormKind::kLayerNorm) {
    ops::LayerNormBackward(ctx, n_, channels_, input_, weight_.data(), mean_.data<float>(), rstd_.data<float>(),
                           dy, dx, weight_.grad_data(), bias_.grad_data());
  } else {
    ops::RmsNormBackward(ctx, n_, channels_, input_, weight_.data(), rstd_.data<float>(), dy, dx,
                         weight_.grad_data());
  }
}

int64_t Norm::saved_bytes() const {
  if (n_ == 0) return 0;
  return static_cast<int64_t>(out_.nbytes() + rstd_.nbytes() + (mean_.defined() ? mean_.nbytes() : 0));
}

void Norm::VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const {
  visit(prefix + ".weight", weight_);
  if (kind_ == NormKind::kLayerNorm) visit(prefix + ".bias", bias_);
}

}  // namespace lmf::model
