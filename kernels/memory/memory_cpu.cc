// The CPU side of kernels/memory: plain memcpy/memset (null with zero bytes is allowed).
#include <cstring>

#include "kernels/memory/memory.h"

namespace lmf::kernels::cpu {

void Copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void FillZero(void* dst, size_t bytes) {
  if (bytes > 0) std::memset(dst, 0, bytes);
}

}  // namespace lmf::kernels::cpu
