// Feed-forward module: SwiGLU / GELU / ReLU over model/ops.
#include "model/layers/feed_forward.h"

#include "model/ops/ops.h"

namespace lmf::model {

FeedForward::FeedForward(const ModelConfig& config, StepCounters* counters)
    : kind_(config.ffn),
      c_(config.d_model),
      f_(config.d_ff),
      in_(config.d_model, (config.ffn == FfnKind::kSwiGLU ? 2 : 1) * config.d_ff, config.biases, counters),
      out_(config.d_ff, config.d_model, config.biases, counters) {}

void FeedForward::Forward(const kernels::Context& ctx, int64_t n, const float* h, float* residual) {
  const int64_t width = in_.out();
  if (n != n_) {
    pre_ = kernels::Tensor::Empty({n, width}, kernels::DType::kF32);
    act_ = kernels::Tensor::Empty({n, f_}, kernels::DType::kF32);
    n_ = n;
  }
  input_ = h;
  float* pre = pre_.data<float>();
  float* act = act_.data<float>();
  in_.Forward(ctx, n, h, c_, pre, width, /*accumulate=*/false);
  if (kind_ == FfnKind::kSwiGLU) {
    ops::SwiGluForward(ctx, n, f_, pre, pre + f_, width, act);
  } else {
    ops::ActivationForward(ctx, kind_ == FfnKind::kGELU ? ops::Activation::kGelu : ops::Activation::kRelu, n, f_,
                           pre, width, act);
  }
  out_.Forward(ctx, n, act, f_, residual, c_, /*accumulate=*/true);
}

void FeedForward::Backward(const kernels::Context& ctx, const BackwardWorkspace& ws, const float* dresidual,
                           float* dh) {
  const int64_t width = in_.out();
  float* dact = ws.dact.data<float>();
  float* dpre = ws.dpre.data<float>();
  const float* pre = pre_.data<float>();
  out_.Backward(ctx, n_, act_.data<float>(), f_, dresidual, c_, dact, f_);
  if (kind_ == FfnKind::kSwiGLU) {
    ops::SwiGluBackward(ctx, n_, f_, pre, pre + f_, width, dact, dpre, dpre + f_, width);
  } else {
    ops::ActivationBackward(ctx, kind_ == FfnKind::kGELU ? ops::Activation::kGelu : ops::Activation::kRelu, n_,
                            f_, pre, width, dact, dpre, width);
  }
  in_.Backward(ctx, n_, input_, c_, dpre, width, dh, c_);
}

int64_t FeedForward::saved_bytes() const {
  if (n_ == 0) return 0;
  return static_cast<int64_t>(pre_.nbytes() + act_.nbytes());
}

void FeedForward::VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const {
  visit(prefix + ".w1.weight", in_.weight().Rows(0, f_));
  if (in_.bias() != nullptr) visit(prefix + ".w1.bias", in_.bias()->Rows(0, f_));
  if (kind_ == FfnKind::kSwiGLU) {
    visit(prefix + ".w3.weight", in_.weight().Rows(f_, f_));
    if (in_.bias() != nullptr) visit(prefix + ".w3.bias", in_.bias()->Rows(f_, f_));
  }
  out_.VisitParameters(prefix + ".w2", visit);
}

}  // namespace lmf::model
