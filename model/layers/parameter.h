// Parameter: a named trainable tensor and its gradient, and the visitor through which every module exposes
// its parameters by name (the names are the checkpoint names; see tools/model/reference.py for the list).
// A visited Parameter may be a view into a larger fused buffer (q/k/v projections share one matrix): write
// through it, don't keep it beyond the model's lifetime.
#ifndef LMFORGE_MODEL_LAYERS_PARAMETER_H_
#define LMFORGE_MODEL_LAYERS_PARAMETER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "kernels/core/tensor.h"

namespace lmf::model {

struct Parameter {
  kernels::Tensor value;  // f32, contiguous
  kernels::Tensor grad;   // same shape; backward accumulates into it

  static Parameter Zeros(const kernels::Shape& shape);
  // Rows [row, row + rows) of dimension 0 of both value and grad.
  Parameter Rows(int64_t row, int64_t rows) const;
  float* data() const { return value.data<float>(); }
  float* grad_data() const { return grad.data<float>(); }
};

using ParameterVisitor = std::function<void(const std::string& name, const Parameter& parameter)>;

// Activation-gradient scratch shared by the blocks of one model during its backward (rows are tokens N).
struct BackwardWorkspace {
  kernels::Tensor dresidual;  // (N, C) gradient of the residual stream, updated in place block by block
  kernels::Tensor dnormed;    // (N, C) gradient of a norm's output
  kernels::Tensor dnorm_in;   // (N, C) gradient of a norm's input
  kernels::Tensor dattn;      // (N, NH*HS) gradient of the attention output
  kernels::Tensor dqkv;       // (N, (NH+2*NKV)*HS)
  kernels::Tensor dact;       // (N, d_ff) gradient of the activation output
  kernels::Tensor dpre;       // (N, d_ff or 2*d_ff) gradient of the feed-forward pre-activations
};

// Counters a model keeps about its last step, for the accounting tests and benchmarks.
struct StepCounters {
  double matmul_flops = 0;     // 2*M*N*K of every GEMM run (forward and backward)
  double attention_flops = 0;  // Q K^T and P V over the causal triangle, forward and backward
};

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_PARAMETER_H_
