// Linear: y (N, OUT) = x (N, IN) W^T + b with W stored (OUT, IN) as in torch.nn.Linear (kernels/matmul). No
// step state: the caller keeps x (the layer that produced it owns it) and passes it again to Backward. x, y,
// dx and dy are in the activation dtype on the model's device; the forward reads the weights' compute
// copies; dx is written, dW and db (fp32) accumulate.
#ifndef LMFORGE_MODEL_LAYERS_LINEAR_LINEAR_H_
#define LMFORGE_MODEL_LAYERS_LINEAR_LINEAR_H_

#include <cstdint>
#include <string>

#include "kernels/core/context.h"
#include "kernels/matmul/matmul.h"
#include "model/layers/deferred_weight_grads.h"
#include "model/layers/parameter.h"

namespace lmf::model {

class Linear {
 public:
  // A fresh (OUT, IN) weight of `kind` (and OUT bias) owned by this layer on ctx's device, with activations
  // of type `dtype`, or a layer over an existing weight (the tied LM head reads the token embedding).
  Linear(int64_t in, int64_t out, bool bias, ParameterKind kind, const kernels::Context& ctx,
         kernels::DType dtype, StepCounters* counters);
  Linear(const Parameter& weight, kernels::DType dtype, StepCounters* counters);

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  const Parameter& weight() const { return weight_; }
  const Parameter* bias() const { return has_bias_ ? &bias_ : nullptr; }

  // x (N, IN) rows at stride ldx -> y (N, OUT) at stride ldy; `accumulate` adds to y instead. An epilogue
  // (GELU-tanh, saving the pre-activation at stride ldy) runs in the same GEMM where the backend fuses it.
  void Forward(const kernels::Context& ctx, int64_t n, const void* x, int64_t ldx, void* y, int64_t ldy,
               bool accumulate, const kernels::MatmulEpilogueParams& epilogue = {}) const;
  // dy (N, OUT) at stride ldy -> dx (N, IN) written at stride ldx like x (skipped if null); dW, db
  // accumulated, or with `deferred` queued there (with a copy of dy; x must stay unchanged until it runs).
  void Backward(const kernels::Context& ctx, int64_t n, const void* x, int64_t ldx, const void* dy, int64_t ldy,
                void* dx, DeferredWeightGrads* deferred = nullptr) const;

  // Visits "<prefix>.weight" and "<prefix>.bias".
  void VisitParameters(const std::string& prefix, const ParameterVisitor& visit) const;

 private:
  kernels::MatmulParams Params(int64_t n, const void* x, int64_t ldx, void* y, int64_t ldy) const;

  int64_t in_, out_;
  bool has_bias_;
  kernels::DType dtype_;
  Parameter weight_, bias_;
  StepCounters* counters_;
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_LINEAR_LINEAR_H_
