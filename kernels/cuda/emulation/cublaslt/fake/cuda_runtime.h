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
//
// Work that runs off the calling thread (the fake NCCL's ops, ../nccl) keeps stream order: it takes a ticket
// on its stream (StreamEnqueue) and finishes it (StreamFinish); an event recorded on the stream completes
// when the tickets issued before it are finished, and a copy, memset or kernel launch on a stream first waits
// for them (the legacy default stream, nullptr, for its own and every blocking stream's). The process sees
// LMF_EMULATED_DEVICES devices (default 1), each emulated process its own (they share no memory).
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_CUDA_RUNTIME_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_CUDA_RUNTIME_H_

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "kernels/cuda/emulation/cuemu.h"

// A stream: the tickets of the work run off the calling thread on it, issued and finished (in any order;
// `finished_through` is the longest prefix finished).
struct CUstream_st {
  bool blocking = true;  // created without cudaStreamNonBlocking: the legacy default stream waits for it
  std::mutex mu;
  std::condition_variable changed;
  uint64_t issued = 0, finished_through = 0;
  std::set<uint64_t> finished_beyond;  // finished tickets past a gap
};
typedef CUstream_st* cudaStream_t;
struct CUevent_st {
  bool timing = true;  // false: created with cudaEventDisableTiming
  double recorded_ms = -1.0;
  CUstream_st* stream = nullptr;  // recorded on; complete once its tickets through `ticket` are finished
  uint64_t ticket = 0;
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
inline int DeviceCount() {
  const char* n = std::getenv("LMF_EMULATED_DEVICES");
  return n != nullptr && std::atoi(n) > 0 ? std::atoi(n) : 1;
}

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

// Stream order (see the banner). The legacy default stream, and every stream created (for its waits).
inline CUstream_st legacy_stream;
inline std::set<CUstream_st*> streams;  // under mu
inline CUstream_st* Resolve(cudaStream_t s) { return s != nullptr ? s : &legacy_stream; }
// A ticket for work on `s` that runs elsewhere; StreamFinish(s, ticket) when it is done.
inline uint64_t StreamEnqueue(cudaStream_t s) {
  CUstream_st* st = Resolve(s);
  std::lock_guard<std::mutex> lock(st->mu);
  return ++st->issued;
}
inline void StreamFinish(cudaStream_t s, uint64_t ticket) {
  CUstream_st* st = Resolve(s);
  std::lock_guard<std::mutex> lock(st->mu);
  st->finished_beyond.insert(ticket);
  while (st->finished_beyond.count(st->finished_through + 1) > 0)
    st->finished_beyond.erase(++st->finished_through);
  st->changed.notify_all();
}
// Whether the tickets before `ticket` on `s` are finished, waiting at most `wait` for it.
inline bool StreamTurnReached(cudaStream_t s, uint64_t ticket, std::chrono::milliseconds wait) {
  CUstream_st* st = Resolve(s);
  std::unique_lock<std::mutex> lock(st->mu);
  return st->changed.wait_for(lock, wait, [&] { return st->finished_through + 1 >= ticket; });
}
// Waits until the tickets issued on `st` so far are finished. A GPU would wait as long as its work runs;
// here work that has not finished in 10 minutes (a peer that never issues its side) ends the process,
// saying so, rather than hanging the test.
inline void StreamDrainOne(CUstream_st* st) {
  std::unique_lock<std::mutex> lock(st->mu);
  const uint64_t target = st->issued;
  if (!st->changed.wait_for(lock, std::chrono::minutes(10), [&] { return st->finished_through >= target; })) {
    std::fprintf(stderr, "fake CUDA runtime: work on stream %p has not finished in 10 minutes\n",
                 static_cast<void*>(st));
    std::abort();
  }
}
inline void StreamDrain(cudaStream_t s) {
  if (s != nullptr) return StreamDrainOne(s);
  std::vector<CUstream_st*> blocking;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (CUstream_st* st : streams)
      if (st->blocking) blocking.push_back(st);
  }
  StreamDrainOne(&legacy_stream);
  for (CUstream_st* st : blocking) StreamDrainOne(st);
}
inline void StreamDrainForLaunch(void* s) { StreamDrain(static_cast<cudaStream_t>(s)); }

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
  ::cuemu::SetStreamOrderHook(StreamDrainForLaunch);
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
  *n = fake_cuda::DeviceCount();
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= fake_cuda::DeviceCount()) return cudaErrorInvalidDevice;
  fake_cuda::current_device = d;
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = fake_cuda::current_device;
  return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (d < 0 || d >= fake_cuda::DeviceCount()) return cudaErrorInvalidDevice;
  std::memset(p, 0, sizeof(*p));
  std::strcpy(p->name, "cuBLASLt emulation (host memory)");
  p->multiProcessorCount = 132, p->major = 9, p->minor = 0;
  p->totalGlobalMem = size_t{1} << 34, p->sharedMemPerBlockOptin = 227 * 1024;
  return cudaSuccess;
}
// The compute capability cudaGetDeviceProperties reports (9.0).
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int d) {
  if (d < 0 || d >= fake_cuda::DeviceCount()) return cudaErrorInvalidDevice;
  if (attr != cudaDevAttrComputeCapabilityMajor && attr != cudaDevAttrComputeCapabilityMinor)
    return cudaErrorInvalidValue;
  *value = attr == cudaDevAttrComputeCapabilityMajor ? 9 : 0;
  return cudaSuccess;
}

inline cudaError_t cudaMalloc(void** p, size_t bytes) {
  using namespace fake_cuda;
  std::lock_guard<std::mutex> lock(mu);
  const size_t page = PageBytes(), rounded = (std::max<size_t>(bytes, 1) + page - 1) / page * page;
  if (!ReserveRegion() || rounded > region_bytes - region_used) return cudaErrorMemoryAllocation;
  ::cuemu::DeviceWork work;  // the region stays open (and its size fixed) for device work on other threads
  char* start = region + region_used;
  region_used += rounded;
  SetRegionOpen(true);  // the new pages too
  std::memset(start, 0xff, bytes);
  live_allocations[start] = rounded;
  *p = start;
  return cudaSuccess;
}
// The runtime's C++ overload, for any element type.
template <typename T>
inline cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
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

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  *s = new CUstream_st;
  (*s)->blocking = (flags & cudaStreamNonBlocking) == 0;
  std::lock_guard<std::mutex> lock(fake_cuda::mu);
  fake_cuda::streams.insert(*s);
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  {
    std::lock_guard<std::mutex> lock(fake_cuda::mu);
    fake_cuda::streams.erase(s);
  }
  delete s;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
  std::vector<CUstream_st*> all = {&fake_cuda::legacy_stream};
  {
    std::lock_guard<std::mutex> lock(fake_cuda::mu);
    all.insert(all.end(), fake_cuda::streams.begin(), fake_cuda::streams.end());
  }
  for (CUstream_st* st : all) fake_cuda::StreamDrainOne(st);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  fake_cuda::StreamDrain(s);
  return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  *e = new CUevent_st;
  (*e)->timing = (flags & cudaEventDisableTiming) == 0;
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
  if (e == nullptr) return cudaErrorInvalidValue;
  e->stream = fake_cuda::Resolve(s);
  {
    std::lock_guard<std::mutex> lock(e->stream->mu);
    e->ticket = e->stream->issued;
  }
  std::lock_guard<std::mutex> lock(fake_cuda::mu);
  fake_cuda::clock_ms += fake_cuda::kEventRecordMs;
  e->recorded_ms = fake_cuda::clock_ms;
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (e == nullptr) return cudaErrorInvalidValue;
  if (e->stream != nullptr && !fake_cuda::StreamTurnReached(e->stream, e->ticket + 1, std::chrono::minutes(10))) {
    std::fprintf(stderr, "fake CUDA runtime: an event's work has not finished in 10 minutes\n");
    std::abort();
  }
  return cudaSuccess;
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
  if (e == nullptr) return cudaErrorInvalidValue;
  if (e->stream == nullptr) return cudaSuccess;
  return fake_cuda::StreamTurnReached(e->stream, e->ticket + 1, std::chrono::milliseconds(0)) ? cudaSuccess
                                                                                            : cudaErrorNotReady;
}
// Later work on `s` waits for the event's work: here the host waits for it at once (stricter than a device,
// where only the stream waits; the event's work is all queued already, so it can finish).
inline cudaError_t cudaStreamWaitEvent(cudaStream_t /*s*/, cudaEvent_t e, unsigned int /*flags*/ = 0) {
  return cudaEventSynchronize(e);
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}

inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                                   cudaStream_t stream = nullptr) {
  fake_cuda::StreamDrain(stream);
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
                                     size_t height, cudaMemcpyKind kind, cudaStream_t stream = nullptr) {
  fake_cuda::StreamDrain(stream);
  if (dpitch < width || spitch < width) return cudaErrorInvalidValue;
  if (width == 0 || height == 0) return cudaSuccess;
  const cudaError_t e = fake_cuda::CheckDirection(dst, src, kind, "cudaMemcpy2DAsync");
  if (e != cudaSuccess) return e;
  ::cuemu::DeviceWork work;
  for (size_t r = 0; r < height; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t stream = nullptr) {
  fake_cuda::StreamDrain(stream);
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
