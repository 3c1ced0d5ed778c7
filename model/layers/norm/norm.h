// Norm: RMSNorm or LayerNorm over the C channels of each token. No step state: the forward writes its output
// and fp32 per-token statistics (LayerNorm: mean and rstd; RMSNorm: rstd) into a NormActivations the caller
// owns (one per micro-batch), and the backward reads them with the input x, which the caller keeps. dx is
// written; the fp32 gain (and LayerNorm's bias) gradients accumulate.
#ifndef LMFORGE_MODEL_LAYERS_NORM_NORM_H_
#define LMFORGE_MODEL_LAYERS_NORM_NORM_H_

#include <cstdint>
#include <string>

#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/parameter.h"

namespace lmf::model {

// A norm's output (N, C) in the activation dtype and its fp32 statistics (N) (mean for LayerNorm only).
struct NormActivations {
  int64_t n = 0;
  kernels::Tensor out, mean, rstd;

  const void* output() const { return out.data(); }
  int64_t bytes() const;
  void Release() { *this = NormActivations(); }
};

class Norm {
 public:
  // Parameters on ctx's device; activations of type `dtype`.
  Norm(NormKind kind, int64_t channels, double eps, const kernels::Context& ctx, kernels::DType dtype);

  // x (N, C) -> saved.output() (N, C), sizing `saved` for N rows.
  void Forward(const kernels::Context& ctx, int64_t n, const void* x, NormActivations& saved) const;
  // dy (N, C) -> dx (N, C) written; x and saved as in the Forward.
  void Backward(const kernels::Context& ctx, const void* x, const NormActivations& saved, const void* dy,
                void* dx) const;

  // Statistics per row kept for the backward (LayerNorm: 2, RMSNorm: 1), and gain (+ bias) parameters.
  static int64_t Statistics(NormKind kind) { return kind == NormKind::kLayerNorm ? 2 : 1; }
  static int64_t Parameters(NormKind kind, int64_t channels) { return Statistics(kind) * channels; }

  // Visits "<prefix>.weight" and, for LayerNorm, "<prefix>.bias".
  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const;

 private:
  NormKind kind_;
  int64_t channels_;
  float eps_;
  kernels::DType dtype_;
  Parameter weight_, bias_;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_NORM_NORM_H_
