// The CPU side of kernels/memory: plain memcpy/memset (null with zero bytes is allowed).
#include <cstring>

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
