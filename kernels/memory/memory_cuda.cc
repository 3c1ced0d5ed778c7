// The CUDA side of kernels/memory: cudaMemcpyAsync / cudaMemcpy2DAsync / cudaMemsetAsync on ctx.stream.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/memory/memory.h"

namespace lmf::kernels::cuda {
namespace {
cudaStream_t Stream(const Context& ctx) { return static_cast<cudaStream_t>(ctx.stream); }
}  // namespace

absl::Status CopyToDevice(const Context& ctx, void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  LMF_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, Stream(ctx)));
  return absl::OkStatus();
}

absl::Status CopyToHost(const Context& ctx, void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  LMF_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, Stream(ctx)));
  LMF_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(Stream(ctx)));
  return absl::OkStatus();
}

absl::Status CopyOnDevice(const Context& ctx, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  LMF_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, Stream(ctx)));
  return absl::OkStatus();
}

absl::Status CopyRowsOnDevice(const Context& ctx, void* dst, size_t dst_pitch, const void* src,
                              size_t src_pitch, size_t row_bytes, size_t rows) {
  if (row_bytes > dst_pitch || row_bytes > src_pitch) {
    return absl::InvalidArgumentError(absl::StrCat("CopyRowsOnDevice: row_bytes ", row_bytes,
                                                   " exceeds a pitch (dst ", dst_pitch, ", src ", src_pitch,
                                                   ")"));
  }
  if (row_bytes == 0 || rows == 0) return absl::OkStatus();
  LMF_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                                             cudaMemcpyDeviceToDevice, Stream(ctx)));
  return absl::OkStatus();
}

absl::Status FillZero(const Context& ctx, void* dst, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  LMF_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, 0, bytes, Stream(ctx)));
  return absl::OkStatus();
}

absl::Status Synchronize(const Context& ctx) {
  LMF_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(Stream(ctx)));
  return absl::OkStatus();
}

}  // namespace lmf::kernels::cuda
