// The CUDA runtime API that kernels/cuda/cuda_context.cc, kernels/matmul/matmul_cuda.cc and the kernels they
// launch (column sums, GELU) use, on host memory, for the cuBLASLt emulation (see run.sh in this folder).
// Its own header rather than ../../fake/cuda_runtime.h (which the CUDA kernels' emulation needs and changes
// for its own purposes): work happens at once on the calling thread (streams are tags, every event is
// complete; an event records the emulated clock, fake_cuda::clock_ms, which the fake cuBLASLt advances by
// each algorithm's emulated run time, so the autotuner's timings are the check's to choose, and each record
// by 1 us), cudaMalloc hands out host memory poisoned with 0xff (NaN in f32 and bf16) and cudaFree
// rejects a pointer it did not hand out. Not part of the Bazel build.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_CUDA_RUNTIME_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_CUDA_RUNTIME_H_

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "kernels/cuda/emulation/cuemu.h"

struct CUstream_st {
  int tag;
};
typedef CUstream_st* cudaStream_t;
struct CUevent_st {
  bool timing = true;  // false: created with cudaEventDisableTiming
  double recorded_ms = -1.0;
};
typedef CUevent_st* cudaEvent_t;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorNotReady = 600,
};
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76 };
constexpr unsigned cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDisableTiming = 2;

struct cudaDeviceProp {
  char name[256];
  int multiProcessorCount;
  int major, minor;
  size_t totalGlobalMem;
  size_t sharedMemPerBlockOptin;
};

namespace fake_cuda {
// One emulated device (an H200-like description); allocations are tracked so cudaFree can check them.
inline std::mutex mu;
inline std::set<void*> live_allocations;
inline int current_device = 0;
inline double clock_ms = 0.0;  // emulated device time, advanced by the fake cuBLASLt's matmuls
// And by each event record, so that work between two events (an op without a GEMM) takes some time, as on a
// device: 1 us.
constexpr double kEventRecordMs = 1e-3;
}  // namespace fake_cuda

// A launch past the device limits (cuemu::LaunchAllowed) is the one launch error, as in ../../fake.
inline cudaError_t cudaGetLastError() {
  return ::cuemu::TakeLaunchError() != 0 ? cudaErrorInvalidValue : cudaSuccess;
}
inline const char* cudaGetErrorName(cudaError_t) { return "cudaEmulated"; }
inline const char* cudaGetErrorString(cudaError_t) { return "emulated CUDA error"; }

// The dynamic shared memory limit a kernel's launches are checked against (cuemu::LaunchAllowed).
template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attribute, int value) {
  if (attribute == cudaFuncAttributeMaxDynamicSharedMemorySize)
    ::cuemu::SetMaxDynamicShared(reinterpret_cast<const void*>(kernel), value);
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) {
  if (d != 0) return cudaErrorInvalidDevice;
  fake_cuda::current_device = d;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = fake_cuda::current_device;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d != 0) return cudaErrorInvalidDevice;
  std::memset(p, 0, sizeof(*p));
  std::strcpy(p->name, "cuBLASLt emulation (host memory)");
  p->multiProcessorCount = 132, p->major = 9, p->minor = 0;
  p->totalGlobalMem = size_t{1} << 34, p->sharedMemPerBlockOptin = 227 * 1024;
  return cudaSuccess;
}
// The compute capability cudaGetDeviceProperties reports (9.0).
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int d) {
  if (d != 0) return cudaErrorInvalidDevice;
  if (attr != cudaDevAttrComputeCapabilityMajor && attr != cudaDevAttrComputeCapabilityMinor)
    return cudaErrorInvalidValue;
  *value = attr == cudaDevAttrComputeCapabilityMajor ? 9 : 0;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

inline cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (posix_memalign(p, 256, bytes == 0 ? 1 : bytes) != 0) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xff, bytes);
  std::lock_guard<std::mutex> lock(fake_cuda::mu);
  fake_cuda::live_allocations.insert(*p);
  return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(fake_cuda::mu);
    if (fake_cuda::live_allocations.erase(p) == 0) return cudaErrorInvalidValue;
  }
  std::free(p);
  return cudaSuccess;
}

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new CUstream_st{1};
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  *e = new CUevent_st;
  (*e)->timing = (flags & cudaEventDisableTiming) == 0;
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t = nullptr) {
  if (e == nullptr) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(fake_cuda::mu);
  fake_cuda::clock_ms += fake_cuda::kEventRecordMs;
  e->recorded_ms = fake_cuda::clock_ms;
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  return e == nullptr ? cudaErrorInvalidValue : cudaSuccess;
}
// "cudaErrorInvalidResourceHandle ... if either event was created with the cudaEventDisableTiming flag";
// cudaErrorNotReady if either has not been recorded. Both are errors here.
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr || !start->timing || !end->timing)
    return cudaErrorInvalidValue;
  if (start->recorded_ms < 0 || end->recorded_ms < 0) return cudaErrorNotReady;
  *ms = static_cast<float>(end->recorded_ms - start->recorded_ms);
  return cudaSuccess;
}
inline cudaError_t cudaEventQuery(cudaEvent_t e) {
  return e == nullptr ? cudaErrorInvalidValue : cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
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
// As documented: `height` rows of `width` bytes, row r at dst + r * dpitch and src + r * spitch; a pitch
// below the width is cudaErrorInvalidValue.
inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind, cudaStream_t = nullptr) {
  if (dpitch < width || spitch < width) return cudaErrorInvalidValue;
  for (size_t r = 0; r < height; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t = nullptr) {
  std::memset(dst, value, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* dst, int value, size_t n) { return cudaMemsetAsync(dst, value, n); }

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_CUDA_RUNTIME_H_
