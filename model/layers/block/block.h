// Block: one transformer block, composing a token mixer f and a channel mixer g (layer.h) with the norms in
// the structure the config names (ModelConfig::norm_placement and parallel_block):
//   pre       h = x + f(ln1(x));                 out = h + g(ln2(h))
//   post      h = ln1(x + f(x));                 out = ln2(h + g(h))
//   double    h = x + post_attn_norm(f(ln1(x))); out = h + post_ffn_norm(g(ln2(h)))
//   parallel  out = x + f(ln1(x)) + g(ln2(x))    (parallel_shared_norm: out = x + f(ln1(x)) + g(ln1(x)))
// No step state: a BlockActivations (one per micro-batch, owned by the caller) holds the residual stream
// between the halves (N, C; not for parallel), the residual sum at the end (N, C; post: ln2's input, its
// output is the block's), the two branch outputs before their norms (double), the norms' outputs and
// statistics and the mixers' own activations. The block input x belongs to the caller (the previous block's
// output or the embedding), kept until the backward. Backward updates the residual gradient in place (the
// gradient of the block output on entry, of the block input on return); parameter gradients accumulate.
// Incremental decoding: Forward with a decode state fills it for positions [0, T); Decode runs one token per
// sequence through the same norms and mixers with N = B rows.
#ifndef LMFORGE_MODEL_LAYERS_BLOCK_BLOCK_H_
#define LMFORGE_MODEL_LAYERS_BLOCK_BLOCK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/layer.h"
#include "model/layers/norm/norm.h"
#include "model/layers/parameter.h"

namespace lmf::model {

struct BlockActivations {
  int64_t b = 0, t = 0;
  kernels::Tensor mid, out;                    // (N, C): the residual between the halves; at the end
  kernels::Tensor token_branch, channel_branch;  // (N, C): each branch's output before its norm (double)
  NormActivations ln1, ln2, post_attn_norm, post_ffn_norm;
  std::unique_ptr<LayerActivations> token, channel;
  const void* output = nullptr;  // the block's output: out, or ln2's output for post-norm

  // Bytes kept for the backward (everything above; the block's input is the caller's).
  int64_t bytes() const;
  // Frees what only the backward needs, keeping the block's output (the next block's input): activation
  // recomputation runs Forward again from the block's input before the backward.
  void ReleaseAllButOutput();
};

class Block {
 public:
  // Norms on ctx's device; activations of type `dtype`; the mixers built for this layer (mixers.h).
  Block(const ModelConfig& config, std::unique_ptr<TokenMixer> token_mixer,
        std::unique_ptr<ChannelMixer> channel_mixer, const kernels::Context& ctx, kernels::DType dtype);

  std::unique_ptr<BlockActivations> NewActivations() const;
  // x (B*T, C) -> saved.output (B*T, C); the channel mixer runs in `mode`. With `fill`, the token mixer
  // writes positions [0, T) into it.
  void Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* x, BlockActivations& saved,
               const ForwardMode& mode, DecodeState* fill = nullptr) const;
  // x (B, C): one token per sequence at `position` (TokenMixer::Decode), in evaluation -> saved.output (B, C).
  void Decode(const kernels::Context& ctx, int64_t b, int64_t position, const int32_t* device_position,
              const void* x, DecodeState& state, BlockActivations& saved) const;
  // dresidual (B*T, C): d(output) on entry, d(x) on return; x and saved as in the Forward.
  void Backward(const kernels::Context& ctx, const void* x, const BlockActivations& saved, void* dresidual,
                Scratch& scratch) const;

  const TokenMixer& token_mixer() const { return *token_mixer_; }
  const ChannelMixer& channel_mixer() const { return *channel_mixer_; }
  // Visits "<prefix>.ln1.*", "<prefix>.attn.*" (the token mixer), ("<prefix>.post_attn_norm.*"),
  // "<prefix>.ln2.*" (not with a shared parallel norm), "<prefix>.ffn.*" (the channel mixer),
  // ("<prefix>.post_ffn_norm.*": double only).
  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const;

  // The block's own parameters (its norms) and the bytes per token it keeps itself (norm outputs and
  // statistics, the residual tensors), without the mixers'.
  static int64_t NormParameters(const ModelConfig& config);
  static int64_t SavedBytesPerToken(const ModelConfig& config, kernels::DType dtype);

 private:
  // The block's structure over n rows, with `attend(h, out, accumulate)` running the token mixer.
  template <typename Attend>
  void Run(const kernels::Context& ctx, int64_t b, int64_t t, const void* x, BlockActivations& saved,
           const ForwardMode& mode, const Attend& attend) const;
  void Resize(const kernels::Context& ctx, int64_t b, int64_t t, BlockActivations& saved) const;
  // dst += src over n rows of C.
  void AddInto(const kernels::Context& ctx, int64_t n, void* dst, const void* src) const;

  int64_t c_;
  kernels::DType dtype_;
  NormPlacement placement_;
  bool parallel_;
  Norm ln1_;
  std::optional<Norm> ln2_;                             // absent with a shared parallel norm
  std::optional<Norm> post_attn_norm_, post_ffn_norm_;  // double only
  std::unique_ptr<TokenMixer> token_mixer_;
  std::unique_ptr<ChannelMixer> channel_mixer_;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_BLOCK_BLOCK_H_
