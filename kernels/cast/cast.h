// Cast: converts n elements from one dtype to another, on the context's device.
//
//   f32 -> bf16: dst[i] = FloatToBF16(src[i])  (round to nearest even; NaN stays NaN with its sign and top
//                payload bits, exactly kernels/core/dtype.h's FloatToBF16; values above bf16's range
//                round to infinity)
//   bf16 -> f32: dst[i] = BF16ToFloat(src[i])  (exact)
//
// dst is written (=); src and dst must not overlap. The model uses it to round fp32 master weights into
// their bf16 compute copies on the device (LanguageModel::RefreshComputeWeights).
#ifndef LMFORGE_KERNELS_CAST_CAST_H_
#define LMFORGE_KERNELS_CAST_CAST_H_

#include <cstdint>

#include "absl/status/status.h"
#include "base/check.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"
#include "kernels/core/dtype.h"

namespace lmf::kernels {

struct CastParams {
  int64_t n = 0;
  DType src_dtype = DType::kF32;
  DType dst_dtype = DType::kBF16;
  const void* src = nullptr;  // (n) of src_dtype
  void* dst = nullptr;        // (n) of dst_dtype
};

// Whether Cast converts src to dst (on every backend that runs "cast"): f32 -> bf16 and bf16 -> f32.
inline bool CastSupported(DType src, DType dst) {
  return (src == DType::kF32 && dst == DType::kBF16) || (src == DType::kBF16 && dst == DType::kF32);
}

// The CUDA backend (cast_cuda.cu, built in where LMF_WITH_CUDA): the same params on device pointers, run
// on ctx.stream; an unsupported pair, a negative n or a CUDA error comes back as a Status.
namespace cuda {
absl::Status Cast(const Context& ctx, const CastParams& p);
}  // namespace cuda

namespace cpu {
void Cast(const Context& ctx, const CastParams& p);
}  // namespace cpu

// Both dtypes must be ones the device's backend runs "cast" with (BackendSupports), and the pair one that
// CastSupported names; anything else is a program error.
inline void Cast(const Context& ctx, const CastParams& p) {
  if (!BackendSupports("cast", ctx.device, p.src_dtype)) UnsupportedOp("cast", ctx, p.src_dtype);
  if (!BackendSupports("cast", ctx.device, p.dst_dtype)) UnsupportedOp("cast", ctx, p.dst_dtype);
  LMF_CHECK(CastSupported(p.src_dtype, p.dst_dtype))
      << "cast converts f32 <-> bf16, not " << p.src_dtype << " -> " << p.dst_dtype;
  LMF_CHECK_GE(p.n, 0) << "cast of a negative element count";
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::Cast(ctx, p), "Cast");
#endif
  CpuOpScope op_scope("Cast");
  cpu::Cast(ctx, p);
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_CAST_CAST_H_
