// RMSNorm / LayerNorm module over kernels/rmsnorm and kernels/layernorm.
#include "model/layers/norm.h"

#include "kernels/layernorm/layernorm.h"
#include "kernels/rmsnorm/rmsnorm.h"

namespace lmf::model {

Norm::Norm(NormKind kind, int64_t channels, double eps, const kernels::Context& ctx, kernels::DType dtype)
    : kind_(kind),
      channels_(channels),
      eps_(static_cast<float>(eps)),
      dtype_(dtype),
      weight_(Parameter::Zeros({channels}, ctx, dtype)) {
  if (kind_ == NormKind::kLayerNorm) bias_ = Parameter::Zeros({channels}, ctx, dtype);
}

void Norm::Forward(const kernels::Context& ctx, int64_t n, const void* x) {
  if (n != n_) {
    out_ = kernels::Tensor::Empty({n, channels_}, dtype_, ctx.allocator);
    rstd_ = kernels::Tensor::Empty({n}, kernels::DType::kF32, ctx.allocator);
    if (kind_ == NormKind::kLayerNorm) mean_ = kernels::Tensor::Empty({n}, kernels::DType::kF32, ctx.allocator);
    n_ = n;
  }
  input_ = x;
  if (kind_ == NormKind::kLayerNorm) {
    kernels::LayerNormForwardParams p;
    p.dtype = dtype_;
    p.N = n, p.C = channels_, p.eps = eps_, p.x = x, p.weight = weight_.compute.data();
    p.bias = bias_.compute.data();
    p.out = out_.data(), p.mean = mean_.data<float>(), p.rstd = rstd_.data<float>();
    kernels::LayerNormForward(ctx, p);
  } else {
    kernels::RmsNormForwardParams p;
    p.dtype = dtype_;
    p.N = n, p.C = channels_, p.eps = eps_, p.x = x, p.weight = weight_.compute.data();
    p.out = out_.data(), p.rstd = rstd_.data<float>();
    kernels::RmsNormForward(ctx, p);
  }
}

void Norm::Backward(const kernels::Context& ctx, const void* dy, void* dx) const {
  if (kind_ == NormKind::kLayerNorm) {
    kernels::LayerNormBackwardParams p;
    p.dtype = dtype_;
    p.N = n_, p.C = channels_, p.x = input_, p.weight = weight_.compute.data(), p.mean = mean_.data<float>();
    p.rstd = rstd_.data<float>(), p.dout = dy, p.dx = dx, p.dweight = weight_.grad.data();
    p.dbias = bias_.grad.data();
    kernels::LayerNormBackward(ctx, p);
  } else {
    kernels::RmsNormBackwardParams p;
    p.dtype = dtype_;
    p.N = n_, p.C = channels_, p.x = input_, p.weight = weight_.compute.data(), p.rstd = rstd_.data<float>();
    p.dout = dy, p.dx = dx, p.dweight = weight_.grad.data();
    kernels::RmsNormBackward(ctx, p);
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
