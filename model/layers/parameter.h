// Parameter: a named trainable tensor, its gradient and the copy the forward reads, what kind of tensor it is
// (declared by the layer that owns it), and the visitor through which every layer exposes its parameters by
// name (the names are the checkpoint names; see tools/model/reference.py). A visited Parameter may be a view
// into a larger fused buffer (q/k/v projections share one matrix): write through it, don't keep it beyond
// the model's lifetime.
//
// Precision: `value` is the fp32 master copy and `grad` its fp32 gradient (the backward accumulates into
// it), both on the model's device. `compute` is what the forward and backward read: for f32 activations it
// is the same memory as `value`; for bf16 activations a separate bf16 tensor that LanguageModel's
// RefreshComputeWeights (or an optimizer writing the bf16 copy itself) keeps equal to `value` rounded.
//
// Kind: the layer says what each parameter is; the model's init scheme and muP read the kind, never the name
// (init.h). A new layer declares its parameters' kinds and inherits every scheme.
#ifndef LMFORGE_MODEL_LAYERS_PARAMETER_H_
#define LMFORGE_MODEL_LAYERS_PARAMETER_H_

#include <cstdint>
#include <functional>
#include <string>

#include "kernels/core/context.h"
#include "kernels/core/tensor.h"

namespace lmf::model {

enum class ParameterKind {
  kMatrix,          // a linear layer's weight (OUT, IN) reading the residual stream or a hidden width
  kResidualMatrix,  // a linear weight whose output is added into the residual stream (attention's output
                    // projection, the feed-forward's down projection): GPT-2 scales its init by 1/sqrt(2L)
  kOutputMatrix,    // the LM head (V, C), or the token table it reads when tied: muP's output layer
  kEmbedding,       // a lookup table (token or position rows): its fan-in is not the model's width
  kBias,            // initialised to 0
  kGain,            // a norm's gain, initialised to 1
};

const char* ParameterKindName(ParameterKind kind);

struct Parameter {
  kernels::Tensor value;    // f32, contiguous, on the model's device
  kernels::Tensor grad;     // f32, same shape and device; backward accumulates into it
  kernels::Tensor compute;  // same shape, the activation dtype; aliases `value` when that is f32
  ParameterKind kind = ParameterKind::kMatrix;
  // Held by one rank of each expert-parallel group (a block of a mixture of experts' experts): its gradient
  // is summed over the data-parallel ranks that hold the same block, not over every rank.
  bool expert_shard = false;

  // Zero-filled value, grad and compute on ctx's device (memory from ctx.allocator); compute has dtype
  // `compute_dtype` and shares value's memory when that is f32.
  static Parameter Zeros(const kernels::Shape& shape, ParameterKind kind, const kernels::Context& ctx,
                         kernels::DType compute_dtype);
  // Rows [row, row + rows) of dimension 0 of value, grad and compute, of the same kind.
  Parameter Rows(int64_t row, int64_t rows) const;
  // The master weights and their gradient as float*: host pointers on a CPU model, device pointers on a
  // CUDA model (never dereference those on the host).
  float* data() const { return value.data<float>(); }
  float* grad_data() const { return grad.data<float>(); }
};

using ParameterVisitor = std::function<void(const std::string& name, const Parameter& parameter)>;

// Counters a model keeps about the work it ran, for the accounting tests and benchmarks.
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
