// Attention module: fused q|k|v projection, RoPE, causal grouped-query attention, output projection.
#include "model/layers/attention.h"

#include "model/ops/ops.h"

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

void Attention::Forward(const kernels::Context& ctx, int64_t b, int64_t t, const float* h, float* residual) {
  const int64_t n = b * t, width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
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
    ops::Rope(ctx, b, t, nh_, hs_, rope_theta_, qkv, width, /*inverse=*/false);
    ops::Rope(ctx, b, t, nkv_, hs_, rope_theta_, qkv + q_width, width, /*inverse=*/false);
  }
  const ops::AttentionShape shape{b, t, nh_, nkv_, hs_};
  ops::AttentionForward(ctx, shape, qkv, width, qkv + q_width, qkv + q_width + kv_width, width,
                        attn_out_.data<float>(), lse_.data<float>());
  counters_->attention_flops += 2.0 * 2.0 * b * nh_ * hs_ * (t * (t + 1) / 2.0);
  output_.Forward(ctx, n, attn_out_.data<float>(), q_width, residual, c_, /*accumulate=*/true);
}

void Attention::Backward(const kernels::Context& ctx, const BackwardWorkspace& ws, const float* dresidual,
                         float* dh) {
  const int64_t n = b_ * t_, width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  float* dattn = ws.dattn.data<float>();
  float* dqkv = ws.dqkv.data<float>();
  output_.Backward(ctx, n, attn_out_.data<float>(), q_width, dresidual, c_, dattn, q_width);
  const float* qkv = qkv_out_.data<float>();
  const ops::AttentionShape shape{b_, t_, nh_, nkv_, hs_};
  ops::AttentionBackward(ctx, shape, qkv, width, qkv + q_width, qkv + q_width + kv_width, width,
                         attn_out_.data<float>(), lse_.data<float>(), dattn, dqkv, dqkv + q_width,
                         dqkv + q_width + kv_width);
  counters_->attention_flops += 2.0 * 2.0 * 2.0 * b_ * nh_ * hs_ * (t_ * (t_ + 1) / 2.0);
  if (rope_) {
    ops::Rope(ctx, b_, t_, nh_, hs_, rope_theta_, dqkv, width, /*inverse=*/true);
    ops::Rope(ctx, b_, t_, nkv_, hs_, rope_theta_, dqkv + q_width, width, /*inverse=*/true);
  }
  qkv_.Backward(ctx, n, input_, c_, dqkv, width, dh, c_);
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
