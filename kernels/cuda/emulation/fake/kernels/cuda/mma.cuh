// kernels/cuda/mma.cuh for the CPU emulation (cuemu.h; fake/ is first on the include path): the
// tensor-core and shared-memory instructions of the bf16 attention and grouped GEMM kernels (mma, ldmatrix as
// warp collectives; cp.async as per-thread queued copies), written from the PTX ISA's fragment tables (not
// from the kernels' comments), so a kernel that puts an element in the wrong register computes a wrong
// product here as on the device.
//
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 ("Matrix Fragments for mma.m16n8k16 with floating
//   point type"; g = laneid >> 2 "groupID", c = laneid % 4 "threadID_in_group"; two bf16 per 32-bit
//   register, the lower-indexed element in the low half):
//     A (16x16) a_i, i in 0..7 (register i / 2): row g + 8 for i in {2, 3, 6, 7}, else g;
//                                                 col 2c + (i & 1) + 8 for i >= 4
//     B (16x8)  b_i, i in 0..3 (register i / 2): row 2c + (i & 1) + 8 for i >= 2; col g
//     C, D (16x8, f32) c_i, i in 0..3:           row g + 8 for i >= 2; col 2c + (i & 1)
//   ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lanes 8m..8m+7 hold the addresses of rows 0..7 of
//   matrix m (16 bytes each, 16-byte aligned); without .trans lane l receives, in register m, elements
//   (row l / 4, cols 2(l % 4), 2(l % 4) + 1) of matrix m; .trans delivers the transposed matrix, i.e.
//   stored elements (rows 2(l % 4), 2(l % 4) + 1; col l / 4).
//   cp.async.cg.shared.global [dst], [src], 16, src-size: copies src-size (0 or 16 here) bytes and fills
//   the rest of the 16 with zeros, both addresses 16-byte aligned; completes only for the issuing thread, at
//   its cp.async.wait_group N once at most N newer committed groups are pending (cuemu::AsyncWait performs
//   the copies then, not before).
//
// The products are exact in fp32 (8-bit significands); the 16 of an output element are summed in k order and
// then added to the accumulator: the device's order and rounding within one mma differ in the last bits.
#ifndef LMFORGE_KERNELS_CUDA_EMULATION_FAKE_KERNELS_CUDA_MMA_CUH_
#define LMFORGE_KERNELS_CUDA_EMULATION_FAKE_KERNELS_CUDA_MMA_CUH_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/device_util.cuh"

namespace lmf::kernels::cuda {
namespace mma_emulation {

// Where one element of a fragment lives: lane, 32-bit register, half (0 low, 1 high).
struct Slot {
  uint8_t lane, reg, half;
};

// The PTX ISA tables above, as functions of (lane, element index).
inline void AElement(int lane, int i, int& row, int& col) {
  const int g = lane >> 2, c = lane & 3;
  row = g + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0);
  col = 2 * c + (i & 1) + (i >= 4 ? 8 : 0);
}
inline void BElement(int lane, int i, int& row, int& col) {
  const int g = lane >> 2, c = lane & 3;
  row = 2 * c + (i & 1) + (i >= 2 ? 8 : 0);
  col = g;
}
inline void CElement(int lane, int i, int& row, int& col) {
  const int g = lane >> 2, c = lane & 3;
  row = g + (i >= 2 ? 8 : 0);
  col = 2 * c + (i & 1);
}

// The tables inverted (matrix element -> slot), built once; aborts unless every element of A and B is held
// by exactly one (lane, element), i.e. unless the tables as written are a layout.
struct Tables {
  Slot a[16][16], b[16][8];
  Tables() {
    int a_seen[16][16] = {}, b_seen[16][8] = {};
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 8; ++i) {
        int r, c;
        AElement(lane, i, r, c);
        a[r][c] = Slot{static_cast<uint8_t>(lane), static_cast<uint8_t>(i / 2), static_cast<uint8_t>(i & 1)};
        ++a_seen[r][c];
      }
      for (int i = 0; i < 4; ++i) {
        int r, c;
        BElement(lane, i, r, c);
        b[r][c] =
            Slot{static_cast<uint8_t>(lane), static_cast<uint8_t>(4 + i / 2), static_cast<uint8_t>(i & 1)};
        ++b_seen[r][c];
      }
    }
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c)
        if (a_seen[r][c] != 1 || (c < 8 && b_seen[r][c] != 1)) {
          std::fprintf(stderr, "mma emulation: fragment tables do not cover the tiles once\n");
          std::abort();
        }
  }
};
inline const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

inline float Bf16Half(uint32_t reg, int half) {
  const uint32_t bits = (half ? reg >> 16 : reg & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace mma_emulation

// d += A B: every lane posts its A registers (words 0..3) and B registers (words 4, 5); each then computes
// its own four C elements from the posted tiles.
inline void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  using namespace mma_emulation;
  const Tables& t = GetTables();
  const int lane = threadIdx.x & 31;
  uint32_t* x;
  {
    ::cuemu::Unwatched unwatched;  // registers on the device
    x = ::cuemu::WarpExchange();
    uint32_t* mine = x + lane * ::cuemu::kExchangeWords;
    for (int i = 0; i < 4; ++i) mine[i] = a[i];
    mine[4] = b0, mine[5] = b1;
  }
  ::cuemu::WarpBarrier();
  ::cuemu::Unwatched unwatched;
  auto at = [&](const Slot& s) { return Bf16Half(x[s.lane * ::cuemu::kExchangeWords + s.reg], s.half); };
  for (int i = 0; i < 4; ++i) {
    int row, col;
    CElement(lane, i, row, col);
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) sum += at(t.a[row][k]) * at(t.b[k][col]);
    d[i] += sum;
  }
}

namespace mma_emulation {

inline void CheckAligned(const char* what, const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % 16 == 0) return;
  std::fprintf(stderr, "%s: address %p is not 16-byte aligned (block %u, thread %u)\n", what, p, blockIdx.x,
               threadIdx.x);
  std::abort();
}

// ldmatrix .x4 (.trans when `trans`): every lane posts its row address (aborting if it is not 16-byte
// aligned, a misaligned-address fault on the device) and gathers its elements from the four matrices' rows.
inline void LdMatrixX4(uint32_t (&r)[4], const bf16* p, bool trans) {
  const int lane = threadIdx.x & 31;
  CheckAligned("ldmatrix row", p);
  uint32_t* x;
  {
    ::cuemu::Unwatched unwatched;  // the row addresses are registers on the device
    x = ::cuemu::WarpExchange();
    std::memcpy(x + lane * ::cuemu::kExchangeWords, &p, sizeof(p));
  }
  ::cuemu::WarpBarrier();
  for (int m = 0; m < 4; ++m) {
    uint16_t e[2];
    for (int h = 0; h < 2; ++h) {
      // .trans: stored row 2(lane % 4) + h of matrix m, column lane / 4; else row lane / 4, column
      // 2(lane % 4) + h.
      const int row_index = trans ? 2 * (lane & 3) + h : lane >> 2,
                col = trans ? lane >> 2 : 2 * (lane & 3) + h;
      const bf16* row;
      {
        ::cuemu::Unwatched unwatched;
        std::memcpy(&row, x + (8 * m + row_index) * ::cuemu::kExchangeWords, sizeof(row));
      }
      std::memcpy(&e[h], row + col, 2);  // shared memory: a read of this lane
    }
    r[m] = static_cast<uint32_t>(e[0]) | (static_cast<uint32_t>(e[1]) << 16);
  }
}

}  // namespace mma_emulation

inline void LdMatrixX4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const bf16* p) {
  uint32_t r[4];
  mma_emulation::LdMatrixX4(r, p, false);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
inline void LdMatrixX4Trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const bf16* p) {
  uint32_t r[4];
  mma_emulation::LdMatrixX4(r, p, true);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}

// cp.async 16 bytes (zeros where !valid; src is then not read), queued until this thread's CpAsyncWait.
inline void CpAsync16(void* dst, const void* src, bool valid) {
  mma_emulation::CheckAligned("cp.async shared destination", dst);
  if (valid) mma_emulation::CheckAligned("cp.async global source", src);
  ::cuemu::AsyncCopy(dst, src, 16, valid ? 16 : 0);
}
inline void CpAsyncCommit() { ::cuemu::AsyncCommit(); }
template <int N>
inline void CpAsyncWait() {
  ::cuemu::AsyncWait(N);
}

}  // namespace lmf::kernels::cuda

#endif  // LMFORGE_KERNELS_CUDA_EMULATION_FAKE_KERNELS_CUDA_MMA_CUH_
