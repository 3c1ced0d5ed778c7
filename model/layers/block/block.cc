// Transformer block (pre, post or double norm, or parallel) over a token mixer and a channel mixer, for
// training (Forward/Backward) and for decoding with a decode state.
#include "model/layers/block/block.h"

#include <utility>

#include "kernels/core/tensor.h"
#include "kernels/memory/memory.h"
#include "kernels/residual/residual.h"

namespace lmf::model {

int64_t BlockActivations::bytes() const {
  if (b == 0) return 0;
  int64_t total = HeldBytes(out) + HeldBytes(mid) + HeldBytes(token_branch) + HeldBytes(channel_branch);
  total += ln1.bytes() + ln2.bytes() + post_attn_norm.bytes() + post_ffn_norm.bytes();
  return total + token->bytes() + channel->bytes();
}

void BlockActivations::ReleaseAllButOutput() {
  const bool post = ln2.n > 0 && output == ln2.output();  // post-norm: the output is ln2's
  mid = token_branch = channel_branch = kernels::Tensor();
  if (post) out = kernels::Tensor();
  ln1.Release(), post_attn_norm.Release(), post_ffn_norm.Release();
  if (!post) ln2.Release();
  token->Release();
  channel->Release();
}

Block::Block(const ModelConfig& config, std::unique_ptr<TokenMixer> token_mixer,
             std::unique_ptr<ChannelMixer> channel_mixer, const kernels::Context& ctx, kernels::DType dtype)
    : c_(config.d_model),
      dtype_(dtype),
      placement_(config.norm_placement),
      parallel_(config.parallel_block),
      ln1_(config.norm, config.d_model, config.norm_eps, ctx, dtype),
      token_mixer_(std::move(token_mixer)),
      channel_mixer_(std::move(channel_mixer)) {
  if (!(config.parallel_block && config.parallel_shared_norm))
    ln2_.emplace(config.norm, config.d_model, config.norm_eps, ctx, dtype);
  if (placement_ == NormPlacement::kDouble) {
    post_attn_norm_.emplace(config.norm, config.d_model, config.norm_eps, ctx, dtype);
    post_ffn_norm_.emplace(config.norm, config.d_model, config.norm_eps, ctx, dtype);
  }
}

std::unique_ptr<BlockActivations> Block::NewActivations() const {
  auto saved = std::make_unique<BlockActivations>();
  saved->token = token_mixer_->NewActivations();
  saved->channel = channel_mixer_->NewActivations();
  return saved;
}

void Block::AddInto(const kernels::Context& ctx, int64_t n, void* dst, const void* src) const {
  kernels::ResidualBackwardParams add;  // da += dout: the residual add's backward is an accumulate
  add.dtype = dtype_;
  add.n = n * c_, add.dout = src, add.da = dst;
  kernels::ResidualBackward(ctx, add);
}

void Block::Resize(const kernels::Context& ctx, int64_t b, int64_t t, BlockActivations& saved) const {
  const bool reshaped = b * t != saved.b * saved.t;
  const auto rows = [&](kernels::Tensor& tensor) {
    if (reshaped || !tensor.defined()) tensor = kernels::Tensor::Empty({b * t, c_}, dtype_, ctx.allocator);
  };
  rows(saved.out);
  if (!parallel_) rows(saved.mid);
  if (placement_ == NormPlacement::kDouble) rows(saved.token_branch), rows(saved.channel_branch);
  saved.b = b;
  saved.t = t;
  saved.output = placement_ == NormPlacement::kPost ? nullptr : saved.out.data();  // post: set by ln2 below
}

template <typename Attend>
void Block::Run(const kernels::Context& ctx, int64_t b, int64_t t, const void* x, BlockActivations& saved,
                const ForwardMode& mode, const Attend& attend) const {
  Resize(ctx, b, t, saved);
  const int64_t n = b * t;
  const auto copy = [&](kernels::Tensor& dst, const void* src) {
    kernels::CopyOnDevice(ctx, dst.data(), src, dst.nbytes());
  };
  const ChannelMixer& mlp = *channel_mixer_;
  if (parallel_) {  // out = x + f(ln1(x)) + g(ln2(x)), or + g(ln1(x)) with a shared norm
    ln1_.Forward(ctx, n, x, saved.ln1);
    if (ln2_) ln2_->Forward(ctx, n, x, saved.ln2);
    copy(saved.out, x);
    attend(saved.ln1.output(), saved.out.data(), /*accumulate=*/true);
    mlp.Forward(ctx, b, t, ln2_ ? saved.ln2.output() : saved.ln1.output(), saved.out.data(), /*accumulate=*/true,
                *saved.channel, mode);
    return;
  }
  switch (placement_) {
    case NormPlacement::kPre:  // mid = x + f(ln1(x)); out = mid + g(ln2(mid))
      ln1_.Forward(ctx, n, x, saved.ln1);
      copy(saved.mid, x);
      attend(saved.ln1.output(), saved.mid.data(), /*accumulate=*/true);
      ln2_->Forward(ctx, n, saved.mid.data(), saved.ln2);
      copy(saved.out, saved.mid.data());
      mlp.Forward(ctx, b, t, saved.ln2.output(), saved.out.data(), /*accumulate=*/true, *saved.channel, mode);
      break;
    case NormPlacement::kPost:  // mid = x + f(x); h = ln1(mid); out = h + g(h); output ln2(out)
      copy(saved.mid, x);
      attend(x, saved.mid.data(), /*accumulate=*/true);
      ln1_.Forward(ctx, n, saved.mid.data(), saved.ln1);
      copy(saved.out, saved.ln1.output());
      mlp.Forward(ctx, b, t, saved.ln1.output(), saved.out.data(), /*accumulate=*/true, *saved.channel, mode);
      ln2_->Forward(ctx, n, saved.out.data(), saved.ln2);
      saved.output = saved.ln2.output();
      break;
    case NormPlacement::kDouble: {  // mid = x + pa(f(ln1(x))); out = mid + pf(g(ln2(mid)))
      kernels::ResidualForwardParams add;
      add.dtype = dtype_;
      add.n = n * c_;
      ln1_.Forward(ctx, n, x, saved.ln1);
      attend(saved.ln1.output(), saved.token_branch.data(), /*accumulate=*/false);
      post_attn_norm_->Forward(ctx, n, saved.token_branch.data(), saved.post_attn_norm);
      add.a = x, add.b = saved.post_attn_norm.output(), add.out = saved.mid.data();
      kernels::ResidualForward(ctx, add);
      ln2_->Forward(ctx, n, saved.mid.data(), saved.ln2);
      mlp.Forward(ctx, b, t, saved.ln2.output(), saved.channel_branch.data(), /*accumulate=*/false,
                  *saved.channel, mode);
      post_ffn_norm_->Forward(ctx, n, saved.channel_branch.data(), saved.post_ffn_norm);
      add.a = saved.mid.data(), add.b = saved.post_ffn_norm.output(), add.out = saved.out.data();
      kernels::ResidualForward(ctx, add);
      break;
    }
  }
}

void Block::Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* x, BlockActivations& saved,
                    const ForwardMode& mode, DecodeState* fill) const {
  Run(ctx, b, t, x, saved, mode, [&](const void* h, void* out, bool accumulate) {
    token_mixer_->Forward(ctx, b, t, h, out, accumulate, *saved.token, fill);
  });
}

void Block::Decode(const kernels::Context& ctx, int64_t b, int64_t position, const int32_t* device_position,
                   const void* x, DecodeState& state, BlockActivations& saved) const {
  Run(ctx, b, 1, x, saved, ForwardMode(), [&](const void* h, void* out, bool accumulate) {
    token_mixer_->Decode(ctx, b, position, device_position, h, out, accumulate, state, *saved.token);
  });
}

// dres holds d(output) on entry and d(x) on return; dnormed and dnorm_in are scratch. Each branch's
// Backward reads the gradient of its output and writes the gradient of its input; a residual sum's gradient
// flows to both of its terms, so each branch's input gradient is added into the skip path's.
void Block::Backward(const kernels::Context& ctx, const void* x, const BlockActivations& saved, void* dres,
                     Scratch& scratch) const {
  const int64_t n = saved.b * saved.t;
  void* dnormed = scratch.Take({n, c_}, dtype_).data();
  void* dnorm_in = scratch.Take({n, c_}, dtype_).data();
  const TokenMixer& attn = *token_mixer_;
  const ChannelMixer& mlp = *channel_mixer_;
  const LayerActivations& attn_saved = *saved.token;
  const LayerActivations& mlp_saved = *saved.channel;
  if (parallel_ && !ln2_) {  // one norm: its output's gradient is the sum of both branches'
    const void* h = saved.ln1.output();
    mlp.Backward(ctx, h, mlp_saved, dres, dnormed, scratch);
    attn.Backward(ctx, h, attn_saved, dres, dnorm_in, scratch);  // reads d(out) before dres changes
    AddInto(ctx, n, dnormed, dnorm_in);
    ln1_.Backward(ctx, x, saved.ln1, dnormed, dnorm_in);
    AddInto(ctx, n, dres, dnorm_in);
    return;
  }
  if (parallel_) {
    mlp.Backward(ctx, saved.ln2.output(), mlp_saved, dres, dnormed, scratch);
    ln2_->Backward(ctx, x, saved.ln2, dnormed, dnorm_in);
    attn.Backward(ctx, saved.ln1.output(), attn_saved, dres, dnormed, scratch);  // reads d(out) before dres changes
    AddInto(ctx, n, dres, dnorm_in);
    ln1_.Backward(ctx, x, saved.ln1, dnormed, dnorm_in);
    AddInto(ctx, n, dres, dnorm_in);
    return;
  }
  switch (placement_) {
    case NormPlacement::kPre:
      mlp.Backward(ctx, saved.ln2.output(), mlp_saved, dres, dnormed, scratch);
      ln2_->Backward(ctx, saved.mid.data(), saved.ln2, dnormed, dnorm_in);
      AddInto(ctx, n, dres, dnorm_in);  // d(mid)
      attn.Backward(ctx, saved.ln1.output(), attn_saved, dres, dnormed, scratch);
      ln1_.Backward(ctx, x, saved.ln1, dnormed, dnorm_in);
      AddInto(ctx, n, dres, dnorm_in);  // d(x)
      break;
    case NormPlacement::kPost:
      ln2_->Backward(ctx, saved.out.data(), saved.ln2, dres, dnorm_in);  // d(out)
      mlp.Backward(ctx, saved.ln1.output(), mlp_saved, dnorm_in, dnormed, scratch);
      AddInto(ctx, n, dnorm_in, dnormed);                                  // d(h)
      ln1_.Backward(ctx, saved.mid.data(), saved.ln1, dnorm_in, dres);   // d(mid)
      attn.Backward(ctx, x, attn_saved, dres, dnormed, scratch);
      AddInto(ctx, n, dres, dnormed);  // d(x)
      break;
    case NormPlacement::kDouble:
      post_ffn_norm_->Backward(ctx, saved.channel_branch.data(), saved.post_ffn_norm, dres, dnorm_in);
      mlp.Backward(ctx, saved.ln2.output(), mlp_saved, dnorm_in, dnormed, scratch);
      ln2_->Backward(ctx, saved.mid.data(), saved.ln2, dnormed, dnorm_in);
      AddInto(ctx, n, dres, dnorm_in);  // d(mid)
      post_attn_norm_->Backward(ctx, saved.token_branch.data(), saved.post_attn_norm, dres, dnorm_in);
      attn.Backward(ctx, saved.ln1.output(), attn_saved, dnorm_in, dnormed, scratch);
      ln1_.Backward(ctx, x, saved.ln1, dnormed, dnorm_in);
      AddInto(ctx, n, dres, dnorm_in);  // d(x)
      break;
  }
}

void Block::VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const {
  ln1_.VisitParameters(prefix + ".ln1", visit);
  token_mixer_->VisitParameters(prefix + ".attn", visit);
  if (post_attn_norm_) post_attn_norm_->VisitParameters(prefix + ".post_attn_norm", visit);
  if (ln2_) ln2_->VisitParameters(prefix + ".ln2", visit);
  channel_mixer_->VisitParameters(prefix + ".ffn", visit);
  if (post_ffn_norm_) post_ffn_norm_->VisitParameters(prefix + ".post_ffn_norm", visit);
}

int64_t Block::NormParameters(const ModelConfig& config) {
  return config.norms_per_block() * Norm::Parameters(config.norm, config.d_model);
}

int64_t Block::SavedBytesPerToken(const ModelConfig& config, kernels::DType dtype) {
  const int64_t c = config.d_model;
  // Every norm's output and statistics; the residual sum at the end (post: ln2's input); the residual
  // between the halves (not parallel; post: ln1's input); each branch's output before its norm (double).
  int64_t values = config.norms_per_block() * c + c;
  if (!config.parallel_block) values += c;
  if (config.norm_placement == NormPlacement::kDouble) values += 2 * c;
  const int64_t statistics = config.norms_per_block() * Norm::Statistics(config.norm);
  return values * static_cast<int64_t>(kernels::DTypeSize(dtype)) + 4 * statistics;
}

}  // namespace lmf::model
