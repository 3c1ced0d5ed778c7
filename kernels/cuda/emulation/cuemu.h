// CPU emulation of the CUDA execution model, for running the real CUDA kernels of kernels/ on a machine
// without a GPU (emulation.bzl): every CUDA thread is a fiber (ucontext), the blocks of a grid run one after
// another, and __syncthreads / warp shuffles are barriers among the block's (warp's) live threads, so
// reductions, early exits and aliasing behave as on the device. Between two __syncthreads one warp at a time
// runs as far as it can (through its warp collectives) before the next starts, warps and lanes in reverse
// order in every other block, so a read of another warp's shared-memory write (or an overwrite of what
// another warp still reads) without a __syncthreads in between sees the wrong value in one of the two. Kernel
// launches `k<<<g, b, smem, s>>>(...)` become `::cuemu::Launch(k, g, b, smem, s)(...)` (common.sh),
// and `extern __shared__ T name[];` into a pointer to the block's dynamic shared memory; static `__shared__`
// arrays into the block's own copy of them (BlockShared), poisoned per block. Warp-level instructions written
// as inline PTX have fakes of their own (fake/kernels/cuda/mma.cuh). Math is the host's (__expf is
// std::exp), so results match the CPU kernels closely but not the GPU's last bits. Built with ThreadSanitizer
// (RACECHECK=1 in common.sh), it reports any two conflicting accesses that no __syncthreads or __syncwarp
// orders, within a block or between blocks of a grid (cuemu.cc). Not part of the build.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_CUEMU_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_CUEMU_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

namespace cuemu {

// Runs body once per thread of every block of the grid (blocks in order, threads as fibers), with
// `dynamic_shared_bytes` of dynamic shared memory per block (DynamicShared(), poisoned with 0xff per block).
void RunGrid(dim3 grid, dim3 block, size_t dynamic_shared_bytes, const std::function<void()>& body);
void SyncThreads();  // barrier of the block's live threads; orders their memory accesses (racecheck)
// Barrier of the warp's live threads for a warp collective (shuffle, mma, ldmatrix): it orders the exchange,
// not memory -- on the device shfl.sync and mma.sync are no memory barriers, so a lane's shared-memory write
// is ordered before another lane's read only by __syncwarp or __syncthreads (the racecheck build holds
// kernels to that).
void WarpBarrier();
void WarpSync();  // __syncwarp: a barrier of the warp's live threads that orders their memory accesses

// Emulator work that the racecheck build must not count as the kernel's memory accesses (ThreadSanitizer
// ignores the calling thread's accesses while one exists): its bookkeeping, and the exchange areas through
// which the fakes of warp collectives pass what are registers on the device. No effect in other builds.
struct Unwatched {
  Unwatched();
  ~Unwatched();
  Unwatched(const Unwatched&) = delete;
  Unwatched& operator=(const Unwatched&) = delete;
};
void* DynamicShared();        // the block's `extern __shared__` array (common.sh rewrites the declarations)
size_t DynamicSharedBytes();  // its size in bytes (the launch's dynamic shared memory)
// A static `__shared__` array of the running block: storage of the array's size per block slot (cuemu.cc;
// one slot outside racecheck builds), filled with 0xff the first time a thread of the block asks for it, so
// no block sees another's data. `key` is a static array of the type wanted, used only for its address and
// type: common.sh rewrites `__shared__ T a[n];` into `__shared__ T a_cuemu_key[n]; auto& a =
// ::cuemu::BlockShared(a_cuemu_key);`.
void* BlockSharedStorage(const void* key, size_t bytes);  // 128-byte aligned
template <typename T, size_t N>
using Array = T[N];
template <typename T, size_t N>
Array<T, N>& BlockShared(Array<T, N>& key) {
  return *static_cast<Array<T, N>*>(BlockSharedStorage(key, sizeof(key)));
}

// Exchange area of the calling thread's warp for one warp collective: 32 rows (one per lane) of
// kExchangeWords words. A lane writes its own row, calls WarpBarrier(), then reads any row. Successive
// collectives alternate between two areas, so one barrier per collective suffices: a lane can write an area
// again only after the next collective's barrier, which every lane reaches after its reads of this one.
constexpr int kExchangeWords = 8;
uint32_t* WarpExchange();

// cp.async (fake/kernels/cuda/mma.cuh): the calling thread's copies of `bytes` bytes (the first
// `src_bytes` from src, the rest zeros) are queued in its open group; AsyncCommit closes the group, and
// AsyncWait(n) performs the thread's committed groups, oldest first, until at most the newest n are pending.
// A copy happens only then (copies not yet committed wait for a later commit); from the issue until then its
// destination holds the 0xff poison (NaN), so a read before the wait (a missing wait, or a missing barrier
// between the wait and another thread's read) and a read of the old contents after another thread issued
// the copy (a missing barrier before the issue) both see NaN. Pending copies die with the block.
void AsyncCopy(void* dst, const void* src, size_t bytes, size_t src_bytes);
void AsyncCommit();
void AsyncWait(int pending);

// The generic/async proxy split of shared memory (fence.proxy.async; fake/kernels/attention/wgmma.cuh): every
// 16 bytes of dynamic shared memory that a cp.async landed in (AsyncWait) stay "unfenced" until the thread
// that waited for the copy runs ProxyFenceAsync; the async proxy (wgmma's operand reads) sees unfenced bytes
// as undefined. Ordinary stores are not tracked.
void ProxyFenceAsync();
bool AsyncProxyUnfenced(const void* p);

// State of the calling thread that a fake header keeps across calls (wgmma's pending groups): empty at the
// start of every block, dropped with the block.
std::shared_ptr<void>& ThreadExtension();
unsigned long LaunchSerial();  // kernel launches run so far (fakes report a hazard once per launch)

// The device's compute capability as cudaDeviceGetAttribute reports it (default 9.0, an H100/H200).
void SetComputeCapability(int major, int minor);
int ComputeCapability();  // 10 * major + minor

// The launch checks of the CUDA runtime that the kernels' host code relies on: at most 1024 threads per
// block, gridDim.y and .z at most 65535, dynamic shared memory at most 48 KiB unless the kernel's
// cudaFuncAttributeMaxDynamicSharedMemorySize was raised (to at most 227 KiB, an H100's limit). A launch that
// breaks one does not run and sets the error that cudaGetLastError returns (as on the device).
void SetMaxDynamicShared(const void* kernel, int bytes);
bool LaunchAllowed(const void* kernel, dim3 grid, dim3 block, size_t dynamic_shared_bytes);
int TakeLaunchError();  // the pending launch error (0: none), cleared

// The device-memory fence of the GPU tests' fake runtime (cublaslt/fake/cuda_runtime.h): its device
// allocations are closed to the host except while the emulated device works -- a grid, a fake copy or
// memset, the fake cuBLASLt or CUB -- so host code that dereferences a device pointer faults here as it
// would on a GPU. `hook(true)` opens them, `hook(false)` closes them; DeviceWork scopes nest (the outermost
// opens and closes). Without a hook (the kernels' own emulation check, on host memory) nothing happens.
// Device work is one thread's at a time (a DeviceWork holds a process-wide lock): the fake NCCL's threads
// move device memory beside the host thread's kernels.
void SetDeviceAccessHook(void (*hook)(bool open));
// Called with a launch's stream before the grid runs: the fake runtime waits there for the work queued on
// that stream off the calling thread (the fake NCCL's ops), keeping stream order.
void SetStreamOrderHook(void (*hook)(void* stream));
void WaitForStream(void* stream);
struct DeviceWork {
  DeviceWork();
  ~DeviceWork();
  DeviceWork(const DeviceWork&) = delete;
  DeviceWork& operator=(const DeviceWork&) = delete;
};
// With a hook set: whether p lies in device memory (the hook's allocations), through `is_device`.
void SetDevicePointerTest(bool (*is_device)(const void* p));
// Aborts, naming the parameter, when a launch passes a non-null pointer that is not device memory while
// a device pointer test is set (a host pointer a kernel would fault on).
void CheckLaunchPointer(const void* p, int parameter);

template <typename T>
inline void CheckParameter(const T& value, int parameter) {
  if constexpr (std::is_pointer<T>::value) CheckLaunchPointer(value, parameter);
}
template <typename Tuple, size_t... I>
inline void CheckPointers(const Tuple& params, std::index_sequence<I...>) {
  (CheckParameter(std::get<I>(params), static_cast<int>(I)), ...);
}

template <typename... P>
struct Launcher {
  void (*kernel)(P...);
  dim3 grid, block;
  size_t dynamic_shared_bytes;
  void* stream;
  template <typename... A>
  void operator()(A&&... args) {
    WaitForStream(stream);
    if (!LaunchAllowed(reinterpret_cast<const void*>(kernel), grid, block, dynamic_shared_bytes)) return;
    std::tuple<P...> params(std::forward<A>(args)...);
    CheckPointers(params, std::index_sequence_for<P...>());
    RunGrid(grid, block, dynamic_shared_bytes, [&] { std::apply(kernel, params); });
  }
};
template <typename... P>
Launcher<P...> Launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t dynamic_shared_bytes = 0,
                      void* stream = nullptr) {
  return Launcher<P...>{kernel, grid, block, dynamic_shared_bytes, stream};
}

// After a warp collective's barrier (__shfl_*_sync): aborts, naming the kernel's block and lane, when `mask`
// omits the calling lane or `source_lane`, or names a lane that had exited (or does not exist) when the
// collective's barrier released -- undefined behaviour on the device that the barrier of live lanes here
// would otherwise hide.
void CheckWarpMask(unsigned mask, int source_lane, const char* what);

// A 4-byte value of every lane of the warp: lane l's `v` is row l's first word of the returned area.
template <typename T>
inline const uint32_t* ExchangeWord(T v) {
  static_assert(sizeof(T) == 4, "4-byte shuffles");
  uint32_t* x;
  {
    Unwatched unwatched;
    x = WarpExchange();
    std::memcpy(&x[(threadIdx.x & 31) * kExchangeWords], &v, 4);
  }
  WarpBarrier();
  return x;
}
template <typename T>
inline T Word(const uint32_t* x, int lane) {
  Unwatched unwatched;
  T r;
  std::memcpy(&r, &x[(lane & 31) * kExchangeWords], 4);
  return r;
}

}  // namespace cuemu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __syncthreads() ::cuemu::SyncThreads()

inline float __expf(float x) { return std::exp(x); }
inline float __log2f(float x) { return std::log2(x); }
using std::isfinite;
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
  unsigned long long old = __atomic_load_n(p, __ATOMIC_RELAXED);  // an atomic for the racecheck build too
  while (v < old && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::cuemu::WarpSync();
  ::cuemu::CheckWarpMask(mask, static_cast<int>(threadIdx.x & 31), "__syncwarp");
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  const uint32_t* x = ::cuemu::ExchangeWord(v);
  const int source = static_cast<int>((threadIdx.x & 31) ^ lane_mask);
  ::cuemu::CheckWarpMask(mask, source, "__shfl_xor_sync");
  return ::cuemu::Word<T>(x, source);
}
template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src_lane) {
  const uint32_t* x = ::cuemu::ExchangeWord(v);
  ::cuemu::CheckWarpMask(mask, src_lane & 31, "__shfl_sync");
  return ::cuemu::Word<T>(x, src_lane);
}

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_CUEMU_H_
