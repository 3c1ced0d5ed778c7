// The CUDA runtime API that kernels/cuda/cuda_context.cc, kernels/matmul/matmul_cuda.cc and the kernels they
// launch (column sums, GELU) use, on host memory, for the emulation's "device" runtime (emulation.bzl).
// Its own header rather than ../../fake/cuda_runtime.h (which the CUDA kernels' emulation needs and changes
// for its own purposes): work happens at once on the calling thread (streams are tags, every event is
// complete; an event records the emulated clock, fake_cuda::clock_ms, which the fake cuBLASLt advances by
// each algorithm's emulated run time, so the autotuner's timings are the check's to choose, and each record
// by 1 us), cudaMalloc hands out memory poisoned with 0xff (NaN in f32 and bf16) and cudaFree rejects a
// pointer it did not hand out. Device memory is fenced off from the host as on a GPU: cudaMalloc carves it
// from one reserved region that is inaccessible (PROT_NONE) except while the emulated device works (a grid,
// a copy or memset here, the fake cuBLASLt, CUB; cuemu::DeviceWork), so host code that reads or writes
// through a device pointer faults, with a message naming the address and its allocation; copies check their
// direction against the pointers, and a kernel launch refuses a host pointer parameter (cuemu.h). Not part of
// the Bazel build.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_CUDA_RUNTIME_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_CUDA_RUNTIME_H_

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

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
inline std::map<const char*, size_t> live_allocations;  // start -> bytes
inline int current_device = 0;

// Device memory: one reserved region (1 TiB of address space, nothing committed until used; less where the
// process may not map that much, e.g. under ThreadSanitizer's memory layout); allocations are page-aligned
// (so above cudaMalloc's 256-byte alignment) and never reuse an address, so a stale device pointer cannot
// reach a newer allocation; a freed allocation's pages are released to the system.
inline size_t region_bytes = 0;
inline char* region = nullptr;
inline size_t region_used = 0;  // bytes handed out from the start (page multiple)
inline bool region_open = false;

inline size_t PageBytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
inline bool IsDevice(const void* p) {
  const char* c = static_cast<const char*>(p);
  return region != nullptr && c >= region && c < region + region_used;
}
inline void SetRegionOpen(bool open) {
  region_open = open;
  if (region_used > 0 && mprotect(region, region_used, open ? PROT_READ | PROT_WRITE : PROT_NONE) != 0) {
    std::perror("fake cuda_runtime.h: mprotect of device memory");
    std::abort();
  }
}

// A fault in the closed region: the host touched device memory. Names the address and its allocation,
// prints the host's stack, then lets the fault kill the process as on a GPU.
inline void OnFault(int sig, siginfo_t* info, void*) {
  const char* at = static_cast<const char*>(info->si_addr);
  if (sig == SIGSEGV && IsDevice(at) && !region_open) {
    char line[256];
    const char* start = nullptr;
    size_t bytes = 0;
    for (const auto& [s, n] : live_allocations)  // no lock: the faulting thread may hold it
      if (at >= s && at < s + n) start = s, bytes = n;
    const int len =
        start != nullptr
            ? std::snprintf(line, sizeof(line),
                            "fake CUDA runtime: the host touched device memory at %p (byte %zu of "
                            "the %zu-byte allocation at %p); on a GPU this faults. Stack:\n",
                            static_cast<const void*>(at), static_cast<size_t>(at - start), bytes,
                            static_cast<const void*>(start))
            : std::snprintf(line, sizeof(line),
                            "fake CUDA runtime: the host touched freed device memory at %p; on a "
                            "GPU this faults. Stack:\n",
                            static_cast<const void*>(at));
    if (write(STDERR_FILENO, line, static_cast<size_t>(len)) < 0) {
    }
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  }
  signal(sig, SIG_DFL);  // the access runs again and kills the process
}

inline bool ReserveRegion() {
  if (region != nullptr) return true;
  for (const int log2_bytes : {40, 37, 34}) {  // 1 TiB, 128 GiB, 16 GiB
    void* p =
        mmap(nullptr, size_t{1} << log2_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    region = static_cast<char*>(p);
    region_bytes = size_t{1} << log2_bytes;
    break;
  }
  if (region == nullptr) return false;
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now: OnFault must not allocate (a signal handler)
  struct sigaction action {};
  action.sa_sigaction = OnFault;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, nullptr);
  ::cuemu::SetDeviceAccessHook(SetRegionOpen);
  ::cuemu::SetDevicePointerTest(IsDevice);
  return true;
}
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
  using namespace fake_cuda;
  std::lock_guard<std::mutex> lock(mu);
  const size_t page = PageBytes(), rounded = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
  if (!ReserveRegion() || rounded > region_bytes - region_used) return cudaErrorMemoryAllocation;
  char* start = region + region_used;
  region_used += rounded;
  if (region_open) SetRegionOpen(true);  // the new pages too (an allocation inside device work)
  {
    ::cuemu::DeviceWork work;
    std::memset(start, 0xff, bytes);
  }
  live_allocations[start] = rounded;
  *p = start;
  return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
  using namespace fake_cuda;
  if (p == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(mu);
  const auto it = live_allocations.find(static_cast<const char*>(p));
  if (it == live_allocations.end()) return cudaErrorInvalidValue;
  madvise(p, it->second, MADV_DONTNEED);  // its pages go back to the system; the address is never reused
  live_allocations.erase(it);
  return cudaSuccess;
}

namespace fake_cuda {
// cudaMemcpy's direction against the pointers: "Calling cudaMemcpy() with dst and src pointers that do not
// match the direction of the copy results in an undefined behavior" -- an error here, with a message.
inline cudaError_t CheckDirection(const void* dst, const void* src, cudaMemcpyKind kind, const char* what) {
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToHost:
      ok = !IsDevice(dst) && !IsDevice(src);
      break;
    case cudaMemcpyHostToDevice:
      ok = IsDevice(dst) && !IsDevice(src);
      break;
    case cudaMemcpyDeviceToHost:
      ok = !IsDevice(dst) && IsDevice(src);
      break;
    case cudaMemcpyDeviceToDevice:
      ok = IsDevice(dst) && IsDevice(src);
      break;
    case cudaMemcpyDefault:
      break;
  }
  if (ok) return cudaSuccess;
  std::fprintf(stderr, "fake CUDA runtime: %s of kind %d from %s %p to %s %p: the direction does not match\n",
               what, static_cast<int>(kind), IsDevice(src) ? "device" : "host", src,
               IsDevice(dst) ? "device" : "host", dst);
  return cudaErrorInvalidValue;
}
}  // namespace fake_cuda

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

inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                                   cudaStream_t = nullptr) {
  if (n == 0) return cudaSuccess;
  const cudaError_t e = fake_cuda::CheckDirection(dst, src, kind, "cudaMemcpy(Async)");
  if (e != cudaSuccess) return e;
  ::cuemu::DeviceWork work;
  std::memcpy(dst, src, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, n, kind);
}
// As documented: `height` rows of `width` bytes, row r at dst + r * dpitch and src + r * spitch; a pitch
// below the width is cudaErrorInvalidValue.
inline cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                     size_t height, cudaMemcpyKind kind, cudaStream_t = nullptr) {
  if (dpitch < width || spitch < width) return cudaErrorInvalidValue;
  if (width == 0 || height == 0) return cudaSuccess;
  const cudaError_t e = fake_cuda::CheckDirection(dst, src, kind, "cudaMemcpy2DAsync");
  if (e != cudaSuccess) return e;
  ::cuemu::DeviceWork work;
  for (size_t r = 0; r < height; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t = nullptr) {
  if (n == 0) return cudaSuccess;
  if (!fake_cuda::IsDevice(dst)) {
    std::fprintf(stderr, "fake CUDA runtime: cudaMemset of host memory %p\n", dst);
    return cudaErrorInvalidValue;
  }
  ::cuemu::DeviceWork work;
  std::memset(dst, value, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* dst, int value, size_t n) { return cudaMemsetAsync(dst, value, n); }

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_CUDA_RUNTIME_H_
