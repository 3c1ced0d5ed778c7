// Pre-norm transformer block.
#include "model/layers/block.h"

#include "kernels/core/tensor.h"
#include "kernels/residual/residual.h"

namespace lmf::model {
Block::Block(const ModelConfig& config, StepCounters* counters)
    : c_(config.d_model),
      ln1_(config.norm, config.d_model, config.norm_eps),
      ln2_(config.norm, config.d_model, config.norm_eps),
      attn_(config, counters),
      ffn_(config, counters) {}

void Block::Forward(const kernels::Context& ctx, int64_t b, int64_t t, const float* x) {
  const int64_t n = b * t;
  if (n != n_) {
    mid_ = kernels::Tensor::Empty({n, c_}, kernels::DType::kF32);
    out_ = kernels::Tensor::Empty({n, c_}, kernels::DType::kF32);
    n_ = n;
  }
  float* mid = mid_.data<float>();
  float* out = out_.data<float>();
  ln1_.Forward(ctx, n, x);
  mid_.CopyFrom(kernels::Tensor::Wrap(const_cast<float*>(x), {n, c_}, kernels::DType::kF32));
  attn_.Forward(ctx, b, t, ln1_.output(), mid);
  ln2_.Forward(ctx, n, mid);
  out_.CopyFrom(mid_);
  ffn_.Forward(ctx, n, ln2_.output(), out);
}

void Block::Backward(const kernels::Context& ctx, const BackwardWorkspace& ws) {
  const int64_t count = n_ * c_;
  float* dres = ws.dresidual.data<float>();
  float* dnormed = ws.dnormed.data<float>();
  float* dnorm_in = ws.dnorm_in.data<float>();
  ffn_.Backward(ctx, ws, dres, dnormed);
  // The residual stream's gradient is the skip path's plus the branch's: dres += d(norm input).
  kernels::ResidualBackwardParams add;
  add.n = count, add.dout = dnorm_in, add.da = dres;
  ln2_.Backward(ctx, dnormed, dnorm_in);
  kernels::ResidualBackward(ctx, add);
  attn_.Backward(ctx, ws, dres, dnormed);
  ln1_.Backward(ctx, dnormed, dnorm_in);
  kernels::ResidualBackward(ctx, add);
}

int64_t Block::saved_bytes() const {
  if (n_ == 0) return 0;
  return static_cast<int64_t>(mid_.nbytes() + out_.nbytes()) + ln1_.saved_bytes() + ln2_.saved_bytes() +
         attn_.saved_bytes() + ffn_.saved_bytes();
}

void Block::VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const {
  ln1_.VisitParameters(prefix + ".ln1", visit);
  attn_.VisitParameters(prefix + ".attn", visit);
  ln2_.VisitParameters(prefix + ".ln2", visit);
  ffn_.VisitParameters(prefix + ".ffn", visit);
}

}  // namespace lmf::model
