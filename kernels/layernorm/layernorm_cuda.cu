// CUDA LayerNorm forward and backward and the fused residual-add + LayerNorm forward, fp32 and bf16 (bf16
// storage; fp32 math and saved statistics; dweight and dbias fp32 whatever the dtype). The kernels are
// shared with RMSNorm (kernels/cuda/norm_kernels.cuh).
#include "kernels/cuda/norm_kernels.cuh"
#include "kernels/layernorm/layernorm.h"

namespace lmf::kernels::cuda {

absl::Status LayerNormForward(const Context& ctx, const LayerNormForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "layernorm"));
  return p.dtype == DType::kF32
             ? norm_internal::LaunchForward<float, true, false>(ctx, p.N, p.C, p.eps, nullptr, p.x, nullptr,
                                                                p.weight, p.bias, p.out, p.mean, p.rstd)
             : norm_internal::LaunchForward<bf16, true, false>(ctx, p.N, p.C, p.eps, nullptr, p.x, nullptr,
                                                               p.weight, p.bias, p.out, p.mean, p.rstd);
}

absl::Status ResidualLayerNormForward(const Context& ctx, const ResidualLayerNormForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "residual_layernorm"));
  return p.dtype == DType::kF32
             ? norm_internal::LaunchForward<float, true, true>(ctx, p.N, p.C, p.eps, p.residual, p.x,
                                                               p.residual_out, p.weight, p.bias, p.out,
                                                               p.mean, p.rstd)
             : norm_internal::LaunchForward<bf16, true, true>(ctx, p.N, p.C, p.eps, p.residual, p.x,
                                                              p.residual_out, p.weight, p.bias, p.out, p.mean,
                                                              p.rstd);
}

absl::Status LayerNormBackward(const Context& ctx, const LayerNormBackwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "layernorm"));
  return p.dtype == DType::kF32
             ? norm_internal::LaunchBackward<float, true>(ctx, p.N, p.C, p.x, p.weight, p.mean, p.rstd,
                                                          p.dout, p.dx, p.dweight, p.dbias)
             : norm_internal::LaunchBackward<bf16, true>(ctx, p.N, p.C, p.x, p.weight, p.mean, p.rstd, p.dout,
                                                         p.dx, p.dweight, p.dbias);
}

}  // namespace lmf::kernels::cuda
