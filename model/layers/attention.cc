// Attention module: fused q|k|v projection, RoPE, causal grouped-query attention, output projection; and
// the incremental (KV-cache) forward for decoding.
#include "model/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/check.h"
#include "kernels/attention/attention.h"
#include "kernels/memory/memory.h"
#include "kernels/rope/rope.h"

namespace lmf::model {

Attention::Attention(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype,
                     StepCounters* counters)
    : nh_(config.n_heads),
      nkv_(config.n_kv_heads),
      hs_(config.head_size()),
      c_(config.d_model),
      window_(config.sliding_window),
      softcap_(static_cast<float>(config.attention_softcap)),
      rope_(config.positions == PositionKind::kRoPE),
      rope_theta_(config.rope_theta),
      dtype_(dtype),
      qkv_(config.d_model, config.q_width() + 2 * config.kv_width(), config.biases, ctx, dtype, counters),
      output_(config.q_width(), config.d_model, config.biases, ctx, dtype, counters),
      counters_(counters) {
  if (config.qk_norm) {
    q_norm_.emplace(config.norm, config.head_size(), config.norm_eps, ctx, dtype);
    k_norm_.emplace(config.norm, config.head_size(), config.norm_eps, ctx, dtype);
  }
}

namespace {

// RoPE params rotating, in place, `heads` heads of HS at column `offset` of the (B*T, width) buffer.
kernels::RopeParams InPlaceRope(int64_t b, int64_t t, int64_t heads, int64_t hs, double theta, void* data,
                                int64_t width, kernels::DType dtype) {
  kernels::RopeParams p;
  p.dtype = dtype;
  p.B = b, p.T = t, p.NH = heads, p.HS = hs, p.theta = static_cast<float>(theta);
  p.in = data, p.in_stride_b = t * width, p.in_stride_t = width, p.in_stride_h = hs;
  p.out = data, p.out_stride_b = t * width, p.out_stride_t = width, p.out_stride_h = hs;
  return p;
}

}  // namespace

kernels::AttentionParams Attention::Params() const {
  const int64_t width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  void* qkv = qkv_out_.data();
  kernels::AttentionParams p;
  p.dtype = dtype_;
  p.B = b_, p.T = t_, p.S = t_, p.NH = nh_, p.NKV = nkv_, p.HS = hs_;
  p.scale = 1.0f / std::sqrt(static_cast<float>(hs_));
  p.causal = true;
  p.window = window_;
  p.softcap = softcap_;
  p.q = qkv, p.q_stride_b = t_ * width, p.q_stride_t = width, p.q_stride_h = hs_;
  p.k = ElementOffset(qkv, q_width, dtype_), p.k_stride_b = t_ * width, p.k_stride_t = width,
  p.k_stride_h = hs_;
  p.v = ElementOffset(qkv, q_width + kv_width, dtype_);
  p.v_stride_b = t_ * width, p.v_stride_t = width, p.v_stride_h = hs_;
  p.out = attn_out_.data(), p.out_stride_b = t_ * q_width, p.out_stride_t = q_width, p.out_stride_h = hs_;
  p.lse = lse_.data<float>();
  return p;
}

void Attention::EnsureStepState(const kernels::Context& ctx, int64_t b, int64_t t) {
  if (b == b_ && t == t_) return;
  const int64_t n = b * t;
  qkv_out_ = kernels::Tensor::Empty({n, qkv_.out()}, dtype_, ctx.allocator);
  if (q_norm_) {
    q_in_ = kernels::Tensor::Empty({n * nh_, hs_}, dtype_, ctx.allocator);
    k_in_ = kernels::Tensor::Empty({n * nkv_, hs_}, dtype_, ctx.allocator);
  }
  attn_out_ = kernels::Tensor::Empty({n, nh_ * hs_}, dtype_, ctx.allocator);
  lse_ = kernels::Tensor::Empty({b, nh_, t}, kernels::DType::kF32, ctx.allocator);
  b_ = b;
  t_ = t;
}

namespace {

// `heads` heads of HS at column `offset` of the n rows of `width` elements at qkv <-> contiguous (n*heads,
// HS) rows at dense: one strided row copy each way.
void GatherHeads(const kernels::Context& ctx, kernels::DType dtype, int64_t n, int64_t width, int64_t offset,
                 int64_t heads_width, const void* qkv, void* dense) {
  const size_t es = kernels::DTypeSize(dtype), row = static_cast<size_t>(heads_width) * es;
  kernels::CopyRowsOnDevice(ctx, dense, row, ElementOffset(qkv, offset, dtype),
                            static_cast<size_t>(width) * es, row, static_cast<size_t>(n));
}
void ScatterHeads(const kernels::Context& ctx, kernels::DType dtype, int64_t n, int64_t width, int64_t offset,
                  int64_t heads_width, const void* dense, void* qkv) {
  const size_t es = kernels::DTypeSize(dtype), row = static_cast<size_t>(heads_width) * es;
  kernels::CopyRowsOnDevice(ctx, ElementOffset(qkv, offset, dtype), static_cast<size_t>(width) * es, dense,
                            row, row, static_cast<size_t>(n));
}

}  // namespace

void Attention::NormQk(const kernels::Context& ctx, int64_t n) {
  if (!q_norm_) return;
  const int64_t width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  void* qkv = qkv_out_.data();
  GatherHeads(ctx, dtype_, n, width, 0, q_width, qkv, q_in_.data());
  q_norm_->Forward(ctx, n * nh_, q_in_.data());
  ScatterHeads(ctx, dtype_, n, width, 0, q_width, q_norm_->output(), qkv);
  GatherHeads(ctx, dtype_, n, width, q_width, kv_width, qkv, k_in_.data());
  k_norm_->Forward(ctx, n * nkv_, k_in_.data());
  ScatterHeads(ctx, dtype_, n, width, q_width, kv_width, k_norm_->output(), qkv);
}

void Attention::NormQkBackward(const kernels::Context& ctx, const BackwardWorkspace& ws, void* dqkv) {
  if (!q_norm_) return;
  const int64_t n = b_ * t_, width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  void* dy = ws.dattn.data();     // (N, NH*HS): free once the attention backward has read it
  void* dx = ws.dqk_norm.data();  // (N, NH*HS)
  GatherHeads(ctx, dtype_, n, width, 0, q_width, dqkv, dy);
  q_norm_->Backward(ctx, dy, dx);
  ScatterHeads(ctx, dtype_, n, width, 0, q_width, dx, dqkv);
  GatherHeads(ctx, dtype_, n, width, q_width, kv_width, dqkv, dy);
  k_norm_->Backward(ctx, dy, dx);
  ScatterHeads(ctx, dtype_, n, width, q_width, kv_width, dx, dqkv);
}

void Attention::Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out,
                        bool accumulate, LayerKvCache* cache) {
  const int64_t n = b * t, width = qkv_.out(), q_width = nh_ * hs_;
  EnsureStepState(ctx, b, t);
  input_ = h;
  void* qkv = qkv_out_.data();
  qkv_.Forward(ctx, n, h, c_, qkv, width, /*accumulate=*/false);
  NormQk(ctx, n);
  // The q heads and the k heads after them, rotated by one call (one table of angles for both).
  if (rope_) kernels::RopeForward(ctx, InPlaceRope(b, t, nh_ + nkv_, hs_, rope_theta_, qkv, width, dtype_));
  if (cache != nullptr) FillCache(ctx, *cache);
  kernels::AttentionForward(ctx, Params());
  counters_->attention_flops += 2.0 * 2.0 * b * nh_ * hs_ * CausalPairs(t, window_);
  output_.Forward(ctx, n, attn_out_.data(), q_width, out, c_, accumulate);
}

void Attention::FillCache(const kernels::Context& ctx, LayerKvCache& cache) {
  const int64_t rows = cache.k.dim(1);
  LMF_CHECK(cache.k.dim(0) == b_ && (rows >= t_ || (window_ > 0 && rows >= window_)))
      << "KV cache " << cache.k.shape() << " for B " << b_ << ", T " << t_ << ", window " << window_;
  // Each sequence's key (value) columns of its q|k|v rows (T, width) -> cache rows of (rows, NKV*HS):
  // positions [first, T) (all of them, or a ring's last `rows`) into rows p % rows, in at most two runs.
  const int64_t width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  const size_t es = kernels::DTypeSize(dtype_), kv_bytes = static_cast<size_t>(kv_width) * es;
  const int64_t first = std::max<int64_t>(0, t_ - rows);
  for (int64_t begin = first; begin < t_;) {
    const int64_t row = begin % rows, count = std::min(t_ - begin, rows - row);
    for (int64_t bi = 0; bi < b_; ++bi) {
      for (int kv = 0; kv < 2; ++kv) {
        kernels::CopyRowsOnDevice(
            ctx, ElementOffset((kv == 0 ? cache.k : cache.v).data(), (bi * rows + row) * kv_width, dtype_),
            kv_bytes,
            ElementOffset(qkv_out_.data(), (bi * t_ + begin) * width + q_width + kv * kv_width, dtype_),
            static_cast<size_t>(width) * es, kv_bytes, static_cast<size_t>(count));
      }
    }
    begin += count;
  }
}

void Attention::Decode(const kernels::Context& ctx, int64_t b, int64_t position,
                       const int32_t* device_position, const void* h, void* out, bool accumulate,
                       LayerKvCache& cache) {
  const int64_t width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_, rows = cache.k.dim(1);
  LMF_CHECK(cache.k.dim(0) == b && (position < rows || (window_ > 0 && rows >= window_)))
      << "KV cache " << cache.k.shape() << " for B " << b << ", position " << position << ", window "
      << window_;
  EnsureStepState(ctx, b, 1);
  input_ = h;
  void* qkv = qkv_out_.data();
  qkv_.Forward(ctx, b, h, c_, qkv, width, /*accumulate=*/false);
  NormQk(ctx, b);
  if (rope_) {  // q and k heads in one call, as in Forward
    kernels::RopeParams p = InPlaceRope(b, 1, nh_ + nkv_, hs_, rope_theta_, qkv, width, dtype_);
    p.positions = device_position, p.positions_stride_b = 0;  // every sequence is at `position`
    kernels::RopeForward(ctx, p);
  }
  // Each sequence's new key (value) -> its cache row position % rows: one strided copy over the batch each.
  const size_t es = kernels::DTypeSize(dtype_), kv_bytes = static_cast<size_t>(kv_width) * es;
  for (int kv = 0; kv < 2; ++kv) {
    kernels::CopyRowsOnDevice(
        ctx, ElementOffset((kv == 0 ? cache.k : cache.v).data(), position % rows * kv_width, dtype_),
        static_cast<size_t>(rows * kv_width) * es, ElementOffset(qkv, q_width + kv * kv_width, dtype_),
        static_cast<size_t>(width) * es, kv_bytes, static_cast<size_t>(b));
  }
  // The step state's view (q, out and lse of the one new token per sequence, T = 1) with the keys and values
  // read from the cache. A window keeps the keys (position - W, position]: the rows from `first` on, or once
  // a ring (rows == W) has wrapped, all of its rows.
  const int64_t first = position >= rows ? 0 : window_ > 0 ? std::max<int64_t>(0, position - window_ + 1) : 0;
  kernels::AttentionParams p = Params();
  p.S = std::min(position + 1, rows) - first;
  p.causal = false;  // the one query is at `position`: every cached key is at or before it
  p.window = 0;      // and every key it reads is inside its window
  p.k = ElementOffset(cache.k.data(), first * kv_width, dtype_), p.k_stride_b = rows * kv_width,
  p.k_stride_t = kv_width, p.k_stride_h = hs_;
  p.v = ElementOffset(cache.v.data(), first * kv_width, dtype_), p.v_stride_b = rows * kv_width,
  p.v_stride_t = kv_width, p.v_stride_h = hs_;
  kernels::AttentionForward(ctx, p);
  counters_->attention_flops += 2.0 * 2.0 * b * nh_ * hs_ * static_cast<double>(p.S);
  output_.Forward(ctx, b, attn_out_.data(), q_width, out, c_, accumulate);
}

void Attention::Backward(const kernels::Context& ctx, const BackwardWorkspace& ws, const void* dresidual,
                         void* dh) {
  const int64_t n = b_ * t_, width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  void* dattn = ws.dattn.data();
  void* dqkv = ws.dqkv.data();
  output_.Backward(ctx, n, attn_out_.data(), q_width, dresidual, c_, dattn);
  kernels::AttentionBackwardParams p;
  p.forward = Params();
  p.dout = dattn;
  p.dq = dqkv, p.dk = ElementOffset(dqkv, q_width, dtype_),
  p.dv = ElementOffset(dqkv, q_width + kv_width, dtype_);
  kernels::AttentionBackward(ctx, p);
  counters_->attention_flops += 2.0 * 2.0 * 2.0 * b_ * nh_ * hs_ * CausalPairs(t_, window_);
  if (rope_)
    kernels::RopeBackward(ctx, InPlaceRope(b_, t_, nh_ + nkv_, hs_, rope_theta_, dqkv, width, dtype_));
  NormQkBackward(ctx, ws, dqkv);
  qkv_.Backward(ctx, n, input_, c_, dqkv, width, dh);
}

int64_t Attention::saved_bytes() const {
  if (b_ == 0) return 0;
  int64_t bytes = static_cast<int64_t>(qkv_out_.nbytes() + attn_out_.nbytes() + lse_.nbytes());
  if (q_norm_) {
    bytes += static_cast<int64_t>(q_in_.nbytes() + k_in_.nbytes()) + q_norm_->saved_bytes() +
             k_norm_->saved_bytes();
  }
  return bytes;
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
  if (q_norm_) {
    q_norm_->VisitParameters(prefix + ".q_norm", visit);
    k_norm_->VisitParameters(prefix + ".k_norm", visit);
  }
  output_.VisitParameters(prefix + ".output_proj", visit);
}

}  // namespace lmf::model
