// The tensor-core and shared-memory instructions of the bf16 kernels (mma.sync, ldmatrix, cp.async), as inline
// PTX: kernels/attention's FlashAttention-2 kernels and kernels/grouped_matmul's tensor-core grouped GEMM. They
// live in this header so that the CPU emulation (kernels/cuda/emulation/fake/kernels/cuda/mma.cuh, first on
// its include path) can replace them with warp collectives built from the PTX ISA's fragment tables and run
// the rest of the kernels unchanged. Fragment layouts: see the top of attention_cuda.cu and the fake.
#ifndef LMFORGE_KERNELS_CUDA_MMA_CUH_
#define LMFORGE_KERNELS_CUDA_MMA_CUH_

#include <cstdint>

#include "kernels/cuda/device_util.cuh"

namespace lmf::kernels::cuda {

// d += a b for one 16x16 (row-major A) by 16x8 (column-major B) bf16 tile product, fp32 accumulation.
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices from shared memory, transposed (ldmatrix .trans): lanes 8i..8i+7 give the row
// addresses of matrix i; thread t receives elements (rows 2(t%4), 2(t%4)+1; column t/4) of each, which is
// the B fragment of mma.m16n8k16 for a tile stored k-major (rows = k).
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                                const bf16* p) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// Four 8x8 bf16 matrices from shared memory (ldmatrix, not transposed): lanes 8i..8i+7 give the row
// addresses of matrix i; thread t receives elements (row t/4; columns 2(t%4), 2(t%4)+1) of each: the A
// fragment of mma.m16n8k16 (matrices: rows +0, +8 at columns +0, then rows +0, +8 at columns +8), or the B
// fragments of a tile stored n-major (rows = n; matrices at k +0 and +8).
__device__ __forceinline__ void LdMatrixX4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                           const bf16* p) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// cp.async: 16 bytes global -> shared without passing through registers, completing asynchronously; where
// !valid it writes 16 zero bytes and reads nothing (src-size 0). Both addresses 16-byte aligned. A thread's
// copies become visible to itself at CpAsyncWait<N>() once at most its N newest committed groups are
// pending, and to the block after a __syncthreads that follows that wait.
__device__ __forceinline__ void CpAsync16(void* dst, const void* src, bool valid) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
// Closes the thread's group of copies issued since the previous commit.
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most the N newest committed groups of this thread are pending.
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_CUDA_MMA_CUH_
