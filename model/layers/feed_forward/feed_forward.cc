// The dense feed-forward channel mixer over kernels/swiglu, kernels/activations and kernels/matmul.
#include "model/layers/feed_forward/feed_forward.h"

#include "kernels/activations/activations.h"
#include "kernels/swiglu/swiglu.h"

namespace lmf::model {

int64_t FeedForwardActivations::bytes() const {
  if (n == 0) return 0;
  return static_cast<int64_t>(pre.nbytes() + act.nbytes());
}

FeedForward::FeedForward(const FeedForwardSpec& spec, const ModelConfig& model, const kernels::Context& ctx,
                         kernels::DType dtype, StepCounters* counters)
    : kind_(spec.kind),
      c_(model.d_model),
      f_(spec.d_ff),
      dtype_(dtype),
      in_(model.d_model, (spec.gated() ? 2 : 1) * spec.d_ff, model.biases, ParameterKind::kMatrix, ctx, dtype,
          counters),
      out_(spec.d_ff, model.d_model, model.biases, ParameterKind::kResidualMatrix, ctx, dtype, counters) {}

std::unique_ptr<LayerActivations> FeedForward::NewActivations() const {
  return std::make_unique<FeedForwardActivations>();
}

void FeedForward::Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out,
                          bool accumulate, LayerActivations& saved_base, const ForwardMode& /*mode*/) const {
  FeedForwardActivations& saved = StateAs<FeedForwardActivations>(saved_base);
  const int64_t n = b * t, width = in_.out();
  if (n != saved.n) {
    saved.pre = kernels::Tensor::Empty({n, width}, dtype_, ctx.allocator);
    saved.act = kernels::Tensor::Empty({n, f_}, dtype_, ctx.allocator);
    saved.n = n;
  }
  void* pre = saved.pre.data();
  void* act = saved.act.data();
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

void FeedForward::Backward(const kernels::Context& ctx, const void* h, const LayerActivations& saved_base,
                           const void* dout, void* dh, Scratch& scratch) const {
  const FeedForwardActivations& saved = StateAs<FeedForwardActivations>(saved_base);
  const int64_t n = saved.n, width = in_.out();
  void* dact = scratch.Take({n, f_}, dtype_).data();
  void* dpre = scratch.Take({n, width}, dtype_).data();
  const void* pre = saved.pre.data();
  out_.Backward(ctx, n, saved.act.data(), f_, dout, c_, dact, scratch.deferred());
  if (gated()) {
    kernels::SwiGluBackwardParams p;
    p.dtype = dtype_;
    p.N = n, p.H = f_, p.gate = pre, p.gate_stride = width, p.up = ElementOffset(pre, f_, dtype_);
    p.up_stride = width, p.dout = dact;
    p.dgate = dpre, p.dup = ElementOffset(dpre, f_, dtype_), p.activation = activation();
    kernels::SwiGluBackward(ctx, p);
  } else {
    kernels::ActivationBackwardParams p;
    p.dtype = dtype_;
    p.kind = activation(), p.n = n * f_, p.x = pre, p.dout = dact, p.dx = dpre;
    kernels::ActivationBackward(ctx, p);
  }
  in_.Backward(ctx, n, h, c_, dpre, width, dh, scratch.deferred());
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

int64_t FeedForward::Parameters(const FeedForwardSpec& spec, const ModelConfig& model) {
  const int64_t matrices = spec.gated() ? 3 : 2;
  int64_t count = matrices * model.d_model * spec.d_ff;
  if (model.biases) count += (matrices - 1) * spec.d_ff + model.d_model;  // w1 (and w3), w2
  return count;
}

double FeedForward::MatmulFlopsPerToken(const FeedForwardSpec& spec, const ModelConfig& model) {
  return 2.0 * static_cast<double>((spec.gated() ? 3 : 2) * model.d_model * spec.d_ff);
}

int64_t FeedForward::SavedBytesPerToken(const FeedForwardSpec& spec, kernels::DType dtype) {
  const int64_t values = (spec.gated() ? 2 : 1) * spec.d_ff + spec.d_ff;  // pre-activation(s), activation
  return values * static_cast<int64_t>(kernels::DTypeSize(dtype));
}

absl::Status FeedForward::CheckSupport(const FeedForwardSpec& spec, kernels::Device device, kernels::DType dtype) {
  return CheckOpsSupported({"matmul", spec.gated() ? "swiglu" : "activation"}, device, dtype);
}

}  // namespace lmf::model
