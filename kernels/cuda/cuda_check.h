// Error checking for CUDA runtime and cuBLAS(Lt) calls in the CUDA backend: each macro turns a failed
// call into an absl::Status (kInternal) whose message names the call, the error and the place, and returns it
// from the enclosing function. Kernel launches are checked with LMF_CUDA_RETURN_IF_LAUNCH_ERROR(name) right
// after the launch (cudaGetLastError).
//
//   LMF_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(ptr, 0, bytes, stream));
#ifndef LMFORGE_KERNELS_CUDA_CUDA_CHECK_H_
#define LMFORGE_KERNELS_CUDA_CUDA_CHECK_H_

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/core/dtype.h"

namespace lmf::kernels::cuda {

inline absl::Status CudaErrorStatus(cudaError_t e, const char* call, const char* file, int line) {
  return absl::InternalError(absl::StrCat(call, " failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
                                          ") at ", file, ":", line));
}

inline absl::Status CublasErrorStatus(cublasStatus_t e, const char* call, const char* file, int line) {
  return absl::InternalError(
      absl::StrCat(call, " failed: cuBLAS status ", static_cast<int>(e), " at ", file, ":", line));
}

// The CUDA ops run f32 and bf16 activations: InvalidArgument naming `op` and `t` for any other dtype.
inline absl::Status CheckFloatDType(DType t, const char* op) {
  if (t == DType::kF32 || t == DType::kBF16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(op, ": CUDA runs f32 and bf16, not ", DTypeName(t)));
}

}  // namespace lmf::kernels::cuda

#define LMF_CUDA_RETURN_IF_ERROR(call)                                                        \
  do {                                                                                        \
    const cudaError_t lmf_cuda_err_ = (call);                                                 \
    if (lmf_cuda_err_ != cudaSuccess)                                                         \
      return ::lmf::kernels::cuda::CudaErrorStatus(lmf_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define LMF_CUBLAS_RETURN_IF_ERROR(call)                                                          \
  do {                                                                                            \
    const cublasStatus_t lmf_cublas_err_ = (call);                                                \
    if (lmf_cublas_err_ != CUBLAS_STATUS_SUCCESS)                                                 \
      return ::lmf::kernels::cuda::CublasErrorStatus(lmf_cublas_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a <<<...>>> launch: reports a bad configuration or an earlier asynchronous fault, naming the kernel.
#define LMF_CUDA_RETURN_IF_LAUNCH_ERROR(kernel_name)                                               \
  do {                                                                                             \
    const cudaError_t lmf_cuda_err_ = cudaGetLastError();                                          \
    if (lmf_cuda_err_ != cudaSuccess)                                                              \
      return ::lmf::kernels::cuda::CudaErrorStatus(lmf_cuda_err_, "launch " kernel_name, __FILE__, \
                                                   __LINE__);                                      \
  } while (0)

// Returns a non-OK absl::Status from the enclosing function.
#define LMF_RETURN_IF_ERROR_STATUS(expr)       \
  do {                                         \
    const ::absl::Status lmf_status_ = (expr); \
    if (!lmf_status_.ok()) return lmf_status_; \
  } while (0)

#endif  // LMFORGE_KERNELS_CUDA_CUDA_CHECK_H_
