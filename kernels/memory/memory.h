// Moving bytes between the host and a Context's device, and filling device memory, with the same entry
// point on every backend (on the CPU the "device" is the host and these are memcpy/memset).
//
//   kernels::CopyToDevice(ctx, param.value.data(), host.data(), bytes);   // stream-ordered
//   kernels::CopyToHost(ctx, host.data(), loss_device, bytes);            // returns with the data on the
//   host
//
// CopyToDevice, CopyOnDevice, CopyRowsOnDevice and FillZero are ordered on ctx.stream and return at once on
// CUDA; the host source of CopyToDevice may be reused on return when it is pageable memory (every caller's
// std::vector: cudaMemcpyAsync stages it before returning); pinned memory would have to live until the
// stream has run the copy. CopyToHost waits for the stream. Synchronize waits for every call issued on
// ctx.stream. A failed CUDA call aborts naming the call (see core/dispatch.h).
//
// CopyRowsOnDevice copies `rows` rows of `row_bytes` bytes from src, whose rows start `src_pitch` bytes
// apart, to dst, whose rows start `dst_pitch` bytes apart (both pitches >= row_bytes; cudaMemcpy2DAsync on
// CUDA): e.g. the key columns of a fused q|k|v projection into a KV cache.
#ifndef LMFORGE_KERNELS_MEMORY_MEMORY_H_
#define LMFORGE_KERNELS_MEMORY_MEMORY_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/context.h"
#include "kernels/core/dispatch.h"

namespace lmf::kernels {

namespace cuda {
absl::Status CopyToDevice(const Context& ctx, void* dst, const void* host_src, size_t bytes);
absl::Status CopyToHost(const Context& ctx, void* host_dst, const void* src, size_t bytes);
absl::Status CopyOnDevice(const Context& ctx, void* dst, const void* src, size_t bytes);
absl::Status CopyRowsOnDevice(const Context& ctx, void* dst, size_t dst_pitch, const void* src,
                              size_t src_pitch, size_t row_bytes, size_t rows);
absl::Status FillZero(const Context& ctx, void* dst, size_t bytes);
absl::Status Synchronize(const Context& ctx);
}  // namespace cuda

namespace cpu {
void Copy(void* dst, const void* src, size_t bytes);
void CopyRows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows);
void FillZero(void* dst, size_t bytes);
}  // namespace cpu

inline void CopyToDevice([[maybe_unused]] const Context& ctx, void* dst, const void* host_src, size_t bytes) {
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::CopyToDevice(ctx, dst, host_src, bytes), "copy to device");
#endif
  CpuOpScope op_scope("copy to device");
  cpu::Copy(dst, host_src, bytes);
}
inline void CopyToHost([[maybe_unused]] const Context& ctx, void* host_dst, const void* src, size_t bytes) {
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::CopyToHost(ctx, host_dst, src, bytes), "copy to host");
#endif
  CpuOpScope op_scope("copy to host");
  cpu::Copy(host_dst, src, bytes);
}
inline void CopyOnDevice([[maybe_unused]] const Context& ctx, void* dst, const void* src, size_t bytes) {
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::CopyOnDevice(ctx, dst, src, bytes), "copy on device");
#endif
  CpuOpScope op_scope("copy on device");
  cpu::Copy(dst, src, bytes);
}
// `count` elements of `dtype` (kF32 or kBF16) at src on ctx's device -> host floats (bf16 widened exactly);
// waits like CopyToHost. For reading logits or activations of either precision on the host.
void CopyToHostAsFloats(const Context& ctx, float* host_dst, const void* src, DType dtype, int64_t count);

inline void CopyRowsOnDevice([[maybe_unused]] const Context& ctx, void* dst, size_t dst_pitch,
                             const void* src, size_t src_pitch, size_t row_bytes, size_t rows) {
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) {
    return CheckCuda(cuda::CopyRowsOnDevice(ctx, dst, dst_pitch, src, src_pitch, row_bytes, rows),
                     "copy rows on device");
  }
#endif
  CpuOpScope op_scope("copy rows on device");
  cpu::CopyRows(dst, dst_pitch, src, src_pitch, row_bytes, rows);
}
inline void FillZero([[maybe_unused]] const Context& ctx, void* dst, size_t bytes) {
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::FillZero(ctx, dst, bytes), "fill with zeros");
#endif
  CpuOpScope op_scope("fill with zeros");
  cpu::FillZero(dst, bytes);
}
inline void Synchronize(const Context& ctx) {
#if LMF_WITH_CUDA
  if (ctx.device.is_cuda()) return CheckCuda(cuda::Synchronize(ctx), "stream synchronize");
#endif
  (void)ctx;
}

}  // namespace lmf::kernels

#endif  // LMFORGE_KERNELS_MEMORY_MEMORY_H_
