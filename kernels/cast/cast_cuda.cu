// CUDA cast between f32 and bf16 (see cast.h). The f32 -> bf16 rounding is done on the bits, the same
// integer steps as dtype.h's FloatToBF16, so the device and host copies agree bit for bit, NaN payloads
// included (the cuda_bf16.h intrinsic turns every NaN into one canonical NaN). 16-byte accesses where src
// and dst are 16-byte aligned: 8 elements per step (two float4 and one 8 x bf16 vector); the rest scalar.
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cast/cast.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace lmf::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPerStep = 8;  // elements per vector step: 32 bytes of f32, 16 bytes of bf16

// dtype.h's FloatToBF16 on the float's bits.
__device__ __forceinline__ uint32_t RoundToBF16Bits(uint32_t bits) {
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) return (bits >> 16) | 0x40u;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return bits >> 16;
}

template <bool kVector>
__global__ void F32ToBF16Kernel(int64_t n, const uint32_t* src, uint16_t* dst) {
  const int64_t vector_end = kVector ? n / kPerStep * kPerStep : 0;
  if constexpr (kVector) {
    LMF_GRID_STRIDE(v, n / kPerStep) {
      const uint4 lo = reinterpret_cast<const uint4*>(src)[2 * v];
      const uint4 hi = reinterpret_cast<const uint4*>(src)[2 * v + 1];
      uint4 out;
      out.x = RoundToBF16Bits(lo.x) | (RoundToBF16Bits(lo.y) << 16);
      out.y = RoundToBF16Bits(lo.z) | (RoundToBF16Bits(lo.w) << 16);
      out.z = RoundToBF16Bits(hi.x) | (RoundToBF16Bits(hi.y) << 16);
      out.w = RoundToBF16Bits(hi.z) | (RoundToBF16Bits(hi.w) << 16);
      reinterpret_cast<uint4*>(dst)[v] = out;
    }
  }
  LMF_GRID_STRIDE(t, n - vector_end) {
    const int64_t i = vector_end + t;
    dst[i] = static_cast<uint16_t>(RoundToBF16Bits(src[i]));
  }
}

template <bool kVector>
__global__ void BF16ToF32Kernel(int64_t n, const uint16_t* src, uint32_t* dst) {
  const int64_t vector_end = kVector ? n / kPerStep * kPerStep : 0;
  if constexpr (kVector) {
    LMF_GRID_STRIDE(v, n / kPerStep) {
      const uint4 in = reinterpret_cast<const uint4*>(src)[v];
      uint4 lo, hi;
      lo.x = in.x << 16;
      lo.y = in.x & 0xffff0000u;
      lo.z = in.y << 16;
      lo.w = in.y & 0xffff0000u;
      hi.x = in.z << 16;
      hi.y = in.z & 0xffff0000u;
      hi.z = in.w << 16;
      hi.w = in.w & 0xffff0000u;
      reinterpret_cast<uint4*>(dst)[2 * v] = lo;
      reinterpret_cast<uint4*>(dst)[2 * v + 1] = hi;
    }
  }
  LMF_GRID_STRIDE(t, n - vector_end) {
    const int64_t i = vector_end + t;
    dst[i] = static_cast<uint32_t>(src[i]) << 16;
  }
}

}  // namespace

absl::Status Cast(const Context& ctx, const CastParams& p) {
  if (!CastSupported(p.src_dtype, p.dst_dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("cast: converts f32 <-> bf16, not ",
                                                   DTypeName(p.src_dtype), " -> ", DTypeName(p.dst_dtype)));
  }
  if (p.n < 0) return absl::InvalidArgumentError(absl::StrCat("cast: negative element count ", p.n));
  if (p.n == 0) return absl::OkStatus();
  const bool vec = Aligned16({p.src, p.dst});
  const unsigned grid = GridFor(vec ? p.n / kPerStep + 1 : p.n, kThreads);
  if (p.src_dtype == DType::kF32) {
    auto* kernel = vec ? F32ToBF16Kernel<true> : F32ToBF16Kernel<false>;
    kernel<<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, static_cast<const uint32_t*>(p.src),
                                                 static_cast<uint16_t*>(p.dst));
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("F32ToBF16Kernel");
  } else {
    auto* kernel = vec ? BF16ToF32Kernel<true> : BF16ToF32Kernel<false>;
    kernel<<<grid, kThreads, 0, StreamOf(ctx)>>>(p.n, static_cast<const uint16_t*>(p.src),
                                                 static_cast<uint32_t*>(p.dst));
    LMF_CUDA_RETURN_IF_LAUNCH_ERROR("BF16ToF32Kernel");
  }
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda
