// FeedForward: SwiGLU (w2(silu(w1 x) * w3 x)), GELU-tanh or ReLU (w2(act(w1 x))). For SwiGLU, w1 and w3 are
// row blocks of one fused (2*d_ff, C) matrix (visited as ffn.w1 and ffn.w3), so one GEMM makes both.
// Step state: the pre-activations (N, d_ff or 2*d_ff) and the activation output (N, d_ff), in the activation
// dtype on the model's device. Forward adds its output into the residual stream (or writes it, for a block
// that norms the branch first); Backward writes the gradient of the normed input; parameter
// gradients accumulate.
#ifndef LMFORGE_MODEL_LAYERS_FEED_FORWARD_H_
#define LMFORGE_MODEL_LAYERS_FEED_FORWARD_H_

#include <cstdint>
#include <string>

#include "kernels/activations/activations.h"
#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/linear.h"
#include "model/layers/parameter.h"

namespace lmf::model {

class FeedForward {
 public:
  // Parameters on ctx's device; activations of type `dtype`.
  FeedForward(const ModelConfig& config, const kernels::Context& ctx, kernels::DType dtype, StepCounters* counters);

  // h (N, C) normed input; out (N, C) += ffn(h) (= when !accumulate).
  void Forward(const kernels::Context& ctx, int64_t n, const void* h, void* out, bool accumulate);
  // dresidual (N, C) -> dh (N, C) written.
  void Backward(const kernels::Context& ctx, const BackwardWorkspace& ws, const void* dresidual, void* dh);

  int64_t saved_bytes() const;
  // Visits "<prefix>.w1.*", ("<prefix>.w3.*" for SwiGLU and GeGLU), "<prefix>.w2.*".
  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const;

 private:
  // The activation: of the gate for SwiGLU (SiLU) and GeGLU (GELU-tanh), else of W1 x.
  kernels::Activation activation() const {
    return kind_ == FfnKind::kSwiGLU                             ? kernels::Activation::kSilu
           : kind_ == FfnKind::kGELU || kind_ == FfnKind::kGeGLU ? kernels::Activation::kGeluTanh
                                                                 : kernels::Activation::kRelu;
  }
  bool gated() const { return kind_ == FfnKind::kSwiGLU || kind_ == FfnKind::kGeGLU; }

  FfnKind kind_;
  int64_t c_, f_;
  kernels::DType dtype_;
  Linear in_, out_;  // in_: (d_ff or 2*d_ff, C); out_: (C, d_ff)
  // Step state.
  int64_t n_ = 0;
  const void* input_ = nullptr;
  kernels::Tensor pre_, act_;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_FEED_FORWARD_H_
