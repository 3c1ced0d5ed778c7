// Pre-norm transformer block, for training (Forward/Backward) and for decoding with a KV cache.
#include "model/layers/block.h"

#include "kernels/core/tensor.h"
#include "kernels/memory/memory.h"
#include "kernels/residual/residual.h"

namespace lmf::model {
Block::Block(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype, StepCounters* counters)
    : c_(config.d_model),
      dtype_(dtype),
      ln1_(config.norm, config.d_model, config.norm_eps, ctx, dtype),
      ln2_(config.norm, config.d_model, config.norm_eps, ctx, dtype),
      attn_(config, ctx, dtype, counters),
      ffn_(config, ctx, dtype, counters) {}

template <typename Attend>
void Block::Run(const kernels::Context& ctx, int64_t n, const void* x, const Attend& attend) {
  if (n != n_) {
    mid_ = kernels::Tensor::Empty({n, c_}, dtype_, ctx.allocator);
    out_ = kernels::Tensor::Empty({n, c_}, dtype_, ctx.allocator);
    n_ = n;
  }
  ln1_.Forward(ctx, n, x);
  kernels::CopyOnDevice(ctx, mid_.data(), x, mid_.nbytes());
  attend(ln1_.output(), mid_.data());
  ln2_.Forward(ctx, n, mid_.data());
  kernels::CopyOnDevice(ctx, out_.data(), mid_.data(), out_.nbytes());
  ffn_.Forward(ctx, n, ln2_.output(), out_.data());
}

void Block::Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* x, LayerKvCache* cache) {
  Run(ctx, b * t, x, [&](const void* h, void* residual) { attn_.Forward(ctx, b, t, h, residual, cache); });
}

void Block::Decode(const kernels::Context& ctx, int64_t b, int64_t position, const int32_t* device_position,
                   const void* x, LayerKvCache& cache) {
  Run(ctx, b, x, [&](const void* h, void* residual) {
    attn_.Decode(ctx, b, position, device_position, h, residual, cache);
  });
}

void Block::Backward(const kernels::Context& ctx, const BackwardWorkspace& ws) {
  void* dres = ws.dresidual.data();
  void* dnormed = ws.dnormed.data();
  void* dnorm_in = ws.dnorm_in.data();
  ffn_.Backward(ctx, ws, dres, dnormed);
  // The residual stream's gradient is the skip path's plus the branch's: dres += d(norm input).
  kernels::ResidualBackwardParams add;
  add.dtype = dtype_;
  add.n = n_ * c_, add.dout = dnorm_in, add.da = dres;
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
