// Block: one transformer block in the structure the config names (ModelConfig::norm_placement and
// parallel_block; f: attention, g: feed-forward):
//   pre       h = x + f(ln1(x));                 out = h + g(ln2(h))
//   post      h = ln1(x + f(x));                 out = ln2(h + g(h))
//   double    h = x + post_attn_norm(f(ln1(x))); out = h + post_ffn_norm(g(ln2(h)))
//   parallel  out = x + f(ln1(x)) + g(ln2(x))    (parallel_shared_norm: out = x + f(ln1(x)) + g(ln1(x)))
// Step state, in the activation dtype on the model's device: the residual stream between the halves (N, C;
// not for parallel), the residual sum at the end (N, C; post: ln2's input, its output is the block's), the
// two branch outputs before their norms (double), plus what the norms, attention and feed-forward keep.
// Backward updates the residual gradient in place (the gradient of the block output on entry, of the block
// input on return); parameter gradients accumulate.
// Incremental decoding: Forward with a LayerKvCache fills it for positions [0, T) (see attention.h); Decode
// runs one token per sequence through the same norms, attention (over the cache) and feed-forward with
// N = B rows, replacing the step state (Backward needs a new Forward after it).
#ifndef LMFORGE_MODEL_LAYERS_BLOCK_H_
#define LMFORGE_MODEL_LAYERS_BLOCK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/attention.h"
#include "model/layers/feed_forward.h"
#include "model/layers/norm.h"
#include "model/layers/parameter.h"

namespace lmf::model {

class Block {
 public:
  // Parameters on ctx's device; activations of type `dtype`.
  Block(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype, StepCounters* counters);

  // x (B*T, C), owned by the caller and kept until Backward -> output() (B*T, C). With `cache`, the keys and
  // values of positions [0, T) are written into it.
  void Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* x,
               LayerKvCache* cache = nullptr);
  // x (B, C): one token per sequence at `position` (see Attention::Decode) -> output() (B, C).
  void Decode(const kernels::Context& ctx, int64_t b, int64_t position, const int32_t* device_position,
              const void* x, LayerKvCache& cache);
  const void* output() const;
  // ws.dresidual: d(output) on entry, d(x) on return.
  void Backward(const kernels::Context& ctx, const BackwardWorkspace& ws);

  int64_t saved_bytes() const;
  // Visits "<prefix>.ln1.*", "<prefix>.attn.*", ("<prefix>.post_attn_norm.*"), "<prefix>.ln2.*" (not with
  // a shared parallel norm), "<prefix>.ffn.*", ("<prefix>.post_ffn_norm.*": double only).
  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const;

 private:
  // The block's structure over n rows, with `attend(h, out, accumulate)` running the attention branch.
  template <typename Attend>
  void Run(const kernels::Context& ctx, int64_t n, const void* x, const Attend& attend);
  void CopyRows(const kernels::Context& ctx, kernels::Tensor& dst, const void* src) const;
  // dst += src over the step's (N, C).
  void AddInto(const kernels::Context& ctx, void* dst, const void* src) const;

  int64_t c_;
  kernels::DType dtype_;
  NormPlacement placement_;
  bool parallel_;
  Norm ln1_;
  std::optional<Norm> ln2_;                             // absent with a shared parallel norm
  std::optional<Norm> post_attn_norm_, post_ffn_norm_;  // double only
  Attention attn_;
  FeedForward ffn_;
  // Step state.
  int64_t n_ = 0;
  kernels::Tensor mid_, out_, attn_branch_, ffn_branch_;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_BLOCK_H_
