// CUDA RMSNorm forward and backward and the fused residual-add + RMSNorm forward, fp32 and bf16 (bf16
// storage; fp32 math and saved statistics; dweight fp32 whatever the dtype). The kernels are shared with
// LayerNorm (kernels/cuda/norm_kernels.cuh).
#include "kernels/cuda/norm_kernels.cuh"
#include "kernels/rmsnorm/rmsnorm.h"

namespace lmf::kernels::cuda {

absl::Status RmsNormForward(const Context& ctx, const RmsNormForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "rmsnorm"));
  return p.dtype == DType::kF32
             ? norm_internal::LaunchForward<float, false, false>(ctx, p.N, p.C, p.eps, nullptr, p.x, nullptr,
                                                                 p.weight, nullptr, p.out, nullptr, p.rstd)
             : norm_internal::LaunchForward<bf16, false, false>(ctx, p.N, p.C, p.eps, nullptr, p.x, nullptr,
                                                                p.weight, nullptr, p.out, nullptr, p.rstd);
}

absl::Status ResidualRmsNormForward(const Context& ctx, const ResidualRmsNormForwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "residual_rmsnorm"));
  return p.dtype == DType::kF32
             ? norm_internal::LaunchForward<float, false, true>(ctx, p.N, p.C, p.eps, p.residual, p.x,
                                                                p.residual_out, p.weight, nullptr, p.out,
                                                                nullptr, p.rstd)
             : norm_internal::LaunchForward<bf16, false, true>(ctx, p.N, p.C, p.eps, p.residual, p.x,
                                                               p.residual_out, p.weight, nullptr, p.out,
                                                               nullptr, p.rstd);
}

absl::Status RmsNormBackward(const Context& ctx, const RmsNormBackwardParams& p) {
  LMF_RETURN_IF_ERROR_STATUS(CheckFloatDType(p.dtype, "rmsnorm"));
  return p.dtype == DType::kF32
             ? norm_internal::LaunchBackward<float, false>(ctx, p.N, p.C, p.x, p.weight, nullptr, p.rstd,
                                                           p.dout, p.dx, p.dweight, nullptr)
             : norm_internal::LaunchBackward<bf16, false>(ctx, p.N, p.C, p.x, p.weight, nullptr, p.rstd,
                                                          p.dout, p.dx, p.dweight, nullptr);
}

}  // namespace lmf::kernels::cuda
