// Linear layer over model/ops' GEMM.
#include "model/layers/linear.h"

#include "model/ops/ops.h"

namespace lmf::model {

Linear::Linear(int64_t in, int64_t out, bool bias, StepCounters* counters)
    : in_(in), out_(out), has_bias_(bias), weight_(Parameter::Zeros({out, in})), counters_(counters) {
  if (has_bias_) bias_ = Parameter::Zeros({out});
}

Linear::Linear(const Parameter& weight, StepCounters* counters)
    : in_(weight.value.dim(1)), out_(weight.value.dim(0)), has_bias_(false), weight_(weight), counters_(counters) {}

void Linear::Forward(const kernels::Context& ctx, int64_t n, const float* x, int64_t ldx, float* y, int64_t ldy,
                     bool accumulate) const {
  ops::LinearForward(ctx, n, in_, out_, x, ldx, weight_.data(), has_bias_ ? bias_.data() : nullptr, y, ldy,
                     accumulate);
  counters_->matmul_flops += 2.0 * n * in_ * out_;
}

void Linear::Backward(const kernels::Context& ctx, int64_t n, const float* x, int64_t ldx, const float* dy,
                      int64_t ldy, float* dx, int64_t lddx) const {
  ops::LinearBackward(ctx, n, in_, out_, x, ldx, weight_.data(), dy, ldy, dx, lddx, weight_.grad_data(),
                      has_bias_ ? bias_.grad_data() : nullptr);
  counters_->matmul_flops += (dx != nullptr ? 4.0 : 2.0) * n * in_ * out_;
}

void Linear::VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const {
  visit(prefix + ".weight", weight_);
  if (has_bias_) visit(prefix + ".bias", bias_);
}

}  // namespace lmf::model
