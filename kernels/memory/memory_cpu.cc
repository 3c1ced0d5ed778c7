// The CPU side of kernels/memory: plain memcpy/memset (null with zero bytes is allowed); and the
// backend-independent CopyToHostAsFloats.
#include <cstring>
#include <vector>

#include "base/check.h"
#include "kernels/memory/memory.h"

namespace lmf::kernels::cpu {

void Copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void CopyRows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows) {
  LMF_CHECK(row_bytes <= dst_pitch && row_bytes <= src_pitch)
      << "CopyRows: row_bytes " << row_bytes << " exceeds a pitch (dst " << dst_pitch << ", src " << src_pitch
      << ")";
  for (size_t r = 0; r < rows && row_bytes > 0; ++r) {
    std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch,
                row_bytes);
  }
}

void FillZero(void* dst, size_t bytes) {
  if (bytes > 0) std::memset(dst, 0, bytes);
}

}  // namespace lmf::kernels::cpu

namespace lmf::kernels {

void CopyToHostAsFloats(const Context& ctx, float* host_dst, const void* src, DType dtype, int64_t count) {
  LMF_CHECK(dtype == DType::kF32 || dtype == DType::kBF16) << "CopyToHostAsFloats: dtype " << dtype;
  const size_t n = static_cast<size_t>(count);
  if (dtype == DType::kF32) {
    CopyToHost(ctx, host_dst, src, n * sizeof(float));
    return;
  }
  std::vector<uint16_t> raw(n);
  CopyToHost(ctx, raw.data(), src, n * sizeof(uint16_t));
  for (size_t i = 0; i < n; ++i) host_dst[i] = BF16ToFloat(raw[i]);
}

}  // namespace lmf::kernels
