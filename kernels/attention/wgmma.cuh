// Hopper warpgroup matrix instructions (wgmma, sm_90a) for the bf16 attention forward variant kWgmma
// (attention_wgmma_cuda.cu), as inline PTX: the shared-memory matrix descriptor, wgmma.mma_async
// m64n64k16 f32 += bf16 x bf16 with A from shared memory or from registers, and the fences and group
// waits that order it. Like mma.cuh, this header is replaced in the CPU emulation by
// kernels/cuda/emulation/fake/kernels/attention/wgmma.cuh (written from the PTX ISA, with the cross-checks
// it names), so the kernel around it runs unchanged on fibers. On anything but sm_90a (the sm_80 pass of
// the build) every instruction here compiles to a trap: the launcher never runs the kernel there.
//
// Rules used (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"; the bit
// fields also as in CUTLASS cute/arch/mma_sm90_desc.hpp, the canonical layouts as in
// cute/atom/mma_traits_sm90_gmma.hpp, make_gmma_desc):
// - A warpgroup is 4 consecutive warps starting at a warp index divisible by 4; all 128 threads execute
//   every wgmma instruction (.sync.aligned). Warp w of the warpgroup owns rows 16w..16w+15 of the 64-row
//   A and D.
// - D (64 x N, f32) in each thread: d[i], i < N/2, is row 16w + g + 8((i >> 1) & 1), column
//   8(i >> 2) + 2c + (i & 1), with g = lane / 4 and c = lane % 4 (the mma.m16n8 C layout, one 8-column
//   block after another).
// - A from registers (64 x 16 bf16, four 32-bit registers, two bf16 each, the lower column in the low
//   half): a_i, i < 8, is row 16w + g + 8((i >> 1) & 1), column 2c + (i & 1) + 8(i >> 2) (the mma.m16n8k16
//   A layout), so two adjacent 8-column blocks of D, packed to bf16, are the A fragment of the next product.
// - Matrix descriptor (64 bits): start address >> 4 in bits 0-13, leading-dimension byte offset >> 4 in
//   bits 16-29, stride-dimension byte offset >> 4 in bits 32-45, base offset in bits 49-51 (0: the
//   swizzle pattern repeats at 1024-byte aligned addresses for 128B), swizzle mode in bits 62-63
//   (0 none, 1 128B, 2 64B, 3 32B).
// - 128B swizzle: the hardware XORs address bits 4-6 (the 16-byte chunk within a 128-byte row) with bits
//   7-9 (the row within a 1024-byte, 8-row pattern); tiles start 1024-byte aligned.
// - K-major operand (A of M x K, or B of N x K with K contiguous; imm-trans 0), 128B swizzle, bf16: rows of
//   64 elements (128 bytes), rows r and r + 8 SBO bytes apart (8-row groups; 1024 for dense rows); the
//   16 k of one instruction are the first 32 bytes of each row at the start address, so k-step s of a
//   64-wide row block starts 32 s bytes further (the XOR then moves the chunks); LBO is unused (1 by
//   convention).
// - MN-major operand (B of K x N with N contiguous; imm-trans-b 1), 128B swizzle, bf16: 64 n per 128-byte
//   row, one row per k; k rows 0-7 at 128-byte steps, k rows 8-15 SBO bytes further (1024 for dense rows);
//   the next 64 n (N > 64) LBO bytes further. k-step s of a K x 64 block starts 16 rows = 2048 bytes further.
// - Ordering: wgmma.fence before the first wgmma of a batch whenever its accumulator or A registers were
//   accessed by other instructions since the last one; the results (and the A registers, the shared-memory
//   operands) belong to the hardware from the issue until a wgmma.wait_group retires the commit group:
//   reading or writing the accumulators, or overwriting the operands, before then is undefined. Shared
//   memory written through the generic proxy (ordinary stores; cp.async.ca/cg, which is not a bulk copy)
//   must be made visible to the async proxy that wgmma reads through: fence.proxy.async.shared::cta in
//   each writing thread after its writes landed, then a barrier, then the wgmma.
#ifndef LMFORGE_KERNELS_ATTENTION_WGMMA_CUH_
#define LMFORGE_KERNELS_ATTENTION_WGMMA_CUH_

#include <cstdint>

#include "kernels/cuda/device_util.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LMF_WGMMA_ENABLED 1
#else
#define LMF_WGMMA_ENABLED 0
#endif

namespace lmf::kernels::cuda {

enum class WgmmaSwizzle : uint32_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

// The 64-bit shared-memory matrix descriptor from byte values (each a multiple of 16; the shared address is
// what __cvta_generic_to_shared gives, below 256 KiB).
__host__ __device__ constexpr uint64_t WgmmaDescriptor(uint32_t smem_address, uint32_t leading_byte_offset,
                                                       uint32_t stride_byte_offset, WgmmaSwizzle swizzle) {
  return static_cast<uint64_t>((smem_address >> 4) & 0x3fffu) |
         (static_cast<uint64_t>((leading_byte_offset >> 4) & 0x3fffu) << 16) |
         (static_cast<uint64_t>((stride_byte_offset >> 4) & 0x3fffu) << 32) |
         (static_cast<uint64_t>(swizzle) << 62);
}
// Hand-computed: a K-major 128B-swizzled tile at 0x400 (SBO 1024, LBO 16) and an MN-major one at 0x2800
// (LBO 8192, SBO 1024). The emulation's fake asserts the same values.
static_assert(WgmmaDescriptor(0x400, 16, 1024, WgmmaSwizzle::k128B) == 0x4000004000010040ull, "descriptor");
static_assert(WgmmaDescriptor(0x2800, 8192, 1024, WgmmaSwizzle::k128B) == 0x4000004002000280ull,
              "descriptor");

// The shared-window address of a pointer to shared memory.
__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#if LMF_WGMMA_ENABLED
#define LMF_WGMMA_ASM(...) asm volatile(__VA_ARGS__)
#else
#define LMF_WGMMA_ASM(...) __trap()
#endif

// Orders this thread's earlier register accesses before the next wgmma (wgmma.fence.sync.aligned).
__device__ __forceinline__ void WgmmaFence() { LMF_WGMMA_ASM("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes the thread's batch of wgmma issued since the previous commit into one wgmma-group.
__device__ __forceinline__ void WgmmaCommit() {
  LMF_WGMMA_ASM("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most the N newest committed wgmma-groups of this thread are pending.
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  LMF_WGMMA_ASM("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Makes this thread's generic-proxy shared-memory writes (stores, landed cp.async) visible to the async
// proxy (wgmma operand reads) once a following barrier has been passed.
__device__ __forceinline__ void FenceProxyAsyncShared() {
  LMF_WGMMA_ASM("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Compiler-only fences on registers the wgmma reads or writes (CUTLASS's warpgroup_fence_operand): the
// asm statements below do not name the accumulators, so without these the compiler could move their
// ordinary reads and writes across WgmmaFence / WgmmaWait.
template <int N>
__device__ __forceinline__ void WgmmaFenceOperands(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void WgmmaFenceOperands(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

#define LMF_WGMMA_D32                                                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, " \
  "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define LMF_WGMMA_D32_OPERANDS(d)                                                                           \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),           \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),            \
      "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),            \
      "+f"(d[30]), "+f"(d[31])

// d (64 x 64 per warpgroup) = A (64 x 16, K-major, from a_desc) B (16 x 64, from b_desc; kTransB: MN-major)
// + (accumulate ? d : 0), issued asynchronously.
template <bool kTransB>
__device__ __forceinline__ void WgmmaM64N64K16(float (&d)[32], uint64_t a_desc, uint64_t b_desc,
                                               bool accumulate) {
  LMF_WGMMA_ASM(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " LMF_WGMMA_D32
      ", %32, %33, p, 1, 1, 0, %35;\n}\n"
      : LMF_WGMMA_D32_OPERANDS(d)
      : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)), "n"(kTransB ? 1 : 0));
}

// The same with A from registers (the layout at the top of this file).
template <bool kTransB>
__device__ __forceinline__ void WgmmaM64N64K16(float (&d)[32], const uint32_t (&a)[4], uint64_t b_desc,
                                               bool accumulate) {
  LMF_WGMMA_ASM(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " LMF_WGMMA_D32
      ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : LMF_WGMMA_D32_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(static_cast<int>(accumulate)),
        "n"(kTransB ? 1 : 0));
}

#undef LMF_WGMMA_D32
#undef LMF_WGMMA_D32_OPERANDS
#undef LMF_WGMMA_ASM

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_ATTENTION_WGMMA_CUH_
