// FeedForward: the dense channel mixer. SwiGLU (w2(silu(w1 x) * w3 x)), GeGLU (w2(gelu_tanh(w1 x) * w3 x)),
// GELU-tanh or ReLU (w2(act(w1 x))) of hidden width d_ff (FeedForwardSpec in model/config/config.h). For the
// gated kinds, w1 and w3 are row blocks of one fused (2*d_ff, C) matrix (visited as ffn.w1 and ffn.w3), so
// one GEMM makes both. Saved for the backward (FeedForwardActivations): the pre-activations (N, d_ff or
// 2*d_ff) and the activation output (N, d_ff), in the activation dtype on the model's device.
#ifndef LMFORGE_MODEL_LAYERS_FEED_FORWARD_FEED_FORWARD_H_
#define LMFORGE_MODEL_LAYERS_FEED_FORWARD_FEED_FORWARD_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "kernels/activations/activations.h"
#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/layer.h"
#include "model/layers/linear/linear.h"
#include "model/layers/parameter.h"

namespace lmf::model {

// The activation of a feed-forward kind: of the gate for SwiGLU (SiLU) and GeGLU (GELU-tanh), else of W1 x
// (GELU-tanh, ReLU). The mixture of experts' experts use it too.
inline kernels::Activation FfnActivation(FfnKind kind) {
  return kind == FfnKind::kSwiGLU                            ? kernels::Activation::kSilu
         : kind == FfnKind::kGELU || kind == FfnKind::kGeGLU ? kernels::Activation::kGeluTanh
                                                             : kernels::Activation::kRelu;
}

struct FeedForwardActivations : LayerActivations {
  int64_t n = 0;
  kernels::Tensor pre;  // (N, d_ff or 2*d_ff) the pre-activations (gate | up for the gated kinds)
  kernels::Tensor act;  // (N, d_ff) the activation output, the down projection's input

  int64_t bytes() const override;
  void Release() override { *this = FeedForwardActivations(); }
};

class FeedForward final : public ChannelMixer {
 public:
  // Parameters on ctx's device; activations of type `dtype`. The model supplies d_model and biases.
  FeedForward(const FeedForwardSpec& spec, const ModelConfig& model, const kernels::Context& ctx,
              kernels::DType dtype, StepCounters* counters);

  std::unique_ptr<LayerActivations> NewActivations() const override;
  // The same in training and evaluation (`mode` is not read).
  void Forward(const kernels::Context& ctx, int64_t b, int64_t t, const void* h, void* out, bool accumulate,
               LayerActivations& saved, const ForwardMode& mode) const override;
  void Backward(const kernels::Context& ctx, const void* h, const LayerActivations& saved, const void* dout,
                void* dh, Scratch& scratch) const override;
  // Visits "<prefix>.w1.*", ("<prefix>.w3.*" for SwiGLU and GeGLU), "<prefix>.w2.*".
  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const override;

  // What a layer of this spec costs, from the config alone (model/accounting sums these over the layers).
  static int64_t Parameters(const FeedForwardSpec& spec, const ModelConfig& model);
  static double MatmulFlopsPerToken(const FeedForwardSpec& spec, const ModelConfig& model);  // forward
  static int64_t SavedBytesPerToken(const FeedForwardSpec& spec, kernels::DType dtype);
  static absl::Status CheckSupport(const FeedForwardSpec& spec, kernels::Device device, kernels::DType dtype);

 private:
  kernels::Activation activation() const { return FfnActivation(kind_); }
  bool gated() const { return kind_ == FfnKind::kSwiGLU || kind_ == FfnKind::kGeGLU; }

  FfnKind kind_;
  int64_t c_, f_;
  kernels::DType dtype_;
  Linear in_, out_;  // in_: (d_ff or 2*d_ff, C); out_: (C, d_ff)
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_FEED_FORWARD_FEED_FORWARD_H_
