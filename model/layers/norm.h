// Norm: RMSNorm or LayerNorm over the C channels of each token. Step state: the output (N, C) in the
// activation dtype and the fp32 per-token statistics (LayerNorm: mean and rstd; RMSNorm: rstd), plus a view
// of the input, which the module that produced it owns. dx is written; the fp32 gain (and LayerNorm's bias)
// gradients accumulate.
#ifndef LMFORGE_MODEL_LAYERS_NORM_H_
#define LMFORGE_MODEL_LAYERS_NORM_H_

#include <cstdint>
#include <string>

#include "kernels/core/context.h"
#include "model/config/config.h"
#include "model/layers/parameter.h"

namespace lmf::model {

class Norm {
 public:
  // Parameters on ctx's device; activations of type `dtype`.
  Norm(NormKind kind, int64_t channels, double eps, const kernels::Context& ctx, kernels::DType dtype);

  // x (N, C) -> output() (N, C).
  void Forward(const kernels::Context& ctx, int64_t n, const void* x);
  // dy (N, C) -> dx (N, C) written.
  void Backward(const kernels::Context& ctx, const void* dy, void* dx) const;

  // (N, C) in the activation dtype on the model's device.
  const void* output() const { return out_.data(); }
  // Bytes of step state this module owns (output and statistics).
  int64_t saved_bytes() const;
  // Visits "<prefix>.weight" and, for LayerNorm, "<prefix>.bias".
  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const;

 private:
  NormKind kind_;
  int64_t channels_;
  float eps_;
  kernels::DType dtype_;
  Parameter weight_, bias_;
  // Step state.
  int64_t n_ = 0;
  const void* input_ = nullptr;
  kernels::Tensor out_, mean_, rstd_;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_NORM_H_
