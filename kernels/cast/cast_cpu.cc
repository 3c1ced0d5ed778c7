// CPU cast between f32 and bf16 (see cast.h), elements split over threads; the rounding is dtype.h's
// FloatToBF16, element by element.
#include "kernels/cast/cast.h"
#include "kernels/cpu/parallel.h"

namespace lmf::kernels::cpu {

void Cast(const Context& ctx, const CastParams& p) {
  if (p.src_dtype == DType::kF32 && p.dst_dtype == DType::kBF16) {
    const float* src = static_cast<const float*>(p.src);
    uint16_t* dst = static_cast<uint16_t*>(p.dst);
    ParallelForItems(ctx, p.n, 2, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) dst[i] = FloatToBF16(src[i]);
    });
    return;
  }
  LMF_CHECK(p.src_dtype == DType::kBF16 && p.dst_dtype == DType::kF32)
      << "cast converts f32 <-> bf16, not " << p.src_dtype << " -> " << p.dst_dtype;
  const uint16_t* src = static_cast<const uint16_t*>(p.src);
  float* dst = static_cast<float*>(p.dst);
  ParallelForItems(ctx, p.n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = BF16ToFloat(src[i]);
  });
}

}  // namespace lmf::kernels::cpu
