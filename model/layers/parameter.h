// Parameter: a named trainable tensor, its gradient and the copy the forward reads, and the visitor through
// which every module exposes its parameters by name (the names are the checkpoint names; see
// tools/model/reference.py for the list). A visited Parameter may be a view into a larger fused buffer
// (q/k/v projections share one matrix): write through it, don't keep it beyond the model's lifetime.
//
// Precision: `value` is the fp32 master copy and `grad` its fp32 gradient (the backward accumulates into
// it), both on the model's device. `compute` is what the forward and backward read: for f32 activations it
// is the same memory as `value`; for bf16 activations a separate bf16 tensor that LanguageModel's
// RefreshComputeWeights (or an optimizer writing the bf16 copy itself) keeps equal to `value` rounded.
#ifndef LMFORGE_MODEL_LAYERS_PARAMETER_H_
#define LMFORGE_MODEL_LAYERS_PARAMETER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "kernels/core/context.h"
#include "kernels/core/tensor.h"

namespace lmf::model {

struct Parameter {
  kernels::Tensor value;    // f32, contiguous, on the model's device
  kernels::Tensor grad;     // f32, same shape and device; backward accumulates into it
  kernels::Tensor compute;  // same shape, the activation dtype; aliases `value` when that is f32

  // Zero-filled value, grad and compute on ctx's device (memory from ctx.allocator); compute has dtype
  // `compute_dtype` and shares value's memory when that is f32.
  static Parameter Zeros(const kernels::Shape& shape, const kernels::Context& ctx, kernels::DType compute_dtype);
  // Rows [row, row + rows) of dimension 0 of value, grad and compute.
  Parameter Rows(int64_t row, int64_t rows) const;
  // The master weights and their gradient as float*: host pointers on a CPU model, device pointers on a
  // CUDA model (never dereference those on the host).
  float* data() const { return value.data<float>(); }
  float* grad_data() const { return grad.data<float>(); }
};

using ParameterVisitor = std::function<void(const std::string& name, const Parameter& parameter)>;

// Activation-gradient scratch shared by the blocks of one model during its backward (rows are tokens N),
// in the activation dtype on the model's device.
struct BackwardWorkspace {
  kernels::Tensor dresidual;  // (N, C) gradient of the residual stream, updated in place block by block
  kernels::Tensor dnormed;    // (N, C) gradient of a norm's output
  kernels::Tensor dnorm_in;   // (N, C) gradient of a norm's input
  kernels::Tensor dattn;      // (N, NH*HS) gradient of the attention output
  kernels::Tensor dqkv;       // (N, (NH+2*NKV)*HS)
  kernels::Tensor dact;       // (N, d_ff) gradient of the activation output
  kernels::Tensor dpre;       // (N, d_ff or 2*d_ff) gradient of the feed-forward pre-activations
  kernels::Tensor dqk_norm;   // (N, NH*HS) gradient of the q or k heads before QK-norm (QK-norm only)
};

// Counters a model keeps about its last step, for the accounting tests and benchmarks.
struct StepCounters {
  double matmul_flops = 0;     // 2*M*N*K of every GEMM run (forward and backward)
  double attention_flops = 0;  // Q K^T and P V over the causal triangle, forward and backward
};

// `data` advanced by `elements` elements of `dtype` (for column offsets into fused, type-erased buffers).
inline void* ElementOffset(void* data, int64_t elements, kernels::DType dtype) {
  return static_cast<char*>(data) + elements * static_cast<int64_t>(kernels::DTypeSize(dtype));
}
inline const void* ElementOffset(const void* data, int64_t elements, kernels::DType dtype) {
  return static_cast<const char*>(data) + elements * static_cast<int64_t>(kernels::DTypeSize(dtype));
}

}  // namespace lmf::model

#endif  // LMFORGE_MODEL_LAYERS_PARAMETER_H_
