// CPU emulation of the CUDA execution model, for running the real CUDA kernels of kernels/ on a machine
// without a GPU (see run.sh): every CUDA thread is a fiber (ucontext), the blocks of a grid run one after
// another, and __syncthreads / warp shuffles are barriers among the block's (warp's) live threads, so
// reductions, early exits and aliasing behave as on the device. Kernel launches `k<<<g, b, smem, s>>>(...)`
// are rewritten by run.sh into `::cuemu::Launch(k, g, b, smem, s)(...)`. Math is the host's (__expf is
// std::exp), so results match the CPU kernels closely but not the GPU's last bits. Not part of the build.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_CUEMU_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_CUEMU_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
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

extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

namespace cuemu {

// Runs body once per thread of every block of the grid (blocks in order, threads as fibers).
void RunGrid(dim3 grid, dim3 block, const std::function<void()>& body);
void SyncThreads();  // barrier of the block's live threads
void WarpBarrier();  // barrier of the warp's live threads
float* WarpSlots();  // 32 exchange slots of the calling thread's warp

template <typename... P>
struct Launcher {
  void (*kernel)(P...);
  dim3 grid, block;
  template <typename... A>
  void operator()(A&&... args) {
    std::tuple<P...> params(std::forward<A>(args)...);
    RunGrid(grid, block, [&] { std::apply(kernel, params); });
  }
};
template <typename... P>
Launcher<P...> Launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t = 0, void* = nullptr) {
  return Launcher<P...>{kernel, grid, block};
}

}  // namespace cuemu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() ::cuemu::SyncThreads()

inline float __expf(float x) { return std::exp(x); }
using std::isfinite;
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
  const unsigned long long old = *p;
  if (v < old) *p = v;
  return old;
}

template <typename T>
inline T __shfl_xor_sync(unsigned /*mask*/, T v, int lane_mask) {
  static_assert(sizeof(T) == 4, "4-byte shuffles");
  float* slots = ::cuemu::WarpSlots();
  const int lane = threadIdx.x & 31;
  std::memcpy(&slots[lane], &v, 4);
  ::cuemu::WarpBarrier();
  T r;
  std::memcpy(&r, &slots[lane ^ lane_mask], 4);
  ::cuemu::WarpBarrier();
  return r;
}

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_CUEMU_H_
