// Norm: RMSNorm or LayerNorm over the C channels of each token. Step state: the output (N, C) and the
// per-token statistics (LayerNorm: mean and rstd; RMSNorm: rstd), plus a view of the input, which the
// module that produced it owns. dx is written; the gain (and LayerNorm's bias) gradients accumulate.
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
  Norm(NormKind kind, int64_t channels, double eps);

  // x (N, C) -> output() (N, C).
  void Forward(const kernels::Context& ctx, int64_t n, const float* x);
  // dy (N, C) -> dx (N, C) written.
  void Backward(const kernels::Context& ctx, const float* dy, float* dx) const;

  const float* output() const { return out_.data<float>(); }
  // Bytes of step state this module owns (output and statistics).
  int64_t saved_bytes() const;
  // Visits "<prefix>.weight" and, for LayerNorm, "<prefix>.bias".
  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const;

 private:
  NormKind kind_;
  int64_t channels_;
  float eps_;
  Parameter weight_, bias_;
  // Step state.
  int64_t n_ = 0;
  const float* input_ = nullptr;
  kernels::Tensor out_, mean_, rstd_;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_NORM_H_
