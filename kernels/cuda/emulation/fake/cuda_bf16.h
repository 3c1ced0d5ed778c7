// __nv_bfloat16, __nv_bfloat162 and their conversions for the CPU emulation (cuemu.h): round to nearest even,
// NaN to the canonical NaN, as cuda_bf16.h's intrinsics.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUDA_BF16_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUDA_BF16_H_

#include <cmath>
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t x;
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  __nv_bfloat16 r;
  if (std::isnan(f)) {
    r.x = 0x7fff;
    return r;
  }
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  r.x = static_cast<uint16_t>(bits >> 16);
  return r;
}

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t bits = static_cast<uint32_t>(h.x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Two bf16 in 32 bits, x in the low half (as cuda_bf16.h's __nv_bfloat162).
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return __nv_bfloat162{__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUDA_BF16_H_
