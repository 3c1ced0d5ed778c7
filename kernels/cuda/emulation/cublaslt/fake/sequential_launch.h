// Kernel launches for the cuBLASLt emulation (run.sh in this folder), for kernels without barriers: run.sh
// rewrites `k<<<grid, block, smem, stream>>>(args)` into `::seqlaunch::Launch(k, grid, block, smem,
// stream)(args)`, which runs every thread of every block to completion, one after another. That is exact for
// the kernels matmul_cuda.cc launches (column sums, element-wise GELU: grid-stride loops, no shared memory,
// no barriers); a kernel that reaches __syncthreads or a warp shuffle aborts, as it needs the fiber
// emulation of ../../cuemu.h instead (which this Bazel package cannot see: kernels/cuda/emulation exports no
// files). Not part of the Bazel build.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_SEQUENTIAL_LAUNCH_H_
#define LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_SEQUENTIAL_LAUNCH_H_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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

inline uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

namespace seqlaunch {

[[noreturn]] inline void Unsupported(const char* what) {
  std::fprintf(stderr, "sequential_launch.h: a kernel reached %s; it needs the fiber emulation (cuemu.h)\n",
               what);
  std::abort();
}

template <typename... P>
struct Launcher {
  void (*kernel)(P...);
  dim3 grid, block;
  template <typename... A>
  void operator()(A&&... args) {
    std::tuple<P...> params(std::forward<A>(args)...);
    gridDim = grid, blockDim = block;
    for (unsigned bz = 0; bz < grid.z; ++bz)
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx)
          for (unsigned tz = 0; tz < block.z; ++tz)
            for (unsigned ty = 0; ty < block.y; ++ty)
              for (unsigned tx = 0; tx < block.x; ++tx) {
                blockIdx.x = bx, blockIdx.y = by, blockIdx.z = bz;
                threadIdx.x = tx, threadIdx.y = ty, threadIdx.z = tz;
                std::apply(kernel, params);
              }
  }
};
template <typename... P>
Launcher<P...> Launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t = 0, void* = nullptr) {
  return Launcher<P...>{kernel, grid, block};
}

}  // namespace seqlaunch

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads() ::seqlaunch::Unsupported("__syncthreads")

inline float __expf(float x) { return std::exp(x); }
using std::isfinite;
inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
template <typename T>
inline T __shfl_xor_sync(unsigned, T, int) {
  ::seqlaunch::Unsupported("a warp shuffle");
}

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_CUBLASLT_FAKE_SEQUENTIAL_LAUNCH_H_
