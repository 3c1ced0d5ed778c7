// Transformer block (pre, post or double norm, or parallel), for training (Forward/Backward) and for decoding
// with a KV cache.
#include "model/layers/block.h"

#include "kernels/core/tensor.h"
#include "kernels/memory/memory.h"
#include "kernels/residual/residual.h"

namespace lmf::model {
Block::Block(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype,
             StepCounters* counters)
    : c_(config.d_model),
      dtype_(dtype),
      placement_(config.norm_placement),
      parallel_(config.parallel_block),
      ln1_(config.norm, config.d_model, config.norm_eps, ctx, dtype),
      attn_(config, ctx, dtype, counters),
      ffn_(config, ctx, dtype, counters) {
  if (!(config.parallel_block && config.parallel_shared_norm))
    ln2_.emplace(config.norm, config.d_model, config.norm_eps, ctx, dtype);
  if (placement_ == NormPlacement::kDouble) {
    post_attn_norm_.emplace(config.norm, config.d_model, config.norm_eps, ctx, dtype);
    post_ffn_norm_.emplace(config.norm, config.d_model, config.norm_eps, ctx, dtype);
  }
}

void Block::CopyRows(const kernels::Context& ctx, kernels::Tensor& dst, const void* src) const {
  kernels::CopyOnDevice(ctx, dst.data(), src, dst.nbytes());
}

void Block::AddInto(const kernels::Context& ctx, void* dst, const void* src) const {
  kernels::ResidualBackwardParams add;  // da += dout: the residual add's backward is an accumulate
  add.dtype = dtype_;
  add.n = n_ * c_, add.dout = src, add.da = dst;
  kernels::ResidualBackward(ctx, add);
}

template <typename Attend>
void Block::Run(const kernels::Context& ctx, int64_t n, const void* x, const Attend& attend) {
  if (n != n_) {
    const auto rows = [&] { return kernels::Tensor::Empty({n, c_}, dtype_, ctx.allocator); };
    out_ = rows();
    mid_ = parallel_ ? kernels::Tensor() : rows();
    if (placement_ == NormPlacement::kDouble) attn_branch_ = rows(), ffn_branch_ = rows();
    n_ = n;
  }
  if (parallel_) {  // out = x + f(ln1(x)) + g(ln2(x)), or + g(ln1(x)) with a shared norm
    ln1_.Forward(ctx, n, x);
    if (ln2_) ln2_->Forward(ctx, n, x);
    CopyRows(ctx, out_, x);
    attend(ln1_.output(), out_.data(), /*accumulate=*/true);
    ffn_.Forward(ctx, n, ln2_ ? ln2_->output() : ln1_.output(), out_.data(), /*accumulate=*/true);
    return;
  }
  switch (placement_) {
    case NormPlacement::kPre:  // mid = x + f(ln1(x)); out = mid + g(ln2(mid))
      ln1_.Forward(ctx, n, x);
      CopyRows(ctx, mid_, x);
      attend(ln1_.output(), mid_.data(), /*accumulate=*/true);
      ln2_->Forward(ctx, n, mid_.data());
      CopyRows(ctx, out_, mid_.data());
      ffn_.Forward(ctx, n, ln2_->output(), out_.data(), /*accumulate=*/true);
      break;
    case NormPlacement::kPost:  // mid = x + f(x); h = ln1(mid); out = h + g(h); output ln2(out)
      CopyRows(ctx, mid_, x);
      attend(x, mid_.data(), /*accumulate=*/true);
      ln1_.Forward(ctx, n, mid_.data());
      CopyRows(ctx, out_, ln1_.output());
      ffn_.Forward(ctx, n, ln1_.output(), out_.data(), /*accumulate=*/true);
      ln2_->Forward(ctx, n, out_.data());
      break;
    case NormPlacement::kDouble: {  // mid = x + pa(f(ln1(x))); out = mid + pf(g(ln2(mid)))
      kernels::ResidualForwardParams add;
      add.dtype = dtype_;
      add.n = n * c_;
      ln1_.Forward(ctx, n, x);
      attend(ln1_.output(), attn_branch_.data(), /*accumulate=*/false);
      post_attn_norm_->Forward(ctx, n, attn_branch_.data());
      add.a = x, add.b = post_attn_norm_->output(), add.out = mid_.data();
      kernels::ResidualForward(ctx, add);
      ln2_->Forward(ctx, n, mid_.data());
      ffn_.Forward(ctx, n, ln2_->output(), ffn_branch_.data(), /*accumulate=*/false);
      post_ffn_norm_->Forward(ctx, n, ffn_branch_.data());
      add.a = mid_.data(), add.b = post_ffn_norm_->output(), add.out = out_.data();
      kernels::ResidualForward(ctx, add);
      break;
    }
  }
}

const void* Block::output() const {
  return placement_ == NormPlacement::kPost ? ln2_->output() : out_.data();
}

void Block::Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* x, LayerKvCache* cache) {
  Run(ctx, b * t, x, [&](const void* h, void* out, bool accumulate) {
    attn_.Forward(ctx, b, t, h, out, accumulate, cache);
  });
}

void Block::Decode(const kernels::Context& ctx, int64_t b, int64_t position, const int32_t* device_position,
                   const void* x, LayerKvCache& cache) {
  Run(ctx, b, x, [&](const void* h, void* out, bool accumulate) {
    attn_.Decode(ctx, b, position, device_position, h, out, accumulate, cache);
  });
}

// dres holds d(output) on entry and d(x) on return; dnormed and dnorm_in are scratch. Each branch's
// Backward reads the gradient of its output and writes the gradient of its input; a residual sum's gradient
// flows to both of its terms, so each branch's input gradient is added into the skip path's.
void Block::Backward(const kernels::Context& ctx, const BackwardWorkspace& ws) {
  void* dres = ws.dresidual.data();
  void* dnormed = ws.dnormed.data();
  void* dnorm_in = ws.dnorm_in.data();
  if (parallel_ && !ln2_) {  // one norm: its output's gradient is the sum of both branches'
    ffn_.Backward(ctx, ws, dres, dnormed);
    attn_.Backward(ctx, ws, dres, dnorm_in);  // reads d(out) before dres changes
    AddInto(ctx, dnormed, dnorm_in);
    ln1_.Backward(ctx, dnormed, dnorm_in);
    AddInto(ctx, dres, dnorm_in);
    return;
  }
  if (parallel_) {
    ffn_.Backward(ctx, ws, dres, dnormed);
    ln2_->Backward(ctx, dnormed, dnorm_in);
    attn_.Backward(ctx, ws, dres, dnormed);  // reads d(out) before dres changes
    AddInto(ctx, dres, dnorm_in);
    ln1_.Backward(ctx, dnormed, dnorm_in);
    AddInto(ctx, dres, dnorm_in);
    return;
  }
  switch (placement_) {
    case NormPlacement::kPre:
      ffn_.Backward(ctx, ws, dres, dnormed);
      ln2_->Backward(ctx, dnormed, dnorm_in);
      AddInto(ctx, dres, dnorm_in);  // d(mid)
      attn_.Backward(ctx, ws, dres, dnormed);
      ln1_.Backward(ctx, dnormed, dnorm_in);
      AddInto(ctx, dres, dnorm_in);  // d(x)
      break;
    case NormPlacement::kPost:
      ln2_->Backward(ctx, dres, dnorm_in);  // d(out)
      ffn_.Backward(ctx, ws, dnorm_in, dnormed);
      AddInto(ctx, dnorm_in, dnormed);     // d(h)
      ln1_.Backward(ctx, dnorm_in, dres);  // d(mid)
      attn_.Backward(ctx, ws, dres, dnormed);
      AddInto(ctx, dres, dnormed);  // d(x)
      break;
    case NormPlacement::kDouble:
      post_ffn_norm_->Backward(ctx, dres, dnorm_in);  // d(ffn branch)
      ffn_.Backward(ctx, ws, dnorm_in, dnormed);
      ln2_->Backward(ctx, dnormed, dnorm_in);
      AddInto(ctx, dres, dnorm_in);                    // d(mid)
      post_attn_norm_->Backward(ctx, dres, dnorm_in);  // d(attention branch)
      attn_.Backward(ctx, ws, dnorm_in, dnormed);
      ln1_.Backward(ctx, dnormed, dnorm_in);
      AddInto(ctx, dres, dnorm_in);  // d(x)
      break;
  }
}

int64_t Block::saved_bytes() const {
  if (n_ == 0) return 0;
  int64_t bytes = static_cast<int64_t>(out_.nbytes() + (mid_.defined() ? mid_.nbytes() : 0)) +
                  ln1_.saved_bytes() + (ln2_ ? ln2_->saved_bytes() : 0) + attn_.saved_bytes() +
                  ffn_.saved_bytes();
  if (placement_ == NormPlacement::kDouble) {
    bytes += static_cast<int64_t>(attn_branch_.nbytes() + ffn_branch_.nbytes()) +
             post_attn_norm_->saved_bytes() + post_ffn_norm_->saved_bytes();
  }
  return bytes;
}

void Block::VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const {
  ln1_.VisitParameters(prefix + ".ln1", visit);
  attn_.VisitParameters(prefix + ".attn", visit);
  if (post_attn_norm_) post_attn_norm_->VisitParameters(prefix + ".post_attn_norm", visit);
  if (ln2_) ln2_->VisitParameters(prefix + ".ln2", visit);
  ffn_.VisitParameters(prefix + ".ffn", visit);
  if (post_ffn_norm_) post_ffn_norm_->VisitParameters(prefix + ".post_ffn_norm", visit);
}

}  // namespace lmf::model
