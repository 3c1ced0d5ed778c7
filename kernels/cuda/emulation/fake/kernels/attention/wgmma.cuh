// kernels/attention/wgmma.cuh for the CPU emulation (cuemu.h; fake/ is first on the include path): the
// Hopper warpgroup MMA (wgmma.mma_async m64n64k16 f32 += bf16 x bf16, A from shared memory or registers),
// its fence, commit and wait, the async-proxy fence and the shared-memory matrix descriptor, written from the
// PTX ISA ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions": "Matrix Descriptor
// Format", "Shared Memory Matrix Layout" with its swizzling modes, "Register Fragments" for m64nNk16) and
// cross-checked against CUTLASS CuTe (cute/arch/mma_sm90_desc.hpp: GmmaDescriptor's bit fields;
// cute/atom/mma_traits_sm90_gmma.hpp: the canonical K-major and MN-major layouts, make_gmma_desc's LBO/SBO,
// the D and A register layouts CLayout_64xN / ALayout_64x16). Where they agree:
//   descriptor: start address >> 4 bits 0-13, LBO >> 4 bits 16-29, SBO >> 4 bits 32-45, base offset bits
//     49-51, layout type bits 62-63 with 1 = 128B, 2 = 64B, 3 = 32B swizzle, 0 = none (ISA table; CuTe's
//     bit field and LayoutType enum). Base offset 0 is the only one modelled (the kernel's tiles are
//     1024-byte aligned, which is what base offset 0 asks for).
//   swizzle: on the byte address, 128B XORs bits 4-6 with bits 7-9, 64B bits 4-5 with 7-8, 32B bit 4 with
//     bit 7 (ISA swizzle figures: 16-byte chunks permuted within 1024/512/256-byte patterns; CuTe
//     Swizzle<3,4,3>, <2,4,3>, <1,4,3> applied to the smem pointer).
//   K-major, bf16 (T = 8 elements per 16 bytes), swizzle width W = 8/4/2 chunks (128B/64B/32B): element
//     (mn, k) of an instruction's M|N x 16 operand is at start + (mn % 8) * 16W + (mn / 8) * SBO + k * 2
//     before the XOR (CuTe ((8,m),(T,2)):((WT,SBO),(1,T)); the ISA's "8 rows of W x 16 bytes" pattern;
//     LBO unused); no swizzle: (mn % 8) * 16 + (mn / 8) * SBO + (k % 8) * 2 + (k / 8) * LBO (core matrices of
//     8 rows x 16 bytes).
//   MN-major (imm-trans 1): element (mn, k) at start + (mn % 8) * 2 + ((mn / 8) % W) * 16 + (mn / 8W) * LBO
//     + (k % 8) * 16W + (k / 8) * SBO (CuTe ((T,W,m),(8,k)):((1,T,LBO),(WT,SBO)): for the swizzled modes LBO
//     steps along M|N, SBO along K; the ISA's MN-major figures); no swizzle: (mn % 8) * 2 + (mn / 8) * SBO +
//     (k % 8) * 16 + (k / 8) * LBO.
//   D (f32): warp w of the warpgroup, g = lane / 4, c = lane % 4: d[i] = (row 16w + g + 8((i >> 1) & 1),
//     col 8(i >> 2) + 2c + (i & 1)) (ISA "WGMMA .m64nNk16 register fragment layout for accumulator matrix
//     D"; CuTe CLayout_64xN).
//   A in registers (bf16): a_i = element i of the four registers (low half first), (row 16w + g +
//     8((i >> 1) & 1), col 2c + (i & 1) + 8(i >> 2)) (ISA figure for matrix A of .m64nNk16; CuTe
//     ALayout_64x16; the same as mma.m16n8k16's A).
// Semantics modelled so that kernel bugs fail here:
//   - A wgmma issued without a wgmma.fence since the thread's previous commit_group aborts (the ISA asks for
//     the fence before the first wgmma and after any register access to its operands; requiring one per
//     batch is stricter only where a batch follows another with no register access between).
//   - The accumulators are undefined from the issue to the wait_group that retires the op: the issue
//     overwrites them with NaN, and the retire writes the result over whatever the thread put there, so a
//     missing wait (reading early) or a write before the wait (e.g. rescaling) gives a wrong result. Ops on
//     the same accumulator chain in issue order as on the device.
//   - The shared-memory operands (and A from shared memory) are read when the op retires, at the thread's
//     wait_group, not at the issue, so overwriting a tile (a cp.async issued, which poisons it) before every
//     thread waited reads NaN. Register A is taken at the issue (a warp exchange).
//   - Bytes landed by cp.async that the landing thread did not pass through fence.proxy.async read as NaN
//     (cuemu::AsyncProxyUnfenced), reported on stderr once per launch (the self-test's planted case prints
//     one such line in every run).
//   - Every operand address must lie in the launch's dynamic shared memory, whose shared window here starts
//     at address kWindowOffset (not 1024-aligned, so a kernel that does not align its swizzled tiles fails).
// Not modelled: that all four warps execute each instruction (.sync.aligned), the device's summation order
// (each product's 16 terms are summed in k order in fp32, then added), base offsets other than 0.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_FAKE_KERNELS_ATTENTION_WGMMA_CUH_
#define LMFORGE_KERNELS_CUDA_EMULATION_FAKE_KERNELS_ATTENTION_WGMMA_CUH_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "kernels/cuda/device_util.cuh"

namespace lmf::kernels::cuda {

enum class WgmmaSwizzle : uint32_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

constexpr uint64_t WgmmaDescriptor(uint32_t smem_address, uint32_t leading_byte_offset,
                                   uint32_t stride_byte_offset, WgmmaSwizzle swizzle) {
  return static_cast<uint64_t>((smem_address >> 4) & 0x3fffu) |
         (static_cast<uint64_t>((leading_byte_offset >> 4) & 0x3fffu) << 16) |
         (static_cast<uint64_t>((stride_byte_offset >> 4) & 0x3fffu) << 32) |
         (static_cast<uint64_t>(swizzle) << 62);
}
// The same hand-computed values as the real header asserts.
static_assert(WgmmaDescriptor(0x400, 16, 1024, WgmmaSwizzle::k128B) == 0x4000004000010040ull, "descriptor");
static_assert(WgmmaDescriptor(0x2800, 8192, 1024, WgmmaSwizzle::k128B) == 0x4000004002000280ull,
              "descriptor");

namespace wgmma_emulation {

// The emulated shared window: dynamic shared memory starts at this shared address (128-byte aligned like
// the device's dynamic shared memory, deliberately not 1024-byte aligned).
constexpr uint32_t kWindowOffset = 0x380;

struct Descriptor {
  uint32_t start, lbo, sbo;  // bytes
  WgmmaSwizzle swizzle;
  uint32_t base_offset;
};
inline Descriptor Decode(uint64_t d) {
  return Descriptor{static_cast<uint32_t>(d & 0x3fff) << 4, static_cast<uint32_t>((d >> 16) & 0x3fff) << 4,
                    static_cast<uint32_t>((d >> 32) & 0x3fff) << 4, static_cast<WgmmaSwizzle>(d >> 62),
                    static_cast<uint32_t>((d >> 49) & 7)};
}

// Chunks of 16 bytes per swizzle row (W above; 1 without swizzle).
inline uint32_t SwizzleWidth(WgmmaSwizzle s) {
  return s == WgmmaSwizzle::k128B ? 8 : s == WgmmaSwizzle::k64B ? 4 : s == WgmmaSwizzle::k32B ? 2 : 1;
}
inline uint32_t Swizzle(uint32_t address, WgmmaSwizzle s) {
  const uint32_t mask = SwizzleWidth(s) - 1;  // 7, 3, 1, 0
  return address ^ (((address >> 7) & mask) << 4);
}

// Shared (window) byte address of bf16 element (mn, k), k < 16, of an operand: K-major (imm-trans 0) or
// MN-major (imm-trans 1), as the header comment derives.
inline uint32_t ElementAddress(uint64_t desc, bool mn_major, int mn, int k) {
  const Descriptor d = Decode(desc);
  const uint32_t w = SwizzleWidth(d.swizzle);
  const uint32_t m = static_cast<uint32_t>(mn), kk = static_cast<uint32_t>(k);
  uint32_t offset;
  if (d.swizzle == WgmmaSwizzle::kNone) {
    offset = mn_major ? (m % 8) * 2 + (m / 8) * d.sbo + (kk % 8) * 16 + (kk / 8) * d.lbo
                      : (m % 8) * 16 + (m / 8) * d.sbo + (kk % 8) * 2 + (kk / 8) * d.lbo;
  } else {
    offset = mn_major ? (m % 8) * 2 + ((m / 8) % w) * 16 + (m / (8 * w)) * d.lbo + (kk % 8) * 16 * w +
                            (kk / 8) * d.sbo
                      : (m % 8) * 16 * w + (m / 8) * d.sbo + kk * 2;
  }
  return Swizzle(d.start + offset, d.swizzle);
}

inline char* WindowPointer(uint32_t address) {
  const size_t bytes = ::cuemu::DynamicSharedBytes();
  if (address < kWindowOffset || address + 2 > kWindowOffset + bytes) {
    std::fprintf(stderr,
                 "wgmma emulation: operand address 0x%x outside the dynamic shared memory [0x%x, 0x%zx) "
                 "(block %u, thread %u)\n",
                 address, kWindowOffset, kWindowOffset + bytes, blockIdx.x, threadIdx.x);
    std::abort();
  }
  return static_cast<char*>(::cuemu::DynamicShared()) + (address - kWindowOffset);
}

// An operand element as the async proxy reads it: NaN where a cp.async landed it and the landing thread has
// not fenced since.
inline float ReadOperand(uint32_t address) {
  const char* p = WindowPointer(address);
  if (::cuemu::AsyncProxyUnfenced(p)) {
    static unsigned long reported_launch = 0;  // once per launch; atomic: the emulator's, not the kernel's
    if (__atomic_exchange_n(&reported_launch, ::cuemu::LaunchSerial(), __ATOMIC_RELAXED) !=
        ::cuemu::LaunchSerial())
      std::fprintf(stderr,
                   "wgmma emulation: operand at 0x%x landed by cp.async without fence.proxy.async (block %u, "
                   "thread %u): read as NaN\n",
                   address, blockIdx.x, threadIdx.x);
    return NAN;
  }
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  const uint32_t f = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &f, 4);
  return x;
}

struct PendingMma {
  float* d;
  bool accumulate;
  bool a_from_registers;
  uint64_t a_desc;
  float a_rows[2][16];  // register A: this thread's rows g and g + 8 of its warp's 16
  uint64_t b_desc;
  bool trans_b;
};
struct ThreadState {
  bool fenced = false;
  std::vector<PendingMma> open;
  std::deque<std::vector<PendingMma>> committed;
  std::map<float*, std::vector<float>> in_flight;  // accumulator -> its value as of the issued ops
};
inline ThreadState& State() {
  std::shared_ptr<void>& ext = ::cuemu::ThreadExtension();
  if (!ext) ext = std::make_shared<ThreadState>();
  return *static_cast<ThreadState*>(ext.get());
}

inline void Issue(float (&d)[32], PendingMma op) {
  ThreadState& st = State();
  if (!st.fenced) {
    std::fprintf(stderr,
                 "wgmma emulation: wgmma.mma_async without a wgmma.fence since the last commit (block "
                 "%u, thread %u)\n",
                 blockIdx.x, threadIdx.x);
    std::abort();
  }
  if (st.in_flight.find(d) == st.in_flight.end()) st.in_flight[d] = std::vector<float>(d, d + 32);
  for (float& x : d) x = NAN;  // undefined until the wait
  st.open.push_back(op);
}

// D of the thread's 32 elements for one op, reading the shared operands now.
inline void Retire(ThreadState& st, const PendingMma& op) {
  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  std::vector<float>& acc = st.in_flight[op.d];
  for (int i = 0; i < 32; ++i) {
    const int half = (i >> 1) & 1, row = 16 * warp + g + 8 * half, col = 8 * (i >> 2) + 2 * c + (i & 1);
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) {
      const float a =
          op.a_from_registers ? op.a_rows[half][k] : ReadOperand(ElementAddress(op.a_desc, false, row, k));
      sum += a * ReadOperand(ElementAddress(op.b_desc, op.trans_b, col, k));
    }
    acc[i] = (op.accumulate ? acc[i] : 0.0f) + sum;
  }
}

inline bool Pending(const ThreadState& st, const float* d) {
  for (const PendingMma& op : st.open)
    if (op.d == d) return true;
  for (const auto& group : st.committed)
    for (const PendingMma& op : group)
      if (op.d == d) return true;
  return false;
}

}  // namespace wgmma_emulation

inline uint32_t SharedAddress(const void* p) {
  const intptr_t offset = static_cast<const char*>(p) - static_cast<char*>(::cuemu::DynamicShared());
  if (offset < 0 || static_cast<size_t>(offset) > ::cuemu::DynamicSharedBytes()) {
    std::fprintf(stderr, "wgmma emulation: SharedAddress of a pointer outside the dynamic shared memory\n");
    std::abort();
  }
  return wgmma_emulation::kWindowOffset + static_cast<uint32_t>(offset);
}

inline void WgmmaFence() { wgmma_emulation::State().fenced = true; }
inline void WgmmaCommit() {
  wgmma_emulation::ThreadState& st = wgmma_emulation::State();
  st.committed.push_back(std::move(st.open));
  st.open.clear();
  st.fenced = false;
}
template <int N>
inline void WgmmaWait() {
  using namespace wgmma_emulation;
  ThreadState& st = State();
  std::vector<float*> touched;
  while (st.committed.size() > static_cast<size_t>(N)) {
    std::vector<PendingMma> group = std::move(st.committed.front());
    st.committed.pop_front();
    for (const PendingMma& op : group) {
      Retire(st, op);
      touched.push_back(op.d);
    }
  }
  for (float* d : touched) {
    auto it = st.in_flight.find(d);
    if (it == st.in_flight.end() || Pending(st, d)) continue;
    std::memcpy(d, it->second.data(), 32 * sizeof(float));
    st.in_flight.erase(it);
  }
}
inline void FenceProxyAsyncShared() { ::cuemu::ProxyFenceAsync(); }

template <int N>
inline void WgmmaFenceOperands(float (&)[N]) {}
template <int N>
inline void WgmmaFenceOperands(uint32_t (&)[N]) {}

template <bool kTransB>
inline void WgmmaM64N64K16(float (&d)[32], uint64_t a_desc, uint64_t b_desc, bool accumulate) {
  wgmma_emulation::PendingMma op{};
  op.d = d, op.accumulate = accumulate, op.a_from_registers = false, op.a_desc = a_desc, op.b_desc = b_desc,
  op.trans_b = kTransB;
  wgmma_emulation::Issue(d, op);
}

// A from registers: the warp's lanes post their four registers; each thread takes its two rows.
template <bool kTransB>
inline void WgmmaM64N64K16(float (&d)[32], const uint32_t (&a)[4], uint64_t b_desc, bool accumulate) {
  const int lane = threadIdx.x & 31, g = lane >> 2;
  uint32_t* x;
  {
    ::cuemu::Unwatched unwatched;  // registers on the device
    x = ::cuemu::WarpExchange();
    for (int i = 0; i < 4; ++i) x[lane * ::cuemu::kExchangeWords + i] = a[i];
  }
  ::cuemu::WarpBarrier();
  ::cuemu::Unwatched unwatched;
  wgmma_emulation::PendingMma op{};
  op.d = d, op.accumulate = accumulate, op.a_from_registers = true, op.b_desc = b_desc, op.trans_b = kTransB;
  // a_i of lane l: row g(l) + 8((i >> 1) & 1), col 2c(l) + (i & 1) + 8(i >> 2); invert for rows g, g + 8.
  for (int half = 0; half < 2; ++half)
    for (int k = 0; k < 16; ++k) {
      const int holder = 4 * g + ((k & 7) >> 1), i = (k & 1) + 2 * half + 4 * (k >> 3);
      const uint32_t reg = x[holder * ::cuemu::kExchangeWords + i / 2];
      const uint32_t bits = (i & 1 ? reg >> 16 : reg & 0xffffu) << 16;
      std::memcpy(&op.a_rows[half][k], &bits, 4);
    }
  wgmma_emulation::Issue(d, op);
}

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_FAKE_KERNELS_ATTENTION_WGMMA_CUH_
