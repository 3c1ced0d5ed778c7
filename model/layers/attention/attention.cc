// Attention module: fused q|k|v projection, RoPE, causal grouped-query attention, output projection; and
// the incremental (KV-cache) forward for decoding.
#include "model/layers/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "kernels/attention/attention.h"
#include "kernels/memory/memory.h"
#include "kernels/rope/rope.h"

namespace lmf::model {

Attention::Attention(const AttentionSpec& spec, const ModelConfig& model, const kernels::Context& ctx,
                     kernels::DType dtype, StepCounters* counters)
    : nh_(spec.n_heads),
      nkv_(spec.n_kv_heads),
      hs_(model.d_model / spec.n_heads),
      c_(model.d_model),
      window_(spec.window),
      softcap_(static_cast<float>(spec.softcap)),
      rope_(model.positions == PositionKind::kRoPE),
      rope_theta_(model.rope_theta),
      dtype_(dtype),
      qkv_(c_, (nh_ + 2 * nkv_) * hs_, model.biases, ParameterKind::kMatrix, ctx, dtype, counters),
      output_(nh_ * hs_, c_, model.biases, ParameterKind::kResidualMatrix, ctx, dtype, counters),
      counters_(counters) {
  if (spec.qk_norm) {
    q_norm_.emplace(model.norm, hs_, model.norm_eps, ctx, dtype);
    k_norm_.emplace(model.norm, hs_, model.norm_eps, ctx, dtype);
  }
}

int64_t AttentionActivations::bytes() const {
  if (b == 0) return 0;
  int64_t total = static_cast<int64_t>(qkv.nbytes() + out.nbytes() + lse.nbytes());
  if (q_in.defined()) total += static_cast<int64_t>(q_in.nbytes() + k_in.nbytes()) + q_norm.bytes() + k_norm.bytes();
  return total;
}

void AttentionActivations::Release() { *this = AttentionActivations(); }

std::unique_ptr<LayerActivations> Attention::NewActivations() const {
  return std::make_unique<AttentionActivations>();
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

kernels::AttentionParams Attention::Params(const AttentionActivations& saved) const {
  const int64_t width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  const int64_t b = saved.b, t = saved.t;
  void* qkv = saved.qkv.data();
  kernels::AttentionParams p;
  p.dtype = dtype_;
  p.B = b, p.T = t, p.S = t, p.NH = nh_, p.NKV = nkv_, p.HS = hs_;
  p.scale = 1.0f / std::sqrt(static_cast<float>(hs_));
  p.causal = true;
  p.window = window_;
  p.softcap = softcap_;
  p.q = qkv, p.q_stride_b = t * width, p.q_stride_t = width, p.q_stride_h = hs_;
  p.k = ElementOffset(qkv, q_width, dtype_), p.k_stride_b = t * width, p.k_stride_t = width,
  p.k_stride_h = hs_;
  p.v = ElementOffset(qkv, q_width + kv_width, dtype_);
  p.v_stride_b = t * width, p.v_stride_t = width, p.v_stride_h = hs_;
  p.out = saved.out.data(), p.out_stride_b = t * q_width, p.out_stride_t = q_width, p.out_stride_h = hs_;
  p.lse = saved.lse.data<float>();
  return p;
}

void Attention::Resize(const kernels::Context& ctx, int64_t b, int64_t t, AttentionActivations& saved) const {
  if (b == saved.b && t == saved.t) return;
  const int64_t n = b * t;
  saved.qkv = kernels::Tensor::Empty({n, qkv_.out()}, dtype_, ctx.allocator);
  if (q_norm_) {
    saved.q_in = kernels::Tensor::Empty({n * nh_, hs_}, dtype_, ctx.allocator);
    saved.k_in = kernels::Tensor::Empty({n * nkv_, hs_}, dtype_, ctx.allocator);
  }
  saved.out = kernels::Tensor::Empty({n, nh_ * hs_}, dtype_, ctx.allocator);
  saved.lse = kernels::Tensor::Empty({b, nh_, t}, kernels::DType::kF32, ctx.allocator);
  saved.b = b;
  saved.t = t;
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

void Attention::NormQk(const kernels::Context& ctx, int64_t n, AttentionActivations& saved) const {
  if (!q_norm_) return;
  const int64_t width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  void* qkv = saved.qkv.data();
  GatherHeads(ctx, dtype_, n, width, 0, q_width, qkv, saved.q_in.data());
  q_norm_->Forward(ctx, n * nh_, saved.q_in.data(), saved.q_norm);
  ScatterHeads(ctx, dtype_, n, width, 0, q_width, saved.q_norm.output(), qkv);
  GatherHeads(ctx, dtype_, n, width, q_width, kv_width, qkv, saved.k_in.data());
  k_norm_->Forward(ctx, n * nkv_, saved.k_in.data(), saved.k_norm);
  ScatterHeads(ctx, dtype_, n, width, q_width, kv_width, saved.k_norm.output(), qkv);
}

void Attention::NormQkBackward(const kernels::Context& ctx, const AttentionActivations& saved, void* dqkv,
                               Scratch& scratch) const {
  if (!q_norm_) return;
  const int64_t n = saved.b * saved.t, width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  void* dy = scratch.Take({n, q_width}, dtype_).data();  // the gathered heads' gradient (N*NH, HS) at most
  void* dx = scratch.Take({n, q_width}, dtype_).data();
  GatherHeads(ctx, dtype_, n, width, 0, q_width, dqkv, dy);
  q_norm_->Backward(ctx, saved.q_in.data(), saved.q_norm, dy, dx);
  ScatterHeads(ctx, dtype_, n, width, 0, q_width, dx, dqkv);
  GatherHeads(ctx, dtype_, n, width, q_width, kv_width, dqkv, dy);
  k_norm_->Backward(ctx, saved.k_in.data(), saved.k_norm, dy, dx);
  ScatterHeads(ctx, dtype_, n, width, q_width, kv_width, dx, dqkv);
}

void Attention::Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out,
                        bool accumulate, LayerActivations& saved_base, DecodeState* fill) const {
  AttentionActivations& saved = StateAs<AttentionActivations>(saved_base);
  const int64_t n = b * t, width = qkv_.out(), q_width = nh_ * hs_;
  Resize(ctx, b, t, saved);
  void* qkv = saved.qkv.data();
  qkv_.Forward(ctx, n, h, c_, qkv, width, /*accumulate=*/false);
  NormQk(ctx, n, saved);
  // The q heads and the k heads after them, rotated by one call (one table of angles for both).
  if (rope_) kernels::RopeForward(ctx, InPlaceRope(b, t, nh_ + nkv_, hs_, rope_theta_, qkv, width, dtype_));
  if (fill != nullptr) FillCache(ctx, saved, StateAs<AttentionCache>(*fill));
  kernels::AttentionForward(ctx, Params(saved));
  counters_->attention_flops += 2.0 * 2.0 * b * nh_ * hs_ * CausalPairs(t, window_);
  output_.Forward(ctx, n, saved.out.data(), q_width, out, c_, accumulate);
}

int64_t Attention::CacheRows(int64_t max_positions) const {
  return window_ > 0 && window_ < max_positions ? window_ : max_positions;
}

int64_t Attention::DecodeStateBytes(int64_t b, int64_t max_positions) const {
  return b * 2 * CacheRows(max_positions) * nkv_ * hs_ * static_cast<int64_t>(kernels::DTypeSize(dtype_));
}

std::unique_ptr<DecodeState> Attention::NewDecodeState(const kernels::Context& ctx, int64_t b,
                                                       int64_t max_positions) const {
  auto cache = std::make_unique<AttentionCache>();
  const kernels::Shape shape = {b, CacheRows(max_positions), nkv_, hs_};
  cache->k = kernels::Tensor::Empty(shape, dtype_, ctx.allocator);
  cache->v = kernels::Tensor::Empty(shape, dtype_, ctx.allocator);
  return cache;
}

void Attention::FillCache(const kernels::Context& ctx, const AttentionActivations& saved,
                          AttentionCache& cache) const {
  const int64_t rows = cache.k.dim(1), b = saved.b, t = saved.t;
  LMF_CHECK(cache.k.dim(0) == b && (rows >= t || (window_ > 0 && rows >= window_)))
      << "KV cache " << cache.k.shape() << " for B " << b << ", T " << t << ", window " << window_;
  // Each sequence's key (value) columns of its q|k|v rows (T, width) -> cache rows of (rows, NKV*HS):
  // positions [first, T) (all of them, or a ring's last `rows`) into rows p % rows, in at most two runs.
  const int64_t width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_;
  const size_t es = kernels::DTypeSize(dtype_), kv_bytes = static_cast<size_t>(kv_width) * es;
  const int64_t first = std::max<int64_t>(0, t - rows);
  for (int64_t begin = first; begin < t;) {
    const int64_t row = begin % rows, count = std::min(t - begin, rows - row);
    for (int64_t bi = 0; bi < b; ++bi) {
      for (int kv = 0; kv < 2; ++kv) {
        kernels::CopyRowsOnDevice(
            ctx, ElementOffset((kv == 0 ? cache.k : cache.v).data(), (bi * rows + row) * kv_width, dtype_),
            kv_bytes,
            ElementOffset(saved.qkv.data(), (bi * t + begin) * width + q_width + kv * kv_width, dtype_),
            static_cast<size_t>(width) * es, kv_bytes, static_cast<size_t>(count));
      }
    }
    begin += count;
  }
}

void Attention::Decode(const kernels::Context& ctx, int64_t b, int64_t position, const int32_t* device_position,
                       const void* h, void* out, bool accumulate, DecodeState& state,
                       LayerActivations& scratch_saved) const {
  AttentionCache& cache = StateAs<AttentionCache>(state);
  AttentionActivations& saved = StateAs<AttentionActivations>(scratch_saved);
  const int64_t width = qkv_.out(), q_width = nh_ * hs_, kv_width = nkv_ * hs_, rows = cache.k.dim(1);
  LMF_CHECK(cache.k.dim(0) == b && (position < rows || (window_ > 0 && rows >= window_)))
      << "KV cache " << cache.k.shape() << " for B " << b << ", position " << position << ", window "
      << window_;
  Resize(ctx, b, 1, saved);
  void* qkv = saved.qkv.data();
  qkv_.Forward(ctx, b, h, c_, qkv, width, /*accumulate=*/false);
  NormQk(ctx, b, saved);
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
  // The activations' view (q, out and lse of the one new token per sequence, T = 1) with the keys and
  // values read from the cache. A window keeps the keys (position - W, position]: the rows from `first` on,
  // or once a ring (rows == W) has wrapped, all of its rows.
  const int64_t first = position >= rows ? 0 : window_ > 0 ? std::max<int64_t>(0, position - window_ + 1) : 0;
  kernels::AttentionParams p = Params(saved);
  p.S = std::min(position + 1, rows) - first;
  p.causal = false;  // the one query is at `position`: every cached key is at or before it
  p.window = 0;      // and every key it reads is inside its window
  p.k = ElementOffset(cache.k.data(), first * kv_width, dtype_), p.k_stride_b = rows * kv_width,
  p.k_stride_t = kv_width, p.k_stride_h = hs_;
  p.v = ElementOffset(cache.v.data(), first * kv_width, dtype_), p.v_stride_b = rows * kv_width,
  p.v_stride_t = kv_width, p.v_stride_h = hs_;
  kernels::AttentionForward(ctx, p);
  counters_->attention_flops += 2.0 * 2.0 * b * nh_ * hs_ * static_cast<double>(p.S);
  output_.Forward(ctx, b, saved.out.data(), q_width, out, c_, accumulate);
}

void Attention::Backward(const kernels::Context& ctx, const void* h, const LayerActivations& saved_base,
                         const void* dout, void* dh, Scratch& scratch) const {
  const AttentionActivations& saved = StateAs<AttentionActivations>(saved_base);
  const int64_t b = saved.b, t = saved.t, n = b * t, width = qkv_.out(), q_width = nh_ * hs_,
                kv_width = nkv_ * hs_;
  void* dattn = scratch.Take({n, q_width}, dtype_).data();
  void* dqkv = scratch.Take({n, width}, dtype_).data();
  output_.Backward(ctx, n, saved.out.data(), q_width, dout, c_, dattn, scratch.deferred());
  kernels::AttentionBackwardParams p;
  p.forward = Params(saved);
  p.dout = dattn;
  p.dq = dqkv, p.dk = ElementOffset(dqkv, q_width, dtype_), p.dv = ElementOffset(dqkv, q_width + kv_width, dtype_);
  kernels::AttentionBackward(ctx, p);
  counters_->attention_flops += 2.0 * 2.0 * 2.0 * b * nh_ * hs_ * CausalPairs(t, window_);
  if (rope_) kernels::RopeBackward(ctx, InPlaceRope(b, t, nh_ + nkv_, hs_, rope_theta_, dqkv, width, dtype_));
  NormQkBackward(ctx, saved, dqkv, scratch);
  qkv_.Backward(ctx, n, h, c_, dqkv, width, dh, scratch.deferred());
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

int64_t Attention::Parameters(const AttentionSpec& spec, const ModelConfig& model) {
  const int64_t c = model.d_model, hs = c / spec.n_heads, q = spec.n_heads * hs, kv = spec.n_kv_heads * hs;
  int64_t count = c * (q + 2 * kv) + q * c;       // q, k, v, output
  if (model.biases) count += q + 2 * kv + c;
  if (spec.qk_norm) count += 2 * Norm::Parameters(model.norm, hs);  // q_norm, k_norm
  return count;
}

double Attention::MatmulFlopsPerToken(const AttentionSpec& spec, const ModelConfig& model) {
  const int64_t c = model.d_model, hs = c / spec.n_heads, q = spec.n_heads * hs, kv = spec.n_kv_heads * hs;
  return 2.0 * static_cast<double>(c * (q + 2 * kv) + q * c);
}

double Attention::AttentionFlopsPerToken(const AttentionSpec& spec, const ModelConfig& model, int64_t t) {
  if (t <= 0) return 0;
  const int64_t hs = model.d_model / spec.n_heads;
  return 2.0 * 2.0 * spec.n_heads * hs * CausalPairs(t, spec.window) / static_cast<double>(t);
}

int64_t Attention::SavedBytesPerToken(const AttentionSpec& spec, const ModelConfig& model, kernels::DType dtype) {
  const int64_t hs = model.d_model / spec.n_heads, q = spec.n_heads * hs, kv = spec.n_kv_heads * hs;
  int64_t values = q + 2 * kv + q;  // q, k, v after RoPE; the attention output
  int64_t statistics = spec.n_heads;  // the log-sum-exp per head
  if (spec.qk_norm) {  // the q and k heads before QK-norm and the norms' outputs; their statistics per head
    values += 2 * (q + kv);
    statistics += (spec.n_heads + spec.n_kv_heads) * Norm::Statistics(model.norm);
  }
  return values * static_cast<int64_t>(kernels::DTypeSize(dtype)) + 4 * statistics;
}

absl::Status Attention::CheckSupport(const AttentionSpec& spec, const ModelConfig& model, kernels::Device device,
                                     kernels::DType dtype) {
  std::vector<const char*> ops = {"matmul", "attention"};
  if (model.positions == PositionKind::kRoPE) ops.push_back("rope");
  if (spec.qk_norm) ops.push_back(model.norm == NormKind::kLayerNorm ? "layernorm" : "rmsnorm");
  if (absl::Status s = CheckOpsSupported(ops, device, dtype); !s.ok()) return s;
  // The attention kernels' head sizes (CUDA: bf16 64 or 128, f32 32, 64 or 128).
  const int64_t hs = model.d_model / spec.n_heads;
  if (!kernels::AttentionSupported(device, dtype, hs)) {
    return absl::InvalidArgumentError(absl::StrCat("LanguageModel: head size ", hs, " (d_model ", model.d_model,
                                                   " / n_heads ", spec.n_heads, ") is not supported by the ",
                                                   "attention on ", DeviceName(device), " with ",
                                                   PrecisionName(dtype),
                                                   " activations (see kernels/attention/attention.h)"));
  }
  return absl::OkStatus();
}

}  // namespace lmf::model
