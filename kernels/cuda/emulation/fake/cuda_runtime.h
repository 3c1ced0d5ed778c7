// The part of the CUDA runtime API the kernels' host code uses, on host memory, for the CPU emulation
// (cuemu.h): copies and memsets happen at once, streams are ignored, nothing fails.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUDA_RUNTIME_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUDA_RUNTIME_H_

#include <cstring>

#include "kernels/cuda/emulation/cuemu.h"

struct CUstream_st;
typedef CUstream_st* cudaStream_t;
enum cudaError_t { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice
};

inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorName(cudaError_t) { return "cudaEmulated"; }
inline const char* cudaGetErrorString(cudaError_t) { return "emulated CUDA error"; }
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind,
                                   cudaStream_t = nullptr) {
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t = nullptr) {
  std::memset(dst, value, n);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUDA_RUNTIME_H_
