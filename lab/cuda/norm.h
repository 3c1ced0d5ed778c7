// CUDA RMSNorm and LayerNorm (forward, backward) and the fused residual-add + norm forward, fp32 and bf16.
// Same params structs and semantics as kernels/rmsnorm/rmsnorm.h and kernels/layernorm/layernorm.h:
// forward saves rstd (and mean), backward writes dx (=) and accumulates dweight/dbias (+=).
// dtype kBF16: x, weight, bias, out, dout, dx are bf16; all math and the saved statistics are fp32;
// dweight and dbias (parameter gradients) are fp32 whatever the dtype (they feed fp32 master weights).
// dweight/dbias are reduced deterministically (fixed row chunks, then a fixed-order sum over chunks), with
// scratch from ctx.allocator.
#ifndef LMFORGE_LAB_CUDA_NORM_H_
#define LMFORGE_LAB_CUDA_NORM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/rmsnorm/rmsnorm.h"

namespace lmf::kernels::cuda {

// residual_out = residual + x (rounded to dtype), then out = RMSNorm(residual_out): one read of each input,
// the transformer block's "add the branch, normalise for the next one" step.
struct ResidualRmsNormForwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0, C = 0;
  float eps = 1e-5f;
  const void* residual = nullptr;  // (N, C)
  const void* x = nullptr;         // (N, C), the branch output
  void* residual_out = nullptr;    // (N, C), may alias residual
  const void* weight = nullptr;    // (C)
  void* out = nullptr;             // (N, C)
  float* rstd = nullptr;           // (N) or null
};

struct ResidualLayerNormForwardParams {
  DType dtype = DType::kF32;
  int64_t N = 0, C = 0;
  float eps = 1e-5f;
  const void* residual = nullptr;  // (N, C)
  const void* x = nullptr;         // (N, C)
  void* residual_out = nullptr;    // (N, C), may alias residual
  const void* weight = nullptr;    // (C)
  const void* bias = nullptr;      // (C) or null
  void* out = nullptr;             // (N, C)
  float* mean = nullptr;           // (N) or null
  float* rstd = nullptr;           // (N) or null
};

absl::Status RmsNormForward(const Context& ctx, const RmsNormForwardParams& p);
absl::Status RmsNormBackward(const Context& ctx, const RmsNormBackwardParams& p);
absl::Status LayerNormForward(const Context& ctx, const LayerNormForwardParams& p);
absl::Status LayerNormBackward(const Context& ctx, const LayerNormBackwardParams& p);
absl::Status ResidualRmsNormForward(const Context& ctx, const ResidualRmsNormForwardParams& p);
absl::Status ResidualLayerNormForward(const Context& ctx, const ResidualLayerNormForwardParams& p);

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_LAB_CUDA_NORM_H_
