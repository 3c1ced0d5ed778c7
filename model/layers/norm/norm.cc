// RMSNorm / LayerNorm over kernels/rmsnorm and kernels/layernorm.
#include "model/layers/norm/norm.h"

#include "kernels/layernorm/layernorm.h"
#include "kernels/rmsnorm/rmsnorm.h"

namespace lmf::model {

int64_t NormActivations::bytes() const {
  if (n == 0) return 0;
  return static_cast<int64_t>(out.nbytes() + rstd.nbytes() + (mean.defined() ? mean.nbytes() : 0));
}

Norm::Norm(NormKind kind, int64_t channels, double eps, const kernels::Context& ctx, kernels::DType dtype)
    : kind_(kind),
      channels_(channels),
      eps_(static_cast<float>(eps)),
      dtype_(dtype),
      weight_(Parameter::Zeros({channels}, ParameterKind::kGain, ctx, dtype)) {
  if (kind_ == NormKind::kLayerNorm) bias_ = Parameter::Zeros({channels}, ParameterKind::kBias, ctx, dtype);
}

void Norm::Forward(const kernels::Context& ctx, int64_t n, const void* x, NormActivations& saved) const {
  if (n != saved.n) {
    saved.out = kernels::Tensor::Empty({n, channels_}, dtype_, ctx.allocator);
    saved.rstd = kernels::Tensor::Empty({n}, kernels::DType::kF32, ctx.allocator);
    saved.mean = kind_ == NormKind::kLayerNorm ? kernels::Tensor::Empty({n}, kernels::DType::kF32, ctx.allocator)
                                               : kernels::Tensor();
    saved.n = n;
  }
  if (kind_ == NormKind::kLayerNorm) {
    kernels::LayerNormForwardParams p;
    p.dtype = dtype_;
    p.N = n, p.C = channels_, p.eps = eps_, p.x = x, p.weight = weight_.compute.data();
    p.bias = bias_.compute.data();
    p.out = saved.out.data(), p.mean = saved.mean.data<float>(), p.rstd = saved.rstd.data<float>();
    kernels::LayerNormForward(ctx, p);
  } else {
    kernels::RmsNormForwardParams p;
    p.dtype = dtype_;
    p.N = n, p.C = channels_, p.eps = eps_, p.x = x, p.weight = weight_.compute.data();
    p.out = saved.out.data(), p.rstd = saved.rstd.data<float>();
    kernels::RmsNormForward(ctx, p);
  }
}

void Norm::Backward(const kernels::Context& ctx, const void* x, const NormActivations& saved, const void* dy,
                    void* dx) const {
  if (kind_ == NormKind::kLayerNorm) {
    kernels::LayerNormBackwardParams p;
    p.dtype = dtype_;
    p.N = saved.n, p.C = channels_, p.x = x, p.weight = weight_.compute.data();
    p.mean = saved.mean.data<float>(), p.rstd = saved.rstd.data<float>(), p.dout = dy, p.dx = dx;
    p.dweight = weight_.grad.data(), p.dbias = bias_.grad.data();
    kernels::LayerNormBackward(ctx, p);
  } else {
    kernels::RmsNormBackwardParams p;
    p.dtype = dtype_;
    p.N = saved.n, p.C = channels_, p.x = x, p.weight = weight_.compute.data(), p.rstd = saved.rstd.data<float>();
    p.dout = dy, p.dx = dx, p.dweight = weight_.grad.data();
    kernels::RmsNormBackward(ctx, p);
  }
}

void Norm::VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const {
  visit(prefix + ".weight", weight_);
  if (kind_ == NormKind::kLayerNorm) visit(prefix + ".bias", bias_);
}

}  // namespace lmf::model
