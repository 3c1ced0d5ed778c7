// Attention module: fused q|k|v projection, RoPE, causal grouped-query attention, output projection.
#include "model/layers/attention.h"

#include <cmath>

#include "kernels/attention/attention.h"
#include "kernels/rope/rope.h"

namespace lmf::model {

Attention::Attention(const ModelConfig& config, StepCounters* counters)
    : nh_(config.n_heads),
      nkv_(config.n_kv_heads),
      hs_(config.head_size()),
      c_(config.d_model),
      rope_(config.positions == PositionKind::kRoPE),
      rope_theta_(config.rope_theta),
      qkv_(config.d_model, config.q_width() + 2 * config.kv_width(), config.biases, counters),
      output_(config.q_width(), config.d_model, config.biases, counters),
      counters_(counters) {}

namespace {

// RoPE params rotating, in place, `heads` heads of HS at column `offset` of the (B*T, width) buffer.
kernels::RopeParams InPlaceRope(int64_t b, int64_t t, int64_t heads, int64_t hs, double theta, float* data,
                                int64_t width) {
  kernels::RopeParams p;
  p.B = b, p.T = t, p.NH = heads, p.HS = hs, p.theta = static_cast<float>(theta);
  p.in = data, p.in_stride_b = t * width, p.in_stride_t = width, p.in_stride_h = hs;
  p.out = data, p.out_stride_b = t * width, p.out_stride_t = width, p.out_stride_h = hs;
  return p;
}

}  // namespace

kernels::AttentionParams Attention::Params() const {
  const int64_t width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  float* qkv = qkv_out_.data<float>();
  kernels::AttentionParams p;
  p.B = b_, p.T = t_, p.S = t_, p.NH = nh_, p.NKV = nkv_, p.HS = hs_;
  p.scale = 1.0f / std::sqrt(static_cast<float>(hs_));
  p.causal = true;
  p.q = qkv, p.q_stride_b = t_ * width, p.q_stride_t = width, p.q_stride_h = hs_;
  p.k = qkv + q_width, p.k_stride_b = t_ * width, p.k_stride_t = width, p.k_stride_h = hs_;
  p.v = qkv + q_width + kv_width, p.v_stride_b = t_ * width, p.v_stride_t = width, p.v_stride_h = hs_;
  p.out = attn_out_.data<float>(), p.out_stride_b = t_ * q_width, p.out_stride_t = q_width, p.out_stride_h = hs_;
  p.lse = lse_.data<float>();
  return p;
}

void Attention::Forward(const kernels::Context& ctx, int64_t b, int64_t t, const float* h, float* residual) {
  const int64_t n = b * t, width = qkv_.out(), q_width = nh_ * hs_;
  if (b != b_ || t != t_) {
    qkv_out_ = kernels::Tensor::Empty({n, width}, kernels::DType::kF32);
    attn_out_ = kernels::Tensor::Empty({n, q_width}, kernels::DType::kF32);
    lse_ = kernels::Tensor::Empty({b, nh_, t}, kernels::DType::kF32);
    b_ = b;
    t_ = t;
  }
  input_ = h;
  float* qkv = qkv_out_.data<float>();
  qkv_.Forward(ctx, n, h, c_, qkv, width, /*accumulate=*/false);
  if (rope_) {
    kernels::RopeForward(ctx, InPlaceRope(b, t, nh_, hs_, rope_theta_, qkv, width));
    kernels::RopeForward(ctx, InPlaceRope(b, t, nkv_, hs_, rope_theta_, qkv + q_width, width));
  }
  kernels::AttentionForward(ctx, Params());
  counters_->attention_flops += 2.0 * 2.0 * b * nh_ * hs_ * (t * (t + 1) / 2.0);
  output_.Forward(ctx, n, attn_out_.data<float>(), q_width, residual, c_, /*accumulate=*/true);
}

void Attention::Backward(const kernels::Context& ctx, const BackwardWorkspace& ws, const float* dresidual,
                         float* dh) {
  const int64_t n = b_ * t_, width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  float* dattn = ws.dattn.data<float>();
  float* dqkv = ws.dqkv.data<float>();
  output_.Backward(ctx, n, attn_out_.data<float>(), q_width, dresidual, c_, dattn);
  kernels::AttentionBackwardParams p;
  p.forward = Params();
  p.dout = dattn;
  p.dq = dqkv, p.dk = dqkv + q_width, p.dv = dqkv + q_width + kv_width;
  kernels::AttentionBackward(ctx, p);
  counters_->attention_flops += 2.0 * 2.0 * 2.0 * b_ * nh_ * hs_ * (t_ * (t_ + 1) / 2.0);
  if (rope_) {
    kernels::RopeBackward(ctx, InPlaceRope(b_, t_, nh_, hs_, rope_theta_, dqkv, width));
    kernels::RopeBackward(ctx, InPlaceRope(b_, t_, nkv_, hs_, rope_theta_, dqkv + q_width, width));
  }
  qkv_.Backward(ctx, n, input_, c_, dqkv, width, dh);
}

int64_t Attention::saved_bytes() const {
  if (b_ == 0) return 0;
  return static_cast<int64_t>(qkv_out_.nbytes() + attn_out_.nbytes() + lse_.nbytes());
}

void Attention::VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const {
  const int64_t q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  const char* names[3] = {".q_proj", ".k_proj", ".v_proj"};
  const int64_t starts[3] = {0, q_width, q_width + kv_width};
  const int64_t rows[3] = {q_width, kv_width, kv_width};
  for (int i = 0; i < 3; ++i) {
    visit(prefix + names[i] + ".weight", qkv_.weight().Rows(starts[i], rows[i]));
    if (qkv_.bias() != nullptr) visit(prefix + names[i] + ".bias", qkv_.bias()->Rows(starts[i], rows[i]));
  }
  output_.VisitParameters(prefix + ".output_proj", visit);
}

}  // namespace lmf::model
