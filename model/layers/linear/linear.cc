// Linear layer over kernels/matmul.
#include "model/layers/linear/linear.h"

#include "kernels/matmul/matmul.h"

namespace lmf::model {

Linear::Linear(int64_t in, int64_t out, bool bias, ParameterKind kind, const kernels::Context& ctx,
               kernels::DType dtype, StepCounters* counters)
    : in_(in),
      out_(out),
      has_bias_(bias),
      dtype_(dtype),
      weight_(Parameter::Zeros({out, in}, kind, ctx, dtype)),
      counters_(counters) {
  if (has_bias_) bias_ = Parameter::Zeros({out}, ParameterKind::kBias, ctx, dtype);
}

Linear::Linear(const Parameter& weight, kernels::DType dtype, StepCounters* counters)
    : in_(weight.value.dim(1)),
      out_(weight.value.dim(0)),
      has_bias_(false),
      dtype_(dtype),
      weight_(weight),
      counters_(counters) {}

kernels::MatmulParams Linear::Params(int64_t n, const void* x, int64_t ldx, void* y, int64_t ldy) const {
  kernels::MatmulParams p = kernels::LinearParams(n, in_, out_, x, weight_.compute.data(),
                                                  has_bias_ ? bias_.compute.data() : nullptr, y);
  p.dtype = dtype_;
  p.lda = ldx;
  p.ldc = ldy;
  return p;
}

void Linear::Forward(const kernels::Context& ctx, int64_t n, const void* x, int64_t ldx, void* y, int64_t ldy,
                     bool accumulate, const kernels::MatmulEpilogueParams& epilogue) const {
  kernels::MatmulParams p = Params(n, x, ldx, y, ldy);
  p.beta = accumulate ? 1.0f : 0.0f;
  kernels::Matmul(ctx, p, epilogue);
  counters_->matmul_flops += 2.0 * n * in_ * out_;
}

void Linear::Backward(const kernels::Context& ctx, int64_t n, const void* x, int64_t ldx, const void* dy,
                      int64_t ldy, void* dx, DeferredWeightGrads* deferred) const {
  kernels::MatmulBackwardParams p;
  p.forward = Params(n, x, ldx, nullptr, ldy);
  p.dc = dy;
  p.da = dx;
  p.db = weight_.grad.data();
  p.dbias = has_bias_ ? bias_.grad.data() : nullptr;
  MatmulBackwardOrDefer(ctx, p, deferred);
  counters_->matmul_flops += (dx != nullptr ? 4.0 : 2.0) * n * in_ * out_;
}

void Linear::VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const {
  visit(prefix + ".weight", weight_);
  if (has_bias_) visit(prefix + ".bias", bias_);
}

}  // namespace lmf::model
