// Feed-forward module: SwiGLU / GeGLU / GELU / ReLU over kernels/swiglu, kernels/activations and
// kernels/matmul.
#include "model/layers/feed_forward.h"

#include "kernels/activations/activations.h"
#include "kernels/swiglu/swiglu.h"

namespace lmf::model {

FeedForward::FeedForward(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype,
                         StepCounters* counters)
    : kind_(config.ffn),
      c_(config.d_model),
      f_(config.d_ff),
      dtype_(dtype),
      in_(config.d_model, (config.gated_ffn() ? 2 : 1) * config.d_ff, config.biases, ctx, dtype, counters),
      out_(config.d_ff, config.d_model, config.biases, ctx, dtype, counters) {}

void FeedForward::Forward(const kernels::Context& ctx, int64_t n, const void* h, void* out, bool accumulate) {
  const int64_t width = in_.out();
  if (n != n_) {
    pre_ = kernels::Tensor::Empty({n, width}, dtype_, ctx.allocator);
    act_ = kernels::Tensor::Empty({n, f_}, dtype_, ctx.allocator);
    n_ = n;
  }
  input_ = h;
  void* pre = pre_.data();
  void* act = act_.data();
  if (kind_ == FfnKind::kGELU) {
    // act = GELU(h W1^T + b1) in one GEMM where the backend fuses the epilogue (cuBLASLt), saving the
    // pre-activation for the backward; on the CPU the same GEMM then the activations kernel (bitwise the
    // unfused path).
    kernels::MatmulEpilogueParams gelu;
    gelu.epilogue = kernels::MatmulEpilogue::kGeluTanh;
    gelu.pre_activation = pre;
    in_.Forward(ctx, n, h, c_, act, f_, /*accumulate=*/false, gelu);
  } else if (gated()) {
    in_.Forward(ctx, n, h, c_, pre, width, /*accumulate=*/false);
    kernels::SwiGluForwardParams p;
    p.dtype = dtype_;
    p.N = n, p.H = f_, p.gate = pre, p.gate_stride = width, p.up = ElementOffset(pre, f_, dtype_);
    p.up_stride = width, p.out = act, p.activation = activation();
    kernels::SwiGluForward(ctx, p);
  } else {
    in_.Forward(ctx, n, h, c_, pre, width, /*accumulate=*/false);
    kernels::ActivationForwardParams p;
    p.dtype = dtype_;
    p.kind = activation(), p.n = n * f_, p.x = pre, p.out = act;
    kernels::ActivationForward(ctx, p);
  }
  out_.Forward(ctx, n, act, f_, out, c_, accumulate);
}

void FeedForward::Backward(const kernels::Context& ctx, const BackwardWorkspace& ws, const void* dresidual,
                           void* dh) {
  const int64_t width = in_.out();
  void* dact = ws.dact.data();
  void* dpre = ws.dpre.data();
  const void* pre = pre_.data();
  out_.Backward(ctx, n_, act_.data(), f_, dresidual, c_, dact);
  if (gated()) {
    kernels::SwiGluBackwardParams p;
    p.dtype = dtype_;
    p.N = n_, p.H = f_, p.gate = pre, p.gate_stride = width, p.up = ElementOffset(pre, f_, dtype_);
    p.up_stride = width, p.dout = dact;
    p.dgate = dpre, p.dup = ElementOffset(dpre, f_, dtype_), p.activation = activation();
    kernels::SwiGluBackward(ctx, p);
  } else {
    kernels::ActivationBackwardParams p;
    p.dtype = dtype_;
    p.kind = activation(), p.n = n_ * f_, p.x = pre, p.dout = dact, p.dx = dpre;
    kernels::ActivationBackward(ctx, p);
  }
  in_.Backward(ctx, n_, input_, c_, dpre, width, dh);
}

int64_t FeedForward::saved_bytes() const {
  if (n_ == 0) return 0;
  return static_cast<int64_t>(pre_.nbytes() + act_.nbytes());
}

void FeedForward::VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const {
  visit(prefix + ".w1.weight", in_.weight().Rows(0, f_));
  if (in_.bias() != nullptr) visit(prefix + ".w1.bias", in_.bias()->Rows(0, f_));
  if (gated()) {
    visit(prefix + ".w3.weight", in_.weight().Rows(f_, f_));
    if (in_.bias() != nullptr) visit(prefix + ".w3.bias", in_.bias()->Rows(f_, f_));
  }
  out_.VisitParameters(prefix + ".w2", visit);
}

}  // namespace lmf::model
