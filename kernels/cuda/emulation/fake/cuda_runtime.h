// The part of the CUDA runtime API the kernels' host code uses, on host memory, for the CPU emulation
// (cuemu.h): copies and memsets happen at once, streams are ignored; a launch that breaks the device's
// limits (cuemu::LaunchAllowed) is the one error, returned by cudaGetLastError.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUDA_RUNTIME_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUDA_RUNTIME_H_

#include <cstring>

#include "kernels/cuda/emulation/cuemu.h"

struct CUstream_st;
typedef CUstream_st* cudaStream_t;
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorNotReady = 600
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76 };
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice
};

inline cudaError_t cudaGetLastError() {
  return ::cuemu::TakeLaunchError() != 0 ? cudaErrorInvalidValue : cudaSuccess;
}
inline const char* cudaGetErrorName(cudaError_t e) {
  return e == cudaErrorInvalidValue ? "cudaErrorInvalidValue" : "cudaEmulated";
}
inline const char* cudaGetErrorString(cudaError_t e) {
  return e == cudaErrorInvalidValue ? "launch refused by the emulation (see its stderr line)"
                                    : "emulated CUDA error";
}
template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attribute, int value) {
  if (attribute == cudaFuncAttributeMaxDynamicSharedMemorySize)
    ::cuemu::SetMaxDynamicShared(reinterpret_cast<const void*>(kernel), value);
  return cudaSuccess;
}
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
// The emulated device's compute capability: cuemu::SetComputeCapability (9.0 unless a check changes it).
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int /*device*/) {
  const int cc = ::cuemu::ComputeCapability();
  *value = attr == cudaDevAttrComputeCapabilityMajor ? cc / 10 : cc % 10;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_FAKE_CUDA_RUNTIME_H_
